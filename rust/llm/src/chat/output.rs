//! A model's answer split into what an app shows: the text, the reasoning (`<think>...`
//! `</think>`) and the tool calls, whole ([`parse_output`]) or while it streams
//! ([`OutputParser`]: each piece of generated text becomes chunks that say what they extend).
//!
//! Streaming and the whole parse agree: the text chunks of a stream concatenate to the whole
//! parse's text, the reasoning chunks to its reasoning, and a call's argument chunks to the
//! exact JSON text of its arguments. To keep that, text that may still turn out to be part of
//! a marker (`<tool_c`...) or trailing white space is held back until the next piece decides.

use super::tools::{ToolCall, ToolFormat};
use serde_json::Value;

/// What is done with `<think>...</think>` in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Left in the text.
    None,
    /// Put into [`ParsedOutput::reasoning`], apart from the text.
    #[default]
    Auto,
}

/// How to read an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputOptions {
    /// The tool-call syntax to look for; `None` when no tools were offered.
    pub tool_format: Option<ToolFormat>,
    /// What to do with reasoning.
    pub reasoning: ReasoningFormat,
    /// The prompt ended inside an open `<think>` (DeepSeek-R1's template opens it in the
    /// generation prompt): the answer starts with reasoning and has no opening tag.
    pub starts_in_reasoning: bool,
}

/// An answer split up.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedOutput {
    /// The text for the user (white space around it trimmed).
    pub text: String,
    /// The reasoning (trimmed), empty if none.
    pub reasoning: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
}

/// What a streamed chunk extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// The text.
    Text,
    /// The reasoning.
    Reasoning,
    /// The name of tool call `index` (sent whole, once).
    ToolCallName {
        /// The call's position in the answer.
        index: usize,
    },
    /// The arguments (JSON text) of tool call `index`.
    ToolCallArguments {
        /// The call's position in the answer.
        index: usize,
    },
}

/// A piece of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// What it extends.
    pub kind: ChunkKind,
    /// The new text (for [`ChunkKind::ToolCallName`], the whole name).
    pub delta: String,
}

/// Splits a whole answer.
pub fn parse_output(options: &OutputOptions, text: &str) -> ParsedOutput {
    let split = split(options, text, false);
    let mut tool_calls = Vec::new();
    let mut body = split.text;
    for (i, call) in split.calls.into_iter().enumerate() {
        match call.finish(text, i) {
            Some(c) => tool_calls.push(c),
            // An unfinished or malformed call stays visible as text.
            None => {
                if !body.is_empty() {
                    body.push('\n');
                }
                body.push_str(call.raw.trim());
            }
        }
    }
    ParsedOutput { text: body, reasoning: split.reasoning, tool_calls }
}

/// Splits an answer as it streams.
#[derive(Debug, Clone, Default)]
pub struct OutputParser {
    options: OutputOptions,
    text: String,
    sent_text: usize,
    sent_reasoning: usize,
    /// Per call: whether its name was sent, and how many bytes of its arguments.
    sent_calls: Vec<(bool, usize)>,
}

impl OutputParser {
    /// A parser for one answer.
    pub fn new(options: OutputOptions) -> OutputParser {
        OutputParser { options, ..OutputParser::default() }
    }

    /// Everything generated so far.
    pub fn raw(&self) -> &str {
        &self.text
    }

    /// Adds generated text; returns the chunks that became certain.
    pub fn push(&mut self, delta: &str) -> Vec<OutputChunk> {
        self.text.push_str(delta);
        let split = split(&self.options, &self.text, true);
        self.diff(&split)
    }

    /// The whole answer and the chunks not sent yet (what was held back). The chunks sent by
    /// [`push`](OutputParser::push) and these together give the returned [`ParsedOutput`],
    /// except that an unfinished call's streamed pieces are then only in its text.
    pub fn finish(&mut self) -> (ParsedOutput, Vec<OutputChunk>) {
        let split = split(&self.options, &self.text, false);
        let chunks = self.diff(&split);
        (parse_output(&self.options, &self.text), chunks)
    }

