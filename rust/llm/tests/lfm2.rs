//! LFM2, a hybrid of short-convolution layers (a recurrent state) and attention layers, beyond
//! its comparison with llama.cpp (models.rs, layers.rs): the recurrent state's checks of
//! common/hybrid.rs (batches, chunks and single tokens agree; prefix reuse through state
//! checkpoints; a cancelled decode); a missing or misshapen tensor names it, metadata out of
//! range names the key; its chat template (LFM2.5-Instruct, the file's) renders as Python's
//! jinja2 renders it.

mod common;

use common::{expect_load_error, hybrid, load, patch, set_i32_entry, set_u32, tiny_model};
use std::sync::Arc;
use tessera_llm::{LlmError, Model};

fn model() -> Arc<Model> {
    load(&tiny_model("tiny-lfm2"))
}

#[test]
fn batches_chunks_and_single_tokens_agree() {
    hybrid::batches_chunks_and_single_tokens_agree(&model());
}

#[test]
fn prefix_reuse_goes_back_to_state_checkpoints() {
    hybrid::prefix_reuse_goes_back_to_state_checkpoints(&model());
}

#[test]
fn a_cancelled_decode_goes_back_to_a_checkpoint() {
    hybrid::a_cancelled_decode_goes_back_to_a_checkpoint(&model());
}

#[test]
fn bad_lfm2_files_name_the_tensor_or_key() {
    let original = std::fs::read(tiny_model("tiny-lfm2")).unwrap();
    let missing = |name: &'static str| move |e: &LlmError| matches!(e, LlmError::MissingTensor { arch, name: n } if arch == "lfm2" && n == name);
    let key = |key: &'static str| move |e: &LlmError| matches!(e, LlmError::BadHyperParameter { key: k, .. } if k == key);
    let mut b = original.clone();
    patch(&mut b, b"blk.3.shortconv.conv.weight", b"blk.3.shortconv.conv.weighs");
    expect_load_error(b, missing("blk.3.shortconv.conv.weight"), "the convolution's taps missing");
    let mut b = original.clone();
    patch(&mut b, b"token_embd_norm.weight", b"token_embd_norm.weighs");
    expect_load_error(b, missing("token_embd_norm.weight"), "the final norm missing");
    // Layer 2 made a convolution layer (no KV heads): it has no convolution tensors.
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 2, 0);
    expect_load_error(
        b,
        missing("blk.2.shortconv.in_proj.weight"),
        "a convolution layer without its tensors",
    );
    // Layer 0 made an attention layer: it has no attention tensors.
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 0, 2);
    expect_load_error(b, missing("blk.0.attn_q.weight"), "an attention layer without its tensors");
    // Four taps where the file's convolutions have three.
    let mut b = original.clone();
    set_u32(&mut b, "lfm2.shortconv.l_cache", 4);
    expect_load_error(
        b,
        |e| {
            matches!(e, LlmError::TensorShape { name, expected, found, .. }
                if name == "blk.0.shortconv.conv.weight" && expected == &[4, 64] && found == &[3, 64])
        },
        "the taps' shape",
    );
    let mut b = original.clone();
    set_u32(&mut b, "lfm2.shortconv.l_cache", 1);
    expect_load_error(b, key("lfm2.shortconv.l_cache"), "one tap");
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 4, 4);
    expect_load_error(
        b,
        key("lfm2.attention.head_count_kv"),
        "attention layers of 2 and 4 KV heads",
    );
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 1, -1);
    expect_load_error(b, key("lfm2.attention.head_count_kv"), "a negative head count");
    let mut b = original;
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 2, 3);
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 4, 3);
    expect_load_error(b, key("lfm2.attention.head_count_kv"), "3 KV heads for 4 query heads");
}

/// The file's template (the official LFM2.5-Instruct one) renders what Python's jinja2 rendered
/// for the same conversations, with the file's BOS (<|startoftext|>, as LFM2's vocabulary has).
#[test]
fn the_chat_template_loads_and_renders_as_jinja2() {
    hybrid::the_chat_template_renders_as_jinja2(&model(), "lfm2.5");
}
