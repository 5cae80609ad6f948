//! The sampler against distributions computed here in f64 from llama.cpp's definitions of each
//! stage (softmax, the set each filter keeps, the renormalized probabilities), then against
//! the frequencies of many seeded draws (a chi-square bound at the 0.999 quantile, and no draw
//! outside the kept set); penalties and bias to exact values; greedy ties; seeds; every
//! parameter error; and the large-vocabulary fast paths against brute force.

use std::collections::HashMap;
use tessera_llm::sampling::{Sampler, SamplingError, SamplingParams};

/// Eight logits, not in id order, no two equal.
const LOGITS: [f32; 8] = [0.5, 2.0, -1.0, 1.5, 0.0, -3.0, 1.0, -0.5];

/// Every stage off: the draw is the plain softmax at temperature 1.
fn plain() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        typical_p: 1.0,
        seed: Some(1234),
        ..SamplingParams::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The reference: llama.cpp's chain in f64, written from the definitions.
// ---------------------------------------------------------------------------------------------

/// A threshold closer than this to the cumulative sum that decides a top-p or typical-p cut,
/// or to a logit at a min-p bound, makes a case ill-posed (the sampler's f32 and the
/// reference's f64 could disagree on the set); the reference refuses such cases. The
/// sampler's sums carry f32 probabilities (relative error 6e-8), so 2e-6 is far outside
/// their error.
const MARGIN: f64 = 2e-6;

/// The number of leading entries of `probs` to keep: up to the first whose running sum passes
/// `p` (`>=` for top-p, `>` for typical-p); the sums on both sides of the cut must be clear of
/// `p` by MARGIN.
fn cut(probs: impl Iterator<Item = f64>, p: f64, inclusive: bool) -> Option<usize> {
    let mut cum = 0.0;
    let mut before = 0.0;
    for (i, q) in probs.enumerate() {
        before = cum;
        cum += q;
        if (inclusive && cum >= p) || (!inclusive && cum > p) {
            assert!(
                (cum - p).abs() > MARGIN && (p - before).abs() > MARGIN,
                "case on a boundary: the sums {before} and {cum} straddle {p} at entry {i}"
            );
            return Some(i + 1);
        }
    }
    let _ = before;
    None
}

fn softmax(ls: &[(u32, f64)], t: f64) -> Vec<f64> {
    let max = ls.iter().map(|c| c.1).fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = ls.iter().map(|c| ((c.1 - max) / t).exp()).collect();
    let s: f64 = w.iter().sum();
    w.iter().map(|x| x / s).collect()
}

/// Rank order: descending logit, the lower id first on a tie.
fn rank(ls: &mut [(u32, f64)]) {
    ls.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
}

/// The final distribution (id -> probability) of the chain for `logits` (already biased and
/// penalized).
fn reference(logits: &[f32], p: &SamplingParams) -> HashMap<u32, f64> {
    let mut c: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| (i as u32, f64::from(l)))
        .collect();
    // top-k
    if p.top_k > 0 && (p.top_k as usize) < c.len() {
        rank(&mut c);
        c.truncate(p.top_k as usize);
    }
    // typical-p: keep the tokens closest to the entropy until their mass exceeds p
    if p.typical_p < 1.0 {
        rank(&mut c);
        let probs = softmax(&c, 1.0);
        let h: f64 = probs.iter().map(|q| -q * q.ln()).sum();
        let mut order: Vec<usize> = (0..c.len()).collect();
        order.sort_by(|&a, &b| {
            let sa = (-probs[a].ln() - h).abs();
            let sb = (-probs[b].ln() - h).abs();
            sa.partial_cmp(&sb).unwrap().then(a.cmp(&b))
        });
        let keep = cut(order.iter().map(|&j| probs[j]), f64::from(p.typical_p), false)
            .unwrap_or(order.len());
        c = order[..keep].iter().map(|&j| c[j]).collect();
    }
    // top-p: the best tokens until their mass reaches p
    if p.top_p < 1.0 {
        rank(&mut c);
        let probs = softmax(&c, 1.0);
        let keep = cut(probs.into_iter(), f64::from(p.top_p), true).unwrap_or(c.len());
        c.truncate(keep);
    }
    // min-p: at least p times the most likely
    if p.min_p > 0.0 {
        let max = c.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let bound = max + f64::from(p.min_p).ln();
        for x in &c {
            assert!((x.1 - bound).abs() > MARGIN, "min-p case on a boundary");
        }
        c.retain(|x| x.1 >= bound);
    }
    let probs = softmax(&c, f64::from(p.temperature));
    c.iter().zip(probs).map(|(x, q)| (x.0, q)).collect()
}

