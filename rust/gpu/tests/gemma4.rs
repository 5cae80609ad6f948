//! Gemma 4 (tessera-llm's random-weight tiny-gemma4, `target/models/tiny-gemma4.gguf`, which
//! `scripts/setup.sh` writes) with its weights and KV cache on the GPU: the per-layer token
//! embeddings (GET_ROWS of the Q8_0 table), the sliding-window layers' own head sizes, the
//! shared-KV layers attending over a lower layer's cache, the final soft cap, all in one GPU
//! split; the checks are common/hybrid.rs's (logits against the scalar reference, llama.cpp's
//! top-1, one token at a time as one batch).

mod common;

#[test]
fn gemma4_runs_on_the_gpu() {
    common::hybrid::runs_on_the_gpu_in_one_split("tiny-gemma4", "GET_ROWS of the per-layer table");
}
