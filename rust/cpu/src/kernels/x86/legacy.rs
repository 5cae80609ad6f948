//! The x86 kernels for ggml's other legacy quants, Q4_1, Q5_0 and Q5_1, written once and
//! instantiated per tier by [`legacy_tier!`] (which [`super::kern::x86_tier!`] invokes in a
//! module `legacy_q` of `avx2.rs` / `avx512.rs`).
//!
//! The weights are unpacked to unsigned bytes (nibbles, plus the fifth bit from `qh` at bit 4)
//! and multiplied with the signed Q8 activations by `vpmaddubsw` + `vpmaddwd` (AVX2) or
//! `vpdpbusd` (VNNI); Q5_0's zero point 16 is taken off with the activations' quant sums.
//! For Q4_1 / Q5_1 the weight minimum `m` multiplies `d_b * sum(q_b)`, with the sum taken
//! exactly from the quants (as the reference dequantization does) rather than from the
//! block's f16 `s`, so a single block matches the scalar tier as closely as a long row.

/// Kernel kind: Q4_1 weights (times Q8_1).
pub(super) const K_Q4_1: u8 = 0;
/// Q5_0 weights (times Q8_0).
pub(super) const K_Q5_0: u8 = 1;
/// Q5_1 weights (times Q8_1).
pub(super) const K_Q5_1: u8 = 2;

