//! Qwen 3.5 (0.8B / 2B / 4B and the larger dense ones), as llama.cpp's `src/models/qwen35.cpp`
//! and `delta-net-base.cpp`: a hybrid of gated delta-net layers (linear attention with a
//! recurrent state) and, every `full_attention_interval`-th layer, gated full attention; each
//! layer `x + mixer(attn_norm(x))` (`attn_residual`), then `+ ffn(post_attention_norm(.))`, a
//! SwiGLU FFN; tied or untied output.
//!
//! A delta-net layer projects its normed input to the queries, keys and values (`attn_qkv`),
//! convolves them causally along the tokens (SSM_CONV over `ssm.conv_kernel` taps, after the
//! layer's convolution state, [`crate::recurrent`]) and applies SiLU; the queries and keys are
//! L2-normed per head (an RMS norm of epsilon `eps / head_dim` scaled by `1 / sqrt(head_dim)`,
//! as llama.cpp writes it); each value head's `beta = sigmoid(ssm_beta x)` and log-decay
//! `softplus(ssm_alpha x + ssm_dt.bias) * ssm_a` drive the gated delta rule
//! (GATED_DELTA_NET, which carries the layer's matrix state from batch to batch); its output,
//! RMS-normed per head (`ssm_norm`) times `silu(attn_gate x)`, is projected out (`ssm_out`).
//!
//! An attention layer's `attn_q` gives each head's query and, after it, an output gate: the
//! queries and keys are RMS-normed per head and rotated, attention runs over the KV cache, and
//! its output times `sigmoid(gate)` is projected out. llama.cpp rotates with multi-section RoPE
//! (`rope.dimension_sections`, interleaved: IMROPE); for text, every section's position is the
//! token's, so the rotation is NeoX RoPE at that position, provided the sections cover every
//! rotated pair (which the real models' sections do; a file whose sections leave pairs to the
//! fourth, always-zero position is refused).
//!
//! The last layer runs over every token of the batch (llama.cpp selects the output rows only
//! after the final norm, `h_nextn`, for its multi-token-prediction head, whose tensors are not
//! read here). Intermediate tensors carry llama.cpp's names (`linear_attn_qkv_mixed-0`,
//! `conv_output_silu-0`, `q_conv_predelta-0`, `gate_sigmoid-3`, `attn_post_norm-2`, ...).

use super::{Arch, Registered};
use crate::blocks::Builder;
use crate::error::{LlmError, Result};
use crate::hparams::{DeltaNetParams, HParams, Keys};
use crate::tensors::{blk, Block, DeltaNetTensors, LayerTensors, Lookup};
use crate::tensors::{ModelTensors, QkvTensors};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{GluOp, TensorId};

/// Most convolution taps accepted from the metadata (Qwen 3.5 has 4).
const MAX_CONV_KERNEL: usize = 64;
/// Largest delta-net head dimension and head count accepted from the metadata.
const MAX_DELTA_WIDTH: usize = 4096;
/// llama.cpp's default `full_attention_interval`.
const DEFAULT_FULL_ATTENTION_INTERVAL: usize = 4;

/// The `qwen35` architecture's registry entry (NeoX RoPE: what IMROPE is for text positions).
pub(super) static QWEN35: Registered =
    Registered { name: "qwen35", rope_mode: ROPE_MODE_NEOX, imp: &Qwen35 };

/// The `qwen35` architecture.
struct Qwen35;

