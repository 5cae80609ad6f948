//! What every fuzz target of the C ABI checks of a response: one JSON object with `ok`, or an
//! `error` of a known kind other than `Internal` (the kind left for bugs), with a message.

use serde_json::Value;
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// The kinds a response may give, `Internal` excepted.
pub const KINDS: &[&str] = &[
    "InvalidGraph",
    "UnknownOp",
    "UnknownType",
    "ShapeMismatch",
    "DataLength",
    "UnknownDevice",
    "InvalidArgument",
    "Unsupported",
    "Cancelled",
    "Aborted",
    "Closed",
    "InvalidModel",
    "ContextFull",
    "OutOfMemory",
    "Backend",
    "Network",
    "Storage",
];

/// Whether each request and response is printed to stderr (`TESSERA_FUZZ_ECHO=1`, for
/// replaying an input by hand: `TESSERA_FUZZ_ECHO=1 target/afl/release/TARGET < FILE`).
fn echo() -> bool {
    static ECHO: OnceLock<bool> = OnceLock::new();
    *ECHO.get_or_init(|| std::env::var_os("TESSERA_FUZZ_ECHO").is_some_and(|v| v == "1"))
}

/// Sends one request through the C ABI and checks the response's form (see the module docs).
pub fn call(request: &[u8]) -> Value {
    let c = CString::new(request).expect("no NUL inside");
    // SAFETY: a valid NUL-terminated string; the response is freed once below.
    let text = unsafe {
        let response = tessera_ffi::c_api::tessera_call_json(c.as_ptr());
        assert!(!response.is_null(), "NULL response");
        let text = CStr::from_ptr(response).to_str().expect("a UTF-8 response").to_string();
        tessera_ffi::c_api::tessera_free_string(response);
        text
    };
    if echo() {
        eprintln!("> {}\n< {text}", String::from_utf8_lossy(request));
    }
    let v: Value = serde_json::from_str(&text).expect("the response is JSON");
    let obj = v.as_object().expect("the response is an object");
    assert_eq!(obj.len(), 1, "one of ok / error: {text}");
    if let Some(e) = obj.get("error") {
        let kind = e["kind"].as_str().expect("a kind");
        let message = e["message"].as_str().expect("a message");
        assert!(kind != "Internal", "Internal error: {message}");
        assert!(KINDS.contains(&kind), "unknown kind {kind}: {message}");
        assert!(!message.is_empty(), "an empty message for {kind}");
    } else {
        assert!(obj.contains_key("ok"), "neither ok nor error: {text}");
    }
    v
}