/// Instantiates the Q4_1 / Q5_0 / Q5_1 kernels of one x86 tier and its `tile` lookup (inside
/// [`super::kern::x86_tier!`]).
///
/// `$feat`: the target features; `$vnni`: whether `vpdpbusd` (and AVX-512 BW/VL byte masks)
/// are available; `$tiles`: their register tiles ([`crate::kernels::Tiles`]).
macro_rules! legacy_tier {
    ($feat:literal, $vnni:expr, $tiles:expr) => {
        use crate::kernels::blocks::{q4_1, q5_0, q5_1, q8_0, q8_1, F16_BYTES};
        use crate::kernels::x86::kern::{h2f, hsum, rd16};
        use crate::kernels::x86::legacy::{K_Q4_1, K_Q5_0, K_Q5_1};
        use crate::kernels::TileFn;
        use std::arch::x86_64::*;
        use tessera_core::DType;

        const VNNI: bool = $vnni;
        /// Blocks ahead that the one-row tiles prefetch.
        const AHEAD: usize = 16;

        /// The fifth bits of a Q5 block (`qh`, bit `t` for value `t`) as bytes `0x10` / `0`.
        #[target_feature(enable = $feat)]
        #[inline]
        unsafe fn fifth_bits(qh: u32) -> __m256i {
            if VNNI {
                #[allow(unused_unsafe)]
                let bits = {
                    // SAFETY: VNNI is set only in the AVX-512 VNNI tier, whose target features
                    // (this function's) include AVX-512 BW and VL. (There the call is safe.)
                    unsafe { _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10)) }
                };
                bits
            } else {
                // Byte t gets byte t / 8 of qh, then tests its bit t % 8.
                let idx = _mm256_setr_epi64x(
                    0,
                    0x0101_0101_0101_0101,
                    0x0202_0202_0202_0202,
                    0x0303_0303_0303_0303,
                );
                let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), idx);
                let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                _mm256_and_si256(set, _mm256_set1_epi8(0x10))
            }
        }

        /// Sums of each four activation quants, in the eight 32-bit lanes.
        #[target_feature(enable = $feat)]
        #[inline]
        unsafe fn quad_sums(bv: __m256i) -> __m256i {
            if VNNI {
                #[allow(unused_unsafe)]
                let sums = {
                    // SAFETY: VNNI is set only in the AVX-512 VNNI tier, whose target features
                    // (this function's) include AVX-512 VNNI and VL. (There the call is safe.)
                    unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), bv) }
                };
                sums
            } else {
                _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_set1_epi8(1), bv),
                    _mm256_set1_epi16(1),
                )
            }
        }

        /// Q4_1, Q5_0 or Q5_1 weights (`KIND`) times Q8_1 / Q8_0 activations.
        #[target_feature(enable = $feat)]
        unsafe fn legacy_tile<const MR: usize, const NR: usize, const KIND: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
            // operands: `MR` weight rows of `k / 32` blocks of `KIND` at `a + i * lda` and `NR`
            // Q8_1 / Q8_0 activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
            // below stays within them.
            unsafe {
                // Weight block size, offsets of its nibbles and its fifth bits; the activations: Q8_1
                // (for the types with a minimum, which sits next to `d`) or Q8_0.
                let (wsize, qoff, qh_at) = match KIND {
                    K_Q4_1 => (q4_1::BYTES, q4_1::QS, 0),
                    K_Q5_0 => (q5_0::BYTES, q5_0::QS, q5_0::QH),
                    _ => (q5_1::BYTES, q5_1::QS, q5_1::QH),
                };
                let has_min = KIND != K_Q5_0;
                let five = KIND != K_Q4_1;
                let (bsize, bqs) =
                    if has_min { (q8_1::BYTES, q8_1::QS) } else { (q8_0::BYTES, q8_0::QS) };
                let nb = k / 32;
                let nib = _mm256_set1_epi8(0x0f);
                let ones16 = _mm256_set1_epi16(1);
                let mut acc = [[_mm256_setzero_ps(); NR]; MR];
                let prefetch = NR == 1
                    && crate::kernels::x86::prefetch::on(
                        crate::kernels::x86::prefetch::Site::Legacy,
                    );
                for blk in 0..nb {
                    if prefetch {
                        // A one-row product waits on RAM's latency with MR row streams: each
                        // row's line AHEAD blocks on goes to L1 now.
                        for i in 0..MR {
                            let ahead = a.wrapping_add(i * lda + (blk + AHEAD) * wsize);
                            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                        }
                    }
                    let mut wv = [_mm256_setzero_si256(); MR];
                    let mut wd = [_mm256_setzero_ps(); MR];
                    let mut wm = [_mm256_setzero_ps(); MR];
                    for i in 0..MR {
                        let p = a.add(i * lda + blk * wsize);
                        if has_min {
                            // d and m side by side: one conversion, two broadcasts.
                            const _: () = assert!(q4_1::M == F16_BYTES && q5_1::M == F16_BYTES);
                            let dm = std::ptr::read_unaligned(p.cast::<i32>());
                            let dm = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(dm)));
                            wd[i] = _mm256_broadcastss_ps(_mm256_castps256_ps128(dm));
                            wm[i] = _mm256_permutevar8x32_ps(dm, _mm256_set1_epi32(1));
                        } else {
                            wd[i] = _mm256_set1_ps(h2f!(rd16!(p)));
                        }
                        let q = _mm_loadu_si128(p.add(qoff).cast());
                        let lo_hi =
                            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), nib);
                        wv[i] = if five {
                            let qh = std::ptr::read_unaligned(p.add(qh_at).cast::<u32>());
                            _mm256_or_si256(lo_hi, fifth_bits(u32::from_le(qh)))
                        } else {
                            lo_hi
                        };
                    }
                    for j in 0..NR {
                        let p = b.add(j * ldb + blk * bsize);
                        let bdf = h2f!(rd16!(p));
                        let bd = _mm256_set1_ps(bdf);
                        let bv = _mm256_loadu_si256(p.add(bqs).cast());
                        let sums = quad_sums(bv);
                        // Q5_0: -16 * sum(b) per lane, the zero point of the unsigned weights.
                        let corr = if has_min {
                            _mm256_setzero_si256()
                        } else {
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<4>(sums))
                        };
                        // Q4_1 / Q5_1: d_b * (lane sums of q_b), to be scaled by each row's m.
                        let bs = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), bd);
                        for i in 0..MR {
                            let p32 = if VNNI {
                                _mm256_dpbusd_epi32(corr, wv[i], bv)
                            } else {
                                let dot =
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(wv[i], bv), ones16);
                                _mm256_add_epi32(dot, corr)
                            };
                            let s = _mm256_mul_ps(wd[i], bd);
                            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[i][j]);
                            if has_min {
                                acc[i][j] = _mm256_fmadd_ps(bs, wm[i], acc[i][j]);
                            }
                        }
                    }
                }
                for i in 0..MR {
                    for j in 0..NR {
                        *c.add(j * ldc + i) = hsum!(acc[i][j]);
                    }
                }
            }
        }

        tiled!($feat, tile_q4_1, legacy_tile, $tiles, K_Q4_1);
        tiled!($feat, tile_q5_0, legacy_tile, $tiles, K_Q5_0);
        tiled!($feat, tile_q5_1, legacy_tile, $tiles, K_Q5_1);

        /// The Q4_1 / Q5_0 / Q5_1 tile kernel of this tier for weights of `wt`, with its tile
        /// size; `None` for other types.
        pub(in crate::kernels::x86) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
            Some(match wt {
                DType::Q4_1 => $tiles.entry(tile_q4_1),
                DType::Q5_0 => $tiles.entry(tile_q5_0),
                DType::Q5_1 => $tiles.entry(tile_q5_1),
                _ => return None,
            })
        }
    };
}

pub(super) use legacy_tier;
