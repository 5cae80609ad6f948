//! A context runs a model: its KV cache, a scheduler over the model's device (and the CPU as
//! fallback), and the graph of the current batch shape.
//!
//! [`Context::decode`] processes tokens at the next positions, in batches of at most `n_batch`
//! tokens, and returns the logits (or hidden states) of the rows asked for. The graph of a batch
//! shape is built and allocated once and reused while the shape stays the same: in generation
//! (one token per step) that is [`crate::kv_cache::KV_PAD`] steps per graph.

use crate::error::{LlmError, Result};
use crate::finite::check_finite;
use crate::forward::{self, ForwardGraph, GraphShape, ModelRef};
use crate::kv_cache::{BatchPlan, CacheTypes, KvCache};
use crate::model::Model;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tessera_core::backend::{AbortCallback, BackendParams, DeviceType};
use tessera_core::registry::Registry;
use tessera_core::sched::{EvalCallback, Scheduler};
use tessera_core::tensor_data::{read_f32_into, set_tensor};

/// How to create a [`Context`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextOptions {
    /// Positions the KV cache holds (at most the model's training context).
    pub n_ctx: usize,
    /// Most tokens processed by one graph (prompts are split into batches of this size).
    pub n_batch: usize,
    /// CPU threads; `None` for the device's default (the performance cores).
    pub threads: Option<usize>,
    /// The KV cache's key and value types (F16 by default; Q8_0 or Q4_0 for a smaller cache).
    pub cache_types: CacheTypes,
}

impl Default for ContextOptions {
    fn default() -> ContextOptions {
        ContextOptions {
            n_ctx: 4096,
            n_batch: 512,
            threads: None,
            cache_types: CacheTypes::default(),
        }
    }
}

/// Which rows of a decoded batch to return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rows {
    /// The last token's row only (what generation needs).
    Last,
    /// Every token's row.
    All,
}

/// What a decode returns: one row of `width` values per token asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Values per row (the vocabulary for logits, `n_embd` for hidden states).
    pub width: usize,
    /// The rows, one after the other.
    pub values: Vec<f32>,
    /// The position of each row's token.
    pub positions: Vec<usize>,
}

impl Output {
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.width..(i + 1) * self.width]
    }

    /// The last row.
    pub fn last(&self) -> &[f32] {
        let n = self.values.len() / self.width.max(1);
        self.row(n.saturating_sub(1))
    }
}

/// A running model: the KV cache and the prepared graph (see the module doc).
pub struct Context {
    model: Arc<Model>,
    cache: KvCache,
    scheduler: Scheduler,
    current: Option<ForwardGraph>,
    n_batch: usize,
    cancel: Arc<AtomicBool>,
    builds: usize,
    /// The token at every position processed so far.
    history: Vec<u32>,
}

impl Context {
    /// A context for `model` with backends from `registry`.
    pub fn new(
        model: Arc<Model>,
        registry: &Registry,
        options: &ContextOptions,
    ) -> Result<Context> {
        let hp = model.hparams();
        if !hp.can_generate() {
            return Err(LlmError::InvalidArgument(format!(
                "{} is an embedding model: it has no context for generation (embed it with an \
                 embed::Embedder)",
                hp.arch
            )));
        }
        if options.n_ctx == 0 || options.n_ctx > hp.n_ctx_train.max(1) {
            return Err(LlmError::InvalidArgument(format!(
                "n_ctx {} must be between 1 and the model's training context {}",
                options.n_ctx, hp.n_ctx_train
            )));
        }
        if options.n_batch == 0 || options.n_batch > 1 << 16 {
            return Err(LlmError::InvalidArgument(format!(
                "n_batch {} must be between 1 and 65536",
                options.n_batch
            )));
        }
        let (scheduler, cancel) = model_scheduler(&model, registry, options.threads)?;
        let n_batch = options.n_batch.min(options.n_ctx);
        // Every device has kernels for every cache type (the GPU's SET_ROWS quantizes into Q8_0
        // / Q4_0 rows and its FLASH_ATTN_EXT dequantizes them): the cache lives on the model's
        // device.
        let types = options.cache_types;
        let device = model.device().clone();
        let cache = KvCache::new(hp, options.n_ctx, n_batch, types, &device)?;
        Ok(Context {
            model,
            cache,
            scheduler,
            current: None,
            n_batch,
            cancel,
            builds: 0,
            history: Vec::new(),
        })
    }