impl Arch for Qwen35 {
    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        if hp.head_dim_k != hp.head_dim_v {
            return Err(k.bad(
                "attention.value_length",
                format!("{} differs from the key length {}", hp.head_dim_v, hp.head_dim_k),
            ));
        }
        check_rope_sections(k, hp.n_rot)?;
        let d_conv = k.count("ssm.conv_kernel", MAX_CONV_KERNEL)?;
        if d_conv < 2 {
            return Err(k.bad("ssm.conv_kernel", format!("{d_conv} taps; at least 2 needed")));
        }
        let d = DeltaNetParams {
            head_dim: k.count("ssm.state_size", MAX_DELTA_WIDTH)?,
            n_k_heads: k.count("ssm.group_count", MAX_DELTA_WIDTH)?,
            n_v_heads: k.count("ssm.time_step_rank", MAX_DELTA_WIDTH)?,
        };
        if !d.n_v_heads.is_multiple_of(d.n_k_heads) {
            return Err(k.bad(
                "ssm.time_step_rank",
                format!(
                    "{} value heads are not a multiple of the {} key heads",
                    d.n_v_heads, d.n_k_heads
                ),
            ));
        }
        let d_inner = k.count("ssm.inner_size", MAX_DELTA_WIDTH * MAX_DELTA_WIDTH)?;
        if d_inner != d.value_dim() {
            return Err(k.bad(
                "ssm.inner_size",
                format!(
                    "{d_inner} is not {} value heads of the state size {}",
                    d.n_v_heads, d.head_dim
                ),
            ));
        }
        hp.recurrent_layers = recurrent_layers(k, hp.n_layer)?;
        hp.conv_kernel = d_conv;
        hp.conv_channels = 2 * d.key_dim() + d.value_dim();
        hp.delta_net = Some(d);
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings_and_output(hp)?;
        let e = hp.n_embd;
        let d = delta_params(hp)?;
        let hd = hp.head_dim_k;
        for il in 0..hp.n_layer {
            let n = |s: &str| blk(il, s);
            let attn_norm = t.vector(&n("attn_norm.weight"), e)?;
            if hp.is_recurrent(il) {
                let (nv, conv_dim) = (d.n_v_heads, hp.conv_channels);
                let net = DeltaNetTensors {
                    qkv: t.matrix(&n("attn_qkv.weight"), &[e, conv_dim])?,
                    gate: t.matrix(&n("attn_gate.weight"), &[e, d.value_dim()])?,
                    conv: t.f32_tensor(&n("ssm_conv1d.weight"), &[hp.conv_kernel, conv_dim])?,
                    dt_bias: t.vector(&n("ssm_dt.bias"), nv)?,
                    a: t.vector(&n("ssm_a"), nv)?,
                    beta: t.matrix(&n("ssm_beta.weight"), &[e, nv])?,
                    alpha: t.matrix(&n("ssm_alpha.weight"), &[e, nv])?,
                    norm: t.vector(&n("ssm_norm.weight"), d.head_dim)?,
                    out: t.matrix(&n("ssm_out.weight"), &[d.value_dim(), e])?,
                };
                let ffn_norm = t.vector(&n("post_attention_norm.weight"), e)?;
                let ffn = t.gated_ffn(il, hp, false)?;
                m.blocks.push(Block::DeltaNet { attn_norm, net, ffn_norm, ffn });
            } else {
                // attn_q holds each head's query and then its gate: twice the query width.
                let qkv = QkvTensors::Separate {
                    wq: t.matrix(&n("attn_q.weight"), &[e, 2 * hd * hp.n_head])?,
                    wk: t.matrix(&n("attn_k.weight"), &[e, hp.n_embd_k_gqa()])?,
                    wv: t.matrix(&n("attn_v.weight"), &[e, hp.n_embd_v_gqa()])?,
                    bq: None,
                    bk: None,
                    bv: None,
                };
                let wo = t.matrix(&n("attn_output.weight"), &[hd * hp.n_head, e])?;
                let ffn_norm = t.vector(&n("post_attention_norm.weight"), e)?;
                let ffn = t.gated_ffn(il, hp, false)?;
                let mut l = LayerTensors::new(attn_norm, qkv, wo, ffn_norm, ffn);
                l.q_norm = Some(t.vector(&n("attn_q_norm.weight"), hd)?);
                l.k_norm = Some(t.vector(&n("attn_k_norm.weight"), hd)?);
                m.blocks.push(Block::Attention(l));
            }
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        let x = b.embeddings()?;
        let mut x = b.name(x, "model.input_embed", None)?;
        let t = b.t;
        for (il, block) in t.blocks.iter().enumerate() {
            let il_ = Some(il);
            let (attn_norm, ffn_norm, ffn) = block.norms_and_ffn();
            let h = b.norm(x, attn_norm, "attn_norm", il_)?;
            let o = match block {
                Block::Attention(l) => gated_attention(b, l, h, il)?,
                Block::DeltaNet { net, .. } => delta_net(b, net, h, il)?,
                Block::ShortConv { .. } => {
                    return Err(LlmError::InvalidArgument(format!(
                        "qwen35 layer {il} is a short convolution, which Qwen 3.5 has not"
                    )))
                }
            };
            let cur = b.g.add(o, x)?;
            b.name(cur, "attn_residual", il_)?;
            let h = b.norm(cur, ffn_norm, "attn_post_norm", il_)?;
            let f = b.ffn(ffn, h, GluOp::Swiglu, il)?;
            b.name(f, "ffn_out", il_)?;
            x = b.g.add(f, cur)?;
            b.name(x, "l_out", il_)?;
        }
        output(b, x)
    }
}

