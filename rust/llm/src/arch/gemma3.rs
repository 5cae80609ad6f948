//! Gemma 3, as llama.cpp's `src/models/gemma3.cpp`: embeddings scaled by `sqrt(n_embd)`, RMS
//! norms before and after attention and the FFN, RMS norms of each query and key head, NeoX
//! RoPE (the sliding-window layers with a base of their own), queries scaled before attention,
//! GeGLU, a final logit soft cap, tied output; and, when the file has none, a built-in chat
//! template.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::chat::ChatTemplate;
use crate::error::Result;
use crate::hparams::{sliding_window_layers, HParams, Keys, MAX_CTX};
use crate::tensors::{blk, LayerTensors, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// llama.cpp's default sliding-window period for Gemma 3 (every sixth layer global).
const SWA_PERIOD: u32 = 6;

/// The `gemma3` architecture's registry entry.
pub(super) static GEMMA3: Registered =
    Registered { name: "gemma3", rope_mode: ROPE_MODE_NEOX, imp: &Gemma3 };

/// The `gemma3` architecture.
struct Gemma3;

impl Arch for Gemma3 {
    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        if let Some(w) = k.opt_count("attention.sliding_window", MAX_CTX)? {
            hp.n_swa = w;
            hp.swa_layers = sliding_window_layers(k, hp.n_layer, SWA_PERIOD)?;
            hp.rope_freq_base_swa = k.opt_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
        }
        hp.final_logit_softcap = k.opt_f32("final_logit_softcapping")?.unwrap_or(0.0);
        // Gemma 3 27B scales by the query width per head; the others by the head size.
        if hp.n_layer == 62 {
            hp.attn_scale = 1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt();
        }
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        for il in 0..hp.n_layer {
            m.layers.push(layer(t, hp, il)?);
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        graph(b)
    }

    fn builtin_chat_template(&self) -> Option<ChatTemplate> {
        Some(ChatTemplate::gemma())
    }
}

/// Layer `il`'s tensors (EmbeddingGemma's too): the pre-norm layer with RMS norms after
/// attention and the FFN and of each query and key head.
pub(super) fn layer(t: &mut Lookup<'_>, hp: &HParams, il: usize) -> Result<LayerTensors> {
    let e = hp.n_embd;
    let mut l = t.layer_base(il, hp)?;
    l.post_attn_norm = Some(t.vector(&blk(il, "post_attention_norm.weight"), e)?);
    l.k_norm = Some(t.vector(&blk(il, "attn_k_norm.weight"), hp.head_dim_k)?);
    l.q_norm = Some(t.vector(&blk(il, "attn_q_norm.weight"), hp.head_dim_k)?);
    l.post_ffn_norm = Some(t.vector(&blk(il, "post_ffw_norm.weight"), e)?);
    Ok(l)
}

/// The graph of Gemma 3 (and of EmbeddingGemma, whose attention the builder makes
/// bidirectional): see the module doc.
pub(super) fn graph(b: &mut Builder<'_>) -> Result<TensorId> {
    let x = b.embeddings()?;
    let (hp, t) = (b.hp, b.t);
    let x = b.g.scale(x, (hp.n_embd as f32).sqrt())?;
    let mut x = b.name(x, "inp_scaled", None)?;
    for (il, l) in t.layers.iter().enumerate() {
        let il_ = Some(il);
        let h = b.norm(x, &l.attn_norm, "attn_norm", il_)?;
        let (q, k, v) = b.rope_qk(l, h, il)?;
        // The queries are scaled before attention (llama.cpp's order, same rounding).
        let q = b.g.scale(q, hp.attn_scale)?;
        let o = b.attention(l, q, k, v, 1.0, il)?;
        let (o, residual) = b.last_layer_rows(il, o, x)?;
        let o = b.opt_norm(o, &l.post_attn_norm, "attn_post_norm", il)?;
        let sa_out = b.g.add(o, residual)?;
        b.name(sa_out, "sa_out", il_)?;
        let h = b.norm(sa_out, &l.ffn_norm, "ffn_norm", il_)?;
        let f = b.ffn(&l.ffn, h, GluOp::Geglu, il)?;
        b.name(f, "ffn_out", il_)?;
        let f = b.opt_norm(f, &l.post_ffn_norm, "ffn_post_norm", il)?;
        x = b.g.add(f, sa_out)?;
        b.name(x, "l_out", il_)?;
    }
    b.output(x)
}
