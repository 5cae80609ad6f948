//! SmolLM3, as llama.cpp's `src/models/smollm3.cpp`: Llama's block without RoPE factors or
//! biases, and every fourth layer (`(il + 1) % 4 == 0`, llama.cpp's `n_no_rope_layer_step`,
//! which no metadata key sets) without RoPE: its queries and keys attend unrotated.

use super::Arch;
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, Keys};
use crate::tensors::{Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NORMAL;
use tessera_core::{GluOp, TensorId};

/// Every this many layers, one has no RoPE (the last of each group).
pub(super) const NO_ROPE_LAYER_STEP: usize = 4;

/// The `smollm3` architecture.
pub(super) struct SmolLm3;

impl Arch for SmolLm3 {
    fn name(&self) -> &'static str {
        "smollm3"
    }

    fn rope_mode(&self) -> u32 {
        ROPE_MODE_NORMAL
    }

    fn read_hparams(&self, _k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        hp.rope_layers = (0..hp.n_layer).map(|il| (il + 1) % NO_ROPE_LAYER_STEP != 0).collect();
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
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
            let (mut q, mut k, v) = b.qkv(l, h, il)?;
            if hp.uses_rope(il) {
                q = b.rope(q, il)?;
                b.name(q, "Qcur", il_)?;
                k = b.rope(k, il)?;
                b.name(k, "Kcur", il_)?;
            }
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
