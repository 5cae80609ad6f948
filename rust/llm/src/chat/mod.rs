//! Chat templates: a GGUF's `tokenizer.chat_template` (Jinja) rendered with minijinja the way
//! Hugging Face transformers renders it, and a built-in Gemma template for files without one.
//!
//! The environment mirrors transformers' `apply_chat_template`: `trim_blocks` and
//! `lstrip_blocks` on, loop controls, the variables `messages`, `add_generation_prompt`,
//! `bos_token`, `eos_token`, `tools` and `documents` (none unless given), the functions
//! `raise_exception(message)` and `strftime_now(format)` (local time), `tojson` as Python's
//! `json.dumps`, and Python's string, list and dict methods (`strip`, `split`, `startswith`,
//! `items`, ...) through minijinja-contrib's pycompat.
//!
//! ```
//! use tessera_llm::chat::{ChatMessage, ChatTemplate};
//! let t = ChatTemplate::gemma();
//! let text = t.render(&[ChatMessage::new("user", "Hi")], true).unwrap();
//! assert_eq!(text, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
//! assert!(t.renders_bos());
//! ```

mod output;
mod pyjson;
mod request;
mod tools;

pub use output::{
    parse_output, ChunkKind, OutputChunk, OutputOptions, OutputParser, ParsedOutput,
    ReasoningFormat,
};
pub use request::{ChatRequest, LazyConstraint, PreparedChat, ToolChoice};
pub use tools::{call_schema, generic_schema, tool_name, ToolCall, ToolFormat};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{merge_maps, Serde, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// The template name inside the environment.
const NAME: &str = "chat_template";

/// The work one render may do (minijinja's fuel: one per instruction, one per 64 bytes of
/// data produced): a template from a file cannot hang or exhaust memory (about 256 MB at
/// most). Rendering thousands of messages with the official templates takes a few percent.
pub const FUEL: u64 = 4_000_000;

/// The built-in Gemma template's source.
pub const GEMMA_TEMPLATE: &str = include_str!("gemma.jinja");

/// One message of a conversation, as templates read it (OpenAI's / transformers' shape; the
/// optional fields are absent from the template's view when empty).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, or whatever other role the template knows (`tool`, ...).
    pub role: String,
    /// The text of the message (`null` in JSON reads as empty).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// An assistant message's tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` message: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant message's reasoning (templates such as Qwen 3's render it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

impl ChatMessage {
    /// A message from a role and a text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into(), ..ChatMessage::default() }
    }
}

/// A chat template that cannot be compiled or rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatError {
    /// The template does not parse.
    #[error("the chat template does not parse: {message}, at line {line}: {source_line:?}")]
    Syntax {
        /// The 1-based line of the error in the template.
        line: usize,
        /// The text of that line.
        source_line: String,
        /// What is wrong.
        message: String,
    },
    /// The template called `raise_exception(message)`, e.g. for a role it does not support.
    #[error("the chat template refused the messages: {message}")]
    Raised {
        /// The template's message.
        message: String,
    },
    /// Rendering failed otherwise (an unknown filter, function or method, a type error, ...).
    #[error("the chat template failed to render{}: {message}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Render {
        /// The 1-based template line, when known.
        line: Option<usize>,
        /// The cause.
        message: String,
    },
    /// The extra variables were not a map.
    #[error("invalid chat template context: {message}")]
    Context {
        /// What is wrong.
        message: String,
    },
}

/// The error `raise_exception` returns, found again in the render error's source chain.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// `strftime_now` reads the local clock unless a fixed time (Unix seconds, UTC) is set.
const CLOCK_LOCAL: i64 = i64::MIN;

