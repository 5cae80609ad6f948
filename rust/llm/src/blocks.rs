//! The blocks the architectures' graphs are built from (llama.cpp's `llm_graph_context::build_*`
//! as a reference): the token embeddings, RMS and layer norms, projections, Q/K/V (separate or
//! fused), RoPE (plain, with frequency factors, LongRoPE's short / long factors, or none),
//! attention over the KV cache (SET_ROWS writes, FLASH_ATTN_EXT) or, without a cache, over the
//! batch itself (one sequence embedded at once), the input of a recurrent layer's causal
//! convolution with its state, the FFN variants, the output head, and the pooling of embedding
//! models with the heads after it.
//!
//! Intermediate tensors are named as llama.cpp's graph callback names them (`attn_norm-0`,
//! `Qcur-0`, `kqv_out-0`, `ffn_out-3`, `l_out-5`, `result_norm`, `result_output`, ...), so a run
//! can be compared with llama.cpp's layer by layer through the eval callback
//! ([`crate::Context::set_eval_callback`]). Where llama.cpp gives one name to several tensors
//! in turn (a projection, its reshape, its rotation), the name ends on the last of them, here
//! as there: [`Builder::name`] moves a name to the tensor named last.

use crate::embed::Pooling;
use crate::error::{LlmError, Result};
use crate::forward::GraphShape;
use crate::hparams::{HParams, RopeScaling};
use crate::kv_cache::KvCache;
use crate::tensors::{FfnTensors, LayerTensors, ModelTensor, ModelTensors, QkvTensors};
use crate::weights::WeightStore;
use tessera_core::{AttnParams, DType, GluOp, Graph, RopeParams, TensorId, UnaryOp};

/// The tensors a graph's caller fills: everything that changes per batch.
pub(crate) struct Inputs {
    /// I32 `[n_tokens]`: the token ids.
    pub tokens: TensorId,
    /// I32 `[n_tokens]`: their positions.
    pub positions: TensorId,
    /// Per cache kind: I32 `[n_tokens]`, the cells the tokens' keys and values go to (none
    /// without a cache).
    pub cells: Vec<TensorId>,
    /// Per cache kind (global, sliding window): F16 `[n_kv, n_tokens]`, the attention mask
    /// (`[n_tokens, n_tokens]` without a cache).
    pub masks: Vec<TensorId>,
    /// I32 `[n_outputs]`: the rows of the batch whose result is wanted.
    pub out_rows: TensorId,
    /// F32 `[n_tokens, 1]`: each token's weight in mean pooling (`1 / n_tokens`).
    pub mean: Option<TensorId>,
    /// I32 `[1]`: the row that CLS / last-token pooling takes.
    pub cls: Option<TensorId>,
}

/// A graph being built for one batch shape: the model, the cache, the inputs.
pub(crate) struct Builder<'a> {
    /// The graph.
    pub g: Graph,
    /// Hyper-parameters.
    pub hp: &'a HParams,
    /// The tensors by role.
    pub t: &'a ModelTensors,
    weights: &'a WeightStore,
    /// The KV cache, or none: then attention is over the batch alone.
    cache: Option<&'a KvCache>,
    /// The context size (which of LongRoPE's factors apply).
    n_ctx: usize,
    /// The batch shape.
    pub shape: GraphShape,
    /// The inputs.
    pub inp: Inputs,
    /// The RoPE frequency factors of this context (looked up once).
    rope_factors: Option<Option<TensorId>>,
    /// Per layer, the keys and values it wrote (the cache after its SET_ROWS, or the batch's
    /// own without a cache), for the layers that reuse them (Gemma 4's shared-KV layers).
    written: Vec<Option<WrittenKv>>,
}

/// One layer's keys and values as written (see [`Builder::attention_heads`]).
#[derive(Clone, Copy)]
struct WrittenKv {
    /// Cache kind (its mask).
    kind: usize,
    /// K `[n_embd_k_gqa, cells]` and V `[n_embd_v_gqa, cells]` after the write.
    k: TensorId,
    v: TensorId,
    /// Row strides in bytes.
    k_row: usize,
    v_row: usize,
}

