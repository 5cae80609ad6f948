//! The x86_64 tile kernels, written once and instantiated per tier by [`x86_tier!`] with the
//! tier's `#[target_feature]` set, register-tile sizes and int8 dot instruction (AVX2
//! `vpmaddubsw` + `vpmaddwd`, or AVX-512 VNNI `vpdpbusd` on 256-bit registers, which Zen 4 and
//! Intel cores run at full rate).
//!
//! Each kernel computes an `MR x NR` register tile: per block, `MR` weight rows and `NR`
//! activation rows are loaded once and every pair is multiplied, so a weight block is reused
//! `NR` times from registers (GEMM) and, with `NR = 1`, `MR` weight rows stream side by side
//! (GEMV).
//!
//! Where each weight type's dot product is (the tile functions `tile_*` that [`x86_tier!`]
//! defines in `avx2.rs` and `avx512.rs`, with the tiles of their `AVX2_TILES` / `AVX512_TILES`):
//!
//! | weights            | kernel               | tiles field          |
//! |--------------------|----------------------|----------------------|
//! | F32, F16, BF16     | `float_tile`         | `float`              |
//! | Q8_0, Q4_0, IQ4_NL | `q_0_tile`           | `q8_0_q4_0`          |
//! | Q4_K, Q5_K         | `q45_k_tile`         | `q4_k_q5_k`          |
//! | Q2_K, Q3_K, Q6_K   | `k16_tile`           | `q2_k_q3_k_q6_k`     |
//! | Q4_1, Q5_0, Q5_1   | `legacy_tile` ([`super::legacy`]) | `q4_1_q5_0_q5_1` |
//!
//! Repacked weights have their own kernels (`avx512.rs`, `packed_avx2.rs`, `packed_f16.rs`), and
//! prompt-sized F32 / BF16 products the packed GEMM (`gemm.rs`).

/// f16 bits to f32.
macro_rules! h2f {
    ($bits:expr) => {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from($bits))))
    };
}

/// Reads an unaligned little-endian u16 at `p`.
macro_rules! rd16 {
    ($p:expr) => {
        std::ptr::read_unaligned($p.cast::<u16>())
    };
}

/// Horizontal sum of 8 f32 lanes.
macro_rules! hsum {
    ($v:expr) => {{
        let v = $v;
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }};
}

/// Loads 8 weights of kind `W` at element `t` of the row at `p`, as f32.
macro_rules! load_w {
    ($W:expr, $p:expr, $t:expr) => {
        match $W {
            W_F32 => _mm256_loadu_ps($p.cast::<f32>().add($t)),
            W_F16 => _mm256_cvtph_ps(_mm_loadu_si128($p.cast::<u16>().add($t).cast())),
            _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_loadu_si128($p.cast::<u16>().add($t).cast()),
            ))),
        }
    };
}

/// One weight of kind `W` at element `t`, as f32 (for the tails).
macro_rules! scalar_w {
    ($W:expr, $p:expr, $t:expr) => {
        match $W {
            W_F32 => std::ptr::read_unaligned($p.cast::<f32>().add($t)),
            W_F16 => h2f!(rd16!($p.add(2 * $t))),
            _ => f32::from_bits(u32::from(rd16!($p.add(2 * $t))) << 16),
        }
    };
}

/// Weight element kinds of the float kernel.
pub(super) const W_F32: u8 = 0;
/// F16 weights.
pub(super) const W_F16: u8 = 1;
/// BF16 weights.
pub(super) const W_BF16: u8 = 2;

pub(super) use {h2f, hsum, load_w, rd16, scalar_w};

use crate::kernels::Tiles;

/// The register tiles of one x86 tier's kernels, by kernel.
pub(super) struct X86Tiles {
    /// F32, F16 and BF16 weights (`float_tile`).
    pub(super) float: Tiles,
    /// Q8_0, Q4_0 and IQ4_NL weights (`q_0_tile`).
    pub(super) q8_0_q4_0: Tiles,
    /// Q4_K and Q5_K weights (`q45_k_tile`): it unpacks a row's quants once per 64 values for
    /// all the tile's columns, so its tiles are one row wide and many columns long.
    pub(super) q4_k_q5_k: Tiles,
    /// Q2_K, Q3_K and Q6_K weights (`k16_tile`, likewise once per 32 values).
    pub(super) q2_k_q3_k_q6_k: Tiles,
    /// Q4_1, Q5_0 and Q5_1 weights (`legacy_tile` of [`super::legacy`]).
    pub(super) q4_1_q5_0_q5_1: Tiles,
}

