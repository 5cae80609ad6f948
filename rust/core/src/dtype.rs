//! Element types, including GGUF's block-quantized formats.
//!
//! The numeric ids match ggml's `enum ggml_type`, so that a type id read from a GGUF file can be
//! used directly.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The type of a tensor's elements.
///
/// Quantized types store values in blocks of [`DType::block_size`] values taking
/// [`DType::type_size`] bytes, with exactly the byte layout GGUF files use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 4-bit, 32 values per block, f16 scale.
    Q4_0,
    /// 4-bit, 32 values per block, f16 scale and minimum.
    Q4_1,
    /// 5-bit, 32 values per block, f16 scale.
    Q5_0,
    /// 5-bit, 32 values per block, f16 scale and minimum.
    Q5_1,
    /// 8-bit, 32 values per block, f16 scale.
    Q8_0,
    /// 8-bit, 32 values per block, f16 scale and f16 scaled sum (the dot type of Q4_1/Q5_1).
    Q8_1,
    /// 2-bit k-quant, 256 values per super-block.
    Q2_K,
    /// 3-bit k-quant, 256 values per super-block.
    Q3_K,
    /// 4-bit k-quant, 256 values per super-block.
    Q4_K,
    /// 5-bit k-quant, 256 values per super-block.
    Q5_K,
    /// 6-bit k-quant, 256 values per super-block.
    Q6_K,
    /// 8-bit k-quant with f32 scale and block sums (the dot type of the other k-quants).
    Q8_K,
    /// 4-bit non-linear, 32 values per block: an f16 scale times one of 16 fixed levels.
    IQ4_NL,
    /// 4-bit non-linear, 256 values per super-block: IQ4_NL's levels with a 6-bit scale per 32
    /// values.
    IQ4_XS,
}

impl DType {
    /// Every type, in ggml id order.
    pub const ALL: [DType; 18] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::I32,
        DType::BF16,
    ];

    /// The block-quantized types.
    pub const QUANTIZED: [DType; 14] = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
    ];

    /// Number of values in one block (1 for plain types).
    pub const fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 => 1,
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::IQ4_NL => 32,
            DType::Q2_K
            | DType::Q3_K
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::Q8_K
            | DType::IQ4_XS => 256,
        }
    }

    /// Number of bytes of one block (of one element for plain types).
    pub const fn type_size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::Q8_K => 292,
            DType::IQ4_NL => 18,
            DType::IQ4_XS => 136,
        }
    }

    /// Whether the type is block-quantized.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Whether the type is a floating-point type that ops can read and write element-wise
    /// (F32, F16, BF16).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes taken by a row of `n` values, or an error when `n` is not a multiple of the block
    /// size or the size overflows.
    pub fn row_size(self, n: usize) -> Result<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return Err(Error::BlockAlignment { dtype: self, n, block: self.block_size() });
        }
        (n / self.block_size())
            .checked_mul(self.type_size())
            .ok_or_else(|| Error::Overflow { what: format!("row of {n} values of {self}") })
    }

    /// ggml's numeric type id.
    pub const fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q8_1 => 9,
            DType::Q2_K => 10,
            DType::Q3_K => 11,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::Q8_K => 15,
            DType::IQ4_NL => 20,
            DType::IQ4_XS => 23,
            DType::I32 => 26,
            DType::BF16 => 30,
        }
    }

    /// The type with ggml's numeric id `id`.
    pub fn from_ggml_id(id: u32) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|t| t.ggml_id() == id)
            .ok_or_else(|| Error::UnknownType(format!("with ggml id {id}")))
    }

    /// The name used in GGUF and in graph documents ("F32", "Q4_0", "Q4_K", ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q8_1 => "Q8_1",
            DType::Q2_K => "Q2_K",
            DType::Q3_K => "Q3_K",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
            DType::Q8_K => "Q8_K",
            DType::IQ4_NL => "IQ4_NL",
            DType::IQ4_XS => "IQ4_XS",
        }
    }

    /// The type activations are quantized to for a dot product with weights of this type
    /// (ggml's `vec_dot_type`).
    pub const fn vec_dot_type(self) -> DType {
        match self {
            DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL => DType::Q8_0,
            DType::Q4_1 | DType::Q5_1 | DType::Q8_1 => DType::Q8_1,
            DType::Q2_K
            | DType::Q3_K
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::Q8_K
            | DType::IQ4_XS => DType::Q8_K,
            DType::F16 => DType::F16,
            DType::BF16 => DType::BF16,
            DType::F32 | DType::I32 => DType::F32,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Type names are canonical: exactly as [`DType::name`] writes them ("F32", "Q4_K"). A name
/// that differs only in case is refused with the canonical one in the message.
impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<DType> {
        if let Some(t) = DType::ALL.into_iter().find(|t| t.name() == s) {
            return Ok(t);
        }
        Err(Error::UnknownType(
            match DType::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(s)) {
                Some(t) => format!("{s:?} (type names are upper case: {:?})", t.name()),
                None => format!("{s:?}"),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_gguf() {
        assert_eq!(DType::Q4_0.type_size(), 18);
        assert_eq!(DType::Q8_0.type_size(), 34);
        assert_eq!(DType::Q4_K.type_size(), 144);
        assert_eq!(DType::Q6_K.type_size(), 210);
        assert_eq!(DType::Q8_K.type_size(), 292);
        assert_eq!(DType::IQ4_NL.type_size(), 18);
        assert_eq!(DType::IQ4_XS.type_size(), 136);
        assert_eq!(DType::IQ4_XS.row_size(512).unwrap(), 2 * 136);
        assert_eq!((DType::IQ4_NL.ggml_id(), DType::IQ4_XS.ggml_id()), (20, 23));
        assert_eq!(DType::Q4_0.row_size(4096).unwrap(), 128 * 18);
        assert!(DType::Q4_K.row_size(100).is_err());
    }

    #[test]
    fn names_and_ids_round_trip() {
        for t in DType::ALL {
            assert_eq!(t.name().parse::<DType>().unwrap(), t);
            assert_eq!(DType::from_ggml_id(t.ggml_id()).unwrap(), t);
        }
        assert!("Q9_9".parse::<DType>().is_err());
        // Canonical names only; the message gives the canonical one.
        let e = "q4_k".parse::<DType>().unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unknown tensor type "q4_k" (type names are upper case: "Q4_K")"#
        );
        assert!(DType::from_ggml_id(4).is_err());
    }
}
