//! Tool calls and reasoning in chat: the official templates (fixtures/chat/templates, from the
//! llama-cpp-python 0.3.36 source package, `-tool_use` ones included) rendered with tools, tool
//! calls and tool results byte for byte as jinja2 renders them the way transformers does
//! (fixtures/chat/hf_tool_renders.json, recorded by record_tools.py); each format's parser on
//! the calls as those templates write them and on model texts in each documented format, whole
//! and streamed in pieces; the reasoning split on DeepSeek-R1-style and Qwen 3 texts.

mod common;

use common::renders::{Record, Recording};
use serde_json::{json, Value};
use tessera_llm::chat::{
    parse_output, ChatError, ChatMessage, ChatRequest, ChatTemplate, ChunkKind, OutputOptions,
    OutputParser, ParsedOutput, ReasoningFormat, ToolCall, ToolChoice, ToolFormat,
};
use tessera_llm::constraint::OutputConstraint;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chat");

fn recording() -> Recording {
    let text = std::fs::read_to_string(format!("{FIXTURES}/hf_tool_renders.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn template(r: &Record, fixed_now: i64) -> ChatTemplate {
    let source = std::fs::read_to_string(format!("{FIXTURES}/templates/{}", r.file)).unwrap();
    let t = ChatTemplate::new(&source, &r.bos_token, &r.eos_token)
        .unwrap_or_else(|e| panic!("{} does not compile: {e}", r.file));
    t.set_fixed_time(Some(fixed_now));
    t
}

#[test]
fn tool_templates_render_as_jinja2_does() {
    let rec = recording();
    assert!(rec.records.len() >= 100, "{} records", rec.records.len());
    let mut failures = Vec::new();
    for r in &rec.records {
        let t = template(r, rec.fixed_now);
        let got = t.render_with(&r.messages, r.add_generation_prompt, &r.extra);
        let label = format!("{} / {}", r.template, r.case);
        match (&r.expected, &r.error, got) {
            (Some(want), _, Ok(got)) if &got == want => {}
            (Some(want), _, Ok(got)) => {
                failures.push(format!("{label}: rendered\n{got:?}\njinja2 rendered\n{want:?}"))
            }
            (_, Some(e), Err(ChatError::Raised { message })) if e.kind == "raised" => {
                if message != e.message {
                    failures.push(format!("{label}: raised {message:?}, jinja2 {:?}", e.message));
                }
            }
            // jinja2 failed otherwise: so may we, or, where jinja2's error is iterating `none`
            // (the Hermes tool_use templates without tools), minijinja iterates nothing.
            (_, Some(e), Err(_)) if e.kind != "raised" => {}
            (_, Some(e), Ok(_)) if e.message == "'NoneType' object is not iterable" => {}
            (_, _, got) => failures.push(format!(
                "{label}: got {got:?}, jinja2 gave {:?} / {:?}",
                r.expected,
                r.error.as_ref().map(|e| (&e.kind, &e.message))
            )),
        }
    }
    assert!(failures.is_empty(), "{} differ:\n{}", failures.len(), failures.join("\n\n"));
}

/// The request path (tools and thinking switches as template variables) renders what jinja2
/// renders for the same variables.
#[test]
fn chat_requests_render_their_tools_and_switches() {
    let rec = recording();
    let mut compared = 0;
    for r in rec.records.iter().filter(|r| r.add_generation_prompt && r.expected.is_some()) {
        let extra: Value = serde_json::to_value(&r.extra).unwrap();
        let Value::Object(mut vars) = extra else { panic!() };
        let tools = match vars.remove("tools") {
            Some(Value::Array(t)) => t,
            _ => Vec::new(),
        };
        let enable_thinking = vars.remove("enable_thinking").and_then(|v| v.as_bool());
        let req = ChatRequest {
            messages: r.messages.clone(),
            tools,
            enable_thinking,
            template_kwargs: vars,
            ..ChatRequest::default()
        };
        let t = template(r, rec.fixed_now);
        if ToolFormat::detect(t.source()) == ToolFormat::Generic && !req.tools.is_empty() {
            continue; // the generic format adds a system message of its own
        }
        let prepared = req.prepare(&t).unwrap();
        assert_eq!(&prepared.prompt, r.expected.as_ref().unwrap(), "{} / {}", r.template, r.case);
        compared += 1;
    }
    assert!(compared >= 40, "{compared}");
}

#[test]
fn formats_are_chosen_from_the_templates() {
    let rec = recording();
    let want = |name: &str| match name {
        "hermes-2-pro" | "hermes-3" | "qwen-2.5" | "qwen-3" => ToolFormat::Hermes,
        "llama-3.1" | "llama-3.2" | "llama-3.3" => ToolFormat::Llama3,
        "mistral-nemo" => ToolFormat::MistralNemo,
        "mistral-small-3.2" => ToolFormat::MistralSmall,
        // The SmolLM3 template here (Unsloth's edit) has no tool syntax.
        "qwen-3-coder" | "command-r7b" | "deepseek-r1-qwen" | "smollm-3" => ToolFormat::Generic,
        other => panic!("{other}"),
    };
    for r in rec.records.iter().filter(|r| r.case == "tools-offered") {
        assert_eq!(
            ToolFormat::detect(template(r, 0).source()),
            want(&r.template),
            "{}",
            r.template
        );
    }
    let gemma = ChatTemplate::gemma();
    assert_eq!(ToolFormat::detect(gemma.source()), ToolFormat::Generic);
}

fn expected_calls(n: usize) -> Vec<(String, Value)> {
    vec![
        ("get_weather".to_string(), json!({"city": "Paris", "units": "metric"})),
        ("add".to_string(), json!({"a": 2, "b": 3})),
    ]
    .into_iter()
    .take(n)
    .collect()
}

/// The answer as the template writes an assistant's tool calls: the render with the calls
/// less the render that ends at the generation prompt, less the end of turn.
fn written_calls(rec: &Recording, name: &str, case: &str) -> Option<String> {
    let find = |c: &str| rec.records.iter().find(|r| r.template == name && r.case == c);
    let prompt = find("tools-offered")?.expected.clone()?;
    let full = find(case)?.expected.clone()?;
    let r = find(case)?;
    // Mistral moves the system text into the last user turn: there the answer follows the
    // last [/INST].
    let answer = match full.strip_prefix(&prompt) {
        Some(a) => a,
        None => full.rsplit_once("[/INST]")?.1,
    };
    let answer = answer.trim_end();
    let answer = answer.strip_suffix(r.eos_token.as_str()).unwrap_or(answer);
    let answer = answer.strip_suffix("<|eom_id|>").unwrap_or(answer);
    Some(answer.to_string())
}

/// Parsing text whole, then streamed in pieces of every size from 1 to 9 bytes: the chunks
/// must rebuild the whole parse.
fn parse_both_ways(options: &OutputOptions, text: &str) -> ParsedOutput {
    let whole = parse_output(options, text);
    for size in 1..=9 {
        let mut p = OutputParser::new(*options);
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + size).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            chunks.extend(p.push(&text[start..end]));
            start = end;
        }
        let (fin, rest) = p.finish();
        chunks.extend(rest);
        assert_eq!(fin, whole, "streamed finish differs (pieces of {size})");
        let (mut body, mut reasoning) = (String::new(), String::new());
        let mut names: Vec<String> = Vec::new();
        let mut args: Vec<String> = Vec::new();
        for c in &chunks {
            match c.kind {
                ChunkKind::Text => body.push_str(&c.delta),
                ChunkKind::Reasoning => reasoning.push_str(&c.delta),
                ChunkKind::ToolCallName { index } => {
                    assert_eq!(index, names.len(), "names come in order");
                    names.push(c.delta.clone());
                    args.push(String::new());
                }
                ChunkKind::ToolCallArguments { index } => args[index].push_str(&c.delta),
            }
        }
        assert_eq!(body, whole.text, "streamed text (pieces of {size}) of {text:?}");
        assert_eq!(reasoning, whole.reasoning, "streamed reasoning (pieces of {size})");
        let got: Vec<(String, Value)> = names
            .into_iter()
            .zip(args.iter().map(|a| serde_json::from_str(a).unwrap_or(Value::Null)))
            .collect();
        let want: Vec<(String, Value)> =
            whole.tool_calls.iter().map(|c| (c.name.clone(), c.arguments.clone())).collect();
        assert_eq!(got, want, "streamed calls (pieces of {size}) of {text:?}");
    }
    whole
}

