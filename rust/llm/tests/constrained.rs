//! Constrained generation: Gemma 3 270M sampled at temperature 1 under 30+ JSON Schemas, every
//! output validated by the `jsonschema` crate (an independent validator, not llguidance);
//! GBNF, Lark and regex constraints checked against what they allow; malformed schemas,
//! grammars and expressions rejected with errors naming the problem before any token.

mod common;

use common::gemma_path;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use tessera_core::registry::Registry;
use tessera_llm::chat::ChatMessage;
use tessera_llm::constraint::{OutputConstraint, TokenConstraint};
use tessera_llm::sampling::SamplingParams;
use tessera_llm::{
    generate, Context, ContextOptions, DeviceChoice, GenerateOptions, Generation, LlmError, Model,
    Prompt, StopReason,
};

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(tessera_cpu::CpuBackendReg::shared());
    reg
}

fn gemma() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Arc::new(
                Model::load(gemma_path(), &registry(), &DeviceChoice::Auto, &mut |_| true).unwrap(),
            )
        })
        .clone()
}

fn context() -> Context {
    let opts =
        ContextOptions { n_ctx: 1024, n_batch: 256, threads: Some(2), ..ContextOptions::default() };
    Context::new(gemma(), &registry(), &opts).unwrap()
}

fn ask(text: &str) -> Prompt {
    Prompt::Messages(vec![ChatMessage::new("user", text)])
}

fn sampled(seed: u64, constraint: OutputConstraint, max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        // Temperature 1 with llama.cpp's default filters (top-k 40, top-p 0.95, min-p 0.05).
        sampling: SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        max_tokens,
        constraint: Some(constraint),
        ..GenerateOptions::default()
    }
}

fn run(ctx: &mut Context, prompt: &Prompt, opts: &GenerateOptions) -> Generation {
    let mut streamed = String::new();
    let g = generate(ctx, prompt, opts, &mut |e| {
        streamed.push_str(&e.text);
        true
    })
    .unwrap();
    assert_eq!(streamed, g.text);
    g
}

