//! The NEON + i8mm tier: Q8_0, Q4_0, IQ4_NL, Q4_K and Q6_K weights with `smmla` (emitted with
//! `asm!`), two weight rows by two activation rows per instruction; edges and GEMV use the
//! dotprod kernels (IQ4_XS: see [`super::iq4`]), whose float steps per block (scaling and
//! accumulation of each block's exact integer sum) the tiles here repeat in the same order, so
//! that a column's result does not depend on the batch (issue 38, `tests/matmul_columns.rs`).
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::neon::load_q;
use super::{f16_at, smmla, Q0_IQ4_NL, Q0_Q4_0, Q0_Q8_0};
use crate::kernels::blocks::{q4_0, q4_k, q6_k, q8_0, q8_k};
use crate::kernels::{TileFn, Tiles};
use std::arch::aarch64::*;
use tessera_core::DType;

/// Interleaves two 32-byte rows (as two halves each) into four `smmla` operands: 8 bytes of
/// row 0 then the same 8 bytes of row 1.
macro_rules! zip_rows {
    ($r0:expr, $r1:expr) => {{
        let ((x0, x1), (y0, y1)): ((int8x16_t, int8x16_t), (int8x16_t, int8x16_t)) = ($r0, $r1);
        let z = |p: int8x16_t, q: int8x16_t| {
            (
                vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(p), vreinterpretq_s64_s8(q))),
                vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(p), vreinterpretq_s64_s8(q))),
            )
        };
        let (a0, a1) = z(x0, y0);
        let (a2, a3) = z(x1, y1);
        [a0, a1, a2, a3]
    }};
}

/// A 4 x 4 tile (two row pairs by two column pairs) of Q8_0 / Q4_0 / IQ4_NL weights (`W`)
/// times Q8_0 activations.
#[target_feature(enable = "neon,i8mm")]
unsafe fn q_0_4x4<const W: u8>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: 4 weight rows of `k / 32` blocks of `W` at `a + i * lda` and 4 Q8_0
    // activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
    // below (and in the body macro) stays within them.
    unsafe {
        let (ws, qs) = if W == Q0_Q8_0 { (q8_0::BYTES, q8_0::QS) } else { (q4_0::BYTES, q4_0::QS) };
        // acc[rp][cp] = [r0c0, r0c1, r1c0, r1c1] of row pair rp and column pair cp.
        let mut acc = [[vdupq_n_f32(0.0); 2]; 2];
        for blk in 0..k / 32 {
            let mut wz = [[vdupq_n_s8(0); 4]; 2];
            let mut wd = [vdupq_n_f32(0.0); 2];
            for rp in 0..2 {
                let p0 = a.add(2 * rp * lda + blk * ws);
                let p1 = p0.add(lda);
                wz[rp] = zip_rows!(load_q!(p0.add(qs), W), load_q!(p1.add(qs), W));
                let (d0, d1) = (f16_at(p0), f16_at(p1));
                wd[rp] = vld1q_f32([d0, d0, d1, d1].as_ptr());
            }
            for cp in 0..2 {
                let q0 = b.add(2 * cp * ldb + blk * q8_0::BYTES);
                let q1 = q0.add(ldb);
                let bz = zip_rows!(
                    load_q!(q0.add(q8_0::QS), Q0_Q8_0),
                    load_q!(q1.add(q8_0::QS), Q0_Q8_0)
                );
                let (e0, e1) = (f16_at(q0), f16_at(q1));
                let bd = vld1q_f32([e0, e1, e0, e1].as_ptr());
                for rp in 0..2 {
                    let mut s = vdupq_n_s32(0);
                    for h in 0..4 {
                        s = smmla!(s, wz[rp][h], bz[h]);
                    }
                    acc[rp][cp] = vfmaq_f32(acc[rp][cp], vcvtq_f32_s32(s), vmulq_f32(wd[rp], bd));
                }
            }
        }
        store_pairs(&acc, c, ldc);
    }
}

