//! EmbeddingGemma, as llama.cpp's `src/models/gemma-embedding.cpp`: Gemma 3's layers (see
//! [`super::gemma3`]) attending both ways, the sliding-window layers within a window centred on
//! each token (`|p - q| <= n_swa / 2`), the final norm's states pooled as the file says (mean),
//! then the dense projections of the sentence-transformers head (`dense_2`, `dense_3`) when the
//! file has them. An embedding model only: it has no output projection.

use super::{gemma3, Arch, Registered};
use crate::blocks::Builder;
use crate::error::Result;
use crate::hparams::{sliding_window_layers, HParams, Keys, SwaType, MAX_CTX};
use crate::tensors::{Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::TensorId;

/// llama.cpp's default sliding-window period (every sixth layer global), as Gemma 3's.
const SWA_PERIOD: u32 = 6;

/// Widest dense projection accepted from the metadata.
const MAX_DENSE: usize = 1 << 20;

/// The `gemma-embedding` architecture's registry entry.
pub(super) static GEMMA_EMBEDDING: Registered =
    Registered { name: "gemma-embedding", rope_mode: ROPE_MODE_NEOX, imp: &GemmaEmbedding };

/// The `gemma-embedding` architecture.
struct GemmaEmbedding;

impl Arch for GemmaEmbedding {
    fn generates(&self) -> bool {
        false
    }

    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        hp.causal = false;
        hp.swa_type = SwaType::Symmetric;
        hp.n_swa = k.count("attention.sliding_window", MAX_CTX)?;
        hp.swa_layers = sliding_window_layers(k, hp.n_layer, SWA_PERIOD)?;
        if let Some(base) = k.opt_f32("rope.freq_base_swa")? {
            hp.rope_freq_base_swa = base;
        }
        let e = hp.n_embd;
        for (key, must_be_embd) in [("dense_2_feat_in", true), ("dense_3_feat_out", true)] {
            if let Some(n) = k.opt_width(key, MAX_DENSE)? {
                if must_be_embd && n != 0 && n != e {
                    return Err(k.bad(key, format!("{n} differs from the embedding length {e}")));
                }
            }
        }
        hp.embedding.dense_2_out = k.opt_width("dense_2_feat_out", MAX_DENSE)?.unwrap_or(0);
        hp.embedding.dense_3_in = k.opt_width("dense_3_feat_in", MAX_DENSE)?.unwrap_or(0);
        hp.attn_scale = 1.0 / (hp.head_dim_k as f32).sqrt();
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings(hp)?;
        let (e, d) = (hp.n_embd, &hp.embedding);
        m.output_norm = Some(t.vector("output_norm.weight", e)?);
        if d.dense_2_out > 0 {
            m.head.dense_2 = t.opt_matrix("dense_2.weight", &[e, d.dense_2_out])?;
        }
        if d.dense_3_in > 0 {
            m.head.dense_3 = t.opt_matrix("dense_3.weight", &[d.dense_3_in, e])?;
        }
        for il in 0..hp.n_layer {
            m.layers.push(gemma3::layer(t, hp, il)?);
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        gemma3::graph(b)
    }
}
