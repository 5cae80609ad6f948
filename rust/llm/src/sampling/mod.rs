//! Choosing the next token from logits: logit bias, repetition / frequency / presence
//! penalties over a window, top-k, typical-p, top-p, min-p, temperature and a seeded draw, in
//! the order and with the semantics of llama.cpp's common sampler chain.
//!
//! ```
//! use tessera_llm::sampling::{Sampler, SamplingParams};
//! let params = SamplingParams { seed: Some(7), ..SamplingParams::default() };
//! let mut sampler = Sampler::new(params, 4).unwrap();
//! sampler.accept_all(&[0, 1]); // the prompt's tokens enter the penalty window too
//! let token = sampler.sample(&[0.5, 2.0, 1.0, -1.0]).unwrap();
//! sampler.accept(token);
//! ```
//!
//! Output constraints (JSON Schema, grammars, regular expressions; [`crate::constraint`]) enter
//! as a mask of allowed tokens through [`Sampler::sample_masked`].

mod chain;
mod params;

pub use chain::Candidate;
pub use params::SamplingParams;

use chain::Candidates;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, VecDeque};

/// A sampling parameter or input out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// A parameter outside its range (named as in JSON, e.g. `topP`).
    #[error("sampling parameter {name} is {value}; it must be {expected}")]
    Parameter {
        /// The parameter's JSON name.
        name: &'static str,
        /// Its value as given.
        value: String,
        /// The range it must lie in.
        expected: &'static str,
    },
    /// A `logitBias` entry for a token id the vocabulary does not have.
    #[error("logitBias names token {token}, but the vocabulary has {n_vocab} tokens")]
    LogitBiasToken {
        /// The token id.
        token: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// A `logitBias` entry whose bias is NaN or `+inf`.
    #[error("logitBias for token {token} is {bias}; it must be a number or -inf (a ban)")]
    LogitBiasValue {
        /// The token id.
        token: u32,
        /// The bias.
        bias: f32,
    },
    /// A vocabulary size of 0 or beyond the `u32` token ids.
    #[error("a vocabulary of {n_vocab} tokens cannot be sampled (it must hold 1 to 2^32 - 1)")]
    VocabSize {
        /// The size given.
        n_vocab: usize,
    },
    /// Logits of a length other than the vocabulary size.
    #[error("got {got} logits for a vocabulary of {n_vocab} tokens")]
    LogitsLength {
        /// The vocabulary size.
        n_vocab: usize,
        /// The number of logits passed.
        got: usize,
    },
    /// A NaN or `+inf` logit from the model.
    #[error("logit {index} is {value}; logits must be finite or -inf")]
    Logit {
        /// The token id of the logit.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// Every token's logit is `-inf` (after bias and penalties): there is nothing to draw.
    #[error("every token is banned (all logits are -inf after logit bias and penalties)")]
    AllBanned,
}

/// A sampler for one generation: the parameters, the penalty window, the random state and
/// reused buffers. [`sample`](Sampler::sample) allocates nothing once its buffers have grown.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    n_vocab: usize,
    /// `logit_bias` with one entry per token (biases summed), by token id.
    bias: Vec<(u32, f32)>,
    penalties_on: bool,
    window: VecDeque<u32>,
    counts: HashMap<u32, u32>,
    seed: u64,
    rng: ChaCha8Rng,
    /// The logits after bias and penalties, when there are any.
    adjusted: Vec<f32>,
    candidates: Candidates,
}

impl Sampler {
    /// A sampler for a vocabulary of `n_vocab` tokens; the parameters are validated first.
    pub fn new(params: SamplingParams, n_vocab: usize) -> Result<Sampler, SamplingError> {
        params.validate(n_vocab)?;
        let mut bias: Vec<(u32, f32)> = Vec::with_capacity(params.logit_bias.len());
        let mut sorted = params.logit_bias.clone();
        sorted.sort_by_key(|&(t, _)| t);
        for (t, b) in sorted {
            match bias.last_mut() {
                // Two huge biases could overflow to +inf; saturate, so a ban stays a ban.
                Some(last) if last.0 == t => last.1 = saturate(last.1 + b),
                _ => bias.push((t, b)),
            }
        }
        let penalties_on = params.penalty_last_n > 0
            && (params.repeat_penalty != 1.0
                || params.frequency_penalty != 0.0
                || params.presence_penalty != 0.0);
        let seed = params.seed.unwrap_or_else(random_seed);
        Ok(Sampler {
            n_vocab,
            bias,
            penalties_on,
            window: VecDeque::new(),
            counts: HashMap::new(),
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            adjusted: Vec::new(),
            candidates: Candidates::default(),
            params,
        })
    }

