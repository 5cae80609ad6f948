//! Qwen 2 / 2.5, as llama.cpp's `src/models/qwen2.cpp`: Q/K/V biases (required), NeoX RoPE,
//! SwiGLU, an optional output bias.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::TensorId;

/// The `qwen2` architecture's registry entry.
pub(super) static QWEN2: Registered =
    Registered { name: "qwen2", rope_mode: ROPE_MODE_NEOX, imp: &Qwen2 };

/// The `qwen2` architecture.
struct Qwen2;

impl Arch for Qwen2 {
    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        m.output_b = t.opt_vector("output.bias", hp.n_vocab)?;
        for il in 0..hp.n_layer {
            let l = t.layer_base(il, hp)?;
            t.require_qkv_biases(il, &l.qkv)?;
            m.layers.push(l);
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        b.pre_norm_decoder(false)
    }
}
