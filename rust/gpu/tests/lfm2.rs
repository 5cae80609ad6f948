//! LFM2 (tessera-llm's random-weight tiny-lfm2, `target/models/tiny-lfm2.gguf`, which
//! `scripts/setup.sh` writes) with its weights, KV cache and convolution states on the GPU, its
//! CONCAT (the state before the batch's inputs) and SSM_CONV (the short convolution) computed
//! there too: one split. The checks are common/hybrid.rs's.

mod common;

#[test]
fn lfm2_runs_on_the_gpu_in_one_split() {
    common::hybrid::runs_on_the_gpu_in_one_split("tiny-lfm2", "CONCAT / SSM_CONV");
}
