//! Sequences through the JSON protocol and the `Model` object (what Kotlin and Swift call), on
//! Gemma 3 270M loaded with `nSequences`:
//! - two conversations, one token per `generate` call in alternation on sequences 0 and 1,
//!   give the tokens and probabilities each gives alone, and each call reuses its sequence's
//!   cache (one new token per call);
//! - two generations on two sequences at the same time (two threads) give what each gives alone;
//! - `modelInfo` states the KV cache bytes per sequence (counted from the file's metadata);
//! - a session saved from one sequence loads into another;
//! - cancelling one sequence leaves the other's generation running;
//! - an unknown sequence, a count of 0 or past the limit, and sequences past the memory budget
//!   are typed errors naming the figures.

mod common;

use common::gemma;
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};
use tessera_ffi::json_api::handle;
use tessera_ffi::{GenerateRequest, GeneratedToken, Model, ModelOptions, TokenListener};

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

fn load(options: Value) -> Value {
    ok(json!({"method": "loadModel", "path": gemma(), "options": options}))
}

fn options(n_sequences: u32) -> Value {
    json!({"device": "CPU", "threads": 2, "nCtx": 512, "nBatch": 64, "nSequences": n_sequences})
}

/// KV cache bytes of a Gemma 3 270M context of 512 positions (batches of 64): 18 layers (the 15
/// sliding-window ones' ring of 768 cells capped at the context), 1 KV head of 256 K and 256 V
/// values, F16.
const KV_512: u64 = 18 * 512 * 512 * 2;

const A: &str = "The recipe for a good loaf of bread starts with";
const B: &str = "In the year 1969, the first people to walk on the Moon";
const STEPS: usize = 8;

/// One greedy token on `sequence` continuing `text`.
fn step(model: u64, sequence: u32, text: &str) -> Value {
    let params = json!({"prompt": text, "maxTokens": 1, "temperature": 0.0, "nProbs": 4, "sequence": sequence});
    ok(json!({"method": "generate", "model": model, "params": params}))
}

/// The steps of a conversation: each call's result.
fn conversation(model: u64, sequence: u32, prompt: &str) -> Vec<Value> {
    let mut text = prompt.to_string();
    (0..STEPS)
        .map(|_| {
            let r = step(model, sequence, &text);
            text.push_str(r["text"].as_str().unwrap());
            r
        })
        .collect()
}

