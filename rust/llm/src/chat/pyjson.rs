//! The `tojson` filter as Hugging Face transformers defines it for chat templates: Python's
//! `json.dumps(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
//! so tool schemas and arguments render byte for byte as they do there (minijinja's own
//! `tojson` escapes `<`, `>`, `&` and `'` for HTML, which chat templates must not do).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};
use std::fmt::Write;

/// Nesting deeper than this is an error rather than a stack overflow.
const MAX_DEPTH: usize = 128;

/// The filter: `value | tojson(indent=..., ensure_ascii=..., separators=..., sort_keys=...)`.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => match v.as_i64() {
                Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
                None => return Err(bad("tojson: indent must be a number or a string")),
            },
        },
    };
    let (item_sep, key_sep) = match separators {
        None => (if indent.is_some() { "," } else { ", " }.to_string(), ": ".to_string()),
        Some(v) if v.is_none() => {
            (if indent.is_some() { "," } else { ", " }.to_string(), ": ".to_string())
        }
        Some(v) => {
            let a = v.get_item_by_index(0)?;
            let b = v.get_item_by_index(1)?;
            match (a.as_str(), b.as_str()) {
                (Some(a), Some(b)) => (a.to_string(), b.to_string()),
                _ => return Err(bad("tojson: separators must be a pair of strings")),
            }
        }
    };
    let mut w = Writer {
        out: String::new(),
        indent,
        item_sep,
        key_sep,
        ensure_ascii: ensure_ascii.unwrap_or(false),
        sort_keys: sort_keys.unwrap_or(false),
    };
    w.value(value, 0)?;
    Ok(w.out)
}

fn bad(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_string())
}

struct Writer {
    out: String,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

impl Writer {
    fn value(&mut self, v: &Value, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(bad("tojson: value nested too deeply"));
        }
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self.out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.number(v),
            ValueKind::String | ValueKind::Plain => {
                let s = v.to_string();
                self.string(&s);
            }
            ValueKind::Bytes => {
                self.string(&String::from_utf8_lossy(v.as_bytes().unwrap_or_default()))
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.item_start(i == 0, depth + 1);
                    self.value(item, depth + 1)?;
                }
                self.close(']', items.is_empty(), depth);
            }
            ValueKind::Map => {
                let mut pairs: Vec<(String, Value)> = Vec::new();
                for key in v.try_iter()? {
                    let val = v.get_item(&key)?;
                    pairs.push((key_text(&key), val));
                }
                if self.sort_keys {
                    pairs.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.out.push('{');
                for (i, (k, val)) in pairs.iter().enumerate() {
                    self.item_start(i == 0, depth + 1);
                    self.string(k);
                    let sep = self.key_sep.clone();
                    self.out.push_str(&sep);
                    self.value(val, depth + 1)?;
                }
                self.close('}', pairs.is_empty(), depth);
            }
            ValueKind::Invalid => return Err(bad("tojson: the value is invalid")),
            _ => return Err(bad("tojson: this value cannot be written as JSON")),
        }
        Ok(())
    }

    fn item_start(&mut self, first: bool, depth: usize) {
        if !first {
            let sep = self.item_sep.clone();
            self.out.push_str(&sep);
        }
        if let Some(ind) = &self.indent {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str(ind);
            }
        }
    }

    fn close(&mut self, c: char, empty: bool, depth: usize) {
        if !empty {
            if let Some(ind) = &self.indent {
                self.out.push('\n');
                for _ in 0..depth {
                    self.out.push_str(ind);
                }
            }
        }
        self.out.push(c);
    }

    fn number(&mut self, v: &Value) {
        if v.is_integer() {
            let _ = write!(self.out, "{v}");
            return;
        }
        match f64::try_from(v.clone()) {
            Ok(f) => self.out.push_str(&python_float_repr(f)),
            Err(_) => {
                let _ = write!(self.out, "{v}");
            }
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c if self.ensure_ascii && (c as u32) > 0x7e => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let _ = write!(self.out, "\\u{u:04x}");
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// A dict key as Python's `json.dumps` writes it: strings as they are, numbers and booleans as
/// their JSON text, `None` as `null`.
fn key_text(key: &Value) -> String {
    match key.kind() {
        ValueKind::None | ValueKind::Undefined => "null".to_string(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_string(),
        ValueKind::Number if !key.is_integer() => {
            f64::try_from(key.clone()).map(python_float_repr).unwrap_or_else(|_| key.to_string())
        }
        _ => key.to_string(),
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, fixed notation for decimal
/// exponents in `[-4, 16)` (always with a fractional part), scientific otherwise (`1e-05`,
/// `1.5e+16`); `NaN`, `Infinity` and `-Infinity` as `json.dumps` writes them.
pub(super) fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7", "5e0".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let point = exp + 1; // digits before the decimal point
        let text = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point >= n {
            format!("{}{}.0", digits, "0".repeat((point - n) as usize))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        };
        format!("{sign}{text}")
    } else {
        let frac = &digits[1..];
        let m = if frac.is_empty() {
            digits[..1].to_string()
        } else {
            format!("{}.{}", &digits[..1], frac)
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}
