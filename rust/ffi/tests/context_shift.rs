//! `contextShift` and `nKeep` through the JSON protocol (issue 38 item 1): a generation 3x
//! the context with the shift ends by its token limit and keeps the prompt's start; without
//! it the context ends it ("context"); bad `nKeep` values and recurrent models are refused
//! with their error kinds. The shift's numbers are tested in tessera-llm (`src/shift.rs`).

mod common;

use common::model_path;
use serde_json::{json, Value};
use tessera_ffi::json_api::handle;

fn call(request: Value) -> Value {
    handle(&request.to_string())
}

fn load(name: &str) -> u64 {
    let r = call(json!({"method": "loadModel", "path": model_path(name),
                        "options": {"device": "CPU", "threads": 2, "nCtx": 64}}));
    r["ok"]["model"].as_u64().unwrap_or_else(|| panic!("{r}"))
}

fn generate(model: u64, params: Value) -> Value {
    call(json!({"method": "generate", "model": model, "params": params}))
}

#[test]
fn context_shift_through_the_json_protocol() {
    let id = load("gemma3-270m-q4_k_m");
    let base = json!({"prompt": "Once upon a time", "temperature": 0.0, "ignoreEos": true,
                      "maxTokens": 192});
    let with = |extra: Value| {
        let mut p = base.clone();
        p.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        p
    };
    let r = generate(id, with(json!({"contextShift": true, "nKeep": 2})));
    assert_eq!(r["ok"]["stopReason"], "length", "{r}");
    assert_eq!(r["ok"]["tokens"].as_array().unwrap().len(), 192);

    let r = generate(id, base.clone());
    assert_eq!(r["ok"]["stopReason"], "context", "{r}");
    assert!(r["ok"]["tokens"].as_array().unwrap().len() < 64);

    for (extra, needle) in [
        (json!({"contextShift": true, "nKeep": -2}), "nKeep -2"),
        (json!({"nKeep": 3}), "nKeep needs contextShift"),
        (json!({"contextShift": true, "nKeep": 60}), "n_ctx - 4"),
    ] {
        let r = generate(id, with(extra.clone()));
        assert_eq!(r["error"]["kind"], "InvalidArgument", "{extra} -> {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(needle), "{extra} -> {r}");
    }

    let lfm2 = load("tiny-lfm2");
    let r = generate(lfm2, json!({"prompt": "a b c", "contextShift": true, "maxTokens": 4}));
    assert_eq!(r["error"]["kind"], "Unsupported", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("cannot shift"), "{r}");
}