fn calls_of(out: &ParsedOutput) -> Vec<(String, Value)> {
    out.tool_calls.iter().map(|c| (c.name.clone(), c.arguments.clone())).collect()
}

#[test]
fn calls_as_the_templates_write_them_parse_back() {
    let rec = recording();
    let cases = [
        ("hermes-2-pro", "tool-calls", 2),
        ("hermes-3", "tool-calls", 2),
        ("qwen-2.5", "tool-calls", 2),
        ("qwen-3", "tool-calls", 2),
        ("llama-3.1", "one-call", 1),
        ("llama-3.2", "one-call", 1),
        ("llama-3.3", "one-call", 1),
        ("mistral-nemo", "tool-calls", 2),
        ("mistral-small-3.2", "tool-calls", 2),
    ];
    for (name, case, n) in cases {
        let answer = written_calls(&rec, name, case)
            .unwrap_or_else(|| panic!("{name}: no answer in the recording"));
        let r = rec.records.iter().find(|r| r.template == name && r.case == case).unwrap();
        let format = ToolFormat::detect(template(r, 0).source());
        let options = OutputOptions { tool_format: Some(format), ..OutputOptions::default() };
        let out = parse_both_ways(&options, &answer);
        assert_eq!(calls_of(&out), expected_calls(n), "{name}: {answer:?}");
        assert_eq!(out.text, "", "{name}: {answer:?}");
        if matches!(format, ToolFormat::MistralNemo | ToolFormat::MistralSmall) {
            let ids: Vec<&str> = out.tool_calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids, ["call00001", "call00002"]);
        }
    }
}

