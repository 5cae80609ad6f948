//! Request size limits through the JSON protocol (issue 39): each past its bound is
//! `InvalidArgument` naming the limit, before any work; at the bound a call runs.

mod common;

use common::{call, gemma};
use serde_json::{json, Value};
use tessera_ffi::limits::{
    MAX_MESSAGES, MAX_STOP_BYTES, MAX_STOP_STRINGS, MAX_TEXTS, MAX_TEXT_BYTES, MAX_TOKENS,
};

fn refused(request: Value, message: &str) {
    let r = call(request);
    assert_eq!(r["error"]["kind"], "InvalidArgument", "{r}");
    assert_eq!(r["error"]["message"], message);
}

#[test]
fn requests_past_the_limits_are_refused_naming_them() {
    let loaded = call(
        json!({"method": "loadModel", "path": gemma(), "options": {"device": "CPU", "nCtx": 64}}),
    );
    let model = loaded["ok"]["model"].as_u64().unwrap_or_else(|| panic!("{loaded}"));
    let long = "a".repeat(MAX_TEXT_BYTES + 1);
    refused(
        json!({"method": "tokenize", "model": model, "params": {"text": long}}),
        &format!("tokenize: text has {} bytes: at most {MAX_TEXT_BYTES} are accepted", long.len()),
    );
    refused(
        json!({"method": "generate", "model": model, "params": {"prompt": long}}),
        &format!(
            "generate: prompt has {} bytes: at most {MAX_TEXT_BYTES} are accepted",
            long.len()
        ),
    );
    let messages: Vec<Value> =
        (0..=MAX_MESSAGES).map(|_| json!({"role": "user", "content": "hi"})).collect();
    refused(
        json!({"method": "generate", "model": model, "params": {"messages": messages}}),
        &format!(
            "generate: messages has {} items: at most {MAX_MESSAGES} are accepted",
            MAX_MESSAGES + 1
        ),
    );
    let stops: Vec<String> = (0..=MAX_STOP_STRINGS).map(|i| format!("stop{i}")).collect();
    refused(
        json!({"method": "generate", "model": model, "params": {"prompt": "Hi", "stop": stops}}),
        &format!(
            "generate: stop has {} items: at most {MAX_STOP_STRINGS} are accepted",
            MAX_STOP_STRINGS + 1
        ),
    );
    let long_stop = "s".repeat(MAX_STOP_BYTES + 1);
    refused(
        json!({"method": "generate", "model": model, "params": {"prompt": "Hi", "stop": ["x", long_stop]}}),
        &format!(
            "generate: stop[1] has {} bytes: at most {MAX_STOP_BYTES} are accepted",
            MAX_STOP_BYTES + 1
        ),
    );
    let texts: Vec<&str> = vec!["hi"; MAX_TEXTS + 1];
    refused(
        json!({"method": "embed", "model": model, "params": {"texts": texts}}),
        &format!("embed: texts has {} items: at most {MAX_TEXTS} are accepted", MAX_TEXTS + 1),
    );
    refused(
        json!({"method": "rerank", "model": model, "params": {"query": "q", "documents": texts}}),
        &format!("rerank: documents has {} items: at most {MAX_TEXTS} are accepted", MAX_TEXTS + 1),
    );
    let tokens = vec![1u32; MAX_TOKENS + 1];
    refused(
        json!({"method": "detokenize", "model": model, "params": {"tokens": tokens}}),
        &format!(
            "detokenize: tokens has {} items: at most {MAX_TOKENS} are accepted",
            MAX_TOKENS + 1
        ),
    );

    // At the bounds: 64 stop strings of 1,024 bytes, and a generation runs.
    let stops: Vec<String> = (0..MAX_STOP_STRINGS).map(|i| format!("{i:04}").repeat(256)).collect();
    let r = call(json!({"method": "generate", "model": model,
        "params": {"prompt": "Hi", "stop": stops, "maxTokens": 2, "temperature": 0.0}}));
    assert_eq!(r["ok"]["tokens"].as_array().map(Vec::len), Some(2), "{r}");
    call(json!({"method": "releaseModel", "model": model}));
}
