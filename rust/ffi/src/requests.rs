//! Cancelling long protocol calls by their `requestId` (`cancelLoad`, `cancelDownload`): a
//! call registers its id while it runs and polls its flag; a cancel that arrives before the call
//! registered (the two requests race on different threads) is remembered for a while and found
//! by the registration.

use crate::error::TesseraError;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// How many early cancels are remembered (the oldest is forgotten first).
const EARLY_CANCELS: usize = 64;

#[derive(Default)]
struct Table {
    running: HashMap<String, Arc<AtomicBool>>,
    early: VecDeque<String>,
}

fn table() -> MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The key of a request id: its JSON text (ids are strings from JavaScript; numbers work too).
fn key(id: &Value) -> Option<String> {
    match id {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A running call's registration; unregisters when dropped.
pub(crate) struct Running {
    key: Option<String>,
    flag: Arc<AtomicBool>,
}

impl Running {
    /// Whether a cancel for this call arrived.
    pub(crate) fn cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(k) = &self.key {
            let mut t = table();
            if t.running.get(k).is_some_and(|f| Arc::ptr_eq(f, &self.flag)) {
                t.running.remove(k);
            }
        }
    }
}

/// Registers the call tagged `id` (a call without an id cannot be cancelled this way).
pub(crate) fn register(id: &Value) -> Running {
    let flag = Arc::new(AtomicBool::new(false));
    let key = key(id);
    if let Some(k) = &key {
        let mut t = table();
        if let Some(at) = t.early.iter().position(|e| e == k) {
            t.early.remove(at);
            flag.store(true, Ordering::Relaxed);
        }
        t.running.insert(k.clone(), flag.clone());
    }
    Running { key, flag }
}

/// Cancels the call tagged `id`; returns whether it was running (else the cancel is kept for a
/// registration still on its way).
pub(crate) fn cancel(id: &Value) -> bool {
    let Some(k) = key(id) else { return false };
    let mut t = table();
    if let Some(flag) = t.running.get(&k) {
        flag.store(true, Ordering::Relaxed);
        return true;
    }
    if t.early.len() == EARLY_CANCELS {
        t.early.pop_front();
    }
    t.early.push_back(k);
    false
}

/// Handles `cancelLoad` and `cancelDownload` (`{"method", "requestId"}` of the call to stop);
/// `None` for other methods.
pub(crate) fn dispatch(
    method: &str,
    request: &Map<String, Value>,
) -> Option<Result<Value, TesseraError>> {
    if method != "cancelLoad" && method != "cancelDownload" {
        return None;
    }
    if let Some(k) = request.keys().find(|k| *k != "method" && *k != "requestId") {
        return Some(Err(TesseraError::invalid_argument(format!(
            "{method} request: unknown key {k:?} (known: method, requestId)"
        ))));
    }
    let id = request.get("requestId").cloned().unwrap_or(Value::Null);
    Some(Ok(json!({"cancelled": cancel(&id)})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cancel_reaches_the_running_call_or_the_one_that_registers_later() {
        let running = register(&json!("r-1"));
        assert!(!running.cancelled());
        assert!(cancel(&json!("r-1")));
        assert!(running.cancelled());
        drop(running);
        // Early: the cancel comes first.
        assert!(!cancel(&json!("r-2")));
        assert!(register(&json!("r-2")).cancelled());
        // Found once only.
        assert!(!register(&json!("r-2")).cancelled());
        // No id: never cancelled.
        assert!(!cancel(&Value::Null));
        assert!(!register(&Value::Null).cancelled());
    }

    #[test]
    fn early_cancels_are_bounded() {
        for i in 0..(EARLY_CANCELS + 10) {
            cancel(&json!(format!("bounded-{i}")));
        }
        assert!(table().early.len() <= EARLY_CANCELS);
        assert!(!register(&json!("bounded-0")).cancelled());
        assert!(register(&json!(format!("bounded-{}", EARLY_CANCELS + 9))).cancelled());
    }
}
