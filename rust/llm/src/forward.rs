//! The forward graph of one batch: the inputs, then the architecture's graph
//! ([`crate::arch`], from the blocks of [`crate::blocks`]) up to the logits (or the final hidden
//! state) of the rows asked for, or the pooled embedding of the batch (llama.cpp's
//! `build_pooling` after the architecture's graph).
//!
//! A graph depends only on its [`GraphShape`], so it is built once per shape and reused for
//! every batch of that shape: everything that changes per batch (tokens, positions, cache
//! cells, masks, output rows) is an input.

use crate::blocks::Builder;
use crate::embed::Pooling;
use crate::error::Result;
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::tensors::ModelTensors;
use crate::weights::WeightStore;
use tessera_core::{Graph, TensorId};

/// What a graph depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphShape {
    /// Tokens in the batch.
    pub n_tokens: usize,
    /// Cells attended per cache kind (global, sliding window); `n_tokens` without a cache.
    pub n_kv: [usize; 2],
    /// Rows whose result is wanted.
    pub n_outputs: usize,
    /// Whether the result is the final hidden state (embeddings) instead of logits.
    pub embeddings: bool,
    /// With `embeddings`: the pooling of the batch's rows into one (and the heads after it).
    pub pooling: Option<Pooling>,
}

/// A built graph and the tensors the caller fills and reads.
pub struct ForwardGraph {
    /// The graph.
    pub graph: Graph,
    /// Its shape.
    pub shape: GraphShape,
    /// I32 `[n_tokens]`: the token ids.
    pub tokens: TensorId,
    /// I32 `[n_tokens]`: their positions.
    pub positions: TensorId,
    /// Per cache kind: I32 `[n_tokens]`, the cells the tokens' keys and values go to (none
    /// without a cache).
    pub cells: Vec<TensorId>,
    /// Per cache kind: F16 `[n_kv, n_tokens]`, the attention mask.
    pub masks: Vec<TensorId>,
    /// I32 `[n_outputs]`: the rows of the batch whose result is wanted.
    pub out_rows: TensorId,
    /// With mean pooling: F32 `[n_tokens, 1]`, each row's weight.
    pub mean: Option<TensorId>,
    /// With CLS, last-token or rank pooling: I32 `[1]`, the row pooled.
    pub cls: Option<TensorId>,
    /// F32 `[n_vocab, n_outputs]` (logits, `result_output`), `[n_embd, n_outputs]`
    /// (embeddings, `result_norm`), or one pooled row (`result_embd_pooled`: an embedding, or
    /// the `n_cls_out` scores of rank pooling).
    pub result: TensorId,
}

/// Everything the builder reads.
pub struct ModelRef<'a> {
    /// Hyper-parameters.
    pub hp: &'a HParams,
    /// The tensors by role.
    pub tensors: &'a ModelTensors,
    /// Their memory.
    pub weights: &'a WeightStore,
}

/// Builds the graph of `shape` for the model `m` over the cache `cache`, or without a cache
/// (the batch is one whole sequence, attending to itself) in a context of `n_ctx` positions.
pub fn build(
    m: &ModelRef<'_>,
    cache: Option<&KvCache>,
    n_ctx: usize,
    shape: GraphShape,
) -> Result<ForwardGraph> {
    let mut b = Builder::new(m.hp, m.tensors, m.weights, cache, n_ctx, shape)?;
    let mut result = m.hp.arch.imp().build(&mut b)?;
    if let Some(p) = shape.pooling {
        result = b.pool(result, p)?;
    }
    b.g.set_output(result)?;
    let i = b.inp;
    Ok(ForwardGraph {
        graph: b.g,
        shape,
        tokens: i.tokens,
        positions: i.positions,
        cells: i.cells,
        masks: i.masks,
        out_rows: i.out_rows,
        mean: i.mean,
        cls: i.cls,
        result,
    })
}