    /// The parameters this sampler was made with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The seed in use: the parameters' seed, or the random one drawn for `seed: None`.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Chooses the next token from the logits of one position (`n_vocab` values).
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        self.check_logits(logits)?;
        let src: &[f32] = if self.needs_adjusting() {
            self.adjusted.clear();
            self.adjusted.extend_from_slice(logits);
            let penalties = penalty_view(self.penalties_on, &self.counts, &self.params);
            apply_bias_and_penalties(&self.bias, penalties, &mut self.adjusted);
            &self.adjusted
        } else {
            logits
        };
        choose(&self.params, &mut self.candidates, &mut self.rng, src)
    }

    /// [`sample`](Sampler::sample) among the tokens an output constraint allows: `allowed` is a
    /// bit set over token ids (bit `i % 32` of word `i / 32`, as llguidance's masks are), and
    /// every token outside it (ids past its end too) is banned before the bias, the penalties
    /// and the filters run, so the filters see only allowed tokens. A mask that allows nothing
    /// is [`SamplingError::AllBanned`].
    pub fn sample_masked(&mut self, logits: &[f32], allowed: &[u32]) -> Result<u32, SamplingError> {
        self.check_logits(logits)?;
        self.adjusted.clear();
        self.adjusted.extend_from_slice(logits);
        apply_mask(allowed, &mut self.adjusted);
        if self.needs_adjusting() {
            let penalties = penalty_view(self.penalties_on, &self.counts, &self.params);
            apply_bias_and_penalties(&self.bias, penalties, &mut self.adjusted);
        }
        choose(&self.params, &mut self.candidates, &mut self.rng, &self.adjusted)
    }

    /// The candidates of the last [`sample`](Sampler::sample) after every filter, with their
    /// final probabilities (temperature applied), in the order the last stage left them
    /// (rank order unless typical-p ran last). Greedy leaves one candidate with `p = 1`.
    pub fn last_candidates(&self) -> &[Candidate] {
        &self.candidates.items
    }

    /// Applies the logit bias and the penalties of the current window to `logits` in place,
    /// exactly as [`sample`](Sampler::sample) does before its filters.
    pub fn adjust_logits(&self, logits: &mut [f32]) -> Result<(), SamplingError> {
        self.check_logits(logits)?;
        let penalties = penalty_view(self.penalties_on, &self.counts, &self.params);
        apply_bias_and_penalties(&self.bias, penalties, logits);
        Ok(())
    }

    /// Records a token in the penalty window (call it for the prompt's tokens too, as
    /// llama.cpp does, and for every generated token). Ids outside the vocabulary are ignored.
    pub fn accept(&mut self, token: u32) {
        if !self.penalties_on || token as usize >= self.n_vocab {
            return;
        }
        *self.counts.entry(token).or_insert(0) += 1;
        self.window.push_back(token);
        if self.window.len() > self.params.penalty_last_n as usize {
            if let Some(old) = self.window.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
    }

    /// [`accept`](Sampler::accept) for each token in order.
    pub fn accept_all(&mut self, tokens: &[u32]) {
        for &t in tokens {
            self.accept(t);
        }
    }

    /// Empties the penalty window and restarts the random sequence from the seed (a random
    /// seed stays the one drawn at creation), so the sampler behaves as new.
    pub fn reset(&mut self) {
        self.window.clear();
        self.counts.clear();
        self.rng = ChaCha8Rng::seed_from_u64(self.seed);
        self.candidates.items.clear();
    }

    fn check_logits(&self, logits: &[f32]) -> Result<(), SamplingError> {
        if logits.len() != self.n_vocab {
            return Err(SamplingError::LogitsLength { n_vocab: self.n_vocab, got: logits.len() });
        }
        // Blocks at a time, so that the common case (no bad logit) vectorizes.
        const BLOCK: usize = 64;
        for (b, block) in logits.chunks(BLOCK).enumerate() {
            if block.iter().fold(false, |bad, &x| bad | not_a_logit(x)) {
                let j = block.iter().position(|&x| not_a_logit(x)).unwrap_or(0);
                return Err(SamplingError::Logit { index: b * BLOCK + j, value: block[j] });
            }
        }
        Ok(())
    }

    fn needs_adjusting(&self) -> bool {
        !self.bias.is_empty() || (self.penalties_on && !self.counts.is_empty())
    }
}