    fn diff(&mut self, split: &Split) -> Vec<OutputChunk> {
        let mut out = Vec::new();
        if let Some(d) = split.reasoning.get(self.sent_reasoning..).filter(|d| !d.is_empty()) {
            out.push(OutputChunk { kind: ChunkKind::Reasoning, delta: d.to_string() });
            self.sent_reasoning = split.reasoning.len();
        }
        if let Some(d) = split.text.get(self.sent_text..).filter(|d| !d.is_empty()) {
            out.push(OutputChunk { kind: ChunkKind::Text, delta: d.to_string() });
            self.sent_text = split.text.len();
        }
        for (index, call) in split.calls.iter().enumerate() {
            if self.sent_calls.len() <= index {
                self.sent_calls.push((false, 0));
            }
            let Some(name) = &call.name else { break };
            let sent = &mut self.sent_calls[index];
            if !sent.0 {
                out.push(OutputChunk {
                    kind: ChunkKind::ToolCallName { index },
                    delta: name.clone(),
                });
                sent.0 = true;
            }
            if let Some(d) = call.args.get(sent.1..).filter(|d| !d.is_empty()) {
                out.push(OutputChunk {
                    kind: ChunkKind::ToolCallArguments { index },
                    delta: d.to_string(),
                });
                sent.1 = call.args.len();
            }
        }
        out
    }
}

/// A call as far as it is known.
#[derive(Debug, Clone, Default)]
struct PartialCall {
    name: Option<String>,
    id: Option<String>,
    /// The JSON text of the arguments (a prefix while unfinished).
    args: String,
    complete: bool,
    /// The call's text in the answer.
    raw: String,
}

impl PartialCall {
    fn finish(&self, answer: &str, index: usize) -> Option<ToolCall> {
        if !self.complete {
            return None;
        }
        let name = self.name.clone()?;
        let arguments: Value = if self.args.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&self.args).ok()?
        };
        if !arguments.is_object() {
            return None;
        }
        let id = self.id.clone().unwrap_or_else(|| call_id(answer, index));
        Some(ToolCall { id, name, arguments })
    }
}

/// An id for a call whose format has none: `call_` and 16 hex digits of a hash of the
/// answer and the call's position (the same answer gets the same ids).
fn call_id(answer: &str, index: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in answer.bytes().chain(index.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("call_{h:016x}")
}

#[derive(Debug, Default)]
struct Split {
    text: String,
    reasoning: String,
    calls: Vec<PartialCall>,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

fn split(options: &OutputOptions, text: &str, partial: bool) -> Split {
    let mut out = Split::default();
    let rest = if options.reasoning == ReasoningFormat::Auto {
        let (reasoning, rest) = split_reasoning(text, options.starts_in_reasoning, partial);
        out.reasoning = reasoning.trim().to_string();
        match rest {
            Some(r) => r,
            None => return out,
        }
    } else {
        text
    };
    let (body, calls) = match options.tool_format {
        Some(format) => split_calls(format, rest, partial),
        None => (rest.to_string(), Vec::new()),
    };
    out.text = body.trim().to_string();
    out.calls = calls;
    out
}

/// The reasoning and the rest; the rest is `None` while the reasoning is still open (or,
/// streaming, while the answer may still open it).
fn split_reasoning(text: &str, starts_in: bool, partial: bool) -> (&str, Option<&str>) {
    let inside = if starts_in {
        text
    } else {
        let t = text.trim_start();
        if let Some(after) = t.strip_prefix(THINK_OPEN) {
            after
        } else if partial && THINK_OPEN.starts_with(t) {
            // "" or "<thi": undecided.
            return ("", None);
        } else {
            return ("", Some(text));
        }
    };
    match inside.find(THINK_CLOSE) {
        Some(i) => (&inside[..i], Some(&inside[i + THINK_CLOSE.len()..])),
        None if partial => (hold_back(inside, &[THINK_CLOSE]), None),
        // Never closed: all of it was reasoning.
        None => (inside, Some("")),
    }
}

/// `s` without a suffix that begins one of `markers` (it may complete in the next piece).
fn hold_back<'a>(s: &'a str, markers: &[&str]) -> &'a str {
    let mut cut = s.len();
    for m in markers {
        for k in (1..m.len().min(s.len() + 1)).rev() {
            if s.is_char_boundary(s.len() - k) && m.starts_with(&s[s.len() - k..]) {
                cut = cut.min(s.len() - k);
                break;
            }
        }
    }
    &s[..cut]
}

