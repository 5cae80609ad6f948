//! Constrained generation: output that always matches a JSON Schema, any JSON object, a GBNF
//! grammar, a Lark grammar or a regular expression, enforced token by token.
//!
//! The engine is llguidance (what llama.cpp, vLLM and SGLang use): a token trie of the model's
//! vocabulary ([`ConstraintVocab`], built once per model) and, per generation, a matcher
//! ([`TokenConstraint`]) that gives the set of tokens allowed next (the mask, applied by
//! [`Sampler::sample_masked`](crate::sampling::Sampler::sample_masked) before the sampler
//! chain) and takes the token chosen (commit). A schema or grammar is compiled before any
//! token is generated; what llguidance cannot compile (a malformed grammar, a schema keyword it
//! does not implement, an unsatisfiable schema) is a [`ConstraintError`] naming the problem,
//! which reaches callers as [`LlmError::InvalidArgument`](crate::LlmError::InvalidArgument).
//!
//! ```no_run
//! # fn main() -> tessera_llm::Result<()> {
//! # let model: std::sync::Arc<tessera_llm::Model> = unimplemented!();
//! use tessera_llm::constraint::{OutputConstraint, TokenConstraint};
//! let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}});
//! let vocab = model.constraint_vocab()?;
//! let mut c = TokenConstraint::new(&vocab, &OutputConstraint::JsonSchema(schema))?;
//! let allowed: &[u32] = c.compute_mask()?; // bits over token ids
//! # Ok(()) }
//! ```

mod gbnf;

pub use gbnf::gbnf_to_lark;

use crate::tokenizer::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::earley::SlicedBiasComputer;
use llguidance::toktrie::{
    InferenceCapabilities, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv,
};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputConstraint {
    /// JSON valid against this JSON Schema (draft 2020-12 keywords llguidance implements:
    /// types, `properties` / `required` / `additionalProperties`, `items` / `prefixItems` /
    /// `minItems` / `maxItems`, `enum`, `const`, `anyOf` / `oneOf` / `allOf`, `pattern`,
    /// `minLength` / `maxLength`, `minimum` / `maximum` / exclusive bounds, `format`s, local
    /// `$ref`s). Written compactly: `", "` between items, `": "` after keys, no other space.
    JsonSchema(Value),
    /// Any JSON object (`{"type": "object"}`).
    JsonObject,
    /// A grammar in llama.cpp's GBNF (`root` is the start rule).
    Gbnf(String),
    /// A grammar in llguidance's Lark syntax (`start` is the start rule).
    Lark(String),
    /// Text matching this regular expression (Rust `regex` syntax) as a whole.
    Regex(String),
}

impl OutputConstraint {
    /// A short name of the kind: "json_schema", "json_object", "gbnf", "lark", "regex".
    pub fn kind(&self) -> &'static str {
        match self {
            OutputConstraint::JsonSchema(_) => "json_schema",
            OutputConstraint::JsonObject => "json_object",
            OutputConstraint::Gbnf(_) => "gbnf",
            OutputConstraint::Lark(_) => "lark",
            OutputConstraint::Regex(_) => "regex",
        }
    }

    /// The llguidance grammar of this constraint, or why there is none.
    fn grammar(&self) -> Result<TopLevelGrammar, ConstraintError> {
        Ok(match self {
            OutputConstraint::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(ConstraintError::Schema(
                        "a JSON Schema must be an object or a boolean".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(with_compact_layout(schema.clone()))
            }
            OutputConstraint::JsonObject => TopLevelGrammar::from_json_schema(with_compact_layout(
                serde_json::json!({"type": "object"}),
            )),
            OutputConstraint::Gbnf(src) => TopLevelGrammar::from_lark(gbnf_to_lark(src)?),
            OutputConstraint::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
            OutputConstraint::Regex(rx) => {
                // llguidance writes the regex into a Lark `/.../` literal; a parse here gives a
                // precise message first.
                if let Err(e) = regex_syntax::Parser::new().parse(rx) {
                    return Err(ConstraintError::Regex(e.to_string()));
                }
                TopLevelGrammar::from_regex(rx)
            }
        })
    }
}

