//! The AVX-512 VNNI tier: the x86 kernels with `vpdpbusd` (on 256-bit registers, AVX-512 VL)
//! for the int8 dot products and 32 vector registers for larger tiles (see [`super::kern`]).
#![allow(clippy::incompatible_msrv)]
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

/// The register tiles of the AVX-512 VNNI kernels (32 registers), for several activation rows
/// (`mr x nr`) and for one (`gemv` weight rows side by side).
const AVX512_TILES: X86Tiles = X86Tiles {
    float: Tiles::new(6, 4).with_gemv(8),
    q8_0_q4_0: Tiles::new(4, 4),
    q4_k_q5_k: Tiles::new(1, 8).with_gemv(4),
    q2_k_q3_k_q6_k: Tiles::new(1, 8).with_gemv(4),
    q4_1_q5_0_q5_1: Tiles::new(4, 4).with_gemv(6),
};

super::kern::x86_tier!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", vnni: true, AVX512_TILES);

use super::kern::X86Tiles;
use crate::kernels::Tiles;
// (x86_tier! imports the block modules of its kernels: iq4_nl, q4_0, q4_k, q5_k, q6_k, q8_0
// and q8_k among them.)
use crate::kernels::blocks::{q4_1, q5_0, q5_1, q8_1, F16_BYTES};

/// Rows per repacked group (the 16 x 4 layout).
const ROWS: usize = 16;

/// Packed kernel kind: Q4_0 weights.
const P_Q4_0: u8 = 0;
/// Packed kernel kind: Q8_0 weights.
const P_Q8_0: u8 = 1;
/// Packed kernel kind: Q5_0 weights.
const P_Q5_0: u8 = 2;
/// Packed kernel kind: Q4_1 weights (Q4_0's quants without a zero point, and a minimum).
const P_Q4_1: u8 = 3;
/// Packed kernel kind: Q5_1 weights (Q5_0's quants without a zero point, and a minimum).
const P_Q5_1: u8 = 4;
/// Packed kernel kind: IQ4_NL weights (Q4_0's layout; the nibbles index the 16 levels, looked
/// up plus 128 with `vpshufb` and used as Q8_0's quants are).
const P_IQ4_NL: u8 = 5;

/// Group blocks ahead that the one-row Q4_0 / Q8_0 / Q5_0 kernel prefetches where
/// [`super::prefetch::Site::Packed512`] is on (not on AMD, whose hardware prefetchers do better
/// alone); measured, docs/x86-measurements.md.
const GEMV_PREFETCH_BLOCKS: usize = 4;
/// Group blocks ahead that the same kernel also prefetches into L2, so that more lines are on
/// their way from RAM than L1's fill buffers hold (docs/x86-measurements.md).
const GEMV_PREFETCH_L2_BLOCKS: usize = 12;

