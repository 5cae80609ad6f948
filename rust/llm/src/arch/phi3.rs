//! Phi-3 / Phi-3.5-mini / Phi-4-mini, as llama.cpp's `src/models/phi3.cpp`: the queries, keys
//! and values in one projection (`attn_qkv`, or three as other files have them), NeoX RoPE on
//! `rope.dimension_count` of each head (Phi-4-mini rotates three quarters) with LongRoPE's
//! short or long frequency factors by the context size, the queries scaled before attention,
//! and gate and up in one projection (`ffn_up`, the gate's half first) under SwiGLU.
//!
//! The files carry `attention.sliding_window`, which llama.cpp reads and then disables (every
//! layer attends globally); so does this module.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, Keys};
use crate::tensors::{blk, FfnTensors, LayerTensors, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// The `phi3` architecture's registry entry.
pub(super) static PHI3: Registered =
    Registered { name: "phi3", rope_mode: ROPE_MODE_NEOX, imp: &Phi3 };

/// The `phi3` architecture.
struct Phi3;

impl Arch for Phi3 {
    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        if hp.head_dim_k != hp.head_dim_v {
            return Err(k.bad(
                "attention.value_length",
                format!("{} differs from the key length {}", hp.head_dim_v, hp.head_dim_k),
            ));
        }
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        let (e, f) = (hp.n_embd, hp.n_ff);
        for il in 0..hp.n_layer {
            let n = |s: &str| blk(il, s);
            let attn_norm = t.vector(&n("attn_norm.weight"), e)?;
            let qkv = t.qkv(il, hp, true)?;
            let wo = t.matrix(&n("attn_output.weight"), &[hp.head_dim_v * hp.n_head, e])?;
            let ffn_norm = t.vector(&n("ffn_norm.weight"), e)?;
            let down = t.matrix(&n("ffn_down.weight"), &[f, e])?;
            let up = t.matrix(&n("ffn_up.weight"), &[e, 2 * f])?;
            if il == 0 {
                t.longrope_factors(&mut m, hp)?;
            }
            let ffn = FfnTensors::FusedGateUp { up, down };
            m.layers.push(LayerTensors::new(attn_norm, qkv, wo, ffn_norm, ffn));
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        let mut x = b.embeddings()?;
        let (hp, t) = (b.hp, b.t);
        for (il, l) in t.layers.iter().enumerate() {
            let il_ = Some(il);
            let h = b.norm(x, &l.attn_norm, "attn_norm", il_)?;
            let (q, k, v) = b.rope_qk(l, h, il)?;
            let q = b.g.scale(q, hp.attn_scale)?;
            b.name(q, "Qcur", il_)?;
            let o = b.attention(l, q, k, v, 1.0, il)?;
            let (o, residual) = b.last_layer_rows(il, o, x)?;
            let sa_out = b.g.add(o, residual)?;
            let h = b.norm(sa_out, &l.ffn_norm, "ffn_norm", il_)?;
            let f = b.ffn(&l.ffn, h, GluOp::Swiglu, il)?;
            b.name(f, "ffn_out", il_)?;
            x = b.g.add(sa_out, f)?;
            b.name(x, "l_out", il_)?;
        }
        b.output(x)
    }
}
