//! Text generation: a prompt (text, tokens or chat messages) processed in batches, then one
//! token per step sampled with [`crate::sampling`], streamed to a callback as valid UTF-8 text,
//! until an end-of-generation token, a stop string (never shown), the token limit, a full
//! context (unless [`GenerateOptions::context_shift`] makes room) or a cancel.
//!
//! A prompt that starts with what the context already processed reuses that prefix from the KV
//! cache (the next chat turn only computes its new tokens).

use crate::chat::{ChatMessage, LazyConstraint};
use crate::constraint::{OutputConstraint, TokenConstraint};
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
    /// Keep going past end-of-generation tokens (they are then part of the text); a
    /// constrained generation still ends when its constraint is complete and the model ends.
    pub ignore_eos: bool,
    /// What the output must match (JSON Schema, grammar, regex), enforced on every token.
    pub constraint: Option<OutputConstraint>,
    /// Report the `n_probs` most likely candidates of every step with their probabilities
    /// after the sampler chain ([`TokenEvent::probs`]); 0 reports none.
    pub n_probs: usize,
    /// A constraint that starts where one of its triggers appears in the output (a tool
    /// call's opener: llama.cpp's lazy grammar); compiled before the first token.
    pub lazy_constraint: Option<LazyConstraint>,
    /// Write the text of control tokens (`<|python_tag|>`, `[TOOL_CALLS]`, ...) into the
    /// output rather than nothing, for the tool-call parsers; end-of-generation tokens still
    /// end the output.
    pub special_text: bool,
    /// At most this many tokens of reasoning (`<think>` ... `</think>`): at the limit the
    /// closing tag is written for the model and the answer follows.
    pub thinking_budget: Option<ThinkingBudget>,
    /// When the context is full, discard the oldest half of what follows the kept prefix and
    /// go on (llama.cpp's context shift, [`Context::shift`]); `None` ends the generation with
    /// [`StopReason::ContextFull`]. Refused ([`LlmError::ContextShiftUnsupported`]) for a
    /// model with recurrent layers.
    pub context_shift: Option<ContextShift>,
}

/// How a generation shifts a full context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextShift {
    /// The tokens at the start that a shift never discards.
    pub n_keep: KeepTokens,
}

/// The tokens a context shift keeps at the start of the context (llama.cpp server's
/// `n_keep`); the model's BOS token, when the context starts with it, is kept besides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepTokens {
    /// The first `n` tokens after the BOS token (llama.cpp's default is 0: the BOS alone);
    /// with the BOS at most `n_ctx - 4`, so that a shift frees room.
    Tokens(usize),
    /// The whole prompt of the generation (llama.cpp's `n_keep = -1`), at most `n_ctx - 4`
    /// tokens of it.
    Prompt,
}

impl Default for KeepTokens {
    fn default() -> KeepTokens {
        KeepTokens::Tokens(0)
    }
}

/// Most positions a shift keeps in a context of `n_ctx` (llama.cpp's `n_ctx - 4`): at least
/// two positions after them are discarded by a shift of a full context.
fn keep_limit(n_ctx: usize) -> usize {
    n_ctx.saturating_sub(4)
}

impl ContextShift {
    /// The positions kept in a context of `n_ctx` whose prompt is `prompt` (starting with
    /// `bos` or not); an error when an explicit count exceeds [`keep_limit`].
    fn kept(&self, prompt: &[u32], bos: Option<u32>, n_ctx: usize) -> Result<usize> {
        let with_bos = usize::from(bos.is_some() && prompt.first() == bos.as_ref());
        let limit = keep_limit(n_ctx);
        match self.n_keep {
            KeepTokens::Tokens(n) => {
                let kept = n.saturating_add(with_bos);
                if kept > limit {
                    return Err(LlmError::InvalidArgument(format!(
                        "nKeep {n} (with the BOS token {kept}) must be at most n_ctx - 4 = \
                         {limit}, so that a context shift frees room"
                    )));
                }
                Ok(kept)
            }
            KeepTokens::Prompt => Ok(prompt.len().min(limit)),
        }
    }
}

/// A limit on a reasoning model's thinking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkingBudget {
    /// Tokens of reasoning allowed.
    pub tokens: usize,
    /// The prompt already opened `<think>` (DeepSeek-R1's generation prompt does).
    pub starts_inside: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            sampling: SamplingParams::default(),
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eos: false,
            constraint: None,
            n_probs: 0,
            lazy_constraint: None,
            special_text: false,
            thinking_budget: None,
            context_shift: None,
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
    /// Milliseconds spent computing the output constraint's masks (part of `predicted_ms`).
    pub constraint_ms: f64,
    /// Masks computed (one per generated token of a constrained generation).
    pub constraint_masks: usize,
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
    /// With [`GenerateOptions::n_probs`], the most likely candidates of this step after the
    /// sampler chain, most likely first (empty otherwise, and for the final flush).
    pub probs: Vec<TokenProb>,
}

