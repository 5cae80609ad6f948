//! NEON dotprod kernels on the 4 x 4 repacked layout ([`PackLayout::R4W4`]): per block of 32
//! values a group holds the four rows' f16 scales, then the quants in 16-byte chunks of four
//! 4-byte words (one per row). `sdot` by element multiplies a chunk (four rows) by one 4-byte
//! word of an activation register, so each weight register serves every activation row of
//! the tile and no horizontal sums are needed: the four lanes are the four rows.
//!
//! Activations are in the "Q8_0 with sums" format ([`crate::kernels::MatKernel::repacked`]):
//! Q4_0 nibbles are used as they are (0..15) and `8 * sum` of the activation quants subtracted;
//! IQ4_NL (Q4_0's layout) as the levels its nibbles index (`tbl`).
//! Tiles of four activation rows read them interleaved ([`act_x4`], 4-byte words), so that
//! each activation chunk too is loaded once for four columns.
//!
//! [`PackLayout::R4W4`]: crate::kernels::repack::PackLayout::R4W4
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::{f16_at, f16x4_at, nibble_weights, sdot_lane, Q0_IQ4_NL, Q0_Q4_0, Q0_Q8_0};
use crate::kernels::act_x4;
use crate::kernels::blocks::{q4_0, q8_0, q8_1, F16_BYTES};
use crate::kernels::{Operands, TileFn};
use std::arch::aarch64::*;
use tessera_core::DType;

/// Rows per group.
const ROWS: usize = 4;
/// Bytes of one activation block (f16 scale, i16 sum, 32 quants: sized as Q8_1).
const ACT_BLOCK: usize = q8_1::BYTES;

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

/// The quants of one block of a group at `q` as eight chunks: chunk `h` holds the weights of
/// values `4h..4h + 4` of the four rows (Q4_0 / IQ4_NL: chunk `h < 4` of `qs`, low nibbles
/// values `4h..`, high nibbles `16 + 4h..`, Q4_0's as they are, 0..15, IQ4_NL's levels).
///
/// # Safety
///
/// `q` points to the block's quants in a group (64 bytes for Q4_0 / IQ4_NL, 128 for Q8_0).
#[inline(always)]
unsafe fn weights<const W: u8>(q: *const u8) -> [int8x16_t; 8] {
    // SAFETY: the loads are within the block's quants (caller's contract); NEON is part of
    // every aarch64 target this crate builds for.
    unsafe {
        if W != Q0_Q8_0 {
            let m4 = vdupq_n_u8(0x0f);
            let r = vld1q_u8_x4(q);
            let r = [r.0, r.1, r.2, r.3];
            std::array::from_fn(|h| {
                nibble_weights::<W>(if h < 4 {
                    vandq_u8(r[h], m4)
                } else {
                    vshrq_n_u8::<4>(r[h - 4])
                })
            })
        } else {
            let (lo, hi) = (vld1q_s8_x4(q.cast()), vld1q_s8_x4(q.add(64).cast()));
            [lo.0, lo.1, lo.2, lo.3, hi.0, hi.1, hi.2, hi.3]
        }
    }
}

