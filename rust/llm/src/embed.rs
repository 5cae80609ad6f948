//! Embeddings and reranking: an [`Embedder`] runs a model over one whole text at a time and
//! pools the tokens' final hidden states into one vector (llama.cpp's `build_pooling`: the mean,
//! the CLS token's, the last token's), with the heads after pooling (EmbeddingGemma's dense
//! projections; a reranker's classification head, whose first output is the relevance score).
//!
//! An embedder has no KV cache: each text is one batch whose tokens attend to each other
//! (causally in a decoder, both ways in BERT and EmbeddingGemma, within the window in
//! sliding-window layers), so its memory is that of one graph of at most `n_ctx` tokens, and it
//! shares nothing but the weights with the model's [`crate::Context`]s: embedding a text leaves
//! a conversation's cache as it was.

use crate::context::{compute, i32_bytes, model_scheduler};
use crate::error::{LlmError, Result};
use crate::finite::check_finite;
use crate::forward::{self, ForwardGraph, GraphShape, ModelRef};
use crate::hparams::SwaType;
use crate::kv_cache::F16_NEG_INF;
use crate::model::Model;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tessera_core::registry::Registry;
use tessera_core::sched::{EvalCallback, Scheduler};
use tessera_core::tensor_data::{read_f32_into, set_tensor};

/// How the tokens' hidden states become one vector (llama.cpp's `llama_pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// The average over the tokens.
    Mean,
    /// The last token's.
    Last,
    /// The first token's (BERT's CLS).
    First,
    /// A reranker's: the CLS token's state through the classification head, whose outputs
    /// are scores (see [`Embedder::rerank`]).
    Rank,
}

impl Pooling {
    /// `"mean"`, `"last"`, `"first"` (or `"cls"`); rank pooling is [`Embedder::rerank`]'s.
    pub fn parse(s: &str) -> Result<Pooling> {
        match s.to_ascii_lowercase().as_str() {
            "mean" => Ok(Pooling::Mean),
            "last" => Ok(Pooling::Last),
            "first" | "cls" => Ok(Pooling::First),
            other => Err(LlmError::InvalidArgument(format!(
                "pooling {other:?} is not one of mean, last, first"
            ))),
        }
    }
}

/// How to create an [`Embedder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedOptions {
    /// Most tokens of one text (the graph's memory grows with it; at most the model's training
    /// context).
    pub n_ctx: usize,
    /// CPU threads; `None` for the device's default (the performance cores).
    pub threads: Option<usize>,
}

impl Default for EmbedOptions {
    fn default() -> EmbedOptions {
        EmbedOptions { n_ctx: 512, threads: None }
    }
}

/// Runs a model for embeddings and reranking (see the module doc).
pub struct Embedder {
    model: Arc<Model>,
    scheduler: Scheduler,
    current: Option<ForwardGraph>,
    n_ctx: usize,
    cancel: Arc<AtomicBool>,
    builds: usize,
}

impl Embedder {
    /// An embedder for `model` with backends from `registry`.
    pub fn new(model: Arc<Model>, registry: &Registry, options: &EmbedOptions) -> Result<Embedder> {
        let hp = model.hparams();
        if options.n_ctx == 0 || options.n_ctx > hp.n_ctx_train.max(1) {
            return Err(LlmError::InvalidArgument(format!(
                "n_ctx {} must be between 1 and the model's training context {}",
                options.n_ctx, hp.n_ctx_train
            )));
        }
        let (scheduler, cancel) = model_scheduler(&model, registry, options.threads)?;
        Ok(Embedder { model, scheduler, current: None, n_ctx: options.n_ctx, cancel, builds: 0 })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Most tokens of one text.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Graphs built so far (one per text length met in a row).
    pub fn graphs_built(&self) -> usize {
        self.builds
    }

    /// The pooling the model's metadata names (`pooling_type`), mean when it names none.
    pub fn default_pooling(&self) -> Pooling {
        self.model.hparams().embedding.pooling.unwrap_or(Pooling::Mean)
    }

    /// A flag that stops the embedding in progress (with [`LlmError::Cancelled`]) when set;
    /// every call clears it when it starts.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Sets or clears a callback run after each node of every later compute (as
    /// [`crate::Context::set_eval_callback`]).
    pub fn set_eval_callback(&mut self, callback: Option<EvalCallback>) {
        self.scheduler.set_eval_callback(callback);
    }

    /// The tokens an embedding of `text` reads: llama.cpp's (`add_special` and
    /// `parse_special`, as its server and `llama-embedding` tokenize).
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        self.model.tokenizer().encode(text, true, true)
    }

