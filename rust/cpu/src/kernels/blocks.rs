//! Where the kernels find each field of a GGUF block: byte sizes and field offsets read from
//! `tessera_core`'s `#[repr(C)]` block structs (`size_of`, `offset_of!`), so that the layout is
//! written once, next to ggml's definition, and the kernels name what they load.
//!
//! The kernels read blocks through raw pointers at these offsets (a block of a weight row need
//! not be aligned for its struct), and the constants are evaluated at compile time, so the
//! generated code is the same as with the numbers written out.

use std::mem::{offset_of, size_of};
use tessera_core::quant::blocks::{
    BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
};

/// Bytes of an f16 scale.
pub(crate) const F16_BYTES: usize = size_of::<half::f16>();

/// Q4_0: `d`, 16 bytes of nibbles.
pub(crate) mod q4_0 {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ4_0>();
    /// The nibbles.
    pub(crate) const QS: usize = offset_of!(BlockQ4_0, qs);
}

/// Q4_1: `d`, `m`, 16 bytes of nibbles.
pub(crate) mod q4_1 {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ4_1>();
    /// The minimum.
    pub(crate) const M: usize = offset_of!(BlockQ4_1, m);
    /// The nibbles.
    pub(crate) const QS: usize = offset_of!(BlockQ4_1, qs);
}

/// Q5_0: `d`, 4 bytes of fifth bits, 16 bytes of nibbles.
pub(crate) mod q5_0 {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ5_0>();
    /// The fifth bits.
    pub(crate) const QH: usize = offset_of!(BlockQ5_0, qh);
    /// The nibbles.
    pub(crate) const QS: usize = offset_of!(BlockQ5_0, qs);
}

/// Q5_1: `d`, `m`, 4 bytes of fifth bits, 16 bytes of nibbles.
pub(crate) mod q5_1 {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ5_1>();
    /// The minimum.
    pub(crate) const M: usize = offset_of!(BlockQ5_1, m);
    /// The fifth bits.
    pub(crate) const QH: usize = offset_of!(BlockQ5_1, qh);
    /// The nibbles.
    pub(crate) const QS: usize = offset_of!(BlockQ5_1, qs);
}

/// Q8_0: `d`, 32 signed quants.
pub(crate) mod q8_0 {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ8_0>();
    /// The quants.
    pub(crate) const QS: usize = offset_of!(BlockQ8_0, qs);
}

/// Q8_1: `d`, `s = d * sum(qs)`, 32 signed quants. The repacked kernels' "Q8_0 with sums"
/// activations have the same size and offsets, with the i16 sum of the quants in place of `s`.
pub(crate) mod q8_1 {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ8_1>();
    /// `s` (the sum of the quants, as i16, in the "Q8_0 with sums" format).
    pub(crate) const S: usize = offset_of!(BlockQ8_1, s);
    /// The quants.
    pub(crate) const QS: usize = offset_of!(BlockQ8_1, qs);
}

/// Q2_K: 16 scale/min bytes, 64 bytes of 2-bit quants, `d`, `dmin`.
pub(crate) mod q2_k {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ2K>();
    /// The 4-bit scales (low nibbles) and mins (high nibbles).
    pub(crate) const SCALES: usize = offset_of!(BlockQ2K, scales);
    /// The 2-bit quants.
    pub(crate) const QS: usize = offset_of!(BlockQ2K, qs);
    /// The super-block scale of the scales.
    pub(crate) const D: usize = offset_of!(BlockQ2K, d);
    /// The super-block scale of the mins.
    pub(crate) const DMIN: usize = offset_of!(BlockQ2K, dmin);
}

/// Q3_K: 32 bytes of high bits, 64 bytes of 2-bit quants, 12 bytes of 6-bit scales, `d`.
pub(crate) mod q3_k {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ3K>();
    /// The third bits of the quants.
    pub(crate) const HMASK: usize = offset_of!(BlockQ3K, hmask);
    /// The low two bits of the quants.
    pub(crate) const QS: usize = offset_of!(BlockQ3K, qs);
    /// The packed 6-bit scales.
    pub(crate) const SCALES: usize = offset_of!(BlockQ3K, scales);
    /// The super-block scale.
    pub(crate) const D: usize = offset_of!(BlockQ3K, d);
}

/// Q4_K: `d`, `dmin`, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles.
pub(crate) mod q4_k {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ4K>();
    /// The super-block scale of the mins.
    pub(crate) const DMIN: usize = offset_of!(BlockQ4K, dmin);
    /// The packed 6-bit scales and mins.
    pub(crate) const SCALES: usize = offset_of!(BlockQ4K, scales);
    /// The nibbles.
    pub(crate) const QS: usize = offset_of!(BlockQ4K, qs);
}

/// Q5_K: `d`, `dmin`, 12 bytes of 6-bit scales and mins, 32 bytes of fifth bits, 128 bytes of
/// nibbles.
pub(crate) mod q5_k {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ5K>();
    /// The super-block scale of the mins.
    pub(crate) const DMIN: usize = offset_of!(BlockQ5K, dmin);
    /// The packed 6-bit scales and mins.
    pub(crate) const SCALES: usize = offset_of!(BlockQ5K, scales);
    /// The fifth bits.
    pub(crate) const QH: usize = offset_of!(BlockQ5K, qh);
    /// The nibbles.
    pub(crate) const QS: usize = offset_of!(BlockQ5K, qs);
}

/// Q6_K: 128 bytes of low nibbles, 64 bytes of high bits, 16 signed scales, `d`.
pub(crate) mod q6_k {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ6K>();
    /// The low four bits of the quants.
    pub(crate) const QL: usize = offset_of!(BlockQ6K, ql);
    /// The high two bits of the quants.
    pub(crate) const QH: usize = offset_of!(BlockQ6K, qh);
    /// The signed 8-bit scales.
    pub(crate) const SCALES: usize = offset_of!(BlockQ6K, scales);
    /// The super-block scale.
    pub(crate) const D: usize = offset_of!(BlockQ6K, d);
}

/// Q8_K: f32 `d`, 256 signed quants, 16 i16 sums of 16 quants.
pub(crate) mod q8_k {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockQ8K>();
    /// The quants.
    pub(crate) const QS: usize = offset_of!(BlockQ8K, qs);
    /// The sums of each 16 quants.
    pub(crate) const BSUMS: usize = offset_of!(BlockQ8K, bsums);
}

/// IQ4_NL: `d`, 16 bytes of level indices (packed as Q4_0's nibbles).
pub(crate) mod iq4_nl {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockIQ4NL>();
    /// The level indices.
    pub(crate) const QS: usize = offset_of!(BlockIQ4NL, qs);
}

/// IQ4_XS: `d`, the scales' high bits (u16), their low nibbles (4 bytes), 128 bytes of level
/// indices (16 per group of 32 values, packed as Q4_0's nibbles).
pub(crate) mod iq4_xs {
    use super::*;
    /// Bytes of a block.
    pub(crate) const BYTES: usize = size_of::<BlockIQ4XS>();
    /// The high two bits of the eight group scales.
    pub(crate) const SCALES_H: usize = offset_of!(BlockIQ4XS, scales_h);
    /// The low four bits of the eight group scales.
    pub(crate) const SCALES_L: usize = offset_of!(BlockIQ4XS, scales_l);
    /// The level indices.
    pub(crate) const QS: usize = offset_of!(BlockIQ4XS, qs);
}