#[test]
fn model_texts_of_each_format_parse_whole_and_streamed() {
    let opts = |f| OutputOptions { tool_format: Some(f), ..OutputOptions::default() };
    // Qwen 2.5 / Hermes, with text before the call.
    let out = parse_both_ways(
        &opts(ToolFormat::Hermes),
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"units\": \"metric\"}}\n</tool_call>",
    );
    assert_eq!(out.text, "Let me check.");
    assert_eq!(calls_of(&out), expected_calls(1));
    // Arguments before the name, nested values, escapes.
    let out = parse_both_ways(
        &opts(ToolFormat::Hermes),
        "<tool_call>{\"arguments\": {\"q\": \"a \\\"b\\\" {c}\", \"n\": [1, {\"x\": null}]}, \"name\": \"search\"}</tool_call>",
    );
    assert_eq!(
        calls_of(&out),
        vec![("search".into(), json!({"q": "a \"b\" {c}", "n": [1, {"x": null}]}))]
    );
    // Llama 3.x: a JSON call as the whole answer, with and without <|python_tag|>.
    for text in [
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"units\": \"metric\"}}",
        "<|python_tag|>{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"units\": \"metric\"}}",
    ] {
        assert_eq!(calls_of(&parse_both_ways(&opts(ToolFormat::Llama3), text)), expected_calls(1), "{text}");
    }
    // Llama 3.1's built-in tools.
    let out = parse_both_ways(
        &opts(ToolFormat::Llama3),
        "<|python_tag|>brave_search.call(query=\"weather, Paris\")",
    );
    assert_eq!(calls_of(&out), vec![("brave_search".into(), json!({"query": "weather, Paris"}))]);
    // Plain text stays text.
    let out = parse_both_ways(&opts(ToolFormat::Llama3), "Paris is sunny today.");
    assert_eq!((out.text.as_str(), out.tool_calls.len()), ("Paris is sunny today.", 0));
    // Mistral Nemo, with ids.
    let out = parse_both_ways(
        &opts(ToolFormat::MistralNemo),
        "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}, \"id\": \"abc123def\"}]",
    );
    assert_eq!(calls_of(&out), vec![("add".into(), json!({"a": 2, "b": 3}))]);
    assert_eq!(out.tool_calls[0].id, "abc123def");
    // Mistral Small 3.2: name, [ARGS], arguments, twice.
    let out = parse_both_ways(
        &opts(ToolFormat::MistralSmall),
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"units\": \"metric\"}[TOOL_CALLS]add[ARGS]{\"a\": 2, \"b\": 3}",
    );
    assert_eq!(calls_of(&out), expected_calls(2));
    // Phi-4-mini: a JSON list between <|tool_call|> and <|/tool_call|>.
    let out = parse_both_ways(
        &opts(ToolFormat::Phi4),
        "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"units\": \"metric\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}]<|/tool_call|>",
    );
    assert_eq!(calls_of(&out), expected_calls(2));
    // Generic (Gemma 3): a call, or a response.
    let out = parse_both_ways(
        &opts(ToolFormat::Generic),
        "{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}}",
    );
    assert_eq!(calls_of(&out), vec![("add".into(), json!({"a": 2, "b": 3}))]);
    let out = parse_both_ways(&opts(ToolFormat::Generic), "{\"response\": \"Hello there.\"}");
    assert_eq!((out.text.as_str(), out.tool_calls.len()), ("Hello there.", 0));
    // An unfinished call (the token limit cut it) stays visible as text.
    let out = parse_output(&opts(ToolFormat::Hermes), "<tool_call>{\"name\": \"add\", \"argu");
    assert!(out.tool_calls.is_empty());
    assert_eq!(out.text, "<tool_call>{\"name\": \"add\", \"argu");
}

