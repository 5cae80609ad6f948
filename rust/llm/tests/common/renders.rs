//! Chat templates rendered by Python's jinja2 the way transformers does (recorded by
//! `fixtures/chat/record_*.py` into `hf_renders.json` / `hf_tool_renders.json`).

use serde::Deserialize;
use tessera_llm::chat::ChatMessage;

/// One render: a template, its inputs and what jinja2 gave.
#[derive(Deserialize)]
pub struct Record {
    /// The template's short name.
    pub template: String,
    /// Its file under `fixtures/chat/templates` (tool renders only).
    #[serde(default)]
    pub file: String,
    /// What the render exercises.
    pub case: String,
    /// The template's `bos_token`.
    pub bos_token: String,
    /// The template's `eos_token`.
    pub eos_token: String,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// `add_generation_prompt`.
    pub add_generation_prompt: bool,
    /// Extra variables, parsed as a template value, which keeps the keys' order as Python's
    /// dicts do.
    pub extra: minijinja::Value,
    /// The text jinja2 rendered, if it rendered.
    pub expected: Option<String>,
    /// The exception jinja2 raised, if it raised one.
    pub error: Option<RecordedError>,
}

/// An exception raised by a template.
#[derive(Deserialize)]
pub struct RecordedError {
    /// The exception's class.
    pub kind: String,
    /// Its message.
    pub message: String,
}

/// A recording: the time `strftime_now` returned, and the renders.
#[derive(Deserialize)]
pub struct Recording {
    /// Seconds since the epoch that `strftime_now` was fixed at.
    pub fixed_now: i64,
    /// The renders.
    pub records: Vec<Record>,
}
