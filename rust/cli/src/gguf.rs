//! `tessera gguf FILE [--json] [--full]`: the header, metadata and tensor table of a GGUF file.
//!
//! The file is memory-mapped and only its header, metadata and tensor table are read, so a
//! 250 MB model prints at once. Text output summarizes arrays longer than
//! [`TEXT_ARRAY_ITEMS`] items (type, length, first items).
//!
//! `--json` prints the object of [`tessera_gguf::summary`].

use std::fmt::Write as _;
use tessera_gguf::summary::{scalar_json, to_json};
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
