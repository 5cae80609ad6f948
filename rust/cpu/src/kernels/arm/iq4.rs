//! The aarch64 kernels for IQ4_XS weights (IQ4_NL's run with Q4_0's: `load_q` of
//! [`super::neon`], the repacked kernels), one per tier: NEON (`smull` + `sadalp`), dotprod
//! (`sdot`) and i8mm (`smmla` on row and column pairs, its edges and GEMV through dotprod).
//!
//! IQ4_XS times Q8_K activations: per 32-value group, the sixteen index bytes of a row become
//! its 32 signed levels with two `tbl`; their products with the activations are summed in 32
//! bits and multiplied by the group's 6-bit scale (minus 32) in integers (`mla`), so that a
//! super-block's sum is exact and scaled by `d * d_b` once. Each row's levels are built once per
//! group for all the tile's activation rows.
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::i8mm::{i8mm_tile, store_pairs, zip_rows};
use super::{f16_at, sdot, smmla};
use crate::kernels::blocks::{iq4_xs, q8_k};
use crate::kernels::{TileFn, Tiles};
use std::arch::aarch64::*;
use tessera_core::DType;

/// The eight group scales minus 32 of the IQ4_XS block at `p` (ls = the low nibble of
/// `scales_l` byte `g / 2`, half `g % 2`, and bits `2 g, 2 g + 1` of `scales_h` above it).
///
/// # Safety
///
/// `p` points to a readable IQ4_XS block.
#[inline(always)]
unsafe fn group_scales(p: *const u8) -> [i32; 8] {
    // SAFETY: the six bytes read are in the block (caller's contract).
    let (h, l) = unsafe {
        (
            u32::from(u16::from_le(std::ptr::read_unaligned(
                p.add(iq4_xs::SCALES_H).cast::<u16>(),
            ))),
            u32::from_le(std::ptr::read_unaligned(p.add(iq4_xs::SCALES_L).cast::<u32>())),
        )
    };
    std::array::from_fn(|g| (((l >> (4 * g)) & 0x0f) | (((h >> (2 * g)) & 3) << 4)) as i32 - 32)
}

/// The 32 levels of group `g` of the IQ4_XS block at `p`: values `0..16` (the low nibbles) and
/// `16..32` (the high).
///
/// # Safety
///
/// `p` points to a readable IQ4_XS block and `g < 8`.
#[inline(always)]
unsafe fn group_levels(p: *const u8, g: usize) -> (int8x16_t, int8x16_t) {
    // SAFETY: the 16 index bytes of group g are in the block (caller's contract); NEON is part
    // of every aarch64 target this crate builds for.
    unsafe {
        let q = vld1q_u8(p.add(iq4_xs::QS + 16 * g));
        let levels = vld1q_s8(tessera_core::quant::KVALUES_IQ4NL.as_ptr());
        (vqtbl1q_s8(levels, vandq_u8(q, vdupq_n_u8(0x0f))), vqtbl1q_s8(levels, vshrq_n_u8::<4>(q)))
    }
}

/// An IQ4_XS x Q8_K tile kernel body; `$dot32v` gives the products of two 32-byte signed
/// vectors (as pairs of `int8x16_t`) as an `int32x4_t`.
macro_rules! iq4_xs_body {
    ($MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot32v:ident) => {{
        // One sum per output, each block's integer sum (exact) scaled and added with one fused
        // multiply-add: the i8mm tile's order, so that a column does not depend on the batch.
        let mut acc = [[0f32; $NR]; $MR];
        for blk in 0..$k / 256 {
            let mut d = [0f32; $MR];
            let mut sc = [[0i32; 8]; $MR];
            for i in 0..$MR {
                let p = $a.add(i * $lda + blk * iq4_xs::BYTES);
                d[i] = f16_at(p);
                sc[i] = group_scales(p);
            }
            let mut iacc = [[vdupq_n_s32(0); $NR]; $MR];
            for g in 0..8 {
                let mut w = [(vdupq_n_s8(0), vdupq_n_s8(0)); $MR];
                for i in 0..$MR {
                    w[i] = group_levels($a.add(i * $lda + blk * iq4_xs::BYTES), g);
                }
                for j in 0..$NR {
                    let y = $b.add(j * $ldb + blk * q8_k::BYTES + q8_k::QS + 32 * g);
                    let y = vld1q_s8_x2(y.cast::<i8>());
                    for i in 0..$MR {
                        let s = $dot32v!(w[i], (y.0, y.1));
                        iacc[i][j] = vmlaq_n_s32(iacc[i][j], s, sc[i][g]);
                    }
                }
            }
            for j in 0..$NR {
                let bd =
                    std::ptr::read_unaligned($b.add(j * $ldb + blk * q8_k::BYTES).cast::<f32>());
                for i in 0..$MR {
                    let sumi = vaddvq_s32(iacc[i][j]) as f32;
                    acc[i][j] = sumi.mul_add(d[i] * bd, acc[i][j]);
                }
            }
        }
        for i in 0..$MR {
            for j in 0..$NR {
                *$c.add(j * $ldc + i) = acc[i][j];
            }
        }
    }};
}

/// The products of two 32-byte signed vectors with widening multiplies, as four i32 lanes.
macro_rules! dot32v_neon {
    ($x:expr, $y:expr) => {{
        let ((x0, x1), (y0, y1)): ((int8x16_t, int8x16_t), (int8x16_t, int8x16_t)) = ($x, $y);
        let mut s = vpaddlq_s16(vmull_s8(vget_low_s8(x0), vget_low_s8(y0)));
        s = vpadalq_s16(s, vmull_high_s8(x0, y0));
        s = vpadalq_s16(s, vmull_s8(vget_low_s8(x1), vget_low_s8(y1)));
        vpadalq_s16(s, vmull_high_s8(x1, y1))
    }};
}