/// The 0.999 quantile of the chi-square distribution for 1..=12 degrees of freedom.
const CHI2_999: [f64; 12] =
    [10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26, 32.91];

/// Checks the sampler's final candidates against the reference (same set, probabilities within
/// 2e-6), then draws `n` tokens and checks their frequencies: nothing outside the set, and a
/// chi-square statistic below the 0.999 quantile.
fn check_distribution(params: SamplingParams, logits: &[f32], n: usize) -> HashMap<u32, f64> {
    check_adjusted_distribution(params, logits, logits, n)
}

/// [`check_distribution`] for a sampler whose bias and penalties turn `logits` into `adjusted`:
/// the reference runs on `adjusted`.
fn check_adjusted_distribution(
    params: SamplingParams,
    logits: &[f32],
    adjusted: &[f32],
    n: usize,
) -> HashMap<u32, f64> {
    let want = reference(adjusted, &params);
    let mut s = Sampler::new(params.clone(), logits.len()).unwrap();
    s.sample(logits).unwrap();
    let got: HashMap<u32, f64> =
        s.last_candidates().iter().map(|c| (c.id, f64::from(c.p))).collect();
    let mut want_ids: Vec<u32> = want.keys().copied().collect();
    let mut got_ids: Vec<u32> = got.keys().copied().collect();
    want_ids.sort_unstable();
    got_ids.sort_unstable();
    assert_eq!(got_ids, want_ids, "kept set for {params:?}");
    for (id, q) in &want {
        assert!(
            (got[id] - q).abs() < 2e-6,
            "p({id}) = {} but the reference says {q} for {params:?}",
            got[id]
        );
    }
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for _ in 0..n {
        let t = s.sample(logits).unwrap();
        assert!(want.contains_key(&t), "drew token {t}, which {params:?} excludes");
        *counts.entry(t).or_insert(0) += 1;
    }
    if want.len() > 1 {
        let chi2: f64 = want
            .iter()
            .map(|(id, q)| {
                let e = q * n as f64;
                let o = *counts.get(id).unwrap_or(&0) as f64;
                (o - e) * (o - e) / e
            })
            .sum();
        let bound = CHI2_999[want.len() - 2];
        assert!(
            chi2 < bound,
            "chi-square {chi2:.2} >= {bound} over {} tokens for {params:?}: {counts:?}",
            want.len()
        );
    }
    want
}

// ---------------------------------------------------------------------------------------------
// Each stage alone and the chain.
// ---------------------------------------------------------------------------------------------

#[test]
fn plain_softmax_at_temperature_one() {
    let want = check_distribution(plain(), &LOGITS, 40_000);
    assert_eq!(want.len(), 8);
}

#[test]
fn temperature_sharpens_and_flattens() {
    for t in [0.5, 2.0] {
        let want =
            check_distribution(SamplingParams { temperature: t, ..plain() }, &LOGITS, 40_000);
        // The reference itself: p(best) / p(second) = exp((2.0 - 1.5) / t).
        assert!((want[&1] / want[&3] - (0.5f64 / f64::from(t)).exp()).abs() < 1e-12);
    }
}

#[test]
fn top_k_keeps_the_k_best_renormalized() {
    let want = check_distribution(SamplingParams { top_k: 3, ..plain() }, &LOGITS, 30_000);
    let mut ids: Vec<u32> = want.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 3, 6]);
}

