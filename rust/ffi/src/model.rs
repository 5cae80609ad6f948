//! `Model`: a language model loaded from a GGUF file (tessera-llm), as Kotlin, Swift and the
//! JSON protocol see it: load with options and progress, info, tokenize / detokenize, chat
//! templates, streaming generation with sampling and stops, cancel, embeddings, close.
//!
//! One model holds one context (its KV cache): generations and embeddings on a model run one at
//! a time, in call order; several models run side by side. `cancel()` and `close()` may be
//! called from any thread while a generation runs; `close()` waits for it to stop.

use crate::error::{guard, guard_or, FfiResult, TesseraError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tessera_llm::chat::ChatMessage;
use tessera_llm::embed::{embed, Pooling};
use tessera_llm::sampling::SamplingParams;
use tessera_llm::{
    generate, Context, ContextOptions, DeviceChoice, GenerateOptions, LlmError, Prompt,
};

/// How to load a model.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ModelOptions {
    /// A device name from `devices()` (case-insensitive), or "auto": a hardware GPU when there
    /// is one, else the CPU.
    #[uniffi(default = "auto")]
    pub device: String,
    /// CPU threads; `None` for the performance cores.
    #[uniffi(default = None)]
    pub threads: Option<u32>,
    /// Positions of the context (KV cache); `None` for 4096 or the model's training context
    /// if smaller.
    #[uniffi(default = None)]
    pub n_ctx: Option<u32>,
    /// Prompt tokens per batch.
    #[uniffi(default = 512)]
    pub n_batch: u32,
}

impl Default for ModelOptions {
    fn default() -> ModelOptions {
        ModelOptions { device: "auto".into(), threads: None, n_ctx: None, n_batch: 512 }
    }
}

/// What a loaded model is.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ModelInfo {
    /// `general.architecture` ("gemma3", "llama", "qwen2", "qwen3").
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
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ChatTurn {
    /// "system", "user", "assistant" (or what the template knows).
    pub role: String,
    /// The text.
    pub content: String,
}

/// A token bias: added to the token's logit before sampling (`-inf` bans it).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct LogitBias {
    /// The token id.
    pub token: u32,
    /// The bias.
    pub bias: f32,
}

/// What to generate and how. Exactly one of `prompt` and `messages`.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct GenerateRequest {
    /// A text prompt (BOS added as the model asks, special tokens parsed).
    #[uniffi(default = None)]
    pub prompt: Option<String>,
    /// A conversation, rendered with the model's chat template.
    #[uniffi(default = None)]
    pub messages: Option<Vec<ChatTurn>>,
    /// Most tokens to generate.
    #[uniffi(default = 256)]
    pub max_tokens: u32,
    /// Strings that end the text where they appear (not included).
    #[uniffi(default = [])]
    pub stop: Vec<String>,
    /// Sampling temperature; 0 is greedy.
    #[uniffi(default = 0.8)]
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    #[uniffi(default = 40)]
    pub top_k: u32,
    /// Nucleus sampling (1: off).
    #[uniffi(default = 0.95)]
    pub top_p: f32,
    /// Drop tokens below `min_p` times the top probability (0: off).
    #[uniffi(default = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling (1: off).
    #[uniffi(default = 1.0)]
    pub typical_p: f32,
    /// Repetition penalty over the last `penalty_last_n` tokens (1: off).
    #[uniffi(default = 1.0)]
    pub repeat_penalty: f32,
    /// Frequency penalty (0: off).
    #[uniffi(default = 0.0)]
    pub frequency_penalty: f32,
    /// Presence penalty (0: off).
    #[uniffi(default = 0.0)]
    pub presence_penalty: f32,
    /// Tokens the penalties look back over.
    #[uniffi(default = 64)]
    pub penalty_last_n: u32,
    /// Biases per token.
    #[uniffi(default = [])]
    pub logit_bias: Vec<LogitBias>,
    /// Seed of the draw (`None`: random).
    #[uniffi(default = None)]
    pub seed: Option<u64>,
    /// Keep generating past end-of-generation tokens.
    #[uniffi(default = false)]
    pub ignore_eos: bool,
}

/// Time spent, as llama.rn's `timings`.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
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
}

/// The result of a generation.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
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
}

/// Receives each generated token while `generate` runs; returning `false` stops it.
#[uniffi::export(callback_interface)]
pub trait TokenListener: Send + Sync {
    /// One token and the text it completes (empty while a character or a possible stop string
    /// is held back).
    fn on_token(&self, token: u32, text: String) -> bool;
}