/// The sampler chain after bias and penalties: greedy, or top-k, typical-p, top-p, min-p and
/// the draw at the temperature.
fn choose(
    p: &SamplingParams,
    cands: &mut Candidates,
    rng: &mut ChaCha8Rng,
    src: &[f32],
) -> Result<u32, SamplingError> {
    if p.temperature == 0.0 {
        let id = argmax(src).ok_or(SamplingError::AllBanned)?;
        cands.items.clear();
        cands.items.push(Candidate { id, logit: src[id as usize], p: 1.0 });
        cands.sorted = true;
        return Ok(id);
    }
    let k = p.top_k as usize;
    if k > 0 && k < src.len() {
        cands.fill_top_k(src, k);
    } else {
        cands.fill_all(src);
    }
    if cands.items.is_empty() {
        return Err(SamplingError::AllBanned);
    }
    cands.typical(p.typical_p);
    cands.top_p(p.top_p);
    cands.min_p(p.min_p);
    let u = unit_f64(rng);
    Ok(cands.draw(p.temperature, u))
}

/// Sets the logit of every token whose bit in `allowed` is clear to `-inf` (32 tokens per
/// word; a word of all zeros or all ones is handled at once).
fn apply_mask(allowed: &[u32], logits: &mut [f32]) {
    let mut chunks = logits.chunks_mut(32);
    for (&word, chunk) in allowed.iter().zip(chunks.by_ref()) {
        match word {
            0 => chunk.fill(f32::NEG_INFINITY),
            u32::MAX => {}
            _ => {
                for (j, l) in chunk.iter_mut().enumerate() {
                    if word & (1 << j) == 0 {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
    for chunk in chunks {
        chunk.fill(f32::NEG_INFINITY);
    }
}

/// NaN or `+inf`: a value no softmax can take (`-inf` is a ban and fine).
fn not_a_logit(x: f32) -> bool {
    x.is_nan() | (x == f32::INFINITY)
}

/// The penalties to apply, if they are on.
fn penalty_view<'a>(
    on: bool,
    counts: &'a HashMap<u32, u32>,
    params: &SamplingParams,
) -> Option<Penalties<'a>> {
    on.then_some(Penalties {
        counts,
        repeat: params.repeat_penalty,
        frequency: params.frequency_penalty,
        presence: params.presence_penalty,
    })
}

/// The penalties of a window: token counts and the three penalty values.
struct Penalties<'a> {
    counts: &'a HashMap<u32, u32>,
    repeat: f32,
    frequency: f32,
    presence: f32,
}

/// Bias first, then for every token in the window: a logit `<= 0` is multiplied by the
/// repeat penalty and a positive one divided by it (so a penalty above 1 always lowers it),
/// then `count * frequency + presence` is subtracted (llama.cpp's penalties sampler). In f32
/// as llama.cpp computes it, except that a result overflowing to `+inf` saturates at
/// `f32::MAX` and a banned (`-inf`) token stays banned, so no NaN or `+inf` can follow.
fn apply_bias_and_penalties(
    bias: &[(u32, f32)],
    penalties: Option<Penalties<'_>>,
    logits: &mut [f32],
) {
    for &(t, b) in bias {
        let l = &mut logits[t as usize];
        *l = saturate(*l + b);
    }
    if let Some(p) = penalties {
        for (&t, &count) in p.counts {
            let l = &mut logits[t as usize];
            if *l == f32::NEG_INFINITY {
                continue;
            }
            *l = if *l <= 0.0 { *l * p.repeat } else { saturate(*l / p.repeat) };
            if *l != f32::NEG_INFINITY {
                *l = saturate(*l - (count as f32 * p.frequency + p.presence));
            }
        }
    }
}

/// `+inf` becomes `f32::MAX`; everything else (finite or `-inf`) is kept.
fn saturate(x: f32) -> f32 {
    if x == f32::INFINITY {
        f32::MAX
    } else {
        x
    }
}

/// The index of the largest finite logit, the lowest index on a tie; `None` if all are -inf.
/// Blocks of 16 are tested in one vectorizable step and only a block holding a new best is
/// scanned element by element.
fn argmax(logits: &[f32]) -> Option<u32> {
    const BLOCK: usize = 16;
    let mut best = f32::NEG_INFINITY;
    let mut at = None;
    for (b, block) in logits.chunks(BLOCK).enumerate() {
        if block.iter().fold(false, |any, &x| any | (x > best)) {
            for (j, &x) in block.iter().enumerate() {
                if x > best {
                    best = x;
                    at = Some((b * BLOCK + j) as u32);
                }
            }
        }
    }
    at
}

/// A uniform number in `[0, 1)` with 53 random bits.
fn unit_f64(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A seed that differs between calls and processes (the standard library's per-process random
/// hasher keys, mixed with the time), for `seed: None`.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(now);
    h.finish()
}
