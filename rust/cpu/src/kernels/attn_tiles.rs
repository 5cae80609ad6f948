//! The tiled products and the online-softmax step of the CPU's attention kernel, on F32 blocks
//! stored key-major: a block of scores (then of weights) holds `s[j * r + i]` for key `j` and
//! query row `i` of `r`, so that the softmax runs across query rows in SIMD lanes and the
//! weighted sum of values broadcasts one weight per row.
//!
//! The scores come from [`scores_t`], one product with one operand's rows in the lanes (no
//! horizontal sums): the query rows (transposed once per unit of work, every key broadcast)
//! for blocks of at least [`LANES`] query rows (prompts), else the keys (each block of keys
//! transposed, every query row broadcast) for the few rows of generation. Either way each
//! score is the same chain of multiply-adds over the dimensions in order, so a row's scores do
//! not depend on the batch it came in (issue 38: the same logits whatever the batch). The
//! keys-in-lanes scores are row-major: [`softmax_rows`] runs the softmax step along each row,
//! with the bits [`softmax_block`] gives it, and [`transpose`] moves the blocks (pure data
//! movement, in SIMD tiles).
//!
//! As in [`super::vec`], each is one plain-Rust body compiled per tier (AVX-512, AVX2 + FMA,
//! NEON, scalar without fused multiply-adds) and picked at run time.

use super::tier::{active_tier, Tier};
use super::vec::{madd, LANES};

/// Which bodies (and register tiles) the active tier runs.
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

fn flavor() -> Flavor {
    match active_tier() {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx512Vnni => Flavor::Avx512,
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 => Flavor::Avx2,
        #[cfg(target_arch = "aarch64")]
        Tier::Neon | Tier::Dotprod | Tier::I8mm => Flavor::Neon,
        _ => Flavor::Scalar,
    }
}

/// A SIMD register of `W` F32 lanes, as the register tiles use it: arrays of these with
/// constant sizes stay in registers once the tile loops are unrolled (which arrays of scalar
/// lanes, 16 times as many operations to unroll, do not).
///
/// Every method is `unsafe`: the CPU must have the implementation's features, which the
/// callers (functions with those target features, chosen by the active tier) guarantee, and
/// pointers must be valid for `W` values.
trait Reg: Copy {
    /// Lanes.
    const W: usize;
    /// All lanes 0.
    unsafe fn zero() -> Self;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self;
    /// `W` values from `p` (any alignment).
    unsafe fn load(p: *const f32) -> Self;
    /// The lanes to `p` (any alignment).
    unsafe fn store(self, p: *mut f32);
    /// `self + a b`, fused where the tier has FMA.
    unsafe fn madd(self, a: Self, b: Self) -> Self;
}

/// One F32 lane without fused multiply-adds (the scalar tier).
#[derive(Clone, Copy)]
struct One(f32);

impl Reg for One {
    const W: usize = 1;
    unsafe fn zero() -> Self {
        One(0.0)
    }
    unsafe fn splat(x: f32) -> Self {
        One(x)
    }
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: p is readable (the trait's contract).
        One(unsafe { p.read_unaligned() })
    }
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: p is writable (the trait's contract).
        unsafe { p.write_unaligned(self.0) }
    }
    unsafe fn madd(self, a: Self, b: Self) -> Self {
        One(madd::<false>(a.0, b.0, self.0))
    }
}

#[cfg(target_arch = "aarch64")]
mod neon_reg {
    use super::Reg;
    use std::arch::aarch64::*;

    /// A NEON register of 4 lanes.
    #[derive(Clone, Copy)]
    pub(super) struct Q(float32x4_t);

