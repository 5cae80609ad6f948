//! Calls made from inside a token callback into the model that is generating (issue 39): those
//! that would wait for the call they are inside answer at once. `generate` on the generating
//! sequence is `InvalidArgument`, on another sequence it runs; `releaseModel` (and the uniffi
//! `Model.close`) release without waiting, and the generation ends "cancelled". Through the C
//! ABI (`tessera_call_json` with a C event callback) and the Model object. A file of its own:
//! the event callback is process-wide.

mod common;

use common::{call, gemma};
use serde_json::{json, Value};
use std::ffi::{c_char, CStr};
use std::sync::{Arc, Mutex, OnceLock};
use tessera_ffi::c_api::tessera_set_event_callback;
use tessera_ffi::{GenerateRequest, GeneratedToken, Model, ModelOptions, TokenListener};

/// What the C event callback works with: the model, the replies it got, the outer tokens seen.
#[derive(Default)]
struct CallingBack {
    model: u64,
    replies: Vec<(String, Value)>,
    outer_tokens: usize,
}

fn calling_back() -> &'static Mutex<CallingBack> {
    static STATE: OnceLock<Mutex<CallingBack>> = OnceLock::new();
    STATE.get_or_init(Mutex::default)
}

/// On the outer generation's token events: first a `generate` on its own sequence and one on
/// the other sequence, then, at its third token, `releaseModel`; every reply kept.
unsafe extern "C" fn on_event(event_json: *const c_char) {
    // SAFETY: the library passes a NUL-terminated string valid during this call.
    let text = unsafe { CStr::from_ptr(event_json) }.to_str().unwrap();
    let e: Value = serde_json::from_str(text).unwrap();
    if e["type"] != "token" || e["requestId"] != "outer" {
        return;
    }
    let (model, n) = {
        let mut state = calling_back().lock().unwrap();
        state.outer_tokens += 1;
        (state.model, state.outer_tokens)
    };
    let mut replies = Vec::new();
    {
        let params =
            |sequence: u32| json!({"prompt": "Hello", "maxTokens": 2, "sequence": sequence});
        if n == 1 {
            let same = json!({"method": "generate", "model": model, "requestId": "same", "params": params(0)});
            replies.push(("same sequence".to_string(), call(same)));
            let other = json!({"method": "generate", "model": model, "requestId": "other", "params": params(1)});
            replies.push(("other sequence".to_string(), call(other)));
        } else if n == 3 {
            let release = json!({"method": "releaseModel", "model": model});
            replies.push(("release".to_string(), call(release)));
        }
    }
    calling_back().lock().unwrap().replies.extend(replies);
}

#[test]
fn protocol_calls_from_inside_a_token_event() {
    let options = json!({"device": "CPU", "threads": 2, "nCtx": 256, "nSequences": 2});
    let loaded = call(json!({"method": "loadModel", "path": gemma(), "options": options}));
    let model = loaded["ok"]["model"].as_u64().unwrap_or_else(|| panic!("{loaded}"));
    calling_back().lock().unwrap().model = model;
    // SAFETY: `on_event` may be called from any thread with a string valid during the call.
    unsafe { tessera_set_event_callback(Some(on_event)) };
    let params = json!({"prompt": "Once upon a time", "maxTokens": 16, "temperature": 0.0});
    let outer =
        call(json!({"method": "generate", "model": model, "requestId": "outer", "params": params}));
    // SAFETY: removing the callback.
    unsafe { tessera_set_event_callback(None) };

    let state = calling_back().lock().unwrap();
    let replies = &state.replies;
    let names: Vec<&str> = replies.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["same sequence", "other sequence", "release"]);
    let same = &replies[0].1;
    assert_eq!(same["error"]["kind"], "InvalidArgument", "{same}");
    let message = same["error"]["message"].as_str().unwrap();
    assert!(message.contains("sequence 0 is busy"), "{message}");
    let other = &replies[1].1;
    assert_eq!(other["ok"]["tokens"].as_array().map(Vec::len), Some(2), "{other}");
    assert_eq!(replies[2].1["ok"]["released"], true, "{}", replies[2].1);
    // The release cancelled the outer generation, which then returned.
    assert_eq!(outer["ok"]["stopReason"], "cancelled", "{outer}");
    let n = outer["ok"]["tokens"].as_array().unwrap().len();
    assert!((3..16).contains(&n), "{n} tokens after a release at the third");
    assert_eq!(state.outer_tokens, n);
    let after = call(json!({"method": "modelInfo", "model": model}));
    assert_eq!(after["error"]["kind"], "Closed", "{after}");
}

/// Closes its model at the second token and tries to generate on it at the first.
struct ClosingListener {
    model: Arc<Mutex<Option<Arc<Model>>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl TokenListener for ClosingListener {
    fn on_token(&self, _token: GeneratedToken) -> bool {
        let model = self.model.lock().unwrap().clone().unwrap();
        let mut seen = self.seen.lock().unwrap();
        match seen.len() {
            0 => {
                let again = GenerateRequest { prompt: Some("Hi".into()), ..Default::default() };
                let r = model.generate(again, None);
                seen.push(format!("{:?}", r.map(|g| g.text)));
            }
            1 => {
                model.close();
                seen.push(format!("closed {}", model.is_closed()));
            }
            _ => seen.push("token".into()),
        }
        true
    }
}

#[test]
fn model_object_closed_from_its_token_callback() {
    let options = ModelOptions { device: "CPU".into(), n_ctx: Some(256), ..Default::default() };
    let model = Model::load(gemma(), options, None).unwrap();
    let slot = Arc::new(Mutex::new(Some(model.clone())));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = ClosingListener { model: slot.clone(), seen: seen.clone() };
    let request = GenerateRequest {
        prompt: Some("Once upon a time".into()),
        max_tokens: 16,
        temperature: 0.0,
        ..Default::default()
    };
    let g = model.generate(request, Some(Box::new(listener))).unwrap();
    slot.lock().unwrap().take();
    let seen = seen.lock().unwrap();
    assert!(seen[0].starts_with("Err(InvalidArgument"), "{seen:?}");
    assert!(seen[0].contains("sequence 0 is busy"), "{seen:?}");
    assert_eq!(seen[1], "closed true");
    assert_eq!(g.stop_reason, "cancelled");
    assert!(g.tokens.len() < 16, "{} tokens", g.tokens.len());
    assert!(model.is_closed());
}
