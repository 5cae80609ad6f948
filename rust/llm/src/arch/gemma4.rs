//! Gemma 4 E2B / E4B, as llama.cpp's `src/models/gemma4.cpp`: embeddings scaled by
//! `sqrt(n_embd)`; per-layer token embeddings (a table of `n_embd_per_layer` values per layer
//! for every token, read in place by GET_ROWS for the batch's tokens only, scaled by
//! `sqrt(n_embd_per_layer)`, added to an RMS-normed projection of the embeddings and scaled by
//! `1 / sqrt(2)`); sliding-window layers with their own head size, rotation and RoPE base, the
//! global layers' RoPE with the `rope_freqs` factors (their partial rotation); RMS norms of
//! each query and key head and a weightless one of each value head, attention unscaled; the
//! top `shared_kv_layers` layers without keys and values of their own, attending over the
//! cache of the last sliding-window / global layer below them; RMS norms after attention and
//! the FFN (GeGLU, each layer its own width); then each layer's per-layer embedding
//! (`x + post_norm(proj(gelu(inp_gate x) * e))`) and its output scale; the final logit soft
//! cap, tied output. No built-in chat template: Gemma 4's turns are not Gemma 3's, and its
//! files carry their own.
//!
//! The mixture-of-experts FFN of the larger Gemma 4 models is not built (a file with
//! `expert_count` is refused, the key named), nor a fused `attn_qkv` (refused, `attn_q` named
//! missing).

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::{LlmError, Result};
use crate::hparams::{sliding_window_layers, HParams, Keys, MAX_CTX};
use crate::tensors::{
    blk, LayerTensors, Lookup, ModelTensor, ModelTensors, PerLayerBlock, PerLayerInputs, QkvTensors,
};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// Widest per-layer embedding slice accepted from the metadata.
const MAX_PER_LAYER: usize = 1 << 16;

/// The `gemma4` architecture's registry entry.
pub(super) static GEMMA4: Registered =
    Registered { name: "gemma4", rope_mode: ROPE_MODE_NEOX, imp: &Gemma4 };

/// The `gemma4` architecture.
struct Gemma4;

