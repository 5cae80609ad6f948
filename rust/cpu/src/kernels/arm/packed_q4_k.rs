//! Repacked Q4_K and Q5_K on the dotprod (4 x 4, [`PackLayout::R4W4`]) and i8mm (4 x 8,
//! [`PackLayout::R4W8`]) tiers, times plain Q8_K activation rows.
//!
//! Per block of 256 values a group of four rows holds the four `d`, the four `dmin`, the 12
//! packed scale bytes byte-planar (byte `s` of the four rows at `16 + 4 s`), then the 128 quant
//! bytes of each row in words of 4 (dotprod) or 8 (i8mm) bytes, the four rows' words side by
//! side. The scales and mins of the four rows are decoded at once with byte-vector operations
//! (lane `4 s + r`: group `s`, row `r`); each weight register multiplies four rows at once, so
//! a group's sum is one vector of the four rows (no horizontal sums), times the four rows'
//! scales; the mins go through Q8_K's `bsums`, one reduction per block and column for all rows.
//!
//! Q5_K (the same header) has its rows' 32 `qh` bytes in words between the scales and the
//! nibbles: `qh` register `u` (16 bytes) holds the same value positions of the same rows as
//! register `u` of each 32-value run of nibbles, so the fifth bit of a weight of group `gi` is
//! bit `gi` of the same byte of `qh` register `u`: brought to bit 4 with nothing above it
//! (`shl` by `7 - gi`, `ushr` by 3) and merged with the nibble (`bsl` for the low nibbles, `sri`
//! for the high ones), three instructions per weight register.
//!
//! Dotprod: `sdot` by element (chunk `u` of a group, four rows of 4 bytes, by word `u` of the
//! activation). I8mm tier: `sdot` on a 16-byte weight register (two rows of 8 bytes) by the
//! activation's 8-byte word duplicated (`ld1r`), `addp` of the two row pairs, for a lone
//! activation row; pairs of activation rows by `smmla` (two rows of weights by two of
//! activations per 16-byte operand).
//!
//! [`PackLayout::R4W4`]: crate::kernels::repack::PackLayout::R4W4
//! [`PackLayout::R4W8`]: crate::kernels::repack::PackLayout::R4W8
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::packed_k::{act_block_pairs, act_blocks, for_each_run, scaled, store, COLS, ROWS};
use super::{f16x4_at, sdot, sdot_lane, smmla};
use crate::kernels::blocks::{q4_k, q5_k, q8_k, F16_BYTES};
use crate::kernels::{Operands, TileFn};
use std::arch::aarch64::*;
use tessera_core::DType;

/// Bytes of one block of a group: Q5_K (`q5`) or Q4_K.
const fn gblock(q5: bool) -> usize {
    if q5 {
        q5_k::BYTES * ROWS
    } else {
        q4_k::BYTES * ROWS
    }
}
/// Offset of the byte-planar scales in a group block.
const SCALES: usize = 2 * F16_BYTES * ROWS;
/// Offset of Q5_K's `qh` (the rows' fifth bits) in a group block.
const QH: usize = SCALES + 12 * ROWS;
/// Offset of the nibbles in a group block: Q5_K (`q5`, after `qh`) or Q4_K.
const fn qs(q5: bool) -> usize {
    if q5 {
        QH + (q5_k::QS - q5_k::QH) * ROWS
    } else {
        QH
    }
}

