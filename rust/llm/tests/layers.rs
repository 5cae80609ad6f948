//! The named intermediates of one decode, layer by layer, against llama.cpp's
//! (tests/fixtures/layers-<model>.json, recorded by record_layers.py through llama.cpp's eval
//! callback with llama-cpp-python 0.3.36): the graphs name their tensors as llama.cpp's do
//! (`attn_norm-0`, `Qcur-0`, `kqv_out-0`, `ffn_out-1`, `l_out-1`, `result_norm`, ...), and
//! Tessera's eval callback ([`Context::set_eval_callback`]) reads them during the same decode.
//!
//! Every name llama.cpp's callback showed must be here too, except views (a reshape or view
//! node in ggml, which Tessera does not compute, e.g. Phi-3's `Vcur`, a view of the fused
//! projection) and llama.cpp's `norm-N`, the RMS_NORM before each norm's weight, which Tessera
//! leaves unnamed (the weighted product, `attn_norm-N`, `ffn_norm-N`, ... is compared), and
//! the copy llama.cpp makes of a recurrent layer's state (`conv_states-N`, GET_ROWS from its
//! slot), which Tessera's graph reads in place.
//!
//! Tolerance, measured rather than chosen: llama.cpp's own intermediates move when only the
//! rounding of its attention changes (flash attention on vs off, `fa_off_rel_rms` per name: 0
//! before the first attention, then about 3e-4 after it, growing to 2-3 % by the last layer of
//! these random-weight models, whose activations have outliers that set the 8-bit block scales
//! of the next matmul's quantized activations; where recorded, also flash attention off with an
//! F32 KV cache, `fa_off_kv_f32_rel_rms`, a second sample of the same noise, which in tiny-lfm2's
//! convolution layers, whose gates multiply two noisy values, is up to 5 times the first). A tensor's relative RMS difference from
//! llama.cpp's may be at most [`MARGIN`] times the largest spread llama.cpp showed up to that
//! tensor, and never needs to be below [`FLOOR`] (float summation order and RoPE tables before
//! the first attention). A wrong block (a missing norm, the other RoPE mode, a missing bias, the
//! wrong FFN half) is off by tens of percent at its first tensor and fails there, naming it.

mod common;

use common::{fixture, ids, registry, sha256_file, tiny_model};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tessera_core::tensor_data::get_tensor_dense;
use tessera_core::DType;
use tessera_llm::{Context, ContextOptions, DeviceChoice, Model, Rows};

/// Margin over llama.cpp's own spread.
const MARGIN: f64 = 2.0;

/// The smallest tolerance (relative RMS): what float summation order alone moves.
const FLOOR: f64 = 2e-3;

/// ggml's ops whose node is a view of another tensor's memory (not computed by Tessera).
const VIEW_OPS: [&str; 4] = ["RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE"];

/// Standard base64 (with padding) decoded.
fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        out.extend_from_slice(&acc.to_be_bytes()[1..chunk.len()]);
    }
    out
}

fn rel_rms(ours: &[f32], want: &[f32]) -> f64 {
    let (mut d, mut w) = (0f64, 0f64);
    for (&a, &b) in ours.iter().zip(want) {
        d += (f64::from(a) - f64::from(b)).powi(2);
        w += f64::from(b).powi(2);
    }
    (d / w.max(1e-30)).sqrt()
}

/// Decodes the fixture's prompt on `name` with an eval callback and compares every named
/// tensor with llama.cpp's; returns how many were compared.
fn compare_layers(name: &str) -> usize {
    let fx = fixture(&format!("layers-{name}.json"));
    let path = tiny_model(name);
    assert_eq!(sha256_file(&path), fx["model_sha256"].as_str().unwrap(), "{name}: model file");
    let reg = registry();
    let model = Arc::new(Model::load(&path, &reg, &DeviceChoice::Auto, &mut |_| true).unwrap());
    let want_ids = ids(&fx["ids"]);
    let prompt = fx["prompt"].as_str().unwrap();
    assert_eq!(model.tokenizer().encode(prompt, true, true), want_ids, "{name}: token ids");
    let n_ctx = fx["n_ctx"].as_u64().unwrap() as usize;
    let opts =
        ContextOptions { n_ctx, n_batch: n_ctx, threads: Some(1), ..ContextOptions::default() };
    let mut ctx = Context::new(model, &reg, &opts).unwrap();
    let seen: Arc<Mutex<HashMap<String, Vec<f32>>>> = Arc::default();
    let sink = seen.clone();
    ctx.set_eval_callback(Some(Box::new(move |g, id| {
        let t = g.tensor(id);
        if !t.name.is_empty() && t.dtype() == DType::F32 {
            let bytes = get_tensor_dense(g, id).expect("a computed node reads back");
            let values = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()));
            sink.lock().unwrap().insert(t.name.clone(), values.collect());
        }
        true
    })));
    ctx.decode(&want_ids, Rows::Last).unwrap();
    let seen = seen.lock().unwrap();
    let tensors = &fx["tensors"];
    let mut spread = 0f64;
    let mut compared = 0;
    for n in fx["order"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()) {
        let t = &tensors[n];
        let op = t["op"].as_str().unwrap();
        let Some(ours) = seen.get(n) else {
            let is_norm = n == "norm" || n.strip_prefix("norm-").is_some();
            // llama.cpp copies a recurrent layer's state out of its slot (GET_ROWS,
            // `conv_states-N`); Tessera's graph reads the state where it is.
            let state_copy = n.starts_with("conv_states-") && op == "GET_ROWS";
            assert!(
                VIEW_OPS.contains(&op) || is_norm || state_copy,
                "{name}: llama.cpp's {n} ({op}) has no tensor of that name here"
            );
            continue;
        };
        let want: Vec<f32> = base64(t["f32_b64"].as_str().unwrap())
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let ne: Vec<usize> =
            t["ne"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(
            ours.len(),
            want.len(),
            "{name}: {n} has {} values, llama.cpp's {ne:?}",
            ours.len()
        );
        for key in ["fa_off_rel_rms", "fa_off_kv_f32_rel_rms"] {
            spread = spread.max(t.get(key).and_then(Value::as_f64).unwrap_or(0.0));
        }
        let tol = (MARGIN * spread).max(FLOOR);
        let err = rel_rms(ours, &want);
        eprintln!(
            "{name}: {n:16} {op:14} rel. RMS {err:.2e} (llama.cpp on/off so far {spread:.2e})"
        );
        assert!(
            err <= tol,
            "{name}: {n} ({op}) differs from llama.cpp's by {err:.3e} relative RMS, more than \
             {tol:.3e} ({MARGIN} x llama.cpp's own flash attention on/off spread so far, at \
             least {FLOOR})"
        );
        compared += 1;
    }
    compared
}