/// A tile of `2 RP` Q4_K weight rows by `2 CP` Q8_K activation rows with `smmla`: each 32-value
/// sub-block gives the 2 x 2 products of a row pair and a column pair in four `smmla`, scaled
/// per row by the sub-block's 6-bit scale; the mins are applied through the activations' block
/// sums, as in ggml.
#[target_feature(enable = "neon,i8mm")]
unsafe fn q4_k_pairs<const RP: usize, const CP: usize>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: `2 RP` weight rows of `k / 256` Q4_K blocks at `a + i * lda` and `2 CP`
    // Q8_K activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
    // below (and in the body macro) stays within them.
    unsafe {
        let m4 = vdupq_n_u8(0x0f);
        // acc[rp][cp] = [r0c0, r0c1, r1c0, r1c1] of row pair rp and column pair cp: the scales'
        // part, and in accm the mins' part, summed at the end (the dotprod body's order, which
        // the edges and GEMV run, so that a column does not depend on the batch).
        let mut acc = [[vdupq_n_f32(0.0); CP]; RP];
        let mut accm = [[vdupq_n_f32(0.0); CP]; RP];
        for blk in 0..k / 256 {
            // Per row pair: d and dmin as [d0, d0, d1, d1], each sub-block's scales as
            // [s0, s0, s1, s1], and the mins of both rows.
            let mut d = [vdupq_n_f32(0.0); RP];
            let mut dmin = [vdupq_n_f32(0.0); RP];
            let mut sc = [[vdupq_n_s32(0); 8]; RP];
            let mut mn = [[[0i32; 8]; 2]; RP];
            for rp in 0..RP {
                let p0 = a.add(2 * rp * lda + blk * q4_k::BYTES);
                let p1 = p0.add(lda);
                let (s0, m0) =
                    super::scales_mins(&std::ptr::read_unaligned(p0.add(q4_k::SCALES).cast()));
                let (s1, m1) =
                    super::scales_mins(&std::ptr::read_unaligned(p1.add(q4_k::SCALES).cast()));
                let (d0, d1) = (f16_at(p0), f16_at(p1));
                d[rp] = vld1q_f32([d0, d0, d1, d1].as_ptr());
                let (n0, n1) = (f16_at(p0.add(q4_k::DMIN)), f16_at(p1.add(q4_k::DMIN)));
                dmin[rp] = vld1q_f32([n0, n0, n1, n1].as_ptr());
                for t in 0..8 {
                    let (x, y) = (i32::from(s0[t]), i32::from(s1[t]));
                    sc[rp][t] = vld1q_s32([x, x, y, y].as_ptr());
                    mn[rp][0][t] = i32::from(m0[t]);
                    mn[rp][1][t] = i32::from(m1[t]);
                }
            }
            for cp in 0..CP {
                let y0 = b.add(2 * cp * ldb + blk * q8_k::BYTES);
                let y1 = y0.add(ldb);
                let (e0, e1) = (std::ptr::read_unaligned(y0.cast::<f32>()), {
                    std::ptr::read_unaligned(y1.cast::<f32>())
                });
                let bd = vld1q_f32([e0, e1, e0, e1].as_ptr());
                // The activations' sums per 32-value sub-block.
                let sums = |y: *const u8| {
                    let s = std::ptr::read_unaligned(y.add(q8_k::BSUMS).cast::<[i16; 16]>());
                    std::array::from_fn::<i32, 8, _>(|t| {
                        i32::from(s[2 * t]) + i32::from(s[2 * t + 1])
                    })
                };
                let (bs0, bs1) = (sums(y0), sums(y1));
                for rp in 0..RP {
                    let mut sumi = vdupq_n_s32(0);
                    for ch in 0..4 {
                        let q0 = a.add(2 * rp * lda + blk * q4_k::BYTES + q4_k::QS + 32 * ch);
                        let q1 = q0.add(lda);
                        let (x0, x1) = ((vld1q_u8(q0), vld1q_u8(q0.add(16))), {
                            (vld1q_u8(q1), vld1q_u8(q1.add(16)))
                        });
                        let low = |v: uint8x16_t| vreinterpretq_s8_u8(vandq_u8(v, m4));
                        let high = |v: uint8x16_t| vreinterpretq_s8_u8(vshrq_n_u8::<4>(v));
                        let lo = zip_rows!((low(x0.0), low(x0.1)), (low(x1.0), low(x1.1)));
                        let hi = zip_rows!((high(x0.0), high(x0.1)), (high(x1.0), high(x1.1)));
                        let off = q8_k::QS + 64 * ch;
                        let (ya, yb) = (y0.add(off).cast::<i8>(), y1.add(off).cast());
                        let half =
                            |y: *const i8, o: usize| (vld1q_s8(y.add(o)), vld1q_s8(y.add(o + 16)));
                        let yl = zip_rows!(half(ya, 0), half(yb, 0));
                        let yh = zip_rows!(half(ya, 32), half(yb, 32));
                        let (mut sl, mut sh) = (vdupq_n_s32(0), vdupq_n_s32(0));
                        for h in 0..4 {
                            sl = smmla!(sl, lo[h], yl[h]);
                            sh = smmla!(sh, hi[h], yh[h]);
                        }
                        sumi = vmlaq_s32(sumi, sl, sc[rp][2 * ch]);
                        sumi = vmlaq_s32(sumi, sh, sc[rp][2 * ch + 1]);
                    }
                    let mut ms = [0i32; 4];
                    for t in 0..8 {
                        ms[0] += mn[rp][0][t] * bs0[t];
                        ms[1] += mn[rp][0][t] * bs1[t];
                        ms[2] += mn[rp][1][t] * bs0[t];
                        ms[3] += mn[rp][1][t] * bs1[t];
                    }
                    let ms = vcvtq_f32_s32(vld1q_s32(ms.as_ptr()));
                    let (dot, min) =
                        (vmulq_f32(vcvtq_f32_s32(sumi), d[rp]), vmulq_f32(ms, vnegq_f32(dmin[rp])));
                    acc[rp][cp] = vfmaq_f32(acc[rp][cp], dot, bd);
                    accm[rp][cp] = vfmaq_f32(accm[rp][cp], min, bd);
                }
            }
        }
        for rp in 0..RP {
            for cp in 0..CP {
                acc[rp][cp] = vaddq_f32(acc[rp][cp], accm[rp][cp]);
            }
        }
        store_pairs(&acc, c, ldc);
    }
}