/// The eight weight registers of group `gi` (0..8) of a group block: the low (even `gi`) or
/// high (odd) nibbles of `raw` (registers `0..8` of the nibbles' bytes `32 (gi / 2)..`), with
/// Q5_K (`Q5`) bit `gi` of `qh` (the block's eight `qh` registers, the same positions) as bit 4.
#[inline(always)]
fn weights<const Q5: bool>(
    raw: &[uint8x16_t; 8],
    qh: &[uint8x16_t; 8],
    gi: usize,
) -> [int8x16_t; 8] {
    // SAFETY: NEON is part of every aarch64 target this crate builds for; register operations.
    unsafe {
        let m4 = vdupq_n_u8(0x0f);
        let top = vdupq_n_s8(7 - gi as i8);
        std::array::from_fn(|u| {
            vreinterpretq_s8_u8(match (Q5, gi % 2) {
                (false, 0) => vandq_u8(raw[u], m4),
                (false, _) => vshrq_n_u8::<4>(raw[u]),
                (true, odd) => {
                    // Bit gi at bit 7 (shl by 7 - gi), then at bit 4 with zeros above.
                    let hb = vshrq_n_u8::<3>(vshlq_u8(qh[u], top));
                    if odd == 0 {
                        vbslq_u8(m4, raw[u], hb)
                    } else {
                        vsriq_n_u8::<4>(hb, raw[u])
                    }
                }
            })
        })
    }
}

/// The eight `qh` registers of a Q5_K group block at `g` (zeros for Q4_K).
///
/// # Safety
///
/// `g` points to a group block of Q5_K (`Q5`).
#[inline(always)]
unsafe fn fifth_bits<const Q5: bool>(g: *const u8) -> [uint8x16_t; 8] {
    // SAFETY: the 128 bytes of `qh` (caller's contract).
    unsafe {
        if Q5 {
            let (h0, h1) = (vld1q_u8_x4(g.add(QH)), vld1q_u8_x4(g.add(QH + 64)));
            [h0.0, h0.1, h0.2, h0.3, h1.0, h1.1, h1.2, h1.3]
        } else {
            [vdupq_n_u8(0); 8]
        }
    }
}

/// The scales of the eight groups of a group block's four rows (vector `g`, lane `r`: group
/// `g` of row `r`) and their mins as i16 (vector `t`, lanes `4 h + r`: group `2 t + h`).
///
/// # Safety
///
/// `p` points to the 48 byte-planar scale bytes of a group block.
#[inline(always)]
unsafe fn scales_mins(p: *const u8) -> ([int32x4_t; 8], [int16x8_t; 4]) {
    // SAFETY: the loads are the 48 bytes (caller's contract); NEON is part of every aarch64
    // target this crate builds for.
    unsafe {
        let (v0, v1, v2) = (vld1q_u8(p), vld1q_u8(p.add(16)), vld1q_u8(p.add(32)));
        let (six, four) = (vdupq_n_u8(0x3f), vdupq_n_u8(0x0f));
        let sc =
            [vandq_u8(v0, six), vorrq_u8(vandq_u8(v2, four), vshlq_n_u8::<4>(vshrq_n_u8::<6>(v0)))];
        let mn = [
            vandq_u8(v1, six),
            vorrq_u8(vshrq_n_u8::<4>(v2), vshlq_n_u8::<4>(vshrq_n_u8::<6>(v1))),
        ];
        let mut s = [vdupq_n_s32(0); 8];
        let mut m = [vdupq_n_s16(0); 4];
        for h in 0..2 {
            let (lo, hi) = (vmovl_u8(vget_low_u8(sc[h])), vmovl_high_u8(sc[h]));
            s[4 * h] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo)));
            s[4 * h + 1] = vreinterpretq_s32_u32(vmovl_high_u16(lo));
            s[4 * h + 2] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi)));
            s[4 * h + 3] = vreinterpretq_s32_u32(vmovl_high_u16(hi));
            m[2 * h] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn[h])));
            m[2 * h + 1] = vreinterpretq_s16_u16(vmovl_high_u8(mn[h]));
        }
        (s, m)
    }
}