/// The products of two 32-byte signed vectors with `sdot`, as four i32 lanes.
macro_rules! dot32v_sdot {
    ($x:expr, $y:expr) => {{
        let ((x0, x1), (y0, y1)) = ($x, $y);
        sdot!(sdot!(vdupq_n_s32(0), x0, y0), x1, y1)
    }};
}

/// IQ4_XS weights times Q8_K activations with widening multiplies (the NEON tier).
#[target_feature(enable = "neon")]
unsafe fn iq4_xs_neon<const MR: usize, const NR: usize, const UNUSED: u8>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: `MR` weight rows of `k / 256` IQ4_XS blocks at `a + i * lda` and `NR` Q8_K
    // activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every
    // load and store in the body stays within them.
    unsafe { iq4_xs_body!(MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_neon) }
}

/// IQ4_XS weights times Q8_K activations with `sdot` (the dotprod tier).
#[target_feature(enable = "neon,dotprod")]
unsafe fn iq4_xs_dotprod<const MR: usize, const NR: usize, const UNUSED: u8>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: as in `iq4_xs_neon`, under this function's target features.
    unsafe { iq4_xs_body!(MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_sdot) }
}

/// A tile of `2 RP` IQ4_XS weight rows by `2 CP` Q8_K activation rows with `smmla`: each
/// 32-value group gives the 2 x 2 products of a row pair and a column pair in four `smmla`,
/// multiplied per row by the group's scale in integers.
#[target_feature(enable = "neon,i8mm")]
unsafe fn iq4_xs_pairs<const RP: usize, const CP: usize>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: `2 RP` weight rows of `k / 256` IQ4_XS blocks at `a + i * lda` and `2 CP` Q8_K
    // activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every
    // load and store below stays within them.
    unsafe {
        // acc[rp][cp] = [r0c0, r0c1, r1c0, r1c1] of row pair rp and column pair cp.
        let mut acc = [[vdupq_n_f32(0.0); CP]; RP];
        for blk in 0..k / 256 {
            // Per row pair: d as [d0, d0, d1, d1] and each group's scales as [s0, s0, s1, s1].
            let mut d = [vdupq_n_f32(0.0); RP];
            let mut sc = [[vdupq_n_s32(0); 8]; RP];
            for rp in 0..RP {
                let p0 = a.add(2 * rp * lda + blk * iq4_xs::BYTES);
                let p1 = p0.add(lda);
                let (d0, d1) = (f16_at(p0), f16_at(p1));
                d[rp] = vld1q_f32([d0, d0, d1, d1].as_ptr());
                let (s0, s1) = (group_scales(p0), group_scales(p1));
                for g in 0..8 {
                    sc[rp][g] = vld1q_s32([s0[g], s0[g], s1[g], s1[g]].as_ptr());
                }
            }
            for cp in 0..CP {
                let y0 = b.add(2 * cp * ldb + blk * q8_k::BYTES);
                let y1 = y0.add(ldb);
                let (e0, e1) = (
                    std::ptr::read_unaligned(y0.cast::<f32>()),
                    std::ptr::read_unaligned(y1.cast::<f32>()),
                );
                let bd = vld1q_f32([e0, e1, e0, e1].as_ptr());
                let (ya, yb) = (y0.add(q8_k::QS).cast::<i8>(), y1.add(q8_k::QS).cast::<i8>());
                for rp in 0..RP {
                    let p0 = a.add(2 * rp * lda + blk * iq4_xs::BYTES);
                    let p1 = p0.add(lda);
                    let mut sumi = vdupq_n_s32(0);
                    for g in 0..8 {
                        let wz = zip_rows!(group_levels(p0, g), group_levels(p1, g));
                        let half =
                            |y: *const i8| (vld1q_s8(y.add(32 * g)), vld1q_s8(y.add(32 * g + 16)));
                        let yz = zip_rows!(half(ya), half(yb));
                        let mut s = vdupq_n_s32(0);
                        for h in 0..4 {
                            s = smmla!(s, wz[h], yz[h]);
                        }
                        sumi = vmlaq_s32(sumi, s, sc[rp][g]);
                    }
                    acc[rp][cp] = vfmaq_f32(acc[rp][cp], vmulq_f32(d[rp], bd), vcvtq_f32_s32(sumi));
                }
            }
        }
        store_pairs(&acc, c, ldc);
    }
}

/// The register tiles of the NEON and dotprod IQ4_XS kernels (as Q4_K's).
const TILES: Tiles = Tiles::new(2, 2).with_gemv(4);

tiled!("neon", tile_iq4_xs_neon, iq4_xs_neon, TILES, 0);
tiled!("neon,dotprod", tile_iq4_xs_dotprod, iq4_xs_dotprod, TILES, 0);
i8mm_tile!(tile_iq4_xs_i8mm, DType::IQ4_XS, iq4_xs_pairs::<2, 2>);

/// The NEON IQ4_XS tile kernel, with its tile size.
pub(super) fn neon_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    (wt == DType::IQ4_XS).then(|| TILES.entry(tile_iq4_xs_neon))
}

/// The dotprod IQ4_XS tile kernel, with its tile size.
pub(super) fn dotprod_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    (wt == DType::IQ4_XS).then(|| TILES.entry(tile_iq4_xs_dotprod))
}

/// The i8mm IQ4_XS tile kernel (`smmla` 4 x 4 tiles), with its tile size.
pub(super) fn i8mm_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    (wt == DType::IQ4_XS).then(|| super::i8mm::SMMLA.entry(tile_iq4_xs_i8mm))
}