impl Arch for Gemma4 {
    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        // The mixture-of-experts models (26B A4B) add routed experts beside the dense FFN,
        // which this graph does not build: refused rather than run without them.
        if let Some(n) = k.file.opt_u64(&k.key("expert_count"))?.filter(|&n| n > 0) {
            return Err(k.bad(
                "expert_count",
                format!("{n} experts: Gemma 4's mixture-of-experts FFN is not supported"),
            ));
        }
        let pattern = "attention.sliding_window_pattern";
        if k.file.get(&k.key(pattern)).and_then(|v| v.as_array()).is_none() {
            return Err(k.bad(pattern, "missing (an array of one flag per layer)"));
        }
        hp.n_swa = k.count("attention.sliding_window", MAX_CTX)?;
        hp.swa_layers = sliding_window_layers(k, hp.n_layer, 0)?;
        // llama.cpp's default when the key is absent (`rope_freq_base_train_swa`).
        hp.rope_freq_base_swa = k.opt_f32("rope.freq_base_swa")?.unwrap_or(10000.0);
        if hp.rope_freq_base_swa <= 0.0 {
            return Err(k.bad("rope.freq_base_swa", format!("{} <= 0", hp.rope_freq_base_swa)));
        }
        hp.head_dim_k_swa = k.count("attention.key_length_swa", 1 << 20)?;
        hp.head_dim_v_swa = k.count("attention.value_length_swa", 1 << 20)?;
        if hp.head_dim_k != hp.head_dim_v {
            return Err(k.bad(
                "attention.value_length",
                format!("{} differs from the key length {}", hp.head_dim_v, hp.head_dim_k),
            ));
        }
        if hp.head_dim_k_swa != hp.head_dim_v_swa {
            return Err(k.bad(
                "attention.value_length_swa",
                format!("{} differs from the key length {}", hp.head_dim_v_swa, hp.head_dim_k_swa),
            ));
        }
        hp.n_rot_swa = k.opt_count("rope.dimension_count_swa", 1 << 20)?.unwrap_or(hp.n_rot);
        if hp.n_rot_swa > hp.head_dim_k_swa || !hp.n_rot_swa.is_multiple_of(2) {
            return Err(k.bad(
                "rope.dimension_count_swa",
                format!(
                    "{} must be even and at most the sliding layers' head dimension {}",
                    hp.n_rot_swa, hp.head_dim_k_swa
                ),
            ));
        }
        let shared = k.opt_width("attention.shared_kv_layers", hp.n_layer)?.unwrap_or(0);
        hp.n_layer_kv = hp.n_layer - shared;
        // The shared layers reuse the caches of the last sliding and the last global layer
        // below them (llama.cpp's rule): those must be layers n_kv - 2 and n_kv - 1.
        if shared > 0 {
            let n_kv = hp.n_layer_kv;
            if n_kv < 2 || !hp.is_swa(n_kv - 2) || hp.is_swa(n_kv - 1) {
                return Err(k.bad(
                    "attention.shared_kv_layers",
                    format!(
                        "{shared} shared layers leave {n_kv} below them, which must end with a \
                         sliding-window layer then a global one"
                    ),
                ));
            }
        }
        hp.n_embd_per_layer = k
            .opt_width("embedding_length_per_layer_input", MAX_PER_LAYER)?
            .ok_or_else(|| k.bad("embedding_length_per_layer_input", "missing"))?;
        if let Some(il) = hp.n_ff_layers.iter().position(|&f| f == 0) {
            return Err(k.bad("feed_forward_length", format!("0 in layer {il}")));
        }
        hp.final_logit_softcap = k.opt_f32("final_logit_softcapping")?.unwrap_or(0.0);
        // Gemma 4 scales neither the queries nor their products (its Q/K norms set the scale).
        hp.attn_scale = 1.0;
        Ok(())
    }

    fn can_shift(&self) -> bool {
        false
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        let (e, pl) = (hp.n_embd, hp.n_embd_per_layer);
        if pl > 0 {
            let width = pl * hp.n_layer;
            m.per_layer = Some(PerLayerInputs {
                token_embd: t.table("per_layer_token_embd.weight", &[width, hp.n_vocab])?,
                model_proj: t.matrix("per_layer_model_proj.weight", &[e, width])?,
                proj_norm: t.vector("per_layer_proj_norm.weight", pl)?,
            });
        }
        if (0..hp.n_layer).any(|il| !hp.is_swa(il)) {
            m.rope_freqs = Some(t.vector("rope_freqs.weight", hp.head_dim_k / 2)?);
        }
        for il in 0..hp.n_layer {
            m.layers.push(layer(t, hp, il)?);
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        graph(b)
    }
}

/// Layer `il`'s tensors: see the module doc.
fn layer(t: &mut Lookup<'_>, hp: &HParams, il: usize) -> Result<LayerTensors> {
    let (e, hd) = (hp.n_embd, hp.head_dim_k_of(il));
    let n = |s: &str| blk(il, s);
    let attn_norm = t.vector(&n("attn_norm.weight"), e)?;
    let wq = t.matrix(&n("attn_q.weight"), &[e, hd * hp.n_head])?;
    let has_kv = il < hp.n_layer_kv;
    let qkv = if has_kv {
        let wk = t.matrix(&n("attn_k.weight"), &[e, hd * hp.n_head_kv])?;
        let wv = t.matrix(&n("attn_v.weight"), &[e, hp.head_dim_v_of(il) * hp.n_head_kv])?;
        QkvTensors::Separate { wq, wk, wv, bq: None, bk: None, bv: None }
    } else {
        QkvTensors::QueryOnly { wq }
    };
    let wo = t.matrix(&n("attn_output.weight"), &[hd * hp.n_head, e])?;
    let ffn_norm = t.vector(&n("ffn_norm.weight"), e)?;
    let ffn = t.gated_ffn(il, hp, false)?;
    let mut l = LayerTensors::new(attn_norm, qkv, wo, ffn_norm, ffn);
    l.q_norm = Some(t.vector(&n("attn_q_norm.weight"), hd)?);
    if has_kv {
        l.k_norm = Some(t.vector(&n("attn_k_norm.weight"), hd)?);
    }
    l.post_attn_norm = Some(t.vector(&n("post_attention_norm.weight"), e)?);
    l.post_ffn_norm = Some(t.vector(&n("post_ffw_norm.weight"), e)?);
    l.out_scale = t.opt_vector(&n("layer_output_scale.weight"), 1)?;
    if hp.n_embd_per_layer > 0 {
        let pl = hp.n_embd_per_layer;
        l.per_layer = Some(PerLayerBlock {
            inp_gate: t.matrix(&n("inp_gate.weight"), &[e, pl])?,
            proj: t.matrix(&n("proj.weight"), &[pl, e])?,
            post_norm: t.vector(&n("post_norm.weight"), e)?,
        });
    }
    Ok(l)
}