/// The text outside the calls, and the calls.
fn split_calls(format: ToolFormat, text: &str, partial: bool) -> (String, Vec<PartialCall>) {
    match format {
        ToolFormat::Hermes => blocks(text, "<tool_call>", "</tool_call>", partial, object_call),
        ToolFormat::Phi4 => blocks(text, "<|tool_call|>", "<|/tool_call|>", partial, array_calls),
        ToolFormat::MistralNemo => after_marker(text, "[TOOL_CALLS]", partial, array_calls),
        ToolFormat::MistralSmall => after_marker(text, "[TOOL_CALLS]", partial, mistral_small),
        ToolFormat::Llama3 => llama3(text, partial),
        ToolFormat::Generic => generic(text, partial),
    }
}

/// Calls in `open ... close` blocks; everything else is text.
fn blocks(
    text: &str,
    open: &str,
    close: &str,
    partial: bool,
    body: fn(&str, bool) -> (Vec<PartialCall>, usize),
) -> (String, Vec<PartialCall>) {
    let mut out = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    loop {
        match rest.find(open) {
            None => {
                out.push_str(if partial { hold_back(rest, &[open]) } else { rest });
                return (out, calls);
            }
            Some(i) => {
                out.push_str(&rest[..i]);
                let inner = &rest[i + open.len()..];
                let (end, complete) = match inner.find(close) {
                    Some(j) => (j, true),
                    None => (inner.len(), false),
                };
                let (mut found, _) = body(&inner[..end], partial && !complete);
                for c in found.iter_mut() {
                    c.complete &= complete;
                    c.raw = format!("{open}{}{}", &inner[..end], if complete { close } else { "" });
                }
                if found.is_empty() {
                    found.push(PartialCall {
                        raw: format!("{open}{}", &inner[..end]),
                        ..PartialCall::default()
                    });
                }
                calls.extend(found);
                if !complete {
                    return (out, calls);
                }
                rest = &inner[end + close.len()..];
            }
        }
    }
}

/// Calls after one marker (Mistral's `[TOOL_CALLS]`); text before it is text.
fn after_marker(
    text: &str,
    marker: &str,
    partial: bool,
    body: impl Fn(&str, bool) -> (Vec<PartialCall>, usize),
) -> (String, Vec<PartialCall>) {
    match text.find(marker) {
        None => ((if partial { hold_back(text, &[marker]) } else { text }).to_string(), Vec::new()),
        Some(i) => {
            let inner = &text[i + marker.len()..];
            let (mut calls, used) = body(inner, partial);
            for c in calls.iter_mut() {
                c.raw = format!("{marker}{}", &inner[..used.min(inner.len())]);
            }
            if calls.is_empty() {
                calls.push(PartialCall { raw: text[i..].to_string(), ..PartialCall::default() });
            }
            let mut out = text[..i].to_string();
            if calls.iter().all(|c| c.complete) {
                out.push_str(&inner[used.min(inner.len())..]);
            }
            (out, calls)
        }
    }
}

/// `name[ARGS]{...}` repeated, each after `[TOOL_CALLS]`.
fn mistral_small(s: &str, partial: bool) -> (Vec<PartialCall>, usize) {
    let mut calls = Vec::new();
    let mut pos = 0;
    loop {
        let rest = &s[pos..];
        let Some(a) = rest.find("[ARGS]") else {
            if !rest.trim().is_empty() || calls.is_empty() {
                calls.push(PartialCall::default());
            }
            return (calls, s.len());
        };
        // `name[CALL_ID]id` where the template gives ids (Mistral Small 3.2).
        let (name, id) = match rest[..a].split_once("[CALL_ID]") {
            Some((n, id)) => (n.trim().to_string(), Some(id.trim().to_string())),
            None => (rest[..a].trim().to_string(), None),
        };
        let args_text = &rest[a + "[ARGS]".len()..];
        let lead = args_text.len() - args_text.trim_start().len();
        let (extent, complete) = value_extent(&args_text[lead..], partial);
        calls.push(PartialCall {
            name: Some(name),
            id,
            args: args_text[lead..lead + extent].to_string(),
            complete,
            ..PartialCall::default()
        });
        pos += a + "[ARGS]".len() + lead + extent;
        if !complete {
            return (calls, s.len());
        }
        match s[pos..].strip_prefix("[TOOL_CALLS]") {
            Some(_) => pos += "[TOOL_CALLS]".len(),
            // The next call's marker may be arriving.
            None if partial && "[TOOL_CALLS]".starts_with(&s[pos..]) => return (calls, s.len()),
            None => return (calls, pos),
        }
    }
}

