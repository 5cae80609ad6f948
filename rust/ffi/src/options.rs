//! The checks of the options sessions and models share (thread count, memory budget), for the
//! typed API and for the JSON protocol's deserializers, so that both give the same message.

use crate::error::{FfiResult, TesseraError};
use serde::de::{Error as _, Unexpected};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The largest thread count a session or model accepts (the CPU backend's limit).
pub const MAX_THREADS: u32 = tessera_cpu::backend::MAX_THREADS as u32;

/// A thread count as given (`None`: the default), checked by the CPU backend's one check.
pub(crate) fn check_threads(threads: Option<u32>) -> FfiResult<Option<usize>> {
    threads.map(|n| tessera_cpu::backend::check_threads(n.into())).transpose().map_err(Into::into)
}

/// A memory budget as given (`None`: the default).
pub(crate) fn check_budget(budget: Option<u64>) -> FfiResult<Option<u64>> {
    match budget {
        Some(0) => Err(TesseraError::invalid_argument(
            "memory budget 0 must be at least 1 byte (or null for the default)",
        )),
        b => Ok(b),
    }
}

/// What a JSON value is, for serde's "invalid type" message (which names the value as given).
fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (_, _, f) => Unexpected::Float(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// An optional non-negative integer option: `null` is `None`, anything but an integer >= 0 is
/// an error naming the value and `expected`.
fn optional_count<'de, D: Deserializer<'de>>(
    d: D,
    expected: &str,
) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => match v.as_u64() {
            Some(n) => Ok(Some(n)),
            None => Err(D::Error::invalid_value(unexpected(&v), &expected)),
        },
    }
}

/// `threads` of the protocol's options: null, or a thread count ([`check_threads`]'s range,
/// reported as given also beyond 32 bits).
pub(crate) fn deserialize_threads<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<u32>, D::Error> {
    let expected = format!("a thread count between 1 and {MAX_THREADS}");
    let Some(n) = optional_count(d, &expected)? else { return Ok(None) };
    tessera_cpu::backend::check_threads(n).map_err(|e| D::Error::custom(TesseraError::from(e)))?;
    // Within 1..=MAX_THREADS.
    Ok(u32::try_from(n).ok())
}

/// `memoryBudget` of the protocol's options: null, or bytes ([`check_budget`]'s range).
pub(crate) fn deserialize_budget<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let expected = "a number of bytes >= 1 (or null for the default)";
    let budget = optional_count(d, expected)?;
    check_budget(budget).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    struct Options {
        #[serde(default, deserialize_with = "deserialize_threads")]
        threads: Option<u32>,
        #[serde(default, deserialize_with = "deserialize_budget")]
        budget: Option<u64>,
    }

    fn parse(v: Value) -> Result<Options, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    /// The typed API and the protocol refuse the same thread counts with the same message.
    #[test]
    fn thread_counts_and_budgets_are_checked_once() {
        assert_eq!(check_threads(Some(4)).unwrap(), Some(4));
        assert_eq!(check_threads(None).unwrap(), None);
        assert_eq!(parse(serde_json::json!({"threads": 512})).unwrap().threads, Some(512));
        assert_eq!(parse(serde_json::json!({"threads": null})).unwrap().threads, None);
        for n in [0u32, 513] {
            let typed = check_threads(Some(n)).unwrap_err();
            assert_eq!(typed.kind(), "InvalidArgument");
            assert!(typed.message().contains(&format!("thread count {n} must be")), "{typed}");
            let json = parse(serde_json::json!({ "threads": n })).unwrap_err();
            assert!(json.contains(typed.message()), "{json} vs {typed}");
        }
        for (v, shown) in [
            (serde_json::json!(4294967297u64), "4294967297"),
            (serde_json::json!(-3), "-3"),
            (serde_json::json!(2.5), "2.5"),
            (serde_json::json!("4"), "\"4\""),
        ] {
            let e = parse(serde_json::json!({ "threads": v })).unwrap_err();
            assert!(e.contains("thread count") && e.contains(shown) && e.contains("512"), "{e}");
        }
        assert_eq!(parse(serde_json::json!({"budget": 7})).unwrap().budget, Some(7));
        let typed = check_budget(Some(0)).unwrap_err();
        let json = parse(serde_json::json!({"budget": 0})).unwrap_err();
        assert!(json.contains(typed.message()), "{json} vs {typed}");
        let e = parse(serde_json::json!({"budget": "1 GiB"})).unwrap_err();
        assert!(e.contains("\"1 GiB\"") && e.contains("bytes"), "{e}");
    }
}
