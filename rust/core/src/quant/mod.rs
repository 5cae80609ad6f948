//! GGUF block formats: reference quantize and dequantize.
//!
//! Every quantized [`DType`] has a `#[repr(C)]` block struct in [`blocks`] with exactly ggml's
//! byte layout, a quantizer that produces the same bytes as ggml's `quantize_row_*_ref` and a
//! dequantizer that produces the same values as ggml's `dequantize_row_*`:
//!
//! | type | block | quantize | dequantize |
//! |---|---|---|---|
//! | Q4_0 | [`BlockQ4_0`] | [`quantize_row_q4_0`] | [`dequantize_row_q4_0`] |
//! | Q4_1 | [`BlockQ4_1`] | [`quantize_row_q4_1`] | [`dequantize_row_q4_1`] |
//! | Q5_0 | [`BlockQ5_0`] | [`quantize_row_q5_0`] | [`dequantize_row_q5_0`] |
//! | Q5_1 | [`BlockQ5_1`] | [`quantize_row_q5_1`] | [`dequantize_row_q5_1`] |
//! | Q8_0 | [`BlockQ8_0`] | [`quantize_row_q8_0`] | [`dequantize_row_q8_0`] |
//! | Q8_1 | [`BlockQ8_1`] | [`quantize_row_q8_1`] | [`dequantize_row_q8_1`] |
//! | Q2_K | [`BlockQ2K`] | [`quantize_row_q2_k`] | [`dequantize_row_q2_k`] |
//! | Q3_K | [`BlockQ3K`] | [`quantize_row_q3_k`] | [`dequantize_row_q3_k`] |
//! | Q4_K | [`BlockQ4K`] | [`quantize_row_q4_k`] | [`dequantize_row_q4_k`] |
//! | Q5_K | [`BlockQ5K`] | [`quantize_row_q5_k`] | [`dequantize_row_q5_k`] |
//! | Q6_K | [`BlockQ6K`] | [`quantize_row_q6_k`] | [`dequantize_row_q6_k`] |
//! | Q8_K | [`BlockQ8K`] | [`quantize_row_q8_k`] | [`dequantize_row_q8_k`] |
//! | IQ4_NL | [`BlockIQ4NL`] | [`quantize_row_iq4_nl`] | [`dequantize_row_iq4_nl`] |
//! | IQ4_XS | [`BlockIQ4XS`] | [`quantize_row_iq4_xs`] | [`dequantize_row_iq4_xs`] |
//!
//! The typed functions take block slices (see [`as_blocks`] / [`as_blocks_mut`] to view bytes as
//! blocks); [`quantize_row`] and [`dequantize_row`] take any type by [`DType`] on plain bytes
//! (aligned or not) and also cover F32, F16, BF16 (and I32 for dequantize).
//!
//! Nothing here panics on bad lengths: every function checks its lengths and returns
//! [`Error::BlockAlignment`] (a value count that is not a whole number of blocks) or
//! [`Error::DataLength`] (a destination or source of the wrong size, in bytes of blocks).
//! The quantizers never allocate.

pub mod blocks;
pub mod float;
pub mod iq4;
mod kquant_helpers;
pub mod kquants;
pub mod legacy;

pub use blocks::{
    as_blocks, as_blocks_mut, blocks_as_bytes, blocks_as_bytes_mut, is_aligned_for, Block,
    BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, KVALUES_IQ4NL, QK4_0, QK4_1,
    QK4_NL, QK5_0, QK5_1, QK8_0, QK8_1, QK_K,
};
pub use iq4::{
    dequantize_row_iq4_nl, dequantize_row_iq4_xs, quantize_row_iq4_nl, quantize_row_iq4_xs,
};
pub use kquants::{
    dequantize_row_q2_k, dequantize_row_q3_k, dequantize_row_q4_k, dequantize_row_q5_k,
    dequantize_row_q6_k, dequantize_row_q8_k, quantize_row_q2_k, quantize_row_q3_k,
    quantize_row_q4_k, quantize_row_q5_k, quantize_row_q6_k, quantize_row_q8_k,
};
pub use legacy::{
    dequantize_row_q4_0, dequantize_row_q4_1, dequantize_row_q5_0, dequantize_row_q5_1,
    dequantize_row_q8_0, dequantize_row_q8_1, quantize_row_q4_0, quantize_row_q4_1,
    quantize_row_q5_0, quantize_row_q5_1, quantize_row_q8_0, quantize_row_q8_1,
};

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::mem::size_of;

