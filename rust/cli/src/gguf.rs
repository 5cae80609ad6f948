//! `tessera gguf FILE [--json] [--full]`: the header, metadata and tensor table of a GGUF file.
//!
//! The file is memory-mapped and only its header, metadata and tensor table are read, so a
//! 250 MB model prints at once. Text output summarizes arrays longer than
//! [`TEXT_ARRAY_ITEMS`] items (type, length, first items).
//!
//! `--json` prints one JSON object:
//!
//! | key | value |
//! |---|---|
//! | `file` | the path as given |
//! | `version` | GGUF version (2 or 3) |
//! | `file_size` | bytes |
//! | `alignment` | alignment of tensor data |
//! | `data_offset` | byte where the data section starts |
//! | `metadata` | array, in file order, of `{"key", "type", "value"}`; `type` is gguf-py's name (`UINT32`, `FLOAT32`, `STRING`, `ARRAY`, ...); arrays add `element_type` and `len`, and `value` holds their first [`JSON_ARRAY_ITEMS`] items (all with `--full`) with `truncated` true when some were left out; nested arrays nest; non-finite floats are `null` |
//! | `tensors` | array, in file order, of `{"name", "type", "shape", "bytes", "offset"}`: ggml type name, dimensions innermost first, size in bytes, offset relative to the data section |

use serde_json::{json, Value as Json};
use std::fmt::Write as _;
use tessera_gguf::{Array, GgufFile, Value};

/// Items of an array shown in text output.
pub const TEXT_ARRAY_ITEMS: usize = 8;

/// Items of an array given in JSON output without `--full`.
pub const JSON_ARRAY_ITEMS: usize = 64;

/// Runs `tessera gguf` with the arguments after `gguf`; returns what to print.
pub fn run(args: &[String]) -> Result<String, String> {
    let mut path = None;
    let (mut as_json, mut full) = (false, false);
    for a in args {
        match a.as_str() {
            "--json" => as_json = true,
            "--full" => full = true,
            s if s.starts_with('-') => return Err(format!("unknown option {s:?} of tessera gguf")),
            s if path.is_none() => path = Some(s.to_string()),
            s => return Err(format!("unexpected argument {s:?} (one file at a time)")),
        }
    }
    let path = path.ok_or("usage: tessera gguf FILE [--json] [--full]")?;
    let file = GgufFile::open(&path).map_err(|e| e.to_string())?;
    Ok(if as_json {
        let limit = if full { usize::MAX } else { JSON_ARRAY_ITEMS };
        let mut s = serde_json::to_string_pretty(&to_json(&path, &file, limit))
            .map_err(|e| e.to_string())?;
        s.push('\n');
        s
    } else {
        to_text(&path, &file, if full { usize::MAX } else { TEXT_ARRAY_ITEMS })
    })
}

/// The JSON object described in the module documentation.
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

fn scalar_json(v: &Value) -> Json {
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

/// A value as one line of text, arrays cut to `n` items.
fn value_text(v: &Value, n: usize) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::F32(x) => format!("{x:?}"),
        Value::F64(x) => format!("{x:?}"),
        Value::Array(a) => array_text(a, n),
        v => scalar_json(v).to_string(),
    }
}

fn array_text(a: &Array, n: usize) -> String {
    let items: Vec<String> = match a {
        Array::Array(v) => v.iter().take(n).map(|x| array_text(x, n)).collect(),
        a => (0..a.len().min(n)).filter_map(|i| a.get(i)).map(|v| value_text(&v, n)).collect(),
    };
    let more = if a.len() > n { ", ..." } else { "" };
    format!("[{}]{more}", items.join(", "))
}

/// The text report.
pub fn to_text(path: &str, f: &GgufFile, array_items: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{path}: GGUF version {}", f.version());
    let _ = writeln!(
        out,
        "  {} bytes, alignment {}, data section at byte {} ({} bytes)",
        f.file_size(),
        f.alignment(),
        f.data_offset(),
        f.file_size().saturating_sub(f.data_offset())
    );
    let _ = writeln!(out, "\nmetadata ({} entries):", f.metadata().len());
    let width = f.metadata().iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in f.metadata() {
        let ty = match v {
            Value::Array(a) => format!("ARRAY[{}] of {}", a.len(), a.element_type()),
            v => v.value_type().name().to_string(),
        };
        let _ = writeln!(out, "  {k:width$}  {ty:<24} {}", value_text(v, array_items));
    }
    let _ = writeln!(out, "\ntensors ({}):", f.tensors().len());
    let width = f.tensors().iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "  {:width$}  {:<5} {:<24} {:>12} {:>12}",
        "name", "type", "shape", "bytes", "offset"
    );
    let mut total = 0usize;
    for t in f.tensors() {
        total = total.saturating_add(t.size);
        let shape = format!("{:?}", t.shape());
        let _ = writeln!(
            out,
            "  {:width$}  {:<5} {shape:<24} {:>12} {:>12}",
            t.name,
            t.dtype.name(),
            t.size,
            t.offset
        );
    }
    let _ = writeln!(out, "  {} tensors, {total} bytes", f.tensors().len());
    out
}