/// A candidate token of one step and its probability after the sampler chain (llama.rn's
/// `completion_probabilities` entries).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenProb {
    /// The token id.
    pub token: u32,
    /// Its text (a partial UTF-8 character shown as U+FFFD).
    pub text: String,
    /// Its probability in the distribution the token was drawn from (1 for greedy decoding).
    pub prob: f32,
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
    // Compiled before any token: a bad schema or grammar fails here.
    let mut constraint = match &options.constraint {
        Some(c) => Some(TokenConstraint::new(&*model.constraint_vocab()?, c)?),
        None => None,
    };
    let mut thinking = options.thinking_budget.as_ref().map(|b| Thinking::new(b, tok));
    let mut lazy = match &options.lazy_constraint {
        Some(l) => Some(LazyStart::new(
            l,
            TokenConstraint::new(&*model.constraint_vocab()?, &l.constraint)?,
        )),
        None => None,
    };
    // Refused before any work: a model whose memory cannot shift, a prefix leaving no room.
    let n_kept = match &options.context_shift {
        Some(_) if !ctx.can_shift() => {
            return Err(LlmError::ContextShiftUnsupported {
                arch: model.hparams().arch.name().into(),
            })
        }
        Some(shift) => Some(shift.kept(&tokens, tok.bos(), ctx.n_ctx())?),
        None => None,
    };
    let mut timings = Timings::default();

    let t0 = Instant::now();
    let cached = ctx.reuse_prefix(&tokens);
    let rest = &tokens[cached..];
    // One output for the whole generation: each step's logits land in the same buffer. A
    // cancel while the prompt is processed ends the generation as one between tokens does:
    // with stop reason `Cancelled` and no token.
    let decoded = ctx.decode(rest, Rows::Last);
    timings.prompt_tokens = rest.len();
    timings.cached_tokens = cached;
    timings.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut out = match decoded {
        Ok(out) => out,
        Err(LlmError::Cancelled) => {
            let stop_reason = StopReason::Cancelled;
            return Ok(Generation {
                text: String::new(),
                tokens: Vec::new(),
                prompt_tokens: tokens,
                stop_reason,
                timings,
            });
        }
        Err(e) => return Err(e),
    };
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
        let forced = thinking.as_mut().and_then(Thinking::forced);
        let token = match (forced, constraint.as_mut()) {
            (Some(t), _) => t,
            (None, Some(c)) => {
                let allowed = c.compute_mask()?;
                sampler.sample_masked(out.last(), allowed)?
            }
            (None, None) => sampler.sample(out.last())?,
        };
        sampler.accept(token);
        if tok.is_eog(token) && (!options.ignore_eos || constraint.is_some()) {
            break StopReason::EndOfGeneration;
        }
        if let Some(c) = constraint.as_mut() {
            c.commit(token)?;
        }
        // A token written for the model (the thinking budget's closing tag) was not drawn.
        let probs =
            if forced.is_some() { Vec::new() } else { top_probs(&sampler, tok, options.n_probs)? };
        generated.push(token);
        let piece = tok.token_to_piece(token, options.ignore_eos || options.special_text)?;
        if let Some(t) = thinking.as_mut() {
            t.push(&piece);
        }
        if let Some(rest) = lazy.as_mut().and_then(|start| start.push(&piece)) {
            if let Some(mut c) = lazy.take().map(|start| start.constraint) {
                // The output after the trigger, if the trigger's token carried any.
                for t in tok.encode(&String::from_utf8_lossy(&rest), false, false) {
                    c.compute_mask()?;
                    c.commit(t)?;
                }
                constraint = Some(c);
            }
        }
        let step = stops.push(&utf8.push(&piece));
        text.push_str(&step.emit);
        if !on_token(&TokenEvent { token, text: step.emit, probs }) {
            break StopReason::Cancelled;
        }
        if step.stopped {
            break StopReason::StopString;
        }
        if generated.len() >= options.max_tokens {
            break StopReason::MaxTokens;
        }
        if ctx.n_past() >= ctx.n_ctx() {
            let Some(keep) = n_kept else { break StopReason::ContextFull };
            // llama.cpp's: the oldest half of what follows the kept prefix.
            let left = ctx.n_past() - keep;
            match ctx.shift(keep, (left / 2).max(1)) {
                Ok(()) => {}
                Err(LlmError::Cancelled) => break StopReason::Cancelled,
                Err(e) => return Err(e),
            }
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
            let token = *generated.last().unwrap_or(&0);
            on_token(&TokenEvent { token, text: rest, probs: Vec::new() });
        }
    }
    timings.predicted_tokens = generated.len();
    timings.predicted_ms = t1.elapsed().as_secs_f64() * 1e3;
    if let Some(c) = &constraint {
        timings.constraint_ms = c.mask_ms();
        timings.constraint_masks = c.masks_computed() as usize;
    }
    Ok(Generation { text, tokens: generated, prompt_tokens: tokens, stop_reason, timings })
}

