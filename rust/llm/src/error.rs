//! The runtime's error type: every failure names what and where (the architecture, the tensor
//! and its shapes, the parameter and its value).

use tessera_core::DType;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The GGUF file could not be read or is malformed.
    #[error("model file: {0}")]
    Gguf(#[from] tessera_gguf::GgufError),
    /// A graph, device or kernel error from the engine.
    #[error("{0}")]
    Core(#[from] tessera_core::Error),
    /// `general.architecture` names an architecture this runtime does not implement (the
    /// message lists the registry's, [`crate::arch::Architecture::all`]).
    #[error("unknown architecture {name:?} (supported: {list})", name = .0, list = crate::arch::supported_names())]
    UnknownArchitecture(String),
    /// A hyper-parameter is missing, out of range or inconsistent.
    #[error("model metadata: {key}: {reason}")]
    BadHyperParameter {
        /// The metadata key.
        key: String,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("{arch}: tensor {name:?} is missing from the model file")]
    MissingTensor {
        /// The architecture.
        arch: String,
        /// The tensor's GGUF name.
        name: String,
    },
    /// A tensor has a shape other than the hyper-parameters imply.
    #[error("{arch}: tensor {name:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The architecture.
        arch: String,
        /// The tensor's GGUF name.
        name: String,
        /// The shape the hyper-parameters give.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor has a type the op that reads it cannot use.
    #[error("{arch}: tensor {name:?} has type {dtype}, which {reason}")]
    TensorType {
        /// The architecture.
        arch: String,
        /// The tensor's GGUF name.
        name: String,
        /// Its type.
        dtype: DType,
        /// Why it does not fit.
        reason: String,
    },
    /// The model computed a value that is not finite (NaN or an infinity) in its logits or
    /// embeddings: its weights (or metadata) are broken. `origin` names the first node of the
    /// graph whose result held one (found by computing the batch again node by node).
    #[error(
        "the model computed {value} in its {output} (row {row}, column {column}); {origin}: \
         the model file's weights are broken"
    )]
    NonFinite {
        /// "logits" or "embeddings".
        output: &'static str,
        /// The first value that is not finite ("NaN", "inf", "-inf").
        value: String,
        /// Its row in the output.
        row: usize,
        /// Its column.
        column: usize,
        /// Where it first appeared, e.g. `it first appears at node "attn_norm-0" (MUL) of
        /// layer 0`.
        origin: String,
    },
    /// The tokens do not fit in the context that is left.
    #[error("context full: {needed} positions needed, the context holds {n_ctx} ({used} in use)")]
    ContextFull {
        /// Positions the call needs in all.
        needed: usize,
        /// Positions in use before the call.
        used: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// A context shift was asked of a model whose memory cannot shift: its recurrent layers'
    /// states hold every position processed (llama.cpp: "memory cannot shift"), or its layers
    /// share another layer's KV cache (Gemma 4, whose layers rotate by different rules).
    #[error(
        "{arch} cannot shift its context: its recurrent layers' states hold every position \
         processed and cannot forget some of them, or its layers sharing another layer's KV \
         cache rotate their keys by rules a shift does not apply (turn contextShift off)"
    )]
    ContextShiftUnsupported {
        /// The model's architecture.
        arch: String,
    },
    /// A call with nothing to process.
    #[error("empty input: {0}")]
    EmptyInput(String),
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {n_vocab} tokens")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// An option or argument out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The device asked for does not exist.
    #[error("unknown device {name:?} (available: {available})")]
    UnknownDevice {
        /// The name asked for.
        name: String,
        /// The devices of the registry.
        available: String,
    },
    /// The work was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The vocabulary could not be read, or a token id is out of range.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// A sampling parameter is out of range, or the logits cannot be sampled.
    #[error("sampling: {0}")]
    Sampling(#[from] crate::sampling::SamplingError),
    /// A chat template could not be parsed or rendered.
    #[error("chat template: {0}")]
    Chat(#[from] crate::chat::ChatError),
    /// A session file could not be saved or loaded ([`crate::session_file`]).
    #[error("{0}")]
    Session(#[from] crate::session_file::SessionError),
    /// A stop string is invalid.
    #[error("stop strings: {0}")]
    Stop(#[from] crate::stop::StopError),
    /// Chat was asked of a model whose file has no chat template (and whose architecture has
    /// no built-in one).
    #[error("the model has no chat template ({0}); pass a prompt, or a template of your own")]
    NoChatTemplate(String),
    /// Chat was asked of a model whose file's chat template does not parse.
    #[error("the model's chat template is broken ({0}); pass a prompt, or a template of your own")]
    BrokenChatTemplate(String),
}

/// Result with [`LlmError`].
pub type Result<T> = std::result::Result<T, LlmError>;
