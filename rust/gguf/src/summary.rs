//! A GGUF file's header, metadata and tensor table as one JSON object (what `tessera gguf
//! --json` prints and the JSON protocol's `ggufInfo` answers):
//!
//! | key | value |
//! |---|---|
//! | `file` | the path as given |
//! | `version` | GGUF version (2 or 3) |
//! | `file_size` | bytes |
//! | `alignment` | alignment of tensor data |
//! | `data_offset` | byte where the data section starts |
//! | `metadata` | array, in file order, of `{"key", "type", "value"}`; `type` is gguf-py's name (`UINT32`, `FLOAT32`, `STRING`, `ARRAY`, ...); arrays add `element_type` and `len`, and `value` holds their first `array_items` items with `truncated` true when some were left out; nested arrays nest; non-finite floats are `null` |
//! | `tensors` | array, in file order, of `{"name", "type", "shape", "bytes", "offset"}`: ggml type name, dimensions innermost first, size in bytes, offset relative to the data section |

use crate::{Array, GgufFile, Value};
use serde_json::{json, Value as Json};

/// The JSON object described in the module documentation, arrays cut to `array_items` items.
pub fn to_json(path: &str, f: &GgufFile, array_items: usize) -> Json {
    let metadata: Vec<Json> = f
        .metadata()
        .iter()
        .map(|(k, v)| {
            let mut o = json!({ "key": k, "type": v.value_type().name() });
            match v {
                Value::Array(a) => {
                    o["element_type"] = json!(a.element_type().name());
                    o["len"] = json!(a.len());
                    o["value"] = array_json(a, array_items);
                    o["truncated"] = json!(a.len() > array_items);
                }
                v => o["value"] = scalar_json(v),
            }
            o
        })
        .collect();
    let tensors: Vec<Json> = f
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name, "type": t.dtype.name(), "shape": t.shape(),
                "bytes": t.size, "offset": t.offset,
            })
        })
        .collect();
    json!({
        "file": path,
        "version": f.version(),
        "file_size": f.file_size(),
        "alignment": f.alignment(),
        "data_offset": f.data_offset(),
        "metadata": metadata,
        "tensors": tensors,
    })
}

/// A scalar (or an array, whole) as JSON.
pub fn scalar_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::Array(a) => array_json(a, usize::MAX),
    }
}

/// The first `n` items of `a` (inner arrays of arrays are cut to `n` items too).
fn array_json(a: &Array, n: usize) -> Json {
    match a {
        Array::Array(v) => Json::Array(v.iter().take(n).map(|x| array_json(x, n)).collect()),
        a => Json::Array(
            (0..a.len().min(n)).filter_map(|i| a.get(i)).map(|v| scalar_json(&v)).collect(),
        ),
    }
}
