//! The generation options and results beyond sampling, as the foreign API and the JSON protocol
//! see them: output constraints (`responseFormat`, `grammar`, `regex`), tools (`tools`,
//! `toolChoice`, tool messages), reasoning (`enableThinking`, `reasoningFormat`,
//! `thinkingBudget`), template switches (`chatTemplateKwargs`, `chatTemplate`) and token
//! probabilities (`nProbs`); the answer split into `content`, `reasoning` and `toolCalls`, and
//! the streamed chunks that say what they extend.
//!
//! [`GenerationPlan::new`] is the one place a request becomes the runtime's prompt, options and
//! output reader; every check here runs before any token.

use crate::error::{FfiResult, TesseraError};
use crate::model::{ChatTurn, GenerateRequest};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use tessera_llm::chat::{
    ChatMessage, ChatRequest, ChatTemplate, ChunkKind, OutputChunk, OutputOptions, ReasoningFormat,
    ToolCall, ToolChoice,
};
use tessera_llm::constraint::OutputConstraint;
use tessera_llm::generate::{ContextShift, KeepTokens, ThinkingBudget, TokenProb};
use tessera_llm::{GenerateOptions, LlmError, Prompt};

/// The text of one JSON value. Kotlin and Swift pass it as a string; the JSON protocol takes the
/// value itself (an object, an array, ...) and writes it back as a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(pub String);

uniffi::custom_type!(JsonText, String, {
    lower: |j| j.0,
    try_lift: |s| Ok(JsonText(s)),
});

impl JsonText {
    /// The value, or `InvalidArgument` naming `what` when the text is not JSON.
    pub(crate) fn parse(&self, what: &str) -> FfiResult<Value> {
        serde_json::from_str(&self.0)
            .map_err(|e| TesseraError::invalid_argument(format!("{what} is not valid JSON: {e}")))
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonText, D::Error> {
        Ok(JsonText(Value::deserialize(d)?.to_string()))
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v: Value = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        v.serialize(s)
    }
}

/// The shape the answer must have (OpenAI's / llama.rn's `response_format`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResponseFormat {
    /// Free text (no constraint).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `schema` (a JSON Schema).
    JsonSchema {
        /// The schema.
        schema: JsonText,
    },
}

/// One tool call of an answer or of an assistant message: `arguments` is a JSON object.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
pub struct ToolCallRecord {
    /// The call's id (the model's, or made up from the answer where its format has none).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: JsonText,
}

impl<'de> Deserialize<'de> for ToolCallRecord {
    /// `{id, name, arguments}` with `arguments` an object (or a string holding one), or
    /// OpenAI's `{id, type: "function", function: {name, arguments}}`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolCallRecord, D::Error> {
        let call = ToolCall::deserialize(d)?;
        Ok(ToolCallRecord::from(call))
    }
}

impl From<ToolCall> for ToolCallRecord {
    fn from(c: ToolCall) -> ToolCallRecord {
        ToolCallRecord { id: c.id, name: c.name, arguments: JsonText(c.arguments.to_string()) }
    }
}

impl ToolCallRecord {
    fn to_call(&self, at: &str) -> FfiResult<ToolCall> {
        let arguments = self.arguments.parse(&format!("{at}.arguments"))?;
        if !arguments.is_object() {
            return Err(TesseraError::invalid_argument(format!(
                "{at}.arguments must be a JSON object"
            )));
        }
        Ok(ToolCall { id: self.id.clone(), name: self.name.clone(), arguments })
    }
}

/// A candidate token of one step with its probability after the sampler chain.
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
pub struct TokenProbability {
    /// The token id.
    pub token: u32,
    /// Its text (a partial UTF-8 character shown as U+FFFD).
    pub text: String,
    /// Its probability (1 for greedy decoding's pick).
    pub prob: f32,
}

/// The candidates of one generated token (llama.rn's `completion_probabilities` entry).
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
pub struct TokenProbs {
    /// The token drawn.
    pub token: u32,
    /// Its text.
    pub text: String,
    /// The `nProbs` most likely candidates, most likely first.
    pub probs: Vec<TokenProbability>,
}

/// A piece of the answer while it streams, and what it extends.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
pub struct StreamChunk {
    /// "text", "reasoning", "toolCallName" (the whole name, once) or "toolCallArguments"
    /// (JSON text of the arguments, in pieces).
    pub kind: String,
    /// The tool call's position in the answer (tool call chunks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The new text.
    pub delta: String,
}