#[test]
fn top_p_keeps_the_nucleus() {
    // softmax: 2.0 -> 0.372, 1.5 -> 0.226, 1.0 -> 0.137, 0.5 -> 0.083, ... cumulative 0.735
    // after three, 0.818 after four: top-p 0.8 keeps four.
    let want = check_distribution(SamplingParams { top_p: 0.8, ..plain() }, &LOGITS, 30_000);
    let mut ids: Vec<u32> = want.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 3, 6]);
}

#[test]
fn min_p_keeps_tokens_near_the_best() {
    // 0.2 * p_max: logits above 2.0 + ln 0.2 = 0.39 stay.
    let want = check_distribution(SamplingParams { min_p: 0.2, ..plain() }, &LOGITS, 30_000);
    let mut ids: Vec<u32> = want.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 3, 6]);
}

#[test]
fn typical_p_keeps_the_locally_typical_tokens() {
    let want = check_distribution(SamplingParams { typical_p: 0.5, ..plain() }, &LOGITS, 30_000);
    // The most likely token is not the most typical one here: the set is not a top-k.
    assert!(want.len() >= 2 && want.len() < 8, "{want:?}");
}

#[test]
fn the_chain_runs_in_llama_cpp_order() {
    // top-k 6, then top-p over the renormalized six (cumulative 0.414, 0.665, 0.817, 0.909:
    // four), then min-p, then temperature. Dividing by the temperature first would leave
    // three (0.634, 0.867, 0.953).
    let params = SamplingParams { top_k: 6, top_p: 0.9, min_p: 0.1, temperature: 0.5, ..plain() };
    let want = check_distribution(params.clone(), &LOGITS, 30_000);
    assert_eq!(want.len(), 4);
    let temp_first =
        reference(&LOGITS.map(|l| l / 0.5), &SamplingParams { temperature: 1.0, ..params.clone() });
    assert_ne!(want.len(), temp_first.len(), "the case must tell the orders apart");
    let with_typical = SamplingParams { typical_p: 0.9, ..params };
    check_distribution(with_typical, &LOGITS, 30_000);
}

#[test]
fn default_parameters_are_llama_cpp_common_defaults() {
    let d = SamplingParams::default();
    assert_eq!((d.temperature, d.top_k, d.top_p, d.min_p, d.typical_p), (0.8, 40, 0.95, 0.05, 1.0));
    assert_eq!(
        (d.repeat_penalty, d.frequency_penalty, d.presence_penalty, d.penalty_last_n),
        (1.0, 0.0, 0.0, 64)
    );
    assert_eq!(d.seed, None);
    assert!(d.logit_bias.is_empty());
    check_distribution(SamplingParams { seed: Some(5), ..d }, &LOGITS, 30_000);
}

// ---------------------------------------------------------------------------------------------
// Penalties and bias.
// ---------------------------------------------------------------------------------------------

#[test]
fn penalties_give_exact_values() {
    let params = SamplingParams {
        repeat_penalty: 2.0,
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        penalty_last_n: 4,
        ..plain()
    };
    let mut s = Sampler::new(params, 6).unwrap();
    // The window keeps the last four: [1, 1, 3, 4] (token 0 fell out).
    s.accept_all(&[0, 1, 1, 3, 4]);
    let mut l = [1.0f32, -1.0, 2.0, 0.0, 3.0, 0.5];
    s.adjust_logits(&mut l).unwrap();
    // 1: -1 * 2 - 2 * 0.5 - 0.25 = -3.25;  3: 0 * 2 - 0.5 - 0.25 = -0.75;  4: 3 / 2 - 0.75 = 0.75
    assert_eq!(l, [1.0, -3.25, 2.0, -0.75, 0.75, 0.5]);
    // Three more tokens push 1, 1 and 3 out.
    s.accept_all(&[5, 5, 2]);
    let mut l = [1.0f32, -1.0, 2.0, 0.0, 3.0, 0.5];
    s.adjust_logits(&mut l).unwrap();
    // window [4, 5, 5, 2]: 4: 0.75; 5: 0.5 / 2 - 1.0 - 0.25 = -1.0; 2: 2 / 2 - 0.75 = 0.25
    assert_eq!(l, [1.0, -1.0, 0.25, 0.0, 0.75, -1.0]);
    // The draw uses the penalized logits.
    check_distribution_with(s, [1.0, -1.0, 0.25, 0.0, 0.75, -1.0], [1.0, -1.0, 2.0, 0.0, 3.0, 0.5]);
}

