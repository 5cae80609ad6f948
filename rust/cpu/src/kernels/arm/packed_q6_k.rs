//! Repacked Q6_K on the dotprod (4 x 4, [`PackLayout::R4W4`]) and i8mm (4 x 8,
//! [`PackLayout::R4W8`]) tiers, times plain Q8_K activation rows.
//!
//! Per block of 256 values a group of four rows holds the four `d`, the 16 signed scale bytes
//! byte-planar (byte `s` of the four rows at `8 + 4 s`), then per half (128 values) the rows'
//! 64 `ql` bytes in words, then their 32 `qh` bytes in words. Slot `i` of a half (16-byte
//! registers `i` and `8 + i` of its `ql`, `i` of its `qh`) holds the same value positions of the
//! same rows in all three, so the four 6-bit values of each position are rebuilt by byte-vector
//! operations whatever the word size (eight per slot: `sli` / `sri` merge the two `qh` bits
//! under the nibble). The quants are used as 0..63; the offset 32 goes through Q8_K's `bsums`
//! (`32 * sum(scale * bsum)`, once per block and activation row); the scale of each group of 16
//! values is a vector of the four rows, loaded where it is used (three instructions: the 16
//! scale vectors of a block kept live spilled).
//!
//! A block is read as four quarters (half `n`, `h`: slots `4 h..4 h + 4`), each the 16 weight
//! registers of four groups of 16 values (`2 m + h` of the half, `m` in 0..4), used for every
//! activation row of the call before the next quarter is built. Dotprod: `sdot` by element
//! (slot `e` of a quarter is word `e` of the group's activation). I8mm tier: pairs of
//! activation rows by `smmla` (slots `e`, `e + 2`: rows 0, 1 / 2, 3 of the group's 8-byte words
//! 0, 1, by the two activation rows' word, zipped from two 16-byte loads); a lone activation row
//! by `sdot` on the 8-byte word duplicated (`dup`), `addp` of the two row pairs.
//!
//! [`PackLayout::R4W4`]: crate::kernels::repack::PackLayout::R4W4
//! [`PackLayout::R4W8`]: crate::kernels::repack::PackLayout::R4W8
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::packed_k::{act_block_pairs, act_blocks, for_each_run, scaled, store, COLS, ROWS};
use super::{f16x4_at, sdot, sdot_lane, smmla};
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

/// The 16 weight registers of quarter `h` of the half block at `base`: `v[e][m]` is part `m`
/// (values `32 m` on) of slot `4 h + e`, the 6-bit quants 0..63.
///
/// # Safety
///
/// `base` points to the 384 bytes of a half block's quants in a group.
#[inline(always)]
unsafe fn quarter(base: *const u8, h: usize) -> [[int8x16_t; 4]; 4] {
    // SAFETY: slot `4 h + e` of the half (caller's contract); NEON is part of every aarch64
    // target this crate builds for.
    unsafe {
        let (m3, m30) = (vdupq_n_u8(0x03), vdupq_n_u8(0x30));
        std::array::from_fn(|e| {
            let i = 4 * h + e;
            let l0 = vld1q_u8(base.add(16 * i));
            let l1 = vld1q_u8(base.add(16 * (8 + i)));
            let hb = vld1q_u8(base.add(256 + 16 * i));
            let h2 = vshrq_n_u8::<2>(hb);
            // Low nibbles with qh bits 0, 1 (2, 3) above them (`sli` keeps the low four bits);
            // high nibbles under qh bits 4, 5 (6, 7) (`sri` keeps the high four).
            let parts = [
                vsliq_n_u8::<4>(l0, vandq_u8(hb, m3)),
                vsliq_n_u8::<4>(l1, vandq_u8(h2, m3)),
                vsriq_n_u8::<4>(vandq_u8(hb, m30), l0),
                vsriq_n_u8::<4>(h2, l1),
            ];
            [0, 1, 2, 3].map(|m| vreinterpretq_s8_u8(parts[m]))
        })
    }
}

