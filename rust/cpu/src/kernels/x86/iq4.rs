//! The x86 kernels for IQ4_XS weights (IQ4_NL's run with Q4_0's: `q_0_tile` of
//! [`super::kern`] and the repacked kernels), written once and instantiated per tier.
//!
//! IQ4_XS times Q8_K activations: per 32-value group, the sixteen index bytes of a row become
//! its 32 levels with one `vpshufb`; the levels are signed, so they are multiplied as their
//! magnitudes (`vpmaddubsw`'s unsigned side) times the activations with their signs, pairs of
//! products summed in 16 bits (at most 2 * 127 * 127); the group's 6-bit scale (minus 32)
//! multiplies the pairs with `vpmaddwd` (AVX-512 VNNI: `vpdpwssd`, which also accumulates), so
//! that a super-block's sums are exact in 32 bits and scaled by `d * d_b` once. Each row's
//! levels are built once per group for all the tile's activation rows.

/// Instantiates the IQ4_XS kernel of one x86 tier and its `tile` lookup in the module that
/// invokes it: `$feat` the target features, `vnni` whether `vpdpwssd` is available, `$tiles`
/// the register tiles.
macro_rules! iq4_tier {
    ($feat:literal, vnni: $vnni:expr, $tiles:expr) => {
        use crate::kernels::blocks::{iq4_xs, q8_k};
        use crate::kernels::x86::kern::{h2f, hsum, rd16};
        use crate::kernels::{TileFn, Tiles};
        use std::arch::x86_64::*;
        use tessera_core::DType;

        const TILES: Tiles = $tiles;

        /// IQ4_XS weights times Q8_K activations (see the module doc); `_G` is unused.
        #[target_feature(enable = $feat)]
        unsafe fn iq4_xs_tile<const MR: usize, const NR: usize, const _G: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and
            // the tile's operands: `MR` weight rows of `k / 256` IQ4_XS blocks at
            // `a + i * lda` and `NR` Q8_K activation rows at `b + j * ldb`, and the outputs
            // `c + j * ldc + i` are writable; every load and store below stays within them
            // (the prefetches may point past them, which is harmless).
            unsafe {
                let nb = k / 256;
                let prefetch =
                    NR == 1 && super::super::prefetch::on(super::super::prefetch::Site::KQuantTile);
                let nib = _mm256_set1_epi8(0x0f);
                let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    tessera_core::quant::KVALUES_IQ4NL.as_ptr().cast(),
                ));
                let mut acc = [[_mm256_setzero_ps(); NR]; MR];
                for blk in 0..nb {
                    let mut d = [0f32; MR];
                    // The eight group scales minus 32, per row.
                    let mut sc = [[0i16; 8]; MR];
                    for i in 0..MR {
                        let p = a.add(i * lda + blk * iq4_xs::BYTES);
                        if prefetch {
                            // The block 1 ahead into L1 and 4 ahead into L2, as the one-column
                            // K-quant tiles (past the row's end: the next row's, harmless).
                            for (ahead, l) in [(1, 0), (1, 64), (1, 128), (4, 0), (4, 64)] {
                                let q = p.wrapping_add(ahead * iq4_xs::BYTES + l).cast();
                                if ahead == 1 {
                                    _mm_prefetch::<_MM_HINT_T0>(q);
                                } else {
                                    _mm_prefetch::<_MM_HINT_T1>(q);
                                }
                            }
                        }
                        d[i] = h2f!(rd16!(p));
                        let h = u32::from(rd16!(p.add(iq4_xs::SCALES_H)));
                        let l = u32::from_le(std::ptr::read_unaligned(
                            p.add(iq4_xs::SCALES_L).cast::<u32>(),
                        ));
                        for g in 0..8 {
                            let ls = ((l >> (4 * g)) & 0x0f) | (((h >> (2 * g)) & 3) << 4);
                            sc[i][g] = ls as i16 - 32;
                        }
                    }
                    let mut iacc = [[_mm256_setzero_si256(); NR]; MR];
                    for g in 0..8 {
                        let mut w = [_mm256_setzero_si256(); MR];
                        let mut aw = [_mm256_setzero_si256(); MR];
                        let mut s = [_mm256_setzero_si256(); MR];
                        for i in 0..MR {
                            let p = a.add(i * lda + blk * iq4_xs::BYTES + iq4_xs::QS + 16 * g);
                            let q = _mm_loadu_si128(p.cast());
                            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
                            w[i] = _mm256_shuffle_epi8(levels, _mm256_and_si256(both, nib));
                            aw[i] = _mm256_abs_epi8(w[i]);
                            s[i] = _mm256_set1_epi16(sc[i][g]);
                        }
                        for j in 0..NR {
                            let p = b.add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 32 * g);
                            let y = _mm256_loadu_si256(p.cast());
                            for i in 0..MR {
                                let p16 = _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(y, w[i]));
                                iacc[i][j] = if $vnni {
                                    _mm256_dpwssd_epi32(iacc[i][j], p16, s[i])
                                } else {
                                    _mm256_add_epi32(iacc[i][j], _mm256_madd_epi16(p16, s[i]))
                                };
                            }
                        }
                    }
                    for j in 0..NR {
                        let bd = std::ptr::read_unaligned(
                            b.add(j * ldb + blk * q8_k::BYTES).cast::<f32>(),
                        );
                        for i in 0..MR {
                            let s = _mm256_set1_ps(d[i] * bd);
                            acc[i][j] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[i][j]), s, acc[i][j]);
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

        tiled!($feat, tile_iq4_xs, iq4_xs_tile, TILES, 0);

        /// The IQ4_XS tile kernel of this tier, with its tile size.
        pub(in crate::kernels::x86) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
            match wt {
                DType::IQ4_XS => Some(TILES.entry(tile_iq4_xs)),
                _ => None,
            }
        }
    };
}

