//! NEON i8mm kernels on the 4 x 8 repacked layout ([`PackLayout::R4W8`]): per block of 32
//! values a group holds the four rows' f16 scales, then the quants in 32-byte chunks of four
//! 8-byte words (one per row). A 16-byte load is then 8 bytes of two rows, exactly the left
//! operand of `smmla`, whose right operand is the same 8 bytes of two activation rows: one
//! instruction gives a 2 x 2 tile of int32 dot products. A lone last activation row (the GEMV
//! is that case) goes through `sdot` instead ([`gemv`]): paired with itself, half of each
//! `smmla` would be thrown away. i8mm CPUs all have dotprod (the tier requires both).
//!
//! Activations are in the "Q8_0 with sums" format ([`crate::kernels::MatKernel::repacked`]):
//! Q4_0 nibbles are used as they are (0..15) and `8 * sum` of the activation quants subtracted;
//! IQ4_NL (Q4_0's layout) as the levels its nibbles index (`tbl`).
//! Tiles of four activation rows read them interleaved ([`act_x4`], 8-byte words): a 16-byte
//! load is then 8 bytes of two activation rows, the right operand of `smmla` as it is.
//!
//! [`PackLayout::R4W8`]: crate::kernels::repack::PackLayout::R4W8
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::{f16_at, f16x4_at, nibble_weights, sdot, smmla, Q0_IQ4_NL, Q0_Q4_0, Q0_Q8_0};
use crate::kernels::act_x4;
use crate::kernels::blocks::{q4_0, q8_0, q8_1, F16_BYTES};
use crate::kernels::{Operands, TileFn};
use std::arch::aarch64::*;
use tessera_core::DType;

/// Rows per group.
const ROWS: usize = 4;
/// Bytes of one activation block (f16 scale, i16 sum, 32 quants: sized as Q8_1).
const ACT_BLOCK: usize = q8_1::BYTES;

