//! Shared by tessera-ffi's integration tests: the model files and a request through the C ABI.
#![allow(dead_code)]

use serde_json::Value;
use std::ffi::{CStr, CString};
use tessera_ffi::c_api::{tessera_call_json, tessera_free_string};

/// The model `name` under `target/models` (Gemma 3 270M Q4_K_M: `TESSERA_GEMMA_GGUF` first).
pub fn model_path(name: &str) -> String {
    if name == "gemma3-270m-q4_k_m" {
        if let Ok(p) = std::env::var("TESSERA_GEMMA_GGUF") {
            return p;
        }
    }
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../target/models/{name}.gguf"));
    assert!(p.exists(), "{} is missing: run scripts/setup.sh", p.display());
    p.to_string_lossy().into_owned()
}

/// Gemma 3 270M Q4_K_M.
pub fn gemma() -> String {
    model_path("gemma3-270m-q4_k_m")
}

/// A request through the C ABI (`tessera_call_json`), its response parsed.
pub fn call(request: Value) -> Value {
    let c = CString::new(request.to_string()).unwrap();
    // SAFETY: a valid NUL-terminated string; the response is freed once below.
    unsafe {
        let response = tessera_call_json(c.as_ptr());
        let text = CStr::from_ptr(response).to_str().unwrap().to_string();
        tessera_free_string(response);
        serde_json::from_str(&text).unwrap()
    }
}
