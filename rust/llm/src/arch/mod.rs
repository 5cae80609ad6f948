//! The architectures the runtime builds, one module each, as llama.cpp's `src/models/<arch>.cpp`
//! and candle's one file per model: each holds its metadata keys and their checks (on top of
//! the keys every transformer has, read by [`crate::hparams`]), its tensor table (which tensors
//! are required, which optional, their shapes) and its graph, built from the shared blocks of
//! [`crate::blocks`] (norms, projections, RoPE, attention over the KV cache, FFN variants).
//!
//! The registry ([`Architecture::all`]) is the one list of what is supported: a file of another
//! architecture is refused with an error that names it and lists the registry.

mod bert;
mod gemma3;
mod gemma4;
mod gemma_embedding;
mod lfm2;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen35;
mod smollm3;

use crate::blocks::Builder;
use crate::chat::ChatTemplate;
use crate::error::{LlmError, Result};
use crate::hparams::{HParams, Keys};
use crate::tensors::{Lookup, ModelTensors};
use tessera_core::TensorId;

/// The norms of an architecture, which name the epsilon key it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormKind {
    /// RMS norms (`attention.layer_norm_rms_epsilon`).
    Rms,
    /// Layer norms with a bias (`attention.layer_norm_epsilon`: BERT).
    Layer,
}

/// What one architecture knows: implemented once per module, registered in [`REGISTRY`]
/// through the module's [`Registered`] entry.
pub(crate) trait Arch: Sync {
    /// Reads the metadata only this architecture has, and sets what it fixes (llama.cpp's
    /// `load_arch_hparams`), after the common keys are in `hp`; nothing by default.
    fn read_hparams(&self, _k: &Keys<'_>, _hp: &mut HParams) -> Result<()> {
        Ok(())
    }

    /// Its norms (RMS by default).
    fn norm(&self) -> NormKind {
        NormKind::Rms
    }

    /// Whether it has an output head that gives logits (`false` for embedding models, which
    /// only [`crate::embed::Embedder`] runs).
    fn generates(&self) -> bool {
        true
    }

    /// Looks up and checks its tensors (llama.cpp's `load_arch_tensors`).
    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors>;

    /// Builds the graph of one batch into `b` and returns its result (logits, or the final
    /// hidden state when the shape asks for embeddings).
    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId>;

    /// Whether a context shift can rotate its cached keys (the shift graph rotates every
    /// layer's keys alike, with the model's frequency factors): `true` by default.
    fn can_shift(&self) -> bool {
        true
    }

    /// The chat template used when the file carries none.
    fn builtin_chat_template(&self) -> Option<ChatTemplate> {
        None
    }
}

/// A module's entry in the registry: its name, its RoPE mode and its [`Arch`].
pub(crate) struct Registered {
    /// The GGUF name (`general.architecture`, the prefix of its metadata keys).
    name: &'static str,
    /// The RoPE mode llama.cpp uses for it (`llama_model_rope_type`).
    rope_mode: u32,
    /// What it knows.
    imp: &'static dyn Arch,
}

/// Every supported architecture, in alphabetical order.
static REGISTRY: &[&Registered] = &[
    &bert::BERT,
    &gemma_embedding::GEMMA_EMBEDDING,
    &gemma3::GEMMA3,
    &gemma4::GEMMA4,
    &lfm2::LFM2,
    &llama::LLAMA,
    &phi3::PHI3,
    &qwen2::QWEN2,
    &qwen3::QWEN3,
    &qwen35::QWEN35,
    &smollm3::SMOLLM3,
];

/// A model architecture the runtime builds graphs for (`general.architecture`), from the
/// registry.
#[derive(Clone, Copy)]
pub struct Architecture(&'static Registered);

impl Architecture {
    /// The architecture of `general.architecture = name`, or [`LlmError::UnknownArchitecture`]
    /// (whose message lists the supported ones).
    pub fn from_name(name: &str) -> Result<Architecture> {
        REGISTRY
            .iter()
            .find(|a| a.name == name)
            .map(|&a| Architecture(a))
            .ok_or_else(|| LlmError::UnknownArchitecture(name.to_string()))
    }

    /// Every supported architecture.
    pub fn all() -> impl Iterator<Item = Architecture> {
        REGISTRY.iter().map(|&a| Architecture(a))
    }

    /// The GGUF name (the metadata key prefix).
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// The RoPE mode llama.cpp uses for the architecture (`llama_model_rope_type`).
    pub fn rope_mode(self) -> u32 {
        self.0.rope_mode
    }

    /// The architecture's module.
    pub(crate) fn imp(self) -> &'static dyn Arch {
        self.0.imp
    }
}

/// The names of every supported architecture, comma-separated (for error messages).
pub fn supported_names() -> String {
    Architecture::all().map(Architecture::name).collect::<Vec<_>>().join(", ")
}

impl PartialEq for Architecture {
    fn eq(&self, other: &Architecture) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Architecture {}

impl std::hash::Hash for Architecture {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl std::fmt::Debug for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Architecture({})", self.name())
    }
}

impl std::fmt::Display for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_names_each_architecture_once_in_order() {
        let names: Vec<&str> = Architecture::all().map(Architecture::name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
        for n in &names {
            assert_eq!(Architecture::from_name(n).unwrap().name(), *n);
        }
    }

    #[test]
    fn an_unknown_architecture_lists_the_registry() {
        let e = Architecture::from_name("mamba").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("\"mamba\""), "{text}");
        for a in Architecture::all() {
            assert!(text.contains(a.name()), "{text} lacks {}", a.name());
        }
    }
}
