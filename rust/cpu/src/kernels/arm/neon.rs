//! The NEON (ARMv8.0 AdvSIMD) tier: F32 / F16 / BF16 weights with `fmla`; Q8_0, Q4_0, IQ4_NL,
//! Q4_1, Q5_0, Q5_1 and the k-quants Q4_K, Q5_K, Q6_K with `smull` + `sadalp` (IQ4_XS: see
//! [`super::iq4`]).
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::f16_at;
use super::legacy::{W_Q4_1, W_Q5_0, W_Q5_1};
use super::{K16_Q2, K16_Q3, K16_Q6, Q0_IQ4_NL, Q0_Q4_0, Q0_Q8_0};
use crate::kernels::blocks::{q4_0, q8_0};
use crate::kernels::TileFn;
use std::arch::aarch64::*;
use std::arch::asm;
use tessera_core::DType;

const W_F32: u8 = 0;
const W_F16: u8 = 1;
const W_BF16: u8 = 2;

/// Four f16 (bits) to f32 with `fcvtl` (the conversion intrinsic needs the unstable f16 type).
macro_rules! h2f4 {
    ($x:expr) => {{
        let x: uint16x4_t = $x;
        let r: float32x4_t;
        asm!("fcvtl {r:v}.4s, {x:v}.4h", r = out(vreg) r, x = in(vreg) x,
             options(pure, nomem, nostack, preserves_flags));
        r
    }};
}

/// Float weights (F32, F16 or BF16, `W`) times F32 activations; BF16 becomes F32 by a 16-bit
/// left shift (`ushll`).
#[target_feature(enable = "neon")]
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
    // below (and in the body macro) stays within them.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); NR]; MR];
        let kv = k / 4 * 4;
        let mut t = 0;
        while t < kv {
            let mut av = [vdupq_n_f32(0.0); MR];
            for (i, v) in av.iter_mut().enumerate() {
                *v = if W == W_F32 {
                    vld1q_f32(a.add(i * lda).cast::<f32>().add(t))
                } else if W == W_BF16 {
                    let h = vld1_u16(a.add(i * lda).cast::<u16>().add(t));
                    vreinterpretq_f32_u32(vshll_n_u16::<16>(h))
                } else {
                    h2f4!(vld1_u16(a.add(i * lda).cast::<u16>().add(t)))
                };
            }
            for j in 0..NR {
                let bv = vld1q_f32(b.add(j * ldb).cast::<f32>().add(t));
                for i in 0..MR {
                    acc[i][j] = vfmaq_f32(acc[i][j], av[i], bv);
                }
            }
            t += 4;
        }
        for i in 0..MR {
            for j in 0..NR {
                let mut s = vaddvq_f32(acc[i][j]);
                let bp = b.add(j * ldb).cast::<f32>();
                for tt in kv..k {
                    let w = if W == W_F32 {
                        std::ptr::read_unaligned(a.add(i * lda).cast::<f32>().add(tt))
                    } else if W == W_BF16 {
                        let h = std::ptr::read_unaligned(a.add(i * lda).cast::<u16>().add(tt));
                        f32::from_bits(u32::from(h) << 16)
                    } else {
                        f16_at(a.add(i * lda + 2 * tt))
                    };
                    s += w * std::ptr::read_unaligned(bp.add(tt));
                }
                *c.add(j * ldc + i) = s;
            }
        }
    }
}

/// Loads the 32 weights of a Q8_0, Q4_0 or IQ4_NL block (weight kind `$w`, a constant) at `p`
/// (past the scale) as two signed byte vectors: Q4_0's nibbles minus 8, IQ4_NL's levels.
macro_rules! load_q {
    ($p:expr, $w:expr) => {
        if $w == $crate::kernels::arm::Q0_Q8_0 {
            (vld1q_s8($p.cast::<i8>()), vld1q_s8($p.add(16).cast::<i8>()))
        } else {
            let q = vld1q_u8($p);
            let (lo, hi) = (vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q));
            if $w == $crate::kernels::arm::Q0_IQ4_NL {
                let levels = vld1q_s8(tessera_core::quant::KVALUES_IQ4NL.as_ptr());
                (vqtbl1q_s8(levels, lo), vqtbl1q_s8(levels, hi))
            } else {
                let eight = vdupq_n_s8(8);
                (vsubq_s8(vreinterpretq_s8_u8(lo), eight), vsubq_s8(vreinterpretq_s8_u8(hi), eight))
            }
        }
    };
}
pub(super) use load_q;

/// Q8_0 / Q4_0 / IQ4_NL weights (`W`) times Q8_0 activations with widening multiplies.
#[target_feature(enable = "neon")]
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
    // below (and in the body macro) stays within them.
    unsafe {
        let (ws, qs) = if W == Q0_Q8_0 { (q8_0::BYTES, q8_0::QS) } else { (q4_0::BYTES, q4_0::QS) };
        let mut acc = [[vdupq_n_f32(0.0); NR]; MR];
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
                    let (w0, w1) = w[i];
                    let mut s = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(b0)));
                    s = vpadalq_s16(s, vmull_high_s8(w0, b0));
                    s = vpadalq_s16(s, vmull_s8(vget_low_s8(w1), vget_low_s8(b1)));
                    s = vpadalq_s16(s, vmull_high_s8(w1, b1));
                    acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(s), wd[i] * bd);
                }
            }
        }
        for i in 0..MR {
            for j in 0..NR {
                *c.add(j * ldc + i) = vaddvq_f32(acc[i][j]);
            }
        }
    }
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

