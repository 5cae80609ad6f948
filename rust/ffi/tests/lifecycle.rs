//! `close_all_sessions` (what the React Native modules' `invalidate` calls): every session
//! opened through the JSON protocol and every session kept for one-shot computes is closed;
//! their numbers answer `Closed`; new sessions open afterwards. One test: the session table is
//! process-wide, so nothing else in this binary may open sessions meanwhile.

use serde_json::{json, Value};
use tessera_ffi::{call_json, close_all_sessions};

fn call(request: Value) -> Value {
    serde_json::from_str(&call_json(request.to_string())).expect("a JSON response")
}

fn compute(session: Option<u64>) -> Value {
    let graph = json!({
        "version": 1,
        "tensors": [{"name": "a", "type": "F32", "shape": [2], "values": [1.5, -2]}],
        "nodes": [{"name": "b", "op": "SCALE", "src": ["a"], "params": {"scale": -1}}],
        "outputs": ["b"]
    });
    let mut request = json!({"method": "compute", "graph": graph, "options": {"device": "CPU"}});
    if let Some(id) = session {
        request = json!({"method": "compute", "session": id, "graph": graph});
    }
    call(request)
}

#[test]
fn close_all_sessions_closes_every_session_and_the_one_shot_ones() {
    let open =
        || call(json!({"method": "openSession", "options": {"device": "CPU", "threads": 1}}));
    let s1 = open()["ok"]["session"].as_u64().expect("a session");
    let s2 = open()["ok"]["session"].as_u64().expect("a session");
    // [1.5, -2] negated, as base64 of two little-endian f32: -1.5, 2.
    let want = json!("AADAvwAAAEA=");
    assert_eq!(compute(Some(s1))["ok"]["outputs"][0]["data"], want);
    assert_eq!(compute(None)["ok"]["outputs"][0]["data"], want, "one-shot compute");

    // Two open sessions and the one kept for one-shot computes on the CPU.
    assert_eq!(close_all_sessions(), 3);
    for id in [s1, s2] {
        let reply = compute(Some(id));
        assert_eq!(reply["error"]["kind"], "Closed", "session {id}: {reply}");
        assert_eq!(reply["error"]["message"], format!("session {id} is closed"));
    }
    assert_eq!(call(json!({"method": "closeSession", "session": s1}))["ok"]["closed"], true);
    assert_eq!(close_all_sessions(), 0, "nothing left to close");

    // Afterwards: new sessions (never reusing a number) and one-shot computes work.
    let s3 = open()["ok"]["session"].as_u64().expect("a session");
    assert!(s3 > s2);
    assert_eq!(compute(Some(s3))["ok"]["outputs"][0]["data"], want);
    assert_eq!(compute(None)["ok"]["outputs"][0]["data"], want);
    // The JSON method does the same and says how many it closed.
    assert_eq!(call(json!({"method": "closeAllSessions"}))["ok"]["closed"], 2);
    assert_eq!(compute(Some(s3))["error"]["kind"], "Closed");
}
