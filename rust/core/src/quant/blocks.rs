//! GGUF block structs with exactly ggml's byte layout (`ggml-common.h`), and safe casts between
//! byte slices and block slices.
//!
//! Every block is `#[repr(C)]`, has no padding (checked at compile time against
//! [`DType::type_size`]) and is made only of plain integers and floats, so every bit pattern is a
//! valid block. Multi-byte fields are stored in the machine's byte order, which is GGUF's little
//! endian on every target Tessera supports (big-endian targets are rejected at compile time).
//!
//! Field names follow ggml, so that code can be read side by side with `ggml-quants.c`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use half::f16;
use std::mem::{align_of, size_of};

#[cfg(target_endian = "big")]
compile_error!("tessera-core's block formats assume a little-endian target (GGUF's byte order)");

/// Number of values in a block of Q4_0.
pub const QK4_0: usize = 32;
/// Number of values in a block of Q4_1.
pub const QK4_1: usize = 32;
/// Number of values in a block of Q5_0.
pub const QK5_0: usize = 32;
/// Number of values in a block of Q5_1.
pub const QK5_1: usize = 32;
/// Number of values in a block of Q8_0.
pub const QK8_0: usize = 32;
/// Number of values in a block of Q8_1.
pub const QK8_1: usize = 32;
/// Number of values in a k-quant super-block.
pub const QK_K: usize = 256;
/// Number of values in a block of IQ4_NL.
pub const QK4_NL: usize = 32;
/// Bytes of the packed 6-bit scales and mins of Q4_K and Q5_K.
pub const K_SCALE_SIZE: usize = 12;

mod sealed {
    /// Only the block structs of this module may implement [`super::Block`]: the byte casts are
    /// sound only for `#[repr(C)]` structs without padding whose every bit pattern is valid.
    pub trait Sealed {}
}

/// A GGUF block: a `#[repr(C)]` plain-data struct holding [`Block::BLOCK_SIZE`] values of
/// [`Block::DTYPE`] in `size_of::<Self>() == DTYPE.type_size()` bytes.
///
/// The trait is sealed: it is implemented exactly for the block structs of this module, which
/// is what makes [`as_blocks`] and the other casts sound.
pub trait Block: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The element type this block stores.
    const DTYPE: DType;
    /// Number of values in one block (`DTYPE.block_size()`).
    const BLOCK_SIZE: usize = Self::DTYPE.block_size();
    /// A block whose bytes are all zero (it dequantizes to zeros).
    const ZERO: Self;
}

/// Q4_0: 32 values as 4-bit quants `q` with `x = d * (q - 8)`.
///
/// `qs[j]` holds value `j` in its low nibble and value `j + 16` in its high nibble.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Nibbles: low = values 0..16, high = values 16..32.
    pub qs: [u8; QK4_0 / 2],
}

/// Q4_1: 32 values as 4-bit quants `q` with `x = d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (offset).
    pub m: f16,
    /// Nibbles: low = values 0..16, high = values 16..32.
    pub qs: [u8; QK4_1 / 2],
}

/// Q5_0: 32 values as 5-bit quants `q` with `x = d * (q - 16)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits: bit `j` of the little-endian u32 is bit 4 of value `j`.
    pub qh: [u8; 4],
    /// Low four bits: low nibble = values 0..16, high nibble = values 16..32.
    pub qs: [u8; QK5_0 / 2],
}

/// Q5_1: 32 values as 5-bit quants `q` with `x = d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (offset).
    pub m: f16,
    /// Fifth bits: bit `j` of the little-endian u32 is bit 4 of value `j`.
    pub qh: [u8; 4],
    /// Low four bits: low nibble = values 0..16, high nibble = values 16..32.
    pub qs: [u8; QK5_1 / 2],
}

/// Q8_0: 32 values as signed 8-bit quants with `x = d * q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants.
    pub qs: [i8; QK8_0],
}

/// Q8_1: like Q8_0, plus `s = d * sum(qs)` (the dot type of Q4_1 and Q5_1).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d * sum(qs)`.
    pub s: f16,
    /// Quants.
    pub qs: [i8; QK8_1],
}

/// Q2_K: 256 values in 16 groups of 16; `x = d * sc * q - dmin * m` with 2-bit `q` and 4-bit
/// group scale `sc` and min `m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    /// Per group: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants: in each 128-value half, `qs[l]` holds values `l`, `l + 32`, `l + 64` and
    /// `l + 96` at bits 0, 2, 4 and 6.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the group scales.
    pub d: f16,
    /// Super-block scale of the group mins.
    pub dmin: f16,
}

