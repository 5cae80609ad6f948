//! LFM2, a hybrid of short-convolution layers (a recurrent state) and attention layers, beyond
//! its comparison with llama.cpp (models.rs, layers.rs):
//! - the state lasts across computes: a prompt in one batch, in batches of 7 and one token at a
//!   time gives the same logits, and every row of one batch is the last row of the prompt cut
//!   there;
//! - prefix reuse across turns (state checkpoints where prompts start and end): a turn that
//!   continues everything processed keeps it all, a regenerated turn goes back to where its
//!   prompt started, an edited one to the latest checkpoint before the edit; each then gives
//!   what a fresh context gives;
//! - a cancelled decode leaves the state at a checkpoint, from which decoding goes on as fresh;
//! - a missing or misshapen tensor names it, metadata out of range names the key;
//! - its chat template (LFM2.5-Instruct, the file's) renders as Python's jinja2 renders it.

mod common;

use common::{argmax, context, load, load_bytes, max_diff, patch, repo_root, tiny_model};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tessera_llm::chat::ChatMessage;
use tessera_llm::{Context, LlmError, Model, Rows};

fn model() -> Arc<Model> {
    load(&tiny_model("tiny-lfm2"))
}

const TEXT: &str =
    "Once upon a time, in a small village by the sea, there lived an old fisherman who";

/// Largest difference allowed between two ways of computing the same logits: the model mixes
/// F32 and quantized weights, whose kernels sum in a different order for one row and for
/// several (as tiny-qwen3 in runtime.rs). The logits have a standard deviation of about 16; a
/// state read or written at the wrong time (the previous batch's inputs lost, or counted twice)
/// moves them by whole units.
const TOL: f32 = 0.25;

fn last(ctx: &mut Context, tokens: &[u32]) -> Vec<f32> {
    ctx.decode(tokens, Rows::Last).unwrap().last().to_vec()
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    let d = max_diff(a, b);
    assert!(d <= TOL, "{what}: logits differ by {d}");
    assert_eq!(argmax(a), argmax(b), "{what}: top-1");
}

#[test]
fn batches_chunks_and_single_tokens_agree() {
    let model = model();
    let ids = model.tokenizer().encode(TEXT, true, true);
    assert!(ids.len() > 14, "two chunks of 7");
    let whole = last(&mut context(&model, 256, 512), &ids);
    for batch in [7, 1] {
        let part = last(&mut context(&model, 256, batch), &ids);
        assert_close(&whole, &part, &format!("batches of {batch}"));
    }
    let all = context(&model, 256, 512).decode(&ids, Rows::All).unwrap();
    for cut in [1, 2, 3, 9, ids.len()] {
        let prefix = last(&mut context(&model, 256, 512), &ids[..cut]);
        assert_close(all.row(cut - 1), &prefix, &format!("row {} of one batch", cut - 1));
    }
    // Several decode calls (the state carried from one compute to the next) as one.
    let mut ctx = context(&model, 256, 512);
    ctx.decode(&ids[..5], Rows::Last).unwrap();
    ctx.decode(&ids[5..6], Rows::Last).unwrap();
    let split = last(&mut ctx, &ids[6..]);
    assert_close(&whole, &split, "three decode calls");
}

#[test]
fn prefix_reuse_goes_back_to_state_checkpoints() {
    let model = model();
    let tok = model.tokenizer();
    let p1 = tok.encode("<|im_start|>user\nWhere do fishermen live?<|im_end|>\n", true, true);
    let mut ctx = context(&model, 256, 512);
    // Turn 1: the prompt, then a reply generated one token at a time.
    let mut next = argmax(&last(&mut ctx, &p1)) as u32;
    for _ in 0..4 {
        next = argmax(&last(&mut ctx, &[next])) as u32;
    }
    let history = ctx.history().to_vec();
    assert_eq!(history.len(), p1.len() + 4);
    assert_eq!(ctx.checkpoints(), vec![p1.len()], "a checkpoint where the prompt ended");
    // Turn 2 continues everything processed: all of it is kept, nothing recomputed.
    let mut t2 = history.clone();
    t2.extend(tok.encode("<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n", false, true));
    let fresh = last(&mut context(&model, 256, 512), &t2);
    let kept = ctx.reuse_prefix(&t2);
    assert_eq!(kept, history.len(), "turn 2 keeps the whole history");
    assert_close(&last(&mut ctx, &t2[kept..]), &fresh, "turn 2 after reuse");
    assert_eq!(ctx.checkpoints(), vec![p1.len(), history.len(), t2.len()]);
    // Turn 2 again (regenerated): its last token must be decoded again, so the state goes
    // back to where the turn's prompt started.
    let kept = ctx.reuse_prefix(&t2);
    assert_eq!(kept, history.len(), "a regenerated turn goes back to its start");
    assert_close(&last(&mut ctx, &t2[kept..]), &fresh, "turn 2 regenerated");
    // An edit inside turn 1's reply: back to the end of turn 1's prompt.
    let mut edited = t2.clone();
    edited[p1.len() + 2] = edited[p1.len() + 2].wrapping_add(1);
    let kept = ctx.reuse_prefix(&edited);
    assert_eq!(kept, p1.len(), "an edited reply goes back to the end of the prompt");
    let fresh = last(&mut context(&model, 256, 512), &edited);
    assert_close(&last(&mut ctx, &edited[kept..]), &fresh, "edited turn after reuse");
    // An edit before every checkpoint: from scratch.
    let mut edited = t2;
    edited[1] = edited[1].wrapping_add(1);
    assert_eq!(ctx.reuse_prefix(&edited), 0);
    let fresh = last(&mut context(&model, 256, 512), &edited);
    assert_close(&last(&mut ctx, &edited), &fresh, "edited from the start");
}