/// (name, request, schema)
fn schemas() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("integer", "Pick a number.", json!({"type": "integer"})),
        (
            "bounded-integer",
            "How many legs has a spider?",
            json!({"type": "integer", "minimum": 1, "maximum": 12}),
        ),
        (
            "number-range",
            "A temperature in Celsius.",
            json!({"type": "number", "minimum": -40.5, "exclusiveMaximum": 60}),
        ),
        ("boolean", "Is the sky blue?", json!({"type": "boolean"})),
        (
            "short-string",
            "Name a fruit.",
            json!({"type": "string", "minLength": 2, "maxLength": 20}),
        ),
        ("enum", "Which color is grass?", json!({"enum": ["red", "green", "blue"]})),
        ("const", "Say yes.", json!({"const": "yes"})),
        (
            "pattern",
            "A US zip code.",
            json!({"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}),
        ),
        (
            "date-pattern",
            "A date.",
            json!({"type": "string", "pattern": "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])$"}),
        ),
        (
            "person",
            "Describe a person.",
            json!({
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                "required": ["name", "age"],
                "additionalProperties": false
            }),
        ),
        (
            "optional-fields",
            "A book.",
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 40},
                    "year": {"type": "integer", "minimum": 1450, "maximum": 2030},
                    "isbn": {"type": "string", "pattern": "^[0-9]{13}$"}
                },
                "required": ["title"],
                "additionalProperties": false
            }),
        ),
        (
            "nested",
            "A company and its address.",
            json!({
                "type": "object",
                "properties": {
                    "company": {"type": "string", "maxLength": 30},
                    "address": {
                        "type": "object",
                        "properties": {
                            "street": {"type": "string", "maxLength": 40},
                            "city": {"type": "string", "maxLength": 30},
                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                        },
                        "required": ["city", "zip"],
                        "additionalProperties": false
                    }
                },
                "required": ["company", "address"],
                "additionalProperties": false
            }),
        ),
        (
            "array-bounds",
            "Three to five colors.",
            json!({
                "type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 3, "maxItems": 5
            }),
        ),
        (
            "array-of-objects",
            "A shopping list.",
            json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"item": {"type": "string", "maxLength": 20}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                    "required": ["item", "qty"],
                    "additionalProperties": false
                },
                "minItems": 1,
                "maxItems": 4
            }),
        ),
        (
            "array-of-numbers",
            "Some measurements.",
            json!({
                "type": "array", "items": {"type": "number", "minimum": 0, "maximum": 100}, "minItems": 2, "maxItems": 6
            }),
        ),
        (
            "tuple",
            "A point and a label.",
            json!({
                "type": "array",
                "prefixItems": [{"type": "number"}, {"type": "number"}, {"type": "string", "maxLength": 10}],
                "items": false
            }),
        ),
        (
            "any-of",
            "An id or a name.",
            json!({
                "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 15}]
            }),
        ),
        (
            "any-of-objects",
            "A shape.",
            json!({
                "anyOf": [
                    {"type": "object", "properties": {"kind": {"const": "circle"}, "radius": {"type": "number", "minimum": 0}}, "required": ["kind", "radius"], "additionalProperties": false},
                    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number", "minimum": 0}}, "required": ["kind", "side"], "additionalProperties": false}
                ]
            }),
        ),
        (
            "nullable",
            "A middle name, if any.",
            json!({"type": ["string", "null"], "maxLength": 15}),
        ),
        (
            "ref-defs",
            "Two people.",
            json!({
                "$defs": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"], "additionalProperties": false}},
                "type": "object",
                "properties": {"first": {"$ref": "#/$defs/person"}, "second": {"$ref": "#/$defs/person"}},
                "required": ["first", "second"],
                "additionalProperties": false
            }),
        ),
        (
            "ref-chain",
            "A small tree.",
            json!({
                "$defs": {
                    "leaf": {"type": "object", "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["value"], "additionalProperties": false},
                    "node": {
                        "type": "object",
                        "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99}, "children": {"type": "array", "items": {"$ref": "#/$defs/leaf"}, "maxItems": 2}},
                        "required": ["value", "children"],
                        "additionalProperties": false
                    }
                },
                "$ref": "#/$defs/node"
            }),
        ),
        (
            "enum-in-object",
            "A task.",
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 30},
                    "priority": {"enum": ["low", "medium", "high"]},
                    "done": {"type": "boolean"}
                },
                "required": ["title", "priority", "done"],
                "additionalProperties": false
            }),
        ),
        ("integer-enum", "A dice roll.", json!({"enum": [1, 2, 3, 4, 5, 6]})),
        (
            "exclusive-bounds",
            "A probability.",
            json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
        ),
        (
            "negative-range",
            "A depth below sea level in meters.",
            json!({"type": "integer", "minimum": -11000, "maximum": -1}),
        ),
        (
            "email-pattern",
            "An email address.",
            json!({"type": "string", "pattern": "^[a-z]{1,10}@[a-z]{1,10}\\.(com|org)$"}),
        ),
        (
            "deep-nesting",
            "An order.",
            json!({
                "type": "object",
                "properties": {"order": {"type": "object", "properties": {"customer": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"], "additionalProperties": false}}, "required": ["customer"], "additionalProperties": false}},
                "required": ["order"],
                "additionalProperties": false
            }),
        ),
        (
            "all-of",
            "A product.",
            json!({
                "properties": {"sku": true, "price": true},
                "additionalProperties": false,
                "allOf": [
                    {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}}, "required": ["sku"]},
                    {"type": "object", "properties": {"price": {"type": "number", "minimum": 0, "maximum": 1000}}, "required": ["price"]}
                ]
            }),
        ),
        (
            "one-of",
            "A payment.",
            json!({
                "oneOf": [
                    {"type": "object", "properties": {"card": {"type": "string", "pattern": "^[0-9]{16}$"}}, "required": ["card"], "additionalProperties": false},
                    {"type": "object", "properties": {"cash": {"type": "integer", "minimum": 1, "maximum": 500}}, "required": ["cash"], "additionalProperties": false}
                ]
            }),
        ),
        (
            "unique-enum-array",
            "Your favorite weekdays.",
            json!({
                "type": "array", "items": {"enum": ["mon", "tue", "wed", "thu", "fri"]}, "minItems": 1, "maxItems": 3
            }),
        ),
        (
            "map",
            "Scores per player.",
            json!({
                // Keys bounded by a pattern: a free string key lets Gemma 3 270M at temperature 1
                // write one key until the token limit.
                "type": "object",
                "patternProperties": {"^[A-Za-z]{1,12}$": {"type": "integer", "minimum": 0, "maximum": 100}},
                "additionalProperties": false,
                "maxProperties": 3
            }),
        ),
        (
            "string-array-in-object",
            "A recipe.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 25},
                    "ingredients": {"type": "array", "items": {"type": "string", "maxLength": 15}, "minItems": 2, "maxItems": 4},
                    "minutes": {"type": "integer", "minimum": 1, "maximum": 240}
                },
                "required": ["name", "ingredients", "minutes"],
                "additionalProperties": false
            }),
        ),
        (
            "pattern-keys",
            "Counts of things as JSON.",
            json!({
                "type": "object",
                "patternProperties": {"^[a-z_]{1,10}$": {"type": "integer"}},
                "additionalProperties": false,
                "maxProperties": 2
            }),
        ),
    ]
}

