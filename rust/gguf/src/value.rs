//! Metadata values: [`ValueType`] (GGUF's type codes), [`Value`] and typed [`Array`]s.

use std::fmt;

/// The type of a metadata value, with GGUF's type codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `u8`.
    U8 = 0,
    /// `i8`.
    I8 = 1,
    /// `u16`.
    U16 = 2,
    /// `i16`.
    I16 = 3,
    /// `u32`.
    U32 = 4,
    /// `i32`.
    I32 = 5,
    /// `f32`.
    F32 = 6,
    /// A boolean stored as one byte, 0 or 1.
    Bool = 7,
    /// A UTF-8 string with a `u64` length.
    String = 8,
    /// An array: element type, `u64` count, elements.
    Array = 9,
    /// `u64`.
    U64 = 10,
    /// `i64`.
    I64 = 11,
    /// `f64`.
    F64 = 12,
}

impl ValueType {
    /// Every type, in code order.
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with GGUF code `code`, if there is one.
    pub fn from_code(code: u32) -> Option<ValueType> {
        ValueType::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// GGUF's code for the type.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The smallest number of bytes one value of this type takes in a file (for a string its
    /// length field, for an array its element type and count).
    pub fn min_size(self) -> usize {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }

    /// The name gguf-py uses (`UINT8`, `FLOAT32`, `STRING`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "UINT8",
            ValueType::I8 => "INT8",
            ValueType::U16 => "UINT16",
            ValueType::I16 => "INT16",
            ValueType::U32 => "UINT32",
            ValueType::I32 => "INT32",
            ValueType::F32 => "FLOAT32",
            ValueType::Bool => "BOOL",
            ValueType::String => "STRING",
            ValueType::Array => "ARRAY",
            ValueType::U64 => "UINT64",
            ValueType::I64 => "INT64",
            ValueType::F64 => "FLOAT64",
        }
    }

    /// Whether the type is an integer type.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            ValueType::U8
                | ValueType::I8
                | ValueType::U16
                | ValueType::I16
                | ValueType::U32
                | ValueType::I32
                | ValueType::U64
                | ValueType::I64
        )
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// A boolean.
    Bool(bool),
    /// A string.
    String(String),
    /// An array.
    Array(Array),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// An integer value of any integer type as `i128` (which holds them all).
    fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// An integer value of any integer type that is not negative, as `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|v| u64::try_from(v).ok())
    }

    /// An integer value of any integer type that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_i128().and_then(|v| i64::try_from(v).ok())
    }

    /// An integer value of any integer type that fits `T`.
    pub fn as_int<T: TryFrom<i128>>(&self) -> Option<T> {
        self.as_i128().and_then(|v| T::try_from(v).ok())
    }

    /// A floating-point value (`f32` or `f64`) as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// A boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// An array of metadata values of one element type, stored as a typed vector (a vocabulary of
/// 262144 tokens is one `Vec<String>`, not 262144 boxed values). Arrays of arrays hold inner
/// arrays that each have their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// Boolean elements.
    Bool(Vec<bool>),
    /// String elements.
    String(Vec<String>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// Array elements.
    Array(Vec<Array>),
}

/// Applies `$body` to the vector inside an [`Array`] whatever its element type.
macro_rules! each_vec {
    ($a:expr, $v:ident => $body:expr) => {
        match $a {
            Array::U8($v) => $body,
            Array::I8($v) => $body,
            Array::U16($v) => $body,
            Array::I16($v) => $body,
            Array::U32($v) => $body,
            Array::I32($v) => $body,
            Array::F32($v) => $body,
            Array::Bool($v) => $body,
            Array::String($v) => $body,
            Array::U64($v) => $body,
            Array::I64($v) => $body,
            Array::F64($v) => $body,
            Array::Array($v) => $body,
        }
    };
}