    impl Reg for Q {
        const W: usize = 4;
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: NEON is baseline on aarch64.
            Q(unsafe { vdupq_n_f32(0.0) })
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            // SAFETY: NEON is baseline on aarch64.
            Q(unsafe { vdupq_n_f32(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: 4 values are readable at p (the trait's contract).
            Q(unsafe { vld1q_f32(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: 4 values are writable at p (the trait's contract).
            unsafe { vst1q_f32(p, self.0) }
        }
        #[inline(always)]
        unsafe fn madd(self, a: Self, b: Self) -> Self {
            // SAFETY: NEON is baseline on aarch64.
            Q(unsafe { vfmaq_f32(self.0, a.0, b.0) })
        }
    }
}

/// Implements [`Reg`] for `$name($vec)`, `$w` lanes, with the intrinsics of one x86 vector
/// width.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_reg {
    ($doc:literal, $name:ident, $vec:ty, $w:literal,
     $zero:ident, $splat:ident, $load:ident, $store:ident, $fmadd:ident) => {
        #[doc = $doc]
        #[derive(Clone, Copy)]
        pub(super) struct $name($vec);

        impl Reg for $name {
            const W: usize = $w;
            #[inline(always)]
            unsafe fn zero() -> Self {
                // SAFETY: the CPU has the features (the trait's contract).
                $name(unsafe { $zero() })
            }
            #[inline(always)]
            unsafe fn splat(x: f32) -> Self {
                // SAFETY: the CPU has the features (the trait's contract).
                $name(unsafe { $splat(x) })
            }
            #[inline(always)]
            unsafe fn load(p: *const f32) -> Self {
                // SAFETY: W values are readable at p, and the CPU has the features.
                $name(unsafe { $load(p) })
            }
            #[inline(always)]
            unsafe fn store(self, p: *mut f32) {
                // SAFETY: W values are writable at p, and the CPU has the features.
                unsafe { $store(p, self.0) }
            }
            #[inline(always)]
            unsafe fn madd(self, a: Self, b: Self) -> Self {
                // SAFETY: the CPU has the features (FMA; the trait's contract).
                $name(unsafe { $fmadd(a.0, b.0, self.0) })
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod x86_reg {
    use super::Reg;
    use std::arch::x86_64::*;

    x86_reg!(
        "An AVX register of 8 lanes (with FMA).",
        Y,
        __m256,
        8,
        _mm256_setzero_ps,
        _mm256_set1_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_fmadd_ps
    );
    x86_reg!(
        "An AVX-512 register of 16 lanes.",
        Z,
        __m512,
        16,
        _mm512_setzero_ps,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_fmadd_ps
    );
}

/// `TJ` keys against `RV` registers of transposed query rows from `i0`: `TJ x RV` accumulators,
/// each key value broadcast once, each query register loaded once per `TJ` keys.
///
/// # Safety
///
/// `V`'s features are present; rows `i0..i0 + RV * W` lie within `r` and keys `j0..j0 + TJ`
/// within the operands (`qt`: `d x r`, `k`: keys of `d`, `out`: keys of `r`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_t_tile<V: Reg, const TJ: usize, const RV: usize>(
    qt: &[f32],
    r: usize,
    i0: usize,
    k: &[f32],
    d: usize,
    j0: usize,
    out: &mut [f32],
) {
    // SAFETY: every access is within the bounds the caller guarantees.
    unsafe {
        let mut acc = [[V::zero(); RV]; TJ];
        let (qp, kp) = (qt.as_ptr().add(i0), k.as_ptr().add(j0 * d));
        for c in 0..d {
            let mut q = [V::zero(); RV];
            for (v, q) in q.iter_mut().enumerate() {
                *q = V::load(qp.add(c * r + v * V::W));
            }
            for (jj, acc) in acc.iter_mut().enumerate() {
                let x = V::splat(*kp.add(jj * d + c));
                for v in 0..RV {
                    acc[v] = acc[v].madd(x, q[v]);
                }
            }
        }
        let op = out.as_mut_ptr().add(j0 * r + i0);
        for (jj, acc) in acc.iter().enumerate() {
            for (v, a) in acc.iter().enumerate() {
                a.store(op.add(jj * r + v * V::W));
            }
        }
    }
}

/// # Safety
///
/// `V`'s features are present; the shapes were checked (`r` a multiple of `W`).
#[inline(always)]
unsafe fn scores_t_body<V: Reg, const TJ: usize, const RV: usize>(
    qt: &[f32],
    r: usize,
    k: &[f32],
    nk: usize,
    d: usize,
    out: &mut [f32],
) {
    let mut i0 = 0;
    while i0 < r {
        let wide = r - i0 >= RV * V::W;
        let mut j0 = 0;
        while j0 < nk {
            // Keys per tile: TJ, else 4 (the few query rows of generation, when the keys are
            // in the lanes), else 1. Every tile makes the same chain per score.
            let left = nk - j0;
            let step = if left >= TJ {
                TJ
            } else if left >= 4 {
                4
            } else {
                1
            };
            // SAFETY: the tile's rows and keys are within r and nk (just checked).
            unsafe {
                match (wide, step) {
                    (true, s) if s == TJ => scores_t_tile::<V, TJ, RV>(qt, r, i0, k, d, j0, out),
                    (true, 4) => scores_t_tile::<V, 4, RV>(qt, r, i0, k, d, j0, out),
                    (true, _) => scores_t_tile::<V, 1, RV>(qt, r, i0, k, d, j0, out),
                    (false, s) if s == TJ => scores_t_tile::<V, TJ, 1>(qt, r, i0, k, d, j0, out),
                    (false, 4) => scores_t_tile::<V, 4, 1>(qt, r, i0, k, d, j0, out),
                    (false, _) => scores_t_tile::<V, 1, 1>(qt, r, i0, k, d, j0, out),
                }
            }
            j0 += step;
        }
        i0 += if wide { RV * V::W } else { V::W };
    }
}

/// `TI` accumulator rows from `i0`, `CV` registers of columns from `c0`, over every key: one
/// weight broadcast per row, each value register loaded once per `TI` rows; keys that weigh
/// zero for every row of the tile (hidden) are skipped.
///
/// # Safety
///
/// `V`'s features are present; rows `i0..i0 + TI` lie within the accumulator's rows and
/// columns `c0..c0 + CV * W` within `dv`, for operands of the checked shapes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn weighted_sum_t_tile<V: Reg, const TI: usize, const CV: usize>(
    acc: &mut [f32],
    dv: usize,
    i0: usize,
    c0: usize,
    p: &[f32],
    r: usize,
    v: &[f32],
    nk: usize,
) {
    // SAFETY: every access is within the bounds the caller guarantees.
    unsafe {
        let ap = acc.as_mut_ptr().add(i0 * dv + c0);
        let mut t = [[V::zero(); CV]; TI];
        for (ii, row) in t.iter_mut().enumerate() {
            for (cv, x) in row.iter_mut().enumerate() {
                *x = V::load(ap.add(ii * dv + cv * V::W));
            }
        }
        let (pp, vp) = (p.as_ptr().add(i0), v.as_ptr().add(c0));
        for j in 0..nk {
            let mut w = [0f32; TI];
            for (ii, w) in w.iter_mut().enumerate() {
                *w = *pp.add(j * r + ii);
            }
            if w.iter().all(|&x| x == 0.0) {
                continue;
            }
            let mut x = [V::zero(); CV];
            for (cv, x) in x.iter_mut().enumerate() {
                *x = V::load(vp.add(j * dv + cv * V::W));
            }
            for (row, &wi) in t.iter_mut().zip(&w) {
                let wv = V::splat(wi);
                for cv in 0..CV {
                    row[cv] = row[cv].madd(wv, x[cv]);
                }
            }
        }
        for (ii, row) in t.iter().enumerate() {
            for (cv, x) in row.iter().enumerate() {
                x.store(ap.add(ii * dv + cv * V::W));
            }
        }
    }
}

/// # Safety
///
/// `V`'s features are present; the shapes were checked.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn weighted_sum_t_body<V: Reg, const TI: usize, const CV: usize>(
    acc: &mut [f32],
    na: usize,
    dv: usize,
    p: &[f32],
    r: usize,
    v: &[f32],
    nk: usize,
) {
    let mut i0 = 0;
    while i0 < na {
        let tall = na - i0 >= TI;
        let mut c0 = 0;
        while c0 + V::W <= dv {
            let wide = dv - c0 >= CV * V::W;
            // SAFETY: the tile's rows and columns are within na and dv (just checked).
            unsafe {
                match (tall, wide) {
                    (true, true) => weighted_sum_t_tile::<V, TI, CV>(acc, dv, i0, c0, p, r, v, nk),
                    (true, false) => weighted_sum_t_tile::<V, TI, 1>(acc, dv, i0, c0, p, r, v, nk),
                    (false, true) => weighted_sum_t_tile::<V, 1, CV>(acc, dv, i0, c0, p, r, v, nk),
                    (false, false) => weighted_sum_t_tile::<V, 1, 1>(acc, dv, i0, c0, p, r, v, nk),
                }
            }
            c0 += if wide { CV * V::W } else { V::W };
        }
        let rows = if tall { TI } else { 1 };
        for i in i0..i0 + rows {
            for c in c0..dv {
                let mut x = acc[i * dv + c];
                for j in 0..nk {
                    x += p[j * r + i] * v[j * dv + c];
                }
                acc[i * dv + c] = x;
            }
        }
        i0 += rows;
    }
}

/// `e^x` for `x <= 0` from arithmetic alone (so that it vectorizes): `2^n e^f` with `n` the
/// nearest integer to `x / ln 2` and Cephes' degree-6 polynomial for `e^f`, `|f| <= ln 2 / 2`;
/// within 2 ulp of `expf`, exactly 0 below -87.3 (and for -inf).
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LO: f32 = -87.3;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let xc = x.clamp(LO, 0.0);
    let t = xc.mul_add(LOG2E, MAGIC);
    let n = t - MAGIC;
    let f = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, xc));
    let mut y = 1.987_569_1e-4_f32;
    y = y.mul_add(f, 1.398_199_9e-3);
    y = y.mul_add(f, 8.333_452e-3);
    y = y.mul_add(f, 4.166_579_6e-2);
    y = y.mul_add(f, 0.166_666_65);
    y = y.mul_add(f, 0.5);
    y = y.mul_add(f * f, f) + 1.0;
    let bits = (t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32 + 127) << 23;
    let e = y * f32::from_bits(bits as u32);
    if x < LO {
        0.0
    } else {
        e
    }
}

/// The bias of a block: `mask[j * r + i]` (key-major, as the scores) and the slope of each row.
#[derive(Clone, Copy)]
pub struct Bias<'a> {
    /// Mask values of the block, key-major; -inf hides a key from a row.
    pub mask: &'a [f32],
    /// ALiBi slope of each row (1 without ALiBi).
    pub slopes: &'a [f32],
}

/// What the softmax step of one block does to its scores.
#[derive(Clone, Copy)]
pub struct Scoring<'a> {
    /// Applied to every score first.
    pub scale: f32,
    /// Soft cap `c` (scores become `c tanh(s / c)`), 0 for none.
    pub softcap: f32,
    /// The mask with its slopes, if any.
    pub bias: Option<Bias<'a>>,
}

/// The running softmax of `r` rows.
pub struct RunningRows<'a> {
    /// Largest score of each row so far (-inf while every key was hidden).
    pub max: &'a mut [f32],
    /// Sum of each row's weights so far, relative to `max`.
    pub sum: &'a mut [f32],
    /// Set by the step: the factor by which each row's accumulated values must be multiplied
    /// (1 when its maximum did not change).
    pub rescale: &'a mut [f32],
}

#[inline(always)]
fn softmax_block_body(s: &mut [f32], r: usize, nk: usize, how: Scoring<'_>, run: RunningRows<'_>) {
    let RunningRows { max, sum, rescale } = run;
    let (max, sum, rescale) = (&mut max[..r], &mut sum[..r], &mut rescale[..r]);
    let block_max = rescale;
    block_max.fill(f32::NEG_INFINITY);
    for j in 0..nk {
        let row = &mut s[j * r..][..r];
        for x in row.iter_mut() {
            *x *= how.scale;
        }
        if how.softcap > 0.0 {
            for x in row.iter_mut() {
                *x = how.softcap * (*x / how.softcap).tanh();
            }
        }
        if let Some(b) = how.bias {
            let (m, sl) = (&b.mask[j * r..][..r], &b.slopes[..r]);
            for i in 0..r {
                let x = row[i] + sl[i] * m[i];
                row[i] = if m[i] == f32::NEG_INFINITY { f32::NEG_INFINITY } else { x };
            }
        }
        for (bm, &x) in block_max.iter_mut().zip(row.iter()) {
            *bm = bm.max(x);
        }
    }
    // The new maxima; the rescale factor of each row replaces its block maximum.
    for i in 0..r {
        let new = max[i].max(block_max[i]);
        let c = if new == f32::NEG_INFINITY || new == max[i] {
            1.0
        } else {
            exp_nonpositive(max[i] - new)
        };
        sum[i] *= c;
        max[i] = new;
        block_max[i] = c;
    }
    for j in 0..nk {
        let row = &mut s[j * r..][..r];
        for i in 0..r {
            // Rows with every key hidden so far keep a max of -inf: shift by 0, weights 0.
            let shift = if max[i] == f32::NEG_INFINITY { 0.0 } else { max[i] };
            let e = exp_nonpositive(row[i] - shift);
            row[i] = e;
            sum[i] += e;
        }
    }
}

/// The bias of a block for [`softmax_rows`]: row `i`'s mask values at
/// `mask[(i / group) * stride..][..nk]` (the `group` heads of one query share its mask row) and
/// the slope of each row.
#[derive(Clone, Copy)]
pub struct RowBias<'a> {
    /// Mask values of the block, one row per query; -inf hides a key.
    pub mask: &'a [f32],
    /// Distance between two queries' mask rows.
    pub stride: usize,
    /// Consecutive rows that share a mask row (at least 1).
    pub group: usize,
    /// ALiBi slope of each row (1 without ALiBi).
    pub slopes: &'a [f32],
}