/// One group of four repacked rows times `NP` pairs of activation rows (`ncols` rows in all,
/// `2 * NP - 1 <= ncols <= 2 * NP`; an odd last row is paired with itself): Q4_0, Q8_0 or
/// IQ4_NL weights (`W`).
///
/// # Safety
///
/// The CPU supports i8mm; `a` is a group of four rows of `k` values repacked in 4 x 8;
/// `b + j * ldb` (`j < ncols`) are activation rows of `k` values in the Q8_0-with-sums
/// format; `c + j * ldc .. + 4` (`j < ncols`) are writable.
#[target_feature(enable = "neon,i8mm")]
#[allow(clippy::too_many_arguments)]
unsafe fn group<const NP: usize, const W: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    ncols: usize,
) {
    // SAFETY: every load stays within the group's and the activation rows' blocks (caller's
    // contract); the stores write the four outputs of each of the `ncols` activation rows.
    unsafe {
        let q4 = W != Q0_Q8_0;
        let gsize = if q4 { q4_0::BYTES * ROWS } else { q8_0::BYTES * ROWS };
        let m4 = vdupq_n_u8(0x0f);
        // acc[cp][rp] = [r0c0, r0c1, r1c0, r1c1] of row pair rp and column pair cp.
        let mut acc = [[vdupq_n_f32(0.0); 2]; NP];
        let col = |cp: usize, n: usize| b.add((2 * cp + n).min(ncols - 1) * ldb);
        for blk in 0..k / 32 {
            let g = a.add(blk * gsize);
            let (d0, d1, d2, d3) = (
                f16_at(g),
                f16_at(g.add(F16_BYTES)),
                f16_at(g.add(2 * F16_BYTES)),
                f16_at(g.add(3 * F16_BYTES)),
            );
            let wd = [vld1q_f32([d0, d0, d1, d1].as_ptr()), vld1q_f32([d2, d2, d3, d3].as_ptr())];
            let q = g.add(F16_BYTES * ROWS);
            // w[t][rp]: the weights of word t (values 8t..8t + 8) of row pair rp.
            let mut w = [[vdupq_n_s8(0); 2]; 4];
            for t in 0..if q4 { 2 } else { 4 } {
                for rp in 0..2 {
                    let r = vld1q_u8(q.add(32 * t + 16 * rp));
                    if q4 {
                        // Chunk t (bytes 8t..8t + 8 of qs): low nibbles values 8t..,
                        // high nibbles values 16 + 8t..
                        w[t][rp] = nibble_weights::<W>(vandq_u8(r, m4));
                        w[2 + t][rp] = nibble_weights::<W>(vshrq_n_u8::<4>(r));
                    } else {
                        w[t][rp] = vreinterpretq_s8_u8(r);
                    }
                }
            }
            for cp in 0..NP {
                let (p0, p1) = (col(cp, 0).add(blk * ACT_BLOCK), col(cp, 1).add(blk * ACT_BLOCK));
                let (y0, y1) = (p0.add(q8_1::QS).cast::<i8>(), p1.add(q8_1::QS).cast::<i8>());
                let (e0, e1) = (f16_at(p0), f16_at(p1));
                let be = vld1q_f32([e0, e1, e0, e1].as_ptr());
                let init = if W == Q0_Q4_0 {
                    let s0 =
                        -8 * i32::from(std::ptr::read_unaligned(p0.add(q8_1::S).cast::<i16>()));
                    let s1 =
                        -8 * i32::from(std::ptr::read_unaligned(p1.add(q8_1::S).cast::<i16>()));
                    vld1q_s32([s0, s1, s0, s1].as_ptr())
                } else {
                    vdupq_n_s32(0)
                };
                let yz: [int8x16_t; 4] = std::array::from_fn(|t| {
                    vcombine_s8(vld1_s8(y0.add(8 * t)), vld1_s8(y1.add(8 * t)))
                });
                for rp in 0..2 {
                    let mut s = init;
                    for t in 0..4 {
                        s = smmla!(s, w[t][rp], yz[t]);
                    }
                    acc[cp][rp] = vfmaq_f32(acc[cp][rp], vcvtq_f32_s32(s), vmulq_f32(wd[rp], be));
                }
            }
        }
        for cp in 0..NP {
            let mut v = [[0f32; 4]; 2];
            for rp in 0..2 {
                vst1q_f32(v[rp].as_mut_ptr(), acc[cp][rp]);
            }
            for n in 0..2 {
                let j = 2 * cp + n;
                if j < ncols {
                    let out = [v[0][n], v[0][2 + n], v[1][n], v[1][2 + n]];
                    vst1q_f32(c.add(j * ldc), vld1q_f32(out.as_ptr()));
                }
            }
        }
    }
}

