//! Packed-panel GEMM for float weights (F32 / F16 / BF16) times F32 activations, BLIS style,
//! for prompt-sized activation counts (see [`crate::kernels::GemmFn`]).
//!
//! The activations come packed by the driver in panels of `NR` rows, transposed
//! (`panel[k][j]`). For each K-block of `KC` values, `MR` weight rows are packed transposed
//! (`panel[k][i]`, converted to f32) into an L1-sized scratch; the micro-kernel then computes
//! an `MR x NR` outer-product tile per activation panel: per `k`, `MR / lanes` weight vectors
//! times `NR` broadcast activation values, the accumulators along M so that the `C` stores are
//! contiguous. K-blocks after the first add to `C`.
//!
//! AVX-512: `MR = 32` (two zmm) by `NR = 12` (24 accumulators); AVX2: `MR = 16` (two ymm) by
//! `NR = 6` (12 accumulators). Edges in M are masked, edges in N use narrower instantiations.
#![allow(clippy::incompatible_msrv)]
#![allow(clippy::needless_range_loop)] // Register tiles index several arrays at once.

use super::kern::{h2f, load_w, rd16, scalar_w, W_BF16, W_F16, W_F32};
use crate::kernels::GemmFn;
use std::arch::x86_64::*;
use tessera_core::DType;

/// K values per block: an `MR x KC` packed weight panel (64 KB for AVX-512) is read from L1 / L2
/// (128 bytes per 24 FMAs), and the weight rows are read in 2 KB runs that the hardware
/// prefetchers follow; 512 measured faster than 256.
const KC: usize = 512;

/// How many weight panels ahead the packing prefetches (2 measured slower than 1).
const PREFETCH_AHEAD: usize = 1;

/// Transposes eight rows of eight f32 (the columns are returned).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xee>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xee>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xee>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xee>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// F16 weights in their repacked group ([`crate::kernels::repack::F16_GROUP`]: 8 rows, each
/// row's 16-value block in turn); rows are counted from a group's start.
pub(super) const W_F16_GROUPED: u8 = 3;

/// The address of value `t` of weight row `i` of kind `W` at `a` (rows `lda` bytes apart; in
/// the grouped layout a group of 8 rows takes `8 * lda` bytes, its 16-value blocks 256 each).
#[inline]
fn at(w: u8, a: *const u8, lda: usize, i: usize, t: usize) -> *const u8 {
    if w == W_F16_GROUPED {
        let off = i / 8 * 8 * lda + t / 16 * 256 + i % 8 * 32 + t % 16 * 2;
        a.wrapping_add(off)
    } else {
        a.wrapping_add(i * lda + t * wsize(w))
    }
}

/// Packs `kc` values of `rows` (<= `MR`) weight rows of kind `W` starting at `a` (row stride
/// `lda` bytes) as f32 `out[t * MR + i]`, rows from `rows` to `MR` zero.
///
/// Sixteen values (one cache line of F32) of every row are packed at a time, so that each
/// loaded line is used at once and the panel's lines are written whole, in order.
///
/// # Safety
///
/// The CPU supports AVX2; the rows hold `kc` readable values; `out` has `MR * kc` f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pack_a<const MR: usize, const W: u8>(
    a: *const u8,
    lda: usize,
    rows: usize,
    kc: usize,
    out: *mut f32,
) {
    let full = rows / 8 * 8;
    let kv = kc / 16 * 16;
    let mut t = 0;
    while t < kv {
        let mut r8 = 0;
        while r8 < full {
            // SAFETY: rows r8..r8 + 8 exist and hold values t..t + 16; the stores stay within
            // the MR * kc panel.
            unsafe {
                let mut lo = [_mm256_setzero_ps(); 8];
                let mut hi = [_mm256_setzero_ps(); 8];
                for i in 0..8 {
                    if W == W_F16_GROUPED {
                        let p = at(W, a, lda, r8 + i, t);
                        lo[i] = load_w!(W_F16, p, 0);
                        hi[i] = load_w!(W_F16, p, 8);
                    } else {
                        let p = a.add((r8 + i) * lda);
                        lo[i] = load_w!(W, p, t);
                        hi[i] = load_w!(W, p, t + 8);
                    }
                }
                let lo = transpose8(lo);
                let hi = transpose8(hi);
                for u in 0..8 {
                    _mm256_storeu_ps(out.add((t + u) * MR + r8), lo[u]);
                    _mm256_storeu_ps(out.add((t + 8 + u) * MR + r8), hi[u]);
                }
            }
            r8 += 8;
        }
        t += 16;
    }
    for t in kv..kc {
        for i in 0..full {
            // SAFETY: row i < rows holds value t; the store is within the panel.
            unsafe { *out.add(t * MR + i) = scalar_at::<W>(a, lda, i, t) };
        }
    }
    for i in full..MR {
        for t in 0..kc {
            // SAFETY: row i exists when i < rows; the store is within the panel.
            unsafe {
                *out.add(t * MR + i) = if i < rows { scalar_at::<W>(a, lda, i, t) } else { 0.0 };
            }
        }
    }
}