/// Checks a typed quantizer's lengths: `src` a whole number of blocks, `dst` exactly as many.
pub(crate) fn check_quantize<B: Block>(what: &str, src: &[f32], dst_blocks: usize) -> Result<()> {
    let bs = B::BLOCK_SIZE;
    if !src.len().is_multiple_of(bs) {
        return Err(Error::BlockAlignment { dtype: B::DTYPE, n: src.len(), block: bs });
    }
    if src.len() / bs != dst_blocks {
        return Err(Error::DataLength {
            context: format!("{what}: destination {} blocks for {} values", B::DTYPE, src.len()),
            expected: src.len() / bs * size_of::<B>(),
            actual: dst_blocks * size_of::<B>(),
        });
    }
    Ok(())
}

/// Checks a typed dequantizer's lengths: `dst` a whole number of blocks, `src` exactly as many.
pub(crate) fn check_dequantize<B: Block>(what: &str, src_blocks: usize, dst: &[f32]) -> Result<()> {
    let bs = B::BLOCK_SIZE;
    if !dst.len().is_multiple_of(bs) {
        return Err(Error::BlockAlignment { dtype: B::DTYPE, n: dst.len(), block: bs });
    }
    if dst.len() / bs != src_blocks {
        return Err(Error::DataLength {
            context: format!("{what}: source {} blocks for {} values", B::DTYPE, dst.len()),
            expected: dst.len() / bs * size_of::<B>(),
            actual: src_blocks * size_of::<B>(),
        });
    }
    Ok(())
}

type QuantizeFn<B> = fn(&[f32], &mut [B]) -> Result<()>;
type DequantizeFn<B> = fn(&[B], &mut [f32]) -> Result<()>;

/// Runs a typed quantizer on bytes: in place when aligned, else block by block through a copy.
fn quantize_bytes<B: Block>(src: &[f32], dst: &mut [u8], f: QuantizeFn<B>) -> Result<()> {
    if is_aligned_for::<B>(dst) {
        return f(src, as_blocks_mut::<B>(dst)?);
    }
    let mut tmp = [B::ZERO];
    for (x, out) in src.chunks_exact(B::BLOCK_SIZE).zip(dst.chunks_exact_mut(size_of::<B>())) {
        f(x, &mut tmp)?;
        out.copy_from_slice(blocks_as_bytes(&tmp));
    }
    Ok(())
}

/// Runs a typed dequantizer on bytes: in place when aligned, else block by block through a copy.
fn dequantize_bytes<B: Block>(src: &[u8], dst: &mut [f32], f: DequantizeFn<B>) -> Result<()> {
    if is_aligned_for::<B>(src) {
        return f(as_blocks::<B>(src)?, dst);
    }
    let mut tmp = [B::ZERO];
    for (b, y) in src.chunks_exact(size_of::<B>()).zip(dst.chunks_exact_mut(B::BLOCK_SIZE)) {
        blocks_as_bytes_mut(&mut tmp).copy_from_slice(b);
        f(&tmp, y)?;
    }
    Ok(())
}

fn i32_unsupported() -> Error {
    Error::dtype(
        "quantize_row",
        DType::I32,
        "I32 cannot be produced from f32; the destination must be F32, F16, BF16 or a quantized \
         type",
    )
}

