//! The gated delta rule (Qwen 3.5's linear attention, GATED_DELTA_NET) of one head over a run of
//! tokens, on an F32 state `M` (`S x S`, column `j` contiguous: element `i + j * S` is
//! `M[i][j]`, key dim `i`, value dim `j`).
//!
//! Per token, with the decays `d` (`exp(g)`: one, or one per key dim), `beta`, key `k`, value
//! `v` and query `q`: `M = diag(d) M`, `delta[j] = beta (v[j] - sum_i M[i][j] k[i])`, `M[i][j] +=
//! k[i] delta[j]`, `o[j] = scale * sum_i M[i][j] q[i]`. The columns of `M` are independent, so
//! the kernel takes a few columns at a time through every token of the run (the columns stay
//! in L1 meanwhile) and makes two passes over each per token: the first only reads it for
//! `sum_i M[i][j] d[i] k[i]` (the key dot product of the decayed column, without writing it), the
//! second decays it, adds `k delta[j]`, writes it and takes the query dot product.
//!
//! One generic body over vectors of `W` lanes ([`Lanes`]), instantiated with AVX-512F (16
//! lanes) for the AVX-512 tier, AVX2 + FMA (8) for the AVX2 tier, NEON (4) on aarch64, and one
//! lane without fused multiply-adds for the scalar tier; each dot product in two accumulators,
//! its lanes summed at the end, the last `S mod W` dims one by one.

use super::tier::{active_tier, note_used, Tier};
use tessera_core::{Error, Result};

/// One head's inputs for a run of `n` tokens, token-major: row `t` of `k`, `q`, `v` is
/// `[t * S, (t + 1) * S)`.
#[derive(Clone, Copy, Debug)]
pub struct DeltaTokens<'a> {
    /// Keys, `n * S`.
    pub k: &'a [f32],
    /// Queries, `n * S`.
    pub q: &'a [f32],
    /// Values, `n * S`.
    pub v: &'a [f32],
    /// The decays `exp(g)`: one per token (`n`) or one per token and key dim (`n * S`).
    pub decay: &'a [f32],
    /// `beta`, one per token (`n`).
    pub beta: &'a [f32],
}

fn check(what: &str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        return Ok(());
    }
    Err(Error::DataLength { context: format!("delta rule: {what}"), expected, actual })
}

/// Runs the gated delta rule of one head (see the module) over the tokens of `x` from the state
/// `m` (`s * s`, updated in place), writing token `t`'s output to `out[t * s..(t + 1) * s]`,
/// scaled by `scale`. `kd` is scratch (it holds `d * k` when the decays are per key dim).
///
/// # Errors
///
/// [`Error::DataLength`] when a slice's length does not fit `s` and the number of tokens (that of
/// `beta`).
pub fn delta_rule(
    m: &mut [f32],
    s: usize,
    x: &DeltaTokens<'_>,
    scale: f32,
    out: &mut [f32],
    kd: &mut Vec<f32>,
) -> Result<()> {
    delta_rule_in(active_tier(), m, s, x, scale, out, kd)
}

/// [`delta_rule`] with the body of `tier` (the scalar one when the CPU lacks the tier).
fn delta_rule_in(
    tier: Tier,
    m: &mut [f32],
    s: usize,
    x: &DeltaTokens<'_>,
    scale: f32,
    out: &mut [f32],
    kd: &mut Vec<f32>,
) -> Result<()> {
    let tier = if tier.is_supported() { tier } else { Tier::Scalar };
    let n = x.beta.len();
    check("state", s * s, m.len())?;
    check("keys", n * s, x.k.len())?;
    check("queries", n * s, x.q.len())?;
    check("values", n * s, x.v.len())?;
    check("outputs", n * s, out.len())?;
    let per_dim = x.decay.len() != n;
    if per_dim {
        check("decays", n * s, x.decay.len())?;
        kd.clear();
        kd.extend(x.k.iter().zip(x.decay).map(|(k, d)| k * d));
    }
    if n == 0 || s == 0 {
        return Ok(());
    }
    let kd = if per_dim { &kd[..] } else { x.k };
    let args = Args { s, x, kd, scale };
    note_used(tier);
    // SAFETY: (every arm) the lengths were checked above; each tier's features were checked
    // (`is_supported`) before it was taken.
    unsafe {
        match (flavor(tier), per_dim) {
            #[cfg(target_arch = "x86_64")]
            (Flavor::Avx512, false) => x86::avx512::<false>(m, &args, out),
            #[cfg(target_arch = "x86_64")]
            (Flavor::Avx512, true) => x86::avx512::<true>(m, &args, out),
            #[cfg(target_arch = "x86_64")]
            (Flavor::Avx2, false) => x86::avx2::<false>(m, &args, out),
            #[cfg(target_arch = "x86_64")]
            (Flavor::Avx2, true) => x86::avx2::<true>(m, &args, out),
            #[cfg(target_arch = "aarch64")]
            (Flavor::Neon, false) => arm::neon::<false>(m, &args, out),
            #[cfg(target_arch = "aarch64")]
            (Flavor::Neon, true) => arm::neon::<true>(m, &args, out),
            (_, false) => columns::<f32, false>(m, &args, out),
            (_, true) => columns::<f32, true>(m, &args, out),
        }
    }
    Ok(())
}