/// The AVX2 tier's IQ4_XS kernel.
pub(super) mod avx2 {
    iq4_tier!("avx2,fma,f16c", vnni: false, Tiles::new(1, 8).with_gemv(4));
}

/// The AVX-512 VNNI tier's IQ4_XS kernel.
pub(super) mod avx512 {
    #![allow(clippy::incompatible_msrv)]
    iq4_tier!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        vnni: true,
        Tiles::new(2, 8).with_gemv(4)
    );
}

/// IQ4_XS repacked in the 16 x 4 layout ([`crate::kernels::repack`]) for the AVX-512 VNNI tier:
/// per group block the sixteen rows' `d`, their `scales_h`, their `scales_l` (4 bytes each),
/// then the index bytes in 4-byte words of the sixteen rows.
pub(super) mod packed512 {
    #![allow(clippy::incompatible_msrv)]
    #![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

    use crate::kernels::blocks::{iq4_xs, q8_k, F16_BYTES};
    use crate::kernels::x86::prefetch::{on, Site};
    use crate::kernels::TileFn;
    use std::arch::x86_64::*;
    use tessera_core::DType;

    /// Rows per repacked group.
    const ROWS: usize = 16;

    // The group's header: d, scales_h and scales_l of each row, field after field.
    const _: () =
        assert!(iq4_xs::SCALES_H == F16_BYTES && iq4_xs::SCALES_L == 4 && iq4_xs::QS == 8);

