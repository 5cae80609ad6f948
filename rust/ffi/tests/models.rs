//! Language models through the foreign API: the JSON protocol (what the TurboModule and the C
//! ABI call) and the `Model` object (what Kotlin and Swift call), on Gemma 3 270M: load with
//! progress events, info, tokenize, streaming generation with token events, cancel from
//! another thread, embeddings, release, two models at once, typed errors.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tessera_ffi::json_api::handle;
use tessera_ffi::{
    set_event_listener, ChatTurn, EventListener, GenerateRequest, GeneratedToken, Model,
    ModelOptions, TokenListener,
};

fn gemma() -> String {
    if let Ok(p) = std::env::var("TESSERA_GEMMA_GGUF") {
        return p;
    }
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/models/gemma3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "set TESSERA_GEMMA_GGUF to the Gemma 3 270M Q4_K_M file (see scripts/setup.sh)"
    );
    p.to_string_lossy().into_owned()
}

/// Collects every event.
#[derive(Default, Clone)]
struct Events(Arc<Mutex<Vec<Value>>>);

impl EventListener for Events {
    fn on_event(&self, event_json: String) {
        self.0.lock().unwrap().push(serde_json::from_str(&event_json).unwrap());
    }
}

fn ok(request: Value) -> Value {
    let r = handle(&request.to_string());
    assert!(r.get("ok").is_some(), "{request} -> {r}");
    r["ok"].clone()
}

fn error_kind(request: Value) -> String {
    let r = handle(&request.to_string());
    r["error"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("{request} should fail, got {r}"))
        .to_string()
}

