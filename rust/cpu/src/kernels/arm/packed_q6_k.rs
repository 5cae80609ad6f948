//! Repacked Q6_K on the dotprod tier (4 x 4; the body also reads 4 x 8, unused: see
//! [`packed_tile`]), times plain Q8_K activation rows, with `sdot` (by element on 4 x 4; on
//! 4 x 8 by the activation's 8-byte word duplicated by `ld1r`, `addp` of the two row pairs).
//!
//! Per block of 256 values a group of four rows holds the four `d`, the 16 signed scale bytes
//! byte-planar (byte `s` of the four rows at `8 + 4 s`), then per half (128 values) the rows'
//! 64 `ql` bytes in words, then their 32 `qh` bytes in words. Slot `i` of a half (16-byte
//! registers `i` and `8 + i` of its `ql`, `i` of its `qh`) holds the same value positions of the
//! same rows in all three, so the four 6-bit values of each position are rebuilt by byte-vector
//! operations whatever the word size. The quants are used as 0..63; the offset 32 goes
//! through Q8_K's `bsums` (`32 * sum(scale * bsum)`), the scale of each group of 16 values is
//! a vector of the four rows.
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::packed_k::{act_blocks, for_each_run, scaled, store, COLS, ROWS};
use super::{f16x4_at, sdot, sdot_lane};
use crate::kernels::blocks::{q6_k, q8_k, F16_BYTES};
use crate::kernels::{Operands, TileFn};
use std::arch::aarch64::*;
use tessera_core::DType;

/// Bytes of one block of a group.
const GBLOCK: usize = q6_k::BYTES * ROWS;
/// Offset of the byte-planar scales in a group block.
const SCALES: usize = F16_BYTES * ROWS;
/// Offset of the quants in a group block.
const QS: usize = SCALES + 16 * ROWS;
/// Bytes of one half block's quants (`ql` then `qh`) in a group.
const HALF: usize = 96 * ROWS;

