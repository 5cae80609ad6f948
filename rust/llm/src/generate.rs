//! Text generation: a prompt (text, tokens or chat messages) processed in batches, then one
//! token per step sampled with [`crate::sampling`], streamed to a callback as valid UTF-8 text,
//! until an end-of-generation token, a stop string (never shown), the token limit, a full
//! context or a cancel.
//!
//! A prompt that starts with what the context already processed reuses that prefix from the KV
//! cache (the next chat turn only computes its new tokens).

use crate::chat::ChatMessage;
use crate::context::{Context, Rows};
use crate::error::{LlmError, Result};
use crate::sampling::{Sampler, SamplingParams};
use crate::stop::StopMatcher;
use crate::tokenizer::StreamDecoder;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What to continue.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Text, tokenized with the model's BOS rule (special tokens in it are parsed).
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
    /// A conversation, rendered with the model's chat template and a generation prompt.
    Messages(Vec<ChatMessage>),
}

/// How to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// The sampling chain (greedy with [`SamplingParams::greedy`]).
    pub sampling: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Strings that end the generation where they appear (not included in the text).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (they are then part of the text).
    pub ignore_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            sampling: SamplingParams::default(),
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (EOS, end of turn).
    EndOfGeneration,
    /// A stop string appeared.
    StopString,
    /// `max_tokens` tokens were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The caller cancelled (the callback returned `false`, or the context's cancel flag).
    Cancelled,
}

impl StopReason {
    /// A short name: "eog", "stop", "length", "context", "cancelled".
    pub fn name(self) -> &'static str {
        match self {
            StopReason::EndOfGeneration => "eog",
            StopReason::StopString => "stop",
            StopReason::MaxTokens => "length",
            StopReason::ContextFull => "context",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// Time spent, as llama.rn's `timings`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens computed (those reused from the cache are not counted).
    pub prompt_tokens: usize,
    /// Milliseconds spent on them.
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_tokens: usize,
    /// Milliseconds spent generating them (compute and sampling).
    pub predicted_ms: f64,
    /// Prompt tokens reused from the KV cache.
    pub cached_tokens: usize,
}

impl Timings {
    /// Prompt tokens per second.
    pub fn prompt_per_second(&self) -> f64 {
        per_second(self.prompt_tokens, self.prompt_ms)
    }

    /// Generated tokens per second.
    pub fn predicted_per_second(&self) -> f64 {
        per_second(self.predicted_tokens, self.predicted_ms)
    }
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

/// One generated token, as the callback sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// The token id.
    pub token: u32,
    /// The text this token completes: empty while a multi-byte character or a possible stop
    /// string is held back, then everything that became final.
    pub text: String,
}

/// The result of a generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated text (stop string excluded).
    pub text: String,
    /// The generated tokens (the end-of-generation token excluded).
    pub tokens: Vec<u32>,
    /// The prompt's tokens.
    pub prompt_tokens: Vec<u32>,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Time spent.
    pub timings: Timings,
}

/// The tokens of `prompt` for `ctx`'s model.
pub fn prompt_tokens(ctx: &Context, prompt: &Prompt) -> Result<Vec<u32>> {
    let model = ctx.model();
    let tok = model.tokenizer();
    let tokens = match prompt {
        Prompt::Text(t) => tok.encode(t, true, true),
        Prompt::Tokens(t) => t.clone(),
        Prompt::Messages(m) => {
            let template = model.chat_template()?;
            let text = template.render(m, true)?;
            // A template that writes BOS itself must not get a second one.
            tok.encode(&text, !template.renders_bos(), true)
        }
    };
    if tokens.is_empty() {
        return Err(LlmError::EmptyInput("the prompt has no tokens".into()));
    }
    Ok(tokens)
}

/// Generates a continuation of `prompt` in `ctx`, calling `on_token` for every token; it
/// returns `false` to stop (the generation then ends with [`StopReason::Cancelled`]).
pub fn generate(
    ctx: &mut Context,
    prompt: &Prompt,
    options: &GenerateOptions,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> Result<Generation> {
    ctx.reset_cancel();
    let tokens = prompt_tokens(ctx, prompt)?;
    let model = ctx.model().clone();
    let tok = model.tokenizer();
    let n_vocab = model.hparams().n_vocab;
    options.sampling.validate(n_vocab)?;
    let mut sampler = Sampler::new(options.sampling.clone(), n_vocab)?;
    let mut stops = StopMatcher::new(&options.stop)?;
    let mut timings = Timings::default();

    let t0 = Instant::now();
    let cached = ctx.reuse_prefix(&tokens);
    let rest = &tokens[cached..];
    // One output for the whole generation: each step's logits land in the same buffer.
    let mut out = ctx.decode(rest, Rows::Last)?;
    timings.prompt_tokens = rest.len();
    timings.cached_tokens = cached;
    timings.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    sampler.accept_all(&tokens);

    let t1 = Instant::now();
    let mut text = String::new();
    let mut generated = Vec::new();
    let mut utf8 = StreamDecoder::new();
    let cancel = ctx.cancel_flag();
    let stop_reason = loop {
        if generated.len() >= options.max_tokens {
            break StopReason::MaxTokens;
        }
        if cancel.load(Ordering::Relaxed) {
            break StopReason::Cancelled;
        }
        let token = sampler.sample(out.last())?;
        sampler.accept(token);
        if tok.is_eog(token) && !options.ignore_eos {
            break StopReason::EndOfGeneration;
        }
        generated.push(token);
        let piece = tok.token_to_piece(token, options.ignore_eos)?;
        let step = stops.push(&utf8.push(&piece));
        text.push_str(&step.emit);
        if !on_token(&TokenEvent { token, text: step.emit }) {
            break StopReason::Cancelled;
        }
        if step.stopped {
            break StopReason::StopString;
        }
        if generated.len() >= options.max_tokens {
            break StopReason::MaxTokens;
        }
        if ctx.n_past() >= ctx.n_ctx() {
            break StopReason::ContextFull;
        }
        match ctx.decode_into(&[token], Rows::Last, &mut out) {
            Ok(()) => {}
            Err(LlmError::Cancelled) => break StopReason::Cancelled,
            Err(e) => return Err(e),
        }
    };
    if stop_reason != StopReason::StopString {
        let tail = stops.push(&utf8.flush());
        let mut rest = tail.emit;
        if !tail.stopped {
            rest.push_str(&stops.finish());
        }
        if !rest.is_empty() {
            text.push_str(&rest);
            on_token(&TokenEvent { token: *generated.last().unwrap_or(&0), text: rest });
        }
    }
    timings.predicted_tokens = generated.len();
    timings.predicted_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(Generation { text, tokens: generated, prompt_tokens: tokens, stop_reason, timings })
}
