//! Hostile and broken model files through the C ABI (issue 39): the findings about files and
//! model validation, each as a test on the crafted files of
//! tests/fixtures/make_hostile_models.py (written by scripts/setup.sh into target/hostile-models,
//! their sha256 checked against tests/fixtures/hostile-models.json). What could crash the process
//! (a model file truncated under a loaded model) runs in a child process, so a SIGBUS fails the
//! test instead of ending the test binary.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn call(request: &Value) -> Value {
    let c = CString::new(request.to_string()).unwrap();
    // SAFETY: a valid NUL-terminated string; the response is freed once below.
    unsafe {
        let response = tessera_ffi::c_api::tessera_call_json(c.as_ptr());
        assert!(!response.is_null());
        let text = CStr::from_ptr(response).to_str().unwrap().to_string();
        tessera_ffi::c_api::tessera_free_string(response);
        serde_json::from_str(&text).unwrap()
    }
}

/// The `ok` of a response, or a failure naming the request.
#[track_caller]
fn ok(request: Value) -> Value {
    let r = call(&request);
    assert!(r.get("ok").is_some(), "{request} -> {r}");
    r["ok"].clone()
}

/// Asserts an error response of `kind` whose message contains each of `words`.
#[track_caller]
fn expect_error(response: &Value, kind: &str, words: &[&str]) {
    let e = &response["error"];
    assert_eq!(e["kind"], kind, "{response}");
    let message = e["message"].as_str().unwrap_or_default();
    for w in words {
        assert!(message.contains(w), "message {message:?} should mention {w:?}");
    }
}

fn fixture() -> &'static Value {
    static FIXTURE: OnceLock<Value> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile-models.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    })
}

/// The crafted file `name`, its sha256 checked against the fixture's.
fn model(name: &str) -> String {
    let dir = match std::env::var("TESSERA_HOSTILE_MODELS") {
        Ok(d) => PathBuf::from(d),
        Err(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/hostile-models"),
    };
    let path = dir.join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; scripts/setup.sh writes it (rust/ffi/tests/fixtures/make_hostile_models.py)",
            path.display()
        )
    });
    let want = fixture()["sha256"][name].as_str().unwrap_or_else(|| panic!("{name}: no sha256"));
    let got = format!("{:x}", Sha256::digest(&bytes));
    assert_eq!(got, want, "{name}: not the file the fixture recorded (another gguf-py?)");
    path.to_string_lossy().into_owned()
}

fn load(path: &str) -> Value {
    call(&json!({"method": "loadModel", "path": path,
                 "options": {"device": "CPU", "threads": 1, "nCtx": 64}}))
}

/// Loads `path` and returns the model's number.
#[track_caller]
fn load_ok(path: &str) -> u64 {
    let r = load(path);
    r["ok"]["model"].as_u64().unwrap_or_else(|| panic!("{path}: {r}"))
}

fn release(model: u64) {
    ok(json!({"method": "releaseModel", "model": model}));
}

fn generate(model: u64, params: Value) -> Value {
    call(&json!({"method": "generate", "model": model, "params": params}))
}

fn greedy(model: u64, n: u32) -> Value {
    generate(model, json!({"prompt": "Hello world", "maxTokens": n, "temperature": 0}))
}

fn embed(model: u64) -> Value {
    call(&json!({"method": "embed", "model": model, "params": {"texts": ["Hello world"]}}))
}

/// The valid models the broken files are made from run as llama.cpp runs them: its tokens of
/// "Hello world" and its greedy tokens after them; their embeddings are finite and of unit norm.
#[test]
fn the_valid_models_run_as_llama_cpp_runs_them() {
    for name in ["qwen2-ok.gguf", "gemma3-ok.gguf"] {
        let want = &fixture()["llama_cpp"][name];
        let m = load_ok(&model(name));
        let toks = ok(json!({"method": "tokenize", "model": m,
                             "params": {"text": want["prompt"]}}));
        assert_eq!(toks["tokens"], want["tokens"], "{name}: llama.cpp's tokens");
        let r = greedy(m, 4);
        assert_eq!(r["ok"]["tokens"], want["greedy"], "{name}: llama.cpp's greedy tokens: {r}");
        let e = embed(m);
        let v: Vec<f64> = e["ok"]["embeddings"][0]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {e}"))
            .iter()
            .map(|x| x.as_f64().expect("a finite number"))
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{name}: norm {norm}");
        release(m);
    }
}

