//! Gemma 4 (E2B / E4B's layout), beyond its comparison with llama.cpp (models.rs, layers.rs):
//! its KV cache (sliding-window layers of their own head size, the top layers attending over
//! the cache of a lower layer) gives the same logits whether a prompt comes in one batch, in
//! batches of 7 or one token at a time, and every row of one batch is the last row of the
//! prompt cut there (common/hybrid.rs's check, the prompt longer than the window); a context
//! shift is refused with a typed error; a reused prefix continues as a fresh context; a saved
//! session continues bit for bit; a missing or misshapen tensor names it, metadata out of
//! range names the key.

mod common;

use common::{
    context, expect_load_error, hybrid, load, patch, set_bool_entry, set_u32, tiny_model,
};
use std::sync::Arc;
use tessera_llm::{LlmError, Model, Rows};

fn model() -> Arc<Model> {
    load(&tiny_model("tiny-gemma4"))
}

#[test]
fn batches_chunks_and_single_tokens_agree() {
    hybrid::batches_chunks_and_single_tokens_agree(&model());
}

#[test]
fn the_shared_kv_layers_have_no_cache_the_table_is_mapped_and_a_shift_is_refused() {
    let m = model();
    let hp = m.hparams();
    assert_eq!((hp.n_layer, hp.n_layer_kv), (6, 3));
    assert_eq!((0..6).map(|il| hp.kv_source(il)).collect::<Vec<_>>(), vec![0, 1, 2, 1, 1, 2]);
    // The per-layer embeddings (96 values of each of 262144 tokens, Q8_0) are read in place
    // from the mapped file, not copied.
    let table = &m.tensors().per_layer.as_ref().expect("per-layer embeddings").token_embd;
    assert_eq!(table.info.shape(), &[96, 262144]);
    assert!(m.weights().mapped_bytes() >= table.info.size, "the table is not read in place");
    let mut ctx = context(&m, 64, 64);
    // Three layers' keys and values per position: 2 KV heads of 16 (sliding layers 0 and 1)
    // and of 32 (global layer 2), F16 K and V.
    assert_eq!(ctx.kv_bytes_per_token(), 2 * 2 * (16 + 16 + 32) * 2);
    let ids = m.tokenizer().encode("The capital of France is", true, true);
    ctx.decode(&ids, Rows::Last).unwrap();
    assert!(!ctx.can_shift());
    match ctx.shift(1, 2) {
        Err(LlmError::ContextShiftUnsupported { arch }) => assert_eq!(arch, "gemma4"),
        other => panic!("expected ContextShiftUnsupported, got {other:?}"),
    }
}

/// A prefix kept in the cache (beyond the window of 8: the sliding layers' ring and the
/// shared layers' reads of it) and the rest computed after it give what a fresh context gives.
#[test]
fn a_reused_prefix_continues_as_a_fresh_context() {
    let m = model();
    let text = "Once upon a time, in a small village by the sea, there lived an old fisherman who";
    let ids = m.tokenizer().encode(text, true, true);
    let mut ctx = context(&m, 256, 512);
    ctx.decode(&ids[..12], Rows::Last).unwrap();
    let mut other = ids[..10].to_vec();
    other.extend_from_slice(&ids[13..]);
    let kept = ctx.reuse_prefix(&other);
    assert_eq!(kept, 10);
    let reused = ctx.decode(&other[kept..], Rows::Last).unwrap().last().to_vec();
    let fresh = context(&m, 256, 512).decode(&other, Rows::Last).unwrap().last().to_vec();
    let d = common::max_diff(&reused, &fresh);
    let mean = fresh.iter().sum::<f32>() / fresh.len() as f32;
    let sd = (fresh.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / fresh.len() as f32).sqrt();
    eprintln!("after a reused prefix: {d} from a fresh context (logits' sd {sd})");
    assert!(d <= 0.25, "after a reused prefix, {d} from a fresh context");
    assert_eq!(common::argmax(&reused), common::argmax(&fresh));
}

/// A session saved after a prompt longer than the window (the rows of the three layers with a
/// cache of their own) and loaded into a fresh context computes the next tokens' logits bit
/// for bit as the saving context does.
#[test]
fn a_session_round_trip_continues_bit_for_bit() {
    let m = model();
    let ids =
        m.tokenizer().encode("Once upon a time, in a small village by the sea, there", true, true);
    assert!(ids.len() > 8, "longer than the window");
    let path = std::env::temp_dir().join(format!("tessera-gemma4-{}.session", std::process::id()));
    let mut a = context(&m, 64, 64);
    a.decode(&ids, Rows::Last).unwrap();
    a.save_session(&path).unwrap();
    let mut b = context(&m, 64, 64);
    b.decode(&ids[..3], Rows::Last).unwrap();
    assert_eq!(b.load_session(&path).unwrap(), ids.len());
    let _ = std::fs::remove_file(&path);
    let mut next = ids[1];
    for step in 0..3 {
        let la = a.decode(&[next], Rows::Last).unwrap().last().to_vec();
        let lb = b.decode(&[next], Rows::Last).unwrap().last().to_vec();
        assert!(
            la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()),
            "step {step}: the loaded session's logits differ"
        );
        next = common::argmax(&la) as u32;
    }
}

