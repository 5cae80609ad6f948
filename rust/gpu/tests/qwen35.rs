//! Qwen 3.5 (tessera-llm's random-weight tiny-qwen35, `target/models/tiny-qwen35.gguf`, which
//! `scripts/setup.sh` writes) with its weights, KV cache and recurrent states (convolution
//! inputs and delta-net matrices) on the GPU, its CONCAT (the convolution state before the
//! batch's inputs), SSM_CONV (the short convolution), GATED_DELTA_NET (the delta rule) and the
//! gates' SIGMOID and SOFTPLUS computed there too: one split. The checks are
//! common/hybrid.rs's.

mod common;

#[test]
fn qwen35_runs_on_the_gpu_in_one_split() {
    common::hybrid::runs_on_the_gpu_in_one_split(
        "tiny-qwen35",
        "CONCAT / SSM_CONV / GATED_DELTA_NET",
    );
}
