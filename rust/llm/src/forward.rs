//! The forward graph of one batch, built from Tessera's ops (llama.cpp's `llm_build_*` as a
//! reference for the details): embeddings, then per block RMS norm, Q/K/V projections (with
//! biases, head norms and RoPE as the architecture has them), the KV-cache writes (SET_ROWS),
//! fused attention (FLASH_ATTN_EXT) over the cache, the output projection and the residual,
//! RMS norm, the gated FFN and the residual; then the final norm and the output projection of
//! the rows asked for.
//!
//! A graph depends only on its [`GraphShape`], so it is built once per shape and reused for
//! every batch of that shape: everything that changes per batch (tokens, positions, cache
//! cells, masks, output rows) is an input.

use crate::error::Result;
use crate::hparams::{Architecture, HParams, RopeScaling};
use crate::kv_cache::KvCache;
use crate::tensors::{ModelTensor, ModelTensors};
use crate::weights::WeightStore;
use tessera_core::{AttnParams, DType, GluOp, Graph, RopeParams, TensorId};

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
    /// F32 `[n_vocab, n_outputs]` (logits) or `[n_embd, n_outputs]` (embeddings).
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

struct Builder<'a> {
    g: Graph,
    m: &'a ModelRef<'a>,
}

impl Builder<'_> {
    /// The weight `t` as a leaf with its memory.
    fn weight(&mut self, t: &ModelTensor) -> Result<TensorId> {
        if let Some(id) = self.g.by_name(&t.name) {
            return Ok(id);
        }
        let id = self.g.weight(&t.name, t.info.dtype, t.info.shape())?;
        self.g.set_storage(id, self.m.weights.storage(t)?)?;
        Ok(id)
    }

    fn opt_weight(&mut self, t: &Option<ModelTensor>) -> Result<Option<TensorId>> {
        t.as_ref().map(|t| self.weight(t)).transpose()
    }

    /// `rms_norm(x) * w`.
    fn norm(&mut self, x: TensorId, w: &ModelTensor) -> Result<TensorId> {
        let n = self.g.rms_norm(x, self.m.hp.rms_eps)?;
        let w = self.weight(w)?;
        Ok(self.g.mul(n, w)?)
    }

    /// `w x (+ b)`.
    fn linear(
        &mut self,
        w: &ModelTensor,
        b: &Option<ModelTensor>,
        x: TensorId,
    ) -> Result<TensorId> {
        let wt = self.weight(w)?;
        let y = self.g.mul_mat(wt, x)?;
        match self.opt_weight(b)? {
            Some(b) => Ok(self.g.add(y, b)?),
            None => Ok(y),
        }
    }

    fn rope(
        &mut self,
        x: TensorId,
        pos: TensorId,
        factors: Option<TensorId>,
        il: usize,
    ) -> Result<TensorId> {
        let hp = self.m.hp;
        let (freq_base, freq_scale) = hp.rope_freqs(il);
        let p = RopeParams {
            n_dims: hp.n_rot,
            mode: hp.rope_mode,
            n_ctx_orig: hp.n_ctx_orig,
            freq_base,
            freq_scale,
            ext_factor: if hp.rope_scaling == RopeScaling::Yarn { 1.0 } else { 0.0 },
            attn_factor: hp.rope_attn_factor,
            beta_fast: 32.0,
            beta_slow: 1.0,
        };
        Ok(self.g.rope_ext(x, pos, factors, p)?)
    }
}

