//! Qwen 3, as llama.cpp's `src/models/qwen3.cpp`: RMS norms of each query and key head before
//! NeoX RoPE, SwiGLU.

use super::Arch;
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, Keys};
use crate::tensors::{blk, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// The `qwen3` architecture.
pub(super) struct Qwen3;

impl Arch for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn rope_mode(&self) -> u32 {
        ROPE_MODE_NEOX
    }

    fn read_hparams(&self, _k: &Keys<'_>, _hp: &mut HParams) -> Result<()> {
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        for il in 0..hp.n_layer {
            let mut l = t.layer_base(il, hp)?;
            l.k_norm = Some(t.vector(&blk(il, "attn_k_norm.weight"), hp.head_dim_k)?);
            l.q_norm = Some(t.vector(&blk(il, "attn_q_norm.weight"), hp.head_dim_k)?);
            m.layers.push(l);
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        let mut x = b.embeddings()?;
        let (hp, t) = (b.hp, b.t);
        for (il, l) in t.layers.iter().enumerate() {
            let il_ = Some(il);
            let h = b.norm(x, &l.attn_norm, "attn_norm", il_)?;
            let (q, k, v) = b.qkv(l, h, il)?;
            let (q, k) = b.head_norms(l, q, k, il)?;
            let q = b.rope(q, il)?;
            b.name(q, "Qcur", il_)?;
            let k = b.rope(k, il)?;
            b.name(k, "Kcur", il_)?;
            let o = b.attention(l, q, k, v, hp.attn_scale, il)?;
            let (o, residual) = b.last_layer_rows(il, o, x)?;
            let ffn_inp = b.g.add(o, residual)?;
            b.name(ffn_inp, "ffn_inp", il_)?;
            let h = b.norm(ffn_inp, &l.ffn_norm, "ffn_norm", il_)?;
            let f = b.ffn(&l.ffn, h, GluOp::Swiglu, il)?;
            b.name(f, "ffn_out", il_)?;
            x = b.g.add(f, ffn_inp)?;
            b.name(x, "l_out", il_)?;
        }
        b.output(x)
    }
}