/// Value `t` of weight row `i` of kind `W` (see [`at`]), as f32.
///
/// # Safety
///
/// The value is readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scalar_at<const W: u8>(a: *const u8, lda: usize, i: usize, t: usize) -> f32 {
    let p = at(W, a, lda, i, t);
    // SAFETY: the caller's contract.
    unsafe {
        if W == W_F16_GROUPED {
            scalar_w!(W_F16, p, 0)
        } else {
            scalar_w!(W, p, 0)
        }
    }
}

/// Bytes of one weight of kind `W`.
const fn wsize(w: u8) -> usize {
    if w == W_F32 {
        4
    } else {
        2
    }
}

/// Instantiates the chunk function of one tier: K-blocks, weight panels, activation panels.
macro_rules! gemm_chunk {
    ($feat:literal, $name:ident, $micro:ident, $MR:expr, $NR:expr) => {
        /// Computes `c[j * ldc + i] = sum_t A_i[t] * panel_j[t]` for `i < m`, `j < n` (see
        /// [`GemmFn`]).
        ///
        /// # Safety
        ///
        /// As [`GemmFn`], for this tier's `MR`, `NR` and `KC`.
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const W: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            m: usize,
            n: usize,
            scratch: *mut f32,
        ) {
            let panels = n.div_ceil($NR);
            let mut kb = 0;
            while kb < k {
                let kc = KC.min(k - kb);
                let first = kb == 0;
                let mut i = 0;
                while i < m {
                    let mv = $MR.min(m - i);
                    // The weight rows packed PREFETCH_AHEAD panels later (in this K-block or
                    // the next one).
                    let per = m.div_ceil($MR);
                    let ahead = i / $MR + PREFETCH_AHEAD;
                    let (nrow, nkb) = if ahead < per {
                        (ahead * $MR, kb)
                    } else {
                        ((ahead - per) * $MR, kb + kc)
                    };
                    let (nrows, nbytes) = if nkb < k && nrow < m {
                        ($MR.min(m - nrow), KC.min(k - nkb) * wsize(W))
                    } else {
                        (0, 0)
                    };
                    // SAFETY: the caller's contract covers rows i..i + mv, the K-block, the
                    // scratch panel, the activation panels and the C tiles; the prefetched rows
                    // are rows of the weights (a prefetch of any address is harmless anyway).
                    unsafe {
                        pack_a::<{ $MR }, W>(at(W, a, lda, i, kb), lda, mv, kc, scratch);
                        for p in 0..panels {
                            // Prefetch a share of the next weight rows while this tile computes.
                            for r in p * nrows / panels..(p + 1) * nrows / panels {
                                // (In the grouped layout each row takes an eighth of its
                                // group's K-block, the same bytes as a plain row's.)
                                let rp = if W == W_F16_GROUPED {
                                    let g = at(W, a, lda, (nrow + r) / 8 * 8, nkb);
                                    g.wrapping_add((nrow + r) % 8 * nbytes)
                                } else {
                                    at(W, a, lda, nrow + r, nkb)
                                };
                                for off in (0..nbytes).step_by(64) {
                                    _mm_prefetch::<_MM_HINT_T1>(rp.wrapping_add(off).cast::<i8>());
                                }
                            }
                            let nv = $NR.min(n - p * $NR);
                            let bp = b.add(p * k * $NR + kb * $NR);
                            let cp = c.add(p * $NR * ldc + i);
                            $micro(nv, kc, scratch, bp, cp, ldc, mv, first);
                        }
                    }
                    i += $MR;
                }
                kb += kc;
            }
        }
    };
}