/// The per-layer inputs of the batch (llama.cpp's `build_inp_per_layer` then
/// `project_per_layer_inputs`): `[n_embd_per_layer, n_tokens, n_layer]`, layer `il`'s slice
/// the `il`-th matrix. `x` is the scaled embeddings.
fn per_layer_inputs(b: &mut Builder<'_>, p: &PerLayerInputs, x: TensorId) -> Result<TensorId> {
    let hp = b.hp;
    let (pl, nl, n) = (hp.n_embd_per_layer, hp.n_layer, b.shape.n_tokens);
    let table = b.weight(&p.token_embd)?;
    let sel = b.g.get_rows(table, b.inp.tokens)?;
    let sel = b.g.reshape(sel, &[pl, nl, n])?;
    let sel = b.g.scale(sel, (pl as f32).sqrt())?;
    b.name(sel, "inp_per_layer_selected", None)?;
    let proj = b.weight(&p.model_proj)?;
    let proj = b.g.mul_mat(proj, x)?;
    let proj = b.g.scale(proj, 1.0 / (hp.n_embd as f32).sqrt())?;
    let proj = b.g.reshape(proj, &[pl, nl, n])?;
    let proj = b.norm(proj, &p.proj_norm, "per_layer_proj", None)?;
    let sum = b.g.add(proj, sel)?;
    let sum = b.g.scale(sum, 1.0 / 2f32.sqrt())?;
    b.name(sum, "inp_per_layer", None)?;
    let perm = b.g.permute(sum, [0, 2, 1, 3])?;
    Ok(b.g.cont(perm)?)
}

/// Layer `il`'s per-layer embedding added to `cur` (named `pe_in`): `inp` is
/// [`per_layer_inputs`]' result.
fn add_per_layer(
    b: &mut Builder<'_>,
    pb: &PerLayerBlock,
    inp: TensorId,
    cur: TensorId,
    il: usize,
) -> Result<TensorId> {
    let (pl, n) = (b.hp.n_embd_per_layer, b.shape.n_tokens);
    b.name(cur, "pe_in", Some(il))?;
    let gate = b.weight(&pb.inp_gate)?;
    let g = b.g.mul_mat(gate, cur)?;
    let g = b.g.gelu(g)?;
    let slice = b.g.view(inp, &[pl, n], &[pl * 4], il * pl * n * 4)?;
    let g = b.g.mul(g, slice)?;
    let proj = b.weight(&pb.proj)?;
    let p = b.g.mul_mat(proj, g)?;
    let p = b.norm(p, &pb.post_norm, "per_layer_embd_out", Some(il))?;
    Ok(b.g.add(cur, p)?)
}

/// Layer `il`'s heads `[head_dim, heads, n]` of the projection `w` of `h`, named `name`
/// (before the reshape, as llama.cpp names it).
fn heads(
    b: &mut Builder<'_>,
    w: &ModelTensor,
    h: TensorId,
    n_heads: usize,
    name: &str,
    il: usize,
) -> Result<TensorId> {
    let hd = b.hp.head_dim_k_of(il);
    let y = b.linear(w, &None, h)?;
    b.name(y, name, Some(il))?;
    Ok(b.g.reshape(y, &[hd, n_heads, b.shape.n_tokens])?)
}