/// [`softmax_block_body`] on row-major scores (`s[i * ld + j]`): the same operations on each
/// row in the same order (scale, cap, bias, maximum, weights, then the sums key by key), so a
/// row gets the same bits either way; here each row's passes run along its keys, in SIMD
/// lanes even for the few rows of generation.
#[inline(always)]
fn softmax_rows_body(
    s: &mut [f32],
    ld: usize,
    (rows, nk): (usize, usize),
    (scale, softcap, bias): (f32, f32, Option<RowBias<'_>>),
    run: RunningRows<'_>,
) {
    let RunningRows { max, sum, rescale } = run;
    for i in 0..rows {
        let row = &mut s[i * ld..][..nk];
        for x in row.iter_mut() {
            *x *= scale;
        }
        if softcap > 0.0 {
            for x in row.iter_mut() {
                *x = softcap * (*x / softcap).tanh();
            }
        }
        if let Some(b) = bias {
            let (m, sl) = (&b.mask[(i / b.group) * b.stride..][..nk], b.slopes[i]);
            for (x, &m) in row.iter_mut().zip(m) {
                let y = *x + sl * m;
                *x = if m == f32::NEG_INFINITY { f32::NEG_INFINITY } else { y };
            }
        }
        let block_max = row.iter().fold(f32::NEG_INFINITY, |bm, &x| bm.max(x));
        let new = max[i].max(block_max);
        let c = if new == f32::NEG_INFINITY || new == max[i] {
            1.0
        } else {
            exp_nonpositive(max[i] - new)
        };
        sum[i] *= c;
        max[i] = new;
        rescale[i] = c;
        let shift = if new == f32::NEG_INFINITY { 0.0 } else { new };
        for x in row.iter_mut() {
            *x = exp_nonpositive(*x - shift);
        }
    }
    // The sums key by key, every row's chain in step (as the key-major body adds them).
    for j in 0..nk {
        for i in 0..rows {
            sum[i] += s[i * ld + j];
        }
    }
}

/// Instantiates the bodies inside functions with one x86 tier's target features `$feat`, on
/// registers `$reg`, with the register tiles `$tj x $rv` (scores) and `$tw x $cv` (weighted
/// sums).
#[cfg(target_arch = "x86_64")]
macro_rules! x86_bodies {
    ($mod:ident, $feat:literal, $reg:ty, scores: [$tj:literal, $rv:literal],
     weighted: [$tw:literal, $cv:literal]) => {
        pub(super) mod $mod {
            use super::super::{RowBias, RunningRows, Scoring};

            #[target_feature(enable = $feat)]
            pub(in super::super) fn scores_t(
                qt: &[f32],
                r: usize,
                k: &[f32],
                nk: usize,
                d: usize,
                out: &mut [f32],
            ) {
                // SAFETY: the register's features are enabled here; the caller checked the
                // shapes.
                unsafe { super::super::scores_t_body::<$reg, $tj, $rv>(qt, r, k, nk, d, out) }
            }

            #[target_feature(enable = $feat)]
            #[allow(clippy::too_many_arguments)]
            pub(in super::super) fn weighted_sum_t(
                acc: &mut [f32],
                na: usize,
                dv: usize,
                p: &[f32],
                r: usize,
                v: &[f32],
                nk: usize,
            ) {
                // SAFETY: as in `scores_t`.
                unsafe {
                    super::super::weighted_sum_t_body::<$reg, $tw, $cv>(acc, na, dv, p, r, v, nk)
                }
            }

            #[target_feature(enable = $feat)]
            pub(in super::super) fn softmax_block(
                s: &mut [f32],
                r: usize,
                nk: usize,
                how: Scoring<'_>,
                run: RunningRows<'_>,
            ) {
                super::super::softmax_block_body(s, r, nk, how, run)
            }

            #[target_feature(enable = $feat)]
            pub(in super::super) fn softmax_rows(
                s: &mut [f32],
                ld: usize,
                shape: (usize, usize),
                how: (f32, f32, Option<RowBias<'_>>),
                run: RunningRows<'_>,
            ) {
                super::super::softmax_rows_body(s, ld, shape, how, run)
            }
        }
    };
}

/// The bodies in each x86 tier's target features.
#[cfg(target_arch = "x86_64")]
mod x86 {
    x86_bodies!(
        avx512,
        "avx2,fma,f16c,avx512f",
        super::super::x86_reg::Z,
        scores: [8, 2],
        weighted: [4, 4]
    );
    x86_bodies!(
        avx2,
        "avx2,fma,f16c",
        super::super::x86_reg::Y,
        scores: [4, 2],
        weighted: [4, 2]
    );
}

/// `out[j * r + i] = sum_c k[j * d + c] qt[c * r + i]`: `nk` keys (rows of `d` in `k`) against
/// `r` query rows stored transposed (`qt`: `d` rows of `r`), `r` a multiple of [`LANES`].
///
/// # Panics
///
/// When `r` is not a multiple of [`LANES`] or a slice is shorter than its rows need.
pub fn scores_t(qt: &[f32], r: usize, k: &[f32], nk: usize, d: usize, out: &mut [f32]) {
    assert!(
        r.is_multiple_of(LANES) && qt.len() >= d * r && k.len() >= nk * d && out.len() >= nk * r,
        "scores_t: shapes"
    );
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX-512 VNNI tier was chosen only on a CPU with AVX-512 F, AVX2, FMA and
        // F16C.
        Flavor::Avx512 => unsafe { x86::avx512::scores_t(qt, r, k, nk, d, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 tier was chosen only on a CPU with AVX2, FMA and F16C.
        Flavor::Avx2 => unsafe { x86::avx2::scores_t(qt, r, k, nk, d, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline on aarch64; the shapes were checked above.
        Flavor::Neon => unsafe { scores_t_body::<neon_reg::Q, 4, 4>(qt, r, k, nk, d, out) },
        // SAFETY: the scalar register needs no feature; the shapes were checked above.
        _ => unsafe { scores_t_body::<One, 4, 4>(qt, r, k, nk, d, out) },
    }
}

/// `acc[i * dv + c] += sum_j p[j * r + i] v[j * dv + c]` for the `na` rows of `acc` (`dv` values
/// each), weights key-major with row stride `r >= na`, `nk` rows of `v`.
///
/// # Panics
///
/// When `r < na` or a slice is shorter than its rows need.
pub fn weighted_sum_t(
    acc: &mut [f32],
    na: usize,
    dv: usize,
    p: &[f32],
    r: usize,
    v: &[f32],
    nk: usize,
) {
    assert!(
        r >= na && acc.len() >= na * dv && p.len() >= nk * r && v.len() >= nk * dv,
        "weighted_sum_t: shapes"
    );
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores_t`.
        Flavor::Avx512 => unsafe { x86::avx512::weighted_sum_t(acc, na, dv, p, r, v, nk) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores_t`.
        Flavor::Avx2 => unsafe { x86::avx2::weighted_sum_t(acc, na, dv, p, r, v, nk) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as in `scores_t`.
        Flavor::Neon => unsafe {
            weighted_sum_t_body::<neon_reg::Q, 4, 4>(acc, na, dv, p, r, v, nk)
        },
        // SAFETY: as in `scores_t`.
        _ => unsafe { weighted_sum_t_body::<One, 4, 4>(acc, na, dv, p, r, v, nk) },
    }
}

/// The online-softmax step of one key-major block of scores `s` (`nk` keys of `r` rows): scores
/// scaled, capped and biased as `how` says, each row's running maximum and sum updated, the
/// scores replaced by their weights `e^(s - max)` (0 for hidden keys), and `run.rescale` set.
///
/// # Panics
///
/// When a slice is shorter than `r` (the running rows, the slopes) or than the block.
pub fn softmax_block(s: &mut [f32], r: usize, nk: usize, how: Scoring<'_>, run: RunningRows<'_>) {
    assert!(
        s.len() >= nk * r
            && run.max.len() >= r
            && run.sum.len() >= r
            && run.rescale.len() >= r
            && how.bias.is_none_or(|b| b.mask.len() >= nk * r && b.slopes.len() >= r),
        "softmax_block: shapes"
    );
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores_t`.
        Flavor::Avx512 => unsafe { x86::avx512::softmax_block(s, r, nk, how, run) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores_t`.
        Flavor::Avx2 => unsafe { x86::avx2::softmax_block(s, r, nk, how, run) },
        _ => softmax_block_body(s, r, nk, how, run),
    }
}

/// [`softmax_block`] for scores stored row-major (`s[i * ld + j]`, key `j` of row `i < rows`),
/// as the keys-in-lanes products of generation leave them: each row scaled by `scale`, capped
/// by `softcap` (0: none), biased by `bias`, its running maximum and sum updated and its scores
/// replaced by their weights, with the same bits as [`softmax_block`] gives the row.
///
/// # Panics
///
/// When `ld < nk`, a slice is shorter than `rows` (the running rows, the slopes) or than the
/// block, or the bias's group is 0.
pub fn softmax_rows(
    s: &mut [f32],
    ld: usize,
    (rows, nk): (usize, usize),
    (scale, softcap, bias): (f32, f32, Option<RowBias<'_>>),
    run: RunningRows<'_>,
) {
    assert!(
        ld >= nk
            && (rows == 0 || s.len() >= (rows - 1) * ld + nk)
            && run.max.len() >= rows
            && run.sum.len() >= rows
            && run.rescale.len() >= rows
            && bias.is_none_or(|b| {
                b.group > 0
                    && b.slopes.len() >= rows
                    && (rows == 0 || b.mask.len() >= (rows - 1) / b.group * b.stride + nk)
            }),
        "softmax_rows: shapes"
    );
    let (shape, how) = ((rows, nk), (scale, softcap, bias));
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores_t`.
        Flavor::Avx512 => unsafe { x86::avx512::softmax_rows(s, ld, shape, how, run) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores_t`.
        Flavor::Avx2 => unsafe { x86::avx2::softmax_rows(s, ld, shape, how, run) },
        _ => softmax_rows_body(s, ld, shape, how, run),
    }
}

/// `dst[c * ld + j] = src[j * d + c]` for the `n` rows of `d` values in `src`: each row becomes a
/// column of `dst`, whose rows are `ld >= n` apart (generation's block of keys put into the lanes,
/// a prompt's query rows transposed). Pure data movement: every tier writes the same bits, in
/// 8 x 8 AVX tiles on x86, 4 x 4 NEON tiles on aarch64, element by element on the scalar tier and
/// at the edges.
///
/// # Panics
///
/// When `ld < n` or a slice is shorter than its rows need.
pub fn transpose(src: &[f32], n: usize, d: usize, dst: &mut [f32], ld: usize) {
    assert!(
        ld >= n && src.len() >= n * d && (d == 0 || dst.len() >= (d - 1) * ld + n),
        "transpose: shapes"
    );
    let tiled = match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 and AVX-512 tiers were chosen only on a CPU with AVX2; the shapes
        // were checked above.
        Flavor::Avx512 | Flavor::Avx2 => unsafe { x86_transpose::tiles(src, n, d, dst, ld) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline on aarch64; the shapes were checked above.
        Flavor::Neon => unsafe { neon_transpose::tiles(src, n, d, dst, ld) },
        _ => (0, 0),
    };
    transpose_edges(src, n, d, dst, ld, tiled);
}

/// The elements [`transpose`]'s tiles left: with `(tn, td)` the rows and columns the tiles
/// covered (whole tiles from 0), every element of a row at or past `tn` or a column at or past
/// `td`.
fn transpose_edges(
    src: &[f32],
    n: usize,
    d: usize,
    dst: &mut [f32],
    ld: usize,
    (tn, td): (usize, usize),
) {
    for j in 0..n {
        let c0 = if j < tn { td } else { 0 };
        for c in c0..d {
            dst[c * ld + j] = src[j * d + c];
        }
    }
}

/// [`transpose`] in 8 x 8 tiles of AVX registers (unpack, shuffle, lane permute).
#[cfg(target_arch = "x86_64")]
mod x86_transpose {
    use std::arch::x86_64::*;

    /// Transposes the whole 8 x 8 tiles of `src` (rows of `d`) into `dst` (rows of `ld`);
    /// returns the rows and columns they covered.
    ///
    /// # Safety
    ///
    /// The CPU has AVX2; the slices hold `n` rows of `d` and `d` rows of `ld >= n` (checked by
    /// [`super::transpose`]).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tiles(
        src: &[f32],
        n: usize,
        d: usize,
        dst: &mut [f32],
        ld: usize,
    ) -> (usize, usize) {
        let (tn, td) = (n / 8 * 8, d / 8 * 8);
        let (s, o) = (src.as_ptr(), dst.as_mut_ptr());
        for j0 in (0..tn).step_by(8) {
            for c0 in (0..td).step_by(8) {
                // SAFETY: rows j0..j0 + 8 of src have columns c0..c0 + 8 (j0 + 8 <= n,
                // c0 + 8 <= d), and rows c0..c0 + 8 of dst have columns j0..j0 + 8 (ld >= n);
                // the caller guarantees AVX.
                unsafe {
                    let r = |i: usize| _mm256_loadu_ps(s.add((j0 + i) * d + c0));
                    let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
                    let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
                    // Pairs of rows interleaved, then quads: columns c, c + 4 of four rows.
                    let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
                    let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
                    let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
                    let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
                    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                    let u1 = _mm256_shuffle_ps::<0xee>(t0, t2);
                    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                    let u3 = _mm256_shuffle_ps::<0xee>(t1, t3);
                    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                    let u5 = _mm256_shuffle_ps::<0xee>(t4, t6);
                    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                    let u7 = _mm256_shuffle_ps::<0xee>(t5, t7);
                    let w = |c: usize, v: __m256| _mm256_storeu_ps(o.add((c0 + c) * ld + j0), v);
                    w(0, _mm256_permute2f128_ps::<0x20>(u0, u4));
                    w(1, _mm256_permute2f128_ps::<0x20>(u1, u5));
                    w(2, _mm256_permute2f128_ps::<0x20>(u2, u6));
                    w(3, _mm256_permute2f128_ps::<0x20>(u3, u7));
                    w(4, _mm256_permute2f128_ps::<0x31>(u0, u4));
                    w(5, _mm256_permute2f128_ps::<0x31>(u1, u5));
                    w(6, _mm256_permute2f128_ps::<0x31>(u2, u6));
                    w(7, _mm256_permute2f128_ps::<0x31>(u3, u7));
                }
            }
        }
        (tn, td)
    }
}

/// [`transpose`] in 4 x 4 tiles of NEON registers (32- then 64-bit transposes).
#[cfg(target_arch = "aarch64")]
mod neon_transpose {
    use std::arch::aarch64::*;

    /// Transposes the whole 4 x 4 tiles of `src` (rows of `d`) into `dst` (rows of `ld`);
    /// returns the rows and columns they covered.
    ///
    /// # Safety
    ///
    /// The slices hold `n` rows of `d` and `d` rows of `ld >= n` (checked by
    /// [`super::transpose`]).
    pub(super) unsafe fn tiles(
        src: &[f32],
        n: usize,
        d: usize,
        dst: &mut [f32],
        ld: usize,
    ) -> (usize, usize) {
        let (tn, td) = (n / 4 * 4, d / 4 * 4);
        let (s, o) = (src.as_ptr(), dst.as_mut_ptr());
        for j0 in (0..tn).step_by(4) {
            for c0 in (0..td).step_by(4) {
                // SAFETY: rows j0..j0 + 4 of src have columns c0..c0 + 4, rows c0..c0 + 4 of
                // dst have columns j0..j0 + 4 (as in the x86 tiles); NEON is baseline.
                unsafe {
                    let r = |i: usize| vld1q_f32(s.add((j0 + i) * d + c0));
                    let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
                    let (t0, t1) = (vtrn1q_f32(r0, r1), vtrn2q_f32(r0, r1));
                    let (t2, t3) = (vtrn1q_f32(r2, r3), vtrn2q_f32(r2, r3));
                    let f = vreinterpretq_f64_f32;
                    let w = |c: usize, v: float64x2_t| {
                        vst1q_f32(o.add((c0 + c) * ld + j0), vreinterpretq_f32_f64(v))
                    };
                    w(0, vtrn1q_f64(f(t0), f(t2)));
                    w(1, vtrn1q_f64(f(t1), f(t3)));
                    w(2, vtrn2q_f64(f(t0), f(t2)));
                    w(3, vtrn2q_f64(f(t1), f(t3)));
                }
            }
        }
        (tn, td)
    }
}

#[cfg(test)]
mod tests {
    use super::super::vec::tests::data;
    use super::*;

    fn close(got: f32, want: f64, what: &str) {
        assert!(
            (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "{what}: {got} vs {want}"
        );
    }

    #[test]
    fn products_match_f64_on_odd_shapes() {
        for (na, nk, d) in
            [(1usize, 1usize, 1usize), (3, 5, 17), (8, 64, 256), (5, 7, 33), (32, 64, 256)]
        {
            let r = na.next_multiple_of(LANES);
            let (a, b) = (data(na * d, 2), data(nk * d, 5));
            let want = |i: usize, j: usize| -> f64 {
                (0..d).map(|t| f64::from(a[i * d + t]) * f64::from(b[j * d + t])).sum()
            };
            let mut qt = vec![0f32; d * r];
            for i in 0..na {
                for c in 0..d {
                    qt[c * r + i] = a[i * d + c];
                }
            }
            let mut out_t = vec![f32::NAN; nk * r];
            scores_t(&qt, r, &b, nk, d, &mut out_t);
            // The roles swapped (the keys in the lanes, as for generation's few rows): the same
            // bits, not merely close values.
            let nkp = nk.next_multiple_of(LANES);
            let mut kt = vec![0f32; d * nkp];
            for j in 0..nk {
                for c in 0..d {
                    kt[c * nkp + j] = b[j * d + c];
                }
            }
            let mut out_k = vec![f32::NAN; na * nkp];
            scores_t(&kt, nkp, &a, na, d, &mut out_k);
            for i in 0..na {
                for j in 0..nk {
                    assert_eq!(
                        out_k[i * nkp + j].to_bits(),
                        out_t[j * r + i].to_bits(),
                        "scores_t swapped {na}x{nk}x{d} [{i},{j}]"
                    );
                    close(
                        out_t[j * r + i],
                        want(i, j),
                        &format!("scores_t {na}x{nk}x{d} [{i},{j}]"),
                    );
                }
            }
            for dv in [d, d + 3, 64, 256] {
                let (mut acc, mut p, v) = (data(na * dv, 9), data(nk * r, 11), data(nk * dv, 13));
                p[0] = 0.0;
                let acc0 = acc.clone();
                weighted_sum_t(&mut acc, na, dv, &p, r, &v, nk);
                for i in 0..na {
                    for c in 0..dv {
                        let want = f64::from(acc0[i * dv + c])
                            + (0..nk)
                                .map(|j| f64::from(p[j * r + i]) * f64::from(v[j * dv + c]))
                                .sum::<f64>();
                        close(acc[i * dv + c], want, &format!("weighted_sum_t dv={dv} [{i},{c}]"));
                    }
                }
            }
        }
    }

    #[test]
    fn transpose_moves_every_element_on_odd_shapes() {
        for (n, d, pad) in
            [(0usize, 5usize, 0usize), (1, 1, 0), (8, 8, 0), (5, 17, 3), (64, 64, 0), (13, 33, 16)]
        {
            let src = data(n * d, 3);
            let ld = n + pad;
            let mut dst = vec![f32::NAN; d * ld];
            transpose(&src, n, d, &mut dst, ld);
            for c in 0..d {
                for j in 0..ld {
                    let got = dst[c * ld + j];
                    if j < n {
                        assert_eq!(got.to_bits(), src[j * d + c].to_bits(), "{n}x{d} [{c},{j}]");
                    } else {
                        assert!(got.is_nan(), "{n}x{d}: padding [{c},{j}] written");
                    }
                }
            }
        }
    }

    #[test]
    fn exp_is_within_two_ulp_of_expf_and_zero_when_hidden() {
        let mut x = 0.0f32;
        while x > -87.0 {
            let (got, want) = (exp_nonpositive(x), x.exp());
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}) = {got}, expf {want} ({ulp} ulp)");
            x -= 0.0137;
        }
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
    }

    #[test]
    fn softmax_block_matches_f64_across_two_blocks() {
        // Two blocks of 5 keys for 3 rows (stride 4), row 1 hidden from every key of the first
        // block and row 2 from key 0 of both; row 0 with slope 0.5.
        let (r, nk) = (4, 5);
        let (b1, b2) = (data(nk * r, 3), data(nk * r, 8));
        let mut mask = vec![0.25f32; nk * r];
        for j in 0..nk {
            mask[j * r + 1] = f32::NEG_INFINITY;
        }
        mask[2] = f32::NEG_INFINITY;
        let mut mask2 = vec![-0.5f32; nk * r];
        mask2[2] = f32::NEG_INFINITY;
        let slopes = [0.5, 1.0, 1.0, 1.0];
        let (mut max, mut sum, mut rescale) =
            (vec![f32::NEG_INFINITY; r], vec![0f32; r], vec![0f32; r]);
        let scale = 0.7;
        let mut acc_w = vec![vec![0f64; 2 * nk]; r];
        let mut logits = vec![vec![f64::NEG_INFINITY; 2 * nk]; r];
        for (blk, (scores, m)) in [(&b1, &mask), (&b2, &mask2)].into_iter().enumerate() {
            let mut s = scores.clone();
            let how =
                Scoring { scale, softcap: 0.0, bias: Some(Bias { mask: m, slopes: &slopes }) };
            let run = RunningRows { max: &mut max, sum: &mut sum, rescale: &mut rescale };
            softmax_block(&mut s, r, nk, how, run);
            for i in 0..3 {
                for prev in acc_w[i][..blk * nk].iter_mut() {
                    *prev *= f64::from(rescale[i]);
                }
                for j in 0..nk {
                    acc_w[i][blk * nk + j] = f64::from(s[j * r + i]);
                    if m[j * r + i] != f32::NEG_INFINITY {
                        logits[i][blk * nk + j] = f64::from(scores[j * r + i]) * f64::from(scale)
                            + f64::from(slopes[i]) * f64::from(m[j * r + i]);
                    }
                }
            }
        }
        for i in 0..3 {
            let mx = logits[i].iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = logits[i].iter().map(|&l| (l - mx).exp()).sum();
            close(sum[i], total, &format!("sum row {i}"));
            for j in 0..2 * nk {
                close(acc_w[i][j] as f32, (logits[i][j] - mx).exp(), &format!("weight [{i},{j}]"));
            }
        }
    }

    #[test]
    fn softmax_rows_gives_the_key_major_bits() {
        // 5 rows (queries of 2 heads each: rows 0-1, 2-3, 4) over two blocks of 37 keys (vector
        // bodies and tails), with a soft cap, ALiBi slopes, keys hidden from some queries and
        // the whole first block hidden from the last one.
        let (rows, nk, group, ld) = (5usize, 37usize, 2usize, 48usize);
        let slopes = [0.5f32, 1.0, 0.25, 1.0, 2.0];
        let (mut km, mut ks, mut kr) = (vec![f32::NEG_INFINITY; 8], vec![0f32; 8], vec![0f32; 8]);
        let (mut rm, mut rs, mut rr) = (km.clone(), ks.clone(), kr.clone());
        for blk in 0..2u32 {
            let scores = data(rows * nk, 20 + blk);
            let nq = rows.div_ceil(group);
            let mut mask = data(nq * nk, 30 + blk);
            for (q, row) in mask.chunks_exact_mut(nk).enumerate() {
                for (j, m) in row.iter_mut().enumerate() {
                    if (j + q) % 5 == 0 || (blk == 0 && q == nq - 1) {
                        *m = f32::NEG_INFINITY;
                    }
                }
            }
            let r = 8;
            let (mut key_major, mut mask_t) = (vec![0f32; nk * r], vec![0f32; nk * r]);
            let mut row_major = vec![f32::NAN; rows * ld];
            for i in 0..rows {
                for j in 0..nk {
                    key_major[j * r + i] = scores[i * nk + j];
                    mask_t[j * r + i] = mask[(i / group) * nk + j];
                    row_major[i * ld + j] = scores[i * nk + j];
                }
            }
            let how = Scoring {
                scale: 0.3,
                softcap: 2.5,
                bias: Some(Bias {
                    mask: &mask_t,
                    slopes: &[slopes.as_slice(), &[1.0; 3]].concat(),
                }),
            };
            let run = RunningRows { max: &mut km, sum: &mut ks, rescale: &mut kr };
            softmax_block(&mut key_major, r, nk, how, run);
            let bias = RowBias { mask: &mask, stride: nk, group, slopes: &slopes };
            let run = RunningRows { max: &mut rm, sum: &mut rs, rescale: &mut rr };
            softmax_rows(&mut row_major, ld, (rows, nk), (0.3, 2.5, Some(bias)), run);
            for i in 0..rows {
                for j in 0..nk {
                    let (a, b) = (key_major[j * r + i], row_major[i * ld + j]);
                    assert_eq!(a.to_bits(), b.to_bits(), "block {blk} weight [{i},{j}]: {a} {b}");
                }
                for (what, a, b) in
                    [("max", km[i], rm[i]), ("sum", ks[i], rs[i]), ("rescale", kr[i], rr[i])]
                {
                    assert_eq!(a.to_bits(), b.to_bits(), "block {blk} {what} row {i}: {a} {b}");
                }
                assert!(
                    row_major[i * ld + nk..(i + 1) * ld].iter().all(|x| x.is_nan()),
                    "row {i} past nk"
                );
            }
        }
        assert!(ks[4] > 0.0 && km[4].is_finite(), "the last query sees keys in the second block");
    }
}