/// The body the active tier runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Scalar,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    Neon,
}

fn flavor(tier: Tier) -> Flavor {
    match tier {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 => Flavor::Avx2,
        #[cfg(target_arch = "x86_64")]
        Tier::Avx512Vnni => Flavor::Avx512,
        #[cfg(target_arch = "aarch64")]
        Tier::Neon | Tier::Dotprod | Tier::I8mm => Flavor::Neon,
        _ => Flavor::Scalar,
    }
}

/// The checked operands of [`delta_rule`]: `kd` is `d * k` per key dim, or `k` itself when the
/// decay is one per token.
struct Args<'a> {
    s: usize,
    x: &'a DeltaTokens<'a>,
    kd: &'a [f32],
    scale: f32,
}

/// The vector operations the body needs, on `W` lanes of f32.
trait Lanes: Copy {
    /// Lanes per vector.
    const W: usize;
    /// Columns of the state taken through the tokens together (independent dependency chains,
    /// two accumulators each, within the registers).
    const GROUP: usize;
    /// `W` values from `p`.
    ///
    /// # Safety
    ///
    /// `p` holds `W` readable f32; the CPU has the vector's features.
    unsafe fn load(p: *const f32) -> Self;
    /// The lanes to `p`.
    ///
    /// # Safety
    ///
    /// `p` holds `W` writable f32; the CPU has the vector's features.
    unsafe fn store(self, p: *mut f32);
    /// `x` in every lane.
    fn splat(x: f32) -> Self;
    /// `a * b + c` (fused where the tier has FMA).
    fn madd(a: Self, b: Self, c: Self) -> Self;
    /// `a * b`.
    fn mul(a: Self, b: Self) -> Self;
    /// `a + b`.
    fn add(a: Self, b: Self) -> Self;
    /// The sum of the lanes.
    fn sum(self) -> f32;
}

/// The scalar tier: one lane, separate multiply and add (no FMA).
impl Lanes for f32 {
    const W: usize = 1;
    const GROUP: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's contract.
        unsafe { *p }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's contract.
        unsafe { *p = self }
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn madd(a: Self, b: Self, c: Self) -> Self {
        a * b + c
    }
    #[inline(always)]
    fn mul(a: Self, b: Self) -> Self {
        a * b
    }
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        a + b
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        self
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{columns, Args, Lanes};
    use std::arch::x86_64::*;

    /// 8 lanes of AVX2 with FMA. Its operations are only called inlined into [`avx2`], whose
    /// target features they use.
    #[derive(Clone, Copy)]
    pub(super) struct Avx2(__m256);