/// `p` as an opaque value that depends on `dep` (an empty `asm!`): loads through it wait for
/// `dep`. Between the quarters of a block, with `dep` the last activation row's sum so far, it
/// keeps LLVM from hoisting the next quarter's loads into this one (interleaved, the quarters'
/// weight registers spilled).
#[inline(always)]
// The asm does not read through the pointer: it only hands it back.
#[allow(clippy::pointers_in_nomem_asm_block)]
fn after(p: *const u8, dep: int32x4_t) -> *const u8 {
    let mut p = p;
    // SAFETY: an empty asm statement (a comment naming its operands): no instruction, `p`
    // comes back unchanged.
    unsafe {
        std::arch::asm!("// {p} {dep:v}", p = inout(reg) p, dep = in(vreg) dep,
             options(pure, nomem, nostack, preserves_flags))
    };
    p
}

/// The four rows' scales of group `gi` (0..16) of the group block at `g` as i32 lanes.
///
/// # Safety
///
/// `g` points to a group block.
#[inline(always)]
unsafe fn scale(g: *const u8, gi: usize) -> int32x4_t {
    // SAFETY: the four scale bytes of group gi (caller's contract).
    unsafe {
        let s = vdup_n_s32(std::ptr::read_unaligned(g.add(SCALES + 4 * gi).cast::<i32>()));
        vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(s))))
    }
}

/// The four rows' scales of group `gi` laid out as `smmla`'s 2 x 2 tiles: `[r0, r0, r1, r1]`
/// and `[r2, r2, r3, r3]`.
///
/// # Safety
///
/// `g` points to a group block.
#[inline(always)]
unsafe fn scale_pairs(g: *const u8, gi: usize) -> (int32x4_t, int32x4_t) {
    // SAFETY: the four scale bytes of group gi (caller's contract).
    unsafe {
        let s = std::ptr::read_unaligned(g.add(SCALES + 4 * gi).cast::<i32>());
        let s = vreinterpret_s8_s32(vdup_n_s32(s));
        let w = vmovl_s8(vzip1_s8(s, s));
        (vmovl_s16(vget_low_s16(w)), vmovl_high_s16(w))
    }
}

/// The block's 16 scales as i16 for the offset (vector `t`, lanes `4 h + r`: group `2 t + h`).
///
/// # Safety
///
/// `g` points to a group block.
#[inline(always)]
unsafe fn scales16(g: *const u8) -> [int16x8_t; 8] {
    // SAFETY: the 64 scale bytes (caller's contract).
    unsafe {
        let mut sc16 = [vdupq_n_s16(0); 8];
        for q in 0..4 {
            let v = vld1q_s8(g.add(SCALES + 16 * q).cast());
            sc16[2 * q] = vmovl_s8(vget_low_s8(v));
            sc16[2 * q + 1] = vmovl_high_s8(v);
        }
        sc16
    }
}

/// The offset's share of a block: `32 * sum over groups of scale * bsum` of the Q8_K block at
/// `y` (lanes: rows).
///
/// # Safety
///
/// `y` points to a readable Q8_K block.
#[inline(always)]
unsafe fn offset(sc16: &[int16x8_t; 8], y: *const u8) -> int32x4_t {
    // SAFETY: the 32 bytes of `bsums` are in the block (caller's contract).
    unsafe {
        let bs = vld1q_s16_x2(y.add(q8_k::BSUMS).cast::<i16>());
        let (b0, b1) = (bs.0, bs.1);
        macro_rules! off {
            ($o:expr, $t:literal, $bv:expr, $l0:literal, $l1:literal) => {{
                let o = vmlal_laneq_s16::<$l0>($o, vget_low_s16(sc16[$t]), $bv);
                vmlal_laneq_s16::<$l1>(o, vget_high_s16(sc16[$t]), $bv)
            }};
        }
        let o = vmull_laneq_s16::<0>(vget_low_s16(sc16[0]), b0);
        let o = vmlal_laneq_s16::<1>(o, vget_high_s16(sc16[0]), b0);
        let o = off!(o, 1, b0, 2, 3);
        let o = off!(o, 2, b0, 4, 5);
        let o = off!(o, 3, b0, 6, 7);
        let o = off!(o, 4, b1, 0, 1);
        let o = off!(o, 5, b1, 2, 3);
        let o = off!(o, 6, b1, 4, 5);
        let o = off!(o, 7, b1, 6, 7);
        vshlq_n_s32::<5>(o)
    }
}

