//! A chat request (messages, tools, tool choice, reasoning switches, template variables)
//! turned into what generation needs: the prompt text, how to read the answer, and the
//! constraint on tool calls.

use super::output::{OutputOptions, ReasoningFormat};
use super::tools::{call_schema, generic_schema, generic_system_text, tool_name, ToolFormat};
use super::{ChatError, ChatMessage, ChatTemplate};
use crate::constraint::OutputConstraint;
use serde_json::{Map, Value};

/// Which tools the model may call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// Any tool, or none (the model decides).
    #[default]
    Auto,
    /// No tool: the tools are not given to the template.
    None,
    /// At least one call.
    Required,
    /// A call of this function.
    Function(String),
}

/// A conversation to answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// OpenAI function definitions (`{"type": "function", "function": {"name", "description",
    /// "parameters"}}`).
    pub tools: Vec<Value>,
    /// Which tools the model may call.
    pub tool_choice: ToolChoice,
    /// `enable_thinking` for the template (Qwen 3, SmolLM3, ...); unset leaves the template's
    /// default.
    pub enable_thinking: Option<bool>,
    /// What to do with `<think>` in the answer.
    pub reasoning: ReasoningFormat,
    /// Further template variables (`chat_template_kwargs`); they override the standard ones.
    pub template_kwargs: Map<String, Value>,
}

/// What a tool call is held to once its opener appears (llama.cpp's lazy grammar): the
/// triggers and the constraint on the text that follows.
#[derive(Debug, Clone, PartialEq)]
pub struct LazyConstraint {
    /// Texts that start the constraint where they appear in the output.
    pub triggers: Vec<String>,
    /// The constraint on the output after the trigger.
    pub constraint: OutputConstraint,
}

/// A request ready to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedChat {
    /// The rendered prompt (with the generation prompt).
    pub prompt: String,
    /// How to read the answer.
    pub output: OutputOptions,
    /// A constraint from the first token (the generic tool format).
    pub constraint: Option<OutputConstraint>,
    /// A constraint from a trigger on (a tool call's opener).
    pub lazy: Option<LazyConstraint>,
}

impl ChatRequest {
    /// Renders the prompt with `template` and works out how to read and constrain the answer.
    pub fn prepare(&self, template: &ChatTemplate) -> Result<PreparedChat, ChatError> {
        let tools: Vec<Value> = match &self.tool_choice {
            ToolChoice::None => Vec::new(),
            ToolChoice::Function(name) => {
                let chosen: Vec<Value> =
                    self.tools.iter().filter(|t| tool_name(t) == Some(name)).cloned().collect();
                if chosen.is_empty() {
                    return Err(ChatError::Context {
                        message: format!("toolChoice names {name:?}, which is not among the tools"),
                    });
                }
                chosen
            }
            _ => self.tools.clone(),
        };
        for t in &tools {
            if tool_name(t).is_none() {
                return Err(ChatError::Context {
                    message: format!("a tool without a function name: {t}"),
                });
            }
        }
        let required = matches!(self.tool_choice, ToolChoice::Required | ToolChoice::Function(_));
        let format = (!tools.is_empty()).then(|| ToolFormat::detect(template.source()));
        let mut vars = Map::new();
        if let Some(on) = self.enable_thinking {
            vars.insert("enable_thinking".into(), Value::Bool(on));
        }
        let mut messages = self.messages.clone();
        let mut constraint = None;
        let mut lazy = None;
        match format {
            Some(ToolFormat::Generic) => {
                // The template knows no tools: describe them in the system message and hold
                // the whole answer to the call-or-response schema.
                let text = generic_system_text(&tools);
                match messages.first_mut() {
                    Some(m) if m.role == "system" => m.content = format!("{}\n\n{text}", m.content),
                    _ => messages.insert(0, ChatMessage::new("system", text)),
                }
                constraint = Some(OutputConstraint::JsonSchema(generic_schema(&tools, required)));
            }
            Some(format) => {
                vars.insert("tools".into(), Value::Array(tools.clone()));
                lazy = Some(LazyConstraint {
                    triggers: format.openers().iter().map(|s| s.to_string()).collect(),
                    constraint: OutputConstraint::Lark(call_grammar(format, &tools)),
                });
            }
            None => {}
        }
        for (k, v) in &self.template_kwargs {
            vars.insert(k.clone(), v.clone());
        }
        let prompt = template.render_with(&messages, true, &Value::Object(vars))?;
        let starts_in_reasoning =
            self.reasoning == ReasoningFormat::Auto && prompt.trim_end().ends_with("<think>");
        Ok(PreparedChat {
            output: OutputOptions {
                tool_format: format,
                reasoning: self.reasoning,
                starts_in_reasoning,
            },
            prompt,
            constraint,
            lazy,
        })
    }
}

/// The Lark grammar of the text after a format's opener: one call whose arguments validate
/// against the tool's parameters, then the closer.
fn call_grammar(format: ToolFormat, tools: &[Value]) -> String {
    let json = |schema: Value| format!("%json {schema}");
    match format {
        ToolFormat::Hermes => format!(
            "start: /[ \\n]*/ call /[ \\n]*/ \"</tool_call>\"\ncall: {}\n",
            json(call_schema(tools, "name", "arguments"))
        ),
        ToolFormat::Llama3 => {
            format!("start: call\ncall: {}\n", json(call_schema(tools, "name", "parameters")))
        }
        ToolFormat::MistralNemo => {
            let schema = serde_json::json!({
                "type": "array", "minItems": 1, "items": call_schema(tools, "name", "arguments")
            });
            format!("start: {}\n", json(schema))
        }
        ToolFormat::MistralSmall => {
            let alternatives: Vec<String> = tools
                .iter()
                .filter_map(|t| {
                    let name = tool_name(t)?;
                    let params = super::tools::tool_parameters(t);
                    Some(format!(
                        "{} (\"[CALL_ID]\" /[A-Za-z0-9]{{1,32}}/)? \"[ARGS]\" {}",
                        quote(name),
                        json(params)
                    ))
                })
                .collect();
            format!("start: {}\n", alternatives.join(" | "))
        }
        ToolFormat::Phi4 => {
            let schema = serde_json::json!({
                "type": "array", "minItems": 1, "items": call_schema(tools, "name", "arguments")
            });
            format!("start: {} \"<|/tool_call|>\"\n", json(schema))
        }
        ToolFormat::Generic => String::new(),
    }
}

/// A Lark string literal.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}