/// One group of four repacked rows times `NA` groups of four activation rows in the
/// interleaved format ([`act_x4`], 8-byte words; group `n` at `b + 4 n ldb`): per block, the
/// weights (two row pairs) are loaded and unpacked once for the `4 NA` columns and the
/// activations (two column pairs per group) loaded once; 16 `smmla` give each activation
/// group's 4 x 4 products.
///
/// # Safety
///
/// The CPU supports i8mm; `a` is a group of four rows of `k` values repacked in 4 x 8;
/// `b + 4 n ldb` (`n < NA`) are groups of four activation rows of `k` values in the
/// interleaved format with 8-byte words; `c + j * ldc .. + 4` (`j < 4 NA`) are writable.
#[target_feature(enable = "neon,i8mm")]
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
        let q4 = W != Q0_Q8_0;
        let gsize = if q4 { q4_0::BYTES * ROWS } else { q8_0::BYTES * ROWS };
        let m4 = vdupq_n_u8(0x0f);
        // acc[n][cp][rp] = [r0c0, r0c1, r1c0, r1c1] of row pair rp and column pair cp of
        // activation group n.
        let mut acc = [[[vdupq_n_f32(0.0); 2]; 2]; NA];
        for blk in 0..k / 32 {
            let g = a.add(blk * gsize);
            // [d0, d0, d1, d1], [d2, d2, d3, d3].
            let d = f16x4_at(g);
            let wd = [vzip1q_f32(d, d), vzip2q_f32(d, d)];
            let q = g.add(F16_BYTES * ROWS);
            // w[t][rp]: the weights of word t (values 8t..8t + 8) of row pair rp.
            let mut w = [[vdupq_n_s8(0); 2]; 4];
            if q4 {
                // Chunk t (bytes 8t..8t + 8 of qs): low nibbles values 8t.., high 16 + 8t..
                let r = vld1q_u8_x4(q);
                let r = [r.0, r.1, r.2, r.3];
                for t in 0..2 {
                    for rp in 0..2 {
                        w[t][rp] = nibble_weights::<W>(vandq_u8(r[2 * t + rp], m4));
                        w[2 + t][rp] = nibble_weights::<W>(vshrq_n_u8::<4>(r[2 * t + rp]));
                    }
                }
            } else {
                let (lo, hi) = (vld1q_s8_x4(q.cast()), vld1q_s8_x4(q.add(64).cast()));
                w = [[lo.0, lo.1], [lo.2, lo.3], [hi.0, hi.1], [hi.2, hi.3]];
            }
            for (n, acc) in acc.iter_mut().enumerate() {
                let p = b.add(n * act_x4::ROWS * ldb + blk * act_x4::BLOCK);
                // [e0, e1, e0, e1], [e2, e3, e2, e3] (column pair cp, as the products' lanes).
                let e = vreinterpretq_f64_f32(f16x4_at(p.add(act_x4::D)));
                let be = [
                    vreinterpretq_f32_f64(vdupq_laneq_f64::<0>(e)),
                    vreinterpretq_f32_f64(vdupq_laneq_f64::<1>(e)),
                ];
                // yz[t][cp]: word t of columns 2cp and 2cp + 1.
                let (lo, hi) = (
                    vld1q_s8_x4(p.add(act_x4::QS).cast()),
                    vld1q_s8_x4(p.add(act_x4::QS + 64).cast()),
                );
                let yz = [[lo.0, lo.1], [lo.2, lo.3], [hi.0, hi.1], [hi.2, hi.3]];
                // Q4_0: - 8 * sum of each column, as the lanes of the products.
                let init = if W == Q0_Q4_0 {
                    let s = vmovl_s16(vld1_s16(p.add(act_x4::NEG8_SUM).cast()));
                    let s = vreinterpretq_s64_s32(s);
                    [
                        vreinterpretq_s32_s64(vdupq_laneq_s64::<0>(s)),
                        vreinterpretq_s32_s64(vdupq_laneq_s64::<1>(s)),
                    ]
                } else {
                    [vdupq_n_s32(0); 2]
                };
                for cp in 0..2 {
                    for rp in 0..2 {
                        let mut s = init[cp];
                        for t in 0..4 {
                            s = smmla!(s, w[t][rp], yz[t][cp]);
                        }
                        let d = vmulq_f32(wd[rp], be[cp]);
                        acc[cp][rp] = vfmaq_f32(acc[cp][rp], vcvtq_f32_s32(s), d);
                    }
                }
            }
        }
        for (n, acc) in acc.iter().enumerate() {
            for cp in 0..2 {
                let mut v = [[0f32; 4]; 2];
                for rp in 0..2 {
                    vst1q_f32(v[rp].as_mut_ptr(), acc[cp][rp]);
                }
                for h in 0..2 {
                    let out = [v[0][h], v[0][2 + h], v[1][h], v[1][2 + h]];
                    let j = act_x4::ROWS * n + 2 * cp + h;
                    vst1q_f32(c.add(j * ldc), vld1q_f32(out.as_ptr()));
                }
            }
        }
    }
}