/// Finding 4: what llama.cpp accepts and then runs wrong (or what it refuses) is refused at
/// load, as `InvalidModel` naming the key or tensor and the value.
#[test]
fn finding_4_inconsistent_files_are_refused_at_load() {
    let cases: [(&str, &[&str]); 11] = [
        // Gemma's BOS past the vocabulary: llama.cpp falls back to id 1, Gemma's <eos>.
        (
            "gemma3-bos-past-vocab.gguf",
            &["tokenizer.ggml.bos_token_id", "token id 280 is past the vocabulary of 280 tokens"],
        ),
        ("qwen2-bos-u32-max.gguf", &["tokenizer.ggml.bos_token_id", "token id 4294967295"]),
        ("qwen2-eos-past-vocab.gguf", &["tokenizer.ggml.eos_token_id", "token id 273 is past"]),
        // One layer said, two described: llama.cpp refuses it too (unused tensors).
        (
            "qwen2-block-count-1.gguf",
            &["qwen2.block_count", "1 layers, but the file's tensors describe 2", "\"blk.1."],
        ),
        ("qwen2-block-count-3.gguf", &["qwen2", "\"blk.2.attn_norm.weight\" is missing"]),
        ("qwen2-no-q-bias.gguf", &["qwen2", "\"blk.0.attn_q.bias\" is missing"]),
        ("qwen2-token-type-7.gguf", &["tokenizer.ggml.token_type", "token 0 has type 7", "0 to 6"]),
        (
            "qwen2-merge-unknown.gguf",
            &["tokenizer.ggml.merges", "merge 1 \"Hel lo\"", "\"Hel\", which is not a token"],
        ),
        ("qwen2-merge-no-space.gguf", &["merge 0 \"He\"", "not two tokens separated by a space"]),
        ("qwen2-merge-empty.gguf", &["merge 0 \"\"", "not two tokens separated by a space"]),
        // Finding 5's head count: said as such, not as a tensor shape.
        (
            "qwen2-heads-5.gguf",
            &[
                "qwen2.attention.head_count",
                "5 heads do not divide qwen2.embedding_length = 32",
                "qwen2.attention.key_length is absent",
            ],
        ),
    ];
    for (name, words) in cases {
        let r = load(&model(name));
        expect_error(&r, "InvalidModel", words);
    }
}

/// Finding 5: NaN / Inf from the weights is the model's fault (`InvalidModel`) naming where it
/// first appeared, for `generate` (it was "sampling: logit 0 is NaN", `InvalidArgument`) and for
/// `embed` (it answered ok with every value null); other models keep working.
#[test]
fn finding_5_non_finite_values_are_invalid_model_naming_where() {
    let cases: [(&str, &str); 3] = [
        ("qwen2-nan-embd.gguf", "node \"embd\" (GET_ROWS): the token embeddings"),
        ("gemma3-nan-embd.gguf", "node \"embd\" (GET_ROWS): the token embeddings"),
        ("qwen2-inf-ffn-down-1.gguf", "of layer 1"),
    ];
    for (name, origin) in cases {
        let m = load_ok(&model(name));
        let r = greedy(m, 2);
        expect_error(&r, "InvalidModel", &["in its logits", origin, "weights are broken"]);
        let r = embed(m);
        expect_error(&r, "InvalidModel", &["in its embeddings", origin]);
        // The same again: the error is not a state the model is left in by the first one.
        expect_error(&greedy(m, 1), "InvalidModel", &[origin]);
        release(m);
    }
    // The first non-finite value of the Inf file is in layer 1, not before it.
    let m = load_ok(&model("qwen2-inf-ffn-down-1.gguf"));
    let message = greedy(m, 1)["error"]["message"].as_str().unwrap().to_string();
    assert!(!message.contains("of layer 0"), "{message}");
    release(m);
}

/// Finding 5: an id past the vocabulary given to `detokenize` is the caller's mistake
/// (`InvalidArgument`); a chat template that does not parse is the model's (`InvalidModel`),
/// and the model still generates from a prompt.
#[test]
fn finding_5_kinds_follow_whose_mistake_it_is() {
    let m = load_ok(&model("qwen2-ok.gguf"));
    let r = call(&json!({"method": "detokenize", "model": m, "params": {"tokens": [259, 268]}}));
    expect_error(&r, "InvalidArgument", &["268", "268 tokens"]);
    let r = call(&json!({"method": "detokenize", "model": m, "params": {"tokens": [259, 264]}}));
    assert_eq!(r["ok"]["text"], "Hello world", "{r}");
    release(m);

    let m = load_ok(&model("qwen2-bad-template.gguf"));
    let info = ok(json!({"method": "modelInfo", "model": m}));
    assert_eq!(info["hasChatTemplate"], false);
    let messages = json!([{"role": "user", "content": "hi"}]);
    let r = call(&json!({"method": "applyChatTemplate", "model": m,
                         "params": {"messages": messages}}));
    expect_error(&r, "InvalidModel", &["chat template is broken", "does not parse"]);
    let r = generate(m, json!({"messages": messages, "maxTokens": 1}));
    expect_error(&r, "InvalidModel", &["chat template is broken"]);
    let r = greedy(m, 2);
    assert_eq!(r["ok"]["tokens"].as_array().map(Vec::len), Some(2), "{r}");
    release(m);
}

