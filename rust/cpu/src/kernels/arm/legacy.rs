//! The parts of the Q4_1 / Q5_0 / Q5_1 kernels shared by the NEON and dotprod tiers: block
//! unpacking to signed bytes and the tile body (the tiers differ only in their int8 dot).
//!
//! Q4_1 and Q5_1 (`x = d * q + m`) run against Q8_1 activations: a block's dot is
//! `d * d_b * sum(q * q_b) + m * d_b * sum(q_b)`. ggml reads `d_b * sum(q_b)` from the block's
//! f16 `s`; the kernels here sum the quants instead (two `saddlp` and an `addv` per activation
//! block, shared by the tile's weight rows), which is exact for the activations as quantized
//! and keeps the results within ~1e-12 NMSE of the scalar tier rather than ~5e-6.
//! Q5_0 (`x = d * (q - 16)`) runs against Q8_0.

use crate::kernels::blocks::{q4_1, q5_0, q5_1, q8_0, q8_1};
use std::arch::aarch64::*;

/// Weight type code of Q4_1 (the kernels' const parameter).
pub(super) const W_Q4_1: u8 = 0;
/// Weight type code of Q5_0.
pub(super) const W_Q5_0: u8 = 1;
/// Weight type code of Q5_1.
pub(super) const W_Q5_1: u8 = 2;

/// Bytes of a weight block of type code `w`.
pub(super) const fn weight_bytes(w: u8) -> usize {
    match w {
        W_Q4_1 => q4_1::BYTES,
        W_Q5_0 => q5_0::BYTES,
        _ => q5_1::BYTES,
    }
}

/// Offsets of the minimum (0 for Q5_0, which has none), the fifth bits (0 for Q4_1) and the
/// nibbles of a weight block of type code `w`.
const fn weight_fields(w: u8) -> (usize, usize, usize) {
    match w {
        W_Q4_1 => (q4_1::M, 0, q4_1::QS),
        W_Q5_0 => (0, q5_0::QH, q5_0::QS),
        _ => (q5_1::M, q5_1::QH, q5_1::QS),
    }
}

/// Whether weights of type code `w` have a minimum (and so read Q8_1 activations).
pub(super) const fn has_min(w: u8) -> bool {
    w != W_Q5_0
}

/// Bytes of an activation block for weights of type code `w` (Q8_1: 36, Q8_0: 34).
pub(super) const fn act_bytes(w: u8) -> usize {
    if has_min(w) {
        q8_1::BYTES
    } else {
        q8_0::BYTES
    }
}

/// Offset of the quants in an activation block for weights of type code `w`.
pub(super) const fn act_quants(w: u8) -> usize {
    if has_min(w) {
        q8_1::QS
    } else {
        q8_0::QS
    }
}

/// The fifth bits of a Q5 block (`qh`, bit `j` for value `j`) as `0x10` / `0` bytes for values
/// `0..16` and `16..32`.
///
/// # Safety
///
/// NEON is part of every aarch64 target this crate builds for; no memory is read.
#[inline(always)]
unsafe fn high_bits(qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: NEON is part of every aarch64 target this crate builds for; no memory is read.
    unsafe {
        // Byte l of each half tests bit l % 8 of its qh byte.
        let bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
        let sixteen = vdupq_n_u8(0x10);
        let h0 = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
        let h1 = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
        (vandq_u8(vtstq_u8(h0, bits), sixteen), vandq_u8(vtstq_u8(h1, bits), sixteen))
    }
}

/// One weight block of type code `W` at `p`: its scale, its minimum (0 for Q5_0) and its 32
/// quants as two signed byte vectors (values `0..16` and `16..32`; `q - 16` for Q5_0, `q` for
/// the types with a minimum).
///
/// # Safety
///
/// `p` must point to a readable block of type `W`.
#[inline(always)]
pub(super) unsafe fn load_block<const W: u8>(p: *const u8) -> (f32, f32, (int8x16_t, int8x16_t)) {
    // SAFETY: the block is readable (caller's contract); every offset is inside it.
    unsafe {
        let (m_at, qh_at, qs_at) = weight_fields(W);
        let d = super::f16_at(p);
        let m = if has_min(W) { super::f16_at(p.add(m_at)) } else { 0.0 };
        let qs = p.add(qs_at);
        let q = vld1q_u8(qs);
        let m4 = vdupq_n_u8(0x0f);
        let (mut lo, mut hi) = (vandq_u8(q, m4), vshrq_n_u8::<4>(q));
        if W != W_Q4_1 {
            let qh = std::ptr::read_unaligned(p.add(qh_at).cast::<[u8; 4]>());
            let (h0, h1) = high_bits(qh);
            lo = vorrq_u8(lo, h0);
            hi = vorrq_u8(hi, h1);
        }
        let (lo, hi) = (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi));
        if W == W_Q5_0 {
            let off = vdupq_n_s8(16);
            (d, m, (vsubq_s8(lo, off), vsubq_s8(hi, off)))
        } else {
            (d, m, (lo, hi))
        }
    }
}

/// A Q4_1 / Q5_0 / Q5_1 tile kernel body; `$dot32` takes two 32-byte signed vectors (as pairs
/// of `int8x16_t`) and returns their products summed into an `int32x4_t`.
macro_rules! legacy_body {
    ($W:ident, $MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot32:ident) => {{
        use super::legacy;
        let wb = legacy::weight_bytes($W);
        let ab = legacy::act_bytes($W);
        let mut acc = [[vdupq_n_f32(0.0); $NR]; $MR];
        let mut accm = [[0f32; $NR]; $MR];
        for blk in 0..$k / 32 {
            let mut w = [(vdupq_n_s8(0), vdupq_n_s8(0)); $MR];
            let mut wd = [0f32; $MR];
            let mut wm = [0f32; $MR];
            for i in 0..$MR {
                let (d, m, q) = legacy::load_block::<$W>($a.add(i * $lda + blk * wb));
                wd[i] = d;
                wm[i] = m;
                w[i] = q;
            }
            for j in 0..$NR {
                let p = $b.add(j * $ldb + blk * ab);
                let bd = super::f16_at(p);
                let y = p.add(legacy::act_quants($W)).cast::<i8>();
                let yv = (vld1q_s8(y), vld1q_s8(y.add(16)));
                for i in 0..$MR {
                    let s = $dot32!(w[i], yv);
                    acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(s), wd[i] * bd);
                }
                if legacy::has_min($W) {
                    // d_b * sum(q_b) from the quants: exact, unlike the f16 `s` of the block.
                    let qsum = vaddvq_s16(vaddq_s16(vpaddlq_s8(yv.0), vpaddlq_s8(yv.1)));
                    let bs = bd * f32::from(qsum);
                    for i in 0..$MR {
                        accm[i][j] += wm[i] * bs;
                    }
                }
            }
        }
        for i in 0..$MR {
            for j in 0..$NR {
                *$c.add(j * $ldc + i) = vaddvq_f32(acc[i][j]) + accm[i][j];
            }
        }
    }};
}
pub(super) use legacy_body;
