//! Structured output through the foreign API (issue 37) and reranking (issue 36): the JSON
//! protocol's `generate` with `responseFormat`, `grammar`, `regex`, `tools`, `toolChoice`,
//! `reasoningFormat`, `thinkingBudget`, `chatTemplate`, `chatTemplateKwargs` and `nProbs` on
//! Gemma 3 270M, its typed token events, the `Model` object's (Kotlin's and Swift's) view of
//! the same options, malformed schemas and grammars refused before any token, and `rerank` on a
//! reranker against llama.cpp's recorded scores.

mod common;

use common::model_path;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tessera_ffi::json_api::handle;
use tessera_ffi::{
    set_event_listener, ChatTurn, EventListener, GenerateRequest, GeneratedToken, JsonText, Model,
    ModelOptions, ResponseFormat, TokenListener,
};

fn gemma() -> String {
    model_path("gemma3-270m-q4_k_m")
}

/// Collects every event.
#[derive(Default, Clone)]
struct Events(Arc<Mutex<Vec<Value>>>);

impl EventListener for Events {
    fn on_event(&self, event_json: String) {
        self.0.lock().unwrap().push(serde_json::from_str(&event_json).unwrap());
    }
}

impl Events {
    /// The token events of request `id`.
    fn tokens(&self, id: &str) -> Vec<Value> {
        let all = self.0.lock().unwrap();
        all.iter().filter(|e| e["type"] == "token" && e["requestId"] == id).cloned().collect()
    }
}

/// The concatenated deltas of the chunks of `kind` (and tool call `index`) in `events`.
fn streamed(events: &[Value], kind: &str, index: Option<u64>) -> String {
    let mut out = String::new();
    for e in events {
        for c in e["chunks"].as_array().unwrap() {
            if c["kind"] == kind && c["index"].as_u64() == index {
                out.push_str(c["delta"].as_str().unwrap());
            }
        }
    }
    out
}

fn ok(request: Value) -> Value {
    let r = handle(&request.to_string());
    assert!(r.get("ok").is_some(), "{request} -> {r}");
    r["ok"].clone()
}

/// The error's kind and message.
fn error(request: Value) -> (String, String) {
    let r = handle(&request.to_string());
    let kind = r["error"]["kind"].as_str().unwrap_or_else(|| panic!("{request} gave {r}"));
    (kind.to_string(), r["error"]["message"].as_str().unwrap().to_string())
}

fn validate(schema: &Value, instance: &Value) {
    let v = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = v.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{instance} does not validate against {schema}: {errors:?}");
}

