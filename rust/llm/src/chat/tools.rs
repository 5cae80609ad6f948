//! Tool calls: the calls of an assistant message ([`ToolCall`], rendered by templates in
//! OpenAI's shape), the tool-call syntax a model writes ([`ToolFormat`], chosen from its chat
//! template as llama.cpp's `common/chat.cpp` chooses it), and the JSON Schema that constrains
//! a call once its opener appears.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Map, Value};

/// One call of a tool: its id, the function's name and its arguments (a JSON object).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id (given by the model where its format has ids, else made up).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: Value,
}

/// The OpenAI / transformers shape templates read: `{"id", "type": "function", "function":
/// {"name", "arguments"}}`.
#[derive(Serialize, Deserialize)]
struct WireCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunction,
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

fn function_type() -> String {
    "function".into()
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireCall {
            id: self.id.clone(),
            kind: function_type(),
            function: WireFunction { name: self.name.clone(), arguments: self.arguments.clone() },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    /// Accepts OpenAI's shape, with `arguments` an object or a string holding one (as OpenAI's
    /// API sends it), and the flat `{"id", "name", "arguments"}`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolCall, D::Error> {
        let v = Value::deserialize(d)?;
        let (id, name, arguments) = if v.get("function").is_some() {
            let w: WireCall = serde_json::from_value(v).map_err(D::Error::custom)?;
            (w.id, w.function.name, w.function.arguments)
        } else {
            let name = v
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| D::Error::custom("a tool call needs a name"))?
                .to_string();
            let id = v.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
            (id, name, v.get("arguments").cloned().unwrap_or(Value::Null))
        };
        let arguments = match arguments {
            Value::String(s) => serde_json::from_str(&s).map_err(|e| {
                D::Error::custom(format!("tool call {name}: arguments are not JSON: {e}"))
            })?,
            Value::Null => Value::Object(Map::new()),
            v => v,
        };
        if !arguments.is_object() {
            return Err(D::Error::custom(format!(
                "tool call {name}: arguments must be a JSON object"
            )));
        }
        Ok(ToolCall { id, name, arguments })
    }
}

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call: Hermes 2
    /// and 3, Qwen 2.5 and 3, SmolLM3.
    Hermes,
    /// A JSON object `{"name": ..., "parameters": {...}}` as the whole message, possibly after
    /// `<|python_tag|>`, or a built-in tool as `<|python_tag|>name.call(key="value")`: Llama
    /// 3.1 to 3.3.
    Llama3,
    /// `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]`: Mistral Nemo.
    MistralNemo,
    /// `[TOOL_CALLS]name[ARGS]{...}` per call (`name[CALL_ID]id[ARGS]` with ids): Mistral
    /// Small 3.2, Devstral, Magistral.
    MistralSmall,
    /// `<|tool_call|>[{"name": ..., "arguments": {...}}]<|/tool_call|>`: Phi-4-mini.
    Phi4,
    /// No tool syntax in the template (Gemma 3, and anything unrecognized): the tools are
    /// described in a system message and the whole answer is one JSON object,
    /// `{"tool_call": {"name": ..., "arguments": {...}}}` or `{"response": "..."}`, constrained
    /// by its schema from the first token (llama.cpp's generic format).
    Generic,
}

impl ToolFormat {
    /// The format of the template `source`, by the markers llama.cpp's `common/chat.cpp`
    /// looks for.
    pub fn detect(source: &str) -> ToolFormat {
        if source.contains("[TOOL_CALLS]") {
            if source.contains("[ARGS]") {
                ToolFormat::MistralSmall
            } else {
                ToolFormat::MistralNemo
            }
        } else if source.contains("<|tool_call|>") || source.contains("<|tool|>") {
            ToolFormat::Phi4
        } else if source.contains("<tool_call>") && !source.contains("<function=") {
            ToolFormat::Hermes
        } else if source.contains("<|start_header_id|>ipython<|end_header_id|>")
            || source.contains("<|python_tag|>")
        {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// A short name: "hermes", "llama3", "mistral-nemo", "mistral-small", "phi4", "generic".
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::MistralNemo => "mistral-nemo",
            ToolFormat::MistralSmall => "mistral-small",
            ToolFormat::Phi4 => "phi4",
            ToolFormat::Generic => "generic",
        }
    }

    /// The texts that open a tool call in this format (the lazy grammar's triggers); none for
    /// [`ToolFormat::Generic`] and [`ToolFormat::Llama3`], whose whole answer is the call.
    pub fn openers(self) -> &'static [&'static str] {
        match self {
            ToolFormat::Hermes => &["<tool_call>"],
            ToolFormat::Llama3 => &["<|python_tag|>"],
            ToolFormat::MistralNemo | ToolFormat::MistralSmall => &["[TOOL_CALLS]"],
            ToolFormat::Phi4 => &["<|tool_call|>"],
            ToolFormat::Generic => &[],
        }
    }
}

/// A tool an app offers: an OpenAI function definition, `{"type": "function", "function":
/// {"name", "description", "parameters"}}`.
pub fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("function").unwrap_or(tool).get("name").and_then(Value::as_str)
}

/// The parameters' schema of a tool (an empty object schema when it has none).
pub fn tool_parameters(tool: &Value) -> Value {
    tool.get("function")
        .unwrap_or(tool)
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

/// The JSON Schema of one call to any of `tools` in the shape `{name_key: NAME, args_key:
/// {...}}`: one alternative per tool, its name a constant and its arguments its parameters.
pub fn call_schema(tools: &[Value], name_key: &str, args_key: &str) -> Value {
    let alternatives: Vec<Value> = tools
        .iter()
        .filter_map(|t| {
            let name = tool_name(t)?;
            Some(json!({
                "type": "object",
                "properties": {name_key: {"const": name}, args_key: tool_parameters(t)},
                "required": [name_key, args_key],
                "additionalProperties": false,
            }))
        })
        .collect();
    json!({"anyOf": alternatives})
}

/// The schema of the generic format's whole answer: a call to one of `tools` (with
/// `required`, only that), or a text response.
pub fn generic_schema(tools: &[Value], required: bool) -> Value {
    let call = json!({
        "type": "object",
        "properties": {"tool_call": call_schema(tools, "name", "arguments")},
        "required": ["tool_call"],
        "additionalProperties": false,
    });
    if required {
        return call;
    }
    json!({"anyOf": [call, {
        "type": "object",
        "properties": {"response": {"type": "string"}},
        "required": ["response"],
        "additionalProperties": false,
    }]})
}

/// The system text that describes `tools` to a model whose template has no tool syntax
/// (llama.cpp's generic format).
pub fn generic_system_text(tools: &[Value]) -> String {
    let list = serde_json::to_string_pretty(tools).unwrap_or_default();
    format!(
        "You can call these tools:\n{list}\n\nAnswer with a JSON object: {{\"tool_call\": {{\"name\": NAME, \"arguments\": {{...}}}}}} to call a tool, or {{\"response\": TEXT}} to answer directly."
    )
}
