//! The blocks the architectures' graphs are built from (llama.cpp's `llm_graph_context::build_*`
//! as a reference): the token embeddings, RMS norms, projections, Q/K/V (separate or fused),
//! RoPE (plain, with frequency factors, LongRoPE's short / long factors, or none), attention over
//! the KV cache (SET_ROWS writes, FLASH_ATTN_EXT), the input of a recurrent layer's causal
//! convolution with its state, the FFN variants and the output head.
//!
//! Intermediate tensors are named as llama.cpp's graph callback names them (`attn_norm-0`,
//! `Qcur-0`, `kqv_out-0`, `ffn_out-3`, `l_out-5`, `result_norm`, `result_output`, ...), so a run
//! can be compared with llama.cpp's layer by layer through the eval callback
//! ([`crate::Context::set_eval_callback`]). Where llama.cpp gives one name to several tensors
//! in turn (a projection, its reshape, its rotation), the name ends on the last of them, here
//! as there: [`Builder::name`] moves a name to the tensor named last.

use crate::error::Result;
use crate::forward::GraphShape;
use crate::hparams::{HParams, RopeScaling};
use crate::kv_cache::KvCache;
use crate::tensors::{FfnTensors, LayerTensors, ModelTensor, ModelTensors, QkvTensors};
use crate::weights::WeightStore;
use tessera_core::{AttnParams, DType, GluOp, Graph, RopeParams, TensorId};

/// The tensors a graph's caller fills: everything that changes per batch.
pub(crate) struct Inputs {
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
    cache: &'a KvCache,
    /// The batch shape.
    pub shape: GraphShape,
    /// The inputs.
    pub inp: Inputs,
    /// The RoPE frequency factors of this context (looked up once).
    rope_factors: Option<Option<TensorId>>,
}

