//! Qwen 2 / 2.5, as llama.cpp's `src/models/qwen2.cpp`: Q/K/V biases, NeoX RoPE, SwiGLU, an
//! optional output bias.

use super::Arch;
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, Keys};
use crate::tensors::{Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// The `qwen2` architecture.
pub(super) struct Qwen2;

impl Arch for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn rope_mode(&self) -> u32 {
        ROPE_MODE_NEOX
    }

    fn read_hparams(&self, _k: &Keys<'_>, _hp: &mut HParams) -> Result<()> {
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        m.output_b = t.opt_vector("output.bias", hp.n_vocab)?;
        for il in 0..hp.n_layer {
            m.layers.push(t.layer_base(il, hp)?);
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
