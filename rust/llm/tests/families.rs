//! The architectures added with the per-architecture modules, SmolLM3 and Phi-3, beyond their
//! comparison with llama.cpp (models.rs, layers.rs): the KV cache gives the same logits for a
//! prompt in one batch, in chunks and one token at a time, and after a reused prefix; a missing
//! or misshapen tensor is an error naming it, metadata out of range one naming the key; each
//! family's chat template (the file's) loads and renders as Python's jinja2 renders it
//! (fixtures/chat/hf_renders.json).

mod common;

use common::{argmax, context, load, load_bytes, max_diff, patch, repo_root, set_u32, tiny_model};
use serde_json::Value;
use std::sync::Arc;
use tessera_llm::chat::ChatMessage;
use tessera_llm::{LlmError, Model, Rows};

fn load_tiny(name: &str) -> Arc<Model> {
    load(&tiny_model(name))
}

const TEXT: &str =
    "Once upon a time, in a small village by the sea, there lived an old fisherman who";

/// Largest difference between batch sizes: these models mix F32 / F16 weights (whose GEMV and
/// GEMM sum in different orders) with quantized ones, as tiny-qwen3 in runtime.rs; a wrong
/// cache cell, mask or RoPE position (SmolLM3's unrotated layer, Phi-3's factors) moves the
/// logits (standard deviation ~16) by whole units.
const BATCH_TOL: f32 = 0.25;

/// The prompt's last logits in one batch, in batches of 7 and one token at a time, agree; so do
/// the rows of one batch and the prompt cut there, and a continuation after a reused prefix.
/// Phi-3 also at a context beyond its original one (LongRoPE's long factors).
#[test]
fn batches_chunks_and_single_tokens_agree() {
    for (name, n_ctx) in [("tiny-smollm3", 256), ("tiny-phi3", 256), ("tiny-phi3", 2048)] {
        let model = load_tiny(name);
        let ids = model.tokenizer().encode(TEXT, true, true);
        assert!(ids.len() > 14, "{name}: two chunks of 7");
        let run =
            |batch| context(&model, n_ctx, batch).decode(&ids, Rows::Last).unwrap().last().to_vec();
        let whole = run(512);
        for batch in [7, 1] {
            let part = run(batch);
            let d = max_diff(&whole, &part);
            assert!(d <= BATCH_TOL, "{name} n_ctx {n_ctx}: batches of {batch} differ by {d}");
            assert_eq!(argmax(&whole), argmax(&part), "{name}: top-1 with batches of {batch}");
        }
        // Every row of one batch is the last row of the prompt cut there.
        let all = context(&model, n_ctx, 512).decode(&ids, Rows::All).unwrap();
        for cut in [1, 9, ids.len()] {
            let prefix = context(&model, n_ctx, 512).decode(&ids[..cut], Rows::Last).unwrap();
            let d = max_diff(all.row(cut - 1), prefix.last());
            assert!(d <= BATCH_TOL, "{name}: row {} differs from the cut prompt by {d}", cut - 1);
        }
        // A prefix kept in the cache: the rest computed after it gives what a fresh context does.
        let mut ctx = context(&model, n_ctx, 512);
        ctx.decode(&ids[..10], Rows::Last).unwrap();
        let mut other = ids[..6].to_vec();
        other.extend_from_slice(&ids[10..]);
        let common = ids[..10].iter().zip(&other).take_while(|(a, b)| a == b).count();
        let kept = ctx.reuse_prefix(&other);
        assert!(kept == common && kept >= 6, "{name}: kept {kept} of a shared prefix of {common}");
        let reused = ctx.decode(&other[kept..], Rows::Last).unwrap();
        let fresh = context(&model, n_ctx, 512).decode(&other, Rows::Last).unwrap();
        let d = max_diff(reused.last(), fresh.last());
        assert!(d <= BATCH_TOL, "{name}: after a reused prefix, {d} from a fresh context");
    }
}

fn expect_missing(bytes: Vec<u8>, arch: &str, name: &str) {
    match load_bytes(bytes) {
        Err(LlmError::MissingTensor { arch: a, name: n }) => {
            assert_eq!((a.as_str(), n.as_str()), (arch, name))
        }
        other => panic!("expected MissingTensor {name}, got {:?}", other.err()),
    }
}

fn expect_shape(bytes: Vec<u8>, name: &str, expected: &[usize], found: &[usize]) {
    match load_bytes(bytes) {
        Err(LlmError::TensorShape { name: n, expected: e, found: f, .. }) => {
            assert_eq!((n.as_str(), e.as_slice(), f.as_slice()), (name, expected, found))
        }
        other => panic!("expected TensorShape {name}, got {:?}", other.err()),
    }
}