impl From<OutputChunk> for StreamChunk {
    fn from(c: OutputChunk) -> StreamChunk {
        let (kind, index) = match c.kind {
            ChunkKind::Text => ("text", None),
            ChunkKind::Reasoning => ("reasoning", None),
            ChunkKind::ToolCallName { index } => ("toolCallName", Some(index as u32)),
            ChunkKind::ToolCallArguments { index } => ("toolCallArguments", Some(index as u32)),
        };
        StreamChunk { kind: kind.into(), index, delta: c.delta }
    }
}

/// One generated token as a listener sees it.
#[derive(Debug, Clone, PartialEq, uniffi::Record, Serialize)]
pub struct GeneratedToken {
    /// The token id.
    pub token: u32,
    /// The raw text this token completes (empty while a character or a possible stop string is
    /// held back).
    pub text: String,
    /// The answer's pieces that became certain with it, typed.
    pub chunks: Vec<StreamChunk>,
    /// With `nProbs`, the step's most likely candidates (empty otherwise; the protocol's
    /// event then has no `probs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probs: Vec<TokenProbability>,
}

/// The probabilities of the runtime as records.
pub(crate) fn probabilities(probs: &[TokenProb]) -> Vec<TokenProbability> {
    probs
        .iter()
        .map(|p| TokenProbability { token: p.token, text: p.text.clone(), prob: p.prob })
        .collect()
}

/// The request's `contextShift` and `nKeep` as the runtime's option (`nKeep` -1: the whole
/// prompt; `nKeep` without `contextShift` is refused rather than ignored).
fn context_shift(request: &GenerateRequest) -> FfiResult<Option<ContextShift>> {
    let n_keep = match request.n_keep {
        -1 => KeepTokens::Prompt,
        n if n >= 0 => KeepTokens::Tokens(n as usize),
        n => return Err(bad(format!("nKeep {n} must be -1 (the whole prompt) or at least 0"))),
    };
    if !request.context_shift {
        if request.n_keep != 0 {
            return Err(bad("nKeep needs contextShift: true"));
        }
        return Ok(None);
    }
    Ok(Some(ContextShift { n_keep }))
}

fn bad(message: impl Into<String>) -> TesseraError {
    TesseraError::invalid_argument(message)
}

impl ChatTurn {
    pub(crate) fn to_message(&self, at: &str) -> FfiResult<ChatMessage> {
        let tool_calls = self
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| c.to_call(&format!("{at}.toolCalls[{i}]")))
            .collect::<FfiResult<_>>()?;
        Ok(ChatMessage {
            role: self.role.clone(),
            content: self.content.clone(),
            tool_calls,
            tool_call_id: self.tool_call_id.clone(),
            name: self.name.clone(),
            reasoning_content: self.reasoning_content.clone(),
        })
    }
}

/// A request made ready to generate: the prompt, the runtime's options and how to read the
/// answer.
pub(crate) struct GenerationPlan {
    /// What to continue.
    pub(crate) prompt: Prompt,
    /// How to generate.
    pub(crate) options: GenerateOptions,
    /// How to split the answer.
    pub(crate) output: OutputOptions,
}