/// Group `gi` (`8 n + 2 m + h`) of a block against `NR` activation blocks `ys` with `sdot`:
/// `isum[j]` gains the four rows' sums of its 16 values (the weights `v[e][m]` of quarter `h`
/// of half `n`) times their scales.
///
/// # Safety
///
/// The CPU supports dotprod (the caller is compiled with it); `g` points to a group block with
/// `W`-byte words, `ys` to readable Q8_K blocks.
#[inline(always)]
unsafe fn dot_group<const NR: usize, const W: usize>(
    v: &[[int8x16_t; 4]; 4],
    m: usize,
    g: *const u8,
    gi: usize,
    ys: &[*const u8; NR],
    isum: &mut [int32x4_t; NR],
) {
    // SAFETY: the group's scales and the activation blocks' quants (caller's contract).
    unsafe {
        let sc = scale(g, gi);
        for j in 0..NR {
            let y = ys[j].add(q8_k::QS + 16 * gi);
            let s = if W == 4 {
                let y = vld1q_s8(y.cast());
                let s = sdot_lane!(vdupq_n_s32(0), v[0][m], y, 0);
                let s = sdot_lane!(s, v[1][m], y, 1);
                let s = sdot_lane!(s, v[2][m], y, 2);
                sdot_lane!(s, v[3][m], y, 3)
            } else {
                // Slots 0, 2: rows 0, 1 of words 0, 1; slots 1, 3: rows 2, 3.
                // One 16-byte load (an immediate offset) and two `dup`s: `ld1r` takes no
                // offset, each one counted an `add` for its address.
                let y = vld1q_s64(y.cast());
                let y0 = vreinterpretq_s8_s64(vdupq_laneq_s64::<0>(y));
                let y1 = vreinterpretq_s8_s64(vdupq_laneq_s64::<1>(y));
                let s01 = sdot!(sdot!(vdupq_n_s32(0), v[0][m], y0), v[2][m], y1);
                let s23 = sdot!(sdot!(vdupq_n_s32(0), v[1][m], y0), v[3][m], y1);
                vpaddq_s32(s01, s23)
            };
            isum[j] = vmlaq_s32(isum[j], s, sc);
        }
    }
}

/// Quarter `h` of half `n` of the group block at `g` against `NR` activation blocks with
/// `sdot` (its four groups, unrolled).
///
/// # Safety
///
/// As [`dot_group`].
#[inline(always)]
unsafe fn dot_quarter<const NR: usize, const W: usize>(
    g: *const u8,
    n: usize,
    h: usize,
    ys: &[*const u8; NR],
    isum: &mut [int32x4_t; NR],
) {
    // SAFETY: the half's quants (caller's contract).
    unsafe {
        let v = quarter(g.add(QS + HALF * n), h);
        dot_group::<NR, W>(&v, 0, g, 8 * n + h, ys, isum);
        dot_group::<NR, W>(&v, 1, g, 8 * n + 2 + h, ys, isum);
        dot_group::<NR, W>(&v, 2, g, 8 * n + 4 + h, ys, isum);
        dot_group::<NR, W>(&v, 3, g, 8 * n + 6 + h, ys, isum);
    }
}

