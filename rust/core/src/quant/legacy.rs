//! The 32-value block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.
//!
//! Quantization follows ggml's reference functions (`quantize_row_*_ref` in `ggml-quants.c`)
//! operation for operation in f32, so that the bytes are identical; dequantization follows
//! `dequantize_row_*`.
//!
//! Q8_0 and Q8_1 are the activation types of the CPU matmul: their quantizers allocate nothing
//! and are written so that the compiler can vectorize the hot loops.

use super::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK4_0, QK4_1, QK5_0, QK5_1,
    QK8_0, QK8_1,
};
use super::kquant_helpers::nearest_int;
use super::{check_dequantize, check_quantize};
use crate::error::Result;
use half::f16;

/// Largest absolute value of `x` (0 for an empty slice), as ggml's `MAX(amax, fabsf(v))` loop.
#[inline]
pub(crate) fn abs_max(x: &[f32]) -> f32 {
    // Eight independent lanes so that the loop vectorizes; max is order-independent.
    let mut lanes = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(c) {
            let a = v.abs();
            *m = if *m > a { *m } else { a };
        }
    }
    let mut amax = 0f32;
    for a in lanes.iter().copied().chain(chunks.remainder().iter().map(|v| v.abs())) {
        amax = if amax > a { amax } else { a };
    }
    amax
}

