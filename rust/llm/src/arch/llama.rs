//! Llama 2 / 3.x (and Mistral, SmolLM 1 / 2, TinyLlama), as llama.cpp's `src/models/llama.cpp`:
//! grouped-query attention, RoPE in normal mode with its scaling and frequency factors
//! (`rope_freqs`, or LongRoPE's short / long factors when the scaling type says so), SwiGLU,
//! optional attention-output and FFN biases, a tied or separate output.

use super::Arch;
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, Keys, RopeScaling};
use crate::tensors::{blk, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NORMAL;
use tessera_core::{GluOp, TensorId};

/// The `llama` architecture.
pub(super) struct Llama;

impl Arch for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn rope_mode(&self) -> u32 {
        ROPE_MODE_NORMAL
    }

    fn read_hparams(&self, _k: &Keys<'_>, _hp: &mut HParams) -> Result<()> {
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        if hp.rope_scaling == RopeScaling::LongRope {
            t.longrope_factors(&mut m, hp)?;
        } else {
            m.rope_freqs = t.opt_vector("rope_freqs.weight", hp.n_rot / 2)?;
        }
        for il in 0..hp.n_layer {
            let mut l = t.layer_base(il, hp)?;
            l.bo = t.opt_vector(&blk(il, "attn_output.bias"), hp.n_embd)?;
            l.ffn = t.gated_ffn(il, hp, true)?;
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
            let q = b.rope(q, il)?;
            b.name(q, "Qcur", il_)?;
            let k = b.rope(k, il)?;
            b.name(k, "Kcur", il_)?;
            let o = b.attention(l, q, k, v, hp.attn_scale, il)?;
            b.name(o, "attn_out", il_)?;
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
