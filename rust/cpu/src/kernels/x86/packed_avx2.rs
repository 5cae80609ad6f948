//! AVX2 kernels on the 8 x 8 repacked layout ([`PackLayout::R8W8`]): per block of 32 values a
//! group holds the eight rows' f16 scales, then the quants in 64-byte chunks of eight 8-byte
//! words (one per row). One 32-byte load holds a word of four rows; `vpmaddubsw` multiplies
//! it by an 8-byte activation word broadcast to the four lanes, so that each weight register
//! serves every activation row of the tile (GEMM) and the GEMV streams the weights once.
//!
//! Activations are in the "Q8_0 with sums" format ([`crate::kernels::MatKernel::repacked`]):
//! Q4_0 nibbles are used unsigned (0..15) and `8 * sum` of the activation quants subtracted;
//! Q5_0 the same with the fifth bits (stored as byte masks, four bytes per 32 quants) at bit 4
//! and `16 * sum`. IQ4_NL's nibbles index its 16 levels (`vpshufb`), which are multiplied as
//! Q8_0's signed quants are (their magnitudes times the activations with their signs).
//!
//! [`PackLayout::R8W8`]: crate::kernels::repack::PackLayout::R8W8
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use crate::kernels::blocks::{iq4_nl, q4_0, q5_0, q8_0, q8_1, F16_BYTES};
use crate::kernels::TileFn;
use std::arch::x86_64::*;
use tessera_core::DType;

/// Rows per group.
const ROWS: usize = 8;
/// Bytes of one activation block (f16 scale, i16 sum, 32 quants: sized as Q8_1).
const ACT_BLOCK: usize = q8_1::BYTES;
/// Group blocks ahead that the one-row kernel prefetches into L1, and into L2: the same bytes
/// ahead as the AVX-512 tier's (whose groups are twice as tall). Measured with this tier on a
/// Xeon (`TESSERA_CPU_TIER=avx2`), K = 640, from RAM, 1 / 2 threads, alternating, against no
/// prefetch: Q5_0 2048 rows 6.1-6.6 -> 8.7-9.1 / 11.7-12.0 -> 15.9-16.1 GB/s, 65536 rows 5.2 ->
/// 10.3-10.7 / 10.2-10.4 -> 18.2-19.0, Q8_0 262144 rows 10.6-10.9 -> 11.7-11.9 / 20.2-20.5 ->
/// 23.4-23.9, Q4_0 65536 rows 7.4 -> 9.6-12.6 / 12.5-14.5 -> 22.1-22.9; in cache unchanged.
const GEMV_PREFETCH_BLOCKS: usize = 8;
/// See [`GEMV_PREFETCH_BLOCKS`].
const GEMV_PREFETCH_L2_BLOCKS: usize = 24;
/// The order of the rows in the lanes after `vphaddd` of rows 0..4 and rows 4..8 (its own
/// inverse: the same permutation puts them back in order).
const LANES: [i32; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

/// The f16 scale and the quant sum of the activation block at `p`.
///
/// # Safety
///
/// `p` points to four readable bytes; the CPU supports F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn act_header(p: *const u8) -> (f32, i32) {
    // SAFETY: caller's contract.
    unsafe {
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
            std::ptr::read_unaligned(p.cast::<u16>()),
        ))));
        (d, i32::from(std::ptr::read_unaligned(p.add(q8_1::S).cast::<i16>())))
    }
}

/// The 8-byte activation word `t` of the block at `y` (its quants) in all four 64-bit lanes.
///
/// # Safety
///
/// `y + 8 * t .. y + 8 * t + 8` is readable; the CPU supports AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn word(y: *const u8, t: usize) -> __m256i {
    // SAFETY: caller's contract.
    unsafe { _mm256_set1_epi64x(std::ptr::read_unaligned(y.add(8 * t).cast::<i64>())) }
}

/// Packed kernel kind: Q4_0 weights.
const P_Q4_0: u8 = 0;
/// Packed kernel kind: Q8_0 weights.
const P_Q8_0: u8 = 1;
/// Packed kernel kind: Q5_0 weights.
const P_Q5_0: u8 = 2;
/// Packed kernel kind: IQ4_NL weights (Q4_0's layout).
const P_IQ4_NL: u8 = 3;