/// The `n` most likely candidates of the sampler's last step, most likely first.
fn top_probs(
    sampler: &Sampler,
    tok: &crate::tokenizer::Tokenizer,
    n: usize,
) -> Result<Vec<TokenProb>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut cands: Vec<_> = sampler.last_candidates().to_vec();
    cands.sort_by(|a, b| b.p.total_cmp(&a.p).then(a.id.cmp(&b.id)));
    cands.truncate(n);
    cands
        .into_iter()
        .map(|c| {
            let piece = tok.token_to_piece(c.id, false)?;
            Ok(TokenProb {
                token: c.id,
                text: String::from_utf8_lossy(&piece).into_owned(),
                prob: c.p,
            })
        })
        .collect()
}

/// A constraint waiting for one of its triggers in the output.
struct LazyStart {
    triggers: Vec<Vec<u8>>,
    longest: usize,
    /// The output so far (only its tail is searched).
    seen: Vec<u8>,
    constraint: TokenConstraint,
}

impl LazyStart {
    fn new(spec: &LazyConstraint, constraint: TokenConstraint) -> LazyStart {
        let triggers: Vec<Vec<u8>> =
            spec.triggers.iter().filter(|t| !t.is_empty()).map(|t| t.as_bytes().to_vec()).collect();
        let longest = triggers.iter().map(Vec::len).max().unwrap_or(0);
        LazyStart { triggers, longest, seen: Vec::new(), constraint }
    }

    /// Adds a token's bytes; when a trigger has appeared, the bytes after it.
    fn push(&mut self, piece: &[u8]) -> Option<Vec<u8>> {
        let from = self.seen.len().saturating_sub(self.longest);
        self.seen.extend_from_slice(piece);
        let tail = &self.seen[from..];
        let end = self
            .triggers
            .iter()
            .filter_map(|t| {
                tail.windows(t.len()).position(|w| w == t.as_slice()).map(|i| i + t.len())
            })
            .min()?;
        Some(tail[end..].to_vec())
    }
}

/// The state of a thinking budget: whether the output is inside `<think>`, the tokens spent
/// there, and the closing tokens still to write once the budget is spent.
struct Thinking {
    budget: usize,
    inside: bool,
    closed: bool,
    spent: usize,
    seen: String,
    close: std::collections::VecDeque<u32>,
    close_tokens: Vec<u32>,
}

impl Thinking {
    fn new(b: &ThinkingBudget, tok: &crate::tokenizer::Tokenizer) -> Thinking {
        Thinking {
            budget: b.tokens,
            inside: b.starts_inside,
            closed: false,
            spent: 0,
            seen: String::new(),
            close: Default::default(),
            close_tokens: tok.encode("\n</think>\n\n", false, true),
        }
    }

    /// The next token to write instead of sampling, once the budget is spent.
    fn forced(&mut self) -> Option<u32> {
        if self.inside && !self.closed && self.spent >= self.budget && self.close.is_empty() {
            self.close.extend(self.close_tokens.iter().copied());
            self.closed = true;
        }
        self.close.pop_front()
    }

    /// Follows the output's text.
    fn push(&mut self, piece: &[u8]) {
        if self.closed && self.close.is_empty() {
            self.inside = false;
        }
        if !self.inside && !self.closed {
            self.seen.push_str(&String::from_utf8_lossy(piece));
            if self.seen.contains("<think>") {
                self.inside = true;
                self.seen.clear();
            }
            return;
        }
        if self.inside && !self.closed {
            self.spent += 1;
            self.seen.push_str(&String::from_utf8_lossy(piece));
            if self.seen.contains("</think>") {
                self.inside = false;
                self.closed = true;
            }
            let keep = self.seen.len().saturating_sub(16);
            let cut =
                (keep..=self.seen.len()).find(|&i| self.seen.is_char_boundary(i)).unwrap_or(0);
            self.seen.drain(..cut);
        }
    }
}