/// A tile of `2 RP` Q6_K weight rows by `2 CP` Q8_K activation rows with `smmla`: each 16-value
/// group gives the 2 x 2 products of a row pair and a column pair in two `smmla`, scaled per row
/// by the group's 8-bit scale.
#[target_feature(enable = "neon,i8mm")]
unsafe fn q6_k_pairs<const RP: usize, const CP: usize>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: `2 RP` weight rows of `k / 256` Q6_K blocks at `a + i * lda` and `2 CP`
    // Q8_K activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
    // below (and in the body macro) stays within them.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); CP]; RP];
        for blk in 0..k / 256 {
            for rp in 0..RP {
                let p0 = a.add(2 * rp * lda + blk * q6_k::BYTES);
                let p1 = p0.add(lda);
                let (d0, d1) = (f16_at(p0.add(q6_k::D)), f16_at(p1.add(q6_k::D)));
                let d = vld1q_f32([d0, d0, d1, d1].as_ptr());
                let s0 = std::ptr::read_unaligned(p0.add(q6_k::SCALES).cast::<[i8; 16]>());
                let s1 = std::ptr::read_unaligned(p1.add(q6_k::SCALES).cast::<[i8; 16]>());
                let (g0, g1) = (super::q6_k_groups(p0), super::q6_k_groups(p1));
                // Each group of both rows as two smmla operands (8 values of row 0, then of row 1).
                let w: [[int8x16_t; 2]; 16] = std::array::from_fn(|g| zip_pair(g0[g], g1[g]));
                for cp in 0..CP {
                    let y0 = b.add(2 * cp * ldb + blk * q8_k::BYTES);
                    let y1 = y0.add(ldb);
                    let (e0, e1) = (std::ptr::read_unaligned(y0.cast::<f32>()), {
                        std::ptr::read_unaligned(y1.cast::<f32>())
                    });
                    let bd = vld1q_f32([e0, e1, e0, e1].as_ptr());
                    let (ya, yb) = (y0.add(q8_k::QS).cast::<i8>(), y1.add(q8_k::QS).cast::<i8>());
                    let mut sumi = vdupq_n_s32(0);
                    for g in 0..16 {
                        let y = zip_pair(vld1q_s8(ya.add(16 * g)), vld1q_s8(yb.add(16 * g)));
                        let s = smmla!(smmla!(vdupq_n_s32(0), w[g][0], y[0]), w[g][1], y[1]);
                        let (x, z) = (i32::from(s0[g]), i32::from(s1[g]));
                        sumi = vmlaq_s32(sumi, s, vld1q_s32([x, x, z, z].as_ptr()));
                    }
                    // Not fused: the dotprod body's `acc += d * bd * sumi` (the edges and GEMV).
                    let scale = vmulq_f32(d, bd);
                    acc[rp][cp] = vaddq_f32(acc[rp][cp], vmulq_f32(scale, vcvtq_f32_s32(sumi)));
                }
            }
        }
        store_pairs(&acc, c, ldc);
    }
}