/// The JSON layout llguidance is told to write unless the schema says otherwise
/// (`x-guidance`): no free whitespace, which a small model at a high temperature could
/// otherwise repeat until the token limit.
fn with_compact_layout(mut schema: Value) -> Value {
    if let Some(map) = schema.as_object_mut() {
        map.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// A constraint that cannot be compiled or followed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConstraintError {
    /// The JSON Schema is malformed, uses a feature the engine does not implement, or no
    /// value satisfies it.
    #[error("JSON schema: {0}")]
    Schema(String),
    /// The grammar (GBNF or Lark) does not parse or compile.
    #[error("grammar: {0}")]
    Grammar(String),
    /// The regular expression does not parse.
    #[error("regex: {0}")]
    Regex(String),
    /// The vocabulary cannot be used for constraints.
    #[error("constraint vocabulary: {0}")]
    Vocab(String),
    /// The engine refused a token or failed while following the constraint.
    #[error("output constraint: {0}")]
    Engine(String),
}

impl From<ConstraintError> for crate::LlmError {
    fn from(e: ConstraintError) -> Self {
        crate::LlmError::InvalidArgument(e.to_string())
    }
}

/// The model's vocabulary as the constraint engine needs it: every token's bytes in a trie
/// (control tokens marked as special, so no grammar writes them as text), the end-of-generation
/// tokens as the ones a finished grammar allows, and the compiled-grammar factory. Built once
/// per model ([`Model::constraint_vocab`](crate::Model::constraint_vocab)).
pub struct ConstraintVocab {
    factory: ParserFactory,
    n_vocab: usize,
    /// The tokens whose text starts with an ASCII digit.
    digit_start: SimpleVob,
}

impl std::fmt::Debug for ConstraintVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintVocab").field("n_vocab", &self.n_vocab).finish()
    }
}