    /// Bytes of device memory the KV cache (and recurrent states) of a context of `model` with
    /// `options` takes: what [`Context::cache_bytes`] of such a context reports, known before
    /// it is made (nothing is allocated). The scheduler's compute buffers, sized by the graphs
    /// met, come on top.
    pub fn cache_bytes_for(model: &Model, options: &ContextOptions) -> Result<usize> {
        let n_batch = options.n_batch.min(options.n_ctx);
        KvCache::required_bytes(
            model.hparams(),
            options.n_ctx,
            n_batch,
            options.cache_types,
            model.device(),
        )
    }

    /// Bytes of device memory this context's KV cache (and recurrent states) holds: the sizes
    /// of its buffers.
    pub fn cache_bytes(&self) -> usize {
        self.cache.memory_bytes()
    }

    /// The KV cache's key and value types.
    pub fn cache_types(&self) -> CacheTypes {
        self.cache.types()
    }

    /// Bytes of K and V one position takes over every attention layer (see
    /// [`KvCache::bytes_per_token`]).
    pub fn kv_bytes_per_token(&self) -> usize {
        self.cache.bytes_per_token()
    }

    /// Bytes of the KV cache's K and V memory.
    pub fn kv_bytes(&self) -> usize {
        self.cache.kv_bytes()
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Positions processed so far.
    pub fn n_past(&self) -> usize {
        self.cache.n_past()
    }

    /// The context size.
    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }

    /// Graphs built so far (one per batch shape met).
    pub fn graphs_built(&self) -> usize {
        self.builds
    }

    /// The scheduler's splits of the current graph, as backend indices (for reports: one
    /// split means the whole pass runs on one device).
    pub fn splits(&self) -> Vec<usize> {
        self.scheduler.splits().iter().map(|s| s.backend).collect()
    }

    /// A flag that stops the decode in progress (with [`LlmError::Cancelled`]) when set, and
    /// every later one until [`Context::reset_cancel`] (generation and embedding reset it when
    /// they start).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Clears the cancel flag.
    pub fn reset_cancel(&self) {
        self.cancel.store(false, Ordering::Relaxed);
    }

    /// Sets or clears a callback run after each node of every later decode, with the graph and
    /// the node (ggml's `cb_eval`: for per-op timers or to read intermediate tensors); returning
    /// `false` stops the decode with an error (`tessera_core::Error::Aborted`).
    /// Each node then runs on its own (synchronized after it), which costs some speed.
    pub fn set_eval_callback(&mut self, callback: Option<EvalCallback>) {
        self.scheduler.set_eval_callback(callback);
    }

    /// The nodes of the graph of the last decode that the backends' plans compute with
    /// reference code rather than a fast kernel, and why (recorded once, when the graph of
    /// that batch shape was allocated).
    pub fn reference_fallbacks(&self) -> Vec<tessera_core::backend::PlanFallback> {
        self.scheduler.reference_fallbacks()
    }

    /// Forgets every position (the next decode starts at position 0).
    pub fn clear(&mut self) {
        self.cache.clear();
        self.history.clear();
    }

    /// The tokens processed so far, one per position.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Keeps the longest prefix of what was processed that `tokens` starts with (at most all
    /// but its last token, whose logits the caller needs) and forgets the rest; returns how many
    /// of `tokens` are already processed. With recurrent layers (LFM2) that is the latest state
    /// checkpoint within the prefix ([`KvCache::truncate`]): the context takes one at the start
    /// and the end of every decode of several tokens, so a prompt that continues everything
    /// processed keeps it all, and one that goes back keeps up to the start or end of an
    /// earlier prompt.
    pub fn reuse_prefix(&mut self, tokens: &[u32]) -> usize {
        let common = self.history.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let keep = common.min(tokens.len().saturating_sub(1));
        let kept = self.cache.truncate(keep);
        self.history.truncate(kept);
        kept
    }