#[test]
fn interleaved_conversations_on_two_sequences_equal_each_alone() {
    let alone = load(options(1))["model"].as_u64().unwrap();
    let want_a = conversation(alone, 0, A);
    ok(json!({"method": "releaseModel", "model": alone}));
    let alone = load(options(1))["model"].as_u64().unwrap();
    let want_b = conversation(alone, 0, B);
    ok(json!({"method": "releaseModel", "model": alone}));

    let loaded = load(options(2));
    let info = &loaded["info"];
    assert_eq!(info["nSequences"], 2);
    assert_eq!(info["cacheBytesPerSequence"].as_u64(), Some(KV_512), "{info}");
    let m = loaded["model"].as_u64().unwrap();
    assert_eq!(ok(json!({"method": "modelInfo", "model": m})), *info);
    let (mut ta, mut tb) = (A.to_string(), B.to_string());
    for i in 0..STEPS {
        for (text, sequence, want) in [(&mut ta, 0, &want_a), (&mut tb, 1, &want_b)] {
            let r = step(m, sequence, text);
            text.push_str(r["text"].as_str().unwrap());
            let w = &want[i];
            assert_eq!(r["tokens"], w["tokens"], "sequence {sequence}, step {i}");
            assert_eq!(r["probs"], w["probs"], "sequence {sequence}, step {i}");
            assert_eq!(r["timings"]["cachedN"], w["timings"]["cachedN"]);
            if i > 0 {
                // Everything but the new token came from the sequence's own cache.
                let cached = r["timings"]["cachedN"].as_u64().unwrap();
                let prompt = r["promptTokens"].as_u64().unwrap();
                assert!(cached + 2 >= prompt, "sequence {sequence}, step {i}: {r}");
            }
        }
    }
    assert_ne!(ta, tb);
    eprintln!("A: {ta:?}\nB: {tb:?}");

    // A session saved from sequence 1 loads into sequence 0, which then continues as 1 does.
    let dir = std::env::temp_dir().join(format!("tessera-ffi-sequences-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("b.session").to_string_lossy().into_owned();
    let saved = ok(json!({"method": "saveSession", "model": m,
        "params": {"path": path, "sequence": 1}}));
    let loaded = ok(json!({"method": "loadSession", "model": m,
        "params": {"path": path, "sequence": 0}}));
    assert_eq!(saved, loaded);
    let on_0 = step(m, 0, &tb);
    let on_1 = step(m, 1, &tb);
    assert_eq!((&on_0["tokens"], &on_0["probs"]), (&on_1["tokens"], &on_1["probs"]));
    assert_eq!(on_0["timings"]["cachedN"], on_1["timings"]["cachedN"]);
    std::fs::remove_dir_all(&dir).unwrap();

    // Typed errors.
    let (kind, message) = error(json!({"method": "generate", "model": m,
        "params": {"prompt": "a", "sequence": 2}}));
    assert_eq!(kind, "InvalidArgument");
    assert!(message.contains("sequence 2 does not exist") && message.contains("nSequences 2"));
    for method in ["saveSession", "loadSession"] {
        let (kind, message) = error(json!({"method": method, "model": m,
            "params": {"path": "x.session", "sequence": 7}}));
        assert_eq!(kind, "InvalidArgument", "{method}");
        assert!(message.contains("sequence 7 does not exist"), "{message}");
    }
    let (kind, _) =
        error(json!({"method": "cancelGeneration", "model": m, "params": {"sequence": 2}}));
    assert_eq!(kind, "InvalidArgument");
    let c = ok(json!({"method": "cancelGeneration", "model": m, "params": {"sequence": 1}}));
    assert_eq!(c, json!({"cancelled": true}));
    ok(json!({"method": "cancelGeneration", "model": m}));
    // A cancel between generations does not reach the next one.
    assert_eq!(step(m, 1, B)["stopReason"], "length");
    ok(json!({"method": "releaseModel", "model": m}));
}

#[test]
fn sequence_counts_and_the_memory_budget_are_checked_at_load() {
    for n in [0, 65] {
        let (kind, message) =
            error(json!({"method": "loadModel", "path": gemma(), "options": options(n)}));
        assert_eq!(kind, "InvalidArgument");
        assert!(message.contains(&format!("nSequences {n} must be between 1 and 64")), "{message}");
    }
    let mut o = options(3);
    o["memoryBudget"] = json!(3 * KV_512 - 1);
    let (kind, message) = error(json!({"method": "loadModel", "path": gemma(), "options": o}));
    assert_eq!(kind, "OutOfMemory");
    let figures = format!(
        "nSequences 3 x {KV_512} bytes of KV cache per sequence = {} bytes exceed the model's \
         memory budget of {} bytes (memoryBudget)",
        3 * KV_512,
        3 * KV_512 - 1
    );
    assert!(message.contains(&figures), "{message}");
    o["memoryBudget"] = json!(3 * KV_512);
    let m = load(o)["model"].as_u64().unwrap();
    ok(json!({"method": "releaseModel", "model": m}));
    o = options(2);
    o["memoryBudget"] = json!(0);
    let (kind, _) = error(json!({"method": "loadModel", "path": gemma(), "options": o}));
    assert_eq!(kind, "InvalidArgument");
}

fn greedy(prompt: &str, sequence: u32, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(prompt.into()),
        max_tokens,
        temperature: 0.0,
        ignore_eos: true,
        sequence,
        ..GenerateRequest::default()
    }
}

fn model_options(n_sequences: u32) -> ModelOptions {
    ModelOptions {
        device: "CPU".into(),
        threads: Some(1),
        n_ctx: Some(256),
        n_batch: 64,
        n_sequences,
        ..ModelOptions::default()
    }
}

/// Cancels `sequence` of `model` at the first token it sees.
struct CancelAt {
    model: Arc<Model>,
    sequence: u32,
}

impl TokenListener for CancelAt {
    fn on_token(&self, _: GeneratedToken) -> bool {
        self.model.cancel_sequence(self.sequence).unwrap();
        true
    }
}

#[test]
fn generations_on_two_sequences_run_at_once_and_cancel_apart() {
    let alone = Model::load(gemma(), model_options(1), None).unwrap();
    let want_a = alone.generate(greedy(A, 0, 16), None).unwrap();
    alone.close();
    let alone = Model::load(gemma(), model_options(1), None).unwrap();
    let want_b = alone.generate(greedy(B, 0, 16), None).unwrap();
    alone.close();

    let model = Model::load(gemma(), model_options(2), None).unwrap();
    let barrier = Barrier::new(2);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            barrier.wait();
            model.generate(greedy(A, 0, 16), None).unwrap()
        });
        let b = s.spawn(|| {
            barrier.wait();
            model.generate(greedy(B, 1, 16), None).unwrap()
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!((&a.tokens, &a.text), (&want_a.tokens, &want_a.text));
    assert_eq!((&b.tokens, &b.text), (&want_b.tokens, &want_b.text));

    // Cancelling sequence 1 from sequence 0's generation leaves it running; cancelling its own
    // sequence stops it.
    let other = CancelAt { model: model.clone(), sequence: 1 };
    let r = model.generate(greedy(A, 0, 4), Some(Box::new(other))).unwrap();
    assert_eq!((r.stop_reason.as_str(), r.tokens.len()), ("length", 4));
    let own = CancelAt { model: model.clone(), sequence: 0 };
    let r = model.generate(greedy(B, 0, 4), Some(Box::new(own))).unwrap();
    assert_eq!(r.stop_reason, "cancelled");
    assert!(r.tokens.len() < 4, "{r:?}");
    let e = model.cancel_sequence(2).unwrap_err();
    assert!(e.to_string().contains("sequence 2 does not exist"), "{e}");
    model.close();
}