#[test]
fn a_cancelled_decode_goes_back_to_a_checkpoint() {
    let model = model();
    let ids = model.tokenizer().encode(TEXT, true, true);
    let mut ctx = context(&model, 256, 512);
    ctx.decode(&ids[..8], Rows::Last).unwrap();
    ctx.decode(&ids[8..9], Rows::Last).unwrap();
    ctx.cancel_flag().store(true, Ordering::Relaxed);
    match ctx.decode(&ids[9..10], Rows::Last) {
        Err(LlmError::Cancelled) => {}
        other => panic!("expected Cancelled, got {:?}", other.map(|o| o.positions)),
    }
    ctx.reset_cancel();
    assert_eq!(ctx.n_past(), 8, "back to the checkpoint where the prompt ended");
    assert_eq!(ctx.history(), &ids[..8]);
    let fresh = last(&mut context(&model, 256, 512), &ids);
    assert_close(&last(&mut ctx, &ids[8..]), &fresh, "after the cancelled decode");
}

/// Sets the `index`-th entry of the INT32 array `key` (GGUF: key, type 9, item type 5, count).
fn set_i32_entry(bytes: &mut [u8], key: &str, index: usize, value: i32) {
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).expect("key") + key.len();
    assert_eq!(&bytes[at..at + 8], &[9, 0, 0, 0, 5, 0, 0, 0], "{key} is an INT32 array");
    let v = at + 16 + 4 * index;
    bytes[v..v + 4].copy_from_slice(&value.to_le_bytes());
}

/// Sets the u32 metadata value of `key` (GGUF: key, type 4, value).
fn set_u32(bytes: &mut [u8], key: &str, value: u32) {
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).expect("key") + key.len();
    assert_eq!(&bytes[at..at + 4], &[4, 0, 0, 0], "{key} is a u32");
    bytes[at + 4..at + 8].copy_from_slice(&value.to_le_bytes());
}

fn expect(bytes: Vec<u8>, check: impl Fn(&LlmError) -> bool, what: &str) {
    match load_bytes(bytes) {
        Err(e) if check(&e) => {}
        other => panic!("expected {what}, got {:?}", other.err()),
    }
}

#[test]
fn bad_lfm2_files_name_the_tensor_or_key() {
    let original = std::fs::read(tiny_model("tiny-lfm2")).unwrap();
    let missing = |name: &'static str| move |e: &LlmError| matches!(e, LlmError::MissingTensor { arch, name: n } if arch == "lfm2" && n == name);
    let key = |key: &'static str| move |e: &LlmError| matches!(e, LlmError::BadHyperParameter { key: k, .. } if k == key);
    let mut b = original.clone();
    patch(&mut b, b"blk.3.shortconv.conv.weight", b"blk.3.shortconv.conv.weighs");
    expect(b, missing("blk.3.shortconv.conv.weight"), "the convolution's taps missing");
    let mut b = original.clone();
    patch(&mut b, b"token_embd_norm.weight", b"token_embd_norm.weighs");
    expect(b, missing("token_embd_norm.weight"), "the final norm missing");
    // Layer 2 made a convolution layer (no KV heads): it has no convolution tensors.
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 2, 0);
    expect(b, missing("blk.2.shortconv.in_proj.weight"), "a convolution layer without its tensors");
    // Layer 0 made an attention layer: it has no attention tensors.
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 0, 2);
    expect(b, missing("blk.0.attn_q.weight"), "an attention layer without its tensors");
    // Four taps where the file's convolutions have three.
    let mut b = original.clone();
    set_u32(&mut b, "lfm2.shortconv.l_cache", 4);
    expect(
        b,
        |e| {
            matches!(e, LlmError::TensorShape { name, expected, found, .. }
                if name == "blk.0.shortconv.conv.weight" && expected == &[4, 64] && found == &[3, 64])
        },
        "the taps' shape",
    );
    let mut b = original.clone();
    set_u32(&mut b, "lfm2.shortconv.l_cache", 1);
    expect(b, key("lfm2.shortconv.l_cache"), "one tap");
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 4, 4);
    expect(b, key("lfm2.attention.head_count_kv"), "attention layers of 2 and 4 KV heads");
    let mut b = original.clone();
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 1, -1);
    expect(b, key("lfm2.attention.head_count_kv"), "a negative head count");
    let mut b = original;
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 2, 3);
    set_i32_entry(&mut b, "lfm2.attention.head_count_kv", 4, 3);
    expect(b, key("lfm2.attention.head_count_kv"), "3 KV heads for 4 query heads");
}

/// The file's template (the official LFM2.5-Instruct one) renders what Python's jinja2 rendered
/// for the same conversations, with the file's BOS (<|startoftext|>, as LFM2's vocabulary has).
#[test]
fn the_chat_template_loads_and_renders_as_jinja2() {
    let path = repo_root().join("rust/llm/tests/fixtures/chat/hf_renders.json");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let model = model();
    let t = model.chat_template().unwrap();
    t.set_fixed_time(rec["fixed_now"].as_i64());
    let mut compared = 0;
    for r in rec["records"].as_array().unwrap() {
        let extra_empty = r["extra"].as_object().is_none_or(|o| o.is_empty());
        if r["template"] != "lfm2.5" || !extra_empty || r["expected"].is_null() {
            continue;
        }
        let messages: Vec<ChatMessage> = serde_json::from_value(r["messages"].clone()).unwrap();
        let add = r["add_generation_prompt"].as_bool().unwrap();
        let got = t.render(&messages, add).unwrap();
        assert_eq!(got, r["expected"].as_str().unwrap(), "{}", r["case"]);
        compared += 1;
    }
    assert!(compared >= 5, "{compared} conversations compared");
}