/// Every schema: a sampled generation (temperature 1, no other filter) that ends on its own
/// and validates. llguidance ends the output once the value is complete, so the model's end of
/// generation comes right after it.
#[test]
fn gemma_outputs_validate_against_every_schema() {
    let mut ctx = context();
    let all = schemas();
    assert!(all.len() >= 30, "{} schemas", all.len());
    let mut failures = Vec::new();
    for (i, (name, request, schema)) in all.into_iter().enumerate() {
        let validator = jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("{name}: the validator refuses the schema: {e}"));
        let prompt = ask(&format!("{request} Answer in JSON."));
        let opts = sampled(1000 + i as u64, OutputConstraint::JsonSchema(schema.clone()), 160);
        let g = run(&mut ctx, &prompt, &opts);
        eprintln!("{name}: {} tokens: {}", g.tokens.len(), g.text);
        if g.stop_reason != StopReason::EndOfGeneration {
            failures.push(format!("{name}: ended by {:?} after {:?}", g.stop_reason, g.text));
            continue;
        }
        match serde_json::from_str::<Value>(&g.text) {
            Ok(v) => {
                let errors: Vec<String> =
                    validator.iter_errors(&v).map(|e| e.to_string()).collect();
                if !errors.is_empty() {
                    failures.push(format!("{name}: {:?} is invalid: {errors:?}", g.text));
                }
            }
            Err(e) => failures.push(format!("{name}: {:?} is not JSON: {e}", g.text)),
        }
        assert_eq!(g.timings.constraint_masks, g.tokens.len() + 1, "{name}: one mask per step");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Without the constraint the same prompt and seed do not give schema-valid JSON: the test
/// above shows the constraint at work, not the model's habits.
#[test]
fn unconstrained_outputs_are_not_valid_json_for_the_same_prompt() {
    let mut ctx = context();
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let prompt = ask("Pick a number. Answer in JSON.");
    let mut free = sampled(7, OutputConstraint::JsonObject, 40);
    free.constraint = None;
    let g = run(&mut ctx, &prompt, &free);
    let valid = serde_json::from_str::<Value>(&g.text).is_ok_and(|v| validator.is_valid(&v));
    assert!(!valid, "unconstrained output happened to validate: {:?}", g.text);
    let g = run(&mut ctx, &prompt, &sampled(7, OutputConstraint::JsonSchema(schema), 40));
    let v: Value = serde_json::from_str(&g.text).unwrap();
    assert!(validator.is_valid(&v), "{:?}", g.text);
}

#[test]
fn json_object_gbnf_lark_and_regex_constraints_hold() {
    let mut ctx = context();
    let prompt = ask("Tell me about cats.");
    let g = run(&mut ctx, &prompt, &sampled(3, OutputConstraint::JsonObject, 120));
    assert_eq!(g.stop_reason, StopReason::EndOfGeneration, "{:?}", g.text);
    assert!(serde_json::from_str::<Value>(&g.text).unwrap().is_object(), "{:?}", g.text);

    let gbnf = r#"
# a yes/no answer, then a count in words or digits
root ::= answer ", " count "."
answer ::= "yes" | "no"
count ::= [0-9]{1,3} | ("one" | "two" | "three")
"#;
    for seed in 0..4 {
        let g = run(&mut ctx, &prompt, &sampled(seed, OutputConstraint::Gbnf(gbnf.into()), 30));
        let ok = regex_full("(yes|no), ([0-9]{1,3}|one|two|three)\\.", &g.text);
        assert!(ok, "GBNF output {:?}", g.text);
        assert_eq!(g.stop_reason, StopReason::EndOfGeneration);
    }

    let lark = "start: \"The answer is \" NUM \"!\"\nNUM: /[1-9][0-9]?/\n";
    let g = run(&mut ctx, &prompt, &sampled(5, OutputConstraint::Lark(lark.into()), 30));
    assert!(regex_full("The answer is [1-9][0-9]?!", &g.text), "Lark output {:?}", g.text);

    let rx = "(Meow|Purr)( (meow|purr)){0,3}\\.";
    let g = run(&mut ctx, &prompt, &sampled(6, OutputConstraint::Regex(rx.into()), 30));
    assert!(regex_full(rx, &g.text), "regex output {:?}", g.text);
}

/// Whether `text` matches `rx` as a whole (a small backtracking check through the JSON
/// Schema validator's `pattern`, so that no regex engine is added for tests).
fn regex_full(rx: &str, text: &str) -> bool {
    let schema = json!({"type": "string", "pattern": format!("^(?:{rx})$")});
    jsonschema::validator_for(&schema).unwrap().is_valid(&json!(text))
}

fn compile_error(c: OutputConstraint) -> String {
    let vocab = gemma().constraint_vocab().unwrap();
    match TokenConstraint::new(&vocab, &c) {
        Ok(_) => panic!("{c:?} compiled"),
        Err(e) => LlmError::from(e).to_string(),
    }
}

/// Malformed or unsupported constraints fail before any token, as InvalidArgument errors
/// that say what is wrong.
#[test]
fn malformed_constraints_are_rejected_with_their_problem() {
    let cases: Vec<(OutputConstraint, &str)> = vec![
        (OutputConstraint::JsonSchema(json!({"type": "strnig"})), "strnig"),
        (
            OutputConstraint::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})),
            "minimum",
        ),
        (OutputConstraint::JsonSchema(json!({"$ref": "#/$defs/missing"})), "missing"),
        (OutputConstraint::JsonSchema(json!([1, 2])), "object or a boolean"),
        (
            OutputConstraint::JsonSchema(json!({"type": "string", "pattern": "(unclosed"})),
            "unclosed",
        ),
        (OutputConstraint::Gbnf("root ::= item\n".into()), "\"item\" is used but never defined"),
        (OutputConstraint::Gbnf("root ::= \"a\" (\"b\"\n".into()), "expected ) to close the group"),
        (OutputConstraint::Gbnf("item ::= \"x\"".into()), "no `root` rule"),
        (OutputConstraint::Lark("start: foo\n".into()), "foo"),
        (OutputConstraint::Regex("[a-".into()), "regex"),
    ];
    for (c, needle) in cases {
        let message = compile_error(c.clone());
        assert!(message.starts_with("invalid argument: "), "{c:?}: {message}");
        assert!(message.contains(needle), "{c:?}: {message:?} does not name {needle:?}");
    }
    // Through generate: the error comes before any token reaches the callback.
    let mut ctx = context();
    let mut tokens = 0;
    let bad = sampled(0, OutputConstraint::Gbnf("root ::= [z-a]".into()), 10);
    let err = generate(&mut ctx, &ask("Hi"), &bad, &mut |_| {
        tokens += 1;
        true
    })
    .unwrap_err();
    assert!(matches!(err, LlmError::InvalidArgument(ref m) if m.contains("reversed")), "{err}");
    assert_eq!(tokens, 0);
}

