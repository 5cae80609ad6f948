//! The 4-bit non-linear quants IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of 256 with a
//! 6-bit scale per 32 values): each value is a scale times one of the 16 levels of
//! [`KVALUES_IQ4NL`].
//!
//! Quantization follows ggml's reference functions (`quantize_row_iq4_nl_ref` and
//! `quantize_row_iq4_xs_ref`, both through `quantize_row_iq4_nl_impl` without importance
//! weights) operation for operation in f32, so that the bytes are identical; dequantization
//! follows `dequantize_row_iq4_nl` / `dequantize_row_iq4_xs`.

// The loops index several arrays in lock step, exactly as ggml's code that they mirror.
#![allow(clippy::needless_range_loop)]

use super::blocks::{BlockIQ4NL, BlockIQ4XS, KVALUES_IQ4NL, QK4_NL, QK_K};
use super::kquant_helpers::{nearest_int, GROUP_MAX_EPS};
use super::{check_dequantize, check_quantize};
use crate::error::Result;
use half::f16;

/// Values per scale of both types.
const GROUP: usize = 32;

/// The index of the level of [`KVALUES_IQ4NL`] nearest to `x` (the upper one on ties), as
/// ggml's `best_index_int8`: a binary search over the sorted levels.
#[inline]
fn best_index(x: f32) -> u8 {
    let val = |i: usize| f32::from(KVALUES_IQ4NL[i]);
    if x <= val(0) {
        return 0;
    }
    if x >= val(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - val(mu - 1) < val(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The sums `sum(w q x)` and `sum(w q^2)` (with `w = x^2`) of the levels nearest to `id * x`.
#[inline]
fn weighted_sums(x: &[f32], id: f32) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for &v in x {
        let q = f32::from(KVALUES_IQ4NL[usize::from(best_index(id * v))]);
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The scale of one group of 32 values (ggml's per-block search in
/// `quantize_row_iq4_nl_impl`), with its level indices in `l` (from the first, unrefined
/// scale; `ntry` more scales are tried on each side when `ntry > 0`). `None` when the group is
/// all (near) zero, with `l` untouched.
fn group_scale(x: &[f32], l: &mut [u8], ntry: i32) -> Option<f32> {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return None;
    }
    let v0 = f32::from(KVALUES_IQ4NL[0]);
    let d = if ntry > 0 { -max / v0 } else { max / v0 };
    let id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (&v, lj) in x.iter().zip(l.iter_mut()) {
        *lj = best_index(id * v);
        let q = f32::from(KVALUES_IQ4NL[usize::from(*lj)]);
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        let id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        let (sumqx, sumq2) = weighted_sums(x, id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    Some(d)
}

/// Packs 32 level indices as Q4_0 packs its quants: value `j` in the low nibble of byte `j`,
/// value `j + 16` in its high nibble.
#[inline]
fn pack_nibbles(l: &[u8], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = l[j] | (l[j + 16] << 4);
    }
}

/// Quantizes `src` (a multiple of 32 values) to IQ4_NL blocks, byte-identical to ggml's
/// `quantize_row_iq4_nl_ref` (one scale search without extra tries). A block whose largest
/// magnitude is below `1e-15` gets `d = 0` and all-zero indices (ggml leaves its indices
/// unwritten there: the previous block's, or uninitialized memory for the first).
pub fn quantize_row_iq4_nl(src: &[f32], dst: &mut [BlockIQ4NL]) -> Result<()> {
    check_quantize::<BlockIQ4NL>("quantize_row_iq4_nl", src, dst.len())?;
    let mut l = [0u8; QK4_NL];
    for (x, y) in src.chunks_exact(QK4_NL).zip(dst.iter_mut()) {
        match group_scale(x, &mut l, -1) {
            Some(d) => {
                y.d = f16::from_f32(d);
                pack_nibbles(&l, &mut y.qs);
            }
            None => *y = BlockIQ4NL { d: f16::ZERO, qs: [0; QK4_NL / 2] },
        }
    }
    Ok(())
}

/// Quantizes `src` (a multiple of 256 values) to IQ4_XS blocks, byte-identical to ggml's
/// `quantize_row_iq4_xs_ref`: the scale of each 32 values searched with 7 tries on each side,
/// then expressed in 6 bits of a super-block scale `d = -max_scale / 32` and the indices
/// chosen again for the rounded scale.
pub fn quantize_row_iq4_xs(src: &[f32], dst: &mut [BlockIQ4XS]) -> Result<()> {
    check_quantize::<BlockIQ4XS>("quantize_row_iq4_xs", src, dst.len())?;
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; QK_K / GROUP];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let (mut max_scale, mut amax_scale) = (0f32, 0f32);
        for ib in 0..QK_K / GROUP {
            let xb = &x[GROUP * ib..GROUP * (ib + 1)];
            let d = group_scale(xb, &mut l[GROUP * ib..GROUP * (ib + 1)], 7).unwrap_or(0.0);
            scales[ib] = d;
            if d.abs() > amax_scale {
                amax_scale = d.abs();
                max_scale = d;
            }
        }
        let d = -max_scale / 32.0;
        y.d = f16::from_f32(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.scales_h = 0;
        y.scales_l = [0; QK_K / 64];
        for ib in 0..QK_K / GROUP {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = &x[GROUP * ib..GROUP * (ib + 1)];
            for (lj, &v) in l[GROUP * ib..GROUP * (ib + 1)].iter_mut().zip(xb) {
                *lj = best_index(idl * v);
            }
            let ls = (ls + 32) as u8;
            y.scales_l[ib / 2] |= (ls & 0x0f) << (4 * (ib % 2));
            y.scales_h |= u16::from(ls >> 4) << (2 * ib);
        }
        for ib in 0..QK_K / GROUP {
            pack_nibbles(&l[GROUP * ib..GROUP * (ib + 1)], &mut y.qs[16 * ib..16 * (ib + 1)]);
        }
    }
    Ok(())
}

/// Dequantizes IQ4_NL blocks into `dst` (`32 * src.len()` values), as ggml's
/// `dequantize_row_iq4_nl`.
pub fn dequantize_row_iq4_nl(src: &[BlockIQ4NL], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockIQ4NL>("dequantize_row_iq4_nl", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK4_NL)) {
        dequantize_group(b.d.to_f32(), &b.qs, y);
    }
    Ok(())
}

/// Dequantizes IQ4_XS blocks into `dst` (`256 * src.len()` values), as ggml's
/// `dequantize_row_iq4_xs`.
pub fn dequantize_row_iq4_xs(src: &[BlockIQ4XS], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockIQ4XS>("dequantize_row_iq4_xs", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (ib, yb) in y.chunks_exact_mut(GROUP).enumerate() {
            let dl = d * (i32::from(iq4_xs_scale(b, ib)) - 32) as f32;
            dequantize_group(dl, &b.qs[16 * ib..16 * (ib + 1)], yb);
        }
    }
    Ok(())
}

/// The stored 6-bit scale of group `ib` (0..8) of an IQ4_XS block (`ls`, meaning `ls - 32`).
#[inline]
pub fn iq4_xs_scale(b: &BlockIQ4XS, ib: usize) -> u8 {
    ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | ((((b.scales_h >> (2 * ib)) & 3) as u8) << 4)
}

/// `y[j] = d * level(value j)` for the 32 values packed in 16 bytes `qs`.
#[inline(always)]
fn dequantize_group(d: f32, qs: &[u8], y: &mut [f32]) {
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, y0), y1) in qs.iter().zip(lo).zip(hi) {
        *y0 = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
        *y1 = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::quant::blocks::Block;

    #[test]
    fn best_index_is_the_nearest_level() {
        for i in -140..=140 {
            let x = i as f32 + 0.25;
            let got = usize::from(best_index(x));
            let nearest = (0..16)
                .min_by(|&a, &b| {
                    let da = (x - f32::from(KVALUES_IQ4NL[a])).abs();
                    let db = (x - f32::from(KVALUES_IQ4NL[b])).abs();
                    da.partial_cmp(&db).unwrap()
                })
                .unwrap();
            assert_eq!(got, nearest, "{x}");
        }
        // On a tie between two levels (-10 and 1 meet at -4.5) the upper one.
        assert_eq!(best_index(-4.5), 8);
    }

    /// A block whose values are the 16 levels (twice) times 0.5: the first search finds
    /// `d = -0.5` (from the largest magnitude, -63.5) and every value its own level.
    #[test]
    fn iq4_nl_known_answer() {
        let x: Vec<f32> = (0..32).map(|j| 0.5 * f32::from(KVALUES_IQ4NL[(j * 7) % 16])).collect();
        let mut b = [BlockIQ4NL { d: f16::ZERO, qs: [0; 16] }];
        quantize_row_iq4_nl(&x, &mut b).unwrap();
        let mut y = [0f32; 32];
        dequantize_row_iq4_nl(&b, &mut y).unwrap();
        // d = max / -127 = -63.5 / -127, and each value's index is its level's.
        assert_eq!(b[0].d.to_f32(), 0.5);
        assert_eq!(&y[..], &x[..]);
        assert_eq!(b[0].qs[1], 7 | (((16 + 1) * 7 % 16) << 4) as u8);
    }

    /// IQ4_XS: a group scale is `d * (ls - 32)` with `ls` from the 6 bits split over
    /// `scales_l` and `scales_h`.
    #[test]
    fn iq4_xs_scales_and_round_trip() {
        let mut b =
            BlockIQ4XS { d: f16::from_f32(0.25), scales_h: 0, scales_l: [0; 4], qs: [0; 128] };
        // Group g gets ls = 32 + g - 3 (g = 0 -> 29 .. g = 7 -> 36): low nibbles and high bits.
        for g in 0..8 {
            let ls = (29 + g) as u8;
            b.scales_l[g / 2] |= (ls & 0x0f) << (4 * (g % 2));
            b.scales_h |= u16::from(ls >> 4) << (2 * g);
        }
        b.qs.fill(0x8f); // low nibble level 113, high nibble level 1
        let mut y = [0f32; 256];
        dequantize_row_iq4_xs(&[b], &mut y).unwrap();
        for g in 0..8 {
            assert_eq!(iq4_xs_scale(&b, g), (29 + g) as u8);
            let dl = 0.25 * (g as f32 - 3.0);
            assert_eq!(y[32 * g], dl * 113.0, "group {g}");
            assert_eq!(y[32 * g + 16], dl, "group {g}");
        }
        // Quantizing the dequantized values finds scales and levels that reproduce them.
        let x: Vec<f32> = (0..256).map(|i| ((i * 37) % 29) as f32 - 14.0).collect();
        let mut q = [BlockIQ4XS::ZERO];
        quantize_row_iq4_xs(&x, &mut q).unwrap();
        dequantize_row_iq4_xs(&q, &mut y).unwrap();
        let err = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err < 1.5, "max error {err}");
    }

    #[test]
    fn all_zero_blocks() {
        let x = [0f32; 256];
        let mut b = [BlockIQ4NL { d: f16::ONE, qs: [0x55; 16] }; 8];
        quantize_row_iq4_nl(&x, &mut b).unwrap();
        assert!(b.iter().all(|b| b.d.to_bits() == 0 && b.qs == [0; 16]));
        let mut q = [BlockIQ4XS::ZERO];
        quantize_row_iq4_xs(&x, &mut q).unwrap();
        let mut y = [1f32; 256];
        dequantize_row_iq4_xs(&q, &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn bad_lengths_are_errors() {
        let x = [0f32; 40];
        let mut b = [BlockIQ4NL { d: f16::ZERO, qs: [0; 16] }; 2];
        assert!(matches!(quantize_row_iq4_nl(&x, &mut b), Err(Error::BlockAlignment { .. })));
        assert!(matches!(quantize_row_iq4_nl(&x[..32], &mut b), Err(Error::DataLength { .. })));
        let mut q = [BlockIQ4XS::ZERO];
        assert!(matches!(quantize_row_iq4_xs(&x, &mut q), Err(Error::BlockAlignment { .. })));
        let mut y = [0f32; 512];
        assert!(matches!(dequantize_row_iq4_xs(&q, &mut y), Err(Error::DataLength { .. })));
    }
}