/// The rope sections (`rope.dimension_sections`, 4 counts) checked to give every rotated pair
/// the token's position under interleaved M-RoPE (ggml's IMROPE: pair `p` belongs to section
/// `p mod 3` while `p < 3 * sections[p mod 3]`, else to the fourth, whose position is 0 for
/// text), so that NeoX RoPE computes the same.
fn check_rope_sections(k: &Keys<'_>, n_rot: usize) -> Result<()> {
    const KEY: &str = "rope.dimension_sections";
    let v = k.file.get(&k.key(KEY)).ok_or_else(|| k.bad(KEY, "missing"))?;
    let arr = v.as_array().ok_or_else(|| k.bad(KEY, "not an array"))?;
    let values = arr.to_i64_vec().ok_or_else(|| k.bad(KEY, "not an integer array"))?;
    if values.len() < 4 || values.iter().any(|&s| !(0..=i64::from(u16::MAX)).contains(&s)) {
        return Err(k.bad(KEY, format!("{values:?}: 4 counts of 0 to 65535 expected")));
    }
    let sec: Vec<usize> = values[..4].iter().map(|&s| s as usize).collect();
    let total: usize = sec.iter().sum();
    if total == 0 {
        return Err(k.bad(KEY, "every section is empty"));
    }
    let uncovered = (0..n_rot / 2).find(|&p| {
        let sector = p % total;
        sector >= 3 * sec[sector % 3]
    });
    match uncovered {
        Some(p) => Err(k.bad(
            KEY,
            format!(
                "{sec:?} leave rotated pair {p} to the fourth section (not a text position); \
                 only sections that give every pair the token's position are supported"
            ),
        )),
        None => Ok(()),
    }
}

/// Which layers are delta-nets: `attention.recurrent_layers` (one flag per layer) when the file
/// has it, else every layer but each `full_attention_interval`-th (llama.cpp's default 4).
fn recurrent_layers(k: &Keys<'_>, n_layer: usize) -> Result<Vec<bool>> {
    const KEY: &str = "attention.recurrent_layers";
    if let Some(v) = k.file.get(&k.key(KEY)) {
        let arr = v.as_array().ok_or_else(|| k.bad(KEY, "not an array"))?;
        if arr.len() != n_layer {
            return Err(k.bad(KEY, format!("{} entries for {n_layer} layers", arr.len())));
        }
        return (0..n_layer)
            .map(|il| {
                arr.get(il)
                    .and_then(|x| x.as_bool())
                    .ok_or_else(|| k.bad(KEY, format!("entry {il} is not a boolean")))
            })
            .collect();
    }
    let interval = k
        .opt_count("full_attention_interval", n_layer.max(1))?
        .unwrap_or(DEFAULT_FULL_ATTENTION_INTERVAL);
    Ok((0..n_layer).map(|il| (il + 1) % interval != 0).collect())
}