/// Q3_K: 256 values in 16 groups of 16; `x = d * (sc - 32) * q` with 3-bit signed `q` and 6-bit
/// group scale `sc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    /// High bits of the quants: bit `k` of `hmask[m]` belongs to value `32 * k + m`; a *clear*
    /// bit subtracts 4.
    pub hmask: [u8; QK_K / 8],
    /// Low two bits of the quants, packed like [`BlockQ2K::qs`].
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales: low nibbles in bytes 0..8, high two bits in bytes 8..12.
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}

/// Q4_K: 256 values in 8 groups of 32; `x = d * sc * q - dmin * m` with 4-bit `q` and 6-bit
/// group scale `sc` and min `m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    /// Super-block scale of the group scales.
    pub d: f16,
    /// Super-block scale of the group mins.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit mins, packed as ggml's `get_scale_min_k4` reads them.
    pub scales: [u8; K_SCALE_SIZE],
    /// Nibbles: each 64-value chunk takes 32 bytes, low nibbles first 32 values, high the next.
    pub qs: [u8; QK_K / 2],
}

/// Q5_K: like Q4_K with a fifth bit per quant.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    /// Super-block scale of the group scales.
    pub d: f16,
    /// Super-block scale of the group mins.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit mins, packed as in [`BlockQ4K`].
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits: bit `k` of `qh[l]` belongs to value `32 * k + l`.
    pub qh: [u8; QK_K / 8],
    /// Low four bits, packed like [`BlockQ4K::qs`].
    pub qs: [u8; QK_K / 2],
}

/// Q6_K: 256 values in 16 groups of 16; `x = d * sc * (q - 32)` with 6-bit `q` and signed 8-bit
/// group scale `sc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    /// Low four bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High two bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Group scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}

/// Q8_K: 256 values as signed 8-bit quants with an f32 scale, plus the sums of each 16 quants
/// (the dot type of the other k-quants).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    /// Scale (f32, unlike every other block).
    pub d: f32,
    /// Quants.
    pub qs: [i8; QK_K],
    /// `bsums[j] = sum(qs[16 * j .. 16 * j + 16])`.
    pub bsums: [i16; QK_K / 16],
}

/// IQ4_NL: 32 values as 4-bit indices `q` into [`KVALUES_IQ4NL`] with
/// `x = d * KVALUES_IQ4NL[q]`.
///
/// `qs[j]` holds value `j` in its low nibble and value `j + 16` in its high nibble (as Q4_0).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ4NL {
    /// Scale.
    pub d: f16,
    /// Indices: low nibbles = values 0..16, high nibbles = values 16..32.
    pub qs: [u8; QK4_NL / 2],
}

/// IQ4_XS: 256 values in 8 groups of 32; `x = d * (ls - 32) * KVALUES_IQ4NL[q]` with 4-bit
/// indices `q` and a 6-bit group scale `ls`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ4XS {
    /// Super-block scale.
    pub d: f16,
    /// High two bits of the group scales: bits `2 g, 2 g + 1` belong to group `g`.
    pub scales_h: u16,
    /// Low four bits of the group scales: group `g` in nibble `g % 2` of byte `g / 2`.
    pub scales_l: [u8; QK_K / 64],
    /// Indices: each group of 32 values takes 16 bytes, packed as [`BlockIQ4NL::qs`].
    pub qs: [u8; QK_K / 2],
}

/// The 16 levels of IQ4_NL and IQ4_XS (ggml's `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] =
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

macro_rules! impl_block {
    ($ty:ident, $dtype:ident, $fields:expr, $zero:expr) => {
        impl sealed::Sealed for $ty {}
        impl Block for $ty {
            const DTYPE: DType = DType::$dtype;
            const ZERO: Self = $zero;
        }
        const _: () = assert!(size_of::<$ty>() == DType::$dtype.type_size());
        // No padding: the size is the sum of the field sizes.
        const _: () = assert!(size_of::<$ty>() == $fields);
    };
}

const Z16: f16 = f16::ZERO;

