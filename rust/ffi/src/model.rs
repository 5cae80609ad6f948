//! `Model`: a language model loaded from a GGUF file (tessera-llm), as Kotlin, Swift and the
//! JSON protocol see it: load with options and progress, info, tokenize / detokenize, chat
//! templates, streaming generation with sampling and stops, cancel, embeddings, close.
//!
//! One model holds `nSequences` conversations ([`crate::sequences`]: a context with its own KV
//! cache each, over the shared weights), and, made on the first `embed`, an embedder of its own
//! ([`Embedder`]: no KV cache, so embedding a text leaves every conversation's cache as it was).
//! Generations on one sequence run one at a time, in call order; generations on different
//! sequences run at the same time, and so do an embedding and a generation; embeddings run one
//! at a time. Several models run side by side. An embedding model (BERT, EmbeddingGemma) has no
//! context: it embeds, and generation is refused. `cancel()` and `close()` may be called from
//! any thread while a generation or an embedding runs; `close()` waits for it to stop.

use crate::error::{guard, guard_or, FfiResult, TesseraError};
use crate::gate::{lock, Gate};
use crate::generation::{
    probabilities, GeneratedToken, GenerationPlan, JsonText, ResponseFormat, StreamChunk,
    TokenProbs, ToolCallRecord,
};
use crate::options::{check_budget, check_threads};
use crate::record::uniffi_record_with_defaults;
use crate::sequences::Sequences;
use serde::{Deserialize, Deserializer, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tessera_llm::chat::{ChatError, ChatMessage, OutputParser};
use tessera_llm::embed::{EmbedOptions, Embedder, Pooling};
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::sampling::SamplingParams;
use tessera_llm::tokenizer::TokenizerError;
use tessera_llm::{generate, Context, ContextOptions, DeviceChoice, GenerateOptions, LlmError};

uniffi_record_with_defaults! {
    /// How to load a model.
    #[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Deserialize)]
    #[serde(default, deny_unknown_fields, rename_all = "camelCase")]
    pub struct ModelOptions {
        /// A device name from `devices()` (case-insensitive), or "auto": a hardware GPU when there
        /// is one, else the CPU.
        pub device: String = "auto",
        /// CPU threads; `None` for the performance cores.
        #[serde(deserialize_with = "crate::options::deserialize_threads")]
        pub threads: Option<u32> = None,
        /// Positions of the context (KV cache); `None` for 4096 or the model's training context
        /// if smaller.
        pub n_ctx: Option<u32> = None,
        /// Prompt tokens per batch.
        pub n_batch: u32 = 512,
        /// Conversations held at once, each with its own KV cache and position (llama.rn's
        /// `n_parallel`): 1 to [`crate::sequences::MAX_SEQUENCES`]; a generation picks one
        /// with `sequence`.
        pub n_sequences: u32 = 1,
        /// Bytes the sequences' KV caches may take together (`None`:
        /// [`crate::session::DEFAULT_BUDGET_PERCENT`] of the free memory once the weights are
        /// placed: the CPU's, or for a GPU model the host's); past it the load fails with
        /// `OutOfMemory`.
        #[serde(deserialize_with = "crate::options::deserialize_budget")]
        pub memory_budget: Option<u64> = None,
        /// The KV cache's key type: "f16", "q8_0" or "q4_0" (llama.rn's `cache_type_k`).
        pub cache_type_k: String = "f16",
        /// The KV cache's value type: "f16", "q8_0" or "q4_0" (llama.rn's `cache_type_v`).
        pub cache_type_v: String = "f16",
    }
}

/// What a loaded model is.
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// `general.architecture` (e.g. "gemma3", "llama", "qwen35"; an unknown one is refused at load with the list of those supported).
    pub architecture: String,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    /// Parameters (elements of every weight).
    pub n_params: u64,
    /// Bytes of the weights.
    pub size_bytes: u64,
    /// The quantization by `general.file_type` ("Q4_K_M", ...), or the most common weight type.
    pub quantization: String,
    /// The context the model was trained with.
    pub n_ctx_train: u32,
    /// The context of this load.
    pub n_ctx: u32,
    /// Tokens in the vocabulary.
    pub n_vocab: u32,
    /// Width of the hidden state (the embedding size).
    pub n_embd: u32,
    /// Transformer blocks.
    pub n_layer: u32,
    /// The device running it.
    pub device: String,
    /// Whether the model has a chat template (its own or the built-in Gemma one).
    pub has_chat_template: bool,
    /// Bytes of weights read in place from the mapped file.
    pub mapped_bytes: u64,
    /// Sequences (conversations with a KV cache each) of this load; 0 for an embedding model.
    pub n_sequences: u32,
    /// Bytes of device memory the KV cache (and recurrent states) of one sequence takes, its
    /// buffers' sizes (0 for an embedding model).
    pub cache_bytes_per_sequence: u64,
    /// Bytes of keys and values one token takes in the KV cache, over every attention layer
    /// (with the load's cache types; 0 for an embedding model, which keeps no cache).
    pub kv_bytes_per_token: u64,
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChatTurn {
    /// "system", "user", "assistant", "tool" (or what the template knows).
    pub role: String,
    /// The text (`null` in JSON reads as empty: an assistant message with only tool calls).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// An assistant message's tool calls.
    #[serde(default)]
    #[uniffi(default = [])]
    pub tool_calls: Vec<ToolCallRecord>,
    /// A `tool` message: the id of the call it answers.
    #[serde(default)]
    #[uniffi(default = None)]
    pub tool_call_id: Option<String>,
    /// A `tool` message: the tool's name.
    #[serde(default)]
    #[uniffi(default = None)]
    pub name: Option<String>,
    /// An assistant message's reasoning (templates such as Qwen 3's render it).
    #[serde(default)]
    #[uniffi(default = None)]
    pub reasoning_content: Option<String>,
}

impl ChatTurn {
    /// A message from a role and a text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatTurn {
        ChatTurn {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning_content: None,
        }
    }
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A token bias: added to the token's logit before sampling (`-inf` bans it).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct LogitBias {
    /// The token id.
    pub token: u32,
    /// The bias.
    pub bias: f32,
}