    /// Whether the context can shift ([`Context::shift`]): not for a model with recurrent
    /// layers (LFM2, Qwen 3.5) or layers sharing another layer's KV cache (Gemma 4).
    pub fn can_shift(&self) -> bool {
        self.cache.can_shift()
    }

    /// Context shift (llama.cpp's, [`crate::shift`]): forgets the positions
    /// `n_keep .. n_keep + n_discard` and moves every later one `n_discard` down, its cached keys
    /// rotated to the new position, so that decoding goes on with `n_discard` positions free.
    /// The history loses the same tokens. [`LlmError::ContextShiftUnsupported`] for a model with
    /// recurrent layers; an error when `n_discard` is 0 or more than the positions after
    /// `n_keep`. If the shift's compute fails the context is cleared (its cache would be half
    /// moved).
    pub fn shift(&mut self, n_keep: usize, n_discard: usize) -> Result<()> {
        if !self.cache.can_shift() {
            return Err(LlmError::ContextShiftUnsupported {
                arch: self.model.hparams().arch.name().to_string(),
            });
        }
        let moves = self.cache.shift_moves(n_keep, n_discard)?;
        if moves.iter().any(|m| !m.src.is_empty()) {
            // The scheduler's graph becomes the shift's: the next decode rebuilds its own.
            self.current = None;
            if let Err(e) = self.run_shift(&moves) {
                self.clear();
                return Err(e);
            }
        }
        self.cache.apply_shift(n_keep, n_discard);
        self.history.drain(n_keep..n_keep + n_discard);
        Ok(())
    }

    /// Builds, allocates and computes the shift graph of `moves`.
    pub(crate) fn run_shift(&mut self, moves: &[crate::kv_cache::KindMoves]) -> Result<()> {
        let m = ModelRef {
            hp: self.model.hparams(),
            tensors: self.model.tensors(),
            weights: self.model.weights(),
        };
        let mut sg = crate::shift::build(&m, &self.cache, self.cache.n_ctx(), moves)?;
        self.scheduler.alloc_graph(&mut sg.graph)?;
        for (input, mv) in sg.inputs.iter().zip(moves) {
            if let Some([src, dst, delta]) = *input {
                set_tensor(&sg.graph, src, &i32_bytes(mv.src.iter().copied()))?;
                set_tensor(&sg.graph, dst, &i32_bytes(mv.dst.iter().copied()))?;
                set_tensor(&sg.graph, delta, &i32_bytes(mv.delta.iter().copied()))?;
            }
        }
        compute(&self.model, &mut self.scheduler, &self.cancel)
    }

    /// Saves the conversation (the tokens processed and their cache) to a session file at
    /// `path` ([`crate::session_file`]).
    pub fn save_session(&mut self, path: impl AsRef<std::path::Path>) -> Result<()> {
        crate::session_file::save(self, path.as_ref())
    }

    /// Loads the session file at `path` (saved with this model) in place of what the context
    /// held, and returns its number of tokens; decoding then goes on from there as it would
    /// have in the context that saved it. On an error (a file of another model, truncated or
    /// corrupt: [`LlmError::Session`]) the context is left empty.
    pub fn load_session(&mut self, path: impl AsRef<std::path::Path>) -> Result<usize> {
        crate::session_file::load(self, path.as_ref())
    }

    /// The tokens processed and the cache, for the session files.
    pub(crate) fn session_parts(&mut self) -> (&mut Vec<u32>, &mut KvCache) {
        (&mut self.history, &mut self.cache)
    }