impl_block!(BlockQ4_0, Q4_0, 2 + 16, BlockQ4_0 { d: Z16, qs: [0; 16] });
impl_block!(BlockQ4_1, Q4_1, 2 + 2 + 16, BlockQ4_1 { d: Z16, m: Z16, qs: [0; 16] });
impl_block!(BlockQ5_0, Q5_0, 2 + 4 + 16, BlockQ5_0 { d: Z16, qh: [0; 4], qs: [0; 16] });
impl_block!(BlockQ5_1, Q5_1, 2 + 2 + 4 + 16, BlockQ5_1 { d: Z16, m: Z16, qh: [0; 4], qs: [0; 16] });
impl_block!(BlockQ8_0, Q8_0, 2 + 32, BlockQ8_0 { d: Z16, qs: [0; 32] });
impl_block!(BlockQ8_1, Q8_1, 2 + 2 + 32, BlockQ8_1 { d: Z16, s: Z16, qs: [0; 32] });
impl_block!(
    BlockQ2K,
    Q2_K,
    16 + 64 + 2 + 2,
    BlockQ2K { scales: [0; 16], qs: [0; 64], d: Z16, dmin: Z16 }
);
impl_block!(
    BlockQ3K,
    Q3_K,
    32 + 64 + 12 + 2,
    BlockQ3K { hmask: [0; 32], qs: [0; 64], scales: [0; 12], d: Z16 }
);
impl_block!(
    BlockQ4K,
    Q4_K,
    2 + 2 + 12 + 128,
    BlockQ4K { d: Z16, dmin: Z16, scales: [0; 12], qs: [0; 128] }
);
impl_block!(
    BlockQ5K,
    Q5_K,
    2 + 2 + 12 + 32 + 128,
    BlockQ5K { d: Z16, dmin: Z16, scales: [0; 12], qh: [0; 32], qs: [0; 128] }
);
impl_block!(
    BlockQ6K,
    Q6_K,
    128 + 64 + 16 + 2,
    BlockQ6K { ql: [0; 128], qh: [0; 64], scales: [0; 16], d: Z16 }
);
impl_block!(BlockQ8K, Q8_K, 4 + 256 + 2 * 16, BlockQ8K { d: 0.0, qs: [0; 256], bsums: [0; 16] });
impl_block!(BlockIQ4NL, IQ4_NL, 2 + 16, BlockIQ4NL { d: Z16, qs: [0; 16] });
impl_block!(
    BlockIQ4XS,
    IQ4_XS,
    2 + 2 + 4 + 128,
    BlockIQ4XS { d: Z16, scales_h: 0, scales_l: [0; 4], qs: [0; 128] }
);

// Alignment: 2 for blocks with f16 fields, 4 for Q8_K's f32.
const _: () = assert!(align_of::<BlockQ4_0>() == 2);
const _: () = assert!(align_of::<BlockQ8K>() == 4);

/// Whether `bytes` starts at an address aligned for `B` (`align_of::<B>()`: 2 for blocks with
/// f16 scales, 4 for [`BlockQ8K`]).
pub fn is_aligned_for<B: Block>(bytes: &[u8]) -> bool {
    (bytes.as_ptr() as usize).is_multiple_of(align_of::<B>())
}

fn check_cast<B: Block>(what: &str, bytes: &[u8]) -> Result<usize> {
    let size = size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return Err(Error::DataLength {
            context: format!(
                "{what}: {} bytes are not a whole number of {} blocks of {size} bytes",
                bytes.len(),
                B::DTYPE
            ),
            expected: bytes.len() / size * size,
            actual: bytes.len(),
        });
    }
    if !is_aligned_for::<B>(bytes) {
        return Err(Error::InvalidArgument(format!(
            "{what}: {} blocks need {}-byte alignment, the bytes start at address {:#x}",
            B::DTYPE,
            align_of::<B>(),
            bytes.as_ptr() as usize
        )));
    }
    Ok(bytes.len() / size)
}

/// Views `bytes` as a slice of blocks.
///
/// Fails with [`Error::DataLength`] when the length is not a multiple of the block size in bytes,
/// and with [`Error::InvalidArgument`] when the bytes are not aligned for `B` (see
/// [`is_aligned_for`]; byte buffers from the allocator are, sub-slices at odd offsets may not be).
/// Never panics.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> Result<&[B]> {
    let n = check_cast::<B>("as_blocks", bytes)?;
    // SAFETY: `B` is one of this module's sealed `#[repr(C)]` block structs, whose fields are
    // plain integers/floats with no padding (asserted at compile time), so every bit pattern of
    // `size_of::<B>()` bytes is a valid `B`. `check_cast` verified that the pointer is aligned for
    // `B` and that `n * size_of::<B>() == bytes.len()`, so the new slice covers exactly the same
    // initialized memory, and it borrows `bytes` immutably for the same lifetime.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), n) })
}

/// Views `bytes` as a mutable slice of blocks; same checks and errors as [`as_blocks`].
pub fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> Result<&mut [B]> {
    let n = check_cast::<B>("as_blocks_mut", bytes)?;
    // SAFETY: as in `as_blocks`: aligned, exact length, every bit pattern valid for `B`; and any
    // `B` written through the new slice is plain data without padding, so the bytes stay
    // initialized. The mutable borrow of `bytes` is held for the lifetime of the result.
    Ok(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), n) })
}