/// One group of four repacked Q6_K rows (words of `W` bytes: 4 or 8) times `NR` Q8_K
/// activation rows with `sdot`.
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
        let mut acc = [vdupq_n_f32(0.0); NR];
        for blk in 0..k / 256 {
            let g = a.add(blk * GBLOCK);
            let ys: [*const u8; NR] = act_blocks(b, ldb, blk);
            let mut isum = [vdupq_n_s32(0); NR];
            // Unrolled by hand (as a loop, the address arithmetic counted); each quarter's
            // loads after the previous quarter's sums (see `after`).
            dot_quarter::<NR, W>(g, 0, 0, &ys, &mut isum);
            let (g1, ys1) = (after(g, isum[NR - 1]), ys.map(|y| after(y, isum[NR - 1])));
            dot_quarter::<NR, W>(g1, 0, 1, &ys1, &mut isum);
            let (g2, ys2) = (after(g, isum[NR - 1]), ys.map(|y| after(y, isum[NR - 1])));
            dot_quarter::<NR, W>(g2, 1, 0, &ys2, &mut isum);
            let (g3, ys3) = (after(g, isum[NR - 1]), ys.map(|y| after(y, isum[NR - 1])));
            dot_quarter::<NR, W>(g3, 1, 1, &ys3, &mut isum);
            let d = f16x4_at(g);
            let sc16 = scales16(g);
            for j in 0..NR {
                let o = offset(&sc16, ys[j]);
                acc[j] = scaled(acc[j], vsubq_s32(isum[j], o), d, ys[j]);
            }
        }
        store(c, ldc, &acc);
    }
}

/// Group `gi` (`8 n + 2 m + h`) of a block against `NP` pairs of activation blocks with
/// `smmla`: `isum[p]` gains the 2 x 2 tiles of rows 0, 1 and rows 2, 3 times the scales.
///
/// # Safety
///
/// The CPU supports i8mm (the caller is compiled with it); `g` points to a group block in
/// 4 x 8, `ys` to readable Q8_K blocks.
#[inline(always)]
unsafe fn mm_group<const NP: usize>(
    v: &[[int8x16_t; 4]; 4],
    m: usize,
    g: *const u8,
    gi: usize,
    ys: &[[*const u8; 2]; NP],
    isum: &mut [[int32x4_t; 2]; NP],
) {
    // SAFETY: the group's scales and the activation blocks' quants (caller's contract).
    unsafe {
        let (s01, s23) = scale_pairs(g, gi);
        for p in 0..NP {
            let y0 = vld1q_s64(ys[p][0].add(q8_k::QS + 16 * gi).cast());
            let y1 = vld1q_s64(ys[p][1].add(q8_k::QS + 16 * gi).cast());
            let t0 = vreinterpretq_s8_s64(vzip1q_s64(y0, y1));
            let t1 = vreinterpretq_s8_s64(vzip2q_s64(y0, y1));
            let m01 = smmla!(smmla!(vdupq_n_s32(0), v[0][m], t0), v[2][m], t1);
            let m23 = smmla!(smmla!(vdupq_n_s32(0), v[1][m], t0), v[3][m], t1);
            isum[p][0] = vmlaq_s32(isum[p][0], m01, s01);
            isum[p][1] = vmlaq_s32(isum[p][1], m23, s23);
        }
    }
}

/// Quarter `h` of half `n` of the group block at `g` against `NP` pairs of activation blocks
/// with `smmla` (its four groups, unrolled).
///
/// # Safety
///
/// As [`mm_group`].
#[inline(always)]
unsafe fn mm_quarter<const NP: usize>(
    g: *const u8,
    n: usize,
    h: usize,
    ys: &[[*const u8; 2]; NP],
    isum: &mut [[int32x4_t; 2]; NP],
) {
    // SAFETY: the half's quants (caller's contract).
    unsafe {
        let v = quarter(g.add(QS + HALF * n), h);
        mm_group::<NP>(&v, 0, g, 8 * n + h, ys, isum);
        mm_group::<NP>(&v, 1, g, 8 * n + 2 + h, ys, isum);
        mm_group::<NP>(&v, 2, g, 8 * n + 4 + h, ys, isum);
        mm_group::<NP>(&v, 3, g, 8 * n + 6 + h, ys, isum);
    }
}