/// `loadModel` and `ggufInfo` of `path` answer within 10 s with `InvalidModel` saying `what`.
#[track_caller]
fn expect_refused_promptly(path: &Path, what: &str) {
    let p = path.to_string_lossy().into_owned();
    for request in [
        json!({"method": "loadModel", "path": p, "options": {"device": "CPU"}}),
        json!({"method": "ggufInfo", "path": p}),
    ] {
        let start = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let r = request.clone();
        std::thread::spawn(move || {
            let _ = tx.send(call(&r));
        });
        let response = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{request} did not answer within 10 s"));
        expect_error(&response, "InvalidModel", &[&p, what, "not a model file"]);
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}

/// Finding 2: a FIFO blocked `loadModel`, `ggufInfo` (and the CLI) in `open` forever; devices,
/// /proc files and directories got wrong messages. Each is now refused at once as what it is.
#[test]
#[cfg(unix)]
fn finding_2_paths_that_are_not_regular_files_are_refused_at_once() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hostile_models_paths_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.gguf");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    expect_refused_promptly(&fifo, "a FIFO (named pipe)");
    expect_refused_promptly(Path::new("/dev/zero"), "a character device");
    expect_refused_promptly(&dir, "a directory");
    if cfg!(any(target_os = "linux", target_os = "android")) {
        expect_refused_promptly(Path::new("/proc/self/status"), "procfs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs test `name` of this binary again in a child process (with `TESSERA_HOSTILE_CHILD` set,
/// which makes it do its work) and asserts that the child exited normally: a SIGBUS kills the
/// child, not this test binary, and fails the test with the child's output.
fn in_child(name: &str) -> bool {
    if std::env::var_os("TESSERA_HOSTILE_CHILD").is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("TESSERA_HOSTILE_CHILD", "1")
        .output()
        .unwrap();
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), None, "the child was killed by a signal:\n{log}");
    }
    assert!(out.status.success(), "the child failed:\n{log}");
    assert!(log.contains("1 passed"), "the child ran nothing:\n{log}");
    false
}

/// A copy of `name` in a scratch directory of its own, which the test may change.
fn scratch_copy(name: &str, tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hostile_models_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::copy(model(name), &path).unwrap();
    path
}

/// Finding 1: a model file truncated on disk after `loadModel` killed the process with SIGBUS
/// at the next `generate` / `embed`. Now the next compute answers `InvalidModel` saying the file
/// changed (checked before every compute); so does a file rewritten in place at the same size.
/// Other models keep working.
#[test]
fn finding_1_a_model_file_changed_after_loading_is_an_error_not_a_crash() {
    if !in_child("finding_1_a_model_file_changed_after_loading_is_an_error_not_a_crash") {
        return;
    }
    let path = scratch_copy("qwen2-ok.gguf", "truncated");
    let p = path.to_string_lossy().into_owned();
    let m = load_ok(&p);
    let other = load_ok(&model("gemma3-ok.gguf"));
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(greedy(m, 1)["ok"]["tokens"].as_array().map(Vec::len), Some(1));
    // Truncated in place, as an app re-downloading a model to the same path does first.
    std::fs::File::options().write(true).open(&path).unwrap().set_len(100).unwrap();
    let words = [p.as_str(), "changed on disk after it was loaded", "load it again"];
    let size_words = format!("its size went from {size} to 100 bytes");
    for r in [greedy(m, 1), embed(m), greedy(m, 1)] {
        expect_error(&r, "InvalidModel", &words);
        expect_error(&r, "InvalidModel", &[&size_words]);
    }
    assert_eq!(greedy(other, 1)["ok"]["tokens"].as_array().map(Vec::len), Some(1));
    release(m);
    release(other);

    // Rewritten in place at the same size: the modification time tells.
    std::fs::copy(model("qwen2-ok.gguf"), &path).unwrap();
    let m = load_ok(&p);
    assert!(embed(m)["ok"].is_object());
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(5)).unwrap();
    expect_error(&greedy(m, 1), "InvalidModel", &["its modification time changed"]);
    release(m);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// Finding 1 for graph documents that compute from a model file's tensors (version 2): a
/// session keeping the file mapped answers `InvalidModel` after the file is truncated.
#[test]
fn finding_1_a_mapped_file_under_a_graph_document_is_checked_too() {
    if !in_child("finding_1_a_mapped_file_under_a_graph_document_is_checked_too") {
        return;
    }
    let path = scratch_copy("qwen2-ok.gguf", "document");
    let p = path.to_string_lossy().into_owned();
    let s = ok(json!({"method": "openSession", "options": {"device": "CPU", "threads": 1}}));
    let s = s["session"].as_u64().unwrap();
    let graph = json!({
        "version": 2,
        "files": [{"name": "m", "path": p}],
        "tensors": [{"name": "e", "file": "m", "tensor": "token_embd.weight"},
                    {"name": "ids", "type": "I32", "shape": [2], "values": [259, 264]}],
        "nodes": [{"name": "rows", "op": "GET_ROWS", "src": ["e", "ids"]}],
        "outputs": ["rows"]
    });
    let compute = || call(&json!({"method": "compute", "session": s, "graph": graph}));
    assert!(compute()["ok"].is_object());
    std::fs::File::options().write(true).open(&path).unwrap().set_len(100).unwrap();
    expect_error(&compute(), "InvalidModel", &[&p, "changed on disk", "to 100 bytes"]);
    // A graph whose compute failed is built afresh: from the truncated file, which is refused
    // as what it now is.
    expect_error(&compute(), "InvalidGraph", &[&p, "metadata entry count"]);
    ok(json!({"method": "closeSession", "session": s}));
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
