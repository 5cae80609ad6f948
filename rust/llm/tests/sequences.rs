//! Sequences: several contexts over one loaded model (the foreign API's `nSequences`), each with
//! its own KV cache and position, sharing the weights.
//! - Two conversations on Gemma 3 270M, decoded greedily token by token in alternation on two
//!   contexts of one `Arc<Model>`, give the tokens and the logits (bit for bit) each gives run
//!   alone on a fresh context;
//! - the memory a context's cache takes, known before it is made
//!   ([`Context::cache_bytes_for`]), is its buffers' real size ([`Context::cache_bytes`]) and
//!   the K / V bytes counted from the file's metadata (global layers: `n_ctx` cells,
//!   sliding-window layers: a ring of `n_swa + n_batch` cells rounded up to 256, F16); on
//!   tiny-lfm2 the recurrent states are counted too.

mod common;

use common::{context, gemma_path, load, tiny_model};
use std::sync::Arc;
use tessera_llm::{Context, ContextOptions, Model, Rows};

const A: &str = "The recipe for a good loaf of bread starts with";
const B: &str = "In the year 1969, the first people to walk on the Moon";

/// Greedy steps of one conversation: the logits of the prompt's last token, then of each token
/// drawn. Returns (tokens drawn, logits of each step).
struct Run {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in l.iter().enumerate() {
        if x > l[best] {
            best = i;
        }
    }
    best as u32
}

/// One step: decodes `input` on `ctx` and records the greedy token and the logits.
fn step(ctx: &mut Context, input: &[u32], run: &mut Run) {
    let l = ctx.decode(input, Rows::Last).unwrap().last().to_vec();
    run.tokens.push(argmax(&l));
    run.logits.push(l);
}

const STEPS: usize = 12;

fn alone(model: &Arc<Model>, prompt: &[u32]) -> Run {
    let mut ctx = context(model, 512, 64);
    let mut run = Run { tokens: Vec::new(), logits: Vec::new() };
    step(&mut ctx, prompt, &mut run);
    for _ in 1..STEPS {
        let t = *run.tokens.last().unwrap();
        step(&mut ctx, &[t], &mut run);
    }
    run
}

#[test]
fn two_conversations_interleaved_token_by_token_equal_each_alone() {
    let model = load(&gemma_path());
    let tok = model.tokenizer();
    let (pa, pb) = (tok.encode(A, true, true), tok.encode(B, true, true));
    let want_a = alone(&model, &pa);
    let want_b = alone(&model, &pb);
    assert_ne!(want_a.tokens, want_b.tokens, "two different conversations");

    let mut ca = context(&model, 512, 64);
    let mut cb = context(&model, 512, 64);
    let mut ra = Run { tokens: Vec::new(), logits: Vec::new() };
    let mut rb = Run { tokens: Vec::new(), logits: Vec::new() };
    // B's prompt between A's prompt and A's first token, then one token each in turn.
    step(&mut ca, &pa, &mut ra);
    step(&mut cb, &pb, &mut rb);
    for _ in 1..STEPS {
        let t = *ra.tokens.last().unwrap();
        step(&mut ca, &[t], &mut ra);
        let t = *rb.tokens.last().unwrap();
        step(&mut cb, &[t], &mut rb);
    }
    assert_eq!((ca.n_past(), cb.n_past()), (pa.len() + STEPS - 1, pb.len() + STEPS - 1));
    for (got, want, name) in [(&ra, &want_a, "A"), (&rb, &want_b, "B")] {
        assert_eq!(got.tokens, want.tokens, "conversation {name}'s tokens");
        for (i, (g, w)) in got.logits.iter().zip(&want.logits).enumerate() {
            let same = g.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "conversation {name}: step {i}'s logits differ from the run alone");
        }
    }
    eprintln!(
        "A: {:?}\nB: {:?}",
        tok.decode(&ra.tokens, false).unwrap(),
        tok.decode(&rb.tokens, false).unwrap()
    );
}

/// Bytes of K and V of a Gemma 3 context counted from the file's metadata.
fn gemma_kv_bytes(model: &Model, n_ctx: usize, n_batch: usize) -> usize {
    let f = model.file();
    let u = |k: &str| f.opt_u32(k).unwrap().unwrap_or_else(|| panic!("{k}")) as usize;
    let n_layer = u("gemma3.block_count");
    let width = u("gemma3.attention.head_count_kv")
        * (u("gemma3.attention.key_length") + u("gemma3.attention.value_length"));
    let ring = (u("gemma3.attention.sliding_window") + n_batch).div_ceil(256) * 256;
    // Gemma 3: every sixth layer attends globally, the others through the window.
    let cells: usize =
        (0..n_layer).map(|il| if (il + 1) % 6 == 0 { n_ctx } else { ring.min(n_ctx) }).sum();
    width * cells * 2
}

#[test]
fn a_context_takes_the_memory_stated_before_it_is_made() {
    let model = load(&gemma_path());
    for (n_ctx, n_batch) in [(1024, 64), (256, 512), (4096, 512)] {
        let opts = ContextOptions { n_ctx, n_batch, threads: Some(1), ..Default::default() };
        let stated = Context::cache_bytes_for(&model, &opts).unwrap();
        let ctx = context(&model, n_ctx, n_batch);
        assert_eq!(stated, ctx.cache_bytes(), "n_ctx {n_ctx}, n_batch {n_batch}");
        // n_batch is at most the context.
        assert_eq!(stated, gemma_kv_bytes(&model, n_ctx, n_batch.min(n_ctx)), "n_ctx {n_ctx}");
    }
    // Known answer: 3 global layers of 1024 cells, 15 of a 768-cell ring (512 + 64 rounded
    // up), 512 F16 values of K and V per cell.
    let opts = ContextOptions { n_ctx: 1024, n_batch: 64, threads: None, ..Default::default() };
    assert_eq!(Context::cache_bytes_for(&model, &opts).unwrap(), 1024 * (3 * 1024 + 15 * 768));

    // Recurrent states (tiny-lfm2: convolution layers beside attention layers).
    let lfm2 = load(&tiny_model("tiny-lfm2"));
    let opts = ContextOptions { n_ctx: 128, n_batch: 32, threads: Some(1), ..Default::default() };
    let stated = Context::cache_bytes_for(&lfm2, &opts).unwrap();
    let ctx = context(&lfm2, 128, 32);
    assert_eq!(stated, ctx.cache_bytes());
    let hp = lfm2.hparams();
    let attn = (0..hp.n_layer).filter(|&il| !hp.is_recurrent(il)).count();
    let kv = attn * (hp.n_embd_k_gqa() + hp.n_embd_v_gqa()) * 128 * 2;
    let states = hp.recurrent_layers.iter().filter(|&&r| r).count()
        * (hp.conv_kernel - 1)
        * hp.conv_channels
        * 4;
    assert!(states > 0, "tiny-lfm2 has recurrent layers");
    // Each layer's state rounded up to the CPU's alignment at most.
    assert!(stated >= kv + states && stated <= kv + states + 64 * hp.n_layer, "{stated}");
}