/// Q4_K weights times Q8_K activations.
#[target_feature(enable = "neon")]
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
    unsafe { super::q4_k_body!(MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_neon) }
}

/// The products of two 16-byte signed vectors with widening multiplies, as four i32 lanes.
macro_rules! dot16v_neon {
    ($x:expr, $y:expr) => {{
        let (x, y): (int8x16_t, int8x16_t) = ($x, $y);
        let s = vpaddlq_s16(vmull_s8(vget_low_s8(x), vget_low_s8(y)));
        vpadalq_s16(s, vmull_high_s8(x, y))
    }};
}

/// Q6_K, Q3_K or Q2_K weights (`KIND`, see [`super::k16_body`]) times Q8_K activations.
#[target_feature(enable = "neon")]
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
    unsafe { super::k16_body!(KIND, MR, NR, k, a, lda, b, ldb, c, ldc, dot16v_neon) }
}

/// Q4_1 / Q5_0 / Q5_1 weights (`W`, see [`super::legacy`]) times Q8_1 / Q8_0 activations.
#[target_feature(enable = "neon")]
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
    unsafe { super::legacy::legacy_body!(W, MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_neon) }
}

/// Q5_K weights times Q8_K activations.
#[target_feature(enable = "neon")]
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
    unsafe { super::q5_k::q5_k_body!(MR, NR, k, a, lda, b, ldb, c, ldc, dot32v_neon) }
}

/// The register tiles of the NEON kernels (weight rows by activation rows; one activation row
/// takes `mr` weight rows at a time).
mod tiles {
    use crate::kernels::Tiles;
    /// F32, F16 and BF16 weights.
    pub(super) const FLOAT: Tiles = Tiles::new(4, 4);
    /// Q8_0, Q4_0 and IQ4_NL weights.
    pub(super) const Q8_0_Q4_0: Tiles = Tiles::new(4, 2);
    /// Q4_1, Q5_0 and Q5_1 weights.
    pub(super) const Q4_1_Q5_0_Q5_1: Tiles = Tiles::new(4, 2);
    /// Q4_K weights.
    pub(super) const Q4_K: Tiles = Tiles::new(2, 2).with_gemv(4);
    /// Q5_K, Q6_K, Q3_K and Q2_K weights: one row, whose blocks are unpacked once for all the
    /// tile's activation rows.
    pub(super) const ONE_ROW_K: Tiles = Tiles::new(1, 4);
}

tiled!("neon", tile_f32, float_tile, tiles::FLOAT, W_F32);
tiled!("neon", tile_f16, float_tile, tiles::FLOAT, W_F16);
tiled!("neon", tile_bf16, float_tile, tiles::FLOAT, W_BF16);
tiled!("neon", tile_q8_0, q_0_tile, tiles::Q8_0_Q4_0, Q0_Q8_0);
tiled!("neon", tile_q4_0, q_0_tile, tiles::Q8_0_Q4_0, Q0_Q4_0);
tiled!("neon", tile_iq4_nl, q_0_tile, tiles::Q8_0_Q4_0, Q0_IQ4_NL);
tiled!("neon", tile_q4_1, legacy_tile, tiles::Q4_1_Q5_0_Q5_1, W_Q4_1);
tiled!("neon", tile_q5_0, legacy_tile, tiles::Q4_1_Q5_0_Q5_1, W_Q5_0);
tiled!("neon", tile_q5_1, legacy_tile, tiles::Q4_1_Q5_0_Q5_1, W_Q5_1);
tiled!("neon", tile_q4_k, q4_k_tile, tiles::Q4_K, 0);
tiled!("neon", tile_q5_k, q5_k_tile, tiles::ONE_ROW_K, 0);
tiled!("neon", tile_q6_k, k16_tile, tiles::ONE_ROW_K, K16_Q6);
tiled!("neon", tile_q3_k, k16_tile, tiles::ONE_ROW_K, K16_Q3);
tiled!("neon", tile_q2_k, k16_tile, tiles::ONE_ROW_K, K16_Q2);

/// The NEON tile kernel for weights of `wt`, with its tile size.
pub(super) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    Some(match wt {
        DType::F32 => tiles::FLOAT.entry(tile_f32),
        DType::F16 => tiles::FLOAT.entry(tile_f16),
        DType::BF16 => tiles::FLOAT.entry(tile_bf16),
        DType::Q8_0 => tiles::Q8_0_Q4_0.entry(tile_q8_0),
        DType::Q4_0 => tiles::Q8_0_Q4_0.entry(tile_q4_0),
        DType::IQ4_NL => tiles::Q8_0_Q4_0.entry(tile_iq4_nl),
        DType::Q4_1 => tiles::Q4_1_Q5_0_Q5_1.entry(tile_q4_1),
        DType::Q5_0 => tiles::Q4_1_Q5_0_Q5_1.entry(tile_q5_0),
        DType::Q5_1 => tiles::Q4_1_Q5_0_Q5_1.entry(tile_q5_1),
        DType::Q4_K => tiles::Q4_K.entry(tile_q4_k),
        DType::Q5_K => tiles::ONE_ROW_K.entry(tile_q5_k),
        DType::Q6_K => tiles::ONE_ROW_K.entry(tile_q6_k),
        DType::Q3_K => tiles::ONE_ROW_K.entry(tile_q3_k),
        DType::Q2_K => tiles::ONE_ROW_K.entry(tile_q2_k),
        _ => return None,
    })
}

/// Converts an activation row with NEON when a quantizer exists for `act` (Q8_0, Q8_1, Q8_K);
/// `false` otherwise.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    super::quant_act::quantize_act(act, src, dst)
}
