//! Context shift in generation (issue 38 item 1): with `context_shift` a generation goes past
//! the context (3x it here) keeping the prefix it was told to keep; without it, it stops with
//! `StopReason::ContextFull`; models with recurrent layers refuse it with a typed error.
//! The shift's numbers (each moved key against its f64 rotation, layer 0 against a fresh
//! computation, the logits after moving the cache against the unmoved ones) are checked by
//! the unit tests of `src/shift.rs`.

mod common;

use common::{context, gemma_path, load, registry, tiny_model};
use std::sync::Arc;
use tessera_core::DType;
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::sampling::SamplingParams;
use tessera_llm::{
    generate, Context, ContextOptions, ContextShift, GenerateOptions, KeepTokens, LlmError, Model,
    Prompt, StopReason,
};

const N_CTX: usize = 64;

fn options(max_tokens: usize, shift: Option<KeepTokens>) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens,
        ignore_eos: true,
        context_shift: shift.map(|n_keep| ContextShift { n_keep }),
        ..Default::default()
    }
}

/// Generates 3 contexts' worth of tokens with a shift keeping `keep`, and checks that it
/// went through: every token generated, the context never past its size, the first `kept`
/// tokens of the history those of the prompt, and its end the tokens generated last (the
/// last one is sampled, not yet decoded).
fn three_contexts(model: &Arc<Model>, prompt: Vec<u32>, keep: KeepTokens, kept: usize) {
    three_contexts_with(model, prompt, keep, kept, CacheTypes::default())
}

/// [`three_contexts`] with a cache of `types`.
fn three_contexts_with(
    model: &Arc<Model>,
    prompt: Vec<u32>,
    keep: KeepTokens,
    kept: usize,
    types: CacheTypes,
) {
    let opts = ContextOptions { n_ctx: N_CTX, n_batch: 16, threads: Some(2), cache_types: types };
    let mut ctx = Context::new(model.clone(), &registry(), &opts).unwrap();
    let mut seen = 0;
    let g = generate(
        &mut ctx,
        &Prompt::Tokens(prompt.clone()),
        &options(3 * N_CTX, Some(keep)),
        &mut |_| {
            seen += 1;
            assert!(seen <= 3 * N_CTX + 1);
            true
        },
    )
    .unwrap();
    assert_eq!(g.stop_reason, StopReason::MaxTokens);
    assert_eq!(g.tokens.len(), 3 * N_CTX);
    assert!(ctx.n_past() <= N_CTX && ctx.n_past() > kept, "n_past {}", ctx.n_past());
    let history = ctx.history();
    assert_eq!(history.len(), ctx.n_past());
    assert_eq!(&history[..kept], &prompt[..kept], "the kept prefix changed");
    let decoded = &g.tokens[..g.tokens.len() - 1];
    let tail = history.len() - kept;
    assert_eq!(&history[kept..], &decoded[decoded.len() - tail..]);

    // A shifted conversation saved and loaded goes on with the same logits, bit for bit.
    let path = std::env::temp_dir().join(format!(
        "tessera-shift-{}-{}.session",
        std::process::id(),
        prompt.len()
    ));
    ctx.save_session(&path).unwrap();
    let mut loaded = Context::new(model.clone(), &registry(), &opts).unwrap();
    assert_eq!(loaded.load_session(&path).unwrap(), ctx.n_past());
    std::fs::remove_file(&path).unwrap();
    let last = *g.tokens.last().unwrap();
    let a = ctx.decode(&[last], tessera_llm::Rows::Last).unwrap();
    let b = loaded.decode(&[last], tessera_llm::Rows::Last).unwrap();
    assert_eq!(a, b);
}

fn gemma_prompt(model: &Model) -> Vec<u32> {
    model.tokenizer().encode("The history of the lighthouse on the northern cape", true, false)
}

#[test]
fn gemma_generates_three_contexts_keeping_bos_and_four_tokens() {
    let model = load(&gemma_path());
    let prompt = gemma_prompt(&model);
    assert_eq!(prompt[0], model.tokenizer().bos().unwrap());
    // nKeep 4 counts after the BOS token, which is kept besides (llama.cpp server's n_keep).
    three_contexts(&model, prompt, KeepTokens::Tokens(4), 5);
}