#[test]
fn reasoning_splits_from_the_answer() {
    let auto = OutputOptions::default();
    // Qwen 3: the answer opens <think> itself.
    let qwen3 = "<think>\nThe user greets me. I should greet back.\n</think>\n\nHello! How can I help you today?";
    let out = parse_both_ways(&auto, qwen3);
    assert_eq!(out.reasoning, "The user greets me. I should greet back.");
    assert_eq!(out.text, "Hello! How can I help you today?");
    // DeepSeek-R1: the generation prompt opened <think>; the answer has only the closing tag.
    let r1 = OutputOptions { starts_in_reasoning: true, ..auto };
    let out = parse_both_ways(&r1, "Okay, 2 + 2: that is 4.\n</think>\n\nThe answer is **4**.");
    assert_eq!(out.reasoning, "Okay, 2 + 2: that is 4.");
    assert_eq!(out.text, "The answer is **4**.");
    // Still thinking when the generation stopped: all of it is reasoning.
    let out = parse_both_ways(&r1, "Let me think about <this> carefully");
    assert_eq!(
        (out.reasoning.as_str(), out.text.as_str()),
        ("Let me think about <this> carefully", "")
    );
    // Qwen 3 with thinking off renders an empty think block in the prompt: plain answer.
    let out = parse_both_ways(&auto, "Hello!");
    assert_eq!((out.reasoning.as_str(), out.text.as_str()), ("", "Hello!"));
    // reasoningFormat none leaves the tags in the text.
    let none = OutputOptions { reasoning: ReasoningFormat::None, ..auto };
    assert_eq!(parse_both_ways(&none, qwen3).text, qwen3);
    // Reasoning, then a tool call (Qwen 3).
    let both = OutputOptions { tool_format: Some(ToolFormat::Hermes), ..auto };
    let out = parse_both_ways(
        &both,
        "<think>I need the weather.</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"units\": \"metric\"}}\n</tool_call>",
    );
    assert_eq!(out.reasoning, "I need the weather.");
    assert_eq!(calls_of(&out), expected_calls(1));
}