/// Blocks ahead in its row that a one-column K-quant tile prefetches into L1 (see
/// `prefetch_row_ahead`; measured, docs/x86-measurements.md).
pub(super) const KQUANT_PREFETCH_BLOCKS: usize = 1;
/// Blocks ahead that the same tile prefetches into L2.
pub(super) const KQUANT_PREFETCH_L2_BLOCKS: usize = 4;

/// Instantiates the kernels of one x86 tier in the module that invokes it, with their tile
/// lookup `tile(wt)`: the kernels below and those of [`super::legacy`] (in a module
/// `legacy_q`).
///
/// `$feat`: the target features; `vnni`: whether `vpdpbusd` is available; `$tiles`: the
/// [`X86Tiles`] constant of the tier.
macro_rules! x86_tier {
    ($feat:literal, vnni: $vnni:expr, $tiles:ident) => {
        use super::kern::{h2f, hsum, load_w, rd16, scalar_w};
        use crate::kernels::blocks::{iq4_nl, q2_k, q3_k, q4_0, q4_k, q5_k, q6_k, q8_0, q8_k};
        use crate::kernels::kquant::{q3_k_scale_words, scales_mins};
        use crate::kernels::TileFn;
        use std::arch::x86_64::*;
        use tessera_core::DType;

        const VNNI: bool = $vnni;

        use super::kern::{W_BF16, W_F16, W_F32};

        /// Float weights (F32 / F16 / BF16) times F32 activations.
        #[target_feature(enable = $feat)]
        unsafe fn float_tile<const MR: usize, const NR: usize, const W: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
            // operands: `MR` weight rows of kind `W` at `a + i * lda` and `NR` F32 activation
            // rows at `b + j * ldb`, each of `k` values, and the outputs `c + j * ldc + i` are writable; every load and store
            // below stays within them.
            unsafe {
                if NR == 1 {
                    return float_gemv::<MR, W>(k, a, lda, b, c);
                }
                let mut acc = [[_mm256_setzero_ps(); NR]; MR];
                let kv = k / 8 * 8;
                let mut t = 0;
                while t < kv {
                    let mut av = [_mm256_setzero_ps(); MR];
                    for (i, v) in av.iter_mut().enumerate() {
                        *v = load_w!(W, a.add(i * lda), t);
                    }
                    for j in 0..NR {
                        let bv = _mm256_loadu_ps(b.add(j * ldb).cast::<f32>().add(t));
                        for i in 0..MR {
                            acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
                        }
                    }
                    t += 8;
                }
                for i in 0..MR {
                    for j in 0..NR {
                        let mut s = hsum!(acc[i][j]);
                        let bp = b.add(j * ldb).cast::<f32>();
                        for tt in kv..k {
                            s += scalar_w!(W, a.add(i * lda), tt)
                                * std::ptr::read_unaligned(bp.add(tt));
                        }
                        *c.add(j * ldc + i) = s;
                    }
                }
            }
        }

        /// Float weights times one activation row: one accumulator per row (the `MR` rows'
        /// chains hide the FMA latency while the rows stream), so that each output is the
        /// same sum, in the same order, as [`float_tile`] makes it for several rows (issue 38:
        /// a column's result does not depend on the batch).
        #[target_feature(enable = $feat)]
        unsafe fn float_gemv<const MR: usize, const W: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            c: *mut f32,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
            // operands: `MR` weight rows of kind `W` at `a + i * lda` and one F32 activation row
            // at `b`, each of `k` values, and the outputs `c + i` are writable; every load and store
            // below stays within them.
            unsafe {
                let mut acc = [_mm256_setzero_ps(); MR];
                let bp = b.cast::<f32>();
                let kv = k / 8 * 8;
                let mut t = 0;
                while t < kv {
                    let bv = _mm256_loadu_ps(bp.add(t));
                    for i in 0..MR {
                        acc[i] = _mm256_fmadd_ps(load_w!(W, a.add(i * lda), t), bv, acc[i]);
                    }
                    t += 8;
                }
                for i in 0..MR {
                    let mut s = hsum!(acc[i]);
                    for tt in kv..k {
                        s +=
                            scalar_w!(W, a.add(i * lda), tt) * std::ptr::read_unaligned(bp.add(tt));
                    }
                    *c.add(i) = s;
                }
            }
        }

        /// Q8_0 weights in [`q_0_tile`].
        const Q0_Q8_0: u8 = 0;
        /// Q4_0 weights in [`q_0_tile`].
        const Q0_Q4_0: u8 = 1;
        /// IQ4_NL weights in [`q_0_tile`]: Q4_0's nibbles as indices into the 16 levels
        /// (`vpshufb`), then multiplied as Q8_0's signed quants are.
        const Q0_IQ4_NL: u8 = 2;

        /// Q8_0, Q4_0 or IQ4_NL weights (`W`) times Q8_0 activations.
        #[target_feature(enable = $feat)]
        unsafe fn q_0_tile<const MR: usize, const NR: usize, const W: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
            // operands: `MR` weight rows of `k / 32` blocks of `W` at `a + i * lda` and `NR`
            // Q8_0 activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
            // below stays within them.
            unsafe {
                const _: () = assert!(q4_0::BYTES == iq4_nl::BYTES && q4_0::QS == iq4_nl::QS);
                let q4 = W == Q0_Q4_0;
                let (wsize, qs_at) =
                    if W == Q0_Q8_0 { (q8_0::BYTES, q8_0::QS) } else { (q4_0::BYTES, q4_0::QS) };
                let nb = k / 32;
                let mut acc = [[_mm256_setzero_ps(); NR]; MR];
                let ones16 = _mm256_set1_epi16(1);
                let ones8 = _mm256_set1_epi8(1);
                let nib = _mm256_set1_epi8(0x0f);
                // Zero point of the unsigned weights: 8 for Q4_0 nibbles, 128 for Q8_0 (and
                // IQ4_NL's levels) xor 0x80.
                let zp = _mm256_set1_epi8(if q4 { 8 } else { -128 });
                let flip = _mm256_set1_epi8(-128);
                // IQ4_NL's levels in both lanes (VNNI: plus 128, as Q8_0's quants).
                let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    tessera_core::quant::KVALUES_IQ4NL.as_ptr().cast(),
                ));
                let levels = if VNNI { _mm256_xor_si256(levels, flip) } else { levels };
                for blk in 0..nb {
                    let mut wv = [_mm256_setzero_si256(); MR];
                    let mut wd = [_mm256_setzero_ps(); MR];
                    for i in 0..MR {
                        let p = a.add(i * lda + blk * wsize);
                        wd[i] = _mm256_set1_ps(h2f!(rd16!(p)));
                        wv[i] = if W != Q0_Q8_0 {
                            let q = _mm_loadu_si128(p.add(qs_at).cast());
                            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
                            let nibbles = _mm256_and_si256(both, nib);
                            if q4 {
                                nibbles
                            } else {
                                _mm256_shuffle_epi8(levels, nibbles)
                            }
                        } else if VNNI {
                            _mm256_xor_si256(_mm256_loadu_si256(p.add(qs_at).cast()), flip)
                        } else {
                            _mm256_loadu_si256(p.add(qs_at).cast())
                        };
                    }
                    for j in 0..NR {
                        let p = b.add(j * ldb + blk * q8_0::BYTES);
                        let bd = _mm256_set1_ps(h2f!(rd16!(p)));
                        let bv = _mm256_loadu_si256(p.add(q8_0::QS).cast());
                        if VNNI {
                            // -zp * sum(b), per 4-byte lane: the correction for unsigned weights.
                            let corr = _mm256_sub_epi32(
                                _mm256_setzero_si256(),
                                _mm256_dpbusd_epi32(_mm256_setzero_si256(), zp, bv),
                            );
                            for i in 0..MR {
                                let p32 = _mm256_dpbusd_epi32(corr, wv[i], bv);
                                let s = _mm256_mul_ps(wd[i], bd);
                                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[i][j]);
                            }
                        } else if q4 {
                            let sum8 = _mm256_slli_epi32::<3>(_mm256_madd_epi16(
                                _mm256_maddubs_epi16(ones8, bv),
                                ones16,
                            ));
                            for i in 0..MR {
                                let dot =
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(wv[i], bv), ones16);
                                let p32 = _mm256_sub_epi32(dot, sum8);
                                let s = _mm256_mul_ps(wd[i], bd);
                                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[i][j]);
                            }
                        } else {
                            for i in 0..MR {
                                // |w| * sign(b, w): the products of w * b with an unsigned left side.
                                let ua = _mm256_sign_epi8(wv[i], wv[i]);
                                let sb = _mm256_sign_epi8(bv, wv[i]);
                                let p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ua, sb), ones16);
                                let s = _mm256_mul_ps(wd[i], bd);
                                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[i][j]);
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

        /// Prefetches the block `KQUANT_PREFETCH_BLOCKS` past the one at `p` into L1 and the
        /// one `KQUANT_PREFETCH_L2_BLOCKS` past it into L2 (`bsize` bytes each; past a row's end:
        /// the next row's first blocks), for the one-column K-quant kernels, which wait on RAM.
        #[target_feature(enable = $feat)]
        #[inline]
        fn prefetch_row_ahead(p: *const u8, bsize: usize) {
            let (near, far) = (
                p.wrapping_add(super::kern::KQUANT_PREFETCH_BLOCKS * bsize),
                p.wrapping_add(super::kern::KQUANT_PREFETCH_L2_BLOCKS * bsize),
            );
            for l in (0..bsize).step_by(64) {
                // A prefetch of any address is harmless.
                _mm_prefetch::<_MM_HINT_T0>(near.wrapping_add(l).cast());
                _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(l).cast());
            }
        }

        /// Q4_K or Q5_K (`Q5`: a fifth bit from `qh`) weights times Q8_K activations: the
        /// quants as unsigned bytes times the activations, scaled per 32 values with `madd`;
        /// the mins through the activations' sums, also with `madd`. Per 64 values, each row's
        /// quants are unpacked once for all columns.
        #[target_feature(enable = $feat)]
        unsafe fn q45_k_tile<const MR: usize, const NR: usize, const Q5: bool>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
            // operands: `MR` weight rows of `k / 256` Q4_K or Q5_K blocks at `a + i * lda` and
            // `NR` Q8_K activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
            // below stays within them.
            unsafe {
                // Block size and where the 4-bit quants start (the other fields are where Q4_K has
                // them, and Q5_K's fifth bits follow the scales).
                let (bsize, qs_at) =
                    if Q5 { (q5_k::BYTES, q5_k::QS) } else { (q4_k::BYTES, q4_k::QS) };
                const _: () = assert!(q4_k::DMIN == q5_k::DMIN && q4_k::SCALES == q5_k::SCALES);
                let nb = k / 256;
                let prefetch = NR == 1 && super::prefetch::on(super::prefetch::Site::KQuantTile);
                let mut acc = [[_mm256_setzero_ps(); NR]; MR];
                let mut macc = [[_mm256_setzero_ps(); NR]; MR];
                let nib = _mm256_set1_epi8(0x0f);
                let bit = _mm256_set1_epi8(1);
                for blk in 0..nb {
                    let mut d = [0f32; MR];
                    let mut dmin = [0f32; MR];
                    let mut sc = [[0i16; 8]; MR];
                    // Each sub-block's min twice, against the activations' two sums per 32 values.
                    let mut mins = [_mm256_setzero_si256(); MR];
                    for i in 0..MR {
                        let p = a.add(i * lda + blk * bsize);
                        if prefetch {
                            prefetch_row_ahead(p, bsize);
                        }
                        d[i] = h2f!(rd16!(p));
                        dmin[i] = h2f!(rd16!(p.add(q4_k::DMIN)));
                        let (s, m) = scales_mins(&std::ptr::read_unaligned(
                            p.add(q4_k::SCALES).cast::<[u8; 12]>(),
                        ));
                        let mut m2 = [0i16; 16];
                        for t in 0..8 {
                            sc[i][t] = i16::from(s[t]);
                            m2[2 * t] = i16::from(m[t]);
                            m2[2 * t + 1] = i16::from(m[t]);
                        }
                        mins[i] = _mm256_loadu_si256(m2.as_ptr().cast());
                    }
                    let mut bd = [0f32; NR];
                    for j in 0..NR {
                        let p = b.add(j * ldb + blk * q8_k::BYTES);
                        bd[j] = std::ptr::read_unaligned(p.cast::<f32>());
                        let bs = _mm256_loadu_si256(p.add(q8_k::BSUMS).cast());
                        for i in 0..MR {
                            let ms = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins[i], bs));
                            let s = _mm256_set1_ps(dmin[i] * bd[j]);
                            macc[i][j] = _mm256_fmadd_ps(ms, s, macc[i][j]);
                        }
                    }
                    let mut iacc = [[_mm256_setzero_si256(); NR]; MR];
                    for ch in 0..4 {
                        let mut lo = [_mm256_setzero_si256(); MR];
                        let mut hi = [_mm256_setzero_si256(); MR];
                        let mut s_lo = [_mm256_setzero_si256(); MR];
                        let mut s_hi = [_mm256_setzero_si256(); MR];
                        for i in 0..MR {
                            let p = a.add(i * lda + blk * bsize);
                            let q = _mm256_loadu_si256(p.add(qs_at + 32 * ch).cast());
                            lo[i] = _mm256_and_si256(q, nib);
                            hi[i] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), nib);
                            if Q5 {
                                // Values 64ch + l take bit 2ch of qh[l], values 64ch + 32 + l bit
                                // 2ch + 1.
                                let qh = _mm256_loadu_si256(p.add(q5_k::QH).cast());
                                let h = |s: i32| {
                                    let v = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(s));
                                    _mm256_slli_epi16::<4>(_mm256_and_si256(v, bit))
                                };
                                lo[i] = _mm256_or_si256(lo[i], h(2 * ch as i32));
                                hi[i] = _mm256_or_si256(hi[i], h(2 * ch as i32 + 1));
                            }
                            s_lo[i] = _mm256_set1_epi16(sc[i][2 * ch]);
                            s_hi[i] = _mm256_set1_epi16(sc[i][2 * ch + 1]);
                        }
                        for j in 0..NR {
                            let p = b.add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 64 * ch);
                            let b_lo = _mm256_loadu_si256(p.cast());
                            let b_hi = _mm256_loadu_si256(p.add(32).cast());
                            for i in 0..MR {
                                let x =
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(lo[i], b_lo), s_lo[i]);
                                let y =
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(hi[i], b_hi), s_hi[i]);
                                iacc[i][j] = _mm256_add_epi32(iacc[i][j], _mm256_add_epi32(x, y));
                            }
                        }
                    }
                    for i in 0..MR {
                        for j in 0..NR {
                            let s = _mm256_set1_ps(d[i] * bd[j]);
                            acc[i][j] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[i][j]), s, acc[i][j]);
                        }
                    }
                }
                for i in 0..MR {
                    for j in 0..NR {
                        *c.add(j * ldc + i) = hsum!(_mm256_sub_ps(acc[i][j], macc[i][j]));
                    }
                }
            }
        }

        /// Q6_K in [`k16_tile`]: 6-bit quants stored as q + 32, an 8-bit scale per 16 values.
        const K16_Q6: u8 = 0;
        /// Q3_K in [`k16_tile`]: 3-bit quants stored as q + 4, a 6-bit scale per 16 values.
        const K16_Q3: u8 = 1;
        /// Q2_K in [`k16_tile`]: 2-bit quants, a 4-bit scale and a 4-bit min per 16 values.
        const K16_Q2: u8 = 2;

        /// Q6_K, Q3_K or Q2_K weights (`KIND`) times Q8_K activations: the quants as unsigned
        /// bytes times the activations with `maddubs`, scaled per 16 values with `madd`; the
        /// offsets (32 for Q6_K, 4 for Q3_K) and Q2_K's mins through `madd` of the scales (or
        /// mins) with the activations' sums per 16 values. Per 32 values, each row's quants are
        /// unpacked once for all the tile's columns.
        #[target_feature(enable = $feat)]
        unsafe fn k16_tile<const MR: usize, const NR: usize, const KIND: u8>(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
            // operands: `MR` weight rows of `k / 256` blocks of `KIND` at `a + i * lda` and `NR`
            // Q8_K activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
            // below stays within them.
            unsafe {
                let bsize = match KIND {
                    K16_Q6 => q6_k::BYTES,
                    K16_Q3 => q3_k::BYTES,
                    _ => q2_k::BYTES,
                };
                let nb = k / 256;
                let prefetch = NR == 1 && super::prefetch::on(super::prefetch::Site::KQuantTile);
                let mut acc = [[_mm256_setzero_ps(); NR]; MR];
                let mut macc = [[_mm256_setzero_ps(); NR]; MR];
                let nib = _mm256_set1_epi8(0x0f);
                let three = _mm256_set1_epi8(3);
                let one = _mm256_set1_epi8(1);
                for blk in 0..nb {
                    let mut d = [0f32; MR];
                    let mut dmin = [0f32; MR];
                    // Per 16 values: the scale, and what multiplies the activations' sums (the
                    // offset times the scale, or Q2_K's min).
                    let mut sc = [[0i16; 16]; MR];
                    let mut corr_w = [_mm256_setzero_si256(); MR];
                    for i in 0..MR {
                        let p = a.add(i * lda + blk * bsize);
                        if prefetch {
                            prefetch_row_ahead(p, bsize);
                        }
                        let scales = match KIND {
                            K16_Q6 => {
                                d[i] = h2f!(rd16!(p.add(q6_k::D)));
                                let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                    p.add(q6_k::SCALES).cast(),
                                ));
                                corr_w[i] = _mm256_slli_epi16::<5>(s16);
                                s16
                            }
                            K16_Q3 => {
                                d[i] = h2f!(rd16!(p.add(q3_k::D)));
                                let words = q3_k_scale_words(&std::ptr::read_unaligned(
                                    p.add(q3_k::SCALES).cast(),
                                ));
                                let biased = _mm_loadu_si128(words.as_ptr().cast());
                                let s16 =
                                    _mm256_cvtepi8_epi16(_mm_sub_epi8(biased, _mm_set1_epi8(32)));
                                corr_w[i] = _mm256_slli_epi16::<2>(s16);
                                s16
                            }
                            _ => {
                                d[i] = h2f!(rd16!(p.add(q2_k::D)));
                                dmin[i] = h2f!(rd16!(p.add(q2_k::DMIN)));
                                let packed = _mm_loadu_si128(p.add(q2_k::SCALES).cast());
                                let low = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
                                let high =
                                    _mm_and_si128(_mm_srli_epi16::<4>(packed), _mm_set1_epi8(0x0f));
                                corr_w[i] = _mm256_cvtepu8_epi16(high);
                                _mm256_cvtepu8_epi16(low)
                            }
                        };
                        _mm256_storeu_si256(sc[i].as_mut_ptr().cast(), scales);
                    }
                    let mut bd = [0f32; NR];
                    let mut iacc = [[_mm256_setzero_si256(); NR]; MR];
                    for j in 0..NR {
                        let p = b.add(j * ldb + blk * q8_k::BYTES);
                        bd[j] = std::ptr::read_unaligned(p.cast::<f32>());
                        let bs = _mm256_loadu_si256(p.add(q8_k::BSUMS).cast());
                        for i in 0..MR {
                            let corr = _mm256_madd_epi16(corr_w[i], bs);
                            if KIND == K16_Q2 {
                                let s = _mm256_set1_ps(dmin[i] * bd[j]);
                                macc[i][j] =
                                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), s, macc[i][j]);
                            } else {
                                // Stored values are q + offset: subtract the scaled sums.
                                iacc[i][j] = _mm256_sub_epi32(iacc[i][j], corr);
                            }
                        }
                    }
                    for n in 0..2 {
                        for m in 0..4 {
                            let mut q = [_mm256_setzero_si256(); MR];
                            let mut sv = [_mm256_setzero_si256(); MR];
                            let shift = _mm_cvtsi32_si128(2 * m as i32);
                            let g = 8 * n + 2 * m;
                            for i in 0..MR {
                                let p = a.add(i * lda + blk * bsize);
                                // Values 128n + 32m + l.
                                q[i] = match KIND {
                                    K16_Q6 => {
                                        // 4 bits of ql[64n + 32(m % 2) + l] (low nibble for
                                        // m < 2), 2 bits (2m..) of qh[32n + l].
                                        let ql = p.add(q6_k::QL + 64 * n + 32 * (m % 2));
                                        let ql = _mm256_loadu_si256(ql.cast());
                                        let low =
                                            if m < 2 { ql } else { _mm256_srli_epi16::<4>(ql) };
                                        let qh =
                                            _mm256_loadu_si256(p.add(q6_k::QH + 32 * n).cast());
                                        let high =
                                            _mm256_and_si256(_mm256_srl_epi16(qh, shift), three);
                                        _mm256_or_si256(
                                            _mm256_and_si256(low, nib),
                                            _mm256_slli_epi16::<4>(high),
                                        )
                                    }
                                    K16_Q3 => {
                                        // 2 bits (2m..) of qs[32n + l], the third bit 4n + m of
                                        // hmask[l].
                                        let qs =
                                            _mm256_loadu_si256(p.add(q3_k::QS + 32 * n).cast());
                                        let low =
                                            _mm256_and_si256(_mm256_srl_epi16(qs, shift), three);
                                        let hm = _mm256_loadu_si256(p.add(q3_k::HMASK).cast());
                                        let hb = _mm_cvtsi32_si128((4 * n + m) as i32);
                                        let high = _mm256_and_si256(_mm256_srl_epi16(hm, hb), one);
                                        _mm256_or_si256(low, _mm256_slli_epi16::<2>(high))
                                    }
                                    _ => {
                                        // 2 bits (2m..) of qs[32n + l].
                                        let qs =
                                            _mm256_loadu_si256(p.add(q2_k::QS + 32 * n).cast());
                                        _mm256_and_si256(_mm256_srl_epi16(qs, shift), three)
                                    }
                                };
                                sv[i] = _mm256_set_m128i(
                                    _mm_set1_epi16(sc[i][g + 1]),
                                    _mm_set1_epi16(sc[i][g]),
                                );
                            }
                            for j in 0..NR {
                                let p = b
                                    .add(j * ldb + blk * q8_k::BYTES + q8_k::QS + 128 * n + 32 * m);
                                let bv = _mm256_loadu_si256(p.cast());
                                for i in 0..MR {
                                    let x =
                                        _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], bv), sv[i]);
                                    iacc[i][j] = _mm256_add_epi32(iacc[i][j], x);
                                }
                            }
                        }
                    }
                    for i in 0..MR {
                        for j in 0..NR {
                            let s = _mm256_set1_ps(d[i] * bd[j]);
                            acc[i][j] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[i][j]), s, acc[i][j]);
                        }
                    }
                }
                for i in 0..MR {
                    for j in 0..NR {
                        *c.add(j * ldc + i) = hsum!(_mm256_sub_ps(acc[i][j], macc[i][j]));
                    }
                }
            }
        }

        tiled!($feat, tile_f32, float_tile, $tiles.float, W_F32);
        tiled!($feat, tile_f16, float_tile, $tiles.float, W_F16);
        tiled!($feat, tile_bf16, float_tile, $tiles.float, W_BF16);
        tiled!($feat, tile_q8_0, q_0_tile, $tiles.q8_0_q4_0, Q0_Q8_0);
        tiled!($feat, tile_q4_0, q_0_tile, $tiles.q8_0_q4_0, Q0_Q4_0);
        tiled!($feat, tile_iq4_nl, q_0_tile, $tiles.q8_0_q4_0, Q0_IQ4_NL);
        tiled!($feat, tile_q4_k, q45_k_tile, $tiles.q4_k_q5_k, false);
        tiled!($feat, tile_q5_k, q45_k_tile, $tiles.q4_k_q5_k, true);
        tiled!($feat, tile_q6_k, k16_tile, $tiles.q2_k_q3_k_q6_k, K16_Q6);
        tiled!($feat, tile_q2_k, k16_tile, $tiles.q2_k_q3_k_q6_k, K16_Q2);
        tiled!($feat, tile_q3_k, k16_tile, $tiles.q2_k_q3_k_q6_k, K16_Q3);

        /// The Q4_1, Q5_0 and Q5_1 kernels of this tier.
        mod legacy_q {
            super::super::legacy::legacy_tier!($feat, $vnni, super::$tiles.q4_1_q5_0_q5_1);
        }

        /// The tile kernel of this tier for weights of `wt`, with its tile size.
        pub(super) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
            Some(match wt {
                DType::F32 => $tiles.float.entry(tile_f32),
                DType::F16 => $tiles.float.entry(tile_f16),
                DType::BF16 => $tiles.float.entry(tile_bf16),
                DType::Q8_0 => $tiles.q8_0_q4_0.entry(tile_q8_0),
                DType::Q4_0 => $tiles.q8_0_q4_0.entry(tile_q4_0),
                DType::IQ4_NL => $tiles.q8_0_q4_0.entry(tile_iq4_nl),
                DType::Q4_K => $tiles.q4_k_q5_k.entry(tile_q4_k),
                DType::Q5_K => $tiles.q4_k_q5_k.entry(tile_q5_k),
                DType::Q6_K => $tiles.q2_k_q3_k_q6_k.entry(tile_q6_k),
                DType::Q2_K => $tiles.q2_k_q3_k_q6_k.entry(tile_q2_k),
                DType::Q3_K => $tiles.q2_k_q3_k_q6_k.entry(tile_q3_k),
                _ => return legacy_q::tile(wt),
            })
        }
    };
}

pub(super) use x86_tier;