/// One group of four repacked Q6_K rows (words of `W` bytes: 4 or 8) times `NR` Q8_K
/// activation rows.
///
/// # Safety
///
/// The CPU supports dotprod; `a` is a group of four Q6_K rows of `k` values repacked with
/// `W`-byte words; `b + j * ldb` (`j < NR`) are Q8_K rows of `k` values; `c + j * ldc .. + 4`
/// are writable.
#[target_feature(enable = "neon,dotprod")]
unsafe fn group<const NR: usize, const W: usize>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: every load stays within the group's blocks and the activation rows' blocks
    // (caller's contract); the stores write the four outputs of each activation row.
    unsafe {
        let (m4, m3) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x03));
        let mut acc = [vdupq_n_f32(0.0); NR];
        for blk in 0..k / 256 {
            let g = a.add(blk * GBLOCK);
            let d = f16x4_at(g);
            // Scales: sc[s] lane r (i32), sc16[t] lanes 4 h + r (group 2 t + h, i16).
            let mut sc = [vdupq_n_s32(0); 16];
            let mut sc16 = [vdupq_n_s16(0); 8];
            for q in 0..4 {
                let v = vld1q_s8(g.add(SCALES + 16 * q).cast());
                let (lo, hi) = (vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v));
                sc16[2 * q] = lo;
                sc16[2 * q + 1] = hi;
                sc[4 * q] = vmovl_s16(vget_low_s16(lo));
                sc[4 * q + 1] = vmovl_high_s16(lo);
                sc[4 * q + 2] = vmovl_s16(vget_low_s16(hi));
                sc[4 * q + 3] = vmovl_high_s16(hi);
            }
            let ys: [*const u8; NR] = act_blocks(b, ldb, blk);
            let mut isum = [vdupq_n_s32(0); NR];
            for n in 0..2 {
                let base = g.add(QS + HALF * n);
                for h in 0..2 {
                    // Slots 4 h..4 h + 4: values 128 n + 32 m + 16 h .. + 16 for m in 0..4.
                    let mut v = [[vdupq_n_s8(0); 4]; 4];
                    for e in 0..4 {
                        let i = 4 * h + e;
                        let l0 = vld1q_u8(base.add(16 * i));
                        let l1 = vld1q_u8(base.add(16 * (8 + i)));
                        let hb = vld1q_u8(base.add(256 + 16 * i));
                        let parts = [
                            vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8::<4>(vandq_u8(hb, m3))),
                            vorrq_u8(
                                vandq_u8(l1, m4),
                                vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(hb), m3)),
                            ),
                            vorrq_u8(
                                vshrq_n_u8::<4>(l0),
                                vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(hb), m3)),
                            ),
                            vorrq_u8(vshrq_n_u8::<4>(l1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(hb))),
                        ];
                        for m in 0..4 {
                            v[m][e] = vreinterpretq_s8_u8(parts[m]);
                        }
                    }
                    for j in 0..NR {
                        for m in 0..4 {
                            let gi = 8 * n + 2 * m + h;
                            let y = ys[j].add(q8_k::QS + 16 * gi);
                            let w = &v[m];
                            let s = if W == 4 {
                                let y = vld1q_s8(y.cast());
                                let s = sdot_lane!(vdupq_n_s32(0), w[0], y, 0);
                                let s = sdot_lane!(s, w[1], y, 1);
                                let s = sdot_lane!(s, w[2], y, 2);
                                sdot_lane!(s, w[3], y, 3)
                            } else {
                                let y0 = vreinterpretq_s8_s64(vld1q_dup_s64(y.cast::<i64>()));
                                let y1 =
                                    vreinterpretq_s8_s64(vld1q_dup_s64(y.add(8).cast::<i64>()));
                                let s01 = sdot!(sdot!(vdupq_n_s32(0), w[0], y0), w[2], y1);
                                let s23 = sdot!(sdot!(vdupq_n_s32(0), w[1], y0), w[3], y1);
                                vpaddq_s32(s01, s23)
                            };
                            isum[j] = vmlaq_s32(isum[j], s, sc[gi]);
                        }
                    }
                }
            }
            for j in 0..NR {
                // The offset: 32 * sum over groups of scale * bsum.
                let bs = vld1q_s16_x2(ys[j].add(q8_k::BSUMS).cast::<i16>());
                let (b0, b1) = (bs.0, bs.1);
                macro_rules! off {
                    ($o:expr, $t:literal, $bv:expr, $l0:literal, $l1:literal) => {{
                        let o = vmlal_laneq_s16::<$l0>($o, vget_low_s16(sc16[$t]), $bv);
                        vmlal_laneq_s16::<$l1>(o, vget_high_s16(sc16[$t]), $bv)
                    }};
                }
                let o = vdupq_n_s32(0);
                let o = off!(o, 0, b0, 0, 1);
                let o = off!(o, 1, b0, 2, 3);
                let o = off!(o, 2, b0, 4, 5);
                let o = off!(o, 3, b0, 6, 7);
                let o = off!(o, 4, b1, 0, 1);
                let o = off!(o, 5, b1, 2, 3);
                let o = off!(o, 6, b1, 4, 5);
                let o = off!(o, 7, b1, 6, 7);
                acc[j] = scaled(acc[j], vmlsq_n_s32(isum[j], o, 32), d, ys[j]);
            }
        }
        store(c, ldc, &acc);
    }
}

/// The tile of `mr / 4` groups times `nr` activation rows, four at a time.
///
/// # Safety
///
/// As [`TileFn`]; the CPU supports dotprod; `a` points to `mr / 4` consecutive groups of four
/// Q6_K rows repacked with `W`-byte words.
#[inline(always)]
unsafe fn tile<const W: usize>(o: Operands, mr: usize, nr: usize) {
    // SAFETY: each run is a group of the tile and up to four of its columns (caller's
    // contract).
    unsafe {
        for_each_run(o, mr, nr, |u, n| match n {
            4 => group::<4, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
            3 => group::<3, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
            2 => group::<2, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
            _ => group::<1, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
        })
    }
}

/// Tile kernel on 4 x 4 repacked Q6_K weights (see [`TileFn`]).
///
/// # Safety
///
/// As [`TileFn`]; `a` points to `mr / 4` groups of four Q6_K rows repacked in 4 x 4.
#[target_feature(enable = "neon,dotprod")]
unsafe fn packed_q6_k_w4(o: Operands, mr: usize, nr: usize) {
    // SAFETY: caller's contract.
    unsafe { tile::<4>(o, mr, nr) }
}

/// The kernel for repacked Q6_K weights with `word`-byte words, with its tile size (one group
/// of four rows, four activation rows): 4 x 4 (dotprod) only. The 4 x 8 one (`tile::<8>`,
/// i8mm tier) counted N = 1 above the plain kernel under qemu `max` (0.6086 against 0.5982
/// instructions per multiply-add; N = 16 0.3569 against 0.4246), so the i8mm tier keeps Q6_K
/// plain.
pub(super) fn packed_tile(word: usize, wt: DType) -> Option<(TileFn, usize, usize)> {
    match (word, wt) {
        (4, DType::Q6_K) => Some((packed_q6_k_w4 as TileFn, ROWS, COLS)),
        _ => None,
    }
}
