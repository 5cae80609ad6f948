//! `set_default_memory_budget`: the budget of sessions opened without one (the protocol fuzz
//! target's 16 MiB). A test binary of its own, since the setting is process-wide.

use serde_json::{json, Value};
use tessera_ffi::json_api::call_json;
use tessera_ffi::session::set_default_memory_budget;

fn call(request: Value) -> Value {
    serde_json::from_str(&call_json(request.to_string())).unwrap()
}

/// REPEAT of 0.5 to `n` values, then their SUM: a plan of 4n bytes and a little more.
fn repeat_sum(n: u64) -> Value {
    json!({
        "version": 1,
        "tensors": [{"name": "a", "type": "F32", "shape": [1], "values": [0.5]}],
        "nodes": [{"name": "r", "op": "REPEAT", "src": ["a"], "params": {"shape": [n]}},
                  {"name": "s", "op": "SUM", "src": ["r"]}],
        "outputs": ["s"]
    })
}

fn open(options: Value) -> u64 {
    let r = call(json!({"method": "openSession", "options": options}));
    r["ok"]["session"].as_u64().unwrap_or_else(|| panic!("{r}"))
}

fn compute(session: u64, graph: Value) -> Value {
    call(json!({"method": "compute", "session": session, "graph": graph}))
}

fn error_of(r: &Value) -> (&str, &str) {
    let e = &r["error"];
    (e["kind"].as_str().unwrap_or_else(|| panic!("an error: {r}")), e["message"].as_str().unwrap())
}

/// 2^20 values (4 MiB) over a default of 1 MiB: `OutOfMemory` naming 1048576, also for a
/// session opened before the default was set and for one-shot computes; a session's own
/// budget wins over the default; `None` restores the free-memory default, which holds it.
#[test]
fn the_default_budget_applies_to_sessions_without_one() {
    let n = 1u64 << 20;
    let before = open(json!({"device": "CPU"}));
    set_default_memory_budget(Some(1 << 20));
    let after = open(json!({"device": "CPU"}));
    let own = open(json!({"device": "CPU", "memoryBudget": 5u64 << 20}));
    for s in [before, after] {
        let r = compute(s, repeat_sum(n));
        let (kind, message) = error_of(&r);
        assert_eq!(kind, "OutOfMemory", "{r}");
        assert!(message.contains("4194") && message.contains("1048576"), "{message}");
    }
    let r =
        call(json!({"method": "compute", "graph": repeat_sum(n), "options": {"device": "CPU"}}));
    assert_eq!(error_of(&r).0, "OutOfMemory", "{r}");
    let sum = |r: &Value| {
        let data = r["ok"]["outputs"][0]["data"].as_str().unwrap_or_else(|| panic!("{r}"));
        let bytes = tessera_ffi::document::base64_decode(data).unwrap();
        f32::from_le_bytes(bytes[..4].try_into().unwrap())
    };
    assert_eq!(sum(&compute(own, repeat_sum(n))), (n / 2) as f32);
    set_default_memory_budget(None);
    assert_eq!(sum(&compute(after, repeat_sum(n))), (n / 2) as f32);
    call(json!({"method": "closeAllSessions"}));
}
