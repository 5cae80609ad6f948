//! `embed` of several texts through the protocol (issue 39): an `embedProgress` event after
//! each text, and a cancel (`cancelGeneration`) between two texts ends it with `Cancelled`.
//! A file of its own: the protocol's event listener is process-wide.

mod common;

use common::{call, gemma};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tessera_ffi::{set_event_listener, EventListener};

/// Keeps the progress events; cancels the model's work at `cancel_at` texts done.
struct Progress {
    model: u64,
    cancel_at: Option<u64>,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl EventListener for Progress {
    fn on_event(&self, event_json: String) {
        let e: Value = serde_json::from_str(&event_json).unwrap();
        if e["type"] != "embedProgress" {
            return;
        }
        if self.cancel_at == e["done"].as_u64() {
            let r = call(json!({"method": "cancelGeneration", "model": self.model}));
            assert!(r["ok"].is_object(), "{r}");
        }
        self.seen.lock().unwrap().push(e);
    }
}

fn embed(model: u64, cancel_at: Option<u64>) -> (Value, Vec<Value>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    set_event_listener(Some(Box::new(Progress { model, cancel_at, seen: seen.clone() })));
    let texts = ["one", "two texts", "three", "four", "five"];
    let r = call(
        json!({"method": "embed", "model": model, "requestId": 7, "params": {"texts": texts}}),
    );
    set_event_listener(None);
    let seen = seen.lock().unwrap().clone();
    (r, seen)
}

#[test]
fn embed_reports_progress_and_stops_when_cancelled() {
    let loaded = call(
        json!({"method": "loadModel", "path": gemma(), "options": {"device": "CPU", "nCtx": 64}}),
    );
    let model = loaded["ok"]["model"].as_u64().unwrap_or_else(|| panic!("{loaded}"));

    let (r, seen) = embed(model, None);
    assert_eq!(r["ok"]["embeddings"].as_array().map(Vec::len), Some(5), "{r}");
    let want: Vec<Value> = (1..=5)
        .map(|done| json!({"type": "embedProgress", "requestId": 7, "done": done, "total": 5}))
        .collect();
    assert_eq!(seen, want);

    let (r, seen) = embed(model, Some(2));
    assert_eq!(r["error"]["kind"], "Cancelled", "{}", r["error"]);
    assert_eq!(r["error"]["message"], "embed cancelled after 2 of 5 texts");
    assert_eq!(seen.len(), 2);

    // The next embed runs whole again.
    let (r, _) = embed(model, None);
    assert_eq!(r["ok"]["embeddings"].as_array().map(Vec::len), Some(5), "{r}");
    call(json!({"method": "releaseModel", "model": model}));
}