/// The four rows' mins times the activation block's sums of 32 (lane `r`: row `r`).
///
/// # Safety
///
/// `y` points to a readable Q8_K block.
#[inline(always)]
unsafe fn min_dot(m: &[int16x8_t; 4], y: *const u8) -> int32x4_t {
    // SAFETY: the 32 bytes of `bsums` are in the block (caller's contract).
    unsafe {
        let bs = vld1q_s16_x2(y.add(q8_k::BSUMS).cast::<i16>());
        let gs = vpaddq_s16(bs.0, bs.1);
        let s = vmull_laneq_s16::<0>(vget_low_s16(m[0]), gs);
        let s = vmlal_laneq_s16::<1>(s, vget_high_s16(m[0]), gs);
        let s = vmlal_laneq_s16::<2>(s, vget_low_s16(m[1]), gs);
        let s = vmlal_laneq_s16::<3>(s, vget_high_s16(m[1]), gs);
        let s = vmlal_laneq_s16::<4>(s, vget_low_s16(m[2]), gs);
        let s = vmlal_laneq_s16::<5>(s, vget_high_s16(m[2]), gs);
        let s = vmlal_laneq_s16::<6>(s, vget_low_s16(m[3]), gs);
        vmlal_laneq_s16::<7>(s, vget_high_s16(m[3]), gs)
    }
}

/// `acc - dmin * bd * min_dot(m, y)`: the mins' share of a block (lane `r`: row `r`).
///
/// # Safety
///
/// `y` points to a readable Q8_K block.
#[inline(always)]
unsafe fn min_share(
    acc: float32x4_t,
    m: &[int16x8_t; 4],
    dmin: float32x4_t,
    y: *const u8,
) -> float32x4_t {
    // SAFETY: the block's scale and sums (caller's contract).
    unsafe {
        let bd = std::ptr::read_unaligned(y.cast::<f32>());
        vfmsq_f32(acc, vcvtq_f32_s32(min_dot(m, y)), vmulq_n_f32(dmin, bd))
    }
}

/// One group of four repacked Q4_K (Q5_K: `Q5`) rows (words of `W` bytes: 4 or 8) times `NR`
/// Q8_K activation rows.
///
/// # Safety
///
/// The CPU supports dotprod; `a` is a group of four Q4_K (Q5_K) rows of `k` values repacked
/// with `W`-byte words; `b + j * ldb` (`j < NR`) are Q8_K rows of `k` values;
/// `c + j * ldc .. + 4` are writable.
#[target_feature(enable = "neon,dotprod")]
unsafe fn group<const NR: usize, const W: usize, const Q5: bool>(
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
        let mut acc = [vdupq_n_f32(0.0); NR];
        for blk in 0..k / 256 {
            let g = a.add(blk * gblock(Q5));
            let (d, dmin) = (f16x4_at(g), f16x4_at(g.add(F16_BYTES * ROWS)));
            let (sc, mn) = scales_mins(g.add(SCALES));
            let ys: [*const u8; NR] = act_blocks(b, ldb, blk);
            let mut isum = [vdupq_n_s32(0); NR];
            for ch in 0..4 {
                // 32 values of each row (bytes 32 ch.. of its nibbles), in 8 registers.
                let q = g.add(qs(Q5) + 128 * ch);
                let (r0, r1) = (vld1q_u8_x4(q), vld1q_u8_x4(q.add(64)));
                let raw = [r0.0, r0.1, r0.2, r0.3, r1.0, r1.1, r1.2, r1.3];
                let qh = fifth_bits::<Q5>(g);
                for half in 0..2 {
                    // Group 2 ch: the low nibbles; 2 ch + 1: the high.
                    let gi = 2 * ch + half;
                    let w = weights::<Q5>(&raw, &qh, gi);
                    for j in 0..NR {
                        let y = ys[j].add(q8_k::QS + 32 * gi);
                        let s = if W == 4 {
                            let y = vld1q_s8_x2(y.cast());
                            let s = sdot_lane!(vdupq_n_s32(0), w[0], y.0, 0);
                            let s = sdot_lane!(s, w[1], y.0, 1);
                            let s = sdot_lane!(s, w[2], y.0, 2);
                            let s = sdot_lane!(s, w[3], y.0, 3);
                            let s = sdot_lane!(s, w[4], y.1, 0);
                            let s = sdot_lane!(s, w[5], y.1, 1);
                            let s = sdot_lane!(s, w[6], y.1, 2);
                            sdot_lane!(s, w[7], y.1, 3)
                        } else {
                            // Word t (8 bytes) of the activation against rows 0, 1 (w[2t])
                            // and rows 2, 3 (w[2t + 1]).
                            let (mut s01, mut s23) = (vdupq_n_s32(0), vdupq_n_s32(0));
                            for t in 0..4 {
                                let yt =
                                    vreinterpretq_s8_s64(vld1q_dup_s64(y.add(8 * t).cast::<i64>()));
                                s01 = sdot!(s01, w[2 * t], yt);
                                s23 = sdot!(s23, w[2 * t + 1], yt);
                            }
                            vpaddq_s32(s01, s23)
                        };
                        isum[j] = vmlaq_s32(isum[j], s, sc[gi]);
                    }
                }
            }
            for j in 0..NR {
                acc[j] = scaled(acc[j], isum[j], d, ys[j]);
                acc[j] = min_share(acc[j], &mn, dmin, ys[j]);
            }
        }
        store(c, ldc, &acc);
    }
}

