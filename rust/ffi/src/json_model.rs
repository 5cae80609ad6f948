//! The model methods of the JSON protocol (docs/native-protocol.md): `loadModel`, `modelInfo`,
//! `tokenize`, `detokenize`, `applyChatTemplate`, `generate`, `cancelGeneration`, `embed`,
//! `rerank`, `releaseModel`. Loaded models live in a process-wide table under a number, as sessions do;
//! a released model's number answers `Closed`. Long calls emit events ([`crate::events`]) tagged
//! with the request's `requestId`.

use crate::error::{FfiResult, TesseraError};
use crate::events::{emit, Event};
use crate::gate::lock;
use crate::handles::{HandleTable, Names};
use crate::json_api::{Cancelled, Released};
use crate::model::{ChatTurn, GenerateRequest, GenerateResult, Model, ModelOptions};
use crate::protocol::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Loaded models by number.
static MODELS: Mutex<HandleTable<Arc<Model>>> =
    Mutex::new(HandleTable::new(Names { noun: "model", gone: "is released", unknown: "model" }));

/// Counts [`release_all_models`] calls: a load that began before one and ends after it is
/// ended too (its next progress step stops it; a model it loaded meanwhile is released).
static RELEASES: AtomicU64 = AtomicU64::new(0);

/// Closes every loaded model (waiting for their work) and empties the table, and ends the loads
/// in progress (they fail with `Cancelled`); returns how many models were closed. For a host's
/// teardown (a JS reload).
pub fn release_all_models() -> usize {
    // Before the table is emptied: a load that inserts its model after this sees it.
    RELEASES.fetch_add(1, Ordering::SeqCst);
    let all = lock(&MODELS).drain();
    for m in &all {
        m.close();
    }
    all.len()
}

/// The loaded model numbered `id`.
pub(crate) fn model(id: u64) -> FfiResult<Arc<Model>> {
    lock(&MODELS).get(id).cloned()
}

/// A call on a loaded model with its `params`. `requestId` (any JSON value) tags the events
/// of the call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ModelCall<P> {
    model: u64,
    params: P,
    #[serde(default)]
    request_id: Value,
}

impl<P> ModelCall<P> {
    /// The model's number and the parameters.
    pub(crate) fn into_parts(self) -> (u64, P) {
        (self.model, self.params)
    }
}

/// A call on a loaded model without parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ModelRef {
    model: u64,
    /// Accepted as on every model call; these calls emit no events.
    #[serde(default, rename = "requestId")]
    _request_id: serde::de::IgnoredAny,
}

/// `loadModel`: `{model, info}`; emits `loadProgress` events.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LoadModel {
    path: String,
    #[serde(default)]
    options: Option<ModelOptions>,
    #[serde(default)]
    request_id: Value,
}

/// A loaded model's number and what it is.
#[derive(Serialize)]
pub(crate) struct LoadedModel {
    model: u64,
    info: crate::model::ModelInfo,
}

impl Method for LoadModel {
    type Reply = LoadedModel;

    fn run(self) -> FfiResult<LoadedModel> {
        let mut last = -1i32;
        let request_id = &self.request_id;
        let options = self.options.unwrap_or_default();
        // `cancelLoad` with this requestId stops the load at its next progress step.
        let running = crate::requests::register(request_id);
        let releases = RELEASES.load(Ordering::SeqCst);
        let released = || RELEASES.load(Ordering::SeqCst) != releases;
        let model = Model::open(&self.path, &options, &mut |progress| {
            // Events at whole percents only.
            let pct = (progress * 100.0) as i32;
            if pct != last {
                last = pct;
                emit(&Event::LoadProgress { request_id, progress });
            }
            !running.cancelled() && !released()
        })?;
        let info = model.info();
        let mut table = lock(&MODELS);
        if released() {
            drop(table);
            model.close();
            return Err(TesseraError::Cancelled {
                message: "loadModel: ended by closeAllSessions (or releaseAllModels) while it \
                          loaded"
                    .into(),
            });
        }
        Ok(LoadedModel { model: table.insert(Arc::new(model)), info })
    }
}

/// `modelInfo`: the model's `info`.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct ModelInfo(ModelRef);

impl Method for ModelInfo {
    type Reply = crate::model::ModelInfo;

    fn run(self) -> FfiResult<crate::model::ModelInfo> {
        Ok(model(self.0.model)?.info())
    }
}

/// `tokenize`: `{tokens}`.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Tokenize(ModelCall<TokenizeParams>);

/// The parameters of `tokenize`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TokenizeParams {
    text: String,
    #[serde(default = "yes")]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
}

fn yes() -> bool {
    true
}

/// Token ids.
#[derive(Serialize)]
pub(crate) struct Tokens {
    tokens: Vec<u32>,
}

impl Method for Tokenize {
    type Reply = Tokens;

