//! `closeAllSessions` ends the loads in progress (issue 39): the load answers `Cancelled` and
//! nothing stays loaded, whether the close comes at a progress event of the load (on its own
//! thread) or at any moment from another thread. A file of its own: the close is
//! process-wide.

mod common;

use common::{call, gemma};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tessera_ffi::{set_event_listener, EventListener};

fn load() -> Value {
    call(
        json!({"method": "loadModel", "path": gemma(), "requestId": "load", "options": {"device": "CPU", "nCtx": 64}}),
    )
}

/// Calls `closeAllSessions` at the first progress event of a load.
struct CloseAtProgress(Arc<AtomicBool>);

impl EventListener for CloseAtProgress {
    fn on_event(&self, event_json: String) {
        let e: Value = serde_json::from_str(&event_json).unwrap();
        if e["type"] == "loadProgress" && !self.0.swap(true, Ordering::SeqCst) {
            let r = call(json!({"method": "closeAllSessions"}));
            assert!(r["ok"].is_object(), "{r}");
        }
    }
}

#[test]
fn close_all_sessions_ends_loads_in_progress() {
    // At the load's first progress event.
    let closed = Arc::new(AtomicBool::new(false));
    set_event_listener(Some(Box::new(CloseAtProgress(closed.clone()))));
    let r = load();
    set_event_listener(None);
    assert!(closed.load(Ordering::SeqCst));
    assert_eq!(r["error"]["kind"], "Cancelled", "{r}");
    assert_eq!(call(json!({"method": "closeAllSessions"}))["ok"]["closed"], 0, "left loaded");

    // From another thread, at moments spread over the load: whichever wins, nothing the close
    // could reach stays loaded (a model the load finished is released by the close, or refused
    // by the load; only a load that began after the close keeps its model).
    let whole = std::time::Instant::now();
    let r = load();
    let model = r["ok"]["model"].as_u64().unwrap_or_else(|| panic!("{r}"));
    let load_time = whole.elapsed();
    call(json!({"method": "releaseModel", "model": model}));
    let (mut cancelled, mut released, mut after) = (0, 0, 0);
    for i in 0..12u32 {
        let loading = std::thread::spawn(load);
        std::thread::sleep(load_time * i / 10);
        call(json!({"method": "closeAllSessions"}));
        let r = loading.join().unwrap();
        match r["error"]["kind"].as_str() {
            Some("Cancelled") => cancelled += 1,
            Some(other) => panic!("{other}: {r}"),
            None => {
                let m = r["ok"]["model"].as_u64().unwrap();
                let info = call(json!({"method": "modelInfo", "model": m}));
                if info["error"]["kind"] == "Closed" {
                    released += 1;
                } else {
                    // The thread began its load after the close ran: a load like any other.
                    assert!(info["ok"].is_object(), "{info}");
                    after += 1;
                    call(json!({"method": "releaseModel", "model": m}));
                }
            }
        }
        let left = call(json!({"method": "closeAllSessions"}))["ok"]["closed"].clone();
        assert_eq!(left, 0, "round {i}: a model stayed loaded");
    }
    eprintln!(
        "12 races: {cancelled} loads cancelled, {released} loaded and released by the close, \
         {after} begun after it"
    );
    assert!(cancelled > 0, "no load was caught in progress");
}