/// One test: the event listener is process-wide.
#[test]
fn structured_generation_through_the_json_protocol() {
    let events = Events::default();
    set_event_listener(Some(Box::new(events.clone())));
    let loaded = ok(json!({"method": "loadModel", "path": gemma(),
                           "options": {"device": "CPU", "threads": 2, "nCtx": 1024}}));
    let id = loaded["model"].as_u64().unwrap();
    let generate = |request_id: &str, params: Value| json!({"method": "generate", "model": id, "requestId": request_id, "params": params});

    // A form filled from a sentence, under sampling at temperature 1: the text parses and
    // validates, and the streamed text chunks are the content.
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "city": {"enum": ["Lisbon", "Porto", "Faro"]},
            "pets": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2}
        },
        "required": ["name", "age", "city"],
        "additionalProperties": false
    });
    for seed in [1, 2] {
        let rid = format!("form-{seed}");
        let r = ok(generate(
            &rid,
            json!({"messages": [{"role": "user", "content":
                      "Ana is 31 and lives in Porto with her cat Tom. Give her record as JSON."}],
                   "responseFormat": {"type": "json_schema", "schema": schema},
                   "temperature": 1.0, "seed": seed, "maxTokens": 80}),
        ));
        assert_eq!(r["stopReason"], "eog", "{r}");
        let value: Value = serde_json::from_str(r["text"].as_str().unwrap()).unwrap();
        validate(&schema, &value);
        assert_eq!(r["content"], r["text"], "no reasoning, no tools: the content is the text");
        assert!(r["timings"]["constraintMs"].as_f64().unwrap() > 0.0, "{r}");
        let tokens = events.tokens(&rid);
        assert_eq!(streamed(&tokens, "text", None), r["content"].as_str().unwrap());
    }
    // json_object: any object.
    let r = ok(generate(
        "object",
        json!({"prompt": "A JSON object describing a dog:", "responseFormat": {"type": "json_object"},
               "temperature": 1.0, "seed": 3, "maxTokens": 60}),
    ));
    if r["stopReason"] == "eog" {
        assert!(serde_json::from_str::<Value>(r["text"].as_str().unwrap()).unwrap().is_object());
    } else {
        assert!(r["text"].as_str().unwrap().starts_with('{'), "{r}");
    }

    // A GBNF grammar that writes reasoning then an answer: `reasoningFormat` "auto" splits
    // them (whole and streamed), "none" leaves them in the content.
    let grammar = r#"root ::= "<think>" [a-z ]{3,12} "</think>" [A-Z] [a-z]{2,8} "." "#;
    for format in ["auto", "none"] {
        let rid = format!("think-{format}");
        let r = ok(generate(
            &rid,
            json!({"prompt": "Think, then answer:", "grammar": grammar, "reasoningFormat": format,
                   "temperature": 1.0, "seed": 5, "maxTokens": 40}),
        ));
        let text = r["text"].as_str().unwrap().to_string();
        let (think, answer) = text
            .strip_prefix("<think>")
            .and_then(|t| t.split_once("</think>"))
            .unwrap_or_else(|| panic!("{text:?} does not match the grammar"));
        assert!(think.len() >= 3 && think.chars().all(|c| c.is_ascii_lowercase() || c == ' '));
        assert!(answer.ends_with('.') && answer.chars().next().unwrap().is_ascii_uppercase());
        let tokens = events.tokens(&rid);
        if format == "auto" {
            assert_eq!(r["reasoning"], think.trim());
            assert_eq!(r["content"], answer.trim());
            assert_eq!(streamed(&tokens, "reasoning", None), think.trim());
        } else {
            assert_eq!(r["reasoning"], "");
            assert_eq!(r["content"], text.trim());
        }
        assert_eq!(streamed(&tokens, "text", None), r["content"].as_str().unwrap());
    }
    // A regex.
    let r = ok(generate(
        "regex",
        json!({"prompt": "A date:", "regex": "20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]",
               "temperature": 1.0, "seed": 9, "maxTokens": 20}),
    ));
    let date = r["text"].as_str().unwrap();
    assert!(date.len() == 10 && date.as_bytes()[4] == b'-' && date.starts_with("20"), "{date:?}");

    // A tool call: Gemma's template has no tool syntax, so the generic format holds the whole
    // answer to the tools' schema; the call parses, its arguments validate, and the stream
    // gives the name once and the arguments' JSON text in pieces.
    let parameters = json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]
    });
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city", "parameters": parameters}}]);
    let r = ok(generate(
        "tool",
        json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
               "tools": tools, "toolChoice": "required",
               "temperature": 1.0, "seed": 11, "maxTokens": 60}),
    ));
    assert_eq!(r["stopReason"], "eog", "{r}");
    let calls = r["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{r}");
    assert_eq!(calls[0]["name"], "get_weather");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"), "{r}");
    validate(&parameters, &calls[0]["arguments"]);
    let tokens = events.tokens("tool");
    assert_eq!(streamed(&tokens, "toolCallName", Some(0)), "get_weather");
    let args: Value =
        serde_json::from_str(&streamed(&tokens, "toolCallArguments", Some(0))).unwrap();
    assert_eq!(args, calls[0]["arguments"]);
    // The call and its result rendered back for the next turn: a template that writes the
    // fields templates read (`tool_calls[].function`, `tool_call_id`, `name`).
    let echo = "{% for m in messages %}{{ m.role }}:{% for c in m.tool_calls or [] %}\
                {{ c.id }}={{ c.function.name }}({{ c.function.arguments.city }}){% endfor %}\
                {% if m.tool_call_id %}[{{ m.tool_call_id }} {{ m.name }}]{% endif %}\
                {{ m.content }}|{% endfor %}";
    let id0 = calls[0]["id"].as_str().unwrap();
    let city = calls[0]["arguments"]["city"].as_str().unwrap();
    let rendered = format!(
        "user:What is the weather in Paris?|assistant:{id0}=get_weather({city})|\
         tool:[{id0} get_weather]21 degrees|"
    );
    let r = ok(generate(
        "tool-reply",
        json!({"messages": [
                   {"role": "user", "content": "What is the weather in Paris?"},
                   {"role": "assistant", "content": null, "toolCalls": [calls[0]]},
                   {"role": "tool", "toolCallId": id0, "name": "get_weather",
                    "content": "21 degrees"}],
               "chatTemplate": echo, "temperature": 0.0, "maxTokens": 1}),
    ));
    let want = ok(json!({"method": "tokenize", "model": id, "params": {"text": rendered}}));
    assert_eq!(
        r["promptTokens"].as_u64().unwrap() as usize,
        want["tokens"].as_array().unwrap().len()
    );

    // nProbs: each generated token's candidates, most likely first; with top-k 3 and no other
    // cut they are the whole distribution the token was drawn from (sum 1), and the drawn
    // token is one of them.
    let r = ok(generate(
        "probs",
        json!({"prompt": "The capital of France is", "nProbs": 3, "topK": 3, "topP": 1.0,
               "minP": 0.0, "temperature": 1.0, "seed": 4, "maxTokens": 6, "ignoreEos": true}),
    ));
    let probs = r["probs"].as_array().unwrap();
    let tokens: Vec<u64> =
        r["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(probs.len(), tokens.len());
    let streamed_probs: Vec<Value> =
        events.tokens("probs").iter().filter_map(|e| e.get("probs").cloned()).collect();
    assert_eq!(streamed_probs.len(), tokens.len(), "one probs per token event");
    for ((step, &token), live) in probs.iter().zip(&tokens).zip(&streamed_probs) {
        assert_eq!(step["token"].as_u64(), Some(token));
        let cands = step["probs"].as_array().unwrap();
        assert_eq!(cands.len(), 3, "{step}");
        let p: Vec<f64> = cands.iter().map(|c| c["prob"].as_f64().unwrap()).collect();
        assert!(p.windows(2).all(|w| w[0] >= w[1]), "not most likely first: {step}");
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-4, "{step}");
        assert!(cands.iter().any(|c| c["token"].as_u64() == Some(token)), "{step}");
        assert_eq!(live, &step["probs"]);
    }

    // Template switches: a custom template that refuses to render unless a variable is set.
    let template = "{% if not flag %}{{ raise_exception('flag is not set') }}{% endif %}\
                    {% if enable_thinking is defined and enable_thinking %}\
                    {{ raise_exception('thinking is on') }}{% endif %}\
                    {{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n\
                    {{ m.content }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n<think>\n";
    let turn = json!([{"role": "user", "content": "Hi"}]);
    let (kind, message) = error(generate(
        "tmpl-0",
        json!({"messages": turn, "chatTemplate": template, "maxTokens": 1}),
    ));
    assert_eq!(kind, "InvalidArgument");
    assert!(message.contains("flag is not set"), "{message}");
    let (_, message) = error(generate(
        "tmpl-1",
        json!({"messages": turn, "chatTemplate": template, "chatTemplateKwargs": {"flag": true},
               "enableThinking": true, "maxTokens": 1}),
    ));
    assert!(message.contains("thinking is on"), "{message}");
    // The prompt ends inside `<think>`: a budget of 3 tokens closes the reasoning for the
    // model, and the answer follows it.
    let r = ok(generate(
        "budget",
        json!({"messages": turn, "chatTemplate": template, "chatTemplateKwargs": {"flag": true},
               "enableThinking": false, "thinkingBudget": 3, "temperature": 0.0,
               "maxTokens": 12, "ignoreEos": true}),
    ));
    let text = r["text"].as_str().unwrap();
    let (thought, _) = text.split_once("</think>").unwrap_or_else(|| panic!("{text:?}"));
    let spent = ok(json!({"method": "tokenize", "model": id,
                          "params": {"text": thought.trim_end(), "addSpecial": false}}));
    assert!(spent["tokens"].as_array().unwrap().len() <= 3, "{text:?}");
    assert_eq!(r["reasoning"], thought.trim(), "{r}");

    // Malformed schemas, grammars and options: InvalidArgument naming the problem, before
    // any token.
    let bad = [
        (
            json!({"responseFormat": {"type": "json_schema",
                                   "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}),
            "JSON schema",
        ),
        (json!({"responseFormat": {"type": "json_schema", "schema": 7}}), "JSON schema"),
        (json!({"grammar": "root ::= missing-rule"}), "grammar"),
        (json!({"grammar": "root ::= \"a"}), "grammar"),
        (json!({"regex": "(ab"}), "regex"),
        (json!({"regex": "a", "grammar": "root ::= \"a\""}), "at most one of"),
        (json!({"responseFormat": {"type": "xml"}}), "unknown value \"xml\""),
        (json!({"reasoningFormat": "deepseek"}), "reasoningFormat \"deepseek\""),
        (json!({"tools": tools}), "tools needs messages"),
    ];
    for (i, (params, needle)) in bad.iter().enumerate() {
        let mut params = params.clone();
        params["prompt"] = json!("Say something:");
        let rid = format!("bad-{i}");
        let (kind, message) = error(generate(&rid, params.clone()));
        assert_eq!(kind, "InvalidArgument", "{params}: {message}");
        assert!(message.contains(needle), "{params}: {message:?} should name {needle:?}");
        assert!(events.tokens(&rid).is_empty(), "{params}: tokens before the error");
    }
    let (kind, message) = error(generate(
        "bad-tool",
        json!({"messages": turn, "tools": tools, "toolChoice": "get_time"}),
    ));
    assert_eq!(kind, "InvalidArgument");
    assert!(message.contains("get_time"), "{message}");
    let (_, message) = error(generate(
        "bad-tools-and-schema",
        json!({"messages": turn, "tools": tools, "responseFormat": {"type": "json_object"}}),
    ));
    assert!(message.contains("cannot be combined"), "{message}");
    ok(json!({"method": "releaseModel", "model": id}));
    set_event_listener(None);
}

struct Collect(Arc<Mutex<Vec<GeneratedToken>>>);

impl TokenListener for Collect {
    fn on_token(&self, token: GeneratedToken) -> bool {
        self.0.lock().unwrap().push(token);
        true
    }
}

/// The `Model` object takes the same options as records (the schema and the tools as JSON
/// text) and gives typed chunks and parsed tool calls; a malformed schema is `InvalidArgument`.
#[test]
fn structured_generation_through_the_model_object() {
    let opts = ModelOptions {
        device: "CPU".into(),
        threads: Some(2),
        n_ctx: Some(512),
        n_batch: 512,
        ..ModelOptions::default()
    };
    let m = Model::load(gemma(), opts, None).unwrap();
    let schema = json!({"type": "object", "properties": {"answer": {"type": "boolean"}},
                        "required": ["answer"], "additionalProperties": false});
    let request = GenerateRequest {
        messages: Some(vec![ChatTurn::new("user", "Is the sky blue? Answer in JSON.")]),
        response_format: Some(ResponseFormat::JsonSchema { schema: JsonText(schema.to_string()) }),
        temperature: 1.0,
        seed: Some(8),
        max_tokens: 30,
        ..GenerateRequest::default()
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = m.generate(request.clone(), Some(Box::new(Collect(seen.clone())))).unwrap();
    validate(&schema, &serde_json::from_str(&r.text).unwrap());
    let chunks: String = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|t| t.chunks.iter().filter(|c| c.kind == "text").map(|c| c.delta.clone()))
        .collect();
    assert_eq!(chunks, r.content);

    let bad = GenerateRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            schema: JsonText(r#"{"type": "object", "minProperties": "x"}"#.into()),
        }),
        ..request.clone()
    };
    let e = m.generate(bad, None).unwrap_err();
    assert_eq!(e.kind(), "InvalidArgument");
    assert!(e.message().contains("JSON schema"), "{e}");
    let not_json = GenerateRequest {
        response_format: Some(ResponseFormat::JsonSchema { schema: JsonText("{".into()) }),
        ..request.clone()
    };
    let e = m.generate(not_json, None).unwrap_err();
    assert!(e.message().contains("responseFormat.schema is not valid JSON"), "{e}");

    let tools = vec![JsonText(
        json!({"type": "function", "function": {"name": "set_alarm", "parameters": {
            "type": "object", "properties": {"hour": {"type": "integer", "minimum": 0,
            "maximum": 23}}, "required": ["hour"], "additionalProperties": false}}})
        .to_string(),
    )];
    let call = GenerateRequest {
        messages: Some(vec![ChatTurn::new("user", "Wake me at 7.")]),
        tools,
        tool_choice: "set_alarm".into(),
        temperature: 1.0,
        seed: Some(2),
        max_tokens: 60,
        ..GenerateRequest::default()
    };
    let r = m.generate(call, None).unwrap();
    assert_eq!(r.tool_calls.len(), 1, "{r:?}");
    assert_eq!(r.tool_calls[0].name, "set_alarm");
    let args: Value = serde_json::from_str(&r.tool_calls[0].arguments.0).unwrap();
    let hour = args["hour"].as_i64().unwrap();
    assert!((0..=23).contains(&hour), "{args}");
    m.close();
}