/// Draws from a sampler whose adjustments turn `raw` into `adjusted`, and checks the kept set
/// and probabilities against the reference over `adjusted`.
fn check_distribution_with(mut s: Sampler, adjusted: [f32; 6], raw: [f32; 6]) {
    let want = reference(&adjusted, s.params());
    s.sample(&raw).unwrap();
    for c in s.last_candidates() {
        assert!((f64::from(c.p) - want[&c.id]).abs() < 2e-6, "{c:?} vs {}", want[&c.id]);
    }
    assert_eq!(s.last_candidates().len(), want.len());
}

#[test]
fn penalties_off_leave_logits_alone_and_reset_empties_the_window() {
    let mut s = Sampler::new(SamplingParams { repeat_penalty: 1.5, ..plain() }, 3).unwrap();
    s.accept_all(&[0, 2, 2]);
    let mut l = [1.0f32, 1.0, -1.0];
    s.adjust_logits(&mut l).unwrap();
    assert_eq!(l, [1.0 / 1.5, 1.0, -1.5]);
    s.reset();
    let mut l = [1.0f32, 1.0, -1.0];
    s.adjust_logits(&mut l).unwrap();
    assert_eq!(l, [1.0, 1.0, -1.0]);
    let mut off =
        Sampler::new(SamplingParams { repeat_penalty: 1.5, penalty_last_n: 0, ..plain() }, 3)
            .unwrap();
    off.accept_all(&[0, 2, 2]);
    let mut l = [1.0f32, 1.0, -1.0];
    off.adjust_logits(&mut l).unwrap();
    assert_eq!(l, [1.0, 1.0, -1.0]);
}

#[test]
fn logit_bias_adds_and_bans() {
    let params = SamplingParams {
        logit_bias: vec![(1, f32::NEG_INFINITY), (5, 2.0), (5, 1.0), (2, -0.5)],
        ..plain()
    };
    let s = Sampler::new(params.clone(), 8).unwrap();
    let mut l = LOGITS;
    s.adjust_logits(&mut l).unwrap();
    assert_eq!(l, [0.5, f32::NEG_INFINITY, -1.5, 1.5, 0.0, 0.0, 1.0, -0.5]);
    // The banned best token is never drawn; the others follow the biased softmax.
    let want = check_adjusted_distribution(params, &LOGITS, &l, 40_000);
    assert!(!want.contains_key(&1));
    // And through the default chain (top-k, top-p, min-p) and greedy alike.
    let mut d = Sampler::new(
        SamplingParams {
            logit_bias: vec![(1, f32::NEG_INFINITY)],
            seed: Some(3),
            ..SamplingParams::default()
        },
        8,
    )
    .unwrap();
    for _ in 0..5_000 {
        assert_ne!(d.sample(&LOGITS).unwrap(), 1);
    }
    let mut g = Sampler::new(
        SamplingParams { logit_bias: vec![(1, f32::NEG_INFINITY)], ..SamplingParams::greedy() },
        8,
    )
    .unwrap();
    assert_eq!(g.sample(&LOGITS).unwrap(), 3);
}