    /// One group of sixteen repacked IQ4_XS rows times `NR` Q8_K activation rows: per 32-value
    /// group, the index words of the sixteen rows become their levels plus 128 (`vpshufb`,
    /// unsigned) and eight `vpdpbusd` give the rows' integer sums, which start from -128 times
    /// the activations' sum of the group (from their `bsums`); scaled in f32 by
    /// `d * (ls - 32)`, and by the activations' `d` once per block.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn group<const NR: usize, const UNUSED: u8>(
        k: usize,
        a: *const u8,
        b: *const u8,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: the caller guarantees this function's target features and its operands: `a`
        // one group of sixteen repacked IQ4_XS rows of `k` values, `NR` Q8_K activation rows
        // at `b + j * ldb`, and 16 writable outputs at `c + j * ldc`; every load and store
        // below stays within them (the prefetches may point past them, which is harmless).
        unsafe {
            let bsz = iq4_xs::BYTES * ROWS;
            let nib = _mm512_set1_epi8(0x0f);
            let levels = _mm512_xor_si512(
                _mm512_broadcast_i32x4(_mm_loadu_si128(
                    tessera_core::quant::KVALUES_IQ4NL.as_ptr().cast(),
                )),
                _mm512_set1_epi8(-128),
            );
            let prefetch = NR == 1 && on(Site::KQuant512);
            let mut acc = [_mm512_setzero_ps(); NR];
            for blk in 0..k / 256 {
                let g = a.add(blk * bsz);
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(g.cast()));
                let sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(g.add(F16_BYTES * ROWS).cast()));
                let sl = _mm512_loadu_si512(g.add(iq4_xs::SCALES_L * ROWS).cast());
                // d * (ls - 32) of each 32-value group, per row.
                let wsc: [__m512; 8] = std::array::from_fn(|t| {
                    let lo = _mm512_srl_epi32(sl, _mm_cvtsi32_si128(4 * t as i32));
                    let hi = _mm512_srl_epi32(sh, _mm_cvtsi32_si128(2 * t as i32));
                    let ls = _mm512_or_si512(
                        _mm512_and_si512(lo, _mm512_set1_epi32(0x0f)),
                        _mm512_slli_epi32::<4>(_mm512_and_si512(hi, _mm512_set1_epi32(3))),
                    );
                    let ls = _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(ls))
                });
                // Per activation row, -128 times the sum of each group's 32 quants.
                let mut start = [[0i32; 8]; NR];
                for (j, start) in start.iter_mut().enumerate() {
                    let p = b.add(j * ldb + blk * q8_k::BYTES + q8_k::BSUMS);
                    let s =
                        _mm256_madd_epi16(_mm256_loadu_si256(p.cast()), _mm256_set1_epi16(-128));
                    _mm256_storeu_si256(start.as_mut_ptr().cast(), s);
                }
                let q = g.add(iq4_xs::QS * ROWS);
                let next = g.wrapping_add(bsz);
                let mut tj = [_mm512_setzero_ps(); NR];
                for grp in 0..8 {
                    if prefetch {
                        // The next group block into L1, a share per 32-value group.
                        for l in 0..bsz.div_ceil(64 * 8) {
                            let at = next.wrapping_add(64 * (grp * bsz.div_ceil(64 * 8) + l));
                            _mm_prefetch::<_MM_HINT_T0>(at.cast());
                        }
                    }
                    // Word h: bytes 4h.. of the group's 16 index bytes of every row; its low
                    // nibbles are values 4h.., its high nibbles values 16 + 4h.. of the group.
                    let mut lo = [_mm512_setzero_si512(); 4];
                    let mut hi = [_mm512_setzero_si512(); 4];
                    for h in 0..4 {
                        let w = _mm512_loadu_si512(q.add(64 * (4 * grp + h)).cast());
                        lo[h] = _mm512_shuffle_epi8(levels, _mm512_and_si512(w, nib));
                        hi[h] = _mm512_shuffle_epi8(
                            levels,
                            _mm512_and_si512(_mm512_srli_epi16::<4>(w), nib),
                        );
                    }
                    for j in 0..NR {
                        let y = b.add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 32 * grp);
                        let word =
                            |o: usize| _mm512_set1_epi32(std::ptr::read_unaligned(y.add(o).cast()));
                        let mut sl = _mm512_set1_epi32(start[j][grp]);
                        let mut sh = _mm512_setzero_si512();
                        for h in 0..4 {
                            sl = _mm512_dpbusd_epi32(sl, lo[h], word(4 * h));
                            sh = _mm512_dpbusd_epi32(sh, hi[h], word(16 + 4 * h));
                        }
                        let s = _mm512_cvtepi32_ps(_mm512_add_epi32(sl, sh));
                        tj[j] = _mm512_fmadd_ps(s, wsc[grp], tj[j]);
                    }
                }
                for j in 0..NR {
                    let bd =
                        std::ptr::read_unaligned(b.add(j * ldb + blk * q8_k::BYTES).cast::<f32>());
                    acc[j] = _mm512_fmadd_ps(tj[j], _mm512_set1_ps(bd), acc[j]);
                }
            }
            for (j, acc_j) in acc.iter().enumerate() {
                _mm512_storeu_ps(c.add(j * ldc), *acc_j);
            }
        }
    }

    packed_tiled!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        packed_iq4_xs,
        group,
        0,
        16,
        [16, 8, 4, 1]
    );

    /// The kernel for 16 x 4 repacked IQ4_XS weights, with its tile size (16 rows by 16
    /// columns).
    pub(in crate::kernels::x86) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
        (wt == DType::IQ4_XS).then_some((packed_iq4_xs as TileFn, ROWS, 16))
    }
}