/// Quantize `src` (len multiple of dtype.block_size()) into `dst` (len == dtype.row_size(src.len())).
/// Also handles plain types: F32 (copy as LE bytes), F16, BF16 (round to nearest even like ggml). I32 -> Err.
///
/// Quantized types produce exactly the bytes of ggml's reference quantizer
/// (`quantize_row_*_ref`). `dst` may have any alignment. Errors: [`Error::UnsupportedType`] for
/// I32, [`Error::BlockAlignment`] when `src.len()` is not a whole number of blocks,
/// [`Error::DataLength`] when `dst` has the wrong length.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    if dtype == DType::I32 {
        return Err(i32_unsupported());
    }
    let expected = dtype.row_size(src.len())?;
    if dst.len() != expected {
        return Err(Error::DataLength {
            context: format!("quantize_row: destination of {} values of {dtype}", src.len()),
            expected,
            actual: dst.len(),
        });
    }
    match dtype {
        DType::F32 => float::f32_to_bytes(src, dst),
        DType::F16 => float::f32_to_f16_bytes(src, dst),
        DType::BF16 => float::f32_to_bf16_bytes(src, dst),
        DType::I32 => return Err(i32_unsupported()),
        DType::Q4_0 => return quantize_bytes::<BlockQ4_0>(src, dst, quantize_row_q4_0),
        DType::Q4_1 => return quantize_bytes::<BlockQ4_1>(src, dst, quantize_row_q4_1),
        DType::Q5_0 => return quantize_bytes::<BlockQ5_0>(src, dst, quantize_row_q5_0),
        DType::Q5_1 => return quantize_bytes::<BlockQ5_1>(src, dst, quantize_row_q5_1),
        DType::Q8_0 => return quantize_bytes::<BlockQ8_0>(src, dst, quantize_row_q8_0),
        DType::Q8_1 => return quantize_bytes::<BlockQ8_1>(src, dst, quantize_row_q8_1),
        DType::Q2_K => return quantize_bytes::<BlockQ2K>(src, dst, quantize_row_q2_k),
        DType::Q3_K => return quantize_bytes::<BlockQ3K>(src, dst, quantize_row_q3_k),
        DType::Q4_K => return quantize_bytes::<BlockQ4K>(src, dst, quantize_row_q4_k),
        DType::Q5_K => return quantize_bytes::<BlockQ5K>(src, dst, quantize_row_q5_k),
        DType::Q6_K => return quantize_bytes::<BlockQ6K>(src, dst, quantize_row_q6_k),
        DType::Q8_K => return quantize_bytes::<BlockQ8K>(src, dst, quantize_row_q8_k),
        DType::IQ4_NL => return quantize_bytes::<BlockIQ4NL>(src, dst, quantize_row_iq4_nl),
        DType::IQ4_XS => return quantize_bytes::<BlockIQ4XS>(src, dst, quantize_row_iq4_xs),
    }
    Ok(())
}

/// Dequantize `src` (len == dtype.row_size(dst.len())) into `dst`. Also for F32/F16/BF16 (and I32 converted to f32).
///
/// Quantized types produce exactly the values of ggml's `dequantize_row_*` (Q8_1, which ggml
/// cannot dequantize, gives `d * q`). `src` may have any alignment. Errors:
/// [`Error::BlockAlignment`] when `dst.len()` is not a whole number of blocks,
/// [`Error::DataLength`] when `src` has the wrong length.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let expected = dtype.row_size(dst.len())?;
    if src.len() != expected {
        return Err(Error::DataLength {
            context: format!("dequantize_row: source of {} values of {dtype}", dst.len()),
            expected,
            actual: src.len(),
        });
    }
    match dtype {
        DType::F32 => float::bytes_to_f32(src, dst),
        DType::F16 => float::f16_bytes_to_f32(src, dst),
        DType::BF16 => float::bf16_bytes_to_f32(src, dst),
        DType::I32 => float::i32_bytes_to_f32(src, dst),
        DType::Q4_0 => return dequantize_bytes::<BlockQ4_0>(src, dst, dequantize_row_q4_0),
        DType::Q4_1 => return dequantize_bytes::<BlockQ4_1>(src, dst, dequantize_row_q4_1),
        DType::Q5_0 => return dequantize_bytes::<BlockQ5_0>(src, dst, dequantize_row_q5_0),
        DType::Q5_1 => return dequantize_bytes::<BlockQ5_1>(src, dst, dequantize_row_q5_1),
        DType::Q8_0 => return dequantize_bytes::<BlockQ8_0>(src, dst, dequantize_row_q8_0),
        DType::Q8_1 => return dequantize_bytes::<BlockQ8_1>(src, dst, dequantize_row_q8_1),
        DType::Q2_K => return dequantize_bytes::<BlockQ2K>(src, dst, dequantize_row_q2_k),
        DType::Q3_K => return dequantize_bytes::<BlockQ3K>(src, dst, dequantize_row_q3_k),
        DType::Q4_K => return dequantize_bytes::<BlockQ4K>(src, dst, dequantize_row_q4_k),
        DType::Q5_K => return dequantize_bytes::<BlockQ5K>(src, dst, dequantize_row_q5_k),
        DType::Q6_K => return dequantize_bytes::<BlockQ6K>(src, dst, dequantize_row_q6_k),
        DType::Q8_K => return dequantize_bytes::<BlockQ8K>(src, dst, dequantize_row_q8_k),
        DType::IQ4_NL => return dequantize_bytes::<BlockIQ4NL>(src, dst, dequantize_row_iq4_nl),
        DType::IQ4_XS => return dequantize_bytes::<BlockIQ4XS>(src, dst, dequantize_row_iq4_xs),
    }
    Ok(())
}

/// [`quantize_row`] into a new vector of `dtype.row_size(src.len())` bytes.
pub fn quantize_to_vec(dtype: DType, src: &[f32]) -> Result<Vec<u8>> {
    let size = if dtype == DType::I32 { 0 } else { dtype.row_size(src.len())? };
    let mut out = vec![0u8; size];
    quantize_row(dtype, src, &mut out)?;
    Ok(out)
}