#[test]
fn overflowing_adjustments_saturate_instead_of_making_nan() {
    let params = SamplingParams {
        logit_bias: vec![
            (0, 3e38),
            (1, 3e38),
            (1, 3e38),
            (2, f32::NEG_INFINITY),
            (2, 3e38),
            (2, 3e38),
        ],
        repeat_penalty: 1e-30,
        frequency_penalty: -3e38,
        ..plain()
    };
    let mut s = Sampler::new(params, 4).unwrap();
    s.accept_all(&[2, 3, 3]);
    let mut l = [3e38f32, 1.0, 5.0, 2.0];
    s.adjust_logits(&mut l).unwrap();
    // 0: 3e38 + 3e38 saturates; 1: 1 + MAX; 2: stays banned; 3: 2 / 1e-30 + 2 * 3e38 saturates.
    assert_eq!(l, [f32::MAX, f32::MAX, f32::NEG_INFINITY, f32::MAX]);
    // A tie of saturated logits: the distribution is uniform over them, and never NaN.
    s.sample(&[3e38, 1.0, 5.0, 2.0]).unwrap();
    for c in s.last_candidates() {
        assert!((c.p - 1.0 / 3.0).abs() < 1e-6, "{c:?}");
    }
}

#[test]
fn everything_banned_is_an_error() {
    let bans: Vec<(u32, f32)> = (0..8).map(|t| (t, f32::NEG_INFINITY)).collect();
    for params in [plain(), SamplingParams::greedy(), SamplingParams::default()] {
        let mut s = Sampler::new(SamplingParams { logit_bias: bans.clone(), ..params }, 8).unwrap();
        assert_eq!(s.sample(&LOGITS), Err(SamplingError::AllBanned));
    }
}

// ---------------------------------------------------------------------------------------------
// Greedy and seeds.
// ---------------------------------------------------------------------------------------------

#[test]
fn greedy_takes_the_argmax_and_the_lowest_id_on_a_tie() {
    let mut g = Sampler::new(SamplingParams::greedy(), 6).unwrap();
    assert_eq!(g.sample(&[1.0, 3.0, -2.0, 3.0, 2.0, 3.0]).unwrap(), 1);
    assert_eq!(g.sample(&[f32::NEG_INFINITY, -5.0, -5.0, -7.0, -6.0, -9.0]).unwrap(), 1);
    assert_eq!(g.last_candidates().len(), 1);
    assert_eq!(g.last_candidates()[0].p, 1.0);
    // Penalized: the repeated best token drops below the next one.
    let mut p = Sampler::new(SamplingParams { repeat_penalty: 2.0, ..SamplingParams::greedy() }, 3)
        .unwrap();
    p.accept(0);
    assert_eq!(p.sample(&[3.0, 2.0, 1.0]).unwrap(), 1);
    // Ties in the filtered path too: top-k 2 over a three-way tie keeps the two lowest ids.
    let mut k = Sampler::new(SamplingParams { top_k: 2, ..plain() }, 4).unwrap();
    k.sample(&[0.0, 1.0, 1.0, 1.0]).unwrap();
    let mut ids: Vec<u32> = k.last_candidates().iter().map(|c| c.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2]);
}

fn draws(params: SamplingParams, n: usize) -> Vec<u32> {
    let mut s = Sampler::new(params, 8).unwrap();
    (0..n).map(|_| s.sample(&LOGITS).unwrap()).collect()
}

#[test]
fn same_seed_same_tokens_and_different_seeds_differ() {
    let a = draws(SamplingParams { seed: Some(42), ..plain() }, 200);
    let b = draws(SamplingParams { seed: Some(42), ..plain() }, 200);
    let c = draws(SamplingParams { seed: Some(43), ..plain() }, 200);
    assert_eq!(a, b);
    assert_ne!(a, c);
    // reset() restarts the sequence.
    let mut s = Sampler::new(SamplingParams { seed: Some(42), ..plain() }, 8).unwrap();
    let first: Vec<u32> = (0..50).map(|_| s.sample(&LOGITS).unwrap()).collect();
    s.reset();
    let again: Vec<u32> = (0..50).map(|_| s.sample(&LOGITS).unwrap()).collect();
    assert_eq!(first, again);
    assert_eq!(first, a[..50]);
    // A random seed is reported and reproduces its sequence.
    let mut r = Sampler::new(SamplingParams { seed: None, ..plain() }, 8).unwrap();
    let seq: Vec<u32> = (0..50).map(|_| r.sample(&LOGITS).unwrap()).collect();
    assert_eq!(seq, draws(SamplingParams { seed: Some(r.seed()), ..plain() }, 50));
    let other = Sampler::new(SamplingParams { seed: None, ..plain() }, 8).unwrap();
    assert_ne!(r.seed(), other.seed());
}

