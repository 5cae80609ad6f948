//! Typed metadata accessors of [`GgufFile`]: `get_*` (the key must be there) and `opt_*`
//! (`None` when it is absent); both fail on a value of the wrong type.
//!
//! Integer accessors accept a value of any integer type that fits the type asked for, since
//! files in the wild mix `u32`, `i32` and `u64` for the same key; float accessors accept `f32`
//! and `f64`.

use crate::error::{GgufError, Result};
use crate::file::GgufFile;
use crate::value::{Array, Value};

fn mismatch(key: &str, expected: &'static str, v: &Value) -> GgufError {
    GgufError::TypeMismatch { key: key.to_string(), expected, found: v.value_type() }
}

fn int<T: TryFrom<i128>>(key: &str, v: &Value, name: &'static str) -> Result<T> {
    if !v.value_type().is_integer() {
        return Err(mismatch(key, name, v));
    }
    v.as_int::<T>().ok_or_else(|| GgufError::OutOfRange {
        key: key.to_string(),
        value: format!("{v:?}"),
        expected: name,
    })
}

fn conv_u32(key: &str, v: &Value) -> Result<u32> {
    int(key, v, "an integer that fits u32")
}
fn conv_u64(key: &str, v: &Value) -> Result<u64> {
    int(key, v, "an integer that fits u64")
}
fn conv_i32(key: &str, v: &Value) -> Result<i32> {
    int(key, v, "an integer that fits i32")
}
fn conv_i64(key: &str, v: &Value) -> Result<i64> {
    int(key, v, "an integer that fits i64")
}
fn conv_f32(key: &str, v: &Value) -> Result<f32> {
    v.as_f64().map(|x| x as f32).ok_or_else(|| mismatch(key, "a float (FLOAT32 or FLOAT64)", v))
}
fn conv_f64(key: &str, v: &Value) -> Result<f64> {
    v.as_f64().ok_or_else(|| mismatch(key, "a float (FLOAT32 or FLOAT64)", v))
}
fn conv_bool(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| mismatch(key, "a BOOL", v))
}
fn conv_str<'a>(key: &str, v: &'a Value) -> Result<&'a str> {
    v.as_str().ok_or_else(|| mismatch(key, "a STRING", v))
}
fn conv_array<'a>(key: &str, v: &'a Value) -> Result<&'a Array> {
    v.as_array().ok_or_else(|| mismatch(key, "an ARRAY", v))
}

macro_rules! accessors {
    ($($get:ident, $opt:ident, $conv:ident, $t:ty, $what:literal;)*) => {
        impl GgufFile {
            $(
                #[doc = concat!("Metadata `key` as ", $what, "; [`GgufError::MissingKey`] when \
                    it is absent, [`GgufError::TypeMismatch`] (or [`GgufError::OutOfRange`]) \
                    when its value is not one.")]
                pub fn $get(&self, key: &str) -> Result<$t> {
                    let v = self.get(key).ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
                    $conv(key, v)
                }

                #[doc = concat!("Metadata `key` as ", $what, ", `None` when it is absent; \
                    an error when its value is not one.")]
                pub fn $opt(&self, key: &str) -> Result<Option<$t>> {
                    self.get(key).map(|v| $conv(key, v)).transpose()
                }
            )*
        }
    };
}

accessors! {
    get_u32, opt_u32, conv_u32, u32, "a `u32` (any integer type whose value fits)";
    get_u64, opt_u64, conv_u64, u64, "a `u64` (any integer type whose value fits)";
    get_i32, opt_i32, conv_i32, i32, "an `i32` (any integer type whose value fits)";
    get_i64, opt_i64, conv_i64, i64, "an `i64` (any integer type whose value fits)";
    get_f32, opt_f32, conv_f32, f32, "an `f32` (an `f64` value is rounded)";
    get_f64, opt_f64, conv_f64, f64, "an `f64` (FLOAT32 or FLOAT64)";
    get_bool, opt_bool, conv_bool, bool, "a boolean";
    get_str, opt_str, conv_str, &str, "a string";
    get_array, opt_array, conv_array, &Array, "an array";
}