/// Repacked Q4_0 / Q8_0 / Q5_0 / Q4_1 / Q5_1 / IQ4_NL weights (`KIND`; one group of sixteen
/// rows, see [`crate::kernels::repack`]) times `NR` activation rows in the "Q8_0 with sums" format: one
/// `vpdpbusd` multiplies four quants of all sixteen rows by a broadcast word of one activation
/// row. The fifth bits of Q5_0 / Q5_1 are stored as byte masks: one masked move per 64 quants.
/// Q4_1 / Q5_1's minimum `m` multiplies the activation block's `d * sum(q)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn packed<const NR: usize, const KIND: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features and its operands: `a` one
    // group of sixteen repacked rows of `KIND` of `k` values, `NR` activation rows of `k` values
    // in the Q8_0-with-sums format at `b + j * ldb`, and 16 writable outputs at `c + j * ldc`;
    // every load and store below stays within them.
    unsafe {
        // A group's block: the sixteen f16 scales, (Q4_1 / Q5_1) the sixteen minimums, (Q5_0 /
        // Q5_1) the fifth-bit masks, then the quants.
        let (bsz, zp, qs_at) = match KIND {
            P_Q4_0 => (q4_0::BYTES * ROWS, 8, F16_BYTES * ROWS),
            P_IQ4_NL => (iq4_nl::BYTES * ROWS, 128, F16_BYTES * ROWS),
            P_Q5_0 => (q5_0::BYTES * ROWS, 16, q5_0::QS * ROWS),
            P_Q4_1 => (q4_1::BYTES * ROWS, 0, q4_1::QS * ROWS),
            P_Q5_1 => (q5_1::BYTES * ROWS, 0, q5_1::QS * ROWS),
            _ => (q8_0::BYTES * ROWS, 128, F16_BYTES * ROWS),
        };
        let has_min = matches!(KIND, P_Q4_1 | P_Q5_1);
        let masks_at = if KIND == P_Q5_1 { 2 * F16_BYTES * ROWS } else { F16_BYTES * ROWS };
        let nib = _mm512_set1_epi8(0x0f);
        let flip = _mm512_set1_epi8(-128);
        let fifth = _mm512_set1_epi8(0x10);
        // IQ4_NL's levels plus 128 (unsigned, as Q8_0's quants xor 0x80) in every lane.
        let levels = _mm512_xor_si512(
            _mm512_broadcast_i32x4(_mm_loadu_si128(
                tessera_core::quant::KVALUES_IQ4NL.as_ptr().cast(),
            )),
            flip,
        );
        let mut acc = [_mm512_setzero_ps(); NR];
        let prefetch = NR == 1 && super::prefetch::on(super::prefetch::Site::Packed512);
        for blk in 0..k / 32 {
            let g = a.add(blk * bsz);
            if prefetch {
                // A matrix-vector product waits on RAM: fetch the group's block
                // GEMV_PREFETCH_BLOCKS ahead (past the group's end: the next group's, which
                // follows it) into L1, and the one GEMV_PREFETCH_L2_BLOCKS ahead into L2.
                let ahead = g.wrapping_add(GEMV_PREFETCH_BLOCKS * bsz);
                let far = g.wrapping_add(GEMV_PREFETCH_L2_BLOCKS * bsz);
                for l in (0..bsz).step_by(64) {
                    // A prefetch of any address is harmless.
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
                    _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(l).cast());
                }
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(g.cast()));
            let mw = if has_min {
                _mm512_cvtph_ps(_mm256_loadu_si256(g.add(F16_BYTES * ROWS).cast()))
            } else {
                _mm512_setzero_ps()
            };
            let qs = g.add(qs_at);
            let mut w = [_mm512_setzero_si512(); 8];
            if KIND == P_Q8_0 {
                for (h, v) in w.iter_mut().enumerate() {
                    *v = _mm512_xor_si512(_mm512_loadu_si512(qs.add(64 * h).cast()), flip);
                }
            } else {
                for h in 0..4 {
                    let q = _mm512_loadu_si512(qs.add(64 * h).cast());
                    w[h] = _mm512_and_si512(q, nib);
                    w[4 + h] = _mm512_and_si512(_mm512_srli_epi16::<4>(q), nib);
                }
                if KIND == P_IQ4_NL {
                    for v in w.iter_mut() {
                        *v = _mm512_shuffle_epi8(levels, *v);
                    }
                }
                if matches!(KIND, P_Q5_0 | P_Q5_1) {
                    let masks = g.add(masks_at).cast::<u64>();
                    for (i, wi) in w.iter_mut().enumerate() {
                        let m = u64::from_le(std::ptr::read_unaligned(masks.add(i)));
                        *wi = _mm512_or_si512(*wi, _mm512_maskz_mov_epi8(m, fifth));
                    }
                }
            }
            for (j, acc_j) in acc.iter_mut().enumerate() {
                let p = b.add(j * ldb + blk * q8_1::BYTES);
                let bd = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
                    std::ptr::read_unaligned(p.cast::<u16>()),
                ))));
                let sum = i32::from(std::ptr::read_unaligned(p.add(q8_1::S).cast::<i16>()));
                let mut ai = _mm512_set1_epi32(-zp * sum);
                let q = p.add(q8_1::QS);
                for (h, wh) in w.iter().enumerate() {
                    let bw =
                        _mm512_set1_epi32(std::ptr::read_unaligned(q.add(4 * h).cast::<i32>()));
                    ai = _mm512_dpbusd_epi32(ai, *wh, bw);
                }
                *acc_j = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(ai),
                    _mm512_mul_ps(dw, _mm512_set1_ps(bd)),
                    *acc_j,
                );
                if has_min {
                    *acc_j = _mm512_fmadd_ps(mw, _mm512_set1_ps(bd * sum as f32), *acc_j);
                }
            }
        }
        for (j, acc_j) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.add(j * ldc), *acc_j);
        }
    }
}

packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q4_0,
    packed,
    P_Q4_0,
    16,
    [8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q8_0,
    packed,
    P_Q8_0,
    16,
    [8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q5_0,
    packed,
    P_Q5_0,
    16,
    [8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q4_1,
    packed,
    P_Q4_1,
    16,
    [8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q5_1,
    packed,
    P_Q5_1,
    16,
    [8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_iq4_nl,
    packed,
    P_IQ4_NL,
    16,
    [8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q4_k,
    packed_q45k,
    P_Q4_K,
    16,
    [16, 8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q5_k,
    packed_q45k,
    P_Q5_K,
    16,
    [16, 8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q6_k,
    packed_k16,
    P_Q6_K,
    16,
    [16, 8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q3_k,
    packed_k16,
    P_Q3_K,
    16,
    [16, 8, 4, 1]
);
packed_tiled!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    packed_q2_k,
    packed_k16,
    P_Q2_K,
    16,
    [16, 8, 4, 1]
);

/// The kernel for repacked weights of `wt`, with its tile size: 16 rows by 8 columns, or 16
/// columns for the k-quants (their per-step word assembly shared by twice the columns: 10-30 %
/// faster at N >= 16), but for Q6_K on AMD ([`q6_k_columns`]).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_0 => Some((packed_q4_0 as TileFn, ROWS, 8)),
        DType::Q8_0 => Some((packed_q8_0 as TileFn, ROWS, 8)),
        DType::Q5_0 => Some((packed_q5_0 as TileFn, ROWS, 8)),
        DType::Q4_1 => Some((packed_q4_1 as TileFn, ROWS, 8)),
        DType::Q5_1 => Some((packed_q5_1 as TileFn, ROWS, 8)),
        DType::IQ4_NL => Some((packed_iq4_nl as TileFn, ROWS, 8)),
        DType::Q4_K => Some((packed_q4_k as TileFn, ROWS, 16)),
        DType::Q2_K => Some((packed_q2_k as TileFn, ROWS, 16)),
        DType::Q3_K => Some((packed_q3_k as TileFn, ROWS, 16)),
        DType::Q5_K => Some((packed_q5_k as TileFn, ROWS, 16)),
        DType::Q6_K => Some((packed_q6_k as TileFn, ROWS, q6_k_columns())),
        _ => None,
    }
}

/// Activation columns of the repacked Q6_K tile: 16, as the other k-quants, but 8 on AMD, where
/// 16 measured slower (docs/x86-measurements.md).
fn q6_k_columns() -> usize {
    if crate::features::is_amd_vendor(crate::features::x86_vendor()) {
        8
    } else {
        16
    }
}

/// Packed kernel kind of [`packed_q45k`]: Q4_K weights.
const P_Q4_K: u8 = 0;
/// Packed kernel kind of [`packed_q45k`]: Q5_K weights (Q4_K's layout with the fifth bits'
/// `qh` words before the nibbles).
const P_Q5_K: u8 = 1;

// Q5_K's header is Q4_K's (d, dmin, 12 scale bytes), so both share the group's field layout.
const _: () = assert!(q5_k::DMIN == q4_k::DMIN && q5_k::SCALES == q4_k::SCALES);
const _: () = assert!(q5_k::QS == q5_k::QH + 32 && q4_k::QS == q4_k::SCALES + 12);

/// `dmin` times the sixteen rows' sums of `m * bsums`, in integers: `mins[i]` holds two 16-bit
/// mins per row, multiplied by the `i`-th pair of the activations' 16-bit `bsums` (at `bsums`,
/// broadcast from L1) with `vpdpwssd`.
///
/// # Safety
///
/// The CPU supports AVX-512 VNNI; `bsums` holds `2 * mins.len()` readable i16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn mins_times_bsums(mins: &[__m512i; 8], bsums: *const u8, dmin: __m512) -> __m512 {
    let mut ms = _mm512_setzero_si512();
    for (i, m) in mins.iter().enumerate() {
        // SAFETY: pair i of the 2 * 8 readable i16 (the caller's contract).
        let pair = unsafe { std::ptr::read_unaligned(bsums.add(4 * i).cast()) };
        ms = _mm512_dpwssd_epi32(ms, *m, _mm512_set1_epi32(pair));
    }
    _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(ms))
}

/// Prefetches share `step` of `steps` of the `bytes` at `p` into the cache level `HINT`
/// (`_MM_HINT_T0`: L1, `_MM_HINT_T1`: L2): the one-row K-quant kernels fetch a later group block
/// while they compute this one, since a matrix-vector product waits on the latency of L3 / RAM.
/// Where [`super::prefetch::Site::KQuant512`] is on (not on AMD before Zen 5) the next block into
/// L1 (measured, docs/x86-measurements.md).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn prefetch_share<const HINT: i32>(p: *const u8, bytes: usize, step: usize, steps: usize) {
    let lines = bytes.div_ceil(64 * steps);
    let p = p.wrapping_add(step * lines * 64);
    for l in 0..lines {
        // A prefetch of any address is harmless.
        _mm_prefetch::<HINT>(p.wrapping_add(64 * l).cast());
    }
}

/// Group blocks ahead that the one-row Q6_K kernel prefetches into L2 where
/// [`super::prefetch::Site::Q6KL2`] is on (every CPU; measured, docs/x86-measurements.md).
const Q6_K_L2_AHEAD: usize = 4;

/// Repacked Q4_K or Q5_K weights (`KIND`; one group of sixteen rows) times `NR` Q8_K
/// activation rows: per 32-value sub-block, eight `vpdpbusd` give the sixteen rows' integer
/// sums, scaled in f32 by `d * sc`; the mins come off as integer sums of `m * bsums`
/// ([`mins_times_bsums`]). Q5_K's fifth bits come from its `qh` words (bit `2 ch` for the low
/// nibbles of chunk `ch`, `2 ch + 1` for the high), moved to bit 4 of each quant.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn packed_q45k<const NR: usize, const KIND: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features and its operands: `a` one
    // group of sixteen repacked Q4_K / Q5_K rows of `k` values, `NR` Q8_K activation rows at
    // `b + j * ldb`, and 16 writable outputs at `c + j * ldc`; every load and store below stays
    // within them.
    unsafe {
        let nib = _mm512_set1_epi8(0x0f);
        let bit4 = _mm512_set1_epi8(0x10);
        let bsz = if KIND == P_Q5_K { q5_k::BYTES } else { q4_k::BYTES };
        let prefetch = NR == 1 && super::prefetch::on(super::prefetch::Site::KQuant512);
        let mut acc = [_mm512_setzero_ps(); NR];
        for blk in 0..k / 256 {
            // A group's block: the sixteen d, the sixteen dmin, the 12 scale bytes byte-planar
            // (16 rows each), then the quants (Q5_K: `qh`, then the nibbles).
            let g = a.add(blk * bsz * ROWS);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(g.cast()));
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(g.add(F16_BYTES * ROWS).cast()));
            // Per sub-block, the sixteen rows' scales and mins as f32 (d * sc, dmin * m), decoded
            // from the byte-planar 12-byte scales (ggml's `get_scale_min_k4` on byte vectors).
            let sp = g.add(2 * F16_BYTES * ROWS);
            let sb: [__m128i; 12] = std::array::from_fn(|t| _mm_loadu_si128(sp.add(16 * t).cast()));
            let m63 = _mm_set1_epi8(63);
            let m0f = _mm_set1_epi8(0x0f);
            let m03 = _mm_set1_epi8(0x03);
            let top2 = |x: __m128i| _mm_slli_epi16::<4>(_mm_and_si128(_mm_srli_epi16::<6>(x), m03));
            let to_f = |x: __m128i, m: __m512| {
                _mm512_mul_ps(m, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x)))
            };
            // The mins as integers in both 16-bit halves of each row's lane, for `vpdpwssd`
            // with a sub-block's pair of 16-value `bsums`.
            let twice = |x: __m128i| {
                let m = _mm512_cvtepu8_epi32(x);
                _mm512_or_si512(m, _mm512_slli_epi32::<16>(m))
            };
            let mut wsc = [_mm512_setzero_ps(); 8];
            let mut mins = [_mm512_setzero_si512(); 8];
            for t in 0..4 {
                wsc[t] = to_f(_mm_and_si128(sb[t], m63), d);
                mins[t] = twice(_mm_and_si128(sb[t + 4], m63));
            }
            for t in 4..8 {
                let scb = _mm_or_si128(_mm_and_si128(sb[t + 4], m0f), top2(sb[t - 4]));
                let mnb =
                    _mm_or_si128(_mm_and_si128(_mm_srli_epi16::<4>(sb[t + 4]), m0f), top2(sb[t]));
                wsc[t] = to_f(scb, d);
                mins[t] = twice(mnb);
            }
            let (qh, q) = if KIND == P_Q5_K {
                (g.add(q5_k::QH * ROWS), g.add(q5_k::QS * ROWS))
            } else {
                (g, g.add(q4_k::QS * ROWS))
            };
            let mut tj = [_mm512_setzero_ps(); NR];
            for ch in 0..4 {
                if prefetch {
                    prefetch_share::<_MM_HINT_T0>(g.wrapping_add(bsz * ROWS), bsz * ROWS, ch, 4);
                }
                let mut lo = [_mm512_setzero_si512(); 8];
                let mut hi = [_mm512_setzero_si512(); 8];
                for h in 0..8 {
                    let w = _mm512_loadu_si512(q.add(64 * (8 * ch + h)).cast());
                    lo[h] = _mm512_and_si512(w, nib);
                    hi[h] = _mm512_and_si512(_mm512_srli_epi16::<4>(w), nib);
                    if KIND == P_Q5_K {
                        // Bits 2ch and 2ch + 1 of qh bytes 4h.. (word h) to bit 4.
                        let bits = _mm512_loadu_si512(qh.add(64 * h).cast());
                        let shift = _mm_cvtsi32_si128(2 * ch as i32);
                        let b_lo = _mm512_srl_epi16(bits, shift);
                        let b_hi = _mm512_srli_epi16::<1>(b_lo);
                        lo[h] = _mm512_or_si512(
                            lo[h],
                            _mm512_and_si512(_mm512_slli_epi16::<4>(b_lo), bit4),
                        );
                        hi[h] = _mm512_or_si512(
                            hi[h],
                            _mm512_and_si512(_mm512_slli_epi16::<4>(b_hi), bit4),
                        );
                    }
                }
                for j in 0..NR {
                    let p = b.add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 64 * ch);
                    let mut al = _mm512_setzero_si512();
                    let mut ah = _mm512_setzero_si512();
                    for h in 0..8 {
                        let bl =
                            _mm512_set1_epi32(std::ptr::read_unaligned(p.add(4 * h).cast::<i32>()));
                        let bh = _mm512_set1_epi32(std::ptr::read_unaligned(
                            p.add(32 + 4 * h).cast::<i32>(),
                        ));
                        al = _mm512_dpbusd_epi32(al, lo[h], bl);
                        ah = _mm512_dpbusd_epi32(ah, hi[h], bh);
                    }
                    tj[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(al), wsc[2 * ch], tj[j]);
                    tj[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ah), wsc[2 * ch + 1], tj[j]);
                }
            }
            for j in 0..NR {
                let p = b.add(j * ldb + blk * q8_k::BYTES);
                let bd = std::ptr::read_unaligned(p.cast::<f32>());
                let m = mins_times_bsums(&mins, p.add(q8_k::BSUMS), dmin);
                acc[j] = _mm512_fmadd_ps(_mm512_sub_ps(tj[j], m), _mm512_set1_ps(bd), acc[j]);
            }
        }
        for (j, acc_j) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.add(j * ldc), *acc_j);
        }
    }
}