uniffi_record_with_defaults! {
    /// What to generate and how. Exactly one of `prompt` and `messages`.
    #[derive(Debug, Clone, PartialEq, uniffi::Record, Deserialize)]
    #[serde(default, deny_unknown_fields, rename_all = "camelCase")]
    pub struct GenerateRequest {
        /// A text prompt (BOS added as the model asks, special tokens parsed).
        pub prompt: Option<String> = None,
        /// A conversation, rendered with the model's chat template.
        pub messages: Option<Vec<ChatTurn>> = None,
        /// Most tokens to generate.
        pub max_tokens: u32 = 256,
        /// Strings that end the text where they appear (not included).
        pub stop: Vec<String> = [],
        /// Sampling temperature; 0 is greedy.
        pub temperature: f32 = 0.8,
        /// Keep the `top_k` most likely tokens (0: all).
        pub top_k: u32 = 40,
        /// Nucleus sampling (1: off).
        pub top_p: f32 = 0.95,
        /// Drop tokens below `min_p` times the top probability (0: off).
        pub min_p: f32 = 0.05,
        /// Locally typical sampling (1: off).
        pub typical_p: f32 = 1.0,
        /// Repetition penalty over the last `penalty_last_n` tokens (1: off).
        pub repeat_penalty: f32 = 1.0,
        /// Frequency penalty (0: off).
        pub frequency_penalty: f32 = 0.0,
        /// Presence penalty (0: off).
        pub presence_penalty: f32 = 0.0,
        /// Tokens the penalties look back over.
        pub penalty_last_n: u32 = 64,
        /// Biases per token.
        #[serde(deserialize_with = "logit_bias_pairs")]
        pub logit_bias: Vec<LogitBias> = [],
        /// Seed of the draw (`None`: random).
        pub seed: Option<u64> = None,
        /// Keep generating past end-of-generation tokens.
        pub ignore_eos: bool = false,
        /// The shape of the answer (`{"type": "json_schema", "schema"}`, `{"type":
        /// "json_object"}`), enforced token by token.
        pub response_format: Option<ResponseFormat> = None,
        /// A grammar in llama.cpp's GBNF (`root` is the start rule) the answer must match.
        pub grammar: Option<String> = None,
        /// A regular expression the whole answer must match.
        pub regex: Option<String> = None,
        /// Tools (OpenAI function definitions, `{"type": "function", "function": {"name",
        /// "description", "parameters"}}`), messages only.
        pub tools: Vec<JsonText> = [],
        /// "auto", "none", "required", or the name of the function to call.
        pub tool_choice: String = "auto",
        /// `enable_thinking` for the template (Qwen 3, SmolLM3, ...); `None` leaves the
        /// template's default.
        pub enable_thinking: Option<bool> = None,
        /// "auto" puts `<think>...</think>` into `reasoning`; "none" leaves it in `content`.
        pub reasoning_format: String = "auto",
        /// At most this many tokens of reasoning; then `</think>` is written for the model.
        pub thinking_budget: Option<u32> = None,
        /// Further template variables (a JSON object); they override the standard ones.
        pub chat_template_kwargs: Option<JsonText> = None,
        /// A Jinja chat template to use instead of the model's.
        pub chat_template: Option<String> = None,
        /// Report the `n_probs` most likely candidates of every generated token.
        pub n_probs: u32 = 0,
        /// The sequence (conversation) to generate on: 0 to `nSequences - 1` of the load.
        pub sequence: u32 = 0,
        /// When the context is full, discard the oldest half of what follows the first
        /// `n_keep` tokens and go on (llama.cpp's context shift) instead of stopping with
        /// reason "context"; refused for models with recurrent layers (LFM2, Qwen 3.5).
        pub context_shift: bool = false,
        /// With `context_shift`: the tokens kept at the start after the BOS token (which is
        /// kept besides); -1 keeps the whole prompt (at most `n_ctx - 4` tokens of it).
        pub n_keep: i32 = 0,
    }
}