impl GenerationPlan {
    /// Checks `request` and works out the plan with `model`'s tokenizer and chat template.
    /// Malformed schemas, grammars and options are `InvalidArgument` naming the problem.
    pub(crate) fn new(
        request: &GenerateRequest,
        model: &tessera_llm::Model,
    ) -> FfiResult<GenerationPlan> {
        let mut options = GenerateOptions::from(request);
        options.n_probs = request.n_probs as usize;
        options.context_shift = context_shift(request)?;
        let constraint = request.constraint()?;
        let reasoning = match request.reasoning_format.as_str() {
            "auto" => ReasoningFormat::Auto,
            "none" => ReasoningFormat::None,
            other => {
                return Err(bad(format!(
                    "reasoningFormat {other:?} is not one of \"none\", \"auto\""
                )))
            }
        };
        let tool_choice = match request.tool_choice.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            "" => return Err(bad("toolChoice must not be empty (auto, none, required or a name)")),
            name => ToolChoice::Function(name.to_string()),
        };
        let budget = |starts_inside| {
            request.thinking_budget.map(|t| ThinkingBudget { tokens: t as usize, starts_inside })
        };
        match (&request.prompt, &request.messages) {
            (Some(text), None) => {
                let chat_only = [
                    (!request.tools.is_empty(), "tools"),
                    (request.tool_choice != "auto", "toolChoice"),
                    (request.enable_thinking.is_some(), "enableThinking"),
                    (request.chat_template_kwargs.is_some(), "chatTemplateKwargs"),
                    (request.chat_template.is_some(), "chatTemplate"),
                ];
                if let Some((_, name)) = chat_only.iter().find(|(given, _)| *given) {
                    return Err(bad(format!("{name} needs messages (not a prompt)")));
                }
                options.constraint = constraint;
                options.thinking_budget = budget(false);
                Ok(GenerationPlan {
                    prompt: Prompt::Text(text.clone()),
                    options,
                    output: OutputOptions {
                        tool_format: None,
                        reasoning,
                        starts_in_reasoning: false,
                    },
                })
            }
            (None, Some(turns)) => {
                let messages = turns
                    .iter()
                    .enumerate()
                    .map(|(i, t)| t.to_message(&format!("messages[{i}]")))
                    .collect::<FfiResult<Vec<_>>>()?;
                let tools = request
                    .tools
                    .iter()
                    .enumerate()
                    .map(|(i, t)| t.parse(&format!("tools[{i}]")))
                    .collect::<FfiResult<Vec<_>>>()?;
                if !tools.is_empty() && tool_choice != ToolChoice::None && constraint.is_some() {
                    return Err(bad(
                        "tools cannot be combined with responseFormat, grammar or regex \
                         (the tool calls have their own constraint)",
                    ));
                }
                let template_kwargs = match &request.chat_template_kwargs {
                    None => Map::new(),
                    Some(k) => match k.parse("chatTemplateKwargs")? {
                        Value::Object(m) => m,
                        _ => return Err(bad("chatTemplateKwargs must be a JSON object")),
                    },
                };
                let custom;
                let template = match &request.chat_template {
                    Some(source) => {
                        let tok = model.tokenizer();
                        let piece = |id: Option<u32>| {
                            id.and_then(|t| tok.decode(&[t], true).ok()).unwrap_or_default()
                        };
                        custom = ChatTemplate::new(source, &piece(tok.bos()), &piece(tok.eos()))
                            .map_err(|e| bad(format!("chatTemplate: {e}")))?;
                        &custom
                    }
                    None => model.chat_template()?,
                };
                let chat = ChatRequest {
                    messages,
                    tools,
                    tool_choice,
                    enable_thinking: request.enable_thinking,
                    reasoning,
                    template_kwargs,
                };
                let prepared = chat.prepare(template).map_err(LlmError::from)?;
                let tokens =
                    model.tokenizer().encode(&prepared.prompt, !template.renders_bos(), true);
                options.special_text = prepared.output.tool_format.is_some();
                options.constraint = prepared.constraint.or(constraint);
                options.lazy_constraint = prepared.lazy;
                options.thinking_budget = budget(prepared.output.starts_in_reasoning);
                Ok(GenerationPlan {
                    prompt: Prompt::Tokens(tokens),
                    options,
                    output: prepared.output,
                })
            }
            _ => Err(bad("generate: give exactly one of prompt and messages")),
        }
    }
}

impl GenerateRequest {
    /// The output constraint of `responseFormat`, `grammar` and `regex` (at most one).
    fn constraint(&self) -> FfiResult<Option<OutputConstraint>> {
        let format = match &self.response_format {
            None | Some(ResponseFormat::Text) => None,
            Some(ResponseFormat::JsonObject) => Some(OutputConstraint::JsonObject),
            Some(ResponseFormat::JsonSchema { schema }) => {
                Some(OutputConstraint::JsonSchema(schema.parse("responseFormat.schema")?))
            }
        };
        let given = [
            format,
            self.grammar.clone().map(OutputConstraint::Gbnf),
            self.regex.clone().map(OutputConstraint::Regex),
        ];
        let mut given = given.into_iter().flatten();
        let first = given.next();
        if given.next().is_some() {
            return Err(bad("give at most one of responseFormat, grammar and regex"));
        }
        Ok(first)
    }
}