/// Receives the fraction of the weights placed while a model loads; `false` cancels the load.
#[uniffi::export(callback_interface)]
pub trait LoadProgress: Send + Sync {
    /// A fraction from 0 to 1.
    fn on_progress(&self, fraction: f32) -> bool;
}

#[derive(Default)]
struct State {
    closed: bool,
    in_flight: usize,
}

/// A loaded language model with its context. Safe to share between threads.
#[derive(uniffi::Object)]
pub struct Model {
    info: ModelInfo,
    model: Arc<tessera_llm::Model>,
    context: Mutex<Option<Context>>,
    /// The running generation's cancel flag (shared with its context).
    cancel: Arc<AtomicBool>,
    state: Mutex<State>,
    idle: Condvar,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("info", &self.info).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registered work; unregisters on drop, waking `close()`.
struct Ticket<'a>(&'a Model);

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.0.state);
        s.in_flight -= 1;
        if s.in_flight == 0 {
            self.0.idle.notify_all();
        }
    }
}

impl From<LlmError> for TesseraError {
    fn from(e: LlmError) -> TesseraError {
        let message = e.to_string();
        match e {
            LlmError::Core(core) => core.into(),
            LlmError::Gguf(_)
            | LlmError::UnknownArchitecture(_)
            | LlmError::BadHyperParameter { .. }
            | LlmError::MissingTensor { .. }
            | LlmError::TensorShape { .. }
            | LlmError::TensorType { .. }
            | LlmError::Tokenizer(_) => TesseraError::InvalidModel { message },
            LlmError::ContextFull { .. } => TesseraError::ContextFull { message },
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

fn check_threads(threads: Option<u32>) -> FfiResult<Option<usize>> {
    match threads {
        None => Ok(None),
        Some(t) if (1..=crate::session::MAX_THREADS).contains(&t) => Ok(Some(t as usize)),
        Some(t) => Err(TesseraError::invalid_argument(format!(
            "threads {t} must be between 1 and {}",
            crate::session::MAX_THREADS
        ))),
    }
}

impl Model {
    /// Loads a model (the work of [`Model::load`], without the panic guard).
    pub(crate) fn open(
        path: &str,
        options: &ModelOptions,
        progress: &mut dyn FnMut(f32) -> bool,
    ) -> FfiResult<Model> {
        let threads = check_threads(options.threads)?;
        if options.n_batch == 0 {
            return Err(TesseraError::invalid_argument("n_batch must be at least 1"));
        }
        let registry = crate::registry::registry();
        let device = DeviceChoice::parse(&options.device);
        let model = Arc::new(tessera_llm::Model::load(path, registry, &device, progress)?);
        let hp = model.hparams();
        let n_ctx = match options.n_ctx {
            Some(0) => return Err(TesseraError::invalid_argument("n_ctx must be at least 1")),
            Some(n) => n as usize,
            None => 4096.min(hp.n_ctx_train),
        };
        let ctx_opts = ContextOptions { n_ctx, n_batch: options.n_batch as usize, threads };
        let context = Context::new(model.clone(), registry, &ctx_opts)?;
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
        };
        log::info!("model {} loaded on {}", info.architecture, info.device);
        Ok(Model {
            info,
            cancel: context.cancel_flag(),
            model,
            context: Mutex::new(Some(context)),
            state: Mutex::new(State::default()),
            idle: Condvar::new(),
        })
    }

    fn enter(&self) -> FfiResult<Ticket<'_>> {
        let mut s = lock(&self.state);
        if s.closed {
            return Err(TesseraError::Closed { message: "the model is closed".into() });
        }
        s.in_flight += 1;
        Ok(Ticket(self))
    }

    /// Runs `f` on the context, one call at a time; `Closed` once the model is closed.
    fn with_context<T>(&self, f: impl FnOnce(&mut Context) -> FfiResult<T>) -> FfiResult<T> {
        let _ticket = self.enter()?;
        let mut slot = lock(&self.context);
        let ctx = slot
            .as_mut()
            .ok_or_else(|| TesseraError::Closed { message: "the model is closed".into() })?;
        f(ctx)
    }

    /// Generates with a Rust callback for the tokens (the protocol's events go through it).
    pub(crate) fn generate_with(
        &self,
        request: &GenerateRequest,
        on_token: &mut dyn FnMut(u32, &str) -> bool,
    ) -> FfiResult<GenerateResult> {
        let prompt = match (&request.prompt, &request.messages) {
            (Some(p), None) => Prompt::Text(p.clone()),
            (None, Some(m)) => Prompt::Messages(
                m.iter().map(|t| ChatMessage::new(t.role.clone(), t.content.clone())).collect(),
            ),
            _ => {
                return Err(TesseraError::invalid_argument(
                    "generate: give exactly one of prompt and messages",
                ))
            }
        };
        let sampling = SamplingParams {
            temperature: request.temperature,
            top_k: request.top_k,
            top_p: request.top_p,
            min_p: request.min_p,
            typical_p: request.typical_p,
            repeat_penalty: request.repeat_penalty,
            frequency_penalty: request.frequency_penalty,
            presence_penalty: request.presence_penalty,
            penalty_last_n: request.penalty_last_n,
            logit_bias: request.logit_bias.iter().map(|b| (b.token, b.bias)).collect(),
            seed: request.seed,
        };
        let options = GenerateOptions {
            sampling,
            max_tokens: request.max_tokens as usize,
            stop: request.stop.clone(),
            ignore_eos: request.ignore_eos,
            ..GenerateOptions::default()
        };
        self.with_context(|ctx| {
            let g = generate(ctx, &prompt, &options, &mut |e| on_token(e.token, &e.text))?;
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
                },
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
            let _t = self.enter()?;
            Ok(self.model.tokenizer().encode(&text, add_special, parse_special))
        })
    }