/// A 32-bit mask as 32 bytes, `0x10` where its bit is set (Q5_0's fifth bits).
///
/// # Safety
///
/// The CPU supports AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(m: u32) -> __m256i {
    // Byte t gets byte t / 8 of the mask, then tests its bit t % 8.
    let idx =
        _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(m as i32), idx);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// One group of eight repacked rows times `NR` activation rows: Q4_0, Q5_0, Q8_0 or IQ4_NL
/// weights (`KIND`).
///
/// # Safety
///
/// The CPU supports AVX2, FMA and F16C; `a` is a group of eight rows of `k` values repacked
/// in 8 x 8; `b + j * ldb` (`j < NR`) are activation rows of `k` values in the Q8_0-with-sums
/// format; `c + j * ldc .. + 8` are writable.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<const NR: usize, const KIND: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: every load stays within the group's and the activation rows' blocks (caller's
    // contract); the stores write the eight outputs of each activation row.
    unsafe {
        let (gsize, zp, qs_at) = match KIND {
            P_Q4_0 => (q4_0::BYTES * ROWS, 8, F16_BYTES * ROWS),
            P_Q5_0 => (q5_0::BYTES * ROWS, 16, q5_0::QS * ROWS),
            P_IQ4_NL => (iq4_nl::BYTES * ROWS, 0, F16_BYTES * ROWS),
            _ => (q8_0::BYTES * ROWS, 0, F16_BYTES * ROWS),
        };
        let lanes = _mm256_loadu_si256(LANES.as_ptr().cast());
        let nib = _mm256_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); NR];
        let prefetch = NR == 1 && super::prefetch::on(super::prefetch::Site::Packed256);
        for blk in 0..k / 32 {
            let g = a.add(blk * gsize);
            if prefetch {
                // A matrix-vector product waits on RAM (see GEMV_PREFETCH_BLOCKS); past the
                // group's end the blocks ahead are the next group's, which follows it.
                let (near, far) = (
                    g.wrapping_add(GEMV_PREFETCH_BLOCKS * gsize),
                    g.wrapping_add(GEMV_PREFETCH_L2_BLOCKS * gsize),
                );
                for l in (0..gsize).step_by(64) {
                    // A prefetch of any address is harmless.
                    _mm_prefetch::<_MM_HINT_T0>(near.wrapping_add(l).cast());
                    _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(l).cast());
                }
            }
            let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128(g.cast())), lanes);
            let q = g.add(qs_at);
            if KIND == P_IQ4_NL {
                // As Q4_0's chunks below: raw[2h + half] holds values 8h.. (low nibbles) and
                // 16 + 8h.. (high) of rows 4 * half..; each nibble becomes its level.
                let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    tessera_core::quant::KVALUES_IQ4NL.as_ptr().cast(),
                ));
                let raw: [__m256i; 4] =
                    std::array::from_fn(|t| _mm256_loadu_si256(q.add(32 * t).cast()));
                let lo = raw.map(|r| _mm256_shuffle_epi8(levels, _mm256_and_si256(r, nib)));
                let hi = raw.map(|r| {
                    _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16::<4>(r), nib))
                });
                let (alo, ahi) = (lo.map(|r| _mm256_abs_epi8(r)), hi.map(|r| _mm256_abs_epi8(r)));
                for j in 0..NR {
                    let p = b.add(j * ldb + blk * ACT_BLOCK);
                    let (bd, _) = act_header(p);
                    let y: [__m256i; 4] = std::array::from_fn(|t| word(p.add(q8_1::QS), t));
                    // |w| times the activation with w's sign: at most 2 * 127 * 127 per pair,
                    // so each product is widened on its own.
                    let dot = |w: __m256i, aw: __m256i, y: __m256i| {
                        _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w)), ones)
                    };
                    let half = |h: usize| {
                        _mm256_add_epi32(
                            _mm256_add_epi32(
                                dot(lo[h], alo[h], y[0]),
                                dot(lo[2 + h], alo[2 + h], y[1]),
                            ),
                            _mm256_add_epi32(
                                dot(hi[h], ahi[h], y[2]),
                                dot(hi[2 + h], ahi[2 + h], y[3]),
                            ),
                        )
                    };
                    let s = _mm256_hadd_epi32(half(0), half(1));
                    acc[j] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(s),
                        _mm256_mul_ps(dw, _mm256_set1_ps(bd)),
                        acc[j],
                    );
                }
            } else if KIND != P_Q8_0 {
                // raw[2h + half]: chunk h (bytes 8h..8h + 8 of qs), rows 4 * half .. + 4. Its low
                // nibbles are values 8h.., its high nibbles values 16 + 8h..
                let raw: [__m256i; 4] =
                    std::array::from_fn(|t| _mm256_loadu_si256(q.add(32 * t).cast()));
                let mut lo = raw.map(|r| _mm256_and_si256(r, nib));
                let mut hi = raw.map(|r| _mm256_and_si256(_mm256_srli_epi16::<4>(r), nib));
                if KIND == P_Q5_0 {
                    // Mask t: the fifth bits of lo[t], mask 4 + t those of hi[t].
                    let masks = g.add(F16_BYTES * ROWS).cast::<u32>();
                    for t in 0..4 {
                        let m = |i: usize| u32::from_le(std::ptr::read_unaligned(masks.add(i)));
                        lo[t] = _mm256_or_si256(lo[t], fifth_bits(m(t)));
                        hi[t] = _mm256_or_si256(hi[t], fifth_bits(m(4 + t)));
                    }
                }
                for j in 0..NR {
                    let p = b.add(j * ldb + blk * ACT_BLOCK);
                    let (bd, sum) = act_header(p);
                    let y: [__m256i; 4] = std::array::from_fn(|t| word(p.add(q8_1::QS), t));
                    // Each product pair is at most 2 * 31 * 127: four of them fit in i16.
                    let half = |h: usize| {
                        let s = _mm256_add_epi16(
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(lo[h], y[0]),
                                _mm256_maddubs_epi16(lo[2 + h], y[1]),
                            ),
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(hi[h], y[2]),
                                _mm256_maddubs_epi16(hi[2 + h], y[3]),
                            ),
                        );
                        _mm256_madd_epi16(s, ones)
                    };
                    let s = _mm256_hadd_epi32(half(0), half(1));
                    let s = _mm256_sub_epi32(s, _mm256_set1_epi32(zp * sum));
                    acc[j] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(s),
                        _mm256_mul_ps(dw, _mm256_set1_ps(bd)),
                        acc[j],
                    );
                }
            } else {
                // raw[2h + half]: chunk h (values 8h..8h + 8), rows 4 * half .. + 4; signed, so
                // multiplied as |w| times the activation with w's sign.
                let raw: [__m256i; 8] =
                    std::array::from_fn(|t| _mm256_loadu_si256(q.add(32 * t).cast()));
                let abs = raw.map(|r| _mm256_abs_epi8(r));
                for j in 0..NR {
                    let p = b.add(j * ldb + blk * ACT_BLOCK);
                    let (bd, _) = act_header(p);
                    let y: [__m256i; 4] = std::array::from_fn(|t| word(p.add(q8_1::QS), t));
                    let half = |h: usize| {
                        let dot = |t: usize| {
                            let r = 2 * t + h;
                            _mm256_madd_epi16(
                                _mm256_maddubs_epi16(abs[r], _mm256_sign_epi8(y[t], raw[r])),
                                ones,
                            )
                        };
                        _mm256_add_epi32(
                            _mm256_add_epi32(dot(0), dot(1)),
                            _mm256_add_epi32(dot(2), dot(3)),
                        )
                    };
                    let s = _mm256_hadd_epi32(half(0), half(1));
                    acc[j] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(s),
                        _mm256_mul_ps(dw, _mm256_set1_ps(bd)),
                        acc[j],
                    );
                }
            }
        }
        for j in 0..NR {
            _mm256_storeu_ps(c.add(j * ldc), _mm256_permutevar8x32_ps(acc[j], lanes));
        }
    }
}

packed_tiled!("avx2,fma,f16c", packed_q4_0, group, P_Q4_0, ROWS, [4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_q5_0, group, P_Q5_0, ROWS, [4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_q8_0, group, P_Q8_0, ROWS, [4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_iq4_nl, group, P_IQ4_NL, ROWS, [4, 3, 2, 1]);

/// The kernel for 8 x 8 repacked weights of `wt`, with its tile size (8 rows, 4 columns).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_0 => Some((packed_q4_0 as TileFn, ROWS, 4)),
        DType::Q8_0 => Some((packed_q8_0 as TileFn, ROWS, 4)),
        DType::Q5_0 => Some((packed_q5_0 as TileFn, ROWS, 4)),
        DType::IQ4_NL => Some((packed_iq4_nl as TileFn, ROWS, 4)),
        _ => None,
    }
}
