//! `tessera bench constrained MODEL [-n 128] [-t 1,2] [--schema FILE] [--vocab VOCAB.gguf ..]`:
//! generation under a JSON Schema against the same generation unconstrained (tokens per second
//! side by side, their ratio, and the mask time per token), per thread count; then, for each
//! `--vocab` file (a GGUF holding a vocabulary, e.g. llama.cpp's `ggml-vocab-qwen2.gguf`, 151,936
//! tokens), the mask time per token of replaying a document that matches the schema, token by
//! token, over that vocabulary. `-n 0` leaves the generation comparison out.

use crate::llm::load_for_bench;
use std::time::Instant;
use tessera_core::registry::Registry;
use tessera_llm::chat::ChatMessage;
use tessera_llm::constraint::{ConstraintVocab, OutputConstraint, TokenConstraint};
use tessera_llm::sampling::SamplingParams;
use tessera_llm::tokenizer::Tokenizer;
use tessera_llm::{generate, Context, ContextOptions, DeviceChoice, GenerateOptions, Prompt};

/// The schema measured unless `--schema` names another: a list of records long enough that
/// the model writes `-n` tokens before it closes.
fn default_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "array",
        "minItems": 40,
        "items": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "city": {"type": "string", "maxLength": 24},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}
            },
            "required": ["name", "age", "city", "tags"],
            "additionalProperties": false
        }
    })
}

/// A document matching [`default_schema`], for the replay over other vocabularies.
fn default_document() -> String {
    let rows: Vec<String> = (0..40)
        .map(|i| {
            format!(
                "{{\"name\": \"Person number {i}\", \"age\": {}, \"city\": \"City {}\", \"tags\": [\"a\", \"c\"]}}",
                20 + i,
                i * 7
            )
        })
        .collect();
    format!("[{}]", rows.join(", "))
}

struct Args {
    model: String,
    tg: usize,
    threads: Vec<usize>,
    schema: Option<String>,
    vocabs: Vec<String>,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a =
        Args { model: String::new(), tg: 128, threads: vec![1, 2], schema: None, vocabs: vec![] };
    let mut i = 0;
    let value = |i: &mut usize, name: &str| -> Result<String, String> {
        *i += 1;
        args.get(*i).cloned().ok_or_else(|| format!("{name} needs a value"))
    };
    while i < args.len() {
        match args[i].as_str() {
            "-n" => {
                a.tg = value(&mut i, "-n")?.parse().map_err(|_| "-n: not a number".to_string())?
            }
            "-t" => {
                a.threads = value(&mut i, "-t")?
                    .split(',')
                    .map(|t| t.trim().parse::<usize>().ok().filter(|&n| n > 0))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("-t: list thread counts of at least 1")?
            }
            "--schema" => a.schema = Some(value(&mut i, "--schema")?),
            "--vocab" => a.vocabs.push(value(&mut i, "--vocab")?),
            other if a.model.is_empty() && !other.starts_with('-') => a.model = other.into(),
            other => return Err(format!("bench constrained: unknown argument {other:?}")),
        }
        i += 1;
    }
    if a.model.is_empty() {
        return Err("bench constrained: which model? (tessera bench constrained MODEL.gguf)".into());
    }
    Ok(a)
}