/// The layers of `name`'s fixture run (its `l_out-N` names).
fn layers_recorded(name: &str) -> usize {
    let fx = fixture(&format!("layers-{name}.json"));
    let order = fx["order"].as_array().unwrap();
    order.iter().filter(|v| v.as_str().unwrap().starts_with("l_out-")).count()
}

/// Compares `name`'s intermediates and checks that every one of its `n_layer` layers was
/// recorded, with at least `per_layer` tensors compared per layer.
fn check(name: &str, n_layer: usize, per_layer: usize) {
    assert_eq!(layers_recorded(name), n_layer, "{name}: layers in the fixture");
    let n = compare_layers(name);
    assert!(n >= n_layer * per_layer, "{name}: only {n} tensors compared");
}

#[test]
fn tiny_llama_intermediates_match_llama_cpp() {
    // attn_norm, Qcur, Kcur, Vcur, kqv_out, attn_out, ffn_inp, ffn_norm, ffn_gate, ffn_up,
    // ffn_swiglu, ffn_out, l_out
    check("tiny-llama", 2, 13);
}

#[test]
fn tiny_qwen2_intermediates_match_llama_cpp() {
    check("tiny-qwen2", 2, 12);
}

#[test]
fn tiny_qwen3_intermediates_match_llama_cpp() {
    // ... and Qcur_normed, Kcur_normed
    check("tiny-qwen3", 3, 14);
}

#[test]
fn tiny_smollm3_intermediates_match_llama_cpp() {
    check("tiny-smollm3", 4, 13);
}

#[test]
fn tiny_phi3_intermediates_match_llama_cpp() {
    // attn_norm, wqkv, Qcur, Kcur, kqv_out, ffn_norm, ffn_up, ffn_swiglu, ffn_out, l_out
    check("tiny-phi3", 2, 10);
}

#[test]
fn tiny_lfm2_intermediates_match_llama_cpp() {
    // operator_norm, conv.in_proj, conv.conv, conv.out_proj (or Qcur, q_layernorm, Vcur, Kcur,
    // k_layernorm, kqv_out, self_attn.out_proj), ffn_out (the FFN's normed input), ffn_gate,
    // ffn_up, ffn_swiglu, l_out
    check("tiny-lfm2", 6, 10);
}

#[test]
fn tiny_qwen35_intermediates_match_llama_cpp() {
    // delta-net layers: attn_norm, linear_attn_qkv_mixed, z, beta_sigmoid, a_softplus, gate,
    // conv_input, conv_output_raw, conv_output_silu, q_conv_predelta, k_conv_predelta,
    // linear_attn_out, attn_residual, attn_post_norm, ffn_gate, ffn_up, ffn_swiglu, ffn_out,
    // l_out; attention layers: Qcur_full, Qcur_normed, Kcur_normed, Qcur, Kcur,
    // gate_reshaped, gate_sigmoid, attn_gated, attn_output, ...
    check("tiny-qwen35", 6, 16);
}

#[test]
fn tiny_gemma4_intermediates_match_llama_cpp() {
    // KV layers: attn_norm, Qcur, Qcur_normed, Qcur_pos, Kcur, Kcur_normed, Kcur_pos, Vcur,
    // Vcur_normed, kqv_out, attn_post_norm, attn_out, ffn_norm, ffn_gate, ffn_up, ffn_geglu,
    // ffn_out, ffn_post_norm, pe_in, per_layer_embd_out, l_out; the shared-KV layers all but
    // the keys and values; and inp_per_layer_selected, per_layer_proj, inp_per_layer
    check("tiny-gemma4", 6, 14);
}
