//! NEON dotprod kernels on the 4 x 4 repacked layout ([`PackLayout::R4W4`]): per block of 32
//! values a group holds the four rows' f16 scales, then the quants in 16-byte chunks of four
//! 4-byte words (one per row). `sdot` by element multiplies a chunk (four rows) by one 4-byte
//! word of an activation register, so each weight register serves every activation row of
//! the tile and no horizontal sums are needed: the four lanes are the four rows.
//!
//! Activations are in the "Q8_0 with sums" format ([`crate::kernels::MatKernel::repacked`]):
//! Q4_0 nibbles are used as they are (0..15) and `8 * sum` of the activation quants subtracted.
//!
//! [`PackLayout::R4W4`]: crate::kernels::repack::PackLayout::R4W4
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::f16_at;
use crate::kernels::blocks::{q4_0, q8_0, q8_1, F16_BYTES};
use crate::kernels::TileFn;
use std::arch::aarch64::*;
use std::arch::asm;
use tessera_core::DType;

/// Rows per group.
const ROWS: usize = 4;
/// Bytes of one activation block (f16 scale, i16 sum, 32 quants: sized as Q8_1).
const ACT_BLOCK: usize = q8_1::BYTES;

/// `acc += sdot(w, y.4b[lane])`: lane `r` of `acc` gains the dot product of bytes
/// `4r..4r + 4` of `w` with bytes `4 * lane..4 * lane + 4` of `y`.
macro_rules! sdot_lane {
    ($acc:expr, $w:expr, $y:expr, $lane:literal) => {{
        let mut r: int32x4_t = $acc;
        let (w, y): (int8x16_t, int8x16_t) = ($w, $y);
        asm!(concat!("sdot {r:v}.4s, {w:v}.16b, {y:v}.4b[", $lane, "]"), r = inout(vreg) r,
             w = in(vreg) w, y = in(vreg) y, options(pure, nomem, nostack, preserves_flags));
        r
    }};
}

/// The sum over four chunks `w[0..4]` times the four words of `y` (chunk `h` by word `h`).
macro_rules! sdot4 {
    ($acc:expr, $w:expr, $y:expr) => {{
        let w: &[int8x16_t] = $w;
        let y: int8x16_t = $y;
        let s = sdot_lane!($acc, w[0], y, 0);
        let s = sdot_lane!(s, w[1], y, 1);
        let s = sdot_lane!(s, w[2], y, 2);
        sdot_lane!(s, w[3], y, 3)
    }};
}

/// The four rows' f16 scales at `g` as f32 lanes.
///
/// # Safety
///
/// `g` points to eight readable bytes.
#[inline(always)]
unsafe fn scales(g: *const u8) -> float32x4_t {
    // SAFETY: caller's contract; the array is four f32.
    unsafe {
        let h = F16_BYTES;
        let d = [f16_at(g), f16_at(g.add(h)), f16_at(g.add(2 * h)), f16_at(g.add(3 * h))];
        vld1q_f32(d.as_ptr())
    }
}

/// One group of four repacked rows times `NR` activation rows: Q4_0 (`Q4`) or Q8_0 weights.
///
/// # Safety
///
/// The CPU supports dotprod; `a` is a group of four rows of `k` values repacked in 4 x 4;
/// `b + j * ldb` (`j < NR`) are activation rows of `k` values in the Q8_0-with-sums format;
/// `c + j * ldc .. + 4` are writable.
#[target_feature(enable = "neon,dotprod")]
unsafe fn group<const NR: usize, const Q4: bool>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: every load stays within the group's and the activation rows' blocks (caller's
    // contract); the stores write the four outputs of each activation row.
    unsafe {
        let gsize = if Q4 { q4_0::BYTES * ROWS } else { q8_0::BYTES * ROWS };
        let m4 = vdupq_n_u8(0x0f);
        let mut acc = [vdupq_n_f32(0.0); NR];
        for blk in 0..k / 32 {
            let g = a.add(blk * gsize);
            let dw = scales(g);
            let q = g.add(F16_BYTES * ROWS);
            // w[h]: the weights of values 4h..4h + 4 of the four rows.
            let mut w = [vdupq_n_s8(0); 8];
            if Q4 {
                // Chunk h (bytes 4h..4h + 4 of qs): low nibbles values 4h.., high 16 + 4h..
                for h in 0..4 {
                    let r = vld1q_u8(q.add(16 * h));
                    w[h] = vreinterpretq_s8_u8(vandq_u8(r, m4));
                    w[4 + h] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(r));
                }
            } else {
                for h in 0..8 {
                    w[h] = vld1q_s8(q.add(16 * h).cast());
                }
            }
            for j in 0..NR {
                let p = b.add(j * ldb + blk * ACT_BLOCK);
                let bd = f16_at(p);
                let y = p.add(q8_1::QS).cast::<i8>();
                let (y0, y1) = (vld1q_s8(y), vld1q_s8(y.add(16)));
                let init = if Q4 {
                    vdupq_n_s32(
                        -8 * i32::from(std::ptr::read_unaligned(p.add(q8_1::S).cast::<i16>())),
                    )
                } else {
                    vdupq_n_s32(0)
                };
                let s = sdot4!(init, &w[..4], y0);
                let s = sdot4!(s, &w[4..], y1);
                acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(s), vmulq_n_f32(dw, bd));
            }
        }
        for j in 0..NR {
            vst1q_f32(c.add(j * ldc), acc[j]);
        }
    }
}

packed_tiled!("neon,dotprod", packed_q4_0, group, true, ROWS, [4, 3, 2, 1]);
packed_tiled!("neon,dotprod", packed_q8_0, group, false, ROWS, [4, 3, 2, 1]);

/// The kernel for 4 x 4 repacked weights of `wt`, with its tile size (4 rows, 4 columns).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_0 => Some((packed_q4_0 as TileFn, ROWS, 4)),
        DType::Q8_0 => Some((packed_q8_0 as TileFn, ROWS, 4)),
        _ => None,
    }
}