/// A gated attention layer on its normed input `h` (`[n_embd, n]`): the queries (with their
/// gates), keys and values, the per-head RMS norms of the queries and keys, RoPE, attention
/// over the KV cache scaled by `1 / sqrt(head_dim)`, times `sigmoid(gate)`, projected out.
fn gated_attention(
    b: &mut Builder<'_>,
    l: &LayerTensors,
    h: TensorId,
    il: usize,
) -> Result<TensorId> {
    let il_ = Some(il);
    let hp = b.hp;
    let (hd, nh, n) = (hp.head_dim_k, hp.n_head, b.shape.n_tokens);
    let QkvTensors::Separate { wq, wk, wv, .. } = &l.qkv else {
        return Err(LlmError::InvalidArgument("qwen35 attention with a fused qkv".into()));
    };
    let qg = b.linear(wq, &None, h)?;
    b.name(qg, "Qcur_full", il_)?;
    let k = b.linear(wk, &None, h)?;
    b.name(k, "Kcur", il_)?;
    let v = b.linear(wv, &None, h)?;
    b.name(v, "Vcur", il_)?;
    // Each head's query, then its gate.
    let row = b.g.tensor(qg).nb()[1];
    let q = b.g.view(qg, &[hd, nh, n], &[2 * hd * 4, row], 0)?;
    let gate = b.g.view(qg, &[hd, nh, n], &[2 * hd * 4, row], hd * 4)?;
    let k = b.g.reshape(k, &[hd, hp.n_head_kv, n])?;
    let (q, k) = b.head_norms(l, q, k, il)?;
    let gate = b.g.cont(gate)?;
    b.name(gate, "gate_reshaped", il_)?;
    let q = b.rope(q, il)?;
    b.name(q, "Qcur", il_)?;
    let k = b.rope(k, il)?;
    b.name(k, "Kcur", il_)?;
    let att = b.attention_heads(q, k, v, hp.attn_scale, il)?;
    let gate = b.g.reshape(gate, &[hd * nh, n])?;
    let gate = b.g.sigmoid(gate)?;
    b.name(gate, "gate_sigmoid", il_)?;
    let att = b.g.mul(att, gate)?;
    b.name(att, "attn_gated", il_)?;
    let o = b.linear(&l.wo, &None, att)?;
    b.name(o, "attn_output", il_)
}

/// The L2 norm of each row of `x` as llama.cpp's `build_gdn_l2_norm` computes it: an RMS norm
/// of epsilon `eps / width`, scaled by `1 / sqrt(width)`.
fn l2_norm(b: &mut Builder<'_>, x: TensorId, width: usize) -> Result<TensorId> {
    let w = width as f32;
    let n = b.g.rms_norm(x, b.hp.rms_eps / w)?;
    Ok(b.g.scale(n, 1.0 / w.sqrt())?)
}