/// The value of largest magnitude (the first one on ties) and that magnitude, as ggml's
/// `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }` loop.
#[inline]
pub(crate) fn signed_abs_max(x: &[f32]) -> (f32, f32) {
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Minimum and maximum of `x`, starting from (`f32::MAX`, `-f32::MAX`) as ggml does.
#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `roundf`: round half away from zero, to an integer. Exact for |v| <= 4194303 (checked
/// exhaustively against `f32::round` over that range), which covers every use here (|v| is at
/// most 127.5); meaningless beyond, 0 for NaN, never a panic. Built on ggml's magic-number
/// [`nearest_int`] (ties to even) plus a tie fix-up, so that it vectorizes without a libm call.
#[inline(always)]
pub(crate) fn round_half_away(v: f32) -> i32 {
    let a = v.abs();
    let r = nearest_int(a);
    // a - r is exact here; a tie that nearest_int rounded down (to even) goes up instead.
    let r = r + i32::from(a - r as f32 == 0.5);
    if v < 0.0 {
        -r
    } else {
        r
    }
}

/// Reciprocal of a scale, or 0 for a zero scale (ggml's `d ? 1.0f/d : 0.0f`).
#[inline(always)]
fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Quantizes `src` (a multiple of 32 values) to Q4_0 blocks, byte-identical to ggml's
/// `quantize_row_q4_0_ref`. `dst` must hold exactly `src.len() / 32` blocks.
pub fn quantize_row_q4_0(src: &[f32], dst: &mut [BlockQ4_0]) -> Result<()> {
    check_quantize::<BlockQ4_0>("quantize_row_q4_0", src, dst.len())?;
    for (x, y) in src.chunks_exact(QK4_0).zip(dst.iter_mut()) {
        let (max, _) = signed_abs_max(x);
        let d = max / -8.0;
        let id = inv(d);
        y.d = f16::from_f32(d);
        let (lo, hi) = x.split_at(QK4_0 / 2);
        for ((q, &x0), &x1) in y.qs.iter_mut().zip(lo).zip(hi) {
            let xi0 = ((x0 * id + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 * id + 8.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
    }
    Ok(())
}

/// Dequantizes Q4_0 blocks into `dst` (`32 * src.len()` values), as ggml's
/// `dequantize_row_q4_0`.
pub fn dequantize_row_q4_0(src: &[BlockQ4_0], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ4_0>("dequantize_row_q4_0", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK4_0)) {
        let d = b.d.to_f32();
        let (lo, hi) = y.split_at_mut(QK4_0 / 2);
        for ((&q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
            *y0 = ((q & 0x0f) as i32 - 8) as f32 * d;
            *y1 = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
    Ok(())
}

/// Quantizes `src` to Q4_1 blocks, byte-identical to ggml's `quantize_row_q4_1_ref`.
pub fn quantize_row_q4_1(src: &[f32], dst: &mut [BlockQ4_1]) -> Result<()> {
    check_quantize::<BlockQ4_1>("quantize_row_q4_1", src, dst.len())?;
    for (x, y) in src.chunks_exact(QK4_1).zip(dst.iter_mut()) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        y.d = f16::from_f32(d);
        y.m = f16::from_f32(min);
        let (lo, hi) = x.split_at(QK4_1 / 2);
        for ((q, &x0), &x1) in y.qs.iter_mut().zip(lo).zip(hi) {
            let xi0 = (((x0 - min) * id + 0.5) as i8).min(15) as u8;
            let xi1 = (((x1 - min) * id + 0.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
    }
    Ok(())
}

/// Dequantizes Q4_1 blocks, as ggml's `dequantize_row_q4_1`.
pub fn dequantize_row_q4_1(src: &[BlockQ4_1], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ4_1>("dequantize_row_q4_1", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK4_1)) {
        let d = b.d.to_f32();
        let m = b.m.to_f32();
        let (lo, hi) = y.split_at_mut(QK4_1 / 2);
        for ((&q, y0), y1) in b.qs.iter().zip(lo).zip(hi) {
            *y0 = (q & 0x0f) as f32 * d + m;
            *y1 = (q >> 4) as f32 * d + m;
        }
    }
    Ok(())
}

/// Packs 32 five-bit quants: low nibbles into `qs` (value `j` low, `j + 16` high), fifth bits
/// into the little-endian u32 `qh` (bit `j` for value `j`).
#[inline]
fn pack_q5(l: &[u8], qs: &mut [u8; 16], qh: &mut [u8; 4]) {
    let mut h = 0u32;
    for j in 0..16 {
        let (xi0, xi1) = (l[j], l[j + 16]);
        qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
        h |= u32::from((xi0 & 0x10) >> 4) << j;
        h |= u32::from((xi1 & 0x10) >> 4) << (j + 16);
    }
    *qh = h.to_le_bytes();
}

/// Unpacks the 5-bit quant `j` (0..32) of a Q5 block.
#[inline(always)]
fn unpack_q5(qs: &[u8; 16], qh: u32, j: usize) -> i32 {
    let (nibble, high) =
        if j < 16 { (qs[j] & 0x0f, (qh >> j) & 1) } else { (qs[j - 16] >> 4, (qh >> j) & 1) };
    i32::from(nibble) | ((high as i32) << 4)
}

/// Quantizes `src` to Q5_0 blocks, byte-identical to ggml's `quantize_row_q5_0_ref`.
pub fn quantize_row_q5_0(src: &[f32], dst: &mut [BlockQ5_0]) -> Result<()> {
    check_quantize::<BlockQ5_0>("quantize_row_q5_0", src, dst.len())?;
    let mut l = [0u8; QK5_0];
    for (x, y) in src.chunks_exact(QK5_0).zip(dst.iter_mut()) {
        let (max, _) = signed_abs_max(x);
        let d = max / -16.0;
        let id = inv(d);
        y.d = f16::from_f32(d);
        for (q, &v) in l.iter_mut().zip(x) {
            *q = ((v * id + 16.5) as i8).min(31) as u8;
        }
        pack_q5(&l, &mut y.qs, &mut y.qh);
    }
    Ok(())
}

/// Dequantizes Q5_0 blocks, as ggml's `dequantize_row_q5_0`.
pub fn dequantize_row_q5_0(src: &[BlockQ5_0], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ5_0>("dequantize_row_q5_0", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK5_0)) {
        let d = b.d.to_f32();
        let qh = u32::from_le_bytes(b.qh);
        for (j, v) in y.iter_mut().enumerate() {
            *v = (unpack_q5(&b.qs, qh, j) - 16) as f32 * d;
        }
    }
    Ok(())
}

/// Quantizes `src` to Q5_1 blocks, byte-identical to ggml's `quantize_row_q5_1_ref`.
pub fn quantize_row_q5_1(src: &[f32], dst: &mut [BlockQ5_1]) -> Result<()> {
    check_quantize::<BlockQ5_1>("quantize_row_q5_1", src, dst.len())?;
    let mut l = [0u8; QK5_1];
    for (x, y) in src.chunks_exact(QK5_1).zip(dst.iter_mut()) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        y.d = f16::from_f32(d);
        y.m = f16::from_f32(min);
        for (q, &v) in l.iter_mut().zip(x) {
            // ggml converts to uint8_t without a clamp; the value is at most 31.5 here.
            *q = ((v - min) * id + 0.5) as u8;
        }
        pack_q5(&l, &mut y.qs, &mut y.qh);
    }
    Ok(())
}

/// Dequantizes Q5_1 blocks, as ggml's `dequantize_row_q5_1`.
pub fn dequantize_row_q5_1(src: &[BlockQ5_1], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ5_1>("dequantize_row_q5_1", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK5_1)) {
        let d = b.d.to_f32();
        let m = b.m.to_f32();
        let qh = u32::from_le_bytes(b.qh);
        for (j, v) in y.iter_mut().enumerate() {
            *v = unpack_q5(&b.qs, qh, j) as f32 * d + m;
        }
    }
    Ok(())
}

/// Quantizes one block of 32 values to 8 bits with `d = amax / 127`; returns the f32 scale and
/// the sum of the quants.
#[inline(always)]
fn quantize_q8_block(x: &[f32], qs: &mut [i8; 32]) -> (f32, i32) {
    let amax = abs_max(x);
    let d = amax / 127.0;
    let id = inv(d);
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let r = round_half_away(v * id);
        *q = r as i8;
        sum += r;
    }
    (d, sum)
}

/// Quantizes `src` to Q8_0 blocks, byte-identical to ggml's `quantize_row_q8_0_ref`.
///
/// This is the activation quantizer for Q4_0, Q5_0 and Q8_0 weights: no allocation, vectorizable.
pub fn quantize_row_q8_0(src: &[f32], dst: &mut [BlockQ8_0]) -> Result<()> {
    check_quantize::<BlockQ8_0>("quantize_row_q8_0", src, dst.len())?;
    for (x, y) in src.chunks_exact(QK8_0).zip(dst.iter_mut()) {
        let (d, _) = quantize_q8_block(x, &mut y.qs);
        y.d = f16::from_f32(d);
    }
    Ok(())
}

/// Dequantizes Q8_0 blocks, as ggml's `dequantize_row_q8_0`.
pub fn dequantize_row_q8_0(src: &[BlockQ8_0], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ8_0>("dequantize_row_q8_0", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK8_0)) {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = f32::from(q) * d;
        }
    }
    Ok(())
}

/// Quantizes `src` to Q8_1 blocks, byte-identical to ggml's `quantize_row_q8_1_ref`: the same
/// `d` and `qs` as Q8_0, plus `s = f16(d * sum(qs))` (with the f32 `d`, before rounding to f16).
///
/// This is the activation quantizer for Q4_1 and Q5_1 weights: no allocation, vectorizable.
pub fn quantize_row_q8_1(src: &[f32], dst: &mut [BlockQ8_1]) -> Result<()> {
    check_quantize::<BlockQ8_1>("quantize_row_q8_1", src, dst.len())?;
    for (x, y) in src.chunks_exact(QK8_1).zip(dst.iter_mut()) {
        let (d, sum) = quantize_q8_block(x, &mut y.qs);
        y.d = f16::from_f32(d);
        y.s = f16::from_f32(sum as f32 * d);
    }
    Ok(())
}

/// Dequantizes Q8_1 blocks as `d * q` (ggml itself has no Q8_1 dequantizer; `s` is not needed).
pub fn dequantize_row_q8_1(src: &[BlockQ8_1], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ8_1>("dequantize_row_q8_1", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK8_1)) {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = f32::from(q) * d;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn round_half_away_matches_roundf() {
        for &(v, r) in &[
            (0.5f32, 1),
            (-0.5, -1),
            (1.5, 2),
            (2.5, 3),
            (-2.5, -3),
            (0.49999997, 0),
            (-0.49999997, 0),
            (126.5, 127),
            (-127.0, -127),
            (0.0, 0),
            (-0.0, 0),
            (4_194_302.5, 4_194_303),
            (-4_194_302.5, -4_194_303),
        ] {
            assert_eq!(round_half_away(v), r, "{v}");
            assert_eq!(round_half_away(v), v.round() as i32, "{v}");
        }
        assert_eq!(round_half_away(f32::NAN), 0);
        let mut s = 1u32;
        for _ in 0..100_000 {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let v = (s as f32 / u32::MAX as f32 - 0.5) * 300.0;
            assert_eq!(round_half_away(v), v.round() as i32, "{v}");
        }
    }

    /// Hand-computed Q4_0 block: the largest magnitude is -8, so d = 1 and q = x + 8.
    #[test]
    fn q4_0_known_answer() {
        let mut x = [0f32; 32];
        for (j, v) in x.iter_mut().enumerate() {
            // -8, -7, ..., 7, then 0.4, -0.6, 2.5, ...
            *v = if j < 16 { j as f32 - 8.0 } else { [0.4, -0.6, 2.5, -3.5][j % 4] };
        }
        let mut b = [BlockQ4_0 { d: f16::ZERO, qs: [0; 16] }];
        quantize_row_q4_0(&x, &mut b).unwrap();
        // max = -8 -> d = -8 / -8 = 1, id = 1.
        assert_eq!(b[0].d.to_f32(), 1.0);
        // Low nibbles: x + 8.5 truncated = 0..15. High nibbles for j = 16..32 cycle through
        // 0.4 -> 8, -0.6 -> 7 (7.9 truncated), 2.5 -> 11, -3.5 -> 5.
        let hi = [8u8, 7, 11, 5];
        for j in 0..16 {
            assert_eq!(b[0].qs[j], j as u8 | (hi[j % 4] << 4), "byte {j}");
        }
        let mut y = [0f32; 32];
        dequantize_row_q4_0(&b, &mut y).unwrap();
        for j in 0..16 {
            assert_eq!(y[j], j as f32 - 8.0);
            assert_eq!(y[16 + j], [0.0, -1.0, 3.0, -3.0][j % 4]);
        }
    }

    /// A block whose largest magnitude is positive: d is negative, so the order flips.
    #[test]
    fn q4_0_positive_max_flips_sign() {
        let mut x = [0f32; 32];
        x[0] = 16.0;
        x[1] = -16.0 + 2.0;
        let mut b = [BlockQ4_0 { d: f16::ZERO, qs: [0; 16] }];
        quantize_row_q4_0(&x, &mut b).unwrap();
        assert_eq!(b[0].d.to_f32(), -2.0);
        // 16 * -0.5 + 8.5 = 0.5 -> 0; -14 * -0.5 + 8.5 = 15.5 -> 15; 0 -> 8.
        assert_eq!(b[0].qs[0] & 0x0f, 0);
        assert_eq!(b[0].qs[1] & 0x0f, 15);
        assert_eq!(b[0].qs[2], 0x88);
        let mut y = [0f32; 32];
        dequantize_row_q4_0(&b, &mut y).unwrap();
        assert_eq!(&y[..3], &[16.0, -14.0, 0.0]);
    }

    /// Hand-computed Q8_0 block: amax = 127 gives d = 1, so q = round(x) (half away from zero).
    #[test]
    fn q8_0_known_answer() {
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = -2.5;
        x[2] = 2.5;
        x[3] = 0.49;
        x[4] = -100.2;
        let mut b = [BlockQ8_0 { d: f16::ZERO, qs: [0; 32] }];
        quantize_row_q8_0(&x, &mut b).unwrap();
        assert_eq!(b[0].d.to_bits(), 0x3c00);
        assert_eq!(&b[0].qs[..6], &[127, -3, 3, 0, -100, 0]);
        let mut y = [0f32; 32];
        dequantize_row_q8_0(&b, &mut y).unwrap();
        assert_eq!(&y[..5], &[127.0, -3.0, 3.0, 0.0, -100.0]);

        let mut b1 = [BlockQ8_1 { d: f16::ZERO, s: f16::ZERO, qs: [0; 32] }];
        quantize_row_q8_1(&x, &mut b1).unwrap();
        assert_eq!(b1[0].qs, b[0].qs);
        assert_eq!(b1[0].s.to_f32(), (127 - 3 + 3 - 100) as f32);
    }

    #[test]
    fn all_zero_blocks() {
        let x = [0f32; 64];
        let mut b = [BlockQ4_1 { d: f16::ONE, m: f16::ONE, qs: [1; 16] }; 2];
        quantize_row_q4_1(&x, &mut b).unwrap();
        assert!(b.iter().all(|b| b.d.to_f32() == 0.0 && b.m.to_f32() == 0.0 && b.qs == [0; 16]));
        let mut b = [BlockQ4_0 { d: f16::ONE, qs: [1; 16] }; 2];
        quantize_row_q4_0(&x, &mut b).unwrap();
        // d = -0.0 and every quant is 8 (the zero point).
        assert!(b.iter().all(|b| b.d.to_f32() == 0.0 && b.qs == [0x88; 16]));
    }

    #[test]
    fn bad_lengths_are_errors() {
        let x = [0f32; 40];
        let mut b = [BlockQ8_0 { d: f16::ZERO, qs: [0; 32] }; 2];
        assert!(matches!(quantize_row_q8_0(&x, &mut b), Err(Error::BlockAlignment { .. })));
        assert!(matches!(quantize_row_q8_0(&x[..32], &mut b), Err(Error::DataLength { .. })));
        let mut y = [0f32; 33];
        assert!(matches!(dequantize_row_q8_0(&b, &mut y), Err(Error::BlockAlignment { .. })));
        assert!(matches!(dequantize_row_q8_0(&b, &mut y[..32]), Err(Error::DataLength { .. })));
        assert!(quantize_row_q8_0(&[], &mut []).is_ok());
    }
}