/// A compiled chat template with the special tokens it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    renders_bos: bool,
    fixed_now: Arc<AtomicI64>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("renders_bos", &self.renders_bos)
            .field("source_len", &self.source.len())
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source` (a Jinja chat template) to render with these BOS and EOS texts.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        let fixed_now = Arc::new(AtomicI64::new(CLOCK_LOCAL));
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatError::Render { line: None, message: e.to_string() })?;
        env.set_syntax(syntax);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message.clone())
                .with_source(Raised(message)))
        });
        let clock = fixed_now.clone();
        env.add_function("strftime_now", move |format: String| -> Result<String, Error> {
            strftime_now(&format, clock.load(Ordering::Relaxed))
        });
        env.add_filter("tojson", pyjson::tojson);
        // Python's notion: `none` (and numbers, booleans) are not iterable (minijinja's own test
        // says they are, and Qwen3-Coder's template then takes `none | length`).
        env.add_test("iterable", |v: Value| {
            matches!(
                v.kind(),
                ValueKind::Seq | ValueKind::Map | ValueKind::String | ValueKind::Iterable
            )
        });
        env.add_template_owned(NAME.to_string(), source.to_string())
            .map_err(|e| syntax_error(&e, source))?;
        let mut template = ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            renders_bos: false,
            fixed_now,
        };
        template.renders_bos = template.probe_renders_bos();
        Ok(template)
    }

    /// The built-in Gemma template ([`GEMMA_TEMPLATE`]) with Gemma's `<bos>` and `<eos>`.
    pub fn gemma() -> ChatTemplate {
        ChatTemplate::new(GEMMA_TEMPLATE, "<bos>", "<eos>")
            .expect("the built-in Gemma template compiles (tests/chat.rs renders it)")
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The BOS text the template is rendered with.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The EOS text the template is rendered with.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Whether the rendered text begins with the BOS text (Gemma's and Llama 3's templates
    /// write `{{ bos_token }}` themselves). Then the caller must not add a second BOS token:
    /// tokenize the text without adding BOS, or, as llama.cpp does when the vocabulary adds
    /// BOS itself, remove the text's BOS with [`strip_bos`](ChatTemplate::strip_bos) first.
    /// Decided by rendering a one-message conversation; a template that refuses that one
    /// counts as rendering BOS if its source mentions `bos_token`.
    pub fn renders_bos(&self) -> bool {
        self.renders_bos
    }

    /// `text` without a leading BOS text, if it has one (llama.cpp's handling when the
    /// tokenizer adds BOS).
    pub fn strip_bos<'a>(&self, text: &'a str) -> &'a str {
        if self.bos_token.is_empty() {
            return text;
        }
        text.strip_prefix(self.bos_token.as_str()).unwrap_or(text)
    }

    /// Makes `strftime_now` report this fixed time (Unix seconds, read as UTC) instead of the
    /// local clock, for reproducible prompts; `None` returns to the clock.
    pub fn set_fixed_time(&self, unix_seconds: Option<i64>) {
        self.fixed_now.store(unix_seconds.unwrap_or(CLOCK_LOCAL), Ordering::Relaxed);
    }

    /// Renders the conversation; with `add_generation_prompt` the text ends with the opening of
    /// the assistant's turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with(messages, add_generation_prompt, &())
    }

    /// [`render`](ChatTemplate::render) with extra template variables (e.g. `tools`,
    /// `enable_thinking`, `date_string`), which override the standard ones of the same name.
    /// `extra` must serialize to a map (or to nothing, `()`). Maps are rendered in their
    /// serialization order, as Python keeps a dict's order: a `serde_json::Value` keeps its
    /// keys' order only with serde_json's `preserve_order` feature.
    pub fn render_with<S: Serialize + ?Sized>(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &S,
    ) -> Result<String, ChatError> {
        let extra = Value::from(Serde(extra));
        if !matches!(extra.kind(), ValueKind::Map | ValueKind::None | ValueKind::Undefined) {
            return Err(ChatError::Context {
                message: format!("extra variables must be a map, not {}", extra.kind()),
            });
        }
        let standard = context! {
            messages => Serde(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => Value::from(()),
            documents => Value::from(()),
        };
        // The last map wins a name both define.
        let ctx = merge_maps([standard, extra]);
        let template = self.env.get_template(NAME).map_err(|e| render_error(&e))?;
        template.render(ctx).map_err(|e| render_error(&e))
    }

    fn probe_renders_bos(&self) -> bool {
        if self.bos_token.is_empty() {
            return false;
        }
        match self.render(&[ChatMessage::new("user", "Hello")], false) {
            Ok(text) => text.starts_with(&self.bos_token),
            Err(_) => self.source.contains("bos_token"),
        }
    }
}

fn syntax_error(e: &Error, source: &str) -> ChatError {
    let line = e.line().unwrap_or(1);
    let source_line = source.lines().nth(line.saturating_sub(1)).unwrap_or("").to_string();
    ChatError::Syntax { line, source_line, message: describe(e) }
}

fn render_error(e: &Error) -> ChatError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if let Some(raised) = err.downcast_ref::<Raised>() {
            return ChatError::Raised { message: raised.0.clone() };
        }
        cause = err.source();
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return ChatError::Render {
            line: e.line(),
            message: format!(
                "the template exceeded its work budget ({FUEL} fuel): it loops too long or builds too much text"
            ),
        };
    }
    ChatError::Render { line: e.line(), message: describe(e) }
}

/// The error's kind and detail without minijinja's location suffix.
fn describe(e: &Error) -> String {
    let mut text = match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    };
    let mut cause = std::error::Error::source(e);
    while let Some(err) = cause {
        text.push_str(&format!(" ({err})"));
        cause = err.source();
    }
    text
}

/// `strftime_now(format)`: the local time, or the fixed UTC time, in strftime's format;
/// an invalid format is an error (not a panic, as chrono's formatter would give).
fn strftime_now(format: &str, fixed: i64) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    use std::fmt::Write;
    let items: Vec<Item<'_>> = StrftimeItems::new(format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        ));
    }
    let mut out = String::new();
    let written = if fixed == CLOCK_LOCAL {
        write!(out, "{}", chrono::Local::now().format_with_items(items.into_iter()))
    } else {
        let t = chrono::DateTime::from_timestamp(fixed, 0).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("strftime_now: time {fixed} out of range"),
            )
        })?;
        write!(out, "{}", t.format_with_items(items.into_iter()))
    };
    written.map_err(|_| {
        Error::new(ErrorKind::InvalidOperation, format!("strftime_now: cannot format {format:?}"))
    })?;
    Ok(out)
}