    /// The positions of the recurrent states' checkpoints (none without recurrent layers).
    pub fn checkpoints(&self) -> Vec<usize> {
        self.cache.checkpoints()
    }

    /// Processes `tokens` at the next positions and returns the logits of `rows`.
    pub fn decode(&mut self, tokens: &[u32], rows: Rows) -> Result<Output> {
        let mut out = Output::default();
        self.run_into(tokens, rows, false, &mut out)?;
        Ok(out)
    }

    /// As [`Context::decode`], into `out`, whose buffers are reused: a generation loop decoding
    /// one token at a time into the same `out` reads each token's logits with one copy and no
    /// allocation. On an error `out` holds no rows.
    pub fn decode_into(&mut self, tokens: &[u32], rows: Rows, out: &mut Output) -> Result<()> {
        let r = self.run_into(tokens, rows, false, out);
        if r.is_err() {
            out.values.clear();
            out.positions.clear();
        }
        r
    }

    /// Processes `tokens` and returns the final hidden state (after the output norm) of `rows`.
    pub fn hidden_states(&mut self, tokens: &[u32], rows: Rows) -> Result<Output> {
        let mut out = Output::default();
        self.run_into(tokens, rows, true, &mut out)?;
        Ok(out)
    }

    /// Decodes `tokens` into `out` (its old rows replaced): the first rows kept are read
    /// straight into `out.values`, reusing its buffer.
    fn run_into(
        &mut self,
        tokens: &[u32],
        rows: Rows,
        embeddings: bool,
        out: &mut Output,
    ) -> Result<()> {
        if tokens.is_empty() {
            return Err(LlmError::EmptyInput("no tokens to decode".into()));
        }
        let hp = self.model.hparams();
        let n_vocab = hp.n_vocab;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(LlmError::TokenOutOfRange { id, n_vocab });
        }
        let needed = self.cache.n_past() + tokens.len();
        if needed > self.cache.n_ctx() {
            return Err(LlmError::ContextFull {
                needed,
                used: self.cache.n_past(),
                n_ctx: self.cache.n_ctx(),
            });
        }
        out.width = if embeddings { hp.n_embd } else { n_vocab };
        out.positions.clear();
        // Recurrent states: as clearing or going back left them, and a checkpoint where a
        // prompt starts and where it ends.
        self.cache.sync()?;
        let prompt = tokens.len() > 1;
        if prompt {
            self.cache.checkpoint()?;
        }
        // Rows of a batch after the first kept one (several batches of `Rows::All`).
        let mut later = Vec::new();
        let mut kept_any = false;
        let chunks: Vec<&[u32]> = tokens.chunks(self.n_batch).collect();
        for (ci, chunk) in chunks.iter().enumerate() {
            let last_chunk = ci + 1 == chunks.len();
            let want: Vec<usize> = match rows {
                Rows::All => (0..chunk.len()).collect(),
                Rows::Last if last_chunk => vec![chunk.len() - 1],
                Rows::Last => vec![chunk.len() - 1],
            };
            let plan = self.cache.plan(chunk.len())?;
            let keep = matches!(rows, Rows::All) || last_chunk;
            let direct = keep && !kept_any;
            let values = if direct { &mut out.values } else { &mut later };
            if let Err(e) = self.run_batch(chunk, &plan, &want, embeddings, values) {
                // Recurrent states the failed compute may have written go back to a checkpoint.
                let kept = self.cache.recover();
                self.history.truncate(kept);
                return Err(e);
            }
            self.cache.commit(&plan);
            self.history.extend_from_slice(chunk);
            if keep {
                if !direct {
                    out.values.extend_from_slice(&later);
                }
                kept_any = true;
                out.positions.extend(want.iter().map(|&r| plan.positions[r] as usize));
            }
        }
        if prompt {
            self.cache.checkpoint()?;
        }
        Ok(())
    }

    /// Computes one batch (the graph of its shape prepared if needed) and reads its result
    /// into `values`.
    fn run_batch(
        &mut self,
        tokens: &[u32],
        plan: &BatchPlan,
        want: &[usize],
        embeddings: bool,
        values: &mut Vec<f32>,
    ) -> Result<()> {
        let mut n_kv = [0usize; 2];
        for (i, k) in plan.kinds.iter().enumerate() {
            n_kv[i] = k.n_kv;
        }
        let shape = GraphShape {
            n_tokens: tokens.len(),
            n_kv,
            n_outputs: want.len(),
            embeddings,
            pooling: None,
        };
        if self.current.as_ref().is_none_or(|g| g.shape != shape) {
            self.current = None;
            let m = ModelRef {
                hp: self.model.hparams(),
                tensors: self.model.tensors(),
                weights: self.model.weights(),
            };
            let mut fg = forward::build(&m, Some(&self.cache), self.cache.n_ctx(), shape)?;
            self.scheduler.alloc_graph(&mut fg.graph)?;
            self.builds += 1;
            self.current = Some(fg);
        }
        let fg =
            self.current.as_ref().ok_or_else(|| LlmError::InvalidArgument("no graph".into()))?;
        let g = &fg.graph;
        set_tensor(g, fg.tokens, &i32_bytes(tokens.iter().map(|&t| t as i32)))?;
        set_tensor(g, fg.positions, &i32_bytes(plan.positions.iter().copied()))?;
        for (k, kp) in plan.kinds.iter().enumerate() {
            set_tensor(g, fg.cells[k], &i32_bytes(kp.cells.iter().copied()))?;
            let mask: Vec<u8> = kp.mask.iter().flat_map(|m| m.to_le_bytes()).collect();
            set_tensor(g, fg.masks[k], &mask)?;
        }
        set_tensor(g, fg.out_rows, &i32_bytes(want.iter().map(|&r| r as i32)))?;
        // A failed compute may have written some cells: the positions of this batch are not
        // committed, so they stay masked.
        compute(&self.model, &mut self.scheduler, &self.cancel)?;
        read_f32_into(g, fg.result, values)?;
        let width = values.len() / want.len().max(1);
        let output = if embeddings { "embeddings" } else { "logits" };
        check_finite(&mut self.scheduler, values, width, output)
    }
}

