//! The forward graph of one batch: the inputs, then the architecture's graph
//! ([`crate::arch`], from the blocks of [`crate::blocks`]) up to the logits (or the final hidden
//! state) of the rows asked for.
//!
//! A graph depends only on its [`GraphShape`], so it is built once per shape and reused for
//! every batch of that shape: everything that changes per batch (tokens, positions, cache
//! cells, masks, output rows) is an input.

use crate::blocks::Builder;
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
    /// Cells attended per cache kind (global, sliding window).
    pub n_kv: [usize; 2],
    /// Rows whose result is wanted.
    pub n_outputs: usize,
    /// Whether the result is the final hidden state (embeddings) instead of logits.
    pub embeddings: bool,
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
    /// Per cache kind: I32 `[n_tokens]`, the cells the tokens' keys and values go to.
    pub cells: Vec<TensorId>,
    /// Per cache kind: F16 `[n_kv, n_tokens]`, the attention mask.
    pub masks: Vec<TensorId>,
    /// I32 `[n_outputs]`: the rows of the batch whose result is wanted.
    pub out_rows: TensorId,
    /// F32 `[n_vocab, n_outputs]` (logits, `result_output`) or `[n_embd, n_outputs]`
    /// (embeddings, `result_norm`).
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

/// Builds the graph of `shape` for the model `m` over the cache `cache`.
pub fn build(m: &ModelRef<'_>, cache: &KvCache, shape: GraphShape) -> Result<ForwardGraph> {
    let mut b = Builder::new(m.hp, m.tensors, m.weights, cache, shape)?;
    let result = m.hp.arch.imp().build(&mut b)?;
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
        result,
    })
}