/// nProbs: the candidates of every step, most likely first, their probabilities those of the
/// distribution the token was drawn from; under a constraint only allowed tokens appear.
#[test]
fn token_probabilities_follow_the_sampler_chain_and_the_constraint() {
    let mut ctx = context();
    let mut opts =
        sampled(11, OutputConstraint::JsonSchema(json!({"enum": ["alpha", "beta", "gamma"]})), 20);
    opts.n_probs = 5;
    let mut events = Vec::new();
    let g = generate(&mut ctx, &ask("Pick a Greek letter."), &opts, &mut |e| {
        events.push(e.clone());
        true
    })
    .unwrap();
    assert!(["\"alpha\"", "\"beta\"", "\"gamma\""].contains(&g.text.as_str()), "{:?}", g.text);
    let model = gemma();
    let tok = model.tokenizer();
    let answers = ["\"alpha\"", "\"beta\"", "\"gamma\""];
    let mut before: Vec<u32> = Vec::new();
    for e in &events {
        if e.probs.is_empty() {
            continue;
        }
        assert!(e.probs.len() <= 5);
        assert!(e.probs.windows(2).all(|w| w[0].prob >= w[1].prob), "{:?}", e.probs);
        let sum: f32 = e.probs.iter().map(|p| p.prob).sum();
        assert!(sum <= 1.0 + 1e-4, "{sum}");
        assert!(e.probs.iter().any(|p| p.token == e.token), "the drawn token is a candidate");
        let so_far = tok.decode(&before, false).unwrap();
        for p in &e.probs {
            // Every candidate continues one of the three answers (or ends after one).
            let piece = tok.decode(&[p.token], false).unwrap();
            assert_eq!(p.text, piece);
            let text = format!("{so_far}{piece}");
            let fits = tok.is_eog(p.token) && answers.contains(&so_far.as_str())
                || answers.iter().any(|a| a.starts_with(&text));
            assert!(fits, "candidate {piece:?} after {so_far:?}");
        }
        before.push(e.token);
    }
    // Greedy: one candidate of probability 1 per step.
    let mut greedy = opts.clone();
    greedy.sampling = SamplingParams::greedy();
    let mut ones = true;
    generate(&mut ctx, &ask("Pick a Greek letter."), &greedy, &mut |e| {
        ones &= e.probs.is_empty() || (e.probs.len() == 1 && e.probs[0].prob == 1.0);
        true
    })
    .unwrap();
    assert!(ones);
}