#[test]
fn bad_gemma4_files_name_the_tensor_or_key() {
    let original = std::fs::read(tiny_model("tiny-gemma4")).unwrap();
    let missing = |name: &'static str| move |e: &LlmError| matches!(e, LlmError::MissingTensor { arch, name: n } if arch == "gemma4" && n == name);
    let key = |key: &'static str| move |e: &LlmError| matches!(e, LlmError::BadHyperParameter { key: k, .. } if k == key);
    let mut b = original.clone();
    patch(&mut b, b"per_layer_token_embd.weight", b"per_layer_token_embd.weighs");
    expect_load_error(
        b,
        missing("per_layer_token_embd.weight"),
        "the per-layer embeddings missing",
    );
    let mut b = original.clone();
    patch(&mut b, b"blk.4.inp_gate.weight", b"blk.4.inp_gate.weighs");
    expect_load_error(b, missing("blk.4.inp_gate.weight"), "a layer's per-layer gate missing");
    let mut b = original.clone();
    patch(&mut b, b"rope_freqs.weight", b"rope_freqs.weighs");
    expect_load_error(b, missing("rope_freqs.weight"), "the global layers' RoPE factors missing");
    // No shared layers: layer 3 then writes its own cache, and the file has no attn_k for it.
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.attention.shared_kv_layers", 0);
    expect_load_error(b, missing("blk.3.attn_k.weight"), "a KV layer without its keys");
    // Two shared layers leave layers 0-3, ending with a global then a sliding one.
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.attention.shared_kv_layers", 2);
    expect_load_error(
        b,
        key("gemma4.attention.shared_kv_layers"),
        "the KV layers ending with a sliding one",
    );
    // Four shared layers leave layers 0 and 1, both sliding: no global layer to share.
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.attention.shared_kv_layers", 4);
    expect_load_error(
        b,
        key("gemma4.attention.shared_kv_layers"),
        "no global layer below the shared ones",
    );
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.attention.shared_kv_layers", 7);
    expect_load_error(
        b,
        key("gemma4.attention.shared_kv_layers"),
        "more shared layers than layers",
    );
    // Layer 1 made global: its heads are 32 wide where the file has 16.
    let mut b = original.clone();
    set_bool_entry(&mut b, "gemma4.attention.sliding_window_pattern", 1, false);
    expect_load_error(
        b,
        key("gemma4.attention.shared_kv_layers"),
        "the last KV layers both global",
    );
    let mut b = original.clone();
    set_bool_entry(&mut b, "gemma4.attention.sliding_window_pattern", 0, false);
    expect_load_error(
        b,
        |e| {
            matches!(e, LlmError::TensorShape { name, expected, found, .. }
                if name == "blk.0.attn_q.weight" && expected == &[64, 128] && found == &[64, 64])
        },
        "a sliding layer's heads read as a global layer's",
    );
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.embedding_length_per_layer_input", 8);
    expect_load_error(
        b,
        |e| {
            matches!(e, LlmError::TensorShape { name, expected, found, .. }
                if name == "per_layer_token_embd.weight" && expected == &[48, 262144] && found == &[96, 262144])
        },
        "the per-layer table's width",
    );
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.attention.key_length_swa", 0);
    expect_load_error(b, key("gemma4.attention.key_length_swa"), "an empty sliding head");
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.attention.value_length_swa", 8);
    expect_load_error(
        b,
        key("gemma4.attention.value_length_swa"),
        "sliding values of another width",
    );
    let mut b = original.clone();
    set_u32(&mut b, "gemma4.rope.dimension_count_swa", 18);
    expect_load_error(
        b,
        key("gemma4.rope.dimension_count_swa"),
        "more rotated dimensions than the head",
    );
    let mut b = original;
    patch(
        &mut b,
        b"gemma4.attention.sliding_window_pattern",
        b"gemma4.attention.sliding_window_patterx",
    );
    expect_load_error(
        b,
        key("gemma4.attention.sliding_window_pattern"),
        "no sliding-window pattern",
    );
}
