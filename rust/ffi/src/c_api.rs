//! A small C ABI over the JSON dispatcher of [`crate::json_api`], for the Node end-to-end tests
//! (through koffi): one call that takes a JSON request and returns a JSON response. See
//! docs/c-api.md and docs/native-protocol.md.
//!
//! ```c
//! char *tessera_call_json(const char *request);   // never NULL; free with tessera_free_string
//! void tessera_free_string(char *response);
//! void tessera_set_event_callback(void (*callback)(const char *event_json)); // NULL: none
//! ```

use crate::error::TesseraError;
use crate::json_api::{error_text, respond};
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn to_c_string(text: String) -> *mut c_char {
    // serde_json escapes NUL as \u0000, so the text has no interior NUL byte.
    CString::new(text)
        .unwrap_or_else(|_| {
            CString::from(c"{\"error\":{\"kind\":\"Internal\",\"message\":\"NUL in response\"}}")
        })
        .into_raw()
}

/// Handles a JSON request (a NUL-terminated UTF-8 string) and returns a newly allocated JSON
/// response: `{"ok": result}` or `{"error": {"kind", "message"}}`. Never returns NULL; free
/// the response with [`tessera_free_string`]. A NULL or non-UTF-8 request gives an error
/// response.
///
/// # Safety
///
/// `request` must be NULL or point to a NUL-terminated string that stays valid and unchanged
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn tessera_call_json(request: *const c_char) -> *mut c_char {
    let response = catch_unwind(AssertUnwindSafe(|| {
        if request.is_null() {
            return error_text(&TesseraError::invalid_argument("the request is a NULL pointer"));
        }
        // SAFETY: the caller guarantees a valid NUL-terminated string (checked non-NULL above).
        let text = unsafe { CStr::from_ptr(request) };
        match text.to_str() {
            Ok(text) => respond(text),
            Err(e) => error_text(&TesseraError::invalid_argument(format!(
                "the request is not valid UTF-8: {e}"
            ))),
        }
    }))
    .unwrap_or_else(|_| error_text(&TesseraError::internal("panic in tessera_call_json")));
    to_c_string(response)
}

/// Frees a response of [`tessera_call_json`]. NULL is ignored.
///
/// # Safety
///
/// `response` must be NULL or a pointer returned by [`tessera_call_json`] that was not freed
/// yet.
#[no_mangle]
pub unsafe extern "C" fn tessera_free_string(response: *mut c_char) {
    if response.is_null() {
        return;
    }
    // SAFETY: the pointer came from `CString::into_raw` in `tessera_call_json` and is freed
    // once, as the caller guarantees.
    drop(unsafe { CString::from_raw(response) });
}

/// A C function receiving protocol events (loading progress, generated tokens) as
/// NUL-terminated JSON, valid only during the call.
pub type EventCallback = unsafe extern "C" fn(event_json: *const c_char);

/// Sets (or with NULL removes) the function that receives protocol events. It is called on the
/// thread running the request that produces them (inside `tessera_call_json`).
///
/// # Safety
///
/// `callback` must be NULL or a function that may be called from any thread with a pointer
/// valid only for the duration of the call, until it is replaced.
#[no_mangle]
pub unsafe extern "C" fn tessera_set_event_callback(callback: Option<EventCallback>) {
    crate::events::set_sink(callback.map(|cb| {
        std::sync::Arc::new(move |event: &str| {
            // serde_json escapes NUL, so the event has no interior NUL byte.
            if let Ok(text) = CString::new(event) {
                // SAFETY: the caller promised a function callable from any thread; the string
                // lives until the call returns.
                unsafe { cb(text.as_ptr()) }
            }
        }) as std::sync::Arc<dyn Fn(&str) + Send + Sync>
    }));
}