/// DeepSeek-R1's template opens `<think>` in its generation prompt; Qwen 3's does not unless
/// thinking is off (then it renders an empty block).
#[test]
fn the_prompt_says_whether_the_answer_starts_in_reasoning() {
    let rec = recording();
    let r1 = rec.records.iter().find(|r| r.template == "deepseek-r1-qwen").unwrap();
    let req =
        ChatRequest { messages: vec![ChatMessage::new("user", "2+2?")], ..ChatRequest::default() };
    let on = ChatRequest { enable_thinking: Some(true), ..req.clone() };
    let p = on.prepare(&template(r1, 0)).unwrap();
    assert!(p.output.starts_in_reasoning, "{:?}", p.prompt);
    // llama.cpp's copy of the template closes the block unless enable_thinking is set.
    let p = req.prepare(&template(r1, 0)).unwrap();
    assert!(
        !p.output.starts_in_reasoning && p.prompt.ends_with("<think>\n</think>"),
        "{:?}",
        p.prompt
    );
    let q3 = rec.records.iter().find(|r| r.template == "qwen-3").unwrap();
    for (thinking, opened) in [(None, false), (Some(true), false), (Some(false), false)] {
        let req = ChatRequest { enable_thinking: thinking, ..req.clone() };
        let p = req.prepare(&template(q3, 0)).unwrap();
        assert_eq!(p.output.starts_in_reasoning, opened, "{thinking:?}");
        assert_eq!(p.prompt.contains("<think>\n\n</think>"), thinking == Some(false));
    }
}

#[test]
fn tool_choice_and_lazy_constraints() {
    let rec = recording();
    let qwen = rec.records.iter().find(|r| r.template == "qwen-2.5").unwrap();
    let tools: Vec<Value> =
        match serde_json::to_value(&rec.records[0].extra).unwrap()["tools"].clone() {
            Value::Array(t) => t,
            _ => panic!(),
        };
    let base = ChatRequest {
        messages: vec![ChatMessage::new("user", "Weather in Paris?")],
        tools: tools.clone(),
        ..ChatRequest::default()
    };
    let p = base.prepare(&template(qwen, 0)).unwrap();
    let lazy = p.lazy.expect("a lazy constraint");
    assert_eq!(lazy.triggers, ["<tool_call>"]);
    assert!(
        matches!(lazy.constraint, OutputConstraint::Lark(ref g) if g.contains("</tool_call>") && g.contains("get_weather"))
    );
    assert!(p.prompt.contains("\"name\": \"get_weather\""));
    // none: no tools in the prompt, nothing to parse.
    let p = ChatRequest { tool_choice: ToolChoice::None, ..base.clone() }
        .prepare(&template(qwen, 0))
        .unwrap();
    assert!(
        !p.prompt.contains("get_weather") && p.lazy.is_none() && p.output.tool_format.is_none()
    );
    // A function by name: only that tool.
    let p = ChatRequest { tool_choice: ToolChoice::Function("add".into()), ..base.clone() }
        .prepare(&template(qwen, 0))
        .unwrap();
    assert!(p.prompt.contains("\"name\": \"add\"") && !p.prompt.contains("get_weather"));
    let err = ChatRequest { tool_choice: ToolChoice::Function("nope".into()), ..base.clone() }
        .prepare(&template(qwen, 0))
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
    // Gemma (no tool syntax): the generic format, constrained from the first token.
    let p = ChatRequest { tool_choice: ToolChoice::Required, ..base }
        .prepare(&ChatTemplate::gemma())
        .unwrap();
    assert_eq!(p.output.tool_format, Some(ToolFormat::Generic));
    assert!(p.prompt.contains("get_weather"));
    match p.constraint {
        Some(OutputConstraint::JsonSchema(s)) => {
            assert!(s.to_string().contains("tool_call") && !s.to_string().contains("response"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tool_calls_deserialize_in_openai_and_flat_shapes() {
    let m: ChatMessage = serde_json::from_value(json!({
        "role": "assistant", "content": null,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}},
            {"name": "f", "arguments": {"x": true}}
        ]
    }))
    .unwrap();
    assert_eq!(m.content, "");
    assert_eq!(
        m.tool_calls,
        vec![
            ToolCall { id: "1".into(), name: "add".into(), arguments: json!({"a": 1}) },
            ToolCall { id: String::new(), name: "f".into(), arguments: json!({"x": true}) },
        ]
    );
    let bad = serde_json::from_value::<ChatMessage>(
        json!({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1"}}]}),
    );
    assert!(bad.unwrap_err().to_string().contains("not JSON"));
}