// ---------------------------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------------------------

fn param_error(params: SamplingParams) -> (String, String) {
    match Sampler::new(params, 8) {
        Err(SamplingError::Parameter { name, value, .. }) => (name.to_string(), value),
        other => panic!("expected a parameter error, got {other:?}"),
    }
}

#[test]
fn every_parameter_out_of_range_is_a_typed_error() {
    let p = plain();
    let cases: Vec<(SamplingParams, &str, &str)> = vec![
        (SamplingParams { temperature: -0.1, ..p.clone() }, "temperature", "-0.1"),
        (SamplingParams { temperature: f32::NAN, ..p.clone() }, "temperature", "NaN"),
        (SamplingParams { temperature: f32::INFINITY, ..p.clone() }, "temperature", "inf"),
        (SamplingParams { top_p: 0.0, ..p.clone() }, "topP", "0"),
        (SamplingParams { top_p: 1.5, ..p.clone() }, "topP", "1.5"),
        (SamplingParams { top_p: f32::NAN, ..p.clone() }, "topP", "NaN"),
        (SamplingParams { min_p: -0.01, ..p.clone() }, "minP", "-0.01"),
        (SamplingParams { min_p: 1.01, ..p.clone() }, "minP", "1.01"),
        (SamplingParams { min_p: f32::NAN, ..p.clone() }, "minP", "NaN"),
        (SamplingParams { typical_p: 0.0, ..p.clone() }, "typicalP", "0"),
        (SamplingParams { typical_p: 2.0, ..p.clone() }, "typicalP", "2"),
        (SamplingParams { repeat_penalty: 0.0, ..p.clone() }, "repeatPenalty", "0"),
        (SamplingParams { repeat_penalty: -1.0, ..p.clone() }, "repeatPenalty", "-1"),
        (SamplingParams { repeat_penalty: f32::INFINITY, ..p.clone() }, "repeatPenalty", "inf"),
        (
            SamplingParams { repeat_penalty: 1e-39, ..p.clone() },
            "repeatPenalty",
            "0.000000000000000000000000000000000000001",
        ),
        (SamplingParams { frequency_penalty: f32::NAN, ..p.clone() }, "frequencyPenalty", "NaN"),
        (
            SamplingParams { frequency_penalty: f32::NEG_INFINITY, ..p.clone() },
            "frequencyPenalty",
            "-inf",
        ),
        (SamplingParams { presence_penalty: f32::INFINITY, ..p.clone() }, "presencePenalty", "inf"),
    ];
    for (params, name, value) in cases {
        let (n, v) = param_error(params);
        assert_eq!((n.as_str(), v.as_str()), (name, value));
    }
    let e = Sampler::new(SamplingParams { top_p: 1.5, ..p.clone() }, 8).unwrap_err();
    assert_eq!(e.to_string(), "sampling parameter topP is 1.5; it must be a number in (0, 1]");
    assert_eq!(
        Sampler::new(SamplingParams { logit_bias: vec![(8, 1.0)], ..p.clone() }, 8).unwrap_err(),
        SamplingError::LogitBiasToken { token: 8, n_vocab: 8 }
    );
    for bias in [f32::NAN, f32::INFINITY] {
        match Sampler::new(SamplingParams { logit_bias: vec![(2, bias)], ..p.clone() }, 8) {
            Err(SamplingError::LogitBiasValue { token: 2, bias: b }) => {
                assert_eq!(b.to_bits(), bias.to_bits())
            }
            other => panic!("bias {bias}: {other:?}"),
        }
    }
    assert_eq!(Sampler::new(p.clone(), 0).unwrap_err(), SamplingError::VocabSize { n_vocab: 0 });
    // Negative biases, negative frequency / presence penalties and huge top-k are in range.
    let fine = SamplingParams {
        logit_bias: vec![(0, -100.0)],
        frequency_penalty: -1.0,
        top_k: u32::MAX,
        ..p.clone()
    };
    assert!(Sampler::new(fine, 8).is_ok());
}

