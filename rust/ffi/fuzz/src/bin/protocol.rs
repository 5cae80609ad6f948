//! Fuzz target `protocol`: the JSON protocol of docs/native-protocol.md through the C ABI
//! (`tessera_call_json`), graph documents included. Errors are fine; a crash, a hang, a
//! response that is not one JSON object with `ok` or `error`, an unknown error kind or an
//! `Internal` error (the kind left for bugs) is a finding.
//!
//! An input is up to 8 requests, one per line, run in order (so a session opened by one line
//! can be computed on by the next: `$S` in a line stands for the number of the session opened
//! last, `$G` for the handle of the graph loaded last); every session and model is closed
//! after the input, so inputs do not see each other's state. Two things are kept inside the
//! harness's sandbox:
//! - memory and time: sessions without a budget get 1 MiB (`set_default_memory_budget`), and
//!   larger `memoryBudget` options are lowered to it, so a request cannot make the process
//!   allocate more than the fuzzer's memory limit, and the largest matrix product a plan can
//!   hold (295 x 295 x 295) takes about 30 ms. (A document of dozens of such products could
//!   still exceed AFL's 1 s timeout: such a hang would be the harness's limit, not a bug.)
//! - files: every `path` (`loadModel`, `ggufInfo`, a version-2 document's `files`,
//!   `setModelsDirectory`) is mapped into a temporary directory of small files (broken ones,
//!   and one valid GGUF), so no real file (a 253 MB model, a device) is ever read or written;
//!   every `url` (`downloadModel`) becomes one of a closed port of the loopback.

#[path = "../common.rs"]
mod common;

use common::call;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The budget of every fuzzed session.
const BUDGET: u64 = 1 << 20;

/// A directory of small model files, made once: broken ones (empty, text, truncated, zeros)
/// and one valid GGUF with three tensors (`a.f32` F32 [4, 3], `b.q8_0` Q8_0 [64], `c.q4_k`
/// Q4_K [256, 2]; the GGUF target's seed), so version-2 documents can take constants from it.
fn sandbox() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tessera-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a sandbox directory");
        let files: [(&str, &[u8]); 5] = [
            ("empty.gguf", b""),
            ("text.gguf", b"not a model\n"),
            ("truncated.gguf", b"GGUF\x03\x00\x00\x00\x01\x00"),
            ("zeros.gguf", &[0u8; 64]),
            ("small.gguf", include_bytes!("../../../../gguf/fuzz/seeds/gguf/valid-small.gguf")),
        ];
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("a sandbox file");
        }
        dir
    })
}

/// A path mapped into the sandbox: its letters, digits, `.`, `_` and `-` (at most 64, no
/// leading dot) name a file there, one that may not exist.
fn mapped(path: &str) -> String {
    sandbox().join(mapped_name(path)).to_string_lossy().into_owned()
}

/// The file name [`mapped`] gives `path`.
fn mapped_name(path: &str) -> String {
    let name: String = path
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(64)
        .collect();
    let name = name.trim_start_matches('.');
    if name.is_empty() { "missing" } else { name }.to_string()
}

/// Maps every `path` string (of `loadModel`, `ggufInfo`, a version-2 document's `files`,
/// `setModelsDirectory`, graphs given as strings included) into the sandbox, every `url` to a
/// closed port of the loopback, and lowers every `memoryBudget` above [`BUDGET`] to it.
fn sandbox_value(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                match (key.as_str(), item) {
                    ("path", Value::String(path)) => *path = mapped(path),
                    // Downloads never leave the machine: a closed port of the loopback.
                    ("url", Value::String(url)) => {
                        *url = format!("http://127.0.0.1:9/{}", mapped_name(url))
                    }
                    ("memoryBudget", budget) if budget.as_u64().is_some_and(|b| b > BUDGET) => {
                        *budget = BUDGET.into()
                    }
                    ("graph", Value::String(text)) => {
                        if let Ok(mut graph) = serde_json::from_str::<Value>(text) {
                            let before = graph.clone();
                            sandbox_value(&mut graph);
                            if graph != before {
                                *text = graph.to_string();
                            }
                        }
                    }
                    (_, item) => sandbox_value(item),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sandbox_value),
        _ => {}
    }
}

/// The line re-serialized with sandboxed paths and budgets, when it has any (else `None`: the
/// line is sent as it is, duplicate keys, odd numbers and bad JSON included).
fn sandboxed(line: &str) -> Option<String> {
    let mut value: Value = serde_json::from_str(line).ok()?;
    let before = value.clone();
    sandbox_value(&mut value);
    (value != before).then(|| value.to_string())
}

fn run(data: &[u8]) {
    // The C ABI reads up to the first NUL.
    let data = &data[..data.iter().position(|&b| b == 0).unwrap_or(data.len())];
    let (mut last_session, mut last_graph) = (0u64, 0u64);
    // Empty lines (a trailing newline) are skipped, unless the whole input is empty: that is
    // sent as the empty request.
    let lines = data.split(|&b| b == b'\n').filter(|line| !line.is_empty() || data.is_empty());
    for line in lines.take(8) {
        let mut request = line.to_vec();
        if let Ok(text) = std::str::from_utf8(line) {
            let text = text
                .replace("$S", &last_session.to_string())
                .replace("$G", &last_graph.to_string());
            request = sandboxed(&text).unwrap_or(text).into_bytes();
        }
        let response = call(&request);
        if let Some(s) = response["ok"]["session"].as_u64() {
            last_session = s;
        }
        if let Some(g) = response["ok"]["graph"].as_u64() {
            last_graph = g;
        }
    }
    call(br#"{"method":"closeAllSessions"}"#);
    tessera_ffi::release_all_models();
}

fn main() {
    tessera_ffi::session::set_default_memory_budget(Some(BUDGET));
    afl::fuzz!(|data: &[u8]| run(data));
}
