//! LFM2 (tessera-llm's random-weight tiny-lfm2, `target/models/tiny-lfm2.gguf`, which
//! `scripts/setup.sh` writes) with its weights, KV cache and convolution states on the GPU.
//!
//! The GPU has no kernels for LFM2's CONCAT (the state before the batch's inputs) and SSM_CONV
//! (the short convolution), so the scheduler runs those two nodes of each convolution layer on
//! the CPU (its fallback); the checks are common/hybrid.rs's.

mod common;

#[test]
fn lfm2_runs_on_the_gpu_with_the_cpu_for_its_convolutions() {
    common::hybrid::runs_on_the_gpu_with_cpu_fallback("tiny-lfm2", "CONCAT / SSM_CONV");
}
