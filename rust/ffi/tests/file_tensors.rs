//! Graph documents version 2 (issue 13): constants that name tensors of a GGUF model file,
//! computed from the mapped file, against the same tensors dequantized by the `gguf` package
//! from PyPI and multiplied in f64; documents loaded once and computed many times with only their
//! inputs; errors for documents that misstate a file tensor.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use tessera_ffi::json_api::handle;
use tessera_ffi::{Session, SessionOptions, TensorData};

fn gemma() -> String {
    std::env::var("TESSERA_GEMMA_GGUF").unwrap_or_else(|_| {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/models/gemma3-270m-q4_k_m.gguf");
        assert!(
            p.exists(),
            "set TESSERA_GEMMA_GGUF to the Gemma 3 270M Q4_K_M file (see scripts/setup.sh)"
        );
        p.to_string_lossy().into_owned()
    })
}

/// gguf-py's dequantization of `specs` (`name` or `name:row,row`), as f32 rows.
fn reference(specs: &[&str]) -> Vec<Vec<f32>> {
    let python = std::env::var("TESSERA_PYTHON").expect(
        "TESSERA_PYTHON must name an interpreter with gguf and numpy (scripts/test.sh sets it)",
    );
    let dir = std::env::temp_dir().join(format!("tessera-file-tensors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gguf_dequant.py");
    let out = Command::new(python).arg(script).arg(gemma()).arg(&dir).args(specs).output().unwrap();
    assert!(out.status.success(), "gguf_dequant.py: {}", String::from_utf8_lossy(&out.stderr));
    let v = specs
        .iter()
        .map(|s| {
            let name = s.split(':').next().unwrap();
            let b = std::fs::read(dir.join(format!("{name}.f32"))).unwrap();
            b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        })
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    v
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got.iter().zip(want).map(|(&a, &b)| (f64::from(a) - b).powi(2)).sum();
    num / want.iter().map(|b| b * b).sum::<f64>()
}

const ROWS: [i32; 5] = [2, 818, 5279, 262143, 100000];

fn document() -> Value {
    json!({
        "version": 2,
        "files": [{"name": "gemma", "path": gemma()}],
        "tensors": [
            {"name": "up", "file": "gemma", "tensor": "blk.0.ffn_up.weight"},
            {"name": "embd", "file": "gemma", "tensor": "token_embd.weight", "type": "Q8_0", "shape": [640, 262144]},
            {"name": "x", "type": "F32", "shape": [640, 3]},
            {"name": "ids", "type": "I32", "shape": [5]}
        ],
        "nodes": [
            {"name": "y", "op": "MUL_MAT", "src": ["up", "x"]},
            {"name": "rows", "op": "GET_ROWS", "src": ["embd", "ids"]}
        ],
        "outputs": ["y", "rows"]
    })
}

fn inputs(x: &[f32]) -> Vec<TensorData> {
    vec![
        TensorData {
            name: "x".into(),
            dtype: "F32".into(),
            shape: vec![640, 3],
            data: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        },
        TensorData {
            name: "ids".into(),
            dtype: "I32".into(),
            shape: vec![5],
            data: ROWS.iter().flat_map(|v| v.to_le_bytes()).collect(),
        },
    ]
}

#[test]
fn file_tensors_compute_like_gguf_py_dequantized_in_f64() {
    let specs = ["blk.0.ffn_up.weight", "token_embd.weight:2,818,5279,262143,100000"];
    let r = reference(&specs);
    let (up, rows) = (&r[0], &r[1]);
    assert_eq!(up.len(), 640 * 2048);
    let session = Session::new(SessionOptions {
        device: "CPU".into(),
        threads: Some(2),
        memory_budget: None,
    })
    .unwrap();
    let handle = session.load_graph(document().to_string()).unwrap();
    for seed in 0..3u32 {
        let x: Vec<f32> = (0..640 * 3)
            .map(|i| {
                (((i as u32).wrapping_mul(2654435761) ^ (seed * 97)) % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        let out = session.compute_loaded(handle, inputs(&x)).unwrap();
        let y = f32s(&out[0].data);
        let want: Vec<f64> = (0..3)
            .flat_map(|n| {
                let x = &x;
                (0..2048).map(move |m| {
                    (0..640)
                        .map(|k| f64::from(up[m * 640 + k]) * f64::from(x[n * 640 + k]))
                        .sum::<f64>()
                })
            })
            .collect();
        // The kernel tests' matmul bound: the activations are quantized to Q8_0 as llama.cpp does.
        let e = nmse(&y, &want);
        assert!(e <= 5e-4, "MUL_MAT of blk.0.ffn_up.weight: nmse {e:e}");
        let got_rows = f32s(&out[1].data);
        let want_rows: Vec<f64> = rows.iter().map(|&v| f64::from(v)).collect();
        let e = nmse(&got_rows, &want_rows);
        assert!(e <= 1e-6, "GET_ROWS of token_embd.weight: nmse {e:e}");
        eprintln!("seed {seed}: matmul nmse {:e}", nmse(&y, &want));
    }
    session.release_graph(handle).unwrap();
    let again = session.compute_loaded(handle, inputs(&[0.0; 1920]));
    assert_eq!(again.unwrap_err().kind(), "Closed");
}

fn ok(request: Value) -> Value {
    let r = handle(&request.to_string());
    assert!(r.get("ok").is_some(), "{request} -> {r}");
    r["ok"].clone()
}

#[test]
fn a_loaded_document_computes_with_only_its_inputs_through_the_protocol() {
    let s = ok(json!({"method": "openSession", "options": {"device": "CPU", "threads": 1}}))
        ["session"]
        .clone();
    let g = ok(json!({"method": "loadGraph", "session": s, "graph": document()}))["graph"].clone();
    let x: Vec<f32> = (0..1920).map(|i| (i % 7) as f32 - 3.0).collect();
    let to_b64 = |b: Vec<u8>| tessera_ffi::document::base64_encode(&b);
    let req = |x: &[f32]| {
        json!({"method": "computeLoaded", "session": s, "graph": g, "inputs": [
            {"name": "x", "dtype": "F32", "shape": [640, 3], "data": to_b64(x.iter().flat_map(|v| v.to_le_bytes()).collect())},
            {"name": "ids", "dtype": "I32", "shape": [5], "data": to_b64(ROWS.iter().flat_map(|v| v.to_le_bytes()).collect())}
        ]})
    };
    let first = ok(req(&x));
    let twice = ok(req(&x));
    assert_eq!(first, twice, "the same inputs, the same outputs");
    let doubled: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
    let other = ok(req(&doubled));
    let y1 = f32s(
        &tessera_ffi::document::base64_decode(first["outputs"][0]["data"].as_str().unwrap())
            .unwrap(),
    );
    let y2 = f32s(
        &tessera_ffi::document::base64_decode(other["outputs"][0]["data"].as_str().unwrap())
            .unwrap(),
    );
    let e = nmse(&y2, &y1.iter().map(|&v| 2.0 * f64::from(v)).collect::<Vec<_>>());
    assert!(e < 1e-4, "a new input is used: {e:e}");
    // The tensor table through the protocol.
    let info = ok(json!({"method": "ggufInfo", "path": gemma(), "arrayItems": 4}));
    assert_eq!(info["tensors"].as_array().unwrap().len(), 236);
    assert_eq!(info["metadata"][0]["key"], "general.architecture");
    ok(json!({"method": "releaseGraph", "session": s, "graph": g}));
    ok(json!({"method": "closeSession", "session": s}));
}

#[test]
fn documents_that_misstate_a_file_tensor_are_errors_naming_both() {
    let session = Session::new(SessionOptions {
        device: "CPU".into(),
        threads: Some(1),
        memory_budget: None,
    })
    .unwrap();
    let mut doc = document();
    doc["tensors"][1]["type"] = json!("Q4_0");
    let e = session.load_graph(doc.to_string()).unwrap_err();
    assert_eq!(e.kind(), "ShapeMismatch", "{e:?}");
    assert!(e.message().contains("Q4_0") && e.message().contains("Q8_0"), "{}", e.message());
    let mut doc = document();
    doc["tensors"][0]["tensor"] = json!("blk.99.ffn_up.weight");
    let e = session.load_graph(doc.to_string()).unwrap_err();
    assert!(e.message().contains("blk.99.ffn_up.weight"), "{}", e.message());
    let mut doc = document();
    doc["files"][0]["path"] = json!("/nonexistent/model.gguf");
    let e = session.load_graph(doc.to_string()).unwrap_err();
    assert!(e.message().contains("/nonexistent/model.gguf"), "{}", e.message());
    let mut doc = document();
    doc["version"] = json!(1);
    let e = session.load_graph(doc.to_string()).unwrap_err();
    assert_eq!(e.kind(), "InvalidGraph", "files need version 2: {e:?}");
}