impl<'a> Builder<'a> {
    /// A builder over the model and cache, with the inputs of `shape` created.
    pub fn new(
        hp: &'a HParams,
        t: &'a ModelTensors,
        weights: &'a WeightStore,
        cache: &'a KvCache,
        shape: GraphShape,
    ) -> Result<Builder<'a>> {
        let mut g = Graph::new();
        let n = shape.n_tokens;
        let tokens = g.input("tokens", DType::I32, &[n])?;
        let positions = g.input("positions", DType::I32, &[n])?;
        let mut cells = Vec::new();
        let mut masks = Vec::new();
        for kind in 0..cache.n_kinds() {
            cells.push(g.input(&format!("cells{kind}"), DType::I32, &[n])?);
            masks.push(g.input(&format!("mask{kind}"), DType::F16, &[shape.n_kv[kind], n])?);
        }
        let out_rows = g.input("out_rows", DType::I32, &[shape.n_outputs])?;
        let inp = Inputs { tokens, positions, cells, masks, out_rows };
        Ok(Builder { g, hp, t, weights, cache, shape, inp, rope_factors: None })
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
        let hp = self.hp;
        let factors = self.rope_factors()?;
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
        Ok(self.g.rope_ext(x, self.inp.positions, factors, p)?)
    }

    /// The RoPE frequency factors (llama.cpp's `get_rope_factors`): `rope_freqs` when the
    /// model has them, else LongRoPE's long factors when the context is longer than the
    /// original one and its short factors otherwise (none when the model has neither).
    fn rope_factors(&mut self) -> Result<Option<TensorId>> {
        if let Some(f) = self.rope_factors {
            return Ok(f);
        }
        let t = self.t;
        let chosen = if t.rope_freqs.is_some() {
            &t.rope_freqs
        } else if self.cache.n_ctx() > self.hp.n_ctx_orig {
            &t.rope_long
        } else {
            &t.rope_short
        };
        let f = self.opt_weight(chosen)?;
        self.rope_factors = Some(f);
        Ok(f)
    }

    /// Attention of layer `il` (llama.cpp's `build_attn` over its KV cache): the keys
    /// (`[head_dim_k, n_head_kv, n]`) and values (`[head_dim_v * n_head_kv, n]`, rows possibly
    /// strided) written into the cache cells of the batch (SET_ROWS), the queries
    /// (`[head_dim_k, n_head, n]`) attending over the cells of the batch's shape
    /// (FLASH_ATTN_EXT, `kqv_out`, scaled by `kq_scale`, masked per cache kind), then the output
    /// projection (with its bias).
    pub fn attention(
        &mut self,
        l: &LayerTensors,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        kq_scale: f32,
        il: usize,
    ) -> Result<TensorId> {
        let hp = self.hp;
        let n = self.shape.n_tokens;
        let (hd, hdv) = (hp.head_dim_k, hp.head_dim_v);
        let lc = self.cache.layer(il)?;
        let kind = lc.kind;
        let kc = self.g.new_tensor(DType::F16, &[hp.n_embd_k_gqa(), lc.k_layout.ne[1]])?;
        self.g.set_storage(kc, lc.k.clone())?;
        let vc = self.g.new_tensor(DType::F16, &[hp.n_embd_v_gqa(), lc.v_layout.ne[1]])?;
        self.g.set_storage(vc, lc.v.clone())?;
        let k2 = self.rows_2d(k, hp.n_embd_k_gqa(), n)?;
        let kw = self.g.set_rows(kc, k2, self.inp.cells[kind])?;
        let vw = self.g.set_rows(vc, v, self.inp.cells[kind])?;
        let n_kv = self.shape.n_kv[kind];
        let kview = self.g.view(kw, &[hd, n_kv, hp.n_head_kv], &[lc.k_layout.nb[1], hd * 2], 0)?;
        let vview =
            self.g.view(vw, &[hdv, n_kv, hp.n_head_kv], &[lc.v_layout.nb[1], hdv * 2], 0)?;
        let qp = self.g.permute(q, [0, 2, 1, 3])?;
        let params = AttnParams { scale: kq_scale, max_bias: 0.0, softcap: 0.0 };
        let att = self.g.flash_attn_ext(qp, kview, vview, Some(self.inp.masks[kind]), params)?;
        self.name(att, "kqv_out", Some(il))?;
        let att = self.g.reshape(att, &[hdv * hp.n_head, n])?;
        self.linear(&l.wo, &l.bo, att)
    }

    /// The input of recurrent layer `il`'s causal convolution over the batch (llama.cpp's
    /// `build_conv_state`, and LFM2's graph): `x` (`[conv_channels, n]`) transposed, after the
    /// layer's state (the `conv_kernel - 1` inputs before the batch, per channel), as
    /// `[conv_kernel - 1 + n, conv_channels, 1]` for SSM_CONV; its last `conv_kernel - 1`
    /// columns are written back into the state (CPY, after the read), for the next batch.
    pub fn conv_input(&mut self, x: TensorId, il: usize) -> Result<TensorId> {
        let hp = self.hp;
        let (d, ch, n) = (hp.conv_kernel - 1, hp.conv_channels, self.shape.n_tokens);
        let cache = self.cache;
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
    /// `ffn_geglu`) or with gate and up fused in one projection (the halves of `ffn_up`).
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
        }
    }

    /// The output head on the last layer's output `x`: the final norm (`result_norm`), and,
    /// unless the shape asks for embeddings, the output projection with its bias and the
    /// model's final soft cap (`result_output`).
    pub fn output(&mut self, mut x: TensorId) -> Result<TensorId> {
        let (hp, t) = (self.hp, self.t);
        if hp.n_layer == 0 && self.shape.n_outputs < self.shape.n_tokens {
            x = self.g.get_rows(x, self.inp.out_rows)?;
        }
        let out = self.norm(x, &t.output_norm, "result_norm", None)?;
        if self.shape.embeddings {
            return Ok(out);
        }
        let mut logits = self.linear(&t.output, &t.output_b, out)?;
        if hp.final_logit_softcap > 0.0 {
            let c = hp.final_logit_softcap;
            let s = self.g.scale(logits, 1.0 / c)?;
            let th = self.g.tanh(s)?;
            logits = self.g.scale(th, c)?;
        }
        self.name(logits, "result_output", None)
    }
}
