//! The NEON + dotprod tier: Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1 and the k-quants Q4_K, Q5_K,
//! Q6_K with `sdot` (emitted with `asm!`; IQ4_XS: see [`super::iq4`]).
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::legacy::{W_Q4_1, W_Q5_0, W_Q5_1};
use super::neon::load_q;
use super::{f16_at, sdot};
use super::{K16_Q2, K16_Q3, K16_Q6, Q0_IQ4_NL, Q0_Q4_0, Q0_Q8_0};
use crate::kernels::blocks::{q4_0, q8_0};
use crate::kernels::TileFn;
use std::arch::aarch64::*;
use tessera_core::DType;

/// Q8_0 / Q4_0 / IQ4_NL weights (`W`) times Q8_0 activations with `sdot`.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn q_0_tile<const MR: usize, const NR: usize, const W: u8>(
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
    // below (and in the body macro) stays within them.
    unsafe {
        let (ws, qs) = if W == Q0_Q8_0 { (q8_0::BYTES, q8_0::QS) } else { (q4_0::BYTES, q4_0::QS) };
        // One sum per output, each block's integer sum (exact) scaled and added with one fused
        // multiply-add: the i8mm tile's order, so that a column does not depend on the batch.
        let mut acc = [[0f32; NR]; MR];
        for blk in 0..k / 32 {
            let mut w = [(vdupq_n_s8(0), vdupq_n_s8(0)); MR];
            let mut wd = [0f32; MR];
            for i in 0..MR {
                let p = a.add(i * lda + blk * ws);
                wd[i] = f16_at(p);
                w[i] = load_q!(p.add(qs), W);
            }
            for j in 0..NR {
                let p = b.add(j * ldb + blk * q8_0::BYTES);
                let bd = f16_at(p);
                let (b0, b1) = load_q!(p.add(q8_0::QS), Q0_Q8_0);
                for i in 0..MR {
                    let s = sdot!(sdot!(vdupq_n_s32(0), w[i].0, b0), w[i].1, b1);
                    let s = vaddvq_s32(s) as f32;
                    acc[i][j] = s.mul_add(wd[i] * bd, acc[i][j]);
                }
            }
        }
        for i in 0..MR {
            for j in 0..NR {
                *c.add(j * ldc + i) = acc[i][j];
            }
        }
    }
}

/// The products of two 32-byte signed vectors with `sdot`, as four i32 lanes.
macro_rules! dot32v_sdot {
    ($x:expr, $y:expr) => {{
        let ((x0, x1), (y0, y1)) = ($x, $y);
        sdot!(sdot!(vdupq_n_s32(0), x0, y0), x1, y1)
    }};
}

/// Q4_K weights times Q8_K activations with `sdot`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn q4_k_tile<const MR: usize, const NR: usize, const UNUSED: u8>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: `MR` weight rows of `k / 256` Q4_K blocks at `a + i * lda` and `NR` Q8_K
    // activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
    // below (and in the body macro) stays within them.
    unsafe { super::q4_k_body!(MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_sdot) }
}

/// The products of two 16-byte signed vectors with `sdot`, as four i32 lanes.
macro_rules! dot16v_sdot {
    ($x:expr, $y:expr) => {{
        sdot!(vdupq_n_s32(0), $x, $y)
    }};
}

/// Q6_K, Q3_K or Q2_K weights (`KIND`, see [`super::k16_body`]) times Q8_K activations.
#[target_feature(enable = "neon,dotprod")]
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
    // below (and in the body macro) stays within them.
    unsafe { super::k16_body!(KIND, MR, NR, k, a, lda, b, ldb, c, ldc, dot16v_sdot) }
}

/// Q4_1 / Q5_0 / Q5_1 weights (`W`, see [`super::legacy`]) times Q8_1 / Q8_0 activations with
/// `sdot`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn legacy_tile<const MR: usize, const NR: usize, const W: u8>(
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
    // Q8_1 / Q8_0 activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
    // below (and in the body macro) stays within them.
    unsafe { super::legacy::legacy_body!(W, MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_sdot) }
}

/// Q5_K weights times Q8_K activations with `sdot`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn q5_k_tile<const MR: usize, const NR: usize, const UNUSED: u8>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller guarantees this function's target features (the tier's) and the tile's
    // operands: `MR` weight rows of `k / 256` Q5_K blocks at `a + i * lda` and `NR` Q8_K
    // activation rows at `b + j * ldb`, and the outputs `c + j * ldc + i` are writable; every load and store
    // below (and in the body macro) stays within them.
    unsafe { super::q5_k::q5_k_body!(MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_sdot) }
}

/// The register tiles of the dotprod kernels (weight rows by activation rows; one activation
/// row takes `mr` weight rows at a time).
mod tiles {
    use crate::kernels::Tiles;
    /// Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0 and Q5_1 weights.
    pub(super) const LEGACY: Tiles = Tiles::new(4, 4);
    /// Q4_K weights.
    pub(super) const Q4_K: Tiles = Tiles::new(2, 2).with_gemv(4);
    /// Q5_K, Q6_K, Q3_K and Q2_K weights: one row, whose blocks are unpacked once for all the
    /// tile's activation rows.
    pub(super) const ONE_ROW_K: Tiles = Tiles::new(1, 4);
}

tiled!("neon,dotprod", tile_q8_0, q_0_tile, tiles::LEGACY, Q0_Q8_0);
tiled!("neon,dotprod", tile_q4_0, q_0_tile, tiles::LEGACY, Q0_Q4_0);
tiled!("neon,dotprod", tile_iq4_nl, q_0_tile, tiles::LEGACY, Q0_IQ4_NL);
tiled!("neon,dotprod", tile_q4_1, legacy_tile, tiles::LEGACY, W_Q4_1);
tiled!("neon,dotprod", tile_q5_0, legacy_tile, tiles::LEGACY, W_Q5_0);
tiled!("neon,dotprod", tile_q5_1, legacy_tile, tiles::LEGACY, W_Q5_1);
tiled!("neon,dotprod", tile_q4_k, q4_k_tile, tiles::Q4_K, 0);
tiled!("neon,dotprod", tile_q5_k, q5_k_tile, tiles::ONE_ROW_K, 0);
tiled!("neon,dotprod", tile_q6_k, k16_tile, tiles::ONE_ROW_K, K16_Q6);
tiled!("neon,dotprod", tile_q3_k, k16_tile, tiles::ONE_ROW_K, K16_Q3);
tiled!("neon,dotprod", tile_q2_k, k16_tile, tiles::ONE_ROW_K, K16_Q2);

/// The dotprod tile kernel for weights of `wt`, with its tile size.
pub(super) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    Some(match wt {
        DType::Q8_0 => tiles::LEGACY.entry(tile_q8_0),
        DType::Q4_0 => tiles::LEGACY.entry(tile_q4_0),
        DType::IQ4_NL => tiles::LEGACY.entry(tile_iq4_nl),
        DType::Q4_1 => tiles::LEGACY.entry(tile_q4_1),
        DType::Q5_0 => tiles::LEGACY.entry(tile_q5_0),
        DType::Q5_1 => tiles::LEGACY.entry(tile_q5_1),
        DType::Q4_K => tiles::Q4_K.entry(tile_q4_k),
        DType::Q5_K => tiles::ONE_ROW_K.entry(tile_q5_k),
        DType::Q6_K => tiles::ONE_ROW_K.entry(tile_q6_k),
        DType::Q3_K => tiles::ONE_ROW_K.entry(tile_q3_k),
        DType::Q2_K => tiles::ONE_ROW_K.entry(tile_q2_k),
        _ => return None,
    })
}