/// End to end: Gemma 3 (no tool syntax in its template: the generic format) asked to call a
/// tool; the answer is held to the call schema, parses into a call, and its arguments validate
/// against the tool's parameters.
#[test]
fn gemma_calls_a_tool_through_the_generic_format() {
    use tessera_llm::chat::{parse_output, ChatRequest, ToolChoice, ToolFormat};
    let tools = vec![json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 30},
                    "units": {"enum": ["metric", "imperial"]}
                },
                "required": ["city", "units"],
                "additionalProperties": false
            }
        }
    })];
    let model = gemma();
    let template = model.chat_template().unwrap();
    let req = ChatRequest {
        messages: vec![ChatMessage::new("user", "What is the weather in Paris?")],
        tools: tools.clone(),
        tool_choice: ToolChoice::Required,
        ..ChatRequest::default()
    };
    let prepared = req.prepare(template).unwrap();
    assert_eq!(prepared.output.tool_format, Some(ToolFormat::Generic));
    let tokens = model.tokenizer().encode(&prepared.prompt, !template.renders_bos(), true);
    let validator = jsonschema::validator_for(&tools[0]["function"]["parameters"]).unwrap();
    let mut ctx = context();
    for seed in 0..3 {
        let mut opts = sampled(seed, prepared.constraint.clone().unwrap(), 120);
        opts.lazy_constraint = prepared.lazy.clone();
        let g = run(&mut ctx, &Prompt::Tokens(tokens.clone()), &opts);
        assert_eq!(g.stop_reason, StopReason::EndOfGeneration, "{:?}", g.text);
        let out = parse_output(&prepared.output, &g.text);
        assert_eq!(out.tool_calls.len(), 1, "{:?}", g.text);
        let call = &out.tool_calls[0];
        assert_eq!(call.name, "get_weather");
        assert!(validator.is_valid(&call.arguments), "{:?}", call.arguments);
        assert!(call.id.starts_with("call_"));
    }
}

