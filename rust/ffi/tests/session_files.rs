//! Session files through the JSON protocol (`saveSession` / `loadSession`, the same `Model`
//! methods Kotlin and Swift call), on Gemma 3 270M: a conversation saved by one loaded model and
//! loaded by another continues with the same greedy tokens, its prefix reused from the file;
//! a file that is not a session, a missing file and a session longer than the context are
//! typed errors, after which the model generates afresh.

mod common;

use common::gemma;
use serde_json::{json, Value};
use tessera_ffi::json_api::handle;

fn ok(request: Value) -> Value {
    let r = handle(&request.to_string());
    assert!(r.get("ok").is_some(), "{request} -> {r}");
    r["ok"].clone()
}

fn error(request: Value) -> (String, String) {
    let r = handle(&request.to_string());
    let kind = r["error"]["kind"].as_str().unwrap_or_else(|| panic!("{request}: {r}"));
    (kind.to_string(), r["error"]["message"].as_str().unwrap_or("").to_string())
}

fn load(n_ctx: u32) -> u64 {
    let options = json!({"device": "CPU", "threads": 2, "nCtx": n_ctx});
    ok(json!({"method": "loadModel", "path": gemma(), "options": options}))["model"]
        .as_u64()
        .unwrap()
}

fn generate(model: u64, prompt: &str) -> Value {
    let params = json!({"prompt": prompt, "maxTokens": 8, "temperature": 0.0});
    ok(json!({"method": "generate", "model": model, "params": params}))
}

#[test]
fn a_saved_conversation_continues_in_another_model() {
    let dir = std::env::temp_dir().join(format!("tessera-ffi-sessions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("chat.session").to_string_lossy().into_owned();
    let prompt = "The old lighthouse keeper climbed the stairs every evening, and";
    let a = load(512);
    let first = generate(a, prompt);
    let saved = ok(json!({"method": "saveSession", "model": a, "params": {"path": path}}));
    let n =
        first["promptTokens"].as_u64().unwrap() + first["tokens"].as_array().unwrap().len() as u64;
    // The last generated token was sampled, not decoded: the cache holds one less.
    assert_eq!(saved["tokens"].as_u64().unwrap(), n - 1, "{first}");
    let next = format!("{prompt}{} Then", first["text"].as_str().unwrap());
    let on_a = generate(a, &next);

    let b = load(512);
    let loaded = ok(json!({"method": "loadSession", "model": b, "params": {"path": path}}));
    assert_eq!(loaded, saved);
    let on_b = generate(b, &next);
    assert_eq!(on_b["tokens"], on_a["tokens"], "the continuation after loading");
    assert_eq!(on_b["timings"]["cachedN"], on_a["timings"]["cachedN"]);
    assert!(on_b["timings"]["cachedN"].as_u64().unwrap() >= n - 1, "{on_b}");

    // Typed errors; the model then generates as a fresh one.
    let fresh = generate(load(512), prompt);
    let gguf = gemma();
    let (kind, message) =
        error(json!({"method": "loadSession", "model": b, "params": {"path": gguf}}));
    assert_eq!(kind, "InvalidArgument");
    assert!(message.contains("not a Tessera session file"), "{message}");
    assert_eq!(generate(b, prompt)["tokens"], fresh["tokens"]);
    let missing = dir.join("missing.session").to_string_lossy().into_owned();
    let (kind, _) =
        error(json!({"method": "loadSession", "model": b, "params": {"path": missing}}));
    assert_eq!(kind, "Storage");
    let small = load(16);
    let (kind, message) =
        error(json!({"method": "loadSession", "model": small, "params": {"path": path}}));
    assert_eq!(kind, "ContextFull", "{message}");
    let e = error(json!({"method": "saveSession", "model": a, "params": {"file": path}}));
    assert_eq!(e.0, "InvalidArgument");
    for m in [a, b, small] {
        ok(json!({"method": "releaseModel", "model": m}));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