    impl Lanes for Avx2 {
        const W: usize = 8;
        const GROUP: usize = 4;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            Avx2(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: only run inside `avx2` (AVX2 checked by the tier).
            Avx2(unsafe { _mm256_set1_ps(x) })
        }
        #[inline(always)]
        fn madd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: as `splat`.
            Avx2(unsafe { _mm256_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        fn mul(a: Self, b: Self) -> Self {
            // SAFETY: as `splat`.
            Avx2(unsafe { _mm256_mul_ps(a.0, b.0) })
        }
        #[inline(always)]
        fn add(a: Self, b: Self) -> Self {
            // SAFETY: as `splat`.
            Avx2(unsafe { _mm256_add_ps(a.0, b.0) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // SAFETY: as `splat`.
            unsafe {
                let v = self.0;
                let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
            }
        }
    }

    /// 16 lanes of AVX-512F. Its operations are only called inlined into [`avx512`], whose
    /// target features they use.
    #[derive(Clone, Copy)]
    pub(super) struct Avx512(__m512);

    impl Lanes for Avx512 {
        const W: usize = 16;
        const GROUP: usize = 8;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            Avx512(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: only run inside `avx512` (AVX-512F checked by the tier).
            Avx512(unsafe { _mm512_set1_ps(x) })
        }
        #[inline(always)]
        fn madd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: as `splat`.
            Avx512(unsafe { _mm512_fmadd_ps(a.0, b.0, c.0) })
        }
        #[inline(always)]
        fn mul(a: Self, b: Self) -> Self {
            // SAFETY: as `splat`.
            Avx512(unsafe { _mm512_mul_ps(a.0, b.0) })
        }
        #[inline(always)]
        fn add(a: Self, b: Self) -> Self {
            // SAFETY: as `splat`.
            Avx512(unsafe { _mm512_add_ps(a.0, b.0) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // SAFETY: as `splat`.
            unsafe {
                let v = self.0;
                let lo = _mm512_castps512_ps256(v);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                Avx2(_mm256_add_ps(lo, hi)).sum()
            }
        }
    }

    /// [`columns`] with AVX-512F (16 lanes a register).
    ///
    /// # Safety
    ///
    /// The CPU has AVX-512F, AVX2 and FMA; `a` was checked by [`super::delta_rule_in`].
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn avx512<const PER_DIM: bool>(m: &mut [f32], a: &Args<'_>, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { columns::<Avx512, PER_DIM>(m, a, out) }
    }

    /// [`columns`] with AVX2 and FMA.
    ///
    /// # Safety
    ///
    /// The CPU has AVX2 and FMA; `a` was checked by [`super::delta_rule_in`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2<const PER_DIM: bool>(m: &mut [f32], a: &Args<'_>, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { columns::<Avx2, PER_DIM>(m, a, out) }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{columns, Args, Lanes};
    use std::arch::aarch64::*;

    /// 4 lanes of NEON (baseline on aarch64), with fused multiply-adds.
    #[derive(Clone, Copy)]
    pub(super) struct Neon(float32x4_t);

    impl Lanes for Neon {
        const W: usize = 4;
        const GROUP: usize = 8;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            Neon(unsafe { vld1q_f32(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { vst1q_f32(p, self.0) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: NEON is baseline on aarch64.
            Neon(unsafe { vdupq_n_f32(x) })
        }
        #[inline(always)]
        fn madd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: as `splat`.
            Neon(unsafe { vfmaq_f32(c.0, a.0, b.0) })
        }
        #[inline(always)]
        fn mul(a: Self, b: Self) -> Self {
            // SAFETY: as `splat`.
            Neon(unsafe { vmulq_f32(a.0, b.0) })
        }
        #[inline(always)]
        fn add(a: Self, b: Self) -> Self {
            // SAFETY: as `splat`.
            Neon(unsafe { vaddq_f32(a.0, b.0) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // SAFETY: as `splat`.
            unsafe { vaddvq_f32(self.0) }
        }
    }

    /// [`columns`] with NEON.
    ///
    /// # Safety
    ///
    /// `a` was checked by [`super::delta_rule_in`].
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn neon<const PER_DIM: bool>(m: &mut [f32], a: &Args<'_>, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { columns::<Neon, PER_DIM>(m, a, out) }
    }
}

/// Every column of the state through every token, [`Lanes::GROUP`] columns at a time.
///
/// # Safety
///
/// The CPU has `V`'s features; `m` holds `s * s` values, `out` and the rows of `a` `n * s` (`n`
/// betas), the decays `n * s` with `PER_DIM`, else `n` (as [`delta_rule_in`] checks).
#[inline(always)]
unsafe fn columns<V: Lanes, const PER_DIM: bool>(m: &mut [f32], a: &Args<'_>, out: &mut [f32]) {
    let s = a.s;
    let mut j = 0;
    // SAFETY: (each call) columns j..j + G lie within m (the caller's contract).
    unsafe {
        while j + V::GROUP <= s {
            match V::GROUP {
                8 => group::<V, PER_DIM, 8>(m.as_mut_ptr(), j, a, out),
                _ => group::<V, PER_DIM, 4>(m.as_mut_ptr(), j, a, out),
            }
            j += V::GROUP;
        }
        while j < s {
            group::<V, PER_DIM, 1>(m.as_mut_ptr(), j, a, out);
            j += 1;
        }
    }
}

/// Columns `j0..j0 + G` of the state `m` through every token.
///
/// # Safety
///
/// As [`columns`], and `j0 + G <= s`.
#[inline(always)]
unsafe fn group<V: Lanes, const PER_DIM: bool, const G: usize>(
    m: *mut f32,
    j0: usize,
    a: &Args<'_>,
    out: &mut [f32],
) {
    let s = a.s;
    let w = V::W;
    // Vector blocks in pairs (two accumulators a column), then single blocks, then lanes.
    let pairs = s / (2 * w) * (2 * w);
    let body = s / w * w;
    let x = a.x;
    let cols: [*mut f32; G] = std::array::from_fn(|g| m.wrapping_add((j0 + g) * s));
    for (t, &beta) in x.beta.iter().enumerate() {
        let at = t * s;
        // SAFETY: (every access below) rows of k, q, kd (and the decays with PER_DIM) hold
        // `s` values from `at`, each column `s` from cols[g]; i < s.
        unsafe {
            let (k, q, kd) = (x.k.as_ptr().add(at), x.q.as_ptr().add(at), a.kd.as_ptr().add(at));
            let dv = if PER_DIM { x.decay.as_ptr().add(at) } else { k };
            let d1 = if PER_DIM { 1.0 } else { x.decay[t] };
            // The key dot products of the decayed columns, without writing them.
            let mut acc = [[V::splat(0.0); 2]; G];
            let mut i = 0;
            while i < pairs {
                let (k0, k1) = (V::load(kd.add(i)), V::load(kd.add(i + w)));
                for g in 0..G {
                    acc[g][0] = V::madd(V::load(cols[g].add(i)), k0, acc[g][0]);
                    acc[g][1] = V::madd(V::load(cols[g].add(i + w)), k1, acc[g][1]);
                }
                i += 2 * w;
            }
            if i < body {
                let k0 = V::load(kd.add(i));
                for g in 0..G {
                    acc[g][0] = V::madd(V::load(cols[g].add(i)), k0, acc[g][0]);
                }
            }
            let mut delta = [0f32; G];
            for g in 0..G {
                let mut mk = V::add(acc[g][0], acc[g][1]).sum();
                for i in body..s {
                    mk += *cols[g].add(i) * *kd.add(i);
                }
                delta[g] = beta * (x.v[at + j0 + g] - mk * d1);
            }
            // Decay, rank-one update, written back, and the query dot products.
            let dl = V::splat(d1);
            let dg: [V; G] = std::array::from_fn(|g| V::splat(delta[g]));
            let mut acc = [[V::splat(0.0); 2]; G];
            // One block at i into accumulator h of each column (a macro: inlined for certain).
            macro_rules! update {
                ($i:expr, $h:literal) => {{
                    let i = $i;
                    let (kb, qb) = (V::load(k.add(i)), V::load(q.add(i)));
                    let db = if PER_DIM { V::load(dv.add(i)) } else { dl };
                    for g in 0..G {
                        let c = cols[g].add(i);
                        let y = V::madd(kb, dg[g], V::mul(V::load(c), db));
                        y.store(c);
                        acc[g][$h] = V::madd(y, qb, acc[g][$h]);
                    }
                }};
            }
            let mut i = 0;
            while i < pairs {
                update!(i, 0);
                update!(i + w, 1);
                i += 2 * w;
            }
            if i < body {
                update!(i, 0);
            }
            for g in 0..G {
                let mut o = V::add(acc[g][0], acc[g][1]).sum();
                for i in body..s {
                    let d = if PER_DIM { *dv.add(i) } else { d1 };
                    let c = cols[g].add(i);
                    let y = *k.add(i) * delta[g] + *c * d;
                    *c = y;
                    o += y * *q.add(i);
                }
                out[at + j0 + g] = o * a.scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule in f64 with the state kept in f64 (the reference's formulation: decay, key dot
    /// product, update, query dot product), from f32 inputs; returns the outputs and the state.
    fn rule_f64(m: &[f32], s: usize, x: &DeltaTokens<'_>, scale: f64) -> (Vec<f64>, Vec<f64>) {
        let n = x.beta.len();
        let per_dim = x.decay.len() != n;
        let mut m: Vec<f64> = m.iter().map(|&v| f64::from(v)).collect();
        let mut out = vec![0f64; n * s];
        for t in 0..n {
            for i in 0..s {
                let d = f64::from(if per_dim { x.decay[t * s + i] } else { x.decay[t] });
                for j in 0..s {
                    m[i + j * s] *= d;
                }
            }
            let k = |i: usize| f64::from(x.k[t * s + i]);
            let delta: Vec<f64> = (0..s)
                .map(|j| {
                    let mk: f64 = (0..s).map(|i| m[i + j * s] * k(i)).sum();
                    f64::from(x.beta[t]) * (f64::from(x.v[t * s + j]) - mk)
                })
                .collect();
            for (j, dj) in delta.iter().enumerate() {
                for i in 0..s {
                    m[i + j * s] += k(i) * dj;
                }
            }
            for j in 0..s {
                let o: f64 = (0..s).map(|i| m[i + j * s] * f64::from(x.q[t * s + i])).sum();
                out[t * s + j] = o * scale;
            }
        }
        (out, m)
    }

    /// `n` values in [lo, hi) from a small LCG.
    fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
        let mut z = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                z = z.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                lo + (hi - lo) * ((z >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect()
    }

    /// Every element of `got` within `tol * (1 + |want|)` of `want`.
    fn close(what: &str, got: &[f32], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let e = (f64::from(g) - w).abs();
            assert!(e <= tol * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w} (error {e:e})");
        }
    }

    /// Every tier this CPU has against the f64 rule on sizes around the lane width and the
    /// column group (S = 1, 3, 15, 16, 17, 33, 128, 130), one and several tokens, one decay per
    /// token and one per key dim, each output and state element within 4e-7 (a few f32 ulps)
    /// of `1 + |its value|`.
    #[test]
    fn delta_rule_matches_f64_on_odd_sizes() -> Result<()> {
        let tiers: Vec<Tier> = Tier::ALL.into_iter().filter(|t| t.is_supported()).collect();
        assert!(tiers.len() > 1 || cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))));
        // Keys and queries L2-normalized, as the model feeds them (the state stays bounded).
        let unit = |mut v: Vec<f32>, s: usize| {
            for r in v.chunks_exact_mut(s) {
                let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
                r.iter_mut().for_each(|x| *x /= n);
            }
            v
        };
        let mut kd = Vec::new();
        for s in [1, 3, 15, 16, 17, 33, 128, 130] {
            for n in [1, 2, 9] {
                for per_dim in [false, true] {
                    let seed = (s * 100 + n) as u64;
                    let k = unit(values(n * s, seed, -1.0, 1.0), s);
                    let q = unit(values(n * s, seed + 1, -1.0, 1.0), s);
                    let v = values(n * s, seed + 2, -1.0, 1.0);
                    let g = values(if per_dim { n * s } else { n }, seed + 3, -1.0, 0.0);
                    let decay: Vec<f32> = g.iter().map(|g| g.exp()).collect();
                    let beta = values(n, seed + 4, 0.0, 1.0);
                    let m0 = values(s * s, seed + 5, -0.5, 0.5);
                    let x = DeltaTokens { k: &k, q: &q, v: &v, decay: &decay, beta: &beta };
                    let scale = 1.0 / (s as f32).sqrt();
                    let (want_o, want_m) = rule_f64(&m0, s, &x, f64::from(scale));
                    for &tier in &tiers {
                        let mut m = m0.clone();
                        let mut out = vec![f32::NAN; n * s];
                        delta_rule_in(tier, &mut m, s, &x, scale, &mut out, &mut kd)?;
                        let what = format!("{tier}: S {s}, {n} tokens, per dim {per_dim}");
                        close(&format!("{what}: outputs"), &out, &want_o, 4e-7);
                        close(&format!("{what}: state"), &m, &want_m, 4e-7);
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn delta_rule_refuses_mismatched_slices() {
        let z = [0f32; 8];
        let x = DeltaTokens { k: &z[..4], q: &z[..4], v: &z[..4], decay: &z[..2], beta: &z[..2] };
        let mut m = vec![0f32; 4];
        let mut out = vec![0f32; 4];
        let mut kd = Vec::new();
        assert!(delta_rule(&mut m, 2, &x, 1.0, &mut out, &mut kd).is_ok());
        assert!(delta_rule(&mut m[..3], 2, &x, 1.0, &mut out, &mut kd).is_err());
        let bad = DeltaTokens { decay: &z[..3], ..x };
        assert!(delta_rule(&mut m, 2, &bad, 1.0, &mut out, &mut kd).is_err());
        let bad = DeltaTokens { v: &z[..5], ..x };
        assert!(delta_rule(&mut m, 2, &bad, 1.0, &mut out[..4], &mut kd).is_err());
    }
}
