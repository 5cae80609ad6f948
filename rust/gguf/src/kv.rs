//! Reading metadata values: scalars, strings and (nested) arrays.

use crate::error::{GgufError, Result};
use crate::reader::Cursor;
use crate::value::{Array, Value, ValueType};

/// The deepest nesting of arrays accepted: an array of scalars has depth 1, an array of arrays
/// of scalars depth 2. Deeper nesting is [`GgufError::NestingTooDeep`] (recursion is bounded).
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Reads one value of type `vt` for metadata `key`.
pub(crate) fn read_value(c: &mut Cursor<'_>, vt: ValueType, key: &str) -> Result<Value> {
    let what = || format!("value of {key:?}");
    Ok(match vt {
        ValueType::U8 => Value::U8(c.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(i8::from_le_bytes(c.array(what)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Bool => {
            let offset = c.offset();
            Value::Bool(to_bool(c.array::<1>(what)?[0], key, offset)?)
        }
        ValueType::String => Value::String(c.string(what)?),
        ValueType::Array => Value::Array(read_array(c, key, 1)?),
    })
}

fn to_bool(b: u8, key: &str, offset: usize) -> Result<bool> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::BadBool { key: key.to_string(), value, offset }),
    }
}

/// Reads an array (element type, count, elements) at nesting depth `depth`.
fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<Array> {
    let start = c.offset();
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            key: key.to_string(),
            max: MAX_ARRAY_DEPTH,
            offset: start,
        });
    }
    let code = c.u32(|| format!("element type of an array in {key:?}"))?;
    let et = ValueType::from_code(code).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        code,
        offset: start,
    })?;
    let count_at = c.offset();
    let count = c.u64(|| format!("element count of an array in {key:?}"))?;
    let n = c.check_count(count, et.min_size(), count_at, || {
        format!("element count of an array of {et} in {key:?}")
    })?;
    let what = || format!("elements of an array in {key:?}");
    // Fixed-size elements: the count check above guarantees the bytes are there.
    macro_rules! fixed {
        ($variant:ident, $t:ty) => {{
            const SIZE: usize = std::mem::size_of::<$t>();
            let bytes = c.take((n * SIZE) as u64, what)?;
            Array::$variant(
                bytes
                    .chunks_exact(SIZE)
                    .map(|b| {
                        let mut a = [0u8; SIZE];
                        a.copy_from_slice(b);
                        <$t>::from_le_bytes(a)
                    })
                    .collect(),
            )
        }};
    }
    Ok(match et {
        ValueType::U8 => Array::U8(c.take(n as u64, what)?.to_vec()),
        ValueType::I8 => fixed!(I8, i8),
        ValueType::U16 => fixed!(U16, u16),
        ValueType::I16 => fixed!(I16, i16),
        ValueType::U32 => fixed!(U32, u32),
        ValueType::I32 => fixed!(I32, i32),
        ValueType::F32 => fixed!(F32, f32),
        ValueType::U64 => fixed!(U64, u64),
        ValueType::I64 => fixed!(I64, i64),
        ValueType::F64 => fixed!(F64, f64),
        ValueType::Bool => {
            let at = c.offset();
            let bytes = c.take(n as u64, what)?;
            let mut v = Vec::with_capacity(n);
            for (i, &b) in bytes.iter().enumerate() {
                v.push(to_bool(b, key, at + i)?);
            }
            Array::Bool(v)
        }
        ValueType::String => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(c.string(|| format!("string {i} of an array in {key:?}"))?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}
