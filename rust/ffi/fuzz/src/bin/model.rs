//! Fuzz target `model`: model files through the C ABI (issue 39). An input is the head of a GGUF
//! file (magic, metadata, tensor table), mutated from the head of a small valid model (seeds/);
//! the harness pads it to 32 bytes and appends that model's data section (data/model.bin), so the
//! fuzzer spends its time on the metadata and the tensor table, which is where files go wrong,
//! while the tensors still find bytes to read. The file is written into a sandbox directory,
//! then: `ggufInfo`, `loadModel` (CPU, one thread, a context of at most 64 positions), and on
//! success `tokenize`, `generate` of one greedy token, `embed` of one text, `detokenize` of the
//! tokens, `releaseModel`.
//!
//! Errors are fine; a crash, a hang (AFL's 1 s), a response that is not one JSON object with
//! `ok` or `error`, an unknown error kind, an `Internal` error, or an embedding or a token that
//! is not finite / in the vocabulary is a finding.

#[path = "../common.rs"]
mod common;

use common::call;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The data section of the seed model, appended to every input.
const DATA: &[u8] = include_bytes!("../../data/model.bin");

/// The largest context asked for: enough for the prompt and a token, small enough for memory.
const MAX_CTX: u64 = 64;

fn sandbox() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tessera-fuzz-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a sandbox directory");
        dir
    })
}

/// Writes the file an input stands for and returns its path. A new file is renamed over the
/// last one, so a model still mapped from it (none is: each is released) would keep its bytes.
fn write_model(head: &[u8]) -> String {
    let mut bytes = head.to_vec();
    bytes.resize(head.len().next_multiple_of(32), 0);
    bytes.extend_from_slice(DATA);
    let dir = sandbox();
    let tmp = dir.join("next.gguf");
    let path = dir.join("model.gguf");
    std::fs::write(&tmp, &bytes).expect("the model file is written");
    std::fs::rename(&tmp, &path).expect("the model file is renamed");
    path.to_string_lossy().into_owned()
}

/// The context to ask for: the file's `*.context_length` (as `ggufInfo` reads it) if it is
/// smaller than [`MAX_CTX`], else [`MAX_CTX`].
fn n_ctx(info: &Value) -> u64 {
    let from_file = info["ok"]["metadata"].as_array().and_then(|entries| {
        entries
            .iter()
            .find(|e| e["key"].as_str().is_some_and(|k| k.ends_with(".context_length")))
            .and_then(|e| e["value"].as_u64())
    });
    from_file.filter(|&n| n >= 1).map_or(MAX_CTX, |n| n.min(MAX_CTX))
}

fn run(head: &[u8]) {
    let path = write_model(head);
    let info =
        call(json!({"method": "ggufInfo", "path": path, "arrayItems": 4}).to_string().as_bytes());
    let load = json!({"method": "loadModel", "path": path,
                      "options": {"device": "CPU", "threads": 1, "nCtx": n_ctx(&info), "nBatch": 64}});
    let loaded = call(load.to_string().as_bytes());
    let Some(model) = loaded["ok"]["model"].as_u64() else { return };
    let n_vocab = loaded["ok"]["info"]["nVocab"].as_u64().expect("nVocab");
    let ask = |method: &str, params: Value| {
        call(json!({"method": method, "model": model, "params": params}).to_string().as_bytes())
    };

    let tokens = ask("tokenize", json!({"text": "Hello world"}));
    for t in tokens["ok"]["tokens"].as_array().into_iter().flatten() {
        assert!(t.as_u64().is_some_and(|t| t < n_vocab), "token {t} of {n_vocab}");
    }
    let generated =
        ask("generate", json!({"prompt": "Hello world", "maxTokens": 1, "temperature": 0}));
    if let Some(ok) = generated.get("ok") {
        let tokens = ok["tokens"].as_array().expect("generated tokens");
        assert!(tokens.len() <= 1, "{generated}");
        for t in tokens {
            assert!(t.as_u64().is_some_and(|t| t < n_vocab), "token {t} of {n_vocab}");
        }
        assert!(ok["text"].is_string(), "{generated}");
        ask("detokenize", json!({"tokens": tokens}));
    }
    let embedded = ask("embed", json!({"texts": ["Hello world"]}));
    if let Some(ok) = embedded.get("ok") {
        let rows = ok["embeddings"].as_array().expect("embeddings");
        assert_eq!(rows.len(), 1, "{embedded}");
        for v in rows[0].as_array().expect("an embedding") {
            // A NaN or an infinity is written as null.
            assert!(v.as_f64().is_some_and(f64::is_finite), "a value that is not finite: {v}");
        }
    }
    call(json!({"method": "releaseModel", "model": model}).to_string().as_bytes());
}

fn main() {
    afl::fuzz!(|data: &[u8]| run(data));
}
