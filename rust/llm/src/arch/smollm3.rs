//! SmolLM3, as llama.cpp's `src/models/smollm3.cpp`: Llama's block without RoPE factors or
//! biases, and every fourth layer (`(il + 1) % 4 == 0`, llama.cpp's `n_no_rope_layer_step`,
//! which no metadata key sets) without RoPE: its queries and keys attend unrotated.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{HParams, Keys};
use crate::tensors::{Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NORMAL;
use tessera_core::TensorId;

/// Every this many layers, one has no RoPE (the last of each group).
pub(super) const NO_ROPE_LAYER_STEP: usize = 4;

/// The `smollm3` architecture's registry entry.
pub(super) static SMOLLM3: Registered =
    Registered { name: "smollm3", rope_mode: ROPE_MODE_NORMAL, imp: &SmolLm3 };

/// The `smollm3` architecture.
struct SmolLm3;

impl Arch for SmolLm3 {
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
        b.pre_norm_decoder(true)
    }
}