/// The protocol's `logitBias`, `[[token, bias]]` with `false` for a ban, read by the sampling
/// parameters' own reader.
fn logit_bias_pairs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<LogitBias>, D::Error> {
    let pairs = tessera_llm::sampling::logit_bias_json::deserialize(d)?;
    Ok(pairs.into_iter().map(|(token, bias)| LogitBias { token, bias }).collect())
}

/// The runtime's options for a request: the one conversion of the foreign API's (and the
/// protocol's) generation parameters.
impl From<&GenerateRequest> for GenerateOptions {
    fn from(r: &GenerateRequest) -> GenerateOptions {
        GenerateOptions {
            sampling: SamplingParams {
                temperature: r.temperature,
                top_k: r.top_k,
                top_p: r.top_p,
                min_p: r.min_p,
                typical_p: r.typical_p,
                repeat_penalty: r.repeat_penalty,
                frequency_penalty: r.frequency_penalty,
                presence_penalty: r.presence_penalty,
                penalty_last_n: r.penalty_last_n,
                logit_bias: r.logit_bias.iter().map(|b| (b.token, b.bias)).collect(),
                seed: r.seed,
            },
            max_tokens: r.max_tokens as usize,
            stop: r.stop.clone(),
            ignore_eos: r.ignore_eos,
            ..GenerateOptions::default()
        }
    }
}

/// Time spent, as llama.rn's `timings`.
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateTimings {
    /// Prompt tokens computed (those reused from the cache not counted).
    pub prompt_n: u32,
    /// Milliseconds spent on them.
    pub prompt_ms: f64,
    /// Prompt tokens per second.
    pub prompt_per_second: f64,
    /// Tokens generated.
    pub predicted_n: u32,
    /// Milliseconds spent generating.
    pub predicted_ms: f64,
    /// Generated tokens per second.
    pub predicted_per_second: f64,
    /// Prompt tokens reused from the KV cache.
    pub cached_n: u32,
    /// Milliseconds spent computing the output constraint's token masks (part of
    /// `predicted_ms`; 0 without a constraint).
    pub constraint_ms: f64,
}

/// The result of a generation.
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateResult {
    /// The generated text (stop string excluded).
    pub text: String,
    /// The generated tokens.
    pub tokens: Vec<u32>,
    /// The prompt's tokens.
    pub prompt_tokens: u32,
    /// "eog" (end of generation), "stop" (a stop string), "length" (max_tokens), "context"
    /// (the context is full), "cancelled".
    pub stop_reason: String,
    /// Time spent.
    pub timings: GenerateTimings,
    /// The answer for the user: `text` without the reasoning and the tool calls, trimmed.
    pub content: String,
    /// The reasoning (`<think>...</think>` with `reasoningFormat` "auto"), empty if none.
    pub reasoning: String,
    /// The tool calls parsed from the answer (with `tools`).
    pub tool_calls: Vec<ToolCallRecord>,
    /// With `nProbs`, each generated token's candidates.
    pub probs: Vec<TokenProbs>,
}

/// One document's relevance to a query.
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
pub struct RerankResult {
    /// The document's position in the request.
    pub index: u32,
    /// Its score (the classification head's logit, or its logistic with `normalize`).
    pub score: f32,
}