/// One test: the event listener is process-wide.
#[test]
fn models_through_the_json_protocol() {
    let events = Events::default();
    set_event_listener(Some(Box::new(events.clone())));
    let loaded = ok(json!({"method": "loadModel", "path": gemma(), "requestId": 7,
                           "options": {"device": "CPU", "threads": 2, "nCtx": 1024}}));
    let id = loaded["model"].as_u64().unwrap();
    let info = &loaded["info"];
    assert_eq!(info["architecture"], "gemma3");
    assert_eq!(info["nVocab"], 262144);
    assert_eq!(info["nCtx"], 1024);
    assert_eq!(info["quantization"], "Q4_K_M");
    assert_eq!(info["hasChatTemplate"], true, "Gemma's built-in template");
    // F16 keys and values: 18 layers of one KV head of 256, 2 bytes a value.
    assert_eq!(info["kvBytesPerToken"], 18 * (512 + 512));
    let progress: Vec<f64> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "loadProgress" && e["requestId"] == 7)
        .map(|e| e["progress"].as_f64().unwrap())
        .collect();
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert_eq!(progress.last(), Some(&1.0));

    let toks = ok(
        json!({"method": "tokenize", "model": id, "params": {"text": "The capital of France is"}}),
    );
    assert_eq!(toks["tokens"], json!([2, 818, 5279, 529, 7001, 563]), "llama.cpp's ids");
    let text = ok(json!({"method": "detokenize", "model": id, "params": {"tokens": [818, 5279]}}));
    assert_eq!(text["text"], "The capital");

    // Greedy generation streams token events whose text adds up to the result.
    events.0.lock().unwrap().clear();
    let g = ok(json!({"method": "generate", "model": id, "requestId": 8,
                      "params": {"prompt": "The capital of France is", "temperature": 0, "maxTokens": 10}}));
    assert_eq!(g["stopReason"], "length");
    assert_eq!(g["tokens"].as_array().unwrap().len(), 10);
    // llama.cpp's greedy continuation starts " the capital of the country" (fixture).
    assert_eq!(
        &g["tokens"].as_array().unwrap()[..5],
        &json!([506, 5279, 529, 506, 2891]).as_array().unwrap()[..]
    );
    let streamed: String = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "token" && e["requestId"] == 8)
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streamed, g["text"].as_str().unwrap());
    assert!(g["timings"]["predictedPerSecond"].as_f64().unwrap() > 0.0);

    // A chat turn with the built-in template, and a stop string.
    let chat = ok(json!({"method": "applyChatTemplate", "model": id,
                         "params": {"messages": [{"role": "user", "content": "Hi"}]}}));
    assert_eq!(chat["prompt"], "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");

    // Cancel from another thread while it generates.
    let cancel_events = events.clone();
    let canceller = std::thread::spawn(move || {
        for _ in 0..2000 {
            let n = cancel_events.0.lock().unwrap().iter().filter(|e| e["requestId"] == 9).count();
            if n >= 3 {
                return ok(json!({"method": "cancelGeneration", "model": id}));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("no token events arrived");
    });
    let g = ok(json!({"method": "generate", "model": id, "requestId": 9,
                      "params": {"prompt": "Once upon a time", "temperature": 0, "maxTokens": 400}}));
    canceller.join().unwrap();
    assert_eq!(g["stopReason"], "cancelled");
    assert!(g["tokens"].as_array().unwrap().len() < 400);

    // Embeddings are unit vectors of n_embd values.
    let e = ok(
        json!({"method": "embed", "model": id, "params": {"texts": ["hello world", "bonjour"]}}),
    );
    let vs = e["embeddings"].as_array().unwrap();
    assert_eq!(vs.len(), 2);
    for v in vs {
        let v: Vec<f64> = v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(v.len(), 640);
        let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }

    // Quantized KV caches: Q8_0 keys (34 bytes a block of 32), Q4_0 values (18 bytes a block).
    let q = ok(json!({"method": "loadModel", "path": gemma(),
                      "options": {"device": "CPU", "threads": 1, "nCtx": 256,
                                  "cacheTypeK": "q8_0", "cacheTypeV": "q4_0"}}));
    assert_eq!(q["info"]["kvBytesPerToken"], 18 * (272 + 144));
    ok(json!({"method": "releaseModel", "model": q["model"]}));
    assert_eq!(
        error_kind(json!({"method": "loadModel", "path": gemma(),
                          "options": {"device": "CPU", "cacheTypeK": "q5_1"}})),
        "InvalidArgument",
        "an unknown cache type"
    );

    // Typed errors.
    assert_eq!(
        error_kind(json!({"method": "loadModel", "path": "/nonexistent.gguf"})),
        "InvalidModel"
    );
    assert_eq!(
        error_kind(json!({"method": "loadModel", "path": gemma(), "options": {"gpu": true}})),
        "InvalidArgument"
    );
    assert_eq!(
        error_kind(
            json!({"method": "generate", "model": id, "params": {"prompt": "a", "messages": []}})
        ),
        "InvalidArgument"
    );
    assert_eq!(
        error_kind(
            json!({"method": "generate", "model": id, "params": {"prompt": "a", "topP": 2}})
        ),
        "InvalidArgument"
    );
    assert_eq!(
        error_kind(
            json!({"method": "generate", "model": id, "params": {"prompt": "a", "tempo": 1}})
        ),
        "InvalidArgument"
    );
    assert_eq!(
        error_kind(json!({"method": "tokenize", "model": 999999, "params": {"text": "a"}})),
        "InvalidArgument"
    );

    ok(json!({"method": "releaseModel", "model": id}));
    ok(json!({"method": "releaseModel", "model": id}));
    assert_eq!(
        error_kind(json!({"method": "generate", "model": id, "params": {"prompt": "a"}})),
        "Closed"
    );
    set_event_listener(None);
}

struct Collect(Arc<Mutex<Vec<(u32, String)>>>, usize);

impl TokenListener for Collect {
    fn on_token(&self, token: GeneratedToken) -> bool {
        let mut v = self.0.lock().unwrap();
        v.push((token.token, token.text));
        v.len() < self.1
    }
}

fn greedy(prompt: &str, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(prompt.into()),
        messages: None,
        max_tokens,
        stop: vec![],
        temperature: 0.0,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        typical_p: 1.0,
        repeat_penalty: 1.0,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        penalty_last_n: 64,
        logit_bias: vec![],
        seed: None,
        ignore_eos: false,
        ..GenerateRequest::default()
    }
}