/// `G` consecutive groups of four repacked rows (`gstride` bytes apart) times one activation
/// row, with `sdot` on the 4 x 8 layout: a 16-byte load holds word `t` of two rows, and the
/// activation's word `t` duplicated in both halves (`ld1r`) gives each row's dot product in two
/// lanes, folded by one `addp` per block; each activation word is loaded once for the `G`
/// groups.
///
/// # Safety
///
/// The CPU supports dotprod; `a + g * gstride` (`g < G`) are groups of four rows of `k` values
/// repacked in 4 x 8; `b` is an activation row of `k` values in the Q8_0-with-sums format;
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
        let q4 = W != Q0_Q8_0;
        let gsize = if q4 { q4_0::BYTES * ROWS } else { q8_0::BYTES * ROWS };
        let m4 = vdupq_n_u8(0x0f);
        let mut acc = [vdupq_n_f32(0.0); G];
        for blk in 0..k / 32 {
            let p = b.add(blk * ACT_BLOCK);
            let bd = f16_at(p);
            let y = p.add(q8_1::QS).cast::<i64>();
            let yw: [int8x16_t; 4] =
                std::array::from_fn(|t| vreinterpretq_s8_s64(vld1q_dup_s64(y.add(t))));
            // Q4_0: - 8 * sum, half in each of a row's two lanes.
            let init = if W == Q0_Q4_0 {
                vdupq_n_s32(-4 * i32::from(std::ptr::read_unaligned(p.add(q8_1::S).cast::<i16>())))
            } else {
                vdupq_n_s32(0)
            };
            for (i, acc) in acc.iter_mut().enumerate() {
                let g = a.add(i * gstride + blk * gsize);
                let q = g.add(F16_BYTES * ROWS);
                // w[2t + h]: word t (values 8t..8t + 8) of rows 2h and 2h + 1.
                let w: [int8x16_t; 8] = if q4 {
                    // Chunk t (bytes 8t..8t + 8 of qs): low nibbles values 8t.., high 16 + 8t..
                    let r = vld1q_u8_x4(q);
                    let r = [r.0, r.1, r.2, r.3];
                    std::array::from_fn(|i| {
                        nibble_weights::<W>(if i < 4 {
                            vandq_u8(r[i], m4)
                        } else {
                            vshrq_n_u8::<4>(r[i - 4])
                        })
                    })
                } else {
                    let (lo, hi) = (vld1q_s8_x4(q.cast()), vld1q_s8_x4(q.add(64).cast()));
                    [lo.0, lo.1, lo.2, lo.3, hi.0, hi.1, hi.2, hi.3]
                };
                let (mut s01, mut s23) = (init, init);
                for t in 0..4 {
                    s01 = sdot!(s01, w[2 * t], yw[t]);
                    s23 = sdot!(s23, w[2 * t + 1], yw[t]);
                }
                let s = vpaddq_s32(s01, s23);
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
        /// Tile kernel on 4 x 8 repacked weights (see [`TileFn`]): `mr` is a multiple of 4 (up
        /// to [`GEMV_GROUPS`] groups); four activation rows are one group of the interleaved
        /// format ([`act_x4`], 8-byte words: [`group_x4`]), fewer are rows: three (a pair and a
        /// row paired with itself) or two per group at a time, a lone one for all the groups
        /// at once by [`gemv`].
        ///
        /// # Safety
        ///
        /// As [`TileFn`]; `a` points to `mr / 4` consecutive groups of four rows repacked in
        /// 4 x 8; the first `4 * (nr / 4)` columns are groups of the interleaved activation format
        /// (`b`, `b + 4 * ldb`), the rest rows.
        #[target_feature(enable = "neon,dotprod,i8mm")]
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
                        if n > 2 {
                            group::<2, $w>(u.k, u.a, u.b, u.ldb, u.c, u.ldc, n);
                        } else {
                            group::<1, $w>(u.k, u.a, u.b, u.ldb, u.c, u.ldc, n);
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

/// The kernel for 4 x 8 repacked weights of `wt`, with its tile size (up to [`GEMV_GROUPS`]
/// groups of 4 rows, 8 columns: two groups of the interleaved activation format).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_0 => Some((packed_q4_0 as TileFn, ROWS * GEMV_GROUPS, 2 * act_x4::ROWS)),
        DType::Q8_0 => Some((packed_q8_0 as TileFn, ROWS * GEMV_GROUPS, 2 * act_x4::ROWS)),
        DType::IQ4_NL => Some((packed_iq4_nl as TileFn, ROWS * GEMV_GROUPS, 2 * act_x4::ROWS)),
        _ => None,
    }
}