/// Receives each generated token while `generate` runs; returning `false` stops it.
#[uniffi::export(callback_interface)]
pub trait TokenListener: Send + Sync {
    /// One token, the raw text it completes (empty while a character or a possible stop
    /// string is held back), the typed pieces of the answer it made certain and, with
    /// `nProbs`, its candidates.
    fn on_token(&self, token: GeneratedToken) -> bool;
}

/// Receives the fraction of the weights placed while a model loads; `false` cancels the load.
#[uniffi::export(callback_interface)]
pub trait LoadProgress: Send + Sync {
    /// A fraction from 0 to 1.
    fn on_progress(&self, fraction: f32) -> bool;
}

/// A loaded language model with its context. Safe to share between threads.
#[derive(uniffi::Object)]
pub struct Model {
    info: ModelInfo,
    model: Arc<tessera_llm::Model>,
    /// The conversations' contexts (none for an embedding model, which cannot generate).
    sequences: Option<Sequences>,
    /// The embedder, made on the first `embed`.
    embedder: Mutex<Option<Embedder>>,
    /// How the embedder is made.
    embed_options: EmbedOptions,
    /// The cancel flag of the embedder (set by `cancel` and `close`).
    cancels: Mutex<Vec<Arc<AtomicBool>>>,
    gate: Gate,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("info", &self.info).finish()
    }
}

impl From<LlmError> for TesseraError {
    fn from(e: LlmError) -> TesseraError {
        let message = e.to_string();
        match e {
            LlmError::Core(core) => core.into(),
            // An id past the vocabulary is the caller's (detokenize); the rest of the
            // tokenizer's errors are the vocabulary's.
            LlmError::Tokenizer(TokenizerError::TokenOutOfRange { .. }) => {
                TesseraError::InvalidArgument { message }
            }
            // The model's own template: refusing the messages (`raise_exception`) is about the
            // request, failing to render is the template's fault.
            LlmError::Chat(ChatError::Syntax { .. } | ChatError::Render { .. }) => {
                TesseraError::InvalidModel { message }
            }
            LlmError::Gguf(_)
            | LlmError::UnknownArchitecture(_)
            | LlmError::BadHyperParameter { .. }
            | LlmError::MissingTensor { .. }
            | LlmError::TensorShape { .. }
            | LlmError::TensorType { .. }
            | LlmError::NonFinite { .. }
            | LlmError::BrokenChatTemplate(_)
            | LlmError::Tokenizer(_) => TesseraError::InvalidModel { message },
            LlmError::Session(e) => crate::model_session::session_error(&e, message),
            LlmError::ContextFull { .. } => TesseraError::ContextFull { message },
            LlmError::ContextShiftUnsupported { .. } => TesseraError::Unsupported { message },
            LlmError::UnknownDevice { .. } => TesseraError::UnknownDevice { message },
            LlmError::Cancelled => TesseraError::Cancelled { message },
            LlmError::EmptyInput(_)
            | LlmError::TokenOutOfRange { .. }
            | LlmError::InvalidArgument(_)
            | LlmError::Sampling(_)
            | LlmError::Chat(_)
            | LlmError::Stop(_)
            | LlmError::NoChatTemplate(_) => TesseraError::InvalidArgument { message },
        }
    }
}