/// One group of four Q4_K (Q5_K: `Q5`) rows repacked in 4 x 8 times `NP` pairs of Q8_K activation rows with
/// `smmla`: the operand of a pair is word `t` (8 bytes) of both rows (two loads), its products
/// with rows 0, 1 and rows 2, 3 are 2 x 2 tiles, times the rows' scales laid out to match,
/// unzipped into the two columns once per block.
///
/// # Safety
///
/// The CPU supports i8mm; `a` is a group of four Q4_K (Q5_K) rows of `k` values repacked in
/// 4 x 8; `b + j * ldb` (`j < 2 NP`) are Q8_K rows of `k` values; `c + j * ldc .. + 4` are
/// writable.
#[target_feature(enable = "neon,i8mm")]
unsafe fn group_mm<const NP: usize, const Q5: bool>(
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
        let mut acc = [[vdupq_n_f32(0.0); 2]; NP];
        for blk in 0..k / 256 {
            let g = a.add(blk * gblock(Q5));
            let (d, dmin) = (f16x4_at(g), f16x4_at(g.add(F16_BYTES * ROWS)));
            let (sc, mn) = scales_mins(g.add(SCALES));
            let ys = act_block_pairs::<NP>(b, ldb, blk);
            // isum[p]: [r0 c0, r0 c1, r1 c0, r1 c1] and the same for rows 2, 3.
            let mut isum = [[vdupq_n_s32(0); 2]; NP];
            for ch in 0..4 {
                let q = g.add(qs(Q5) + 128 * ch);
                let (r0, r1) = (vld1q_u8_x4(q), vld1q_u8_x4(q.add(64)));
                let raw = [r0.0, r0.1, r0.2, r0.3, r1.0, r1.1, r1.2, r1.3];
                let qh = fifth_bits::<Q5>(g);
                for half in 0..2 {
                    let gi = 2 * ch + half;
                    let w = weights::<Q5>(&raw, &qh, gi);
                    let (s01, s23) = (vzip1q_s32(sc[gi], sc[gi]), vzip2q_s32(sc[gi], sc[gi]));
                    for p in 0..NP {
                        let (y0, y1) =
                            (ys[p][0].add(q8_k::QS + 32 * gi), ys[p][1].add(q8_k::QS + 32 * gi));
                        let (mut m01, mut m23) = (vdupq_n_s32(0), vdupq_n_s32(0));
                        for t in 0..4 {
                            let yt = vcombine_s8(
                                vld1_s8(y0.add(8 * t).cast()),
                                vld1_s8(y1.add(8 * t).cast()),
                            );
                            m01 = smmla!(m01, w[2 * t], yt);
                            m23 = smmla!(m23, w[2 * t + 1], yt);
                        }
                        isum[p][0] = vmlaq_s32(isum[p][0], m01, s01);
                        isum[p][1] = vmlaq_s32(isum[p][1], m23, s23);
                    }
                }
            }
            for p in 0..NP {
                let cols = [vuzp1q_s32(isum[p][0], isum[p][1]), vuzp2q_s32(isum[p][0], isum[p][1])];
                for h in 0..2 {
                    let y = ys[p][h];
                    acc[p][h] = scaled(acc[p][h], cols[h], d, y);
                    acc[p][h] = min_share(acc[p][h], &mn, dmin, y);
                }
            }
        }
        for p in 0..NP {
            for h in 0..2 {
                vst1q_f32(c.add((2 * p + h) * ldc), acc[p][h]);
            }
        }
    }
}

