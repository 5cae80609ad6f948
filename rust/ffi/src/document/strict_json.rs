//! Strict JSON: parsing into a [`serde_json::Value`] that refuses an object with the same key
//! twice, and reading a value as a type with an error that says where in the value it is.
//!
//! `serde_json` keeps the last of duplicate keys silently, so `{"version": 1, "version": 2}`
//! would read as version 2 and a request with two `"session"` keys as the second. Graph
//! documents and protocol requests are parsed here instead, so such text is an error naming the
//! key. Everything else is serde_json's: its syntax errors (with line and column) and its
//! nesting limit of 128 levels, so deep input cannot overflow the stack.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor,
};
use serde_json::{Map, Number, Value};
use serde_path_to_error::Segment;
use std::fmt;

/// Parses `text` as one JSON value, refusing duplicate object keys. The error is serde_json's
/// message (with line and column), or `duplicate key "k"` with the position after it.
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictValue.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Why a value is not a `T`, and where in it: `tensors[1].shape[0]: invalid value: integer
/// `-1`, expected usize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    /// Where, as `key.key[index]` (empty: the value itself).
    pub path: String,
    /// What is wrong (serde's message).
    pub message: String,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path.as_str() {
            "" => f.write_str(&self.message),
            path => write!(f, "{path}: {}", self.message),
        }
    }
}

/// `value` as a `T`, or the error with its place, the first `skip` segments of the path left
/// out (the variant of an externally tagged enum, say). An unknown key's place is the object
/// holding it (the message names the key).
pub fn from_value<T: DeserializeOwned>(value: Value, skip: usize) -> Result<T, ValueError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let mut segments: Vec<&Segment> = e.path().iter().skip(skip).collect();
        if message.starts_with("unknown field `") {
            segments.pop();
        }
        let mut path = String::new();
        for segment in segments {
            match segment {
                Segment::Seq { index } => path.push_str(&format!("[{index}]")),
                Segment::Map { key } | Segment::Enum { variant: key } => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Segment::Unknown => path.push_str(".?"),
            }
        }
        ValueError { path, message }
    })
}

/// A seed producing a `Value` with unique keys.
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // serde_json never yields a non-finite number from text; Null is its own answer too.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            let value = map.next_value_seed(StrictValue)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let e = from_str(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key \"a\""), "{e}");
        let e = from_str(r#"{"x": [{"b": {"c": 1, "d": 2, "c": 3}}]}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key \"c\""), "{e}");
        // The same key in sibling objects is fine.
        let v = from_str(r#"[{"a": 1}, {"a": 2.5, "b": null}]"#).unwrap();
        assert_eq!(v, serde_json::json!([{"a": 1}, {"a": 2.5, "b": null}]));
    }

    #[test]
    fn values_read_as_serde_json_reads_them() {
        for text in [r#"{"a":[1,-2,3.5,"s",true,null,{}],"b":18446744073709551615}"#, "7", "[]"] {
            assert_eq!(from_str(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        }
        assert!(from_str("{} x").is_err());
        assert!(from_str("").is_err());
        // Nesting beyond serde_json's limit is an error, not a stack overflow.
        let deep = "[".repeat(100_000);
        assert!(from_str(&deep).is_err());
    }
}
