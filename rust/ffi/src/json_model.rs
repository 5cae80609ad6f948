//! The model methods of the JSON protocol (docs/native-protocol.md): `loadModel`, `modelInfo`,
//! `tokenize`, `detokenize`, `applyChatTemplate`, `generate`, `cancelGeneration`, `embed`,
//! `releaseModel`. Loaded models live in a process-wide table under a number, as sessions do;
//! a released model's number answers `Closed`. Long calls emit events ([`crate::events`]) tagged
//! with the request's `requestId`.

use crate::error::TesseraError;
use crate::events::emit;
use crate::model::{
    ChatTurn, GenerateRequest, GenerateResult, LogitBias, Model, ModelInfo, ModelOptions,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

type Reply = Result<Value, TesseraError>;

fn bad(message: impl Into<String>) -> TesseraError {
    TesseraError::invalid_argument(message)
}

struct Models {
    next: u64,
    open: HashMap<u64, Arc<Model>>,
}

fn models() -> MutexGuard<'static, Models> {
    static MODELS: OnceLock<Mutex<Models>> = OnceLock::new();
    MODELS
        .get_or_init(|| Mutex::new(Models { next: 1, open: HashMap::new() }))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Closes every loaded model (waiting for their work) and empties the table; returns how many
/// there were. For a host's teardown (a JS reload).
pub fn release_all_models() -> usize {
    let all: Vec<Arc<Model>> = models().open.drain().map(|(_, m)| m).collect();
    for m in &all {
        m.close();
    }
    all.len()
}

fn model_of(request: &Map<String, Value>) -> Result<Arc<Model>, TesseraError> {
    let v = request.get("model").ok_or_else(|| bad("missing \"model\""))?;
    let id = v.as_u64().ok_or_else(|| bad(format!("\"model\" must be a model number, got {v}")))?;
    let table = models();
    match table.open.get(&id) {
        Some(m) => Ok(m.clone()),
        None if id >= 1 && id < table.next => {
            Err(TesseraError::Closed { message: format!("model {id} is released") })
        }
        None => Err(bad(format!("unknown model {id}"))),
    }
}

/// The request's `params` object as `T` (an absent one as `{}`), unknown keys refused.
fn params<T: for<'de> Deserialize<'de>>(v: Option<&Value>, what: &str) -> Result<T, TesseraError> {
    let v = v.cloned().unwrap_or_else(|| json!({}));
    tessera_core::document::from_value(v).map_err(|e| bad(format!("{what}: {e}")))
}

fn request_id(request: &Map<String, Value>) -> Value {
    request.get("requestId").cloned().unwrap_or(Value::Null)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LoadOptions {
    #[serde(default = "auto")]
    device: String,
    #[serde(default)]
    threads: Option<u32>,
    #[serde(default)]
    n_ctx: Option<u32>,
    #[serde(default = "default_batch")]
    n_batch: u32,
}

fn auto() -> String {
    "auto".into()
}

fn default_batch() -> u32 {
    512
}

fn info_json(i: &ModelInfo) -> Value {
    json!({
        "architecture": i.architecture, "name": i.name, "nParams": i.n_params,
        "sizeBytes": i.size_bytes, "quantization": i.quantization, "nCtxTrain": i.n_ctx_train,
        "nCtx": i.n_ctx, "nVocab": i.n_vocab, "nEmbd": i.n_embd, "nLayer": i.n_layer,
        "device": i.device, "hasChatTemplate": i.has_chat_template, "mappedBytes": i.mapped_bytes,
    })
}

fn load_model(request: &Map<String, Value>) -> Reply {
    let path = request
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("loadModel: \"path\" must be a string"))?;
    let o: LoadOptions = params(request.get("options"), "loadModel options")?;
    let options =
        ModelOptions { device: o.device, threads: o.threads, n_ctx: o.n_ctx, n_batch: o.n_batch };
    let rid = request_id(request);
    // `cancelLoad` with this requestId stops the load at its next progress step.
    let running = crate::requests::register(&rid);
    let mut last = -1i32;
    let model = Model::open(path, &options, &mut |f| {
        // Events at whole percents only.
        let pct = (f * 100.0) as i32;
        if pct != last {
            last = pct;
            emit(&json!({"type": "loadProgress", "requestId": rid, "progress": f}));
        }
        !running.cancelled()
    })?;
    let info = info_json(&model.info());
    let mut table = models();
    let id = table.next;
    table.next += 1;
    table.open.insert(id, Arc::new(model));
    Ok(json!({"model": id, "info": info}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TokenizeParams {
    text: String,
    #[serde(default = "yes")]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeParams {
    tokens: Vec<u32>,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TemplateParams {
    messages: Vec<Turn>,
    #[serde(default = "yes")]
    add_generation_prompt: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    role: String,
    content: String,
}

impl From<Turn> for ChatTurn {
    fn from(t: Turn) -> ChatTurn {
        ChatTurn { role: t.role, content: t.content }
    }
}

/// A bias entry: `[token, bias]`, with `false` for a ban.
#[derive(Deserialize)]
#[serde(untagged)]
enum BiasValue {
    Number(f32),
    Ban(bool),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GenerateParams {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Turn>>,
    #[serde(default = "max_tokens")]
    max_tokens: u32,
    #[serde(default)]
    stop: Vec<String>,
    #[serde(default = "temperature")]
    temperature: f32,
    #[serde(default = "top_k")]
    top_k: u32,
    #[serde(default = "top_p")]
    top_p: f32,
    #[serde(default = "min_p")]
    min_p: f32,
    #[serde(default = "one")]
    typical_p: f32,
    #[serde(default = "one")]
    repeat_penalty: f32,
    #[serde(default)]
    frequency_penalty: f32,
    #[serde(default)]
    presence_penalty: f32,
    #[serde(default = "penalty_last_n")]
    penalty_last_n: u32,
    #[serde(default)]
    logit_bias: Vec<(u32, BiasValue)>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    ignore_eos: bool,
}

fn max_tokens() -> u32 {
    256
}
fn temperature() -> f32 {
    0.8
}
fn top_k() -> u32 {
    40
}
fn top_p() -> f32 {
    0.95
}
fn min_p() -> f32 {
    0.05
}
fn one() -> f32 {
    1.0
}
fn penalty_last_n() -> u32 {
    64
}

fn result_json(r: &GenerateResult) -> Value {
    let t = &r.timings;
    json!({
        "text": r.text, "tokens": r.tokens, "promptTokens": r.prompt_tokens,
        "stopReason": r.stop_reason,
        "timings": {
            "promptN": t.prompt_n, "promptMs": t.prompt_ms, "promptPerSecond": t.prompt_per_second,
            "predictedN": t.predicted_n, "predictedMs": t.predicted_ms,
            "predictedPerSecond": t.predicted_per_second, "cachedN": t.cached_n,
        },
    })
}

fn generate(request: &Map<String, Value>) -> Reply {
    let model = model_of(request)?;
    let p: GenerateParams = params(request.get("params"), "generate params")?;
    let r = GenerateRequest {
        prompt: p.prompt,
        messages: p.messages.map(|m| m.into_iter().map(ChatTurn::from).collect()),
        max_tokens: p.max_tokens,
        stop: p.stop,
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        typical_p: p.typical_p,
        repeat_penalty: p.repeat_penalty,
        frequency_penalty: p.frequency_penalty,
        presence_penalty: p.presence_penalty,
        penalty_last_n: p.penalty_last_n,
        logit_bias: p
            .logit_bias
            .into_iter()
            .map(|(token, v)| match v {
                BiasValue::Number(bias) => Ok(LogitBias { token, bias }),
                BiasValue::Ban(false) => Ok(LogitBias { token, bias: f32::NEG_INFINITY }),
                BiasValue::Ban(true) => Err(bad("logitBias: a bias is a number, or false to ban")),
            })
            .collect::<Result<_, _>>()?,
        seed: p.seed,
        ignore_eos: p.ignore_eos,
    };
    let rid = request_id(request);
    let result = model.generate_with(&r, &mut |token, text| {
        emit(&json!({"type": "token", "requestId": rid, "token": token, "text": text}));
        true
    })?;
    Ok(result_json(&result))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbedParams {
    texts: Vec<String>,
    #[serde(default)]
    pooling: Option<String>,
}

/// Handles `method` if it is a model method; `None` otherwise.
pub(crate) fn dispatch(method: &str, request: &Map<String, Value>) -> Option<Reply> {
    Some(match method {
        "loadModel" => load_model(request),
        "modelInfo" => model_of(request).map(|m| info_json(&m.info())),
        "tokenize" => (|| {
            let m = model_of(request)?;
            let p: TokenizeParams = params(request.get("params"), "tokenize params")?;
            Ok(json!({"tokens": m.tokenize(p.text, p.add_special, p.parse_special)?}))
        })(),
        "detokenize" => (|| {
            let m = model_of(request)?;
            let p: DetokenizeParams = params(request.get("params"), "detokenize params")?;
            Ok(json!({"text": m.detokenize(p.tokens, p.special)?}))
        })(),
        "applyChatTemplate" => (|| {
            let m = model_of(request)?;
            let p: TemplateParams = params(request.get("params"), "applyChatTemplate params")?;
            let turns = p.messages.into_iter().map(ChatTurn::from).collect();
            Ok(json!({"prompt": m.apply_chat_template(turns, p.add_generation_prompt)?}))
        })(),
        "generate" => generate(request),
        "cancelGeneration" => model_of(request).map(|m| {
            m.cancel();
            json!({"cancelled": true})
        }),
        "embed" => (|| {
            let m = model_of(request)?;
            let p: EmbedParams = params(request.get("params"), "embed params")?;
            Ok(json!({"embeddings": m.embed(p.texts, p.pooling)?}))
        })(),
        "releaseModel" => (|| {
            let m = match model_of(request) {
                Ok(m) => m,
                // Releasing twice is fine.
                Err(TesseraError::Closed { .. }) => return Ok(json!({"released": true})),
                Err(e) => return Err(e),
            };
            let id = request.get("model").and_then(Value::as_u64).unwrap_or(0);
            models().open.remove(&id);
            m.close();
            Ok(json!({"released": true}))
        })(),
        _ => return None,
    })
}