    /// The text of `tokens` (`special`: special tokens rendered as their text).
    pub fn detokenize(&self, tokens: Vec<u32>, special: bool) -> FfiResult<String> {
        guard("Model.detokenize", || {
            let _t = self.enter()?;
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
            let _t = self.enter()?;
            let m: Vec<ChatMessage> =
                messages.into_iter().map(|t| ChatMessage::new(t.role, t.content)).collect();
            let template = self.model.chat_template()?;
            Ok(template.render(&m, add_generation_prompt).map_err(LlmError::from)?)
        })
    }

    /// Generates a continuation, streaming each token to `listener`; blocks until it ends and
    /// returns the whole text with timings. Generations on one model run one at a time.
    pub fn generate(
        &self,
        request: GenerateRequest,
        listener: Option<Box<dyn TokenListener>>,
    ) -> FfiResult<GenerateResult> {
        guard("Model.generate", || {
            self.generate_with(&request, &mut |token, text| {
                listener.as_ref().is_none_or(|l| l.on_token(token, text.to_string()))
            })
        })
    }

    /// Stops the generation in progress (it returns with stop reason "cancelled").
    pub fn cancel(&self) {
        guard_or("Model.cancel", || (), || self.cancel.store(true, Ordering::Relaxed))
    }

    /// The L2-normalized embedding of each text (pooling "mean", "last", "first", or `None`
    /// for the model's own or mean).
    pub fn embed(&self, texts: Vec<String>, pooling: Option<String>) -> FfiResult<Vec<Vec<f32>>> {
        guard("Model.embed", || {
            self.with_context(|ctx| {
                let pooling = match &pooling {
                    Some(p) => Pooling::parse(p)?,
                    None => Pooling::for_model(ctx)?,
                };
                let mut out = Vec::with_capacity(texts.len());
                for text in &texts {
                    let tokens = ctx.model().tokenizer().encode(text, true, true);
                    if tokens.is_empty() {
                        return Err(TesseraError::invalid_argument("embed: a text has no tokens"));
                    }
                    out.push(embed(ctx, &tokens, pooling)?);
                }
                Ok(out)
            })
        })
    }

    /// Closes the model: stops and waits for the work in flight, then frees its memory;
    /// every later call returns `Closed`. Closing twice is fine. (Kotlin: `closeModel()`.)
    pub fn close(&self) {
        guard_or(
            "Model.close",
            || (),
            || {
                let mut s = lock(&self.state);
                s.closed = true;
                self.cancel.store(true, Ordering::Relaxed);
                while s.in_flight > 0 {
                    s = self.idle.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                drop(s);
                lock(&self.context).take();
            },
        )
    }

    /// Whether [`Model::close`] was called.
    pub fn is_closed(&self) -> bool {
        guard_or("Model.isClosed", || true, || lock(&self.state).closed)
    }
}
