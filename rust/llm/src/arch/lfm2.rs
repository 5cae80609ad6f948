//! LFM2 / LFM2.5 (Liquid AI), as llama.cpp's `src/models/lfm2.cpp`: a hybrid of short-
//! convolution layers and grouped-query attention layers, each followed by a SwiGLU FFN, RMS
//! norms before both.
//!
//! The layers without KV heads (`attention.head_count_kv` per layer, 0) are short-convolution
//! layers: the normed input projected to `B`, `C`, `X` (`shortconv.in_proj`), `B * X` convolved
//! causally along the tokens over `shortconv.l_cache` taps (SSM_CONV, after the layer's state of
//! the previous `l_cache - 1` inputs, [`crate::recurrent`]), times `C`, projected out
//! (`shortconv.out_proj`). The attention layers have RMS norms of each query and key head and
//! NeoX RoPE. The final norm is named `token_embd_norm` in these files; the output is tied.
//!
//! The intermediate tensors carry llama.cpp's names for this graph (`model.layers.{}.
//! operator_norm-0`, `model.layers.{}.conv.in_proj-0`, ...: its LFM2 graph passes those format
//! strings to its callback unformatted); the FFN's normed input is `model.layers.{}.ffn_out`, as
//! llama.cpp names it last. Files of non-causal LFM2 models (the ColBERT and embedding ones) are
//! refused.

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::{LlmError, Result};
use crate::hparams::{HParams, Keys, MAX_CTX};
use crate::tensors::{blk, Block, LayerTensors, Lookup, ModelTensors, ShortConvTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// Most convolution taps accepted from the metadata (LFM2 has 3).
const MAX_CONV_KERNEL: usize = 64;

/// The `lfm2` architecture's registry entry.
pub(super) static LFM2: Registered =
    Registered { name: "lfm2", rope_mode: ROPE_MODE_NEOX, imp: &Lfm2 };

/// The `lfm2` architecture.
struct Lfm2;

impl Arch for Lfm2 {
    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        let l_cache = k.count("shortconv.l_cache", MAX_CONV_KERNEL)?;
        if l_cache < 2 {
            return Err(k.bad("shortconv.l_cache", format!("{l_cache} taps; at least 2 needed")));
        }
        if k.file.opt_bool(&k.key("attention.causal"))? == Some(false) {
            return Err(k.bad("attention.causal", "non-causal LFM2 models are not supported"));
        }
        if hp.head_dim_k != hp.head_dim_v {
            return Err(k.bad(
                "attention.value_length",
                format!("{} differs from the key length {}", hp.head_dim_v, hp.head_dim_k),
            ));
        }
        hp.conv_kernel = l_cache;
        hp.conv_channels = hp.n_embd;
        hp.recurrent_layers = hp.n_head_kv_layers.iter().map(|&n| n == 0).collect();
        // A sliding window, when the file sets one, applies to every attention layer, which
        // rotate with the model's one RoPE base.
        match k.file.opt_u64(&k.key("attention.sliding_window"))? {
            None | Some(0) => {}
            Some(w) => {
                hp.n_swa = usize::try_from(w)
                    .ok()
                    .filter(|&w| w <= MAX_CTX)
                    .ok_or_else(|| k.bad("attention.sliding_window", format!("{w} > {MAX_CTX}")))?;
                hp.swa_layers = hp.recurrent_layers.iter().map(|&r| !r).collect();
                hp.rope_freq_base_swa = hp.rope_freq_base;
                hp.rope_freq_scale_swa = hp.rope_freq_scale;
            }
        }
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output_norm(hp, "token_embd_norm.weight")?;
        let e = hp.n_embd;
        for il in 0..hp.n_layer {
            let n = |s: &str| blk(il, s);
            if hp.is_recurrent(il) {
                let attn_norm = t.vector(&n("attn_norm.weight"), e)?;
                let conv = ShortConvTensors {
                    in_proj: t.matrix(&n("shortconv.in_proj.weight"), &[e, 3 * e])?,
                    conv: t.f32_tensor(&n("shortconv.conv.weight"), &[hp.conv_kernel, e])?,
                    out_proj: t.matrix(&n("shortconv.out_proj.weight"), &[e, e])?,
                };
                let ffn_norm = t.vector(&n("ffn_norm.weight"), e)?;
                let ffn = t.gated_ffn(il, hp, false)?;
                m.blocks.push(Block::ShortConv { attn_norm, conv, ffn_norm, ffn });
            } else {
                let mut l = t.layer_base(il, hp)?;
                l.q_norm = Some(t.vector(&n("attn_q_norm.weight"), hp.head_dim_k)?);
                l.k_norm = Some(t.vector(&n("attn_k_norm.weight"), hp.head_dim_k)?);
                m.blocks.push(Block::Attention(l));
            }
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        let x = b.embeddings()?;
        let mut x = b.name(x, "model.embed_tokens", None)?;
        let t = b.t;
        for (il, block) in t.blocks.iter().enumerate() {
            let il_ = Some(il);
            let (attn_norm, ffn_norm, ffn) = block.norms_and_ffn();
            let h = b.norm(x, attn_norm, "model.layers.{}.operator_norm", il_)?;
            let o = match block {
                Block::Attention(l) => attention(b, l, h, il)?,
                Block::ShortConv { conv, .. } => short_conv(b, conv, h, il)?,
                Block::DeltaNet { .. } => {
                    return Err(LlmError::InvalidArgument(format!(
                        "lfm2 layer {il} is a gated delta-net, which LFM2 has not"
                    )))
                }
            };
            let (o, residual) = b.last_layer_rows(il, o, x)?;
            let cur = b.g.add(residual, o)?;
            let h = b.norm(cur, ffn_norm, "model.layers.{}.ffn_out", il_)?;
            let f = b.ffn(ffn, h, GluOp::Swiglu, il)?;
            x = b.g.add(cur, f)?;
            b.name(x, "l_out", il_)?;
        }
        b.output(x)
    }
}

/// An attention layer: Q/K/V, the RMS norms of each query and key head, NeoX RoPE, attention
/// over the KV cache scaled by `1 / sqrt(head_dim)`, the output projection.
fn attention(b: &mut Builder<'_>, l: &LayerTensors, h: TensorId, il: usize) -> Result<TensorId> {
    let (q, k, v) = b.qkv(l, h, il)?;
    let q = b.opt_norm(q, &l.q_norm, "model.layers.{}.self_attn.q_layernorm", il)?;
    let k = b.opt_norm(k, &l.k_norm, "model.layers.{}.self_attn.k_layernorm", il)?;
    let q = b.rope(q, il)?;
    let k = b.rope(k, il)?;
    let o = b.attention(l, q, k, v, b.hp.attn_scale, il)?;
    b.name(o, "model.layers.{}.self_attn.out_proj", Some(il))
}

/// A short-convolution layer on its normed input `h` (`[n_embd, n]`).
fn short_conv(
    b: &mut Builder<'_>,
    c: &ShortConvTensors,
    h: TensorId,
    il: usize,
) -> Result<TensorId> {
    let il_ = Some(il);
    let e = b.hp.n_embd;
    let n = b.shape.n_tokens;
    let bcx = b.linear(&c.in_proj, &None, h)?;
    b.name(bcx, "model.layers.{}.conv.in_proj", il_)?;
    let row = b.g.tensor(bcx).nb()[1];
    let gate_b = b.g.view(bcx, &[e, n], &[row], 0)?;
    let gate_c = b.g.view(bcx, &[e, n], &[row], e * 4)?;
    let x = b.g.view(bcx, &[e, n], &[row], 2 * e * 4)?;
    let bx = b.g.mul(gate_b, x)?;
    let sx = b.conv_input(bx, il)?;
    let taps = b.weight(&c.conv)?;
    let conv = b.g.ssm_conv(sx, taps)?;
    b.name(conv, "model.layers.{}.conv.conv", il_)?;
    let conv = b.g.reshape(conv, &[e, n])?;
    let y = b.g.mul(gate_c, conv)?;
    let y = b.linear(&c.out_proj, &None, y)?;
    b.name(y, "model.layers.{}.conv.out_proj", il_)
}