/// llguidance's view of a vocabulary: the trie, and its greedy tokenization for the rare text
/// it tokenizes itself (not canonical, so it never forces tokens from it).
struct TrieEnv {
    trie: TokTrie,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

impl ConstraintVocab {
    /// The trie and grammar factory of `tok`'s vocabulary.
    pub fn new(tok: &Tokenizer) -> Result<ConstraintVocab, ConstraintError> {
        let n = tok.n_vocab();
        let vocab_size = u32::try_from(n)
            .map_err(|_| ConstraintError::Vocab(format!("{n} tokens do not fit u32 ids")))?;
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(n);
        for id in 0..vocab_size {
            let piece =
                tok.token_to_piece(id, true).map_err(|e| ConstraintError::Vocab(e.to_string()))?;
            if tok.is_control(id) {
                // llguidance's special-token marker: never text, reachable only by name.
                let mut w = Vec::with_capacity(piece.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(&piece);
                words.push(w);
            } else {
                words.push(piece);
            }
        }
        let eog = tok.eog_tokens();
        let eos = tok.eos().or(tok.eot()).or_else(|| eog.first().copied()).ok_or_else(|| {
            ConstraintError::Vocab("the vocabulary has no end-of-generation token".into())
        })?;
        let info = TokRxInfo {
            vocab_size,
            tok_eos: eos,
            tok_bos: tok.bos(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: tok.eot(),
        };
        let mut digit_start = SimpleVob::alloc(n);
        for (id, w) in words.iter().enumerate() {
            if w.first().is_some_and(u8::is_ascii_digit) {
                digit_start.allow_token(id as u32);
            }
        }
        let mut ends: Vec<u32> = vec![eos];
        ends.extend(eog.iter().copied().filter(|&t| t != eos));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&ends);
        let env: TokEnv = Arc::new(TrieEnv { trie });
        let mut factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| ConstraintError::Vocab(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits { verbose_errors: false, ..ParserLimits::default() };
        Ok(ConstraintVocab { factory, n_vocab: n, digit_start })
    }

    /// The number of tokens.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
}

/// One generation's constraint: the matcher's state, the last mask and the time spent
/// computing masks.
pub struct TokenConstraint {
    matcher: Matcher,
    mask: SimpleVob,
    masks: u64,
    mask_ns: u64,
    /// For JSON: the digit-start tokens, banned once a run of digits reaches
    /// [`MAX_JSON_DIGITS`] (when something else is allowed).
    digit_cap: Option<SimpleVob>,
    /// ASCII digits at the end of the output so far.
    digit_run: usize,
}

/// The longest run of digits a JSON constraint lets the model write while anything else is
/// allowed: a number's integer part, fraction or exponent is cut at 16 digits, as llama.cpp's
/// JSON grammars cut them (a small model sampled at a high temperature can otherwise write
/// digits until the token limit, and the JSON never closes).
pub const MAX_JSON_DIGITS: usize = 16;

impl std::fmt::Debug for TokenConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConstraint").field("masks", &self.masks).finish()
    }
}

impl TokenConstraint {
    /// Compiles `constraint` for `vocab`: every error in the schema, grammar or expression is
    /// reported here, before any token.
    pub fn new(
        vocab: &ConstraintVocab,
        constraint: &OutputConstraint,
    ) -> Result<TokenConstraint, ConstraintError> {
        let grammar = constraint.grammar()?;
        let parser = vocab.factory.create_parser(grammar).map_err(|e| {
            let message = clean_message(&e.to_string());
            match constraint {
                OutputConstraint::JsonSchema(_) | OutputConstraint::JsonObject => {
                    ConstraintError::Schema(message)
                }
                OutputConstraint::Regex(_) => ConstraintError::Regex(message),
                OutputConstraint::Gbnf(_) | OutputConstraint::Lark(_) => {
                    ConstraintError::Grammar(message)
                }
            }
        })?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError::Grammar(clean_message(&e)));
        }
        // Warnings (e.g. keywords accepted but not enforced) are kept in the log.
        for w in matcher.grammar_warnings() {
            log::warn!("output constraint: {w}");
        }
        let digit_cap =
            matches!(constraint, OutputConstraint::JsonSchema(_) | OutputConstraint::JsonObject)
                .then(|| vocab.digit_start.clone());
        Ok(TokenConstraint {
            matcher,
            mask: SimpleVob::new(),
            masks: 0,
            mask_ns: 0,
            digit_cap,
            digit_run: 0,
        })
    }

    /// The tokens allowed next, as a bit set over token ids (bit `i % 32` of word `i / 32`).
    /// A finished constraint allows only the end-of-generation tokens.
    pub fn compute_mask(&mut self) -> Result<&[u32], ConstraintError> {
        let t = Instant::now();
        self.mask = self.matcher.compute_mask_or_eos().map_err(engine_error)?;
        if let Some(digits) = self.digit_cap.as_ref().filter(|_| self.digit_run >= MAX_JSON_DIGITS)
        {
            let mut capped = self.mask.clone();
            capped.sub(digits);
            if !capped.is_zero() {
                self.mask = capped;
            }
        }
        self.mask_ns += t.elapsed().as_nanos() as u64;
        self.masks += 1;
        Ok(self.mask.as_slice())
    }

    /// Whether `token` is in the last mask computed.
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.mask.len() && self.mask.is_allowed(token)
    }

    /// Advances past `token` (which the last mask must allow).
    pub fn commit(&mut self, token: u32) -> Result<(), ConstraintError> {
        self.matcher.consume_token(token).map_err(engine_error)?;
        if self.digit_cap.is_some() {
            let env = self.matcher.tok_env().map_err(engine_error)?;
            for &b in env.tok_trie().token(token) {
                self.digit_run = if b.is_ascii_digit() { self.digit_run + 1 } else { 0 };
            }
        }
        Ok(())
    }

    /// Whether the output so far is complete (an end-of-generation token is allowed now).
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// Whether the constraint allows nothing more than ending.
    pub fn is_stopped(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Masks computed so far.
    pub fn masks_computed(&self) -> u64 {
        self.masks
    }

    /// Total time spent computing masks, in milliseconds.
    pub fn mask_ms(&self) -> f64 {
        self.mask_ns as f64 / 1e6
    }
}

fn engine_error(e: impl std::fmt::Display) -> ConstraintError {
    ConstraintError::Engine(clean_message(&e.to_string()))
}

/// llguidance's messages without trailing blank lines.
fn clean_message(m: &str) -> String {
    m.trim_end().to_string()
}