/// The `Model` object (Kotlin's and Swift's view): two models generate at once on two threads
/// and each gives what it gives alone; the listener stops a generation; close waits for work in
/// flight and then refuses calls.
#[test]
fn two_models_at_once_and_close_during_generation() {
    let opts = ModelOptions {
        device: "CPU".into(),
        threads: Some(1),
        n_ctx: Some(512),
        n_batch: 512,
        ..ModelOptions::default()
    };
    let a = Model::load(gemma(), opts.clone(), None).unwrap();
    let b = Model::load(gemma(), opts, None).unwrap();
    let alone = a.generate(greedy("The capital of France is", 8), None).unwrap();
    let (ta, tb) = (a.clone(), b.clone());
    let ja = std::thread::spawn(move || {
        ta.generate(greedy("The capital of France is", 8), None).unwrap()
    });
    let jb = std::thread::spawn(move || {
        tb.generate(greedy("The capital of France is", 8), None).unwrap()
    });
    let (ra, rb) = (ja.join().unwrap(), jb.join().unwrap());
    assert_eq!(ra.tokens, alone.tokens);
    assert_eq!(rb.tokens, alone.tokens);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = a.generate(greedy("Hello", 50), Some(Box::new(Collect(seen.clone(), 4)))).unwrap();
    assert_eq!((r.stop_reason.as_str(), r.tokens.len()), ("cancelled", 4));
    assert_eq!(seen.lock().unwrap().iter().map(|(t, _)| *t).collect::<Vec<_>>(), r.tokens);

    // Close while a long generation runs on another thread (once its first tokens arrived):
    // close waits, the generation ends cancelled, and later calls are Closed.
    let tb = b.clone();
    let streamed = Arc::new(Mutex::new(Vec::new()));
    let listener = Collect(streamed.clone(), usize::MAX);
    let long = std::thread::spawn(move || {
        tb.generate(greedy("Once upon a time", 300), Some(Box::new(listener)))
    });
    while streamed.lock().unwrap().len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    b.close();
    let g = long.join().unwrap().unwrap();
    assert_eq!(g.stop_reason, "cancelled");
    assert!(g.tokens.len() < 300);
    assert!(b.is_closed());
    let e = b.generate(greedy("x", 1), None).unwrap_err();
    assert_eq!(e.kind(), "Closed");
    a.close();
}

fn chat(messages: &[(&str, &str)], max_tokens: u32) -> GenerateRequest {
    let turns = messages.iter().map(|(role, content)| ChatTurn::new(*role, *content)).collect();
    GenerateRequest { prompt: None, messages: Some(turns), ..greedy("", max_tokens) }
}

/// Embedding does not touch the conversation's cache: the next chat turn reuses the cached
/// prefix (the previous turn's prompt and reply) as it does without the embedding between.
#[test]
fn a_chat_turn_after_embed_reuses_its_cached_prefix() {
    let opts = ModelOptions {
        device: "CPU".into(),
        threads: Some(2),
        n_ctx: Some(512),
        n_batch: 512,
        ..ModelOptions::default()
    };
    let m = Model::load(gemma(), opts, None).unwrap();
    let first = m.generate(chat(&[("user", "Name a colour.")], 6), None).unwrap();
    let e = m.embed(vec!["hello world".into(), "The capital of France".into()], None).unwrap();
    assert_eq!((e.len(), e[0].len()), (2, 640));
    let turn =
        [("user", "Name a colour."), ("assistant", first.text.as_str()), ("user", "Another.")];
    let second = m.generate(chat(&turn, 4), None).unwrap();
    let t = &second.timings;
    assert!(
        t.cached_n >= first.prompt_tokens,
        "the second turn reused {} tokens, the first turn's prompt alone is {}",
        t.cached_n,
        first.prompt_tokens
    );
    assert_eq!(t.cached_n + t.prompt_n, second.prompt_tokens);
    // The same turn on a model that did not embed in between reuses as much.
    let opts = ModelOptions {
        device: "CPU".into(),
        threads: Some(2),
        n_ctx: Some(512),
        n_batch: 512,
        ..ModelOptions::default()
    };
    let control = Model::load(gemma(), opts, None).unwrap();
    control.generate(chat(&[("user", "Name a colour.")], 6), None).unwrap();
    let same = control.generate(chat(&turn, 4), None).unwrap();
    assert_eq!(same.timings.cached_n, t.cached_n);
    assert_eq!(same.tokens, second.tokens);
    m.close();
    control.close();
}