impl<'a> Builder<'a> {
    /// A builder over the model and cache (or none, see [`Builder::attention`]) in a context
    /// of `n_ctx` positions, with the inputs of `shape` created.
    pub fn new(
        hp: &'a HParams,
        t: &'a ModelTensors,
        weights: &'a WeightStore,
        cache: Option<&'a KvCache>,
        n_ctx: usize,
        shape: GraphShape,
    ) -> Result<Builder<'a>> {
        let mut g = Graph::new();
        let n = shape.n_tokens;
        let tokens = g.input("tokens", DType::I32, &[n])?;
        let positions = g.input("positions", DType::I32, &[n])?;
        let mut cells = Vec::new();
        let mut masks = Vec::new();
        for kind in 0..cache.map_or(n_mask_kinds(hp), KvCache::n_kinds) {
            if cache.is_some() {
                cells.push(g.input(&format!("cells{kind}"), DType::I32, &[n])?);
            }
            masks.push(g.input(&format!("mask{kind}"), DType::F16, &[shape.n_kv[kind], n])?);
        }
        let out_rows = g.input("out_rows", DType::I32, &[shape.n_outputs])?;
        let (mut mean, mut cls) = (None, None);
        if let Some(p) = shape.pooling {
            match rows_pooled(p, hp) {
                Pooling::Mean => mean = Some(g.input("mean", DType::F32, &[n, 1])?),
                _ => cls = Some(g.input("cls", DType::I32, &[1])?),
            }
        }
        let inp = Inputs { tokens, positions, cells, masks, out_rows, mean, cls };
        let written = vec![None; hp.n_layer];
        Ok(Builder { g, hp, t, weights, cache, n_ctx, shape, inp, rope_factors: None, written })
    }

    /// The weight `t` as a leaf with its memory.
    pub fn weight(&mut self, t: &ModelTensor) -> Result<TensorId> {
        if let Some(id) = self.g.by_name(&t.name) {
            return Ok(id);
        }
        let id = self.g.weight(&t.name, t.info.dtype, t.info.shape())?;
        self.g.set_storage(id, self.weights.storage(t)?)?;
        Ok(id)
    }

    fn opt_weight(&mut self, t: &Option<ModelTensor>) -> Result<Option<TensorId>> {
        t.as_ref().map(|t| self.weight(t)).transpose()
    }

    /// Names `id` as llama.cpp's graph callback does: `name-il` in layer `il`, `name` outside
    /// the layers. A tensor already holding that name gives it up (llama.cpp names several
    /// tensors alike; the last one named is the one its callback shows last).
    pub fn name(&mut self, id: TensorId, name: &str, il: Option<usize>) -> Result<TensorId> {
        let full = match il {
            Some(il) => format!("{name}-{il}"),
            None => name.to_string(),
        };
        if let Some(other) = self.g.by_name(&full) {
            if other != id {
                self.g.set_name(other, "")?;
            }
        }
        self.g.set_name(id, &full)?;
        Ok(id)
    }

    /// The token embeddings of the batch (GET_ROWS), `[n_embd, n_tokens]`, named `embd`.
    pub fn embeddings(&mut self) -> Result<TensorId> {
        let embd = self.weight(&self.t.token_embd)?;
        let x = self.g.get_rows(embd, self.inp.tokens)?;
        self.name(x, "embd", None)
    }

    /// `rms_norm(x) * w`, the product named `name` (in layer `il`).
    pub fn norm(
        &mut self,
        x: TensorId,
        w: &ModelTensor,
        name: &str,
        il: Option<usize>,
    ) -> Result<TensorId> {
        let n = self.g.rms_norm(x, self.hp.rms_eps)?;
        let w = self.weight(w)?;
        let y = self.g.mul(n, w)?;
        self.name(y, name, il)
    }

    /// The layer norm `norm(x) * w + b` (llama.cpp's `LLM_NORM`), named `name` (in layer `il`).
    pub fn layer_norm(
        &mut self,
        x: TensorId,
        w: &ModelTensor,
        b: &Option<ModelTensor>,
        name: &str,
        il: Option<usize>,
    ) -> Result<TensorId> {
        let n = self.g.norm(x, self.hp.norm_eps)?;
        let w = self.weight(w)?;
        let mut y = self.g.mul(n, w)?;
        if let Some(b) = self.opt_weight(b)? {
            y = self.g.add(y, b)?;
        }
        self.name(y, name, il)
    }

    /// [`Builder::norm`] when the layer has the norm `w`, else `x`.
    pub fn opt_norm(
        &mut self,
        x: TensorId,
        w: &Option<ModelTensor>,
        name: &str,
        il: usize,
    ) -> Result<TensorId> {
        match w {
            Some(w) => self.norm(x, w, name, Some(il)),
            None => Ok(x),
        }
    }

    /// The RMS norms of each query and each key head that the layer has (`Qcur_normed`,
    /// `Kcur_normed`).
    pub fn head_norms(
        &mut self,
        l: &LayerTensors,
        q: TensorId,
        k: TensorId,
        il: usize,
    ) -> Result<(TensorId, TensorId)> {
        let q = self.opt_norm(q, &l.q_norm, "Qcur_normed", il)?;
        let k = self.opt_norm(k, &l.k_norm, "Kcur_normed", il)?;
        Ok((q, k))
    }

    /// Layer `il`'s queries, keys and values of `h` (llama.cpp's `build_qkv`), with the head
    /// norms the layer has, and the queries and keys rotated when the layer uses RoPE (`Qcur`,
    /// `Kcur`).
    pub fn rope_qk(
        &mut self,
        l: &LayerTensors,
        h: TensorId,
        il: usize,
    ) -> Result<(TensorId, TensorId, TensorId)> {
        let (q, k, v) = self.qkv(l, h, il)?;
        let (mut q, mut k) = self.head_norms(l, q, k, il)?;
        if self.hp.uses_rope(il) {
            q = self.rope(q, il)?;
            self.name(q, "Qcur", Some(il))?;
            k = self.rope(k, il)?;
            self.name(k, "Kcur", Some(il))?;
        }
        Ok((q, k, v))
    }

    /// The pre-norm decoder of Llama and the architectures built as it is (llama.cpp's
    /// `llama.cpp`, `qwen2.cpp`, `qwen3.cpp`, `smollm3.cpp`): the embeddings, then per layer
    /// `x + attention(attn_norm(x))` (`ffn_inp`) and `+ ffn(ffn_norm(.))` (`l_out`), with the
    /// queries and keys as [`Builder::rope_qk`] makes them, attention scaled by the model's
    /// scale and a SwiGLU FFN; then the output head. `name_attn_out` names the attention's
    /// output projection `attn_out` (llama.cpp's Llama and SmolLM3 graphs do).
    pub fn pre_norm_decoder(&mut self, name_attn_out: bool) -> Result<TensorId> {
        let (hp, t) = (self.hp, self.t);
        let mut x = self.embeddings()?;
        for (il, l) in t.layers.iter().enumerate() {
            let il_ = Some(il);
            let h = self.norm(x, &l.attn_norm, "attn_norm", il_)?;
            let (q, k, v) = self.rope_qk(l, h, il)?;
            let o = self.attention(l, q, k, v, hp.attn_scale, il)?;
            if name_attn_out {
                self.name(o, "attn_out", il_)?;
            }
            let (o, residual) = self.last_layer_rows(il, o, x)?;
            let ffn_inp = self.g.add(o, residual)?;
            self.name(ffn_inp, "ffn_inp", il_)?;
            let h = self.norm(ffn_inp, &l.ffn_norm, "ffn_norm", il_)?;
            let f = self.ffn(&l.ffn, h, GluOp::Swiglu, il)?;
            self.name(f, "ffn_out", il_)?;
            x = self.g.add(f, ffn_inp)?;
            self.name(x, "l_out", il_)?;
        }
        self.output(x)
    }

    /// `w x (+ b)`.
    pub fn linear(
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

    /// The queries `[head_dim_k, n_head, n]`, keys `[head_dim_k, n_head_kv, n]` and values
    /// `[head_dim_v * n_head_kv, n]` of `x` (llama.cpp's `build_qkv`), named `Qcur`, `Kcur`,
    /// `Vcur` (or `wqkv` for the fused projection, whose three parts are views of it).
    pub fn qkv(
        &mut self,
        l: &LayerTensors,
        x: TensorId,
        il: usize,
    ) -> Result<(TensorId, TensorId, TensorId)> {
        let hp = self.hp;
        let n = self.shape.n_tokens;
        let hd = hp.head_dim_k;
        match &l.qkv {
            QkvTensors::Separate { wq, wk, wv, bq, bk, bv } => {
                let q = self.linear(wq, bq, x)?;
                let k = self.linear(wk, bk, x)?;
                let v = self.linear(wv, bv, x)?;
                self.name(q, "Qcur", Some(il))?;
                self.name(k, "Kcur", Some(il))?;
                self.name(v, "Vcur", Some(il))?;
                let q = self.g.reshape(q, &[hd, hp.n_head, n])?;
                let k = self.g.reshape(k, &[hd, hp.n_head_kv, n])?;
                Ok((q, k, v))
            }
            QkvTensors::QueryOnly { .. } => Err(LlmError::InvalidArgument(format!(
                "layer {il} has queries only: its architecture's graph attends over another \
                 layer's keys"
            ))),
            QkvTensors::Fused { wqkv, bqkv } => {
                let qkv = self.linear(wqkv, bqkv, x)?;
                self.name(qkv, "wqkv", Some(il))?;
                let row = self.g.tensor(qkv).nb()[1];
                let (nq, nk) = (hd * hp.n_head, hp.n_embd_k_gqa());
                let q = self.g.view(qkv, &[hd, hp.n_head, n], &[hd * 4, row], 0)?;
                let k = self.g.view(qkv, &[hd, hp.n_head_kv, n], &[hd * 4, row], nq * 4)?;
                let v = self.g.view(qkv, &[hp.n_embd_v_gqa(), n], &[row], (nq + nk) * 4)?;
                Ok((q, k, v))
            }
        }
    }

    /// RoPE of `x` (`[head_dim, heads, n]`) in layer `il`, at the batch's positions, with the
    /// layer's base and scale and the model's frequency factors.
    pub fn rope(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let factors = self.rope_factors()?;
        self.rope_with(x, il, factors)
    }

    /// [`Builder::rope`] with the frequency factors `factors` (Gemma 4 gives them to its
    /// global layers only).
    pub fn rope_with(
        &mut self,
        x: TensorId,
        il: usize,
        factors: Option<TensorId>,
    ) -> Result<TensorId> {
        let p = rope_params(self.hp, il);
        Ok(self.g.rope_ext(x, self.inp.positions, factors, p)?)
    }

    /// The RoPE frequency factors (llama.cpp's `get_rope_factors`): `rope_freqs` when the
    /// model has them, else LongRoPE's long factors when the context is longer than the
    /// original one and its short factors otherwise (none when the model has neither).
    fn rope_factors(&mut self) -> Result<Option<TensorId>> {
        if let Some(f) = self.rope_factors {
            return Ok(f);
        }
        let f = self.opt_weight(rope_factor_tensor(self.t, self.hp, self.n_ctx))?;
        self.rope_factors = Some(f);
        Ok(f)
    }

    /// Attention of layer `il` (llama.cpp's `build_attn` over its KV cache): the keys
    /// (`[head_dim_k, n_head_kv, n]`) and values (`[head_dim_v * n_head_kv, n]`, rows possibly
    /// strided) written into the cache cells of the batch (SET_ROWS), the queries
    /// (`[head_dim_k, n_head, n]`) attending over the cells of the batch's shape
    /// (FLASH_ATTN_EXT, `kqv_out`, scaled by `kq_scale`, masked per cache kind), then the output
    /// projection (with its bias).
    ///
    /// Without a cache (llama.cpp's `build_attn_inp_no_cache`: one whole sequence per batch, as
    /// embeddings are computed) the keys and values are the batch's own, kept in F32 (as
    /// llama.cpp's attention without flash attention reads them; its flash attention converts
    /// them to F16), and the mask (causal or not, with the layer's window) is over the batch's
    /// tokens.
    pub fn attention(
        &mut self,
        l: &LayerTensors,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        kq_scale: f32,
        il: usize,
    ) -> Result<TensorId> {
        let att = self.attention_heads(q, k, v, kq_scale, il)?;
        self.linear(&l.wo, &l.bo, att)
    }

    /// [`Builder::attention`] without the output projection: the heads' outputs, `[head_dim_v
    /// * n_head, n]` (`kqv_out`), for a graph that gates them first (Qwen 3.5).
    pub fn attention_heads(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        kq_scale: f32,
        il: usize,
    ) -> Result<TensorId> {
        self.write_kv(k, v, il)?;
        self.attend(q, kq_scale, il, il)
    }

    /// Writes layer `il`'s keys (`[head_dim_k, n_head_kv, n]`) and values (`[head_dim_v *
    /// n_head_kv, n]`) into its cache cells (SET_ROWS), or, without a cache, copies them to
    /// F32 tensors of the batch alone; records what was written for [`Builder::attend`].
    fn write_kv(&mut self, k: TensorId, v: TensorId, il: usize) -> Result<()> {
        let hp = self.hp;
        let n = self.shape.n_tokens;
        let (wk, wv) = (hp.n_embd_k_gqa_of(il), hp.n_embd_v_gqa_of(il));
        let k2 = self.rows_2d(k, wk, n)?;
        // The keys and values written, each as rows of every KV head, and the row strides.
        let w = match self.cache {
            Some(cache) => {
                let lc = cache.layer(il)?;
                let kc = self.g.new_tensor(lc.k_layout.dtype, &[wk, lc.k_layout.ne[1]])?;
                self.g.set_storage(kc, lc.k.clone())?;
                let vc = self.g.new_tensor(lc.v_layout.dtype, &[wv, lc.v_layout.ne[1]])?;
                self.g.set_storage(vc, lc.v.clone())?;
                let kw = self.g.set_rows(kc, k2, self.inp.cells[lc.kind])?;
                let vw = self.g.set_rows(vc, v, self.inp.cells[lc.kind])?;
                WrittenKv {
                    kind: lc.kind,
                    k: kw,
                    v: vw,
                    k_row: lc.k_layout.nb[1],
                    v_row: lc.v_layout.nb[1],
                }
            }
            None => {
                let kind = usize::from(self.inp.masks.len() > 1 && hp.is_swa(il));
                let kf = self.g.new_tensor(DType::F32, &[wk, n])?;
                let kw = self.g.cpy(k2, kf)?;
                let vf = self.g.new_tensor(DType::F32, &[wv, n])?;
                let vw = self.g.cpy(v, vf)?;
                WrittenKv { kind, k: kw, v: vw, k_row: wk * 4, v_row: wv * 4 }
            }
        };
        self.written[il] = Some(w);
        Ok(())
    }

    /// The queries `q` (`[head_dim_k, n_head, n]`) of layer `il` attending over the keys and
    /// values layer `source` wrote (itself, or for a layer that shares a lower layer's cache,
    /// that layer: the graph reads them after their write), over the cells of the batch's
    /// shape (FLASH_ATTN_EXT, `kqv_out`, scaled by `kq_scale`, masked per cache kind):
    /// `[head_dim_v * n_head, n]`.
    pub fn attend(
        &mut self,
        q: TensorId,
        kq_scale: f32,
        il: usize,
        source: usize,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let n = self.shape.n_tokens;
        let (hd, hdv) = (hp.head_dim_k_of(il), hp.head_dim_v_of(il));
        let w = self.written.get(source).copied().flatten().ok_or_else(|| {
            LlmError::InvalidArgument(format!(
                "layer {il} attends over layer {source}'s keys, which are not written yet"
            ))
        })?;
        let n_kv = self.shape.n_kv[w.kind];
        // A head's bytes (whole blocks in a quantized cache: the cache checked its head sizes).
        let k_head = self.g.tensor(w.k).layout.dtype.row_size(hd)?;
        let v_head = self.g.tensor(w.v).layout.dtype.row_size(hdv)?;
        let kview = self.g.view(w.k, &[hd, n_kv, hp.n_head_kv], &[w.k_row, k_head], 0)?;
        let vview = self.g.view(w.v, &[hdv, n_kv, hp.n_head_kv], &[w.v_row, v_head], 0)?;
        let qp = self.g.permute(q, [0, 2, 1, 3])?;
        let params = AttnParams { scale: kq_scale, max_bias: 0.0, softcap: 0.0 };
        let att = self.g.flash_attn_ext(qp, kview, vview, Some(self.inp.masks[w.kind]), params)?;
        self.name(att, "kqv_out", Some(il))?;
        Ok(self.g.reshape(att, &[hdv * hp.n_head, n])?)
    }

    /// The input of recurrent layer `il`'s causal convolution over the batch (llama.cpp's
    /// `build_conv_state`, and LFM2's graph): `x` (`[conv_channels, n]`) transposed, after the
    /// layer's state (the `conv_kernel - 1` inputs before the batch, per channel), as
    /// `[conv_kernel - 1 + n, conv_channels, 1]` for SSM_CONV; its last `conv_kernel - 1`
    /// columns are written back into the state (CPY, after the read), for the next batch.
    pub fn conv_input(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let (d, ch, n) = (hp.conv_kernel - 1, hp.conv_channels, self.shape.n_tokens);
        let cache = self.cache.ok_or_else(|| {
            LlmError::InvalidArgument(format!("recurrent layer {il} needs a cache for its state"))
        })?;
        let st = cache.state(il)?;
        let state = self.g.new_tensor(DType::F32, &[d, ch, 1])?;
        self.g.set_storage(state, st.conv.clone())?;
        let xt = self.g.transpose(x)?;
        let sx = self.g.concat(state, xt, 0)?;
        let row = self.g.tensor(sx).nb()[1];
        let last = self.g.view(sx, &[d, ch, 1], &[row, row * ch], n * 4)?;
        self.g.cpy(last, state)?;
        Ok(sx)
    }

    /// Recurrent layer `il`'s gated delta-net state, F32 `[head_dim, head_dim, n_v_heads, 1]`
    /// in its memory: read by GATED_DELTA_NET, then written back (CPY) with its final state.
    pub fn delta_state(&mut self, il: usize) -> Result<TensorId> {
        let cache = self.cache.ok_or_else(|| {
            LlmError::InvalidArgument(format!("recurrent layer {il} needs a cache for its state"))
        })?;
        let (layout, storage) = cache.state(il)?.delta.clone().ok_or_else(|| {
            LlmError::InvalidArgument(format!("layer {il} has no delta-net state"))
        })?;
        let state = self.g.new_tensor(DType::F32, &layout.ne)?;
        self.g.set_storage(state, storage)?;
        Ok(state)
    }

    /// `x` (`[a, b, n]`, rows of `a` values possibly strided by heads) as `[width, n]` rows:
    /// a reshape when contiguous, else a view merging its first two dims (llama.cpp's
    /// `cpy_k`).
    fn rows_2d(&mut self, x: TensorId, width: usize, n: usize) -> Result<TensorId> {
        let l = self.g.tensor(x).layout;
        if l.is_contiguous() {
            Ok(self.g.reshape(x, &[width, n])?)
        } else {
            Ok(self.g.view(x, &[width, n], &[l.nb[2]], 0)?)
        }
    }

    /// In the last layer, when only some rows are wanted, those rows of `a` and `b` (the
    /// layer's output and its residual); else `a` and `b`.
    pub fn last_layer_rows(
        &mut self,
        il: usize,
        a: TensorId,
        b: TensorId,
    ) -> Result<(TensorId, TensorId)> {
        if il + 1 == self.hp.n_layer && self.shape.n_outputs < self.shape.n_tokens {
            let rows = self.inp.out_rows;
            Ok((self.g.get_rows(a, rows)?, self.g.get_rows(b, rows)?))
        } else {
            Ok((a, b))
        }
    }

    /// The feed-forward network of layer `il` on `x` with the activation `act` (SwiGLU or
    /// GeGLU), llama.cpp's `build_ffn`: gated (`ffn_gate`, `ffn_up`, then `ffn_swiglu` /
    /// `ffn_geglu`), with gate and up fused in one projection (the halves of `ffn_up`), or
    /// without a gate (`ffn_up`, then the GLU's activation alone: `ffn_silu` / `ffn_gelu`).
    pub fn ffn(&mut self, f: &FfnTensors, x: TensorId, act: GluOp, il: usize) -> Result<TensorId> {
        let il = Some(il);
        let act_name = match act {
            GluOp::Geglu => "ffn_geglu",
            _ => "ffn_swiglu",
        };
        match f {
            FfnTensors::Gated { gate, up, down, gate_b, up_b, down_b } => {
                let g = self.linear(gate, gate_b, x)?;
                self.name(g, "ffn_gate", il)?;
                let u = self.linear(up, up_b, x)?;
                self.name(u, "ffn_up", il)?;
                let a = self.g.glu_split(g, u, act)?;
                self.name(a, act_name, il)?;
                self.linear(down, down_b, a)
            }
            FfnTensors::FusedGateUp { up, down } => {
                let u = self.linear(up, &None, x)?;
                self.name(u, "ffn_up", il)?;
                let a = self.g.glu(u, act, false)?;
                self.name(a, act_name, il)?;
                self.linear(down, &None, a)
            }
            FfnTensors::Plain { up, up_b, down, down_b } => {
                let u = self.linear(up, up_b, x)?;
                self.name(u, "ffn_up", il)?;
                let (unary, name) = match act {
                    GluOp::Geglu => (UnaryOp::Gelu, "ffn_gelu"),
                    GluOp::Swiglu => (UnaryOp::Silu, "ffn_silu"),
                };
                let a = self.g.unary(u, unary)?;
                self.name(a, name, il)?;
                self.linear(down, down_b, a)
            }
        }
    }

    /// The output head on the last layer's output `x`: the final norm (`result_norm`), and,
    /// unless the shape asks for embeddings, [`Builder::logits`].
    pub fn output(&mut self, mut x: TensorId) -> Result<TensorId> {
        let (hp, t) = (self.hp, self.t);
        if hp.n_layer == 0 && self.shape.n_outputs < self.shape.n_tokens {
            x = self.g.get_rows(x, self.inp.out_rows)?;
        }
        let out = match &t.output_norm {
            Some(w) => self.norm(x, w, "result_norm", None)?,
            None => x,
        };
        if self.shape.embeddings {
            return Ok(out);
        }
        self.logits(out)
    }

    /// The output projection of the final normed rows `out`, with its bias and the model's
    /// final soft cap (`result_output`).
    pub fn logits(&mut self, out: TensorId) -> Result<TensorId> {
        let (hp, t) = (self.hp, self.t);
        let output = t.output.as_ref().ok_or_else(|| {
            LlmError::InvalidArgument(format!(
                "{} is an embedding model: it gives no logits",
                hp.arch
            ))
        })?;
        let mut logits = self.linear(output, &t.output_b, out)?;
        if hp.final_logit_softcap > 0.0 {
            let c = hp.final_logit_softcap;
            let s = self.g.scale(logits, 1.0 / c)?;
            let th = self.g.tanh(s)?;
            logits = self.g.scale(th, c)?;
        }
        self.name(logits, "result_output", None)
    }
}