/// Two 16-byte rows as two `smmla` operands: the first 8 bytes of both, then the last 8.
#[inline(always)]
fn zip_pair(p: int8x16_t, q: int8x16_t) -> [int8x16_t; 2] {
    // SAFETY: NEON is part of every aarch64 CPU; these are register operations.
    unsafe {
        let (p, q) = (vreinterpretq_s64_s8(p), vreinterpretq_s64_s8(q));
        [vreinterpretq_s8_s64(vzip1q_s64(p, q)), vreinterpretq_s8_s64(vzip2q_s64(p, q))]
    }
}

/// Writes `2 RP x 2 CP` results held as `[r0c0, r0c1, r1c0, r1c1]` per row and column pair.
///
/// # Safety
///
/// `c` must be writable at `j * ldc + i` for `i < 2 RP`, `j < 2 CP`.
#[inline(always)]
pub(super) unsafe fn store_pairs<const RP: usize, const CP: usize>(
    acc: &[[float32x4_t; CP]; RP],
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: `c` is writable at `j * ldc + i` for `i < 2 RP`, `j < 2 CP` (the caller's contract):
    // the stores below.
    unsafe {
        for rp in 0..RP {
            for cp in 0..CP {
                let mut v = [0f32; 4];
                vst1q_f32(v.as_mut_ptr(), acc[rp][cp]);
                for (n, &x) in v.iter().enumerate() {
                    let (r, cc) = (2 * rp + n / 2, 2 * cp + n % 2);
                    *c.add(cc * ldc + r) = x;
                }
            }
        }
    }
}

macro_rules! i8mm_tile {
    ($name:ident, $dtype:expr, $full:expr) => {
        /// Tile kernel (see [`TileFn`]): full 4 x 4 tiles with `smmla`, the rest (the edges,
        /// and every GEMV) with the dotprod tier's kernel.
        ///
        /// # Safety
        ///
        /// As [`TileFn`].
        #[target_feature(enable = "neon,dotprod,i8mm")]
        unsafe fn $name(o: $crate::kernels::Operands, mr: usize, nr: usize) {
            const FULL: $crate::kernels::Tiles = $crate::kernels::arm::i8mm::SMMLA;
            if mr == FULL.mr && nr == FULL.nr {
                // SAFETY: a full tile of the caller's operands, under this function's target
                // features, which include i8mm (TileFn's contract).
                unsafe { $full(o.k, o.a, o.lda, o.b, o.ldb, o.c, o.ldc) };
                return;
            }
            match $crate::kernels::arm::dotprod_tile($dtype) {
                // SAFETY: the dotprod kernel under the same contract; this function's target
                // features include dotprod.
                Some((edge, _, _)) => unsafe { edge(o, mr, nr) },
                None => unreachable!("the dotprod tier has a kernel for {}", $dtype),
            }
        }
    };
}

pub(super) use {i8mm_tile, zip_rows};

i8mm_tile!(tile_q8_0, DType::Q8_0, q_0_4x4::<Q0_Q8_0>);
i8mm_tile!(tile_q4_0, DType::Q4_0, q_0_4x4::<Q0_Q4_0>);
i8mm_tile!(tile_iq4_nl, DType::IQ4_NL, q_0_4x4::<Q0_IQ4_NL>);
i8mm_tile!(tile_q4_k, DType::Q4_K, q4_k_pairs::<2, 2>);
i8mm_tile!(tile_q6_k, DType::Q6_K, q6_k_pairs::<2, 2>);

/// The tile of the `smmla` kernels: two row pairs by two column pairs.
pub(super) const SMMLA: Tiles = Tiles::new(4, 4);

/// The i8mm tile kernel for weights of `wt`, with its tile size.
pub(super) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    Some(match wt {
        DType::Q8_0 => SMMLA.entry(tile_q8_0),
        DType::Q4_0 => SMMLA.entry(tile_q4_0),
        DType::IQ4_NL => SMMLA.entry(tile_iq4_nl),
        DType::Q4_K => SMMLA.entry(tile_q4_k),
        DType::Q6_K => SMMLA.entry(tile_q6_k),
        _ => return None,
    })
}