/// Views blocks as their bytes (GGUF layout). Never fails.
pub fn blocks_as_bytes<B: Block>(blocks: &[B]) -> &[u8] {
    // SAFETY: `B` is a sealed `#[repr(C)]` block without padding (asserted at compile time), so
    // all `size_of_val(blocks)` bytes are initialized; `u8` has alignment 1 and the length cannot
    // overflow since it is the size of an existing allocation.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

/// Views blocks as their mutable bytes (GGUF layout). Never fails.
pub fn blocks_as_bytes_mut<B: Block>(blocks: &mut [B]) -> &mut [u8] {
    let len = std::mem::size_of_val(blocks);
    // SAFETY: as in `blocks_as_bytes`; additionally every bit pattern is a valid `B`, so any bytes
    // written through the view leave valid blocks behind. The mutable borrow is held meanwhile.
    unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets_match_ggml() {
        assert_eq!(std::mem::offset_of!(BlockQ5_0, qh), 2);
        assert_eq!(std::mem::offset_of!(BlockQ5_0, qs), 6);
        assert_eq!(std::mem::offset_of!(BlockQ5_1, qh), 4);
        assert_eq!(std::mem::offset_of!(BlockQ2K, qs), 16);
        assert_eq!(std::mem::offset_of!(BlockQ2K, d), 80);
        assert_eq!(std::mem::offset_of!(BlockQ2K, dmin), 82);
        assert_eq!(std::mem::offset_of!(BlockQ3K, qs), 32);
        assert_eq!(std::mem::offset_of!(BlockQ3K, scales), 96);
        assert_eq!(std::mem::offset_of!(BlockQ3K, d), 108);
        assert_eq!(std::mem::offset_of!(BlockQ4K, scales), 4);
        assert_eq!(std::mem::offset_of!(BlockQ4K, qs), 16);
        assert_eq!(std::mem::offset_of!(BlockQ5K, qh), 16);
        assert_eq!(std::mem::offset_of!(BlockQ5K, qs), 48);
        assert_eq!(std::mem::offset_of!(BlockQ6K, qh), 128);
        assert_eq!(std::mem::offset_of!(BlockQ6K, scales), 192);
        assert_eq!(std::mem::offset_of!(BlockQ6K, d), 208);
        assert_eq!(std::mem::offset_of!(BlockQ8K, qs), 4);
        assert_eq!(std::mem::offset_of!(BlockQ8K, bsums), 260);
        assert_eq!(std::mem::offset_of!(BlockIQ4NL, qs), 2);
        assert_eq!(std::mem::offset_of!(BlockIQ4XS, scales_h), 2);
        assert_eq!(std::mem::offset_of!(BlockIQ4XS, scales_l), 4);
        assert_eq!(std::mem::offset_of!(BlockIQ4XS, qs), 8);
    }

    #[test]
    fn casts_check_length_and_alignment() {
        // Q8_K storage guarantees 4-byte alignment of the start.
        let mut storage = vec![BlockQ8K::ZERO; 3];
        let raw = blocks_as_bytes_mut(&mut storage);
        assert_eq!(raw.len(), 3 * 292);
        {
            let blocks = as_blocks_mut::<BlockQ8K>(&mut raw[..2 * 292]).unwrap();
            assert_eq!(blocks.len(), 2);
            blocks[1].d = 1.5;
            blocks[1].bsums[15] = -2;
        }
        assert_eq!(&raw[292..296], &1.5f32.to_le_bytes());
        assert_eq!(&raw[2 * 292 - 2..2 * 292], &(-2i16).to_le_bytes());
        // Wrong length.
        assert!(matches!(as_blocks::<BlockQ8K>(&raw[..291]), Err(Error::DataLength { .. })));
        // Misaligned start.
        assert!(matches!(as_blocks::<BlockQ8K>(&raw[2..2 + 292]), Err(Error::InvalidArgument(_))));
        assert!(matches!(as_blocks::<BlockQ4_0>(&raw[1..1 + 18]), Err(Error::InvalidArgument(_))));
        assert!(as_blocks_mut::<BlockQ4_0>(&mut raw[1..19]).is_err());
        assert_eq!(as_blocks::<BlockQ4_0>(&raw[2..2 + 36]).unwrap().len(), 2);
        assert_eq!(as_blocks::<BlockQ4_0>(&raw[..0]).unwrap().len(), 0);
    }

    #[test]
    fn bytes_round_trip() {
        let mut b = BlockQ4_0::ZERO;
        b.d = f16::from_f32(0.5);
        b.qs[3] = 0xab;
        let bytes = blocks_as_bytes(std::slice::from_ref(&b));
        assert_eq!(bytes.len(), 18);
        assert_eq!(&bytes[..2], &0x3800u16.to_le_bytes());
        assert_eq!(bytes[5], 0xab);
    }
}