#[test]
fn gemma_shifts_a_quantized_cache() {
    // Q8_0 keys and Q4_0 values: their rows are read as F32, the keys rotated, and both
    // quantized again where they are written.
    let model = load(&gemma_path());
    let prompt = gemma_prompt(&model);
    let types = CacheTypes { k: DType::Q8_0, v: DType::Q4_0 };
    three_contexts_with(&model, prompt, KeepTokens::Tokens(4), 5, types);
}

#[test]
fn llama_generates_three_contexts_keeping_the_whole_prompt() {
    let model = load(&tiny_model("tiny-llama"));
    let prompt: Vec<u32> = (0..12).map(|i| 5 + 17 * i).collect();
    three_contexts(&model, prompt, KeepTokens::Prompt, 12);
}

#[test]
fn without_context_shift_a_full_context_ends_the_generation() {
    let model = load(&gemma_path());
    let prompt = gemma_prompt(&model);
    let mut ctx = context(&model, N_CTX, 16);
    let g =
        generate(&mut ctx, &Prompt::Tokens(prompt.clone()), &options(3 * N_CTX, None), &mut |_| {
            true
        })
        .unwrap();
    assert_eq!(g.stop_reason, StopReason::ContextFull);
    assert_eq!(ctx.n_past(), N_CTX);
    // The prompt, the tokens decoded after it, and the last one sampled.
    assert_eq!(g.tokens.len(), N_CTX - prompt.len() + 1);
    assert_eq!(&ctx.history()[..prompt.len()], prompt.as_slice());
}

#[test]
fn a_kept_prefix_that_leaves_no_room_is_refused() {
    let model = load(&gemma_path());
    let prompt = gemma_prompt(&model);
    let mut ctx = context(&model, N_CTX, 16);
    // With the BOS token 61 kept: more than n_ctx - 4 = 60.
    let err = generate(
        &mut ctx,
        &Prompt::Tokens(prompt.clone()),
        &options(8, Some(KeepTokens::Tokens(N_CTX - 4))),
        &mut |_| true,
    )
    .unwrap_err();
    assert!(matches!(&err, LlmError::InvalidArgument(m) if m.contains("n_ctx - 4 = 60")), "{err}");
    // n_ctx - 5 after the BOS is the most.
    let g = generate(
        &mut ctx,
        &Prompt::Tokens(prompt),
        &options(N_CTX, Some(KeepTokens::Tokens(N_CTX - 5))),
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(g.tokens.len(), N_CTX);
    // A shift itself: nothing to discard, or more than there is.
    let n = ctx.n_past();
    assert!(matches!(ctx.shift(4, 0), Err(LlmError::InvalidArgument(_))));
    assert!(matches!(ctx.shift(4, n - 3), Err(LlmError::InvalidArgument(_))));
    assert_eq!(ctx.n_past(), n);
}

/// LFM2 and Qwen 3.5 keep recurrent states that hold every position: no shift (llama.cpp:
/// "memory cannot shift"), refused before any work.
#[test]
fn recurrent_models_refuse_context_shift() {
    for name in ["tiny-lfm2", "tiny-qwen35"] {
        let model = load(&tiny_model(name));
        let mut ctx: Context = context(&model, N_CTX, 16);
        assert!(!ctx.can_shift());
        let prompt = Prompt::Tokens(vec![1, 2, 3, 4]);
        let err =
            generate(&mut ctx, &prompt, &options(8, Some(KeepTokens::Tokens(0))), &mut |_| true)
                .unwrap_err();
        let arch = model.hparams().arch.name();
        assert!(
            matches!(&err, LlmError::ContextShiftUnsupported { arch: a } if a == arch),
            "{name}: {err}"
        );
        assert!(err.to_string().contains("cannot shift"), "{err}");
        assert_eq!(ctx.n_past(), 0, "{name}: nothing decoded");
        // Without the option it generates, and a shift asked directly is refused the same way.
        generate(&mut ctx, &prompt, &options(8, None), &mut |_| true).unwrap();
        assert!(matches!(ctx.shift(1, 2), Err(LlmError::ContextShiftUnsupported { .. })));
    }
}