/// [`dequantize_row`] of `n` values into a new vector.
pub fn dequantize_to_vec(dtype: DType, src: &[u8], n: usize) -> Result<Vec<f32>> {
    // Check before allocating, so that a huge `n` with a short `src` is an error, not an abort.
    let expected = dtype.row_size(n)?;
    if src.len() != expected {
        return Err(Error::DataLength {
            context: format!("dequantize_to_vec: source of {n} values of {dtype}"),
            expected,
            actual: src.len(),
        });
    }
    let mut out = vec![0f32; n];
    dequantize_row(dtype, src, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_row(n: usize) -> Vec<f32> {
        let mut s = 0x9e37_79b9u32;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 4.0 - 2.0
            })
            .collect()
    }

    #[test]
    fn byte_api_matches_typed_api_aligned_or_not() {
        let x = test_row(512);
        for dtype in DType::QUANTIZED {
            let size = dtype.row_size(x.len()).unwrap();
            let aligned = quantize_to_vec(dtype, &x).unwrap();
            assert_eq!(aligned.len(), size);
            // Misaligned destination and source: one byte into a buffer.
            let mut buf = vec![0u8; size + 1];
            quantize_row(dtype, &x, &mut buf[1..]).unwrap();
            assert_eq!(&buf[1..], &aligned[..], "{dtype}");
            let y = dequantize_to_vec(dtype, &aligned, x.len()).unwrap();
            let mut z = vec![0f32; x.len()];
            dequantize_row(dtype, &buf[1..], &mut z).unwrap();
            assert_eq!(y, z, "{dtype}");
        }
    }

    #[test]
    fn plain_types() {
        let x = [1.0f32, -2.5, 65504.0, 1e-8, std::f32::consts::PI];
        let f32b = quantize_to_vec(DType::F32, &x).unwrap();
        assert_eq!(&f32b[4..8], &(-2.5f32).to_le_bytes());
        assert_eq!(dequantize_to_vec(DType::F32, &f32b, 5).unwrap(), x);
        let f16b = quantize_to_vec(DType::F16, &x).unwrap();
        assert_eq!(&f16b[..2], &0x3c00u16.to_le_bytes());
        let y = dequantize_to_vec(DType::F16, &f16b, 5).unwrap();
        assert_eq!(&y[..3], &x[..3]);
        let bf = quantize_to_vec(DType::BF16, &x).unwrap();
        assert_eq!(&bf[2..4], &0xc020u16.to_le_bytes());
        let y = dequantize_to_vec(DType::BF16, &bf, 5).unwrap();
        assert_eq!(y[4], 3.140625);
        let ints: Vec<u8> = [7i32, -3].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(dequantize_to_vec(DType::I32, &ints, 2).unwrap(), [7.0, -3.0]);
        assert!(matches!(
            quantize_row(DType::I32, &x, &mut [0u8; 20]),
            Err(Error::UnsupportedType { .. })
        ));
    }

    #[test]
    fn bad_lengths_are_errors_not_panics() {
        let x = test_row(256);
        for dtype in DType::ALL {
            if dtype == DType::I32 {
                continue;
            }
            let size = dtype.row_size(256).unwrap();
            let mut dst = vec![0u8; size + 1];
            assert!(
                matches!(quantize_row(dtype, &x, &mut dst), Err(Error::DataLength { .. })),
                "{dtype}"
            );
            assert!(
                matches!(
                    quantize_row(dtype, &x, &mut dst[..size - 1]),
                    Err(Error::DataLength { .. })
                ),
                "{dtype}"
            );
            let mut y = vec![0f32; 256];
            assert!(
                matches!(
                    dequantize_row(dtype, &dst[..size - 1], &mut y),
                    Err(Error::DataLength { .. })
                ),
                "{dtype}"
            );
            if dtype.is_quantized() {
                assert!(
                    matches!(
                        quantize_row(dtype, &x[..100], &mut dst),
                        Err(Error::BlockAlignment { .. })
                    ),
                    "{dtype}"
                );
                assert!(
                    matches!(
                        dequantize_row(dtype, &dst[..size], &mut y[..100]),
                        Err(Error::BlockAlignment { .. })
                    ),
                    "{dtype}"
                );
            }
        }
        assert!(dequantize_to_vec(DType::Q4_0, &[0u8; 18], usize::MAX / 2).is_err());
        assert!(dequantize_to_vec(DType::Q4_0, &[0u8; 18], 64).is_err());
    }
}