/// Rows of the AVX-512 tile.
const MR512: usize = 32;
/// Activation panel width of the AVX-512 tier.
const NR512: usize = 12;

/// The AVX-512 `32 x NR` micro-kernel: `kc` steps over a packed weight panel `ap`
/// (`32` f32 per step) and an activation panel `bp` (`NR512` f32 per step).
///
/// # Safety
///
/// The CPU supports the AVX-512 tier; the panels hold `kc` steps; the `mv x NR` C tile
/// (`mv <= 32`) is writable (and readable unless `first`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn micro512<const NR: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    mv: usize,
    first: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; NR];
    for t in 0..kc {
        // SAFETY: step t of both panels is in bounds (caller's contract).
        unsafe {
            let a0 = _mm512_loadu_ps(ap.add(t * MR512));
            let a1 = _mm512_loadu_ps(ap.add(t * MR512 + 16));
            let bt = bp.add(t * NR512);
            for j in 0..NR {
                let bv = _mm512_set1_ps(*bt.add(j));
                acc[j][0] = _mm512_fmadd_ps(a0, bv, acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(a1, bv, acc[j][1]);
            }
        }
    }
    let m0: __mmask16 = if mv >= 16 { 0xffff } else { (1u16 << mv) - 1 };
    let m1: __mmask16 = if mv >= 32 {
        0xffff
    } else if mv > 16 {
        (1u16 << (mv - 16)) - 1
    } else {
        0
    };
    for j in 0..NR {
        let c0 = c.wrapping_add(j * ldc);
        let c1 = c0.wrapping_add(16);
        let (mut v0, mut v1) = (acc[j][0], acc[j][1]);
        // SAFETY: masked lanes are the tile's valid rows (caller's contract); masked-off lanes
        // are neither read nor written.
        unsafe {
            if !first {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c0));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c1));
            }
            _mm512_mask_storeu_ps(c0, m0, v0);
            _mm512_mask_storeu_ps(c1, m1, v1);
        }
    }
}

/// Dispatches the AVX-512 micro-kernel on the panel's valid width `nv`.
///
/// # Safety
///
/// As [`micro512`], with `1 <= nv <= NR512`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn micro512_n(
    nv: usize,
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    mv: usize,
    first: bool,
) {
    // SAFETY: forwarded contract.
    unsafe {
        match nv {
            12 => micro512::<12>(kc, ap, bp, c, ldc, mv, first),
            11 => micro512::<11>(kc, ap, bp, c, ldc, mv, first),
            10 => micro512::<10>(kc, ap, bp, c, ldc, mv, first),
            9 => micro512::<9>(kc, ap, bp, c, ldc, mv, first),
            8 => micro512::<8>(kc, ap, bp, c, ldc, mv, first),
            7 => micro512::<7>(kc, ap, bp, c, ldc, mv, first),
            6 => micro512::<6>(kc, ap, bp, c, ldc, mv, first),
            5 => micro512::<5>(kc, ap, bp, c, ldc, mv, first),
            4 => micro512::<4>(kc, ap, bp, c, ldc, mv, first),
            3 => micro512::<3>(kc, ap, bp, c, ldc, mv, first),
            2 => micro512::<2>(kc, ap, bp, c, ldc, mv, first),
            _ => micro512::<1>(kc, ap, bp, c, ldc, mv, first),
        }
    }
}

gemm_chunk!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    chunk512,
    micro512_n,
    MR512,
    NR512
);

/// Rows of the AVX2 tile.
const MR256: usize = 16;
/// Activation panel width of the AVX2 tier.
const NR256: usize = 6;