/// Builds the graph of `shape` for the model `m` over the cache `cache`.
pub fn build(m: &ModelRef<'_>, cache: &KvCache, shape: GraphShape) -> Result<ForwardGraph> {
    let hp = m.hp;
    let t = m.tensors;
    let n = shape.n_tokens;
    let mut b = Builder { g: Graph::new(), m };
    let tokens = b.g.input("tokens", DType::I32, &[n])?;
    let positions = b.g.input("positions", DType::I32, &[n])?;
    let mut cells = Vec::new();
    let mut masks = Vec::new();
    for kind in 0..cache.n_kinds() {
        cells.push(b.g.input(&format!("cells{kind}"), DType::I32, &[n])?);
        masks.push(b.g.input(&format!("mask{kind}"), DType::F16, &[shape.n_kv[kind], n])?);
    }
    let out_rows = b.g.input("out_rows", DType::I32, &[shape.n_outputs])?;

    let embd = b.weight(&t.token_embd)?;
    let mut x = b.g.get_rows(embd, tokens)?;
    if hp.embed_scale != 1.0 {
        x = b.g.scale(x, hp.embed_scale)?;
    }
    let rope_factors = b.opt_weight(&t.rope_freqs)?;
    let gemma = hp.arch == Architecture::Gemma3;
    let (hd, hdv) = (hp.head_dim_k, hp.head_dim_v);
    for (il, l) in t.layers.iter().enumerate() {
        let residual = x;
        let h = b.norm(x, &l.attn_norm)?;
        let q = b.linear(&l.wq, &l.bq, h)?;
        let k = b.linear(&l.wk, &l.bk, h)?;
        let v = b.linear(&l.wv, &l.bv, h)?;
        let mut q = b.g.reshape(q, &[hd, hp.n_head, n])?;
        let mut k = b.g.reshape(k, &[hd, hp.n_head_kv, n])?;
        if let Some(w) = &l.q_norm {
            q = b.norm(q, w)?;
        }
        if let Some(w) = &l.k_norm {
            k = b.norm(k, w)?;
        }
        q = b.rope(q, positions, rope_factors, il)?;
        k = b.rope(k, positions, rope_factors, il)?;
        // Gemma scales the queries before attention (llama.cpp's order, same rounding).
        let scale = if gemma {
            q = b.g.scale(q, hp.attn_scale)?;
            1.0
        } else {
            hp.attn_scale
        };
        let lc = cache.layer(il);
        let kind = lc.kind;
        let kc = b.g.new_tensor(DType::F16, &[hp.n_embd_k_gqa(), lc.k_layout.ne[1]])?;
        b.g.set_storage(kc, lc.k.clone())?;
        let vc = b.g.new_tensor(DType::F16, &[hp.n_embd_v_gqa(), lc.v_layout.ne[1]])?;
        b.g.set_storage(vc, lc.v.clone())?;
        let k2 = b.g.reshape(k, &[hp.n_embd_k_gqa(), n])?;
        let kw = b.g.set_rows(kc, k2, cells[kind])?;
        let vw = b.g.set_rows(vc, v, cells[kind])?;
        let n_kv = shape.n_kv[kind];
        let kview = b.g.view(kw, &[hd, n_kv, hp.n_head_kv], &[lc.k_layout.nb[1], hd * 2], 0)?;
        let vview = b.g.view(vw, &[hdv, n_kv, hp.n_head_kv], &[lc.v_layout.nb[1], hdv * 2], 0)?;
        let qp = b.g.permute(q, [0, 2, 1, 3])?;
        let params = AttnParams { scale, max_bias: 0.0, softcap: 0.0 };
        let att = b.g.flash_attn_ext(qp, kview, vview, Some(masks[kind]), params)?;
        let att = b.g.reshape(att, &[hdv * hp.n_head, n])?;
        let mut o = b.linear(&l.wo, &l.bo, att)?;
        let mut residual = residual;
        if il + 1 == hp.n_layer && shape.n_outputs < n {
            o = b.g.get_rows(o, out_rows)?;
            residual = b.g.get_rows(residual, out_rows)?;
        }
        if let Some(w) = &l.post_attn_norm {
            o = b.norm(o, w)?;
        }
        x = b.g.add(o, residual)?;
        let h = b.norm(x, &l.ffn_norm)?;
        let gate = b.linear(&l.ffn_gate, &None, h)?;
        let up = b.linear(&l.ffn_up, &None, h)?;
        let act = if gemma { GluOp::Geglu } else { GluOp::Swiglu };
        let a = b.g.glu_split(gate, up, act)?;
        let mut d = b.linear(&l.ffn_down, &None, a)?;
        if let Some(w) = &l.post_ffn_norm {
            d = b.norm(d, w)?;
        }
        x = b.g.add(d, x)?;
    }
    if hp.n_layer == 0 && shape.n_outputs < n {
        x = b.g.get_rows(x, out_rows)?;
    }
    let out = b.norm(x, &t.output_norm)?;
    let result = if shape.embeddings {
        out
    } else {
        let logits = b.linear(&t.output, &None, out)?;
        if hp.final_logit_softcap > 0.0 {
            let c = hp.final_logit_softcap;
            let s = b.g.scale(logits, 1.0 / c)?;
            let th = b.g.tanh(s)?;
            b.g.scale(th, c)?
        } else {
            logits
        }
    };
    b.g.set_output(result)?;
    b.g.set_name(result, "result")?;
    Ok(ForwardGraph { graph: b.g, shape, tokens, positions, cells, masks, out_rows, result })
}
