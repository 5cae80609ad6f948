//! Tessera's language-model runtime: GGUF models (Gemma 3, Llama, Qwen 2 and 3) as graphs on
//! Tessera's devices, with a KV cache, tokenizers, sampling, chat templates and embeddings.
#![warn(missing_docs)]

pub mod tokenizer;