fn expect_key(bytes: Vec<u8>, key: &str) {
    match load_bytes(bytes) {
        Err(LlmError::BadHyperParameter { key: k, .. }) => assert_eq!(k, key),
        other => panic!("expected BadHyperParameter {key}, got {:?}", other.err()),
    }
}

#[test]
fn bad_smollm3_files_name_the_tensor_or_key() {
    let original = std::fs::read(tiny_model("tiny-smollm3")).unwrap();
    let mut b = original.clone();
    patch(&mut b, b"blk.3.ffn_down.weight", b"blk.3.ffn_down.weighs");
    expect_missing(b, "smollm3", "blk.3.ffn_down.weight");
    // 8 KV heads make attn_k 128 wide where the file's is 32.
    let mut b = original.clone();
    set_u32(&mut b, "smollm3.attention.head_count_kv", 8);
    expect_key(b, "smollm3.attention.head_count_kv"); // 8 does not divide 4 query heads
    let mut b = original.clone();
    set_u32(&mut b, "smollm3.attention.head_count", 8);
    set_u32(&mut b, "smollm3.attention.head_count_kv", 4);
    // head size 64 / 8 = 8, below the 16 RoPE dimensions
    expect_key(b, "smollm3.rope.dimension_count");
    let mut b = original.clone();
    set_u32(&mut b, "smollm3.block_count", 0);
    expect_key(b, "smollm3.block_count");
    let mut b = original;
    set_u32(&mut b, "smollm3.feed_forward_length", 128);
    expect_shape(b, "blk.0.ffn_gate.weight", &[64, 128], &[64, 256]);
}

#[test]
fn bad_phi3_files_name_the_tensor_or_key() {
    let original = std::fs::read(tiny_model("tiny-phi3")).unwrap();
    // Phi-3's Q/K/V are one tensor: without it (and without separate ones) it is the one named.
    let mut b = original.clone();
    patch(&mut b, b"blk.1.attn_qkv.weight", b"blk.1.attn_qkv.weighs");
    expect_missing(b, "phi3", "blk.1.attn_qkv.weight");
    // The fused gate-up projection is 2 n_ff wide: n_ff 128 finds ffn_down 256 x 64 first.
    let mut b = original.clone();
    set_u32(&mut b, "phi3.feed_forward_length", 128);
    expect_shape(b, "blk.0.ffn_down.weight", &[128, 64], &[256, 64]);
    // 8 rotated dimensions need 4 LongRoPE factors; the file has 6.
    let mut b = original.clone();
    set_u32(&mut b, "phi3.rope.dimension_count", 8);
    expect_shape(b, "rope_factors_long.weight", &[4], &[6]);
    // A rotated width beyond the head (16) is out of range.
    let mut b = original.clone();
    set_u32(&mut b, "phi3.rope.dimension_count", 18);
    expect_key(b, "phi3.rope.dimension_count");
    let mut b = original;
    set_u32(&mut b, "phi3.rope.scaling.original_context_length", 0);
    expect_key(b, "phi3.rope.scaling.original_context_length");
}

/// The templates the tiny models carry (the official SmolLM3 and Phi-3.5-mini ones) load from
/// the files and render what Python's jinja2 rendered for the same conversations.
#[test]
fn each_familys_chat_template_loads_and_renders_as_jinja2() {
    let path = repo_root().join("rust/llm/tests/fixtures/chat/hf_renders.json");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let fixed_now = rec["fixed_now"].as_i64().unwrap();
    for (name, template) in [("tiny-smollm3", "smollm-3"), ("tiny-phi3", "phi-3.5")] {
        let model = load_tiny(name);
        let t = model.chat_template().unwrap_or_else(|e| panic!("{name}: {e}"));
        t.set_fixed_time(Some(fixed_now));
        let mut compared = 0;
        for r in rec["records"].as_array().unwrap() {
            let extra_empty = r["extra"].as_object().is_none_or(|o| o.is_empty());
            if r["template"] != template || !extra_empty || r["expected"].is_null() {
                continue;
            }
            let messages: Vec<ChatMessage> = serde_json::from_value(r["messages"].clone()).unwrap();
            let add = r["add_generation_prompt"].as_bool().unwrap();
            let got = t.render(&messages, add).unwrap();
            assert_eq!(got, r["expected"].as_str().unwrap(), "{name}: {}", r["case"]);
            compared += 1;
        }
        assert!(compared >= 5, "{name}: {compared} conversations compared");
    }
}