/// Packed kernel kind of [`packed_k16`]: Q6_K weights.
const P_Q6_K: u8 = 0;
/// Packed kernel kind of [`packed_k16`]: Q3_K weights.
const P_Q3_K: u8 = 1;
/// Packed kernel kind of [`packed_k16`]: Q2_K weights.
const P_Q2_K: u8 = 2;

// The kernel reads the high bits' words next to the low bits' (both in the repacked quants):
// Q6_K's `qh` after `ql` (stored by halves, `Q6_K_RUNS`), Q3_K's `hmask` before `qs`.
const _: () = assert!(q6_k::QH == q6_k::QL + 128 && q6_k::SCALES == q6_k::QH + 64);
const _: () = assert!(q3_k::QS == q3_k::HMASK + 32 && q3_k::SCALES == q3_k::QS + 64);

/// The sixteen rows' 6-bit Q3_K scales of sub-blocks 0..16, biased by 32, from the 12
/// byte-planar scale bytes `sb` (ggml's unpacking of `scales`, on byte vectors).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q3_k_scales(sb: &[__m128i; 12]) -> [__m128i; 16] {
    let (m0f, m03) = (_mm_set1_epi8(0x0f), _mm_set1_epi8(0x03));
    let hi2 = |x: __m128i| _mm_slli_epi16::<4>(_mm_and_si128(x, m03));
    std::array::from_fn(|t| match t {
        0..4 => _mm_or_si128(_mm_and_si128(sb[t], m0f), hi2(sb[8 + t])),
        4..8 => _mm_or_si128(_mm_and_si128(sb[t], m0f), hi2(_mm_srli_epi16::<2>(sb[t + 4]))),
        8..12 => _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16::<4>(sb[t - 8]), m0f),
            hi2(_mm_srli_epi16::<4>(sb[t])),
        ),
        _ => _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16::<4>(sb[t - 8]), m0f),
            hi2(_mm_srli_epi16::<6>(sb[t - 4])),
        ),
    })
}