/// A lazy constraint starts where its trigger appears: the greedy output up to the trigger is
/// what it was unconstrained, and what follows matches the constraint.
#[test]
fn a_lazy_constraint_starts_at_its_trigger() {
    use tessera_llm::chat::LazyConstraint;
    let mut ctx = context();
    let prompt = ask("Write one sentence about the sea.");
    let greedy = GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: 6,
        ..GenerateOptions::default()
    };
    let free = run(&mut ctx, &prompt, &greedy);
    let tok = gemma();
    let tok = tok.tokenizer();
    // The trigger: the text of the free output's third token.
    let trigger = tok.decode(&free.tokens[2..3], false).unwrap();
    assert!(!trigger.is_empty());
    let opts = GenerateOptions {
        max_tokens: 20,
        lazy_constraint: Some(LazyConstraint {
            triggers: vec![trigger.clone()],
            constraint: OutputConstraint::Regex(" (yes|no)\\.".into()),
        }),
        ..greedy
    };
    let g = run(&mut ctx, &prompt, &opts);
    let head = tok.decode(&free.tokens[..3], false).unwrap();
    let rest = g.text.strip_prefix(&head).unwrap_or_else(|| panic!("{:?} vs {head:?}", g.text));
    assert!(rest == " yes." || rest == " no.", "{:?} after the trigger {trigger:?}", rest);
    assert_eq!(g.stop_reason, StopReason::EndOfGeneration);
}

/// A thinking budget: after that many tokens of reasoning the closing tag is written for the
/// model, and generation goes on after it.
#[test]
fn a_thinking_budget_closes_the_reasoning() {
    use tessera_llm::ThinkingBudget;
    let mut ctx = context();
    let model = gemma();
    let tok = model.tokenizer();
    let close = tok.encode("\n</think>\n\n", false, true);
    for budget in [0, 5] {
        let opts = GenerateOptions {
            sampling: SamplingParams::greedy(),
            max_tokens: budget + close.len() + 4,
            ignore_eos: true,
            thinking_budget: Some(ThinkingBudget { tokens: budget, starts_inside: true }),
            ..GenerateOptions::default()
        };
        let g = run(&mut ctx, &ask("Think about the number seven."), &opts);
        assert_eq!(&g.tokens[budget..budget + close.len()], close.as_slice(), "budget {budget}");
        assert!(!tok.decode(&g.tokens[..budget], false).unwrap().contains("</think>"));
        assert_eq!(g.tokens.len(), budget + close.len() + 4, "generation goes on after it");
    }
}

/// A JSON constraint cuts a run of digits at 16 when anything else may follow (llama.cpp's
/// JSON grammars do the same); a regex constraint is left as written.
#[test]
fn json_digit_runs_stop_at_sixteen() {
    use tessera_llm::constraint::MAX_JSON_DIGITS;
    let model = gemma();
    let tok = model.tokenizer();
    let vocab = model.constraint_vocab().unwrap();
    let digit_start =
        |id: u32| tok.decode(&[id], false).unwrap().starts_with(|c: char| c.is_ascii_digit());
    for (c, capped) in [
        (OutputConstraint::JsonSchema(json!({"type": "integer"})), true),
        (OutputConstraint::Regex("[0-9]+x".into()), false),
    ] {
        let mut tc = TokenConstraint::new(&vocab, &c).unwrap();
        let mut written = 0;
        for t in tok.encode(&"7".repeat(MAX_JSON_DIGITS), false, false) {
            tc.compute_mask().unwrap();
            assert!(tc.allows(t));
            tc.commit(t).unwrap();
            written += tok.decode(&[t], false).unwrap().len();
        }
        assert_eq!(written, MAX_JSON_DIGITS);
        let mask = tc.compute_mask().unwrap().to_vec();
        let allowed =
            |id: u32| mask.get(id as usize / 32).is_some_and(|w| w & (1 << (id % 32)) != 0);
        let digits_allowed =
            (0..tok.n_vocab() as u32).filter(|&id| allowed(id) && digit_start(id)).count();
        assert_eq!(digits_allowed == 0, capped, "{c:?}: {digits_allowed} digit tokens allowed");
        assert!((0..tok.n_vocab() as u32).any(|id| allowed(id) && !digit_start(id)));
    }
}