/// A scheduler over `model`'s device (and the CPU as fallback) with `threads` CPU threads, and
/// the flag that aborts its computes when set.
pub(crate) fn model_scheduler(
    model: &Model,
    registry: &Registry,
    threads: Option<usize>,
) -> Result<(Scheduler, Arc<AtomicBool>)> {
    let params = BackendParams { threads };
    let device = model.device();
    let mut backends = vec![device.init_backend(&params)?];
    if device.device_type() != DeviceType::Cpu {
        backends.push(registry.init_by_type(DeviceType::Cpu, &params)?);
    }
    let mut scheduler = Scheduler::new(backends)?;
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let abort: AbortCallback = Arc::new(move || flag.load(Ordering::Relaxed));
    for i in 0..scheduler.backends().len() {
        if let Some(b) = scheduler.backend_mut(i) {
            b.set_abort_callback(Some(abort.clone()));
        }
    }
    Ok((scheduler, cancel))
}

/// Runs the scheduler's graph: [`LlmError::Cancelled`] when `cancel` stopped it.
pub(crate) fn compute(model: &Model, scheduler: &mut Scheduler, cancel: &AtomicBool) -> Result<()> {
    // A model file truncated since it was mapped would fault in the compute (SIGBUS).
    model.file().check_unchanged()?;
    match scheduler.compute() {
        Ok(()) => Ok(()),
        Err(tessera_core::Error::Aborted) if cancel.load(Ordering::Relaxed) => {
            Err(LlmError::Cancelled)
        }
        Err(e) => Err(e.into()),
    }
}

/// The little-endian bytes of I32 values (an input tensor's).
pub(crate) fn i32_bytes(v: impl Iterator<Item = i32>) -> Vec<u8> {
    v.flat_map(|x| x.to_le_bytes()).collect()
}