impl Builder<'_> {
    /// The pooling of the final hidden states `x` (`[n_embd, n_tokens]`) into one row and the
    /// heads after it (llama.cpp's `build_pooling`, then `build_dense_out`): the mean over the
    /// tokens (a product with the `mean` weights) or the `cls` row; under rank pooling, the
    /// classification head (`cls` with tanh, then `cls.output`), named `result_embd_pooled`;
    /// then EmbeddingGemma's dense projections when the model has them.
    pub fn pool(&mut self, x: TensorId, pooling: Pooling) -> Result<TensorId> {
        let t = self.t;
        let head = &t.head;
        let missing = || LlmError::InvalidArgument("the graph has no pooling input".into());
        let mut cur = match rows_pooled(pooling, self.hp) {
            Pooling::Mean => {
                let xt = self.g.transpose(x)?;
                let xt = self.g.cont(xt)?;
                let mean = self.inp.mean.ok_or_else(missing)?;
                self.g.mul_mat(xt, mean)?
            }
            _ => {
                let cls = self.inp.cls.ok_or_else(missing)?;
                self.g.get_rows(x, cls)?
            }
        };
        if pooling == Pooling::Rank {
            if let Some(cls) = &head.cls {
                let c = self.linear(cls, &head.cls_b, cur)?;
                cur = self.g.tanh(c)?;
            }
            if let Some(out) = &head.cls_out {
                cur = self.linear(out, &head.cls_out_b, cur)?;
            }
        }
        self.name(cur, "result_embd_pooled", None)?;
        if let Some(d) = &head.dense_2 {
            cur = self.linear(d, &None, cur)?;
        }
        if let Some(d) = &head.dense_3 {
            cur = self.linear(d, &None, cur)?;
        }
        self.name(cur, "result_embd_pooled", None)
    }
}

