//! Qwen 3, as llama.cpp's `src/models/qwen3.cpp`: RMS norms of each query and key head before
//! NeoX RoPE, SwiGLU.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{blk, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::TensorId;

/// The `qwen3` architecture's registry entry.
pub(super) static QWEN3: Registered =
    Registered { name: "qwen3", rope_mode: ROPE_MODE_NEOX, imp: &Qwen3 };

/// The `qwen3` architecture.
struct Qwen3;

impl Arch for Qwen3 {
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
        b.pre_norm_decoder(false)
    }
}