/// One group of four repacked rows times `NR` activation rows: Q4_0, Q8_0 or IQ4_NL weights
/// (`W`).
///
/// # Safety
///
/// The CPU supports dotprod; `a` is a group of four rows of `k` values repacked in 4 x 4;
/// `b + j * ldb` (`j < NR`) are activation rows of `k` values in the Q8_0-with-sums format;
/// `c + j * ldc .. + 4` are writable.
#[target_feature(enable = "neon,dotprod")]
unsafe fn group<const NR: usize, const W: u8>(
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
        let gsize = if W == Q0_Q8_0 { q8_0::BYTES * ROWS } else { q4_0::BYTES * ROWS };
        let mut acc = [vdupq_n_f32(0.0); NR];
        for blk in 0..k / 32 {
            let g = a.add(blk * gsize);
            let dw = f16x4_at(g);
            let w = weights::<W>(g.add(F16_BYTES * ROWS));
            for j in 0..NR {
                let p = b.add(j * ldb + blk * ACT_BLOCK);
                let bd = f16_at(p);
                let y = p.add(q8_1::QS).cast::<i8>();
                let y = vld1q_s8_x2(y);
                let (y0, y1) = (y.0, y.1);
                let init = if W == Q0_Q4_0 {
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

/// One group of four repacked rows times `NA` groups of four activation rows in the
/// interleaved format ([`act_x4`], 4-byte words; group `n` at `b + 4 n ldb`): per block, each
/// weight chunk is loaded and unpacked once for the `4 NA` columns and each activation chunk
/// (word `h` of four activation rows) loaded once; `sdot` by element `c` of the activation
/// chunk gives column `c` of its group.
///
/// # Safety
///
/// The CPU supports dotprod; `a` is a group of four rows of `k` values repacked in 4 x 4;
/// `b + 4 n ldb` (`n < NA`) are groups of four activation rows of `k` values in the
/// interleaved format with 4-byte words; `c + j * ldc .. + 4` (`j < 4 NA`) are writable.
#[target_feature(enable = "neon,dotprod")]
unsafe fn group_x4<const NA: usize, const W: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: every load stays within the group's and the activation groups' blocks (caller's
    // contract); the stores write the four outputs of each activation row.
    unsafe {
        let gsize = if W == Q0_Q8_0 { q8_0::BYTES * ROWS } else { q4_0::BYTES * ROWS };
        let mut acc = [[vdupq_n_f32(0.0); act_x4::ROWS]; NA];
        for blk in 0..k / 32 {
            let g = a.add(blk * gsize);
            let dw = f16x4_at(g);
            let w = weights::<W>(g.add(F16_BYTES * ROWS));
            // Activation group n (unrolled: the accumulators stay in registers).
            macro_rules! act_group {
                ($n:literal) => {{
                    let n: usize = $n;
                    let acc = &mut acc[n];
                    let p = b.add(n * act_x4::ROWS * ldb + blk * act_x4::BLOCK);
                    let da = f16x4_at(p.add(act_x4::D));
                    let y = (
                        vld1q_s8_x4(p.add(act_x4::QS).cast()),
                        vld1q_s8_x4(p.add(act_x4::QS + 64).cast()),
                    );
                    let y = [y.0 .0, y.0 .1, y.0 .2, y.0 .3, y.1 .0, y.1 .1, y.1 .2, y.1 .3];
                    // Q4_0: - 8 * sum of each column (nibbles used as 0..15).
                    let init = if W == Q0_Q4_0 {
                        vmovl_s16(vld1_s16(p.add(act_x4::NEG8_SUM).cast()))
                    } else {
                        vdupq_n_s32(0)
                    };
                    macro_rules! column {
                        ($c:literal) => {{
                            let mut s = vdupq_laneq_s32::<$c>(init);
                            for h in 0..8 {
                                s = sdot_lane!(s, w[h], y[h], $c);
                            }
                            let d = vmulq_laneq_f32::<$c>(dw, da);
                            acc[$c] = vfmaq_f32(acc[$c], vcvtq_f32_s32(s), d);
                        }};
                    }
                    column!(0);
                    column!(1);
                    column!(2);
                    column!(3);
                }};
            }
            act_group!(0);
            if NA > 1 {
                act_group!(1);
            }
        }
        for (n, acc) in acc.iter().enumerate() {
            for j in 0..act_x4::ROWS {
                vst1q_f32(c.add((act_x4::ROWS * n + j) * ldc), acc[j]);
            }
        }
    }
}

/// `G` consecutive groups of four repacked rows (`gstride` bytes apart) times one activation
/// row: each block of the activation row is loaded once for the `G` groups.
///
/// # Safety
///
/// The CPU supports dotprod; `a + g * gstride` (`g < G`) are groups of four rows of `k` values
/// repacked in 4 x 4; `b` is an activation row of `k` values in the Q8_0-with-sums format;
/// `c .. c + 4 * G` are writable.
#[target_feature(enable = "neon,dotprod")]
unsafe fn gemv<const G: usize, const W: u8>(
    k: usize,
    a: *const u8,
    gstride: usize,
    b: *const u8,
    c: *mut f32,
) {
    // SAFETY: every load stays within the groups' and the activation row's blocks (caller's
    // contract); the stores write the groups' outputs.
    unsafe {
        let gsize = if W == Q0_Q8_0 { q8_0::BYTES * ROWS } else { q4_0::BYTES * ROWS };
        let mut acc = [vdupq_n_f32(0.0); G];
        for blk in 0..k / 32 {
            let p = b.add(blk * ACT_BLOCK);
            let bd = f16_at(p);
            let y = vld1q_s8_x2(p.add(q8_1::QS).cast::<i8>());
            let init = if W == Q0_Q4_0 {
                vdupq_n_s32(-8 * i32::from(std::ptr::read_unaligned(p.add(q8_1::S).cast::<i16>())))
            } else {
                vdupq_n_s32(0)
            };
            for (i, acc) in acc.iter_mut().enumerate() {
                let g = a.add(i * gstride + blk * gsize);
                let w = weights::<W>(g.add(F16_BYTES * ROWS));
                let s = sdot4!(init, &w[..4], y.0);
                let s = sdot4!(s, &w[4..], y.1);
                *acc = vfmaq_f32(*acc, vcvtq_f32_s32(s), vmulq_n_f32(f16x4_at(g), bd));
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            vst1q_f32(c.add(ROWS * i), *acc);
        }
    }
}

/// Groups of one tile: up to this many groups of four rows share each activation block when
/// there is one activation row.
const GEMV_GROUPS: usize = 4;

macro_rules! packed_tile_fn {
    ($name:ident, $w:expr) => {
        /// Tile kernel on 4 x 4 repacked weights (see [`TileFn`]): `mr` is a multiple of 4 (up
        /// to [`GEMV_GROUPS`] groups); four activation rows are one group of the interleaved
        /// format ([`act_x4`], 4-byte words: [`group_x4`]), fewer are rows: three or two per
        /// group at a time, a lone one for all the groups at once by [`gemv`].
        ///
        /// # Safety
        ///
        /// As [`TileFn`]; `a` points to `mr / 4` consecutive groups of four rows repacked in
        /// 4 x 4; the first `4 * (nr / 4)` columns are groups of the interleaved activation format
        /// (`b`, `b + 4 * ldb`), the rest rows.
        #[target_feature(enable = "neon,dotprod")]
        unsafe fn $name(o: Operands, mr: usize, nr: usize) {
            debug_assert!(mr % ROWS == 0 && mr <= ROWS * GEMV_GROUPS);
            let groups = mr / ROWS;
            // Whole groups of the interleaved format first, both at once when there are two
            // (each weight block loaded and unpacked once for the eight columns).
            let x4 = nr / act_x4::ROWS;
            if x4 > 0 {
                for gi in 0..groups {
                    // SAFETY: group gi of the tile and its first 4 * x4 columns (caller's
                    // contract: they are groups of the interleaved format).
                    unsafe {
                        let u = o.at(ROWS * gi, 0);
                        if x4 >= 2 {
                            group_x4::<2, $w>(u.k, u.a, u.b, u.ldb, u.c, u.ldc);
                        } else {
                            group_x4::<1, $w>(u.k, u.a, u.b, u.ldb, u.c, u.ldc);
                        }
                    }
                }
            }
            let mut j = act_x4::ROWS * x4.min(2);
            while j < nr {
                let left = nr - j;
                // SAFETY: columns j.. of the tile and its `groups` groups (caller's contract).
                unsafe {
                    let t = o.at(0, j);
                    if left == 1 {
                        let gs = ROWS * t.lda;
                        match groups {
                            4 => gemv::<4, $w>(t.k, t.a, gs, t.b, t.c),
                            3 => gemv::<3, $w>(t.k, t.a, gs, t.b, t.c),
                            2 => gemv::<2, $w>(t.k, t.a, gs, t.b, t.c),
                            _ => gemv::<1, $w>(t.k, t.a, gs, t.b, t.c),
                        }
                        break;
                    }
                    let n = left.min(4);
                    for gi in 0..groups {
                        let u = t.at(ROWS * gi, 0);
                        match n {
                            3 => group::<3, $w>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                            _ => group::<2, $w>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                        }
                    }
                    j += n;
                }
            }
        }
    };
}

packed_tile_fn!(packed_q4_0, Q0_Q4_0);
packed_tile_fn!(packed_q8_0, Q0_Q8_0);
packed_tile_fn!(packed_iq4_nl, Q0_IQ4_NL);

/// The kernel for 4 x 4 repacked weights of `wt`, with its tile size (up to [`GEMV_GROUPS`]
/// groups of 4 rows, 8 columns: two groups of the interleaved activation format).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_0 => Some((packed_q4_0 as TileFn, ROWS * GEMV_GROUPS, 2 * act_x4::ROWS)),
        DType::Q8_0 => Some((packed_q8_0 as TileFn, ROWS * GEMV_GROUPS, 2 * act_x4::ROWS)),
        DType::IQ4_NL => Some((packed_iq4_nl as TileFn, ROWS * GEMV_GROUPS, 2 * act_x4::ROWS)),
        _ => None,
    }
}