/// The number of attention masks of a graph without a cache: global, and sliding-window when
/// the model has such layers.
fn n_mask_kinds(hp: &HParams) -> usize {
    1 + usize::from((0..hp.n_layer).any(|il| hp.is_swa(il)))
}

/// How `pooling` reduces the tokens' rows: itself, except rank pooling, which takes the mean
/// when the classifier says so, else the CLS token's row in a bidirectional model and the last
/// token's in a causal one (llama.cpp's `build_pooling` and `llm_graph_input_cls`).
pub(crate) fn rows_pooled(pooling: Pooling, hp: &HParams) -> Pooling {
    match pooling {
        Pooling::Rank if hp.embedding.rank_pooling == Pooling::Mean => Pooling::Mean,
        Pooling::Rank if hp.causal => Pooling::Last,
        Pooling::Rank => Pooling::First,
        p => p,
    }
}

/// The RoPE parameters of layer `il` (its base and scale, the model's mode and YaRN settings),
/// as the forward graph rotates queries and keys.
pub(crate) fn rope_params(hp: &HParams, il: usize) -> RopeParams {
    let (freq_base, freq_scale) = hp.rope_freqs(il);
    RopeParams {
        n_dims: hp.n_rot_of(il),
        mode: hp.rope_mode,
        n_ctx_orig: hp.n_ctx_orig,
        freq_base,
        freq_scale,
        ext_factor: if hp.rope_scaling == RopeScaling::Yarn { 1.0 } else { 0.0 },
        attn_factor: hp.rope_attn_factor,
        beta_fast: 32.0,
        beta_slow: 1.0,
    }
}

/// The RoPE frequency factors of a context of `n_ctx` positions (llama.cpp's
/// `get_rope_factors`): `rope_freqs` when the model has them, else LongRoPE's long factors when
/// the context is longer than the original one and its short factors otherwise.
pub(crate) fn rope_factor_tensor<'t>(
    t: &'t ModelTensors,
    hp: &HParams,
    n_ctx: usize,
) -> &'t Option<ModelTensor> {
    if t.rope_freqs.is_some() {
        &t.rope_freqs
    } else if n_ctx > hp.n_ctx_orig {
        &t.rope_long
    } else {
        &t.rope_short
    }
}
