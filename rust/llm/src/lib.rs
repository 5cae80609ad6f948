//! Tessera's language-model runtime: GGUF models (Gemma 3, Llama, Phi-3, Qwen 2 and 3,
//! SmolLM3; the embedding models BERT and EmbeddingGemma, and BERT rerankers) as graphs on
//! Tessera's devices, with a KV cache, tokenizers, sampling, chat templates, embeddings and
//! reranking.
#![warn(missing_docs)]

pub mod arch;
mod blocks;
pub mod chat;
pub mod constraint;
pub mod context;
pub mod embed;
pub mod error;
mod finite;
pub mod forward;
pub mod generate;
pub mod hparams;
pub mod kv_cache;
pub mod model;
pub mod perplexity;
pub mod recurrent;
pub mod sampling;
pub mod session_file;
mod shift;
pub mod stop;
pub mod tensors;
pub mod tokenizer;
pub mod weights;

pub use arch::Architecture;
pub use context::{Context, ContextOptions, Output, Rows};
pub use embed::{EmbedOptions, Embedder, Pooling};
pub use error::{LlmError, Result};
pub use generate::{
    generate, ContextShift, GenerateOptions, Generation, KeepTokens, Prompt, StopReason,
    ThinkingBudget, Timings, TokenEvent, TokenProb,
};
pub use hparams::HParams;
pub use model::Model;
pub use tessera_core::registry::DeviceChoice;