#[test]
fn bad_logits_are_typed_errors() {
    let mut s = Sampler::new(plain(), 8).unwrap();
    assert_eq!(s.sample(&LOGITS[..7]), Err(SamplingError::LogitsLength { n_vocab: 8, got: 7 }));
    let mut l = LOGITS;
    l[5] = f32::NAN;
    assert!(matches!(s.sample(&l), Err(SamplingError::Logit { index: 5, .. })));
    let mut big = vec![0.0f32; 1000];
    big[777] = f32::INFINITY;
    let mut b = Sampler::new(SamplingParams::greedy(), 1000).unwrap();
    assert_eq!(b.sample(&big), Err(SamplingError::Logit { index: 777, value: f32::INFINITY }));
    // -inf is a ban, not an error.
    l[5] = f32::NEG_INFINITY;
    assert!(s.sample(&l).is_ok());
}

#[test]
fn parameters_read_and_write_camel_case_json() {
    let p: SamplingParams = serde_json::from_str(
        r#"{"temperature": 0.5, "topK": 10, "topP": 0.9, "minP": 0.1, "typicalP": 0.8,
            "repeatPenalty": 1.1, "frequencyPenalty": 0.2, "presencePenalty": 0.3,
            "penaltyLastN": 32, "logitBias": [[3, 1.5], [7, false]], "seed": 99}"#,
    )
    .unwrap();
    assert_eq!(
        p,
        SamplingParams {
            temperature: 0.5,
            top_k: 10,
            top_p: 0.9,
            min_p: 0.1,
            typical_p: 0.8,
            repeat_penalty: 1.1,
            frequency_penalty: 0.2,
            presence_penalty: 0.3,
            penalty_last_n: 32,
            logit_bias: vec![(3, 1.5), (7, f32::NEG_INFINITY)],
            seed: Some(99),
        }
    );
    let back: SamplingParams = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);
    assert!(serde_json::to_string(&p).unwrap().contains("[7,false]"));
    let partial: SamplingParams = serde_json::from_str(r#"{"topK": 5}"#).unwrap();
    assert_eq!(partial, SamplingParams { top_k: 5, ..SamplingParams::default() });
    let unknown = serde_json::from_str::<SamplingParams>(r#"{"topk": 5}"#).unwrap_err().to_string();
    assert!(unknown.contains("topk"), "{unknown}");
    assert!(serde_json::from_str::<SamplingParams>(r#"{"logitBias": [[1, true]]}"#).is_err());
}

// ---------------------------------------------------------------------------------------------
// The large-vocabulary paths against brute force.
// ---------------------------------------------------------------------------------------------

/// Logits shaped like a model's, from a seeded xorshift: a roughly normal floor (sum of four
/// uniforms, scale 3) and 1500 plausible tokens set to 10 to 14, so that the probability
/// mass sits on a few hundred tokens; plus a three-way exact tie for the best.
fn vocab_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut l: Vec<f32> =
        (0..n).map(|_| ((next() + next() + next() + next() - 2.0) * 3.0) as f32).collect();
    for _ in 0..1500 {
        let i = (next() * n as f64) as usize;
        l[i] = (10.0 + 4.0 * next()) as f32;
    }
    let top = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for i in [n / 3, n / 2, n - 1] {
        l[i] = top + 0.5;
    }
    l
}

#[test]
fn large_vocabulary_top_k_is_the_brute_force_top_k() {
    let n = 262_144;
    let logits = vocab_logits(n, 7);
    let mut ranked: Vec<(u32, f32)> =
        logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
    ranked.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
    for k in [1u32, 2, 40, 100, 1000] {
        let mut s = Sampler::new(SamplingParams { top_k: k, ..plain() }, n).unwrap();
        s.sample(&logits).unwrap();
        let got: Vec<u32> = s.last_candidates().iter().map(|c| c.id).collect();
        let want: Vec<u32> = ranked[..k as usize].iter().map(|c| c.0).collect();
        assert_eq!(got, want, "top-{k}");
    }
    // The greedy path picks the lowest id of the tie.
    let mut g = Sampler::new(SamplingParams::greedy(), n).unwrap();
    assert_eq!(g.sample(&logits).unwrap(), (n / 3) as u32);
}

#[test]
fn large_vocabulary_top_p_and_min_p_match_the_reference() {
    let n = 262_144;
    let logits = vocab_logits(n, 11);
    for params in [
        SamplingParams { top_p: 0.5, ..plain() },
        // A nucleus of several hundred tokens, found in the whole vocabulary.
        SamplingParams { top_p: 0.97, ..plain() },
        SamplingParams { min_p: 0.05, ..plain() },
        SamplingParams { top_k: 2000, top_p: 0.9, min_p: 0.01, temperature: 0.8, ..plain() },
    ] {
        let want = reference(&logits, &params);
        let mut s = Sampler::new(params.clone(), n).unwrap();
        s.sample(&logits).unwrap();
        let got = s.last_candidates();
        assert_eq!(got.len(), want.len(), "{params:?}");
        if params.top_p == 0.97 {
            assert!(got.len() > 256, "only {} tokens in the nucleus", got.len());
        }
        for c in got {
            let q = want
                .get(&c.id)
                .unwrap_or_else(|| panic!("token {} kept against the reference", c.id));
            assert!((f64::from(c.p) - q).abs() < 1e-5, "{c:?} vs {q}");
        }
    }
}

/// `cargo test --release -p tessera-llm --test sampling -- --ignored --nocapture`: the time of
/// one `sample()` on a 262,144-token vocabulary (printed, never asserted).
#[test]
#[ignore]
fn time_sample_on_a_262144_vocabulary() {
    let n = 262_144;
    let logits = vocab_logits(n, 3);
    let cases = [
        ("greedy", SamplingParams::greedy()),
        (
            "defaults (top-k 40, top-p 0.95, min-p 0.05, T 0.8)",
            SamplingParams { seed: Some(1), ..SamplingParams::default() },
        ),
        (
            "defaults + repeat 1.1 over 64 + 2 biases",
            SamplingParams {
                repeat_penalty: 1.1,
                logit_bias: vec![(5, -1.0), (9, f32::NEG_INFINITY)],
                seed: Some(1),
                ..SamplingParams::default()
            },
        ),
        (
            "top-k 0, top-p 0.95 (whole vocabulary)",
            SamplingParams { top_k: 0, min_p: 0.0, seed: Some(1), ..SamplingParams::default() },
        ),
        (
            "top-k 0, min-p 0.05 only",
            SamplingParams { top_k: 0, top_p: 1.0, seed: Some(1), ..SamplingParams::default() },
        ),
        (
            "top-k 0, typical-p 0.9",
            SamplingParams { top_k: 0, typical_p: 0.9, seed: Some(1), ..SamplingParams::default() },
        ),
    ];
    for (name, params) in cases {
        let mut s = Sampler::new(params, n).unwrap();
        s.accept_all(&(0..64).collect::<Vec<u32>>());
        for _ in 0..5 {
            s.sample(&logits).unwrap();
        }
        let mut times: Vec<f64> = (0..51)
            .map(|_| {
                let t = std::time::Instant::now();
                std::hint::black_box(s.sample(std::hint::black_box(&logits)).unwrap());
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{name}: median {:.0} us, min {:.0} us", times[25], times[0]);
    }
}