fn quantization(model: &tessera_llm::Model) -> String {
    // llama.h's `llama_ftype`.
    const FILE_TYPES: [(u32, &str); 20] = [
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (7, "Q8_0"),
        (8, "Q5_0"),
        (9, "Q5_1"),
        (10, "Q2_K"),
        (11, "Q3_K_S"),
        (12, "Q3_K_M"),
        (13, "Q3_K_L"),
        (14, "Q4_K_S"),
        (15, "Q4_K_M"),
        (16, "Q5_K_S"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (21, "Q2_K_S"),
        (25, "IQ4_NL"),
        (30, "IQ4_XS"),
        (32, "BF16"),
    ];
    if let Ok(Some(ft)) = model.file().opt_u32("general.file_type") {
        if let Some((_, name)) = FILE_TYPES.iter().find(|(c, _)| *c == ft) {
            return name.to_string();
        }
    }
    let mut bytes: std::collections::BTreeMap<String, usize> = Default::default();
    for t in model.tensors().all() {
        *bytes.entry(t.info.dtype.name().to_string()).or_default() += t.info.size;
    }
    bytes.into_iter().max_by_key(|(_, n)| *n).map(|(t, _)| t).unwrap_or_default()
}

impl Model {
    /// Loads a model (the work of [`Model::load`], without the panic guard).
    pub(crate) fn open(
        path: &str,
        options: &ModelOptions,
        progress: &mut dyn FnMut(f32) -> bool,
    ) -> FfiResult<Model> {
        let threads = check_threads(options.threads)?;
        let budget = check_budget(options.memory_budget)?;
        crate::sequences::check_count(options.n_sequences)?;
        if options.n_batch == 0 {
            return Err(TesseraError::invalid_argument("n_batch must be at least 1"));
        }
        if options.n_ctx == Some(0) {
            return Err(TesseraError::invalid_argument("n_ctx must be at least 1"));
        }
        let registry = crate::registry::registry();
        let device = DeviceChoice::parse(&options.device);
        let model = Arc::new(tessera_llm::Model::load(path, registry, &device, progress)?);
        let hp = model.hparams();
        // The runtime's default context, or the model's training context when smaller.
        let default_ctx = ContextOptions::default().n_ctx.min(hp.n_ctx_train);
        let n_ctx = options.n_ctx.map_or(default_ctx, |n| n as usize);
        let cache_types = CacheTypes {
            k: CacheTypes::parse(&options.cache_type_k)?,
            v: CacheTypes::parse(&options.cache_type_v)?,
        };
        let ctx_opts =
            ContextOptions { n_ctx, n_batch: options.n_batch as usize, threads, cache_types };
        let sequences = match hp.can_generate() {
            true => Some(Sequences::new(model.clone(), ctx_opts, options.n_sequences, budget)?),
            false => None,
        };
        let embed_options = EmbedOptions { n_ctx: n_ctx.min(hp.n_ctx_train), threads };
        let info = ModelInfo {
            architecture: hp.arch.name().into(),
            name: model.file().opt_str("general.name").ok().flatten().map(str::to_string),
            n_params: model.n_params() as u64,
            size_bytes: model.weight_bytes() as u64,
            quantization: quantization(&model),
            n_ctx_train: hp.n_ctx_train as u32,
            n_ctx: n_ctx as u32,
            n_vocab: hp.n_vocab as u32,
            n_embd: hp.n_embd as u32,
            n_layer: hp.n_layer as u32,
            device: model.device().name(),
            has_chat_template: model.chat_template().is_ok(),
            mapped_bytes: model.weights().mapped_bytes() as u64,
            n_sequences: sequences.as_ref().map_or(0, |s| s.len() as u32),
            cache_bytes_per_sequence: sequences.as_ref().map_or(0, |s| s.cache_bytes() as u64),
            kv_bytes_per_token: match &sequences {
                Some(s) => s.with(0, |c| Ok(c.kv_bytes_per_token() as u64))?,
                None => 0,
            },
        };
        log::info!("model {} loaded on {}", info.architecture, info.device);
        let gate = Gate::new("the model is closed", format!("call on model {}", info.architecture));
        Ok(Model {
            info,
            cancels: Mutex::new(Vec::new()),
            model,
            sequences,
            embedder: Mutex::new(None),
            embed_options,
            gate,
        })
    }

    /// Sets the cancel flags of every sequence and of the embedder.
    fn cancel_all(&self) {
        if let Some(s) = &self.sequences {
            // Cancelling every sequence cannot fail.
            let _ = s.cancel(None);
        }
        for flag in lock(&self.cancels).iter() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Runs `f` on the context of `sequence`, one call at a time per sequence; `Closed` once
    /// the model is closed, `InvalidArgument` for an embedding model or a sequence the model was
    /// not loaded with.
    pub(crate) fn with_context<T>(
        &self,
        sequence: u32,
        f: impl FnOnce(&mut Context) -> FfiResult<T>,
    ) -> FfiResult<T> {
        let _pass = self.gate.enter(None)?;
        self.sequences()?.with(sequence, f)
    }

    /// The sequences; `InvalidArgument` for an embedding model.
    pub(crate) fn sequences(&self) -> FfiResult<&Sequences> {
        self.sequences.as_ref().ok_or_else(|| {
            TesseraError::invalid_argument(format!(
                "{} is an embedding model: it cannot generate (use embed)",
                self.info.architecture
            ))
        })
    }

    /// Runs `f` on the embedder (made on first use), one call at a time; `Closed` once the
    /// model is closed.
    fn with_embedder<T>(&self, f: impl FnOnce(&mut Embedder) -> FfiResult<T>) -> FfiResult<T> {
        let _pass = self.gate.enter(None)?;
        let mut slot = lock(&self.embedder);
        let embedder = match slot.take() {
            Some(e) => slot.insert(e),
            None => {
                let registry = crate::registry::registry();
                let e = Embedder::new(self.model.clone(), registry, &self.embed_options)?;
                lock(&self.cancels).push(e.cancel_flag());
                slot.insert(e)
            }
        };
        f(embedder)
    }

    /// [`Model::embed`] telling `progress` how many texts are embedded after each one. A
    /// cancel (`cancel`, `close`) stops it within the text it is on: `Cancelled`.
    pub(crate) fn embed_with(
        &self,
        texts: &[String],
        pooling: Option<&str>,
        progress: &mut dyn FnMut(usize),
    ) -> FfiResult<Vec<Vec<f32>>> {
        crate::limits::count("embed: texts", texts.len(), crate::limits::MAX_TEXTS)?;
        for (i, t) in texts.iter().enumerate() {
            crate::limits::text(&format!("embed: texts[{i}]"), t)?;
        }
        self.with_embedder(|e| {
            let pooling = match pooling {
                Some(p) => Pooling::parse(p)?,
                None => e.default_pooling(),
            };
            // Each embedding clears the flag as it starts: a cancel that came between two
            // texts is seen here.
            let cancelled = e.cancel_flag();
            let mut out = Vec::with_capacity(texts.len());
            for text in texts {
                if !out.is_empty() && cancelled.load(Ordering::Relaxed) {
                    return Err(TesseraError::Cancelled {
                        message: format!(
                            "embed cancelled after {} of {} texts",
                            out.len(),
                            texts.len()
                        ),
                    });
                }
                let tokens = e.tokens(text);
                if tokens.is_empty() {
                    return Err(TesseraError::invalid_argument("embed: a text has no tokens"));
                }
                out.push(e.embed(&tokens, pooling)?);
                progress(out.len());
            }
            Ok(out)
        })
    }

    /// Generates with a Rust callback for the tokens (the protocol's events go through it).
    pub(crate) fn generate_with(
        &self,
        request: &GenerateRequest,
        on_token: &mut dyn FnMut(&GeneratedToken) -> bool,
    ) -> FfiResult<GenerateResult> {
        crate::limits::generate_request(request)?;
        let plan = GenerationPlan::new(request, &self.model)?;
        self.with_context(request.sequence, |ctx| {
            let mut parser = OutputParser::new(plan.output);
            let mut probs = Vec::new();
            let g = generate(ctx, &plan.prompt, &plan.options, &mut |e| {
                let probabilities = probabilities(&e.probs);
                if !e.probs.is_empty() {
                    let text = String::from_utf8_lossy(
                        &self.model.tokenizer().token_to_piece(e.token, false).unwrap_or_default(),
                    )
                    .into_owned();
                    probs.push(TokenProbs { token: e.token, text, probs: probabilities.clone() });
                }
                let chunks = parser.push(&e.text).into_iter().map(StreamChunk::from).collect();
                on_token(&GeneratedToken {
                    token: e.token,
                    text: e.text.clone(),
                    chunks,
                    probs: probabilities,
                })
            })?;
            let (parsed, rest) = parser.finish();
            if !rest.is_empty() {
                let token = g.tokens.last().copied().unwrap_or(0);
                let chunks = rest.into_iter().map(StreamChunk::from).collect();
                on_token(&GeneratedToken { token, text: String::new(), chunks, probs: Vec::new() });
            }
            let t = g.timings;
            Ok(GenerateResult {
                text: g.text,
                tokens: g.tokens,
                prompt_tokens: g.prompt_tokens.len() as u32,
                stop_reason: g.stop_reason.name().into(),
                timings: GenerateTimings {
                    prompt_n: t.prompt_tokens as u32,
                    prompt_ms: t.prompt_ms,
                    prompt_per_second: t.prompt_per_second(),
                    predicted_n: t.predicted_tokens as u32,
                    predicted_ms: t.predicted_ms,
                    predicted_per_second: t.predicted_per_second(),
                    cached_n: t.cached_tokens as u32,
                    constraint_ms: t.constraint_ms,
                },
                content: parsed.text,
                reasoning: parsed.reasoning,
                tool_calls: parsed.tool_calls.into_iter().map(ToolCallRecord::from).collect(),
                probs,
            })
        })
    }
}

#[uniffi::export]
impl Model {
    /// Loads the GGUF file at `path` (mapped, weights read in place where the device allows)
    /// with `options`; `progress` sees the fraction of weights placed and may cancel.
    ///
    /// Errors: `InvalidModel` (unreadable or malformed file, unknown architecture, missing or
    /// misshapen tensor), `UnknownDevice`, `InvalidArgument`, `OutOfMemory`, `Cancelled`.
    #[uniffi::constructor]
    pub fn load(
        path: String,
        options: ModelOptions,
        progress: Option<Box<dyn LoadProgress>>,
    ) -> FfiResult<Arc<Model>> {
        guard("Model.load", || {
            let mut report = |f: f32| progress.as_ref().is_none_or(|p| p.on_progress(f));
            Model::open(&path, &options, &mut report).map(Arc::new)
        })
    }

    /// What the model is.
    pub fn info(&self) -> ModelInfo {
        guard_or("Model.info", || self.info.clone(), || self.info.clone())
    }

    /// The token ids of `text` (`add_special`: BOS as the model asks; `parse_special`: special
    /// tokens written in the text are recognized).
    pub fn tokenize(
        &self,
        text: String,
        add_special: bool,
        parse_special: bool,
    ) -> FfiResult<Vec<u32>> {
        guard("Model.tokenize", || {
            crate::limits::text("tokenize: text", &text)?;
            let _pass = self.gate.enter(None)?;
            Ok(self.model.tokenizer().encode(&text, add_special, parse_special))
        })
    }

    /// The text of `tokens` (`special`: special tokens rendered as their text).
    pub fn detokenize(&self, tokens: Vec<u32>, special: bool) -> FfiResult<String> {
        guard("Model.detokenize", || {
            crate::limits::count("detokenize: tokens", tokens.len(), crate::limits::MAX_TOKENS)?;
            let _pass = self.gate.enter(None)?;
            Ok(self.model.tokenizer().decode(&tokens, special).map_err(LlmError::from)?)
        })
    }

    /// The prompt `messages` render to with the model's chat template.
    pub fn apply_chat_template(
        &self,
        messages: Vec<ChatTurn>,
        add_generation_prompt: bool,
    ) -> FfiResult<String> {
        guard("Model.applyChatTemplate", || {
            let _pass = self.gate.enter(None)?;
            let m: Vec<ChatMessage> = messages
                .iter()
                .enumerate()
                .map(|(i, t)| t.to_message(&format!("messages[{i}]")))
                .collect::<FfiResult<_>>()?;
            let template = self.model.chat_template()?;
            Ok(template.render(&m, add_generation_prompt).map_err(LlmError::from)?)
        })
    }

    /// Generates a continuation on `request.sequence`, streaming each token to `listener`;
    /// blocks until it ends and returns the whole text with timings. Generations on one
    /// sequence run one at a time; on different sequences, at the same time.
    pub fn generate(
        &self,
        request: GenerateRequest,
        listener: Option<Box<dyn TokenListener>>,
    ) -> FfiResult<GenerateResult> {
        guard("Model.generate", || {
            self.generate_with(&request, &mut |token| {
                listener.as_ref().is_none_or(|l| l.on_token(token.clone()))
            })
        })
    }

    /// Stops the generations in progress on every sequence (they return with stop reason
    /// "cancelled") and the embedding in progress (it fails with `Cancelled`);
    /// `cancelSequence` stops one sequence's.
    pub fn cancel(&self) {
        guard_or("Model.cancel", || (), || self.cancel_all())
    }

    /// The L2-normalized embedding of each text (pooling "mean", "last", "first", or `None`
    /// for the model's own, mean when its file names none). Every sequence's cache is left
    /// as it was.
    pub fn embed(&self, texts: Vec<String>, pooling: Option<String>) -> FfiResult<Vec<Vec<f32>>> {
        guard("Model.embed", || self.embed_with(&texts, pooling.as_deref(), &mut |_| ()))
    }

    /// The relevance of each of `documents` to `query` for a reranker model (a BERT
    /// classification head under rank pooling), as llama.cpp scores them; the results are
    /// sorted by score, highest first, each with its document's index. `normalize` maps the
    /// raw scores (logits) through the logistic function into (0, 1).
    ///
    /// Errors: `InvalidArgument` (not a reranker, no documents, a pair past the context).
    pub fn rerank(
        &self,
        query: String,
        documents: Vec<String>,
        normalize: bool,
    ) -> FfiResult<Vec<RerankResult>> {
        guard("Model.rerank", || {
            if documents.is_empty() {
                return Err(TesseraError::invalid_argument("rerank: no documents"));
            }
            crate::limits::text("rerank: query", &query)?;
            crate::limits::count("rerank: documents", documents.len(), crate::limits::MAX_TEXTS)?;
            for (i, d) in documents.iter().enumerate() {
                crate::limits::text(&format!("rerank: documents[{i}]"), d)?;
            }
            self.with_embedder(|e| {
                let docs: Vec<&str> = documents.iter().map(String::as_str).collect();
                let scores = e.rerank(&query, &docs)?;
                let mut out: Vec<RerankResult> = scores
                    .into_iter()
                    .enumerate()
                    .map(|(index, s)| RerankResult {
                        index: index as u32,
                        score: if normalize { 1.0 / (1.0 + (-s).exp()) } else { s },
                    })
                    .collect();
                out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
                Ok(out)
            })
        })
    }

    /// Closes the model: stops and waits for the work in flight, then frees its memory;
    /// every later call returns `Closed`. Closing twice is fine. (Kotlin: `closeModel()`.)
    /// From inside one of the model's own calls (a token callback of its generation) it does
    /// not wait: the generation in flight is cancelled and returns with stop reason
    /// "cancelled", and the memory is freed with the model object.
    pub fn close(&self) {
        guard_or(
            "Model.close",
            || (),
            || {
                // From inside one of the model's own calls (its token callback), the call in
                // flight is cancelled and not waited for; the memory goes with the model.
                if self.gate.close(|| self.cancel_all()) {
                    if let Some(s) = &self.sequences {
                        s.clear();
                    }
                    lock(&self.embedder).take();
                }
            },
        )
    }

    /// Whether [`Model::close`] was called.
    pub fn is_closed(&self) -> bool {
        guard_or("Model.isClosed", || true, || self.gate.is_closed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(params: serde_json::Value) -> Result<GenerateRequest, String> {
        serde_json::from_value(params).map_err(|e| e.to_string())
    }

    /// The foreign API's defaults (uniffi's and the protocol's, declared once) are the
    /// runtime's: the default request converts to the runtime's default options, and the
    /// protocol's `{}` is the default request.
    #[test]
    fn request_defaults_are_the_runtimes() {
        assert_eq!(GenerateOptions::from(&GenerateRequest::default()), GenerateOptions::default());
        assert_eq!(parsed(json!({})).unwrap(), GenerateRequest::default());
        assert_eq!(
            ModelOptions::default().n_batch as usize,
            ContextOptions::default().n_batch,
            "the default batch"
        );
        let o: ModelOptions = serde_json::from_value(json!({"nCtx": 64})).unwrap();
        assert_eq!(o, ModelOptions { n_ctx: Some(64), ..ModelOptions::default() });
        let (defaults, types) = (ModelOptions::default(), ContextOptions::default().cache_types);
        assert_eq!(CacheTypes::parse(&defaults.cache_type_k).unwrap(), types.k, "the K type");
        assert_eq!(CacheTypes::parse(&defaults.cache_type_v).unwrap(), types.v, "the V type");
        let o: ModelOptions =
            serde_json::from_value(json!({"cacheTypeK": "q8_0", "cacheTypeV": "q4_0"})).unwrap();
        assert_eq!((o.cache_type_k.as_str(), o.cache_type_v.as_str()), ("q8_0", "q4_0"));
    }

    /// camelCase keys, the protocol's bias pairs (`false` bans), unknown keys refused.
    #[test]
    fn protocol_params_are_read_into_the_request() {
        let r =
            parsed(json!({"prompt": "a", "topK": 3, "logitBias": [[5, 1.5], [7, false]]})).unwrap();
        assert_eq!((r.prompt.as_deref(), r.top_k), (Some("a"), 3));
        assert_eq!(
            r.logit_bias,
            [LogitBias { token: 5, bias: 1.5 }, LogitBias { token: 7, bias: f32::NEG_INFINITY }]
        );
        let options = GenerateOptions::from(&r);
        assert_eq!(options.sampling.logit_bias, [(5, 1.5), (7, f32::NEG_INFINITY)]);
        assert_eq!(options.sampling.top_k, 3);
        let e = parsed(json!({"logitBias": [[1, true]]})).unwrap_err();
        assert!(e.contains("token 1") && e.contains("`true` is not a bias"), "{e}");
        let e = parsed(json!({"tempo": 1})).unwrap_err();
        assert!(e.contains("unknown field `tempo`"), "{e}");
    }
}