/// IQ4_XS repacked in the 8 x 8 layout ([`crate::kernels::repack`]) for the AVX2 tier: per group
/// block the eight rows' `d`, their `scales_h`, their `scales_l` (4 bytes each), then the index
/// bytes in 8-byte words of the eight rows, so that one 32-byte load holds a word of four rows
/// and `vpmaddubsw` multiplies it by an 8-byte activation word broadcast to the four lanes.
pub(super) mod packed256 {
    #![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

    use crate::kernels::blocks::{iq4_xs, q8_k, F16_BYTES};
    use crate::kernels::x86::prefetch::{on, Site};
    use crate::kernels::TileFn;
    use std::arch::x86_64::*;
    use tessera_core::DType;

    /// Rows per repacked group.
    const ROWS: usize = 8;
    /// The order of the rows in the lanes after `vphaddd` of rows 0..4 and rows 4..8 (its own
    /// inverse).
    const LANES: [i32; 8] = [0, 1, 4, 5, 2, 3, 6, 7];
    /// Group blocks ahead that the one-row kernel prefetches into L1 and into L2 (about the
    /// bytes ahead of the AVX2 tier's repacked Q4_0 kernel).
    const PREFETCH_BLOCKS: (usize, usize) = (1, 3);

    /// One group of eight repacked IQ4_XS rows times `NR` Q8_K activation rows: per 32-value
    /// group, the index words of the rows become their signed levels (`vpshufb`), multiplied as
    /// their magnitudes times the activations with their signs (`vpmaddubsw`), the pairs times
    /// each row's group scale minus 32 (`vpmaddwd`), exact in 32 bits for the block, which is
    /// scaled by `d * d_b` once.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const NR: usize, const UNUSED: u8>(
        k: usize,
        a: *const u8,
        b: *const u8,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: the caller guarantees AVX2 and its operands: `a` one group of eight repacked
        // IQ4_XS rows of `k` values, `NR` Q8_K activation rows at `b + j * ldb`, and 8 writable
        // outputs at `c + j * ldc`; every load and store below stays within them (the
        // prefetches may point past them, which is harmless).
        unsafe {
            let bsz = iq4_xs::BYTES * ROWS;
            let lanes = _mm256_loadu_si256(LANES.as_ptr().cast());
            let nib = _mm256_set1_epi8(0x0f);
            let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                tessera_core::quant::KVALUES_IQ4NL.as_ptr().cast(),
            ));
            // A row's i16 scale four times for each of the rows of a 32-byte word (rows 0..4
            // of a half in `rows[0]`, rows 4..8 in `rows[1]`), from the eight rows' scales.
            let spread = [
                _mm256_setr_epi8(
                    0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7,
                    6, 7, 6, 7, 6, 7,
                ),
                _mm256_setr_epi8(
                    8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 12, 13, 12, 13, 12, 13,
                    12, 13, 14, 15, 14, 15, 14, 15, 14, 15,
                ),
            ];
            let prefetch = NR == 1 && on(Site::Packed256);
            let mut acc = [_mm256_setzero_ps(); NR];
            for blk in 0..k / 256 {
                let g = a.add(blk * bsz);
                if prefetch {
                    let (near, far) = (
                        g.wrapping_add(PREFETCH_BLOCKS.0 * bsz),
                        g.wrapping_add(PREFETCH_BLOCKS.1 * bsz),
                    );
                    for l in (0..bsz).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(near.wrapping_add(l).cast());
                        _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(l).cast());
                    }
                }
                let d = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128(g.cast())), lanes);
                let sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(g.add(F16_BYTES * ROWS).cast()));
                let sl = _mm256_loadu_si256(g.add(iq4_xs::SCALES_L * ROWS).cast());
                let q = g.add(iq4_xs::QS * ROWS);
                let mut iacc = [_mm256_setzero_si256(); NR];
                for grp in 0..8 {
                    let lo4 = _mm256_srl_epi32(sl, _mm_cvtsi32_si128(4 * grp as i32));
                    let hi2 = _mm256_srl_epi32(sh, _mm_cvtsi32_si128(2 * grp as i32));
                    let ls = _mm256_sub_epi32(
                        _mm256_or_si256(
                            _mm256_and_si256(lo4, _mm256_set1_epi32(0x0f)),
                            _mm256_slli_epi32::<4>(_mm256_and_si256(hi2, _mm256_set1_epi32(3))),
                        ),
                        _mm256_set1_epi32(32),
                    );
                    let ls16 = _mm256_broadcastsi128_si256(_mm_packs_epi32(
                        _mm256_castsi256_si128(ls),
                        _mm256_extracti128_si256::<1>(ls),
                    ));
                    let scale = spread.map(|s| _mm256_shuffle_epi8(ls16, s));
                    // raw[2t + half]: word 2grp + t (index bytes 8t.. of the group), rows
                    // 4 half..; its low nibbles are values 8t.., its high ones 16 + 8t...
                    let raw: [__m256i; 4] = std::array::from_fn(|t| {
                        _mm256_loadu_si256(q.add(128 * grp + 32 * t).cast())
                    });
                    let lo = raw.map(|r| _mm256_shuffle_epi8(levels, _mm256_and_si256(r, nib)));
                    let hi = raw.map(|r| {
                        _mm256_shuffle_epi8(
                            levels,
                            _mm256_and_si256(_mm256_srli_epi16::<4>(r), nib),
                        )
                    });
                    let (alo, ahi) =
                        (lo.map(|r| _mm256_abs_epi8(r)), hi.map(|r| _mm256_abs_epi8(r)));
                    for j in 0..NR {
                        let y = b.add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 32 * grp);
                        let word = |t: usize| {
                            _mm256_set1_epi64x(std::ptr::read_unaligned(y.add(8 * t).cast::<i64>()))
                        };
                        let yw = [word(0), word(1), word(2), word(3)];
                        let dot = |w: __m256i, aw: __m256i, y: __m256i, s: __m256i| {
                            _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w)), s)
                        };
                        let half = |h: usize| {
                            _mm256_add_epi32(
                                _mm256_add_epi32(
                                    dot(lo[h], alo[h], yw[0], scale[h]),
                                    dot(lo[2 + h], alo[2 + h], yw[1], scale[h]),
                                ),
                                _mm256_add_epi32(
                                    dot(hi[h], ahi[h], yw[2], scale[h]),
                                    dot(hi[2 + h], ahi[2 + h], yw[3], scale[h]),
                                ),
                            )
                        };
                        iacc[j] = _mm256_add_epi32(iacc[j], _mm256_hadd_epi32(half(0), half(1)));
                    }
                }
                for j in 0..NR {
                    let bd =
                        std::ptr::read_unaligned(b.add(j * ldb + blk * q8_k::BYTES).cast::<f32>());
                    let s = _mm256_mul_ps(d, _mm256_set1_ps(bd));
                    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[j]), s, acc[j]);
                }
            }
            for j in 0..NR {
                _mm256_storeu_ps(c.add(j * ldc), _mm256_permutevar8x32_ps(acc[j], lanes));
            }
        }
    }

    packed_tiled!("avx2,fma,f16c", packed_iq4_xs, group, 0, ROWS, [4, 3, 2, 1]);

    /// The kernel for 8 x 8 repacked IQ4_XS weights, with its tile size (8 rows, 4 columns).
    pub(in crate::kernels::x86) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
        (wt == DType::IQ4_XS).then_some((packed_iq4_xs as TileFn, ROWS, 4))
    }
}
