//! Qwen 3.5 (tessera-llm's random-weight tiny-qwen35, `target/models/tiny-qwen35.gguf`, which
//! `scripts/setup.sh` writes) with its weights, KV cache and recurrent states (convolution
//! inputs and delta-net matrices) on the GPU.
//!
//! The GPU has no kernels for CONCAT (the convolution state before the batch's inputs),
//! SSM_CONV (the short convolution) and GATED_DELTA_NET (the delta rule), so the scheduler runs
//! those nodes of each delta-net layer on the CPU (its fallback); SIGMOID and SOFTPLUS (the
//! gates) have GPU kernels. The checks are common/hybrid.rs's.

mod common;

#[test]
fn qwen35_runs_on_the_gpu_with_the_cpu_for_its_delta_nets() {
    common::hybrid::runs_on_the_gpu_with_cpu_fallback(
        "tiny-qwen35",
        "CONCAT / SSM_CONV / GATED_DELTA_NET",
    );
}
