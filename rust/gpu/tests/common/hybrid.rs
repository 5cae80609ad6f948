//! A hybrid model (tessera-llm's random-weight tiny-lfm2, tiny-qwen35 or tiny-gemma4, written into
//! `target/models` by `scripts/setup.sh`) with its weights, KV cache and recurrent states on the
//! GPU, every node computed there (CONCAT, SSM_CONV and GATED_DELTA_NET included: one split).
//! Checked: the prompts' logits are the scalar reference's (run as a device of its own, as in
//! gemma.rs) within [`LOGIT_TOL`] and their top-1 is llama.cpp's (the model's fixture in
//! `rust/llm/tests/fixtures`); the states last across computes on the GPU (the prompt one token
//! at a time gives the same logits); and nothing falls back to the CPU (one GPU split, so that
//! a kernel lost shows here).

use super::reference_device::{argmax, gpu_cpu_ref_registry, load_on, max_diff, repo_root};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Arc;
use tessera_llm::{Context, ContextOptions, Model, Rows};

/// Largest difference allowed between a GPU logit and the reference's: f32 sums in another
/// order than the reference's f64 (logits with a standard deviation of about 16).
const LOGIT_TOL: f32 = 0.05;

/// Prompts run (the first ones of the fixture).
const PROMPTS: usize = 4;

/// The fixture of tessera-llm's tiny model `name`, and the model file whose sha256 it
/// recorded.
fn fixture_and_model(name: &str) -> (serde_json::Value, PathBuf) {
    let fx = repo_root().join(format!("rust/llm/tests/fixtures/model-{name}.json"));
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx).unwrap()).unwrap();
    let path = repo_root().join(format!("target/models/{name}.gguf"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (scripts/setup.sh, or tessera-llm's tests, write it)", path.display())
    });
    let sha = format!("{:x}", Sha256::digest(&bytes));
    assert_eq!(sha, fx["model_sha256"].as_str().unwrap(), "{} is stale", path.display());
    (fx, path)
}

/// Runs the first prompts of tiny model `name`'s fixture with the GPU and the scalar reference
/// (see the module doc); `recurrent_ops` names the ops of its recurrent (or otherwise particular)
/// layers, for the message.
pub fn runs_on_the_gpu_in_one_split(name: &str, recurrent_ops: &str) {
    let Some(_) = super::gpu() else { return };
    let (fx, path) = fixture_and_model(name);
    let (reg, gpu_name) = gpu_cpu_ref_registry();
    let load = |name: &str| load_on(&reg, &path, name);
    let gpu = load(&gpu_name);
    let reference = load("REF");
    let context = |m: &Arc<Model>, n_batch| {
        let opts =
            ContextOptions { n_ctx: 256, n_batch, threads: Some(2), ..ContextOptions::default() };
        Context::new(m.clone(), &reg, &opts).unwrap()
    };
    for (i, run) in fx["runs"].as_array().unwrap().iter().take(PROMPTS).enumerate() {
        let ids: Vec<u32> =
            run["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let mut on_gpu = context(&gpu, 256);
        let g = on_gpu.decode(&ids, Rows::Last).unwrap().last().to_vec();
        let splits = on_gpu.splits();
        assert_eq!(
            splits,
            vec![0],
            "prompt {i}: splits {splits:?}: not one GPU split (do {recurrent_ops} fall back to \
             the CPU?)"
        );
        let r = context(&reference, 256).decode(&ids, Rows::Last).unwrap().last().to_vec();
        let d = max_diff(&g, &r);
        let want = run["top_ids"][0].as_u64().unwrap() as usize;
        eprintln!(
            "prompt {i}: {} tokens, {} splits, max |GPU - reference| {d:.4}",
            ids.len(),
            splits.len()
        );
        assert!(d <= LOGIT_TOL, "prompt {i}: GPU logits {d} from the reference's");
        assert_eq!(argmax(&g), want, "prompt {i}: the GPU's top-1 is not llama.cpp's");
        // One token at a time: the states carried from compute to compute in GPU memory.
        let mut single = context(&gpu, 1);
        let s = single.decode(&ids, Rows::Last).unwrap().last().to_vec();
        assert_eq!(single.splits(), vec![0], "prompt {i}, one token at a time: splits");
        let d = max_diff(&g, &s);
        assert!(d <= LOGIT_TOL, "prompt {i}: one token at a time differs by {d}");
    }
}