/// A gated delta-net layer on its normed input `h` (`[n_embd, n]`).
fn delta_net(
    b: &mut Builder<'_>,
    net: &DeltaNetTensors,
    h: TensorId,
    il: usize,
) -> Result<TensorId> {
    let il_ = Some(il);
    let d = delta_params(b.hp)?;
    let (s, nk, nv, n) = (d.head_dim, d.n_k_heads, d.n_v_heads, b.shape.n_tokens);
    let qkv = b.linear(&net.qkv, &None, h)?;
    b.name(qkv, "linear_attn_qkv_mixed", il_)?;
    let z = b.linear(&net.gate, &None, h)?;
    b.name(z, "z", il_)?;
    let beta = b.linear(&net.beta, &None, h)?;
    let beta = b.g.reshape(beta, &[1, nv, n])?;
    let beta = b.g.sigmoid(beta)?;
    b.name(beta, "beta_sigmoid", il_)?;
    let alpha = b.linear(&net.alpha, &None, h)?;
    b.name(alpha, "alpha", il_)?;
    let dt_bias = b.weight(&net.dt_bias)?;
    let alpha = b.g.add(alpha, dt_bias)?;
    let alpha = b.g.softplus(alpha)?;
    b.name(alpha, "a_softplus", il_)?;
    let a = b.weight(&net.a)?;
    let g = b.g.mul(alpha, a)?;
    b.name(g, "gate", il_)?;
    let g = b.g.reshape(g, &[1, nv, n])?;

    let sx = b.conv_input(qkv, il)?;
    b.name(sx, "conv_input", il_)?;
    let taps = b.weight(&net.conv)?;
    let conv = b.g.ssm_conv(sx, taps)?;
    b.name(conv, "conv_output_raw", il_)?;
    let conv = b.g.silu(conv)?;
    b.name(conv, "conv_output_silu", il_)?;
    let row = b.g.tensor(conv).nb()[1];
    let key_dim = d.key_dim();
    let q = b.g.view(conv, &[s, nk, n], &[s * 4, row], 0)?;
    let k = b.g.view(conv, &[s, nk, n], &[s * 4, row], key_dim * 4)?;
    let v = b.g.view(conv, &[s, nv, n], &[s * 4, row], 2 * key_dim * 4)?;
    let q = l2_norm(b, q, s)?;
    b.name(q, "q_conv_predelta", il_)?;
    let k = l2_norm(b, k, s)?;
    b.name(k, "k_conv_predelta", il_)?;

    let state = b.delta_state(il)?;
    let out = b.g.gated_delta_net(q, k, v, g, beta, state)?;
    let width = s * nv;
    let o = b.g.view(out, &[s, nv, n], &[s * 4, width * 4], 0)?;
    b.name(o, "attn_output", il_)?;
    let new_state = b.g.view(out, &[s, s, nv], &[s * 4, s * s * 4], width * n * 4)?;
    b.name(new_state, "new_state", il_)?;
    b.g.cpy(new_state, state)?;

    let w = b.weight(&net.norm)?;
    let o = b.g.rms_norm(o, b.hp.rms_eps)?;
    let o = b.g.mul(o, w)?;
    let z = b.g.reshape(z, &[s, nv, n])?;
    let z = b.g.silu(z)?;
    let o = b.g.mul(o, z)?;
    let o = b.g.reshape(o, &[width, n])?;
    b.name(o, "final_output", il_)?;
    let y = b.linear(&net.out, &None, o)?;
    b.name(y, "linear_attn_out", il_)
}

/// The final norm over every token (`h_nextn`), then the rows wanted (`result_norm`) and,
/// unless the shape asks for embeddings, the output projection (`result_output`).
fn output(b: &mut Builder<'_>, x: TensorId) -> Result<TensorId> {
    let t = b.t;
    let missing = |what: &str| LlmError::InvalidArgument(format!("qwen35 without {what}"));
    let norm = t.output_norm.as_ref().ok_or_else(|| missing("output_norm"))?;
    let mut h = b.norm(x, norm, "h_nextn", None)?;
    if b.shape.n_outputs < b.shape.n_tokens {
        h = b.g.get_rows(h, b.inp.out_rows)?;
    }
    b.name(h, "result_norm", None)?;
    if b.shape.embeddings {
        return Ok(h);
    }
    let output = t.output.as_ref().ok_or_else(|| missing("an output"))?;
    let logits = b.linear(output, &None, h)?;
    b.name(logits, "result_output", None)
}

/// The delta-net shape, which [`Qwen35::read_hparams`] always sets.
fn delta_params(hp: &HParams) -> Result<DeltaNetParams> {
    hp.delta_net.ok_or_else(|| LlmError::InvalidArgument("qwen35 without delta-net shape".into()))
}