/// The tile of `mr / 4` groups times `nr` activation rows, four at a time.
///
/// # Safety
///
/// As [`TileFn`]; the CPU supports dotprod; `a` points to `mr / 4` consecutive groups of four
/// Q4_K (Q5_K: `Q5`) rows repacked with `W`-byte words.
#[inline(always)]
unsafe fn tile<const W: usize, const Q5: bool>(o: Operands, mr: usize, nr: usize) {
    // SAFETY: each run is a group of the tile and up to four of its columns (caller's
    // contract).
    unsafe {
        for_each_run(o, mr, nr, |u, n| {
            if W == 8 && n >= 2 {
                // Pairs of columns by `smmla`, a third one by `sdot`.
                if n == 4 {
                    group_mm::<2, Q5>(u.k, u.a, u.b, u.ldb, u.c, u.ldc);
                } else {
                    group_mm::<1, Q5>(u.k, u.a, u.b, u.ldb, u.c, u.ldc);
                }
                if n == 3 {
                    let v = u.at(0, 2);
                    group::<1, W, Q5>(v.k, v.a, v.b, v.ldb, v.c, v.ldc);
                }
                return;
            }
            match n {
                4 => group::<4, W, Q5>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                3 => group::<3, W, Q5>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                2 => group::<2, W, Q5>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                _ => group::<1, W, Q5>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
            }
        })
    }
}

/// Tile kernel on 4 x 4 repacked Q4_K (Q5_K: `Q5`) weights (see [`TileFn`]).
///
/// # Safety
///
/// As [`TileFn`]; `a` points to `mr / 4` groups of four Q4_K (Q5_K) rows repacked in 4 x 4.
#[target_feature(enable = "neon,dotprod")]
unsafe fn packed_w4<const Q5: bool>(o: Operands, mr: usize, nr: usize) {
    // SAFETY: caller's contract.
    unsafe { tile::<4, Q5>(o, mr, nr) }
}

/// Tile kernel on 4 x 8 repacked Q4_K (Q5_K: `Q5`) weights (see [`TileFn`]): pairs of
/// activation rows by `smmla` ([`group_mm`]), a lone one by `sdot` ([`group`]).
///
/// # Safety
///
/// As [`TileFn`]; `a` points to `mr / 4` groups of four Q4_K (Q5_K) rows repacked in 4 x 8.
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn packed_w8<const Q5: bool>(o: Operands, mr: usize, nr: usize) {
    // SAFETY: caller's contract.
    unsafe { tile::<8, Q5>(o, mr, nr) }
}

/// The kernel for repacked Q4_K / Q5_K weights with `word`-byte words (4: dotprod, 8: i8mm),
/// with its tile size (one group of four rows, four activation rows).
pub(super) fn packed_tile(word: usize, wt: DType) -> Option<(TileFn, usize, usize)> {
    let f: TileFn = match (word, wt) {
        (4, DType::Q4_K) => packed_w4::<false>,
        (4, DType::Q5_K) => packed_w4::<true>,
        (8, DType::Q4_K) => packed_w8::<false>,
        (8, DType::Q5_K) => packed_w8::<true>,
        _ => return None,
    };
    Some((f, ROWS, COLS))
}
