//! The same answer every time (issue 38 item 5): the logits of one 300-token prompt on Gemma 3
//! 270M do not depend on the batch size the prompt is split into, on the thread count, or on a
//! prefix of it already being in the cache. Bit for bit: every reduction runs in one order
//! whatever the batch (the matrix products reduce each output over K in the same blocks for one
//! column as for many; attention walks the keys in the same blocks for one query as for many).

mod common;

use common::{gemma_path, load, registry};
use std::sync::Arc;
use tessera_llm::perplexity::text_tokens;
use tessera_llm::{Context, ContextOptions, Model, Rows};

fn prompt(model: &Model) -> Vec<u32> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/perplexity.txt");
    let tokens = text_tokens(model, &std::fs::read_to_string(p).unwrap());
    tokens[..300].to_vec()
}

fn context(model: &Arc<Model>, n_batch: usize, threads: usize) -> Context {
    let opts = ContextOptions { n_ctx: 512, n_batch, threads: Some(threads), ..Default::default() };
    Context::new(model.clone(), &registry(), &opts).unwrap()
}

/// The prompt's last logits and the greedy continuation of 8 tokens after it.
fn run(ctx: &mut Context, prompt: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let start = ctx.reuse_prefix(prompt);
    let mut logits = ctx.decode(&prompt[start..], Rows::Last).unwrap().last().to_vec();
    let first = logits.iter().map(|x| x.to_bits()).collect();
    let mut greedy = Vec::new();
    for _ in 0..8 {
        let next = common::argmax(&logits) as u32;
        greedy.push(next);
        logits = ctx.decode(&[next], Rows::Last).unwrap().last().to_vec();
    }
    (first, greedy)
}

fn first_difference(a: &[u32], b: &[u32]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "logit {i}: {} vs {} ({} of {} differ)",
            f32::from_bits(a[i]),
            f32::from_bits(b[i]),
            a.iter().zip(b).filter(|(x, y)| x != y).count(),
            a.len()
        ),
        None => "none".into(),
    }
}

#[test]
fn logits_do_not_depend_on_batch_threads_or_cached_prefix() {
    let model = load(&gemma_path());
    let prompt = prompt(&model);
    let (want, want_greedy) = run(&mut context(&model, 512, 2), &prompt);
    for threads in [1, 2] {
        for n_batch in [1, 3, 7, 64, 512] {
            let (got, greedy) = run(&mut context(&model, n_batch, threads), &prompt);
            assert!(
                got == want,
                "nBatch {n_batch}, {threads} thread(s): {}",
                first_difference(&got, &want)
            );
            assert_eq!(greedy, want_greedy, "nBatch {n_batch}, {threads} thread(s)");
        }
    }
    // A cached prefix: the first 100 tokens and an unrelated tail, then the whole prompt, which
    // reuses those 100 and processes the rest.
    let mut ctx = context(&model, 64, 2);
    let mut other = prompt[..100].to_vec();
    other.extend_from_slice(&prompt[200..230]);
    run(&mut ctx, &other);
    let (got, greedy) = run(&mut ctx, &prompt);
    assert!(got == want, "after a cached prefix: {}", first_difference(&got, &want));
    assert_eq!(greedy, want_greedy, "after a cached prefix");
}