/// Runs the benchmark (see the module doc).
pub fn run(reg: &Registry, args: &[String]) -> Result<(), String> {
    let a = parse_args(args)?;
    let schema = match &a.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?
        }
        None => default_schema(),
    };
    let model = load_for_bench(reg, &a.model, &DeviceChoice::Auto)?;
    let tier = tessera_cpu::kernels::active_tier().name();
    let t0 = Instant::now();
    model.constraint_vocab().map_err(|e| e.to_string())?;
    println!(
        "constraint vocabulary of {} tokens built in {:.0} ms",
        model.hparams().n_vocab,
        t0.elapsed().as_secs_f64() * 1e3
    );
    let prompt = Prompt::Messages(vec![ChatMessage::new(
        "user",
        "List forty people with their name, age, city and tags, as JSON.",
    )]);
    println!(
        "| cpu | tier | threads | unconstrained t/s | json schema t/s | ratio | mask ms/token |"
    );
    println!("|---|---|---|---|---|---|---|");
    // `-n 0`: only the mask replays.
    let threads: &[usize] = if a.tg == 0 { &[] } else { &a.threads };
    for &threads in threads {
        let opts = ContextOptions {
            n_ctx: 1024,
            n_batch: 256,
            threads: Some(threads),
            ..ContextOptions::default()
        };
        let mut ctx = Context::new(model.clone(), reg, &opts).map_err(|e| e.to_string())?;
        let sampling = SamplingParams { seed: Some(1), ..SamplingParams::default() };
        let free = GenerateOptions {
            sampling: sampling.clone(),
            max_tokens: a.tg,
            ignore_eos: true,
            ..GenerateOptions::default()
        };
        let constrained = GenerateOptions {
            sampling,
            max_tokens: a.tg,
            constraint: Some(OutputConstraint::JsonSchema(schema.clone())),
            ..GenerateOptions::default()
        };
        let err = |e: tessera_llm::LlmError| e.to_string();
        // A warm-up, then each run twice in alternation; the better of each is kept.
        generate(&mut ctx, &prompt, &free, &mut |_| true).map_err(err)?;
        let (mut best_free, mut best_json, mut mask_per_token) = (0.0f64, 0.0f64, 0.0f64);
        for _ in 0..2 {
            ctx.clear();
            let g = generate(&mut ctx, &prompt, &free, &mut |_| true).map_err(err)?;
            best_free = best_free.max(g.timings.predicted_per_second());
            ctx.clear();
            let g = generate(&mut ctx, &prompt, &constrained, &mut |_| true).map_err(err)?;
            let tps = g.timings.predicted_per_second();
            if tps > best_json {
                best_json = tps;
                mask_per_token = g.timings.constraint_ms / g.timings.constraint_masks.max(1) as f64;
            }
        }
        println!(
            "| {} | {tier} | {threads} | {best_free:.1} | {best_json:.1} | {:.3} | {mask_per_token:.3} |",
            tessera_cpu::features::cpu_description(),
            best_json / best_free
        );
    }
    let document = default_document();
    for path in &a.vocabs {
        let file = tessera_gguf::GgufFile::open(path).map_err(|e| format!("{path}: {e}"))?;
        let tok = Tokenizer::from_gguf(&file).map_err(|e| format!("{path}: {e}"))?;
        replay(path, &tok, &default_schema(), &document)?;
    }
    replay("the model's vocabulary", model.tokenizer(), &default_schema(), &document)
}

/// The mask time per token of replaying `document` (tokenized by `tok`) under `schema`.
fn replay(
    name: &str,
    tok: &Tokenizer,
    schema: &serde_json::Value,
    document: &str,
) -> Result<(), String> {
    let t0 = Instant::now();
    let vocab = ConstraintVocab::new(tok).map_err(|e| e.to_string())?;
    let built_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut c = TokenConstraint::new(&vocab, &OutputConstraint::JsonSchema(schema.clone()))
        .map_err(|e| e.to_string())?;
    let tokens = tok.encode(document, false, false);
    let mut times = Vec::with_capacity(tokens.len());
    for &t in &tokens {
        let t1 = Instant::now();
        c.compute_mask().map_err(|e| e.to_string())?;
        times.push(t1.elapsed().as_secs_f64() * 1e6);
        if !c.allows(t) {
            return Err(format!("{name}: the replayed document's token {t} is not allowed"));
        }
        c.commit(t).map_err(|e| e.to_string())?;
    }
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    println!(
        "{name}: {} tokens, trie built in {built_ms:.0} ms; mask per token over {} tokens: mean {mean:.0} us, median {:.0} us, max {:.0} us",
        vocab.n_vocab(),
        tokens.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    Ok(())
}
