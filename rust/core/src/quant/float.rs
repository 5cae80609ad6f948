//! Plain element types: conversions between f32 and F32, F16, BF16 and I32 rows stored as
//! little-endian bytes, with ggml's rounding.

use half::f16;

/// f32 to IEEE half, rounding to nearest even (as ggml's `GGML_FP32_TO_FP16` and F16C do).
#[inline]
pub fn fp32_to_fp16(x: f32) -> f16 {
    f16::from_f32(x)
}

/// IEEE half to f32 (exact).
#[inline]
pub fn fp16_to_fp32(h: f16) -> f32 {
    h.to_f32()
}

/// f32 to bfloat16 bits exactly as ggml's `ggml_compute_fp32_to_bf16`: NaNs become quiet NaNs
/// keeping their sign and upper payload, everything else rounds to nearest even (overflowing to
/// infinity).
#[inline]
pub fn fp32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    // Cannot overflow: u <= 0xff80_0000 here, and the rounding adds at most 0x8000.
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// bfloat16 bits to f32 (exact).
#[inline]
pub fn bf16_bits_to_fp32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Writes `src` as little-endian f32 bytes; `dst.len() == 4 * src.len()` (checked by caller).
pub(crate) fn f32_to_bytes(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&x.to_le_bytes());
    }
}

/// Reads little-endian f32 bytes; `src.len() == 4 * dst.len()` (checked by caller).
pub(crate) fn bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Writes `src` as little-endian f16 bytes.
pub(crate) fn f32_to_f16_bytes(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&fp32_to_fp16(*x).to_bits().to_le_bytes());
    }
}

/// Reads little-endian f16 bytes.
pub(crate) fn f16_bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

/// Writes `src` as little-endian bf16 bytes (ggml rounding).
pub(crate) fn f32_to_bf16_bytes(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&fp32_to_bf16_bits(*x).to_le_bytes());
    }
}

/// Reads little-endian bf16 bytes.
pub(crate) fn bf16_bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = bf16_bits_to_fp32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// Reads little-endian i32 bytes, converting each value to the nearest f32.
pub(crate) fn i32_bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_like_ggml() {
        // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
        assert_eq!(fp32_to_bf16_bits(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 is halfway between 1.0078125 (odd) and 1.015625: ties to even (up).
        assert_eq!(fp32_to_bf16_bits(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(fp32_to_bf16_bits(1.0 + 1.5 / 256.0), 0x3f81);
        assert_eq!(fp32_to_bf16_bits(-2.0), 0xc000);
        assert_eq!(fp32_to_bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(fp32_to_bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(fp32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(bf16_bits_to_fp32(0x3fc0), 1.5);
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1.0 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(fp32_to_fp16(1.0 + 1.0 / 2048.0).to_bits(), 0x3c00);
        assert_eq!(fp32_to_fp16(1.0 + 3.0 / 2048.0).to_bits(), 0x3c02);
        assert_eq!(fp32_to_fp16(65520.0).to_bits(), 0x7c00);
        assert_eq!(fp16_to_fp32(f16::from_bits(0x0001)), 2f32.powi(-24));
    }
}
