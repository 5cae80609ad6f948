//! Qwen 3.5, a hybrid of gated delta-net layers (a recurrent state: convolution inputs and one
//! matrix per value head) and gated attention layers, beyond its comparison with llama.cpp
//! (models.rs, layers.rs): the recurrent state's checks of common/hybrid.rs (batches, chunks
//! and single tokens agree; prefix reuse through state checkpoints; a cancelled decode); a
//! missing or misshapen tensor names it, metadata out of range names the key; its chat template
//! (Qwen3.5-4B's, the file's) renders as Python's jinja2 renders it.

mod common;

use common::{expect_load_error, hybrid, load, patch, set_i32_entry, set_u32, tiny_model};
use std::sync::Arc;
use tessera_llm::{LlmError, Model};

fn model() -> Arc<Model> {
    load(&tiny_model("tiny-qwen35"))
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
fn bad_qwen35_files_name_the_tensor_or_key() {
    let original = std::fs::read(tiny_model("tiny-qwen35")).unwrap();
    let missing = |name: &'static str| move |e: &LlmError| matches!(e, LlmError::MissingTensor { arch, name: n } if arch == "qwen35" && n == name);
    let key = |key: &'static str| move |e: &LlmError| matches!(e, LlmError::BadHyperParameter { key: k, .. } if k == key);
    let mut b = original.clone();
    patch(&mut b, b"blk.3.ssm_conv1d.weight", b"blk.3.ssm_conv1d.weighs");
    expect_load_error(b, missing("blk.3.ssm_conv1d.weight"), "the convolution's taps missing");
    let mut b = original.clone();
    patch(&mut b, b"blk.1.ssm_a", b"blk.1.ssm_b");
    expect_load_error(b, missing("blk.1.ssm_a"), "the decay scale missing");
    let mut b = original.clone();
    patch(&mut b, b"blk.5.post_attention_norm.weight", b"blk.5.post_attention_norm.weighs");
    expect_load_error(b, missing("blk.5.post_attention_norm.weight"), "the FFN's norm missing");
    // Every second layer full attention: layer 1 (a delta-net in the file) has no attn_q.
    let mut b = original.clone();
    set_u32(&mut b, "qwen35.full_attention_interval", 2);
    expect_load_error(b, missing("blk.1.attn_q.weight"), "an attention layer without its tensors");
    // Five taps where the file's convolutions have four.
    let mut b = original.clone();
    set_u32(&mut b, "qwen35.ssm.conv_kernel", 5);
    expect_load_error(
        b,
        |e| {
            matches!(e, LlmError::TensorShape { name, expected, found, .. }
                if name == "blk.0.ssm_conv1d.weight" && expected == &[5, 128] && found == &[4, 128])
        },
        "the taps' shape",
    );
    let mut b = original.clone();
    set_u32(&mut b, "qwen35.ssm.conv_kernel", 1);
    expect_load_error(b, key("qwen35.ssm.conv_kernel"), "one tap");
    let mut b = original.clone();
    set_u32(&mut b, "qwen35.ssm.inner_size", 48);
    expect_load_error(
        b,
        key("qwen35.ssm.inner_size"),
        "an inner size other than value heads x state",
    );
    let mut b = original.clone();
    set_u32(&mut b, "qwen35.ssm.group_count", 3);
    expect_load_error(b, key("qwen35.ssm.time_step_rank"), "4 value heads over 3 key heads");
    let mut b = original.clone();
    set_u32(&mut b, "qwen35.ssm.state_size", 0);
    expect_load_error(b, key("qwen35.ssm.state_size"), "an empty state");
    // Sections [2, 0, 1, 0] leave rotated pair 1 of 4 to the fourth (vision) position.
    let mut b = original.clone();
    set_i32_entry(&mut b, "qwen35.rope.dimension_sections", 1, 0);
    expect_load_error(
        b,
        key("qwen35.rope.dimension_sections"),
        "sections not covering the rotation",
    );
    let mut b = original;
    set_i32_entry(&mut b, "qwen35.rope.dimension_sections", 2, -1);
    expect_load_error(b, key("qwen35.rope.dimension_sections"), "a negative section");
}

/// The file's template (Qwen3.5-4B's, from the llama-cpp-python source package) renders what
/// Python's jinja2 rendered for the same conversations.
#[test]
fn the_chat_template_loads_and_renders_as_jinja2() {
    hybrid::the_chat_template_renders_as_jinja2(&model(), "qwen-3.5");
}