/// One group of four Q6_K rows repacked in 4 x 8 times `NP` pairs of Q8_K activation rows with
/// `smmla`: the operand of a pair is word `t` (8 bytes) of a group of 16 values of both rows
/// (zipped from one 16-byte load of each), its products with rows 0, 1 and rows 2, 3 are 2 x 2
/// tiles, times the rows' scales laid out to match, unzipped into the two columns once per
/// block.
///
/// # Safety
///
/// The CPU supports i8mm; `a` is a group of four Q6_K rows of `k` values repacked in 4 x 8;
/// `b + j * ldb` (`j < 2 NP`) are Q8_K rows of `k` values; `c + j * ldc .. + 4` are writable.
#[target_feature(enable = "neon,i8mm")]
unsafe fn group_mm<const NP: usize>(
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
            let g = a.add(blk * GBLOCK);
            let ys = act_block_pairs::<NP>(b, ldb, blk);
            // isum[p]: [r0 c0, r0 c1, r1 c0, r1 c1] and the same for rows 2, 3.
            let mut isum = [[vdupq_n_s32(0); 2]; NP];
            // Unrolled by hand; each quarter's loads after the previous quarter's sums.
            let dep = |isum: &[[int32x4_t; 2]; NP]| isum[NP - 1][1];
            mm_quarter::<NP>(g, 0, 0, &ys, &mut isum);
            let (g1, ys1) = (after(g, dep(&isum)), ys.map(|y| y.map(|y| after(y, dep(&isum)))));
            mm_quarter::<NP>(g1, 0, 1, &ys1, &mut isum);
            let (g2, ys2) = (after(g, dep(&isum)), ys.map(|y| y.map(|y| after(y, dep(&isum)))));
            mm_quarter::<NP>(g2, 1, 0, &ys2, &mut isum);
            let (g3, ys3) = (after(g, dep(&isum)), ys.map(|y| y.map(|y| after(y, dep(&isum)))));
            mm_quarter::<NP>(g3, 1, 1, &ys3, &mut isum);
            let d = f16x4_at(g);
            let sc16 = scales16(g);
            for p in 0..NP {
                let cols = [vuzp1q_s32(isum[p][0], isum[p][1]), vuzp2q_s32(isum[p][0], isum[p][1])];
                for h in 0..2 {
                    let y = ys[p][h];
                    let o = offset(&sc16, y);
                    acc[p][h] = scaled(acc[p][h], vsubq_s32(cols[h], o), d, y);
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
/// As [`TileFn`]; the CPU supports dotprod (and i8mm for `W` = 8); `a` points to `mr / 4`
/// consecutive groups of four Q6_K rows repacked with `W`-byte words.
#[inline(always)]
unsafe fn tile<const W: usize>(o: Operands, mr: usize, nr: usize) {
    // SAFETY: each run is a group of the tile and up to four of its columns (caller's
    // contract).
    unsafe {
        for_each_run(o, mr, nr, |u, n| {
            if W == 8 && n >= 2 {
                // Pairs of columns by `smmla`, a third one by `sdot`.
                if n == 4 {
                    group_mm::<2>(u.k, u.a, u.b, u.ldb, u.c, u.ldc);
                } else {
                    group_mm::<1>(u.k, u.a, u.b, u.ldb, u.c, u.ldc);
                }
                if n == 3 {
                    let v = u.at(0, 2);
                    group::<1, W>(v.k, v.a, v.b, v.ldb, v.c, v.ldc);
                }
                return;
            }
            match n {
                4 => group::<4, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                3 => group::<3, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                2 => group::<2, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
                _ => group::<1, W>(u.k, u.a, u.b, u.ldb, u.c, u.ldc),
            }
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

/// Tile kernel on 4 x 8 repacked Q6_K weights (see [`TileFn`]): pairs of activation rows by
/// `smmla` ([`group_mm`]), a lone one by `sdot` ([`group`]).
///
/// # Safety
///
/// As [`TileFn`]; `a` points to `mr / 4` groups of four Q6_K rows repacked in 4 x 8.
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn packed_q6_k_w8(o: Operands, mr: usize, nr: usize) {
    // SAFETY: caller's contract.
    unsafe { tile::<8>(o, mr, nr) }
}

/// The kernel for repacked Q6_K weights with `word`-byte words (4: dotprod, 8: i8mm), with its
/// tile size (one group of four rows, four activation rows).
pub(super) fn packed_tile(word: usize, wt: DType) -> Option<(TileFn, usize, usize)> {
    let f: TileFn = match (word, wt) {
        (4, DType::Q6_K) => packed_q6_k_w4,
        (8, DType::Q6_K) => packed_q6_k_w8,
        _ => return None,
    };
    Some((f, ROWS, COLS))
}
