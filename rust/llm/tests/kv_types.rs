//! Quantized KV caches (`ContextOptions::cache_types`: llama.cpp's `cache_type_k` /
//! `cache_type_v`) on Gemma 3 270M Q4_K_M, against llama.cpp with the same cache types
//! (tests/fixtures/kv-types-gemma3.json, recorded by record_kv_types.py with llama-cpp-python
//! 0.3.36, flash attention on) and against Tessera's own F16 cache:
//! - for every prompt of model-gemma3.json, the top-40 logits of the last position with Q8_0 and
//!   Q4_0 caches agree with llama.cpp's with the same cache type within 1.25 times the sum of two
//!   measured spreads: llama.cpp's noise (its flash attention on vs off, as the model tests
//!   measure it) and the cache's rounding (what changing F16 to that type moves llama.cpp's
//!   logits by): both engines round keys and values that already differ by their noise, and a
//!   last-bit difference can round a value to the next quantum (4-bit: a sixteenth of the
//!   block's range). Worst prompt against the worst spreads, and the mean over prompts against
//!   the mean spreads;
//! - they differ from Tessera's F16 cache's by at most 1.25 times that cache rounding plus the
//!   noise floor. A wrong nibble order or block scale moves them by many units (see the report
//!   of the branch that added this test for the breaks tried).
//! - the bytes per token are the rows' sizes (Gemma 3: 18 layers of one KV head of 256: 512 + 512
//!   bytes in F16, 272 + 272 in Q8_0, 144 + 144 in Q4_0) and the cache's memory is exactly that
//!   per cell;
//! - an unknown cache type is a typed error naming the choices.

mod common;

use common::{fixture, gemma_path, ids, registry};
use serde_json::Value;
use std::sync::Arc;
use tessera_core::DType;
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::{Context, ContextOptions, LlmError, Model, Rows};

/// Margin over llama.cpp's own spread (as the model tests).
const MARGIN: f32 = 1.25;

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().expect("numbers").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn context(model: &Arc<Model>, n_ctx: usize, t: DType) -> Context {
    let cache_types = CacheTypes { k: t, v: t };
    let opts = ContextOptions { n_ctx, n_batch: n_ctx, threads: Some(2), cache_types };
    Context::new(model.clone(), &registry(), &opts).unwrap()
}