/// `rerank` on a BERT reranker gives llama.cpp's scores (recorded by
/// rust/llm/tests/fixtures/record_embed_models.py), highest first, through the protocol and the
/// `Model` object; `normalize` is their logistic; a decoder model is refused.
#[test]
fn rerank_matches_llama_cpp() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../llm/tests/fixtures/embed-tiny-bert-rerank.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let query = fixture["query"].as_str().unwrap();
    let docs = fixture["documents"].as_array().unwrap();
    let texts: Vec<&str> = docs.iter().map(|d| d["document"].as_str().unwrap()).collect();
    // llama.cpp's own spread (flash attention on / off), as rust/llm/tests/embed_models.rs.
    let spread = docs
        .iter()
        .map(|d| (d["score"].as_f64().unwrap() - d["score_fa_on"].as_f64().unwrap()).abs())
        .fold(0.0, f64::max);
    let want: Vec<f64> = docs.iter().map(|d| d["score"].as_f64().unwrap()).collect();

    let loaded = ok(json!({"method": "loadModel", "path": model_path("tiny-bert-rerank"),
                           "options": {"device": "CPU", "threads": 1}}));
    let id = loaded["model"].as_u64().unwrap();
    for normalize in [false, true] {
        let r = ok(json!({"method": "rerank", "model": id,
                          "params": {"query": query, "documents": texts, "normalize": normalize}}));
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), texts.len());
        let mut seen = vec![false; texts.len()];
        for w in results.windows(2) {
            assert!(w[0]["score"].as_f64() >= w[1]["score"].as_f64(), "not sorted: {r}");
        }
        for res in results {
            let i = res["index"].as_u64().unwrap() as usize;
            seen[i] = true;
            let got = res["score"].as_f64().unwrap();
            let (expected, allowed) = if normalize {
                let s = 1.0 / (1.0 + (-want[i]).exp());
                // The logistic's slope is at most 1/4.
                (s, 1.25 * spread * 0.25 + 1e-6)
            } else {
                (want[i], 1.25 * spread + 1e-6)
            };
            assert!((got - expected).abs() <= allowed, "{:?}: {got} vs {expected}", texts[i]);
        }
        assert!(seen.iter().all(|s| *s));
    }
    let (kind, message) = error(json!({"method": "rerank", "model": id,
                                       "params": {"query": query, "documents": []}}));
    assert_eq!((kind.as_str(), message.as_str()), ("InvalidArgument", "rerank: no documents"));
    ok(json!({"method": "releaseModel", "model": id}));

    let m = Model::load(model_path("tiny-bert-rerank"), ModelOptions::default(), None).unwrap();
    let typed =
        m.rerank(query.into(), texts.iter().map(|t| t.to_string()).collect(), false).unwrap();
    let best = want.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    assert_eq!(typed[0].index as usize, best);
    m.close();
    let g = Model::load(gemma(), ModelOptions { threads: Some(1), ..Default::default() }, None)
        .unwrap();
    let e = g.rerank(query.into(), vec!["a".into()], false).unwrap_err();
    assert_eq!(e.kind(), "InvalidArgument");
    assert!(e.message().contains("not a reranker"), "{e}");
    g.close();
}