/// The AVX2 `16 x NR` micro-kernel (see [`micro512`]).
///
/// # Safety
///
/// As [`micro512`] for the AVX2 tier (`mv <= 16`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn micro256<const NR: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    mv: usize,
    first: bool,
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; NR];
    for t in 0..kc {
        // SAFETY: step t of both panels is in bounds (caller's contract).
        unsafe {
            let a0 = _mm256_loadu_ps(ap.add(t * MR256));
            let a1 = _mm256_loadu_ps(ap.add(t * MR256 + 8));
            let bt = bp.add(t * NR256);
            for j in 0..NR {
                let bv = _mm256_broadcast_ss(&*bt.add(j));
                acc[j][0] = _mm256_fmadd_ps(a0, bv, acc[j][0]);
                acc[j][1] = _mm256_fmadd_ps(a1, bv, acc[j][1]);
            }
        }
    }
    if mv == MR256 {
        for j in 0..NR {
            // SAFETY: the full 16-row tile of column j is valid (caller's contract).
            unsafe {
                let cp = c.add(j * ldc);
                let (mut v0, mut v1) = (acc[j][0], acc[j][1]);
                if !first {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cp));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cp.add(8)));
                }
                _mm256_storeu_ps(cp, v0);
                _mm256_storeu_ps(cp.add(8), v1);
            }
        }
        return;
    }
    let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(mv as i32), iota);
    let m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(mv as i32 - 8), iota);
    for j in 0..NR {
        let c0 = c.wrapping_add(j * ldc);
        let c1 = c0.wrapping_add(8);
        let (mut v0, mut v1) = (acc[j][0], acc[j][1]);
        // SAFETY: masked lanes are the tile's valid rows; masked-off lanes are not accessed.
        unsafe {
            if !first {
                v0 = _mm256_add_ps(v0, _mm256_maskload_ps(c0, m0));
                v1 = _mm256_add_ps(v1, _mm256_maskload_ps(c1, m1));
            }
            _mm256_maskstore_ps(c0, m0, v0);
            _mm256_maskstore_ps(c1, m1, v1);
        }
    }
}

/// Dispatches the AVX2 micro-kernel on the panel's valid width `nv`.
///
/// # Safety
///
/// As [`micro256`], with `1 <= nv <= NR256`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn micro256_n(
    nv: usize,
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    mv: usize,
    first: bool,
) {
    // SAFETY: forwarded contract.
    unsafe {
        match nv {
            6 => micro256::<6>(kc, ap, bp, c, ldc, mv, first),
            5 => micro256::<5>(kc, ap, bp, c, ldc, mv, first),
            4 => micro256::<4>(kc, ap, bp, c, ldc, mv, first),
            3 => micro256::<3>(kc, ap, bp, c, ldc, mv, first),
            2 => micro256::<2>(kc, ap, bp, c, ldc, mv, first),
            _ => micro256::<1>(kc, ap, bp, c, ldc, mv, first),
        }
    }
}

gemm_chunk!("avx2,fma,f16c", chunk256, micro256_n, MR256, NR256);

/// A GEMM kernel: the function, `MR`, `NR` and `KC`.
pub(crate) type Gemm = (GemmFn, usize, usize, usize);

/// The AVX2 packed GEMM for weights of `wt` (F32, F16, BF16; F16 also `grouped`, repacked).
pub(super) fn avx2(wt: DType, grouped: bool) -> Option<Gemm> {
    let f: GemmFn = match (wt, grouped) {
        (DType::F32, false) => chunk256::<W_F32>,
        (DType::F16, false) => chunk256::<W_F16>,
        (DType::F16, true) => chunk256::<W_F16_GROUPED>,
        (DType::BF16, false) => chunk256::<W_BF16>,
        _ => return None,
    };
    Some((f, MR256, NR256, KC))
}

/// The AVX-512 packed GEMM for weights of `wt` (F32, F16, BF16; F16 also `grouped`, repacked).
pub(super) fn avx512(wt: DType, grouped: bool) -> Option<Gemm> {
    let f: GemmFn = match (wt, grouped) {
        (DType::F32, false) => chunk512::<W_F32>,
        (DType::F16, false) => chunk512::<W_F16>,
        (DType::F16, true) => chunk512::<W_F16_GROUPED>,
        (DType::BF16, false) => chunk512::<W_BF16>,
        _ => return None,
    };
    Some((f, MR512, NR512, KC))
}
