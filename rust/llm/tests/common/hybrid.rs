//! Checks of a hybrid model's recurrent state (LFM2's convolutions, Qwen 3.5's gated
//! delta-nets), shared by their tests (lfm2.rs, qwen35.rs):
//! - the state lasts across computes: a prompt in one batch, in batches of 7 and one token at a
//!   time gives the same logits, and every row of one batch is the last row of the prompt cut
//!   there;
//! - prefix reuse across turns (state checkpoints where prompts start and end): a turn that
//!   continues everything processed keeps it all, a regenerated turn goes back to where its
//!   prompt started, an edited one to the latest checkpoint before the edit; each then gives
//!   what a fresh context gives;
//! - a cancelled decode leaves the state at a checkpoint, from which decoding goes on as fresh;
//! - the file's chat template renders as Python's jinja2 renders it.
#![allow(dead_code)]

use super::{argmax, context, max_diff, repo_root};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tessera_llm::chat::ChatMessage;
use tessera_llm::{Context, LlmError, Model, Rows};

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

/// Batches, chunks and single tokens give the same logits.
pub fn batches_chunks_and_single_tokens_agree(model: &Arc<Model>) {
    let ids = model.tokenizer().encode(TEXT, true, true);
    assert!(ids.len() > 14, "two chunks of 7");
    let whole = last(&mut context(model, 256, 512), &ids);
    for batch in [7, 1] {
        let part = last(&mut context(model, 256, batch), &ids);
        assert_close(&whole, &part, &format!("batches of {batch}"));
    }
    let all = context(model, 256, 512).decode(&ids, Rows::All).unwrap();
    for cut in [1, 2, 3, 9, ids.len()] {
        let prefix = last(&mut context(model, 256, 512), &ids[..cut]);
        assert_close(all.row(cut - 1), &prefix, &format!("row {} of one batch", cut - 1));
    }
    // Several decode calls (the state carried from one compute to the next) as one.
    let mut ctx = context(model, 256, 512);
    ctx.decode(&ids[..5], Rows::Last).unwrap();
    ctx.decode(&ids[5..6], Rows::Last).unwrap();
    let split = last(&mut ctx, &ids[6..]);
    assert_close(&whole, &split, "three decode calls");
}

/// Prefix reuse goes back to the state checkpoints and then computes what a fresh context does.
pub fn prefix_reuse_goes_back_to_state_checkpoints(model: &Arc<Model>) {
    let tok = model.tokenizer();
    let p1 = tok.encode("<|im_start|>user\nWhere do fishermen live?<|im_end|>\n", true, true);
    let mut ctx = context(model, 256, 512);
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
    let fresh = last(&mut context(model, 256, 512), &t2);
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
    let fresh = last(&mut context(model, 256, 512), &edited);
    assert_close(&last(&mut ctx, &edited[kept..]), &fresh, "edited turn after reuse");
    // An edit before every checkpoint: from scratch.
    let mut edited = t2;
    edited[1] = edited[1].wrapping_add(1);
    assert_eq!(ctx.reuse_prefix(&edited), 0);
    let fresh = last(&mut context(model, 256, 512), &edited);
    assert_close(&last(&mut ctx, &edited), &fresh, "edited from the start");
}

/// A cancelled decode goes back to a checkpoint.
pub fn a_cancelled_decode_goes_back_to_a_checkpoint(model: &Arc<Model>) {
    let ids = model.tokenizer().encode(TEXT, true, true);
    let mut ctx = context(model, 256, 512);
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
    let fresh = last(&mut context(model, 256, 512), &ids);
    assert_close(&last(&mut ctx, &ids[8..]), &fresh, "after the cancelled decode");
}

/// The model file's template renders what Python's jinja2 rendered for the same conversations
/// (the records of hf_renders.json under `template`, without extra variables), with the file's
/// BOS.
pub fn the_chat_template_renders_as_jinja2(model: &Arc<Model>, template: &str) {
    let path = repo_root().join("rust/llm/tests/fixtures/chat/hf_renders.json");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let t = model.chat_template().unwrap();
    t.set_fixed_time(rec["fixed_now"].as_i64());
    let mut compared = 0;
    for r in rec["records"].as_array().unwrap() {
        let extra_empty = r["extra"].as_object().is_none_or(|o| o.is_empty());
        if r["template"] != template || !extra_empty || r["expected"].is_null() {
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