/// Llama 3.x: the whole answer is one JSON call (possibly after `<|python_tag|>`), or a
/// built-in tool `<|python_tag|>name.call(k="v", ...)`; anything else is text.
fn llama3(text: &str, partial: bool) -> (String, Vec<PartialCall>) {
    const TAG: &str = "<|python_tag|>";
    let t = text.trim_start();
    let (body, tagged) = match t.strip_prefix(TAG) {
        Some(b) => (b.trim_start(), true),
        None if partial && (TAG.starts_with(t) || t.is_empty()) => {
            return (String::new(), Vec::new())
        }
        None => (t, false),
    };
    if body.starts_with('{') || (partial && body.is_empty()) {
        let (calls, used) = object_call(body, partial);
        let is_call = calls.first().is_some_and(|c| c.name.is_some());
        if is_call || (partial && !calls.first().is_some_and(|c| c.complete)) {
            let mut calls = calls;
            for c in calls.iter_mut() {
                c.raw = t.to_string();
            }
            return (body[used..].to_string(), calls);
        }
    } else if tagged {
        if let Some(call) = builtin_call(body, partial) {
            return (String::new(), vec![call]);
        }
        if partial {
            // `name.ca`...: not decided yet.
            return (String::new(), Vec::new());
        }
    }
    (text.to_string(), Vec::new())
}

/// `name.call(key="value", n=1)` as a call with those arguments.
fn builtin_call(body: &str, partial: bool) -> Option<PartialCall> {
    let open = body.find(".call(")?;
    let name = body[..open].trim().to_string();
    let args = &body[open + ".call(".len()..];
    let Some(close) = args.rfind(')') else {
        return partial.then(|| PartialCall {
            name: Some(name),
            raw: body.to_string(),
            ..PartialCall::default()
        });
    };
    let mut map = serde_json::Map::new();
    for pair in split_top_level(&args[..close]) {
        let (k, v) = pair.split_once('=')?;
        let v = v.trim();
        let value = serde_json::from_str::<Value>(v)
            .unwrap_or_else(|_| Value::String(v.trim_matches('\'').to_string()));
        map.insert(k.trim().to_string(), value);
    }
    Some(PartialCall {
        name: Some(name),
        args: Value::Object(map).to_string(),
        complete: true,
        raw: body.to_string(),
        ..PartialCall::default()
    })
}

/// `a="x, y", b=2` split at the commas outside strings.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quote, mut escaped) = (0, None, false);
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(_), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, ',') => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = false;
    }
    if !s[start..].trim().is_empty() {
        parts.push(&s[start..]);
    }
    parts
}

/// The generic format: `{"tool_call": {...}}`, `{"tool_calls": [...]}` or `{"response":
/// "..."}` as the whole answer. Streaming sends nothing until the object is complete.
fn generic(text: &str, partial: bool) -> (String, Vec<PartialCall>) {
    if partial {
        return (String::new(), Vec::new());
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text.trim()) else {
        return (text.to_string(), Vec::new());
    };
    let to_call = |v: &Value| -> Option<PartialCall> {
        Some(PartialCall {
            name: Some(v.get("name")?.as_str()?.to_string()),
            id: v.get("id").and_then(Value::as_str).map(str::to_string),
            args: v.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".into()),
            complete: true,
            raw: v.to_string(),
        })
    };
    if let Some(c) = map.get("tool_call").and_then(to_call) {
        return (String::new(), vec![c]);
    }
    if let Some(list) = map.get("tool_calls").and_then(Value::as_array) {
        let calls: Option<Vec<PartialCall>> = list.iter().map(to_call).collect();
        if let Some(calls) = calls {
            return (String::new(), calls);
        }
    }
    match map.get("response").and_then(Value::as_str) {
        Some(r) => (r.to_string(), Vec::new()),
        None => (text.to_string(), Vec::new()),
    }
}