#[test]
fn quantized_caches_match_llama_cpp_and_stay_near_f16() {
    let model = common::load(&gemma_path());
    let fx = fixture("kv-types-gemma3.json");
    let models = fixture("model-gemma3.json");
    let runs = fx["runs"].as_array().unwrap();
    // llama.cpp's noise per prompt: its flash attention on vs off (F16 cache).
    let spread: Vec<f32> = models["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| max_abs_diff(&f32s(&r["top_logits"]), &f32s(&r["top_logits_fa_off"])))
        .collect();
    assert_eq!(spread.len(), runs.len());
    let max = |v: &[f32]| v.iter().copied().fold(0.0, f32::max);
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    let floor = max(&spread);
    for (t, key) in [(DType::Q8_0, "q8_0"), (DType::Q4_0, "q4_0")] {
        let logits_key = format!("top_logits_{key}");
        // What changing the cache from F16 to this type moves llama.cpp's logits by, per prompt:
        // the size of the cache's rounding, which the two engines apply to keys and values that
        // already differ by their noise (a last-bit difference can round a value to the next
        // quantum), so their results may differ by up to both.
        let shift: Vec<f32> = runs
            .iter()
            .map(|r| max_abs_diff(&f32s(&r["top_logits_f16"]), &f32s(&r[&logits_key])))
            .collect();
        let (mut d_ll, mut d_f16) = (Vec::new(), Vec::new());
        for run in runs {
            let n_ctx = run["n_ctx"].as_u64().unwrap() as usize;
            let prompt = ids(&run["ids"]);
            let top = ids(&run["top_ids"]);
            let pick = |l: &[f32]| top.iter().map(|&i| l[i as usize]).collect::<Vec<f32>>();
            let mut f16 = context(&model, n_ctx, DType::F16);
            let ours_f16 = pick(f16.decode(&prompt, Rows::Last).unwrap().last());
            let ours = pick(context(&model, n_ctx, t).decode(&prompt, Rows::Last).unwrap().last());
            let theirs = f32s(&run[&logits_key]);
            d_ll.push(max_abs_diff(&ours, &theirs));
            d_f16.push(max_abs_diff(&ours, &ours_f16));
            eprintln!(
                "{t} cache, {} tokens: |ours - llama.cpp| {:.3}, |ours - ours F16| {:.3} \
                 (llama.cpp: F16 -> {key} {:.3}, flash attention on/off {:.3})",
                prompt.len(),
                d_ll.last().unwrap(),
                d_f16.last().unwrap(),
                shift[d_ll.len() - 1],
                spread[d_ll.len() - 1]
            );
        }
        let bound = MARGIN * (floor + max(&shift));
        assert!(
            max(&d_ll) <= bound,
            "{t}: a top-40 logit differs from llama.cpp's with the same cache by {}, more than \
             {MARGIN} x (its noise {floor} + its cache's shift {})",
            max(&d_ll),
            max(&shift)
        );
        let mean_bound = MARGIN * (mean(&spread) + mean(&shift));
        assert!(
            mean(&d_ll) <= mean_bound,
            "{t}: on average over the prompts a top-40 logit differs from llama.cpp's by {}, \
             more than {mean_bound}",
            mean(&d_ll)
        );
        let f16_bound = MARGIN * max(&shift) + floor;
        assert!(
            max(&d_f16) <= f16_bound,
            "{t}: a top-40 logit moved by {} from the F16 cache's, more than {f16_bound}",
            max(&d_f16)
        );
        eprintln!(
            "{t}: |ours - llama.cpp| worst {:.3} (bound {bound:.3}), mean {:.3} (bound \
             {mean_bound:.3}); |ours - ours F16| worst {:.3} (bound {f16_bound:.3}), mean {:.3} \
             (llama.cpp's own shift: mean {:.3})",
            max(&d_ll),
            mean(&d_ll),
            max(&d_f16),
            mean(&d_f16),
            mean(&shift)
        );
    }
}

#[test]
fn bytes_per_token_are_the_cache_rows() {
    let model = common::load(&gemma_path());
    // 18 layers, one KV head of 256 keys and 256 values: F16 2 bytes a value, Q8_0 34 bytes
    // and Q4_0 18 bytes a block of 32.
    for (t, per_row) in [(DType::F16, 512), (DType::Q8_0, 272), (DType::Q4_0, 144)] {
        let ctx = context(&model, 512, t);
        assert_eq!(ctx.kv_bytes_per_token(), 18 * 2 * per_row, "{t}");
        assert_eq!(ctx.cache_types(), CacheTypes { k: t, v: t });
        // n_ctx 512: every layer (the sliding-window ring too) holds 512 cells.
        assert_eq!(ctx.kv_bytes(), 512 * ctx.kv_bytes_per_token(), "{t}: the cache's memory");
    }
    let mixed = CacheTypes { k: DType::Q8_0, v: DType::Q4_0 };
    let opts = ContextOptions { n_ctx: 256, cache_types: mixed, ..ContextOptions::default() };
    let ctx = Context::new(model.clone(), &registry(), &opts).unwrap();
    assert_eq!(ctx.kv_bytes_per_token(), 18 * (272 + 144));
}

#[test]
fn cache_types_are_parsed_or_refused() {
    assert_eq!(CacheTypes::parse("q8_0").unwrap(), DType::Q8_0);
    assert_eq!(CacheTypes::parse("Q4_0").unwrap(), DType::Q4_0);
    assert_eq!(CacheTypes::parse("f16").unwrap(), DType::F16);
    for bad in ["q5_1", "f32", ""] {
        match CacheTypes::parse(bad) {
            Err(LlmError::InvalidArgument(m)) => assert!(m.contains("f16, q8_0 or q4_0"), "{m}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // A type the cache does not hold, given directly.
    let model = common::load(&gemma_path());
    let opts = ContextOptions {
        n_ctx: 64,
        cache_types: CacheTypes { k: DType::Q4_1, v: DType::F16 },
        ..ContextOptions::default()
    };
    match Context::new(model, &registry(), &opts) {
        Err(LlmError::InvalidArgument(m)) => assert!(m.contains("Q4_1"), "{m}"),
        other => panic!("Q4_1 cache: {:?}", other.err()),
    }
}