/// Typed slice accessors of [`Array`].
macro_rules! slice_accessors {
    ($($(#[$doc:meta])* $name:ident, $variant:ident, $t:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> Option<&[$t]> {
                match self {
                    Array::$variant(v) => Some(v),
                    _ => None,
                }
            }
        )*
    };
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        each_vec!(self, v => v.len())
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type of the elements.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
            Array::Array(_) => ValueType::Array,
        }
    }

    /// Element `i` as a [`Value`] (cloned), or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(i)?),
            Array::I8(v) => Value::I8(*v.get(i)?),
            Array::U16(v) => Value::U16(*v.get(i)?),
            Array::I16(v) => Value::I16(*v.get(i)?),
            Array::U32(v) => Value::U32(*v.get(i)?),
            Array::I32(v) => Value::I32(*v.get(i)?),
            Array::F32(v) => Value::F32(*v.get(i)?),
            Array::Bool(v) => Value::Bool(*v.get(i)?),
            Array::String(v) => Value::String(v.get(i)?.clone()),
            Array::U64(v) => Value::U64(*v.get(i)?),
            Array::I64(v) => Value::I64(*v.get(i)?),
            Array::F64(v) => Value::F64(*v.get(i)?),
            Array::Array(v) => Value::Array(v.get(i)?.clone()),
        })
    }

    /// The elements of an integer array of any integer type as `i64`s, or `None` when the
    /// elements are not integers or one does not fit `i64`.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        fn conv<T: Copy>(v: &[T]) -> Option<Vec<i64>>
        where
            i64: TryFrom<T>,
        {
            v.iter().map(|&x| i64::try_from(x).ok()).collect()
        }
        match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => conv(v),
            _ => None,
        }
    }

    slice_accessors! {
        /// The elements of a `u8` array.
        as_u8_slice, U8, u8;
        /// The elements of an `i8` array.
        as_i8_slice, I8, i8;
        /// The elements of a `u16` array.
        as_u16_slice, U16, u16;
        /// The elements of an `i16` array.
        as_i16_slice, I16, i16;
        /// The elements of a `u32` array.
        as_u32_slice, U32, u32;
        /// The elements of an `i32` array.
        as_i32_slice, I32, i32;
        /// The elements of an `f32` array.
        as_f32_slice, F32, f32;
        /// The elements of a boolean array.
        as_bool_slice, Bool, bool;
        /// The elements of a string array.
        as_str_slice, String, String;
        /// The elements of a `u64` array.
        as_u64_slice, U64, u64;
        /// The elements of an `i64` array.
        as_i64_slice, I64, i64;
        /// The elements of an `f64` array.
        as_f64_slice, F64, f64;
        /// The elements of an array of arrays.
        as_array_slice, Array, Array;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for (i, t) in ValueType::ALL.into_iter().enumerate() {
            assert_eq!(t.code() as usize, i);
            assert_eq!(ValueType::from_code(t.code()), Some(t));
        }
        assert_eq!(ValueType::from_code(13), None);
        assert_eq!(ValueType::from_code(u32::MAX), None);
    }

    #[test]
    fn integer_accessors_accept_every_integer_type_that_fits() {
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::I32(-7).as_u64(), None);
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(Value::I64(i64::MIN).as_i64(), Some(i64::MIN));
        assert_eq!(Value::U64(300).as_int::<u8>(), None);
        assert_eq!(Value::U16(300).as_int::<u32>(), Some(300));
        assert_eq!(Value::F32(1.0).as_u64(), None);
        assert_eq!(Value::F32(1.5).as_f64(), Some(1.5));
        assert_eq!(Value::Bool(true).as_f64(), None);
    }

    #[test]
    fn arrays_know_their_length_type_and_elements() {
        let a = Array::Array(vec![Array::U8(vec![1, 2]), Array::String(vec!["x".into()])]);
        assert_eq!(a.len(), 2);
        assert_eq!(a.element_type(), ValueType::Array);
        assert_eq!(a.get(1), Some(Value::Array(Array::String(vec!["x".into()]))));
        assert_eq!(a.get(2), None);
        assert_eq!(Array::U64(vec![u64::MAX]).to_i64_vec(), None);
        assert_eq!(Array::I8(vec![-1, 2]).to_i64_vec(), Some(vec![-1, 2]));
        assert_eq!(Array::F32(vec![1.0]).as_f32_slice(), Some(&[1.0f32][..]));
        assert_eq!(Array::F32(vec![1.0]).as_f64_slice(), None);
    }
}