/// The graph: see the module doc.
fn graph(b: &mut Builder<'_>) -> Result<TensorId> {
    let x = b.embeddings()?;
    let (hp, t) = (b.hp, b.t);
    let x = b.g.scale(x, (hp.n_embd as f32).sqrt())?;
    let mut x = b.name(x, "inp_scaled", None)?;
    let ple = match &t.per_layer {
        Some(p) => Some(per_layer_inputs(b, p, x)?),
        None => None,
    };
    let freqs = match &t.rope_freqs {
        Some(f) => Some(b.weight(f)?),
        None => None,
    };
    for (il, l) in t.layers.iter().enumerate() {
        let il_ = Some(il);
        let factors = if hp.is_swa(il) { None } else { freqs };
        let h = b.norm(x, &l.attn_norm, "attn_norm", il_)?;
        let (wq, kv) = match &l.qkv {
            QkvTensors::Separate { wq, wk, wv, .. } => (wq, Some((wk, wv))),
            QkvTensors::QueryOnly { wq } => (wq, None),
            QkvTensors::Fused { .. } => {
                return Err(LlmError::InvalidArgument(format!(
                    "layer {il}: gemma4 is built with separate Q/K/V projections"
                )))
            }
        };
        let q = heads(b, wq, h, hp.n_head, "Qcur", il)?;
        let q = b.opt_norm(q, &l.q_norm, "Qcur_normed", il)?;
        let q = b.rope_with(q, il, factors)?;
        b.name(q, "Qcur_pos", il_)?;
        let att = match kv {
            Some((wk, wv)) => {
                let k = heads(b, wk, h, hp.n_head_kv, "Kcur", il)?;
                let v = heads(b, wv, h, hp.n_head_kv, "Vcur", il)?;
                let k = b.opt_norm(k, &l.k_norm, "Kcur_normed", il)?;
                let v = b.g.rms_norm(v, hp.rms_eps)?;
                b.name(v, "Vcur_normed", il_)?;
                let k = b.rope_with(k, il, factors)?;
                b.name(k, "Kcur_pos", il_)?;
                let v = b.g.reshape(v, &[hp.n_embd_v_gqa_of(il), b.shape.n_tokens])?;
                b.attention_heads(q, k, v, hp.attn_scale, il)?
            }
            None => b.attend(q, hp.attn_scale, il, hp.kv_source(il))?,
        };
        let o = b.linear(&l.wo, &l.bo, att)?;
        let o = b.opt_norm(o, &l.post_attn_norm, "attn_post_norm", il)?;
        let attn_out = b.g.add(o, x)?;
        b.name(attn_out, "attn_out", il_)?;
        let h = b.norm(attn_out, &l.ffn_norm, "ffn_norm", il_)?;
        let f = b.ffn(&l.ffn, h, GluOp::Geglu, il)?;
        b.name(f, "ffn_out", il_)?;
        let f = b.opt_norm(f, &l.post_ffn_norm, "ffn_post_norm", il)?;
        let mut cur = b.g.add(f, attn_out)?;
        if let (Some(pb), Some(inp)) = (&l.per_layer, ple) {
            cur = add_per_layer(b, pb, inp, cur, il)?;
        }
        if let Some(s) = &l.out_scale {
            let s = b.weight(s)?;
            cur = b.g.mul(cur, s)?;
            b.name(cur, "out_scaled", il_)?;
        }
        x = b.name(cur, "l_out", il_)?;
    }
    // The final norm of every row (`h_nextn`), then the rows wanted (`result_norm`), as
    // llama.cpp's graph.
    let w = t.output_norm.as_ref().ok_or_else(|| {
        LlmError::InvalidArgument("gemma4 needs its final norm (output_norm)".into())
    })?;
    let mut out = b.norm(x, w, "h_nextn", None)?;
    if b.shape.n_outputs < b.shape.n_tokens {
        out = b.g.get_rows(out, b.inp.out_rows)?;
    }
    b.name(out, "result_norm", None)?;
    if b.shape.embeddings {
        return Ok(out);
    }
    b.logits(out)
}
