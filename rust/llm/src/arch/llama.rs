//! Llama 2 / 3.x (and Mistral, SmolLM 1 / 2, TinyLlama), as llama.cpp's `src/models/llama.cpp`:
//! grouped-query attention, RoPE in normal mode with its scaling and frequency factors
//! (`rope_freqs`, or LongRoPE's short / long factors when the scaling type says so), SwiGLU,
//! optional attention-output and FFN biases, a tied or separate output.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, RopeScaling};
use crate::tensors::{blk, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NORMAL;
use tessera_core::TensorId;

/// The `llama` architecture's registry entry.
pub(super) static LLAMA: Registered =
    Registered { name: "llama", rope_mode: ROPE_MODE_NORMAL, imp: &Llama };

/// The `llama` architecture.
struct Llama;

impl Arch for Llama {
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
        b.pre_norm_decoder(true)
    }
}