/// One `{"name": ..., "arguments" | "parameters": {...}, "id"?: ...}` object at the start of
/// `s` (after white space); the bytes it used.
fn object_call(s: &str, partial: bool) -> (Vec<PartialCall>, usize) {
    let lead = s.len() - s.trim_start().len();
    let (members, end) = object_members(&s[lead..], partial);
    let mut call = PartialCall { complete: end.is_some(), ..PartialCall::default() };
    for m in &members {
        match m.key.as_str() {
            "name" if m.complete => {
                call.name = serde_json::from_str::<String>(m.raw).ok();
            }
            "id" if m.complete => call.id = serde_json::from_str::<String>(m.raw).ok(),
            "arguments" | "parameters" => call.args = m.raw.to_string(),
            _ => {}
        }
    }
    if members.is_empty() && end.is_none() && !partial {
        return (Vec::new(), 0);
    }
    (vec![call], lead + end.unwrap_or(s.len() - lead))
}

/// A JSON array of call objects (or one object) at the start of `s`.
fn array_calls(s: &str, partial: bool) -> (Vec<PartialCall>, usize) {
    let lead = s.len() - s.trim_start().len();
    let t = &s[lead..];
    if t.starts_with('{') {
        return object_call(s, partial);
    }
    let Some(mut rest) = t.strip_prefix('[') else {
        return (Vec::new(), 0);
    };
    let mut calls = Vec::new();
    loop {
        let trimmed = rest.trim_start();
        if let Some(after) = trimmed.strip_prefix(']') {
            return (calls, s.len() - after.len());
        }
        if trimmed.is_empty() {
            return (calls, s.len());
        }
        let (mut found, used) = object_call(trimmed, partial);
        let complete = found.first().is_some_and(|c| c.complete);
        calls.append(&mut found);
        if !complete {
            if let Some(c) = calls.last_mut() {
                c.complete = false;
            }
            return (calls, s.len());
        }
        rest = trimmed[used..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
        if rest.trim_start().is_empty() && partial {
            // The array is not closed yet: the calls so far are complete, but no text may
            // follow yet.
            return (calls, s.len());
        }
    }
}

struct Member<'a> {
    key: String,
    raw: &'a str,
    complete: bool,
}

/// The members of the JSON object at the start of `s` (which must start with `{`), as far as
/// they go, and the end of the object when it is closed.
fn object_members(s: &str, partial: bool) -> (Vec<Member<'_>>, Option<usize>) {
    let mut members = Vec::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return (members, None);
    };
    let at = |r: &str| s.len() - r.len();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return (members, Some(at(after)));
        }
        let (klen, kdone) = value_extent(rest, true);
        if !kdone || !rest.starts_with('"') {
            return (members, None);
        }
        let Ok(key) = serde_json::from_str::<String>(&rest[..klen]) else {
            return (members, None);
        };
        rest = rest[klen..].trim_start();
        let Some(after) = rest.strip_prefix(':') else {
            return (members, None);
        };
        rest = after.trim_start();
        let (vlen, vdone) = value_extent(rest, partial);
        members.push(Member { key, raw: &rest[..vlen], complete: vdone });
        if !vdone {
            return (members, None);
        }
        rest = rest[vlen..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        }
    }
}

/// The length of the JSON value at the start of `s`, and whether it is complete (a value cut
/// off by the end of `s` is incomplete: all of `s` then belongs to it). A number or literal at
/// the very end of `s` counts as incomplete while `partial`.
fn value_extent(s: &str, partial: bool) -> (usize, bool) {
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if depth == 0 {
                    return (i + 1, true);
                }
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                if depth == 0 {
                    return (i, true);
                }
                depth -= 1;
                if depth == 0 {
                    return (i + 1, true);
                }
            }
            b',' | b' ' | b'\n' | b'\r' | b'\t' if depth == 0 => return (i, i > 0),
            _ => {}
        }
    }
    (s.len(), !partial && depth == 0 && !in_string && !s.is_empty())
}