    fn run(self) -> FfiResult<Tokens> {
        let ModelCall { model: id, params: p, .. } = self.0;
        Ok(Tokens { tokens: model(id)?.tokenize(p.text, p.add_special, p.parse_special)? })
    }
}

/// `detokenize`: `{text}`.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Detokenize(ModelCall<DetokenizeParams>);

/// The parameters of `detokenize`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DetokenizeParams {
    tokens: Vec<u32>,
    #[serde(default)]
    special: bool,
}

/// A text.
#[derive(Serialize)]
pub(crate) struct Text {
    text: String,
}

impl Method for Detokenize {
    type Reply = Text;

    fn run(self) -> FfiResult<Text> {
        let ModelCall { model: id, params: p, .. } = self.0;
        Ok(Text { text: model(id)?.detokenize(p.tokens, p.special)? })
    }
}

/// `applyChatTemplate`: `{prompt}`.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct ApplyChatTemplate(ModelCall<TemplateParams>);

/// The parameters of `applyChatTemplate`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TemplateParams {
    messages: Vec<ChatTurn>,
    #[serde(default = "yes")]
    add_generation_prompt: bool,
}

/// A rendered prompt.
#[derive(Serialize)]
pub(crate) struct RenderedPrompt {
    prompt: String,
}

impl Method for ApplyChatTemplate {
    type Reply = RenderedPrompt;

    fn run(self) -> FfiResult<RenderedPrompt> {
        let ModelCall { model: id, params: p, .. } = self.0;
        let prompt = model(id)?.apply_chat_template(p.messages, p.add_generation_prompt)?;
        Ok(RenderedPrompt { prompt })
    }
}

/// `generate`: the [`GenerateResult`]; emits `token` events. (The request is boxed: it is
/// the protocol's largest by far.)
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Generate(ModelCall<Box<GenerateRequest>>);

impl Method for Generate {
    type Reply = GenerateResult;

    fn run(self) -> FfiResult<GenerateResult> {
        let ModelCall { model: id, params, request_id } = self.0;
        model(id)?.generate_with(&params, &mut |token| {
            emit(&Event::Token { request_id: &request_id, token });
            true
        })
    }
}

/// `cancelGeneration`: `{cancelled: true}`. With `params: {sequence}`, the generation of that
/// sequence only; without, every sequence's and the embedding in progress.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CancelGeneration {
    model: u64,
    #[serde(default)]
    params: Option<CancelParams>,
    /// Accepted as on every model call; this call emits no events.
    #[serde(default, rename = "requestId")]
    _request_id: serde::de::IgnoredAny,
}

/// The parameters of `cancelGeneration`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelParams {
    #[serde(default)]
    sequence: Option<u32>,
}

impl Method for CancelGeneration {
    type Reply = Cancelled;

    fn run(self) -> FfiResult<Cancelled> {
        let m = model(self.model)?;
        match self.params.unwrap_or_default().sequence {
            Some(s) => m.cancel_sequence(s)?,
            None => m.cancel(),
        }
        Ok(Cancelled { cancelled: true })
    }
}

/// `embed`: `{embeddings}`.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Embed(ModelCall<EmbedParams>);

/// The parameters of `embed`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbedParams {
    texts: Vec<String>,
    #[serde(default)]
    pooling: Option<String>,
}

/// One vector per text.
#[derive(Serialize)]
pub(crate) struct Embeddings {
    embeddings: Vec<Vec<f32>>,
}

impl Method for Embed {
    type Reply = Embeddings;

    fn run(self) -> FfiResult<Embeddings> {
        let ModelCall { model: id, params: p, request_id } = self.0;
        let total = p.texts.len();
        let embeddings = model(id)?.embed_with(&p.texts, p.pooling.as_deref(), &mut |done| {
            emit(&Event::EmbedProgress { request_id: &request_id, done, total })
        })?;
        Ok(Embeddings { embeddings })
    }
}

/// `rerank`: `{results: [{index, score}]}`, highest score first.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Rerank(ModelCall<RerankParams>);

/// The parameters of `rerank`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RerankParams {
    query: String,
    documents: Vec<String>,
    #[serde(default)]
    normalize: bool,
}

/// Documents by relevance.
#[derive(Serialize)]
pub(crate) struct Reranked {
    results: Vec<crate::model::RerankResult>,
}

impl Method for Rerank {
    type Reply = Reranked;

    fn run(self) -> FfiResult<Reranked> {
        let ModelCall { model: id, params: p, .. } = self.0;
        Ok(Reranked { results: model(id)?.rerank(p.query, p.documents, p.normalize)? })
    }
}

/// `releaseModel`: `{released: true}`; releasing twice is fine.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct ReleaseModel(ModelRef);

impl Method for ReleaseModel {
    type Reply = Released;

    fn run(self) -> FfiResult<Released> {
        let removed = lock(&MODELS).remove(self.0.model)?;
        // Waits for the generation in flight, cancelled.
        if let Some(m) = removed {
            m.close();
        }
        Ok(Released { released: true })
    }
}