/// Repacked Q6_K, Q3_K or Q2_K weights (`KIND`; one group of sixteen rows) times `NR` Q8_K
/// activation rows, per 16-value sub-block: each 4-value word of the sixteen rows' quants
/// assembled as unsigned bytes (Q6_K: `q + 32` from `ql` nibbles and `qh` bit pairs; Q3_K:
/// `q + 4` from `qs` bit pairs and `hmask` bits; Q2_K: `qs` bit pairs), four `vpdpbusd` give the
/// rows' integer sums, scaled in f32 by `d * sc`; the offsets (32, 4) come off in the integer
/// sums, which start from minus the offset times the activations' `bsums`, Q2_K's mins
/// (`dmin * m`) as integer sums of `m * bsums` ([`mins_times_bsums`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn packed_k16<const NR: usize, const KIND: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features and its operands: `a` one
    // group of sixteen repacked rows of `KIND` of `k` values, `NR` Q8_K activation rows at
    // `b + j * ldb`, and 16 writable outputs at `c + j * ldc`; every load and store below stays
    // within them.
    unsafe {
        let m0f = _mm512_set1_epi8(0x0f);
        let m03 = _mm512_set1_epi8(0x03);
        let bits45 = _mm512_set1_epi8(0x30);
        let bit2 = _mm512_set1_epi8(0x04);
        let bsz = match KIND {
            P_Q6_K => q6_k::BYTES,
            P_Q3_K => q3_k::BYTES,
            _ => q2_k::BYTES,
        };
        // The group's header: the d (and Q2_K's dmin) of the sixteen rows, then the scale
        // bytes byte-planar (16 rows each; 16 bytes per row, Q3_K's 12), then the quants in
        // 4-byte words of the sixteen rows.
        let (n_sc, n_d) = match KIND {
            P_Q6_K => (16, 1),
            P_Q3_K => (12, 1),
            _ => (16, 2),
        };
        let prefetch = NR == 1 && super::prefetch::on(super::prefetch::Site::KQuant512);
        let far = NR == 1 && KIND == P_Q6_K && super::prefetch::on(super::prefetch::Site::Q6KL2);
        let mut acc = [_mm512_setzero_ps(); NR];
        for blk in 0..k / 256 {
            let g = a.add(blk * bsz * ROWS);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(g.cast()));
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(g.add(F16_BYTES * ROWS).cast()));
            let sp = g.add(n_d * F16_BYTES * ROWS);
            let ahead = g.wrapping_add(Q6_K_L2_AHEAD * bsz * ROWS);
            let plane = |t: usize| _mm_loadu_si128(sp.add(16 * t).cast());
            let to_f = |x: __m128i, m: __m512, signed: bool| {
                let v = if signed { _mm512_cvtepi8_epi32(x) } else { _mm512_cvtepu8_epi32(x) };
                _mm512_mul_ps(m, _mm512_cvtepi32_ps(v))
            };
            // d * sc per sub-block, and Q2_K's mins of sub-blocks 2i, 2i + 1 as the 16-bit
            // halves of each row's 32-bit lane (for `vpdpwssd` with pairs of `bsums`).
            let mut wsc = [_mm512_setzero_ps(); 16];
            let mut mins = [_mm512_setzero_si512(); 8];
            match KIND {
                P_Q6_K => {
                    for t in 0..16 {
                        wsc[t] = to_f(plane(t), d, true);
                    }
                }
                P_Q3_K => {
                    let sb: [__m128i; 12] = std::array::from_fn(plane);
                    let sc = q3_k_scales(&sb);
                    for t in 0..16 {
                        wsc[t] = to_f(_mm_sub_epi8(sc[t], _mm_set1_epi8(32)), d, true);
                    }
                }
                _ => {
                    let m0f_128 = _mm_set1_epi8(0x0f);
                    for t in 0..16 {
                        wsc[t] = to_f(_mm_and_si128(plane(t), m0f_128), d, false);
                    }
                    for (i, m) in mins.iter_mut().enumerate() {
                        let lo = _mm512_cvtepu8_epi32(_mm_srli_epi16::<4>(plane(2 * i)));
                        let hi = _mm512_cvtepu8_epi32(_mm_srli_epi16::<4>(plane(2 * i + 1)));
                        *m = _mm512_or_si512(
                            _mm512_and_si512(lo, _mm512_set1_epi32(0x0f)),
                            _mm512_slli_epi32::<16>(_mm512_and_si512(hi, _mm512_set1_epi32(0x0f))),
                        );
                    }
                }
            }
            // Q6_K / Q3_K: each sub-block's integer sums start from minus the offset (32, 4)
            // times the activations' sum of that sub-block, in memory so that the sums are
            // initialised with broadcasts straight from L1.
            let mut start = [[0i32; 16]; NR];
            if KIND != P_Q2_K {
                for (j, start) in start.iter_mut().enumerate() {
                    let p = b.add(j * ldb + blk * q8_k::BYTES + q8_k::BSUMS);
                    let bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256(p.cast()));
                    let shift = if KIND == P_Q6_K { 5 } else { 2 };
                    let neg = _mm512_sub_epi32(
                        _mm512_setzero_si512(),
                        _mm512_sll_epi32(bs, _mm_cvtsi32_si128(shift)),
                    );
                    _mm512_storeu_si512(start.as_mut_ptr().cast(), neg);
                }
            }
            let q = sp.add(n_sc * ROWS);
            let word = |h: usize| _mm512_loadu_si512(q.add(64 * h).cast());
            let mut tj = [_mm512_setzero_ps(); NR];
            for n in 0..2 {
                for m in 0..4 {
                    // The words of values 128n + 32m + 4w.. (w in 0..8).
                    let w: [__m512i; 8] = std::array::from_fn(|w| match KIND {
                        P_Q6_K => {
                            // Low or high nibbles of ql bytes 64n + 32(m % 2) + 4w.., bits 2m,
                            // 2m + 1 of qh bytes 32n + 4w.. moved to bits 4 and 5; half n's 16
                            // ql words then its 8 qh words are words 24n.. (`Q6_K_RUNS`).
                            let ql = word(24 * n + 8 * (m % 2) + w);
                            let lo = if m < 2 { ql } else { _mm512_srli_epi16::<4>(ql) };
                            let qh = word(24 * n + 16 + w);
                            let hi = match m {
                                0 => _mm512_slli_epi16::<4>(qh),
                                1 => _mm512_slli_epi16::<2>(qh),
                                2 => qh,
                                _ => _mm512_srli_epi16::<2>(qh),
                            };
                            _mm512_or_si512(_mm512_and_si512(lo, m0f), _mm512_and_si512(hi, bits45))
                        }
                        P_Q3_K => {
                            // Bits 2m, 2m + 1 of qs bytes 32n + 4w.. (word 8 + 8n + w) and bit
                            // 4n + m of hmask bytes 4w.. (word w), moved to bit 2.
                            let shift = _mm_cvtsi32_si128(2 * m as i32);
                            let lo =
                                _mm512_and_si512(_mm512_srl_epi16(word(8 + 8 * n + w), shift), m03);
                            let hb = _mm_cvtsi32_si128((4 * n + m) as i32);
                            let hm = _mm512_srl_epi16(word(w), hb);
                            _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16::<2>(hm), bit2))
                        }
                        _ => {
                            // Bits 2m, 2m + 1 of qs bytes 32n + 4w.. (word 8n + w).
                            let shift = _mm_cvtsi32_si128(2 * m as i32);
                            _mm512_and_si512(_mm512_srl_epi16(word(8 * n + w), shift), m03)
                        }
                    });
                    let t = 8 * n + 2 * m;
                    if prefetch {
                        let next = g.wrapping_add(bsz * ROWS);
                        prefetch_share::<_MM_HINT_T0>(next, bsz * ROWS, 4 * n + m, 8);
                    }
                    if far {
                        prefetch_share::<_MM_HINT_T1>(ahead, bsz * ROWS, 4 * n + m, 8);
                    }
                    for (j, tj) in tj.iter_mut().enumerate() {
                        let p = b.add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 128 * n + 32 * m);
                        let act = |h: usize| {
                            _mm512_set1_epi32(std::ptr::read_unaligned(p.add(4 * h).cast::<i32>()))
                        };
                        let mut s0 = _mm512_set1_epi32(start[j][t]);
                        let mut s1 = _mm512_set1_epi32(start[j][t + 1]);
                        for h in 0..4 {
                            s0 = _mm512_dpbusd_epi32(s0, w[h], act(h));
                            s1 = _mm512_dpbusd_epi32(s1, w[4 + h], act(4 + h));
                        }
                        *tj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), wsc[t], *tj);
                        *tj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), wsc[t + 1], *tj);
                    }
                }
            }
            for (j, acc_j) in acc.iter_mut().enumerate() {
                let p = b.add(j * ldb + blk * q8_k::BYTES);
                let bd = std::ptr::read_unaligned(p.cast::<f32>());
                let mut off = _mm512_setzero_ps();
                if KIND == P_Q2_K {
                    off = mins_times_bsums(&mins, p.add(q8_k::BSUMS), dmin);
                }
                *acc_j = _mm512_fmadd_ps(_mm512_sub_ps(tj[j], off), _mm512_set1_ps(bd), *acc_j);
            }
        }
        for (j, acc_j) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.add(j * ldc), *acc_j);
        }
    }
}