    /// The embedding of `text` with the model's own pooling ([`Embedder::default_pooling`]).
    pub fn embed_text(&mut self, text: &str) -> Result<Vec<f32>> {
        let tokens = self.tokens(text);
        let pooling = self.default_pooling();
        self.embed(&tokens, pooling)
    }

    /// The embedding of `tokens` pooled by `pooling`, with the heads after pooling the model
    /// has, L2-normalized (llama.cpp's default normalization of embeddings).
    pub fn embed(&mut self, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>> {
        if pooling == Pooling::Rank {
            return Err(LlmError::InvalidArgument(
                "rank pooling gives relevance scores, not an embedding: use rerank".into(),
            ));
        }
        self.cancel.store(false, Ordering::Relaxed);
        let v = self.run(tokens, pooling)?;
        let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        Ok(v.iter().map(|&x| (f64::from(x) * scale) as f32).collect())
    }

    /// The input of a (query, document) pair, as llama.cpp's server builds it for a reranker
    /// without a rerank template (`format_prompt_rerank`): both texts tokenized without
    /// special tokens, then BOS, the query, EOS, SEP, the document, EOS, each special token
    /// where the vocabulary's `add_bos` / `add_eos` / `add_sep` say (SEP stands in for a
    /// missing EOS).
    pub fn rerank_tokens(&self, query: &str, document: &str) -> Vec<u32> {
        let tok = self.model.tokenizer();
        let eos = tok.eos().or(tok.sep());
        let mut out = Vec::new();
        if tok.add_bos() {
            out.extend(tok.bos());
        }
        out.extend(tok.encode(query, false, false));
        if tok.add_eos() {
            out.extend(eos);
        }
        if tok.add_sep() {
            out.extend(tok.sep());
        }
        out.extend(tok.encode(document, false, false));
        if tok.add_eos() {
            out.extend(eos);
        }
        out
    }

    /// The relevance score of each document to `query` (in the documents' order), as
    /// llama.cpp computes them: the first output of the classification head over the pair's
    /// input ([`Embedder::rerank_tokens`]) under rank pooling, not normalized. The model must
    /// be a reranker: rank pooling in its metadata and a classification head (`cls` /
    /// `cls.output`).
    pub fn rerank(&mut self, query: &str, documents: &[&str]) -> Result<Vec<f32>> {
        let hp = self.model.hparams();
        let head = &self.model.tensors().head;
        if hp.embedding.pooling != Some(Pooling::Rank)
            || (head.cls.is_none() && head.cls_out.is_none())
        {
            return Err(LlmError::InvalidArgument(format!(
                "the {} model is not a reranker (it needs pooling_type 4, rank, and a \
                 classification head cls / cls.output)",
                hp.arch
            )));
        }
        self.cancel.store(false, Ordering::Relaxed);
        let mut scores = Vec::with_capacity(documents.len());
        for doc in documents {
            let tokens = self.rerank_tokens(query, doc);
            scores.push(self.run(&tokens, Pooling::Rank)?[0]);
        }
        Ok(scores)
    }

    /// Runs `tokens` as one batch and returns the pooled row.
    fn run(&mut self, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>> {
        let hp = self.model.hparams();
        let n = tokens.len();
        if n == 0 {
            return Err(LlmError::EmptyInput("no tokens to embed".into()));
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= hp.n_vocab) {
            return Err(LlmError::TokenOutOfRange { id, n_vocab: hp.n_vocab });
        }
        if n > self.n_ctx {
            return Err(LlmError::ContextFull { needed: n, used: 0, n_ctx: self.n_ctx });
        }
        let shape = GraphShape {
            n_tokens: n,
            n_kv: [n, n],
            n_outputs: n,
            embeddings: true,
            pooling: Some(pooling),
        };
        if self.current.as_ref().is_none_or(|g| g.shape != shape) {
            self.current = None;
            let m = ModelRef { hp, tensors: self.model.tensors(), weights: self.model.weights() };
            let mut fg = forward::build(&m, None, self.n_ctx, shape)?;
            self.scheduler.alloc_graph(&mut fg.graph)?;
            self.builds += 1;
            self.current = Some(fg);
        }
        let fg =
            self.current.as_ref().ok_or_else(|| LlmError::InvalidArgument("no graph".into()))?;
        let g = &fg.graph;
        set_tensor(g, fg.tokens, &i32_bytes(tokens.iter().map(|&t| t as i32)))?;
        set_tensor(g, fg.positions, &i32_bytes(0..n as i32))?;
        for (kind, &mask) in fg.masks.iter().enumerate() {
            let window = (kind == 1).then_some((hp.swa_type, hp.n_swa));
            set_tensor(g, mask, &batch_mask(n, hp.causal, window))?;
        }
        set_tensor(g, fg.out_rows, &i32_bytes(0..n as i32))?;
        if let Some(mean) = fg.mean {
            let w = 1.0f32 / n as f32;
            let bytes: Vec<u8> = (0..n).flat_map(|_| w.to_le_bytes()).collect();
            set_tensor(g, mean, &bytes)?;
        }
        if let Some(cls) = fg.cls {
            let row = match crate::blocks::rows_pooled(pooling, hp) {
                Pooling::Last => n - 1,
                _ => 0,
            };
            set_tensor(g, cls, &(row as i32).to_le_bytes())?;
        }
        compute(&self.model, &mut self.scheduler, &self.cancel)?;
        let mut out = Vec::new();
        read_f32_into(g, fg.result, &mut out)?;
        let width = g.tensor(fg.result).ne()[0];
        check_finite(&mut self.scheduler, &out, width, "embeddings")?;
        Ok(out)
    }
}

/// The attention mask of one sequence of `n` tokens at positions `0..n` attending to itself,
/// F16 bytes `[n, n]` (a row per query): a key is visible unless it is in the future of a
/// `causal` model's query or, in a sliding-window layer (`window`: its kind and size), outside
/// the window (llama.cpp's `llm_graph_input_attn_no_cache::set_input` with `is_masked_swa`).
fn batch_mask(n: usize, causal: bool, window: Option<(SwaType, usize)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * n * n);
    for q in 0..n as i64 {
        for p in 0..n as i64 {
            let future = causal && p > q;
            let outside = match window {
                Some((SwaType::Standard, w)) => q - p >= w as i64,
                Some((SwaType::Symmetric, w)) => (q - p).abs() > (w / 2) as i64,
                None => false,
            };
            let bits = if future || outside { F16_NEG_INF } else { 0 };
            out.extend_from_slice(&bits.to_le_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys each query sees, from mask bytes.
    fn visible(mask: &[u8], n: usize) -> Vec<Vec<usize>> {
        let bits: Vec<u16> =
            mask.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        (0..n).map(|q| (0..n).filter(|&p| bits[q * n + p] == 0).collect()).collect()
    }

    #[test]
    fn masks_of_one_sequence() {
        // Bidirectional: every key.
        assert!(visible(&batch_mask(3, false, None), 3).iter().all(|v| v == &[0, 1, 2]));
        // Causal: the past and itself.
        assert_eq!(
            visible(&batch_mask(3, true, None), 3),
            vec![vec![0], vec![0, 1], vec![0, 1, 2]]
        );
        // Causal window of 2: itself and the key before.
        let w = Some((SwaType::Standard, 2));
        assert_eq!(visible(&batch_mask(3, true, w), 3), vec![vec![0], vec![0, 1], vec![1, 2]]);
        // EmbeddingGemma's symmetric window of 4: two keys on each side.
        let w = Some((SwaType::Symmetric, 4));
        let v = visible(&batch_mask(6, false, w), 6);
        assert_eq!(v[0], vec![0, 1, 2]);
        assert_eq!(v[3], vec![1, 2, 3, 4, 5]);
        assert_eq!(v[5], vec![3, 4, 5]);
    }

    #[test]
    fn pooling_names() {
        assert_eq!(Pooling::parse("CLS").unwrap(), Pooling::First);
        assert_eq!(Pooling::parse("mean").unwrap(), Pooling::Mean);
        assert!(Pooling::parse("rank").is_err(), "rank pooling is rerank's");
    }
}
