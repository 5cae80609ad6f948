//! BERT encoders (bge, all-MiniLM, and BERT rerankers such as bge-reranker), as llama.cpp's
//! `src/models/bert.cpp`: token embeddings plus absolute position embeddings and the first
//! token-type row, a layer norm, then post-norm blocks of bidirectional attention (with biases,
//! no RoPE) and a GELU FFN, each followed by a layer norm of its sum with its input. An
//! embedding model only ([`crate::embed::Embedder`] pools its states); a reranker adds the
//! classification head (`cls`, `cls.output`) that rank pooling reads.

use super::{Arch, NormKind, Registered};
use crate::blocks::Builder;
use crate::error::{LlmError, Result};
use crate::hparams::{HParams, Keys};
use crate::tensors::{blk, FfnTensors, LayerTensors, Lookup, ModelTensors};
use tessera_core::op::ROPE_MODE_NORMAL;
use tessera_core::{GluOp, TensorId};

/// Most token types accepted from the metadata.
const MAX_TOKEN_TYPES: u32 = 1 << 16;

/// The `bert` architecture's registry entry.
pub(super) static BERT: Registered =
    Registered { name: "bert", rope_mode: ROPE_MODE_NORMAL, imp: &Bert };

/// The `bert` architecture.
struct Bert;

impl Arch for Bert {
    fn norm(&self) -> NormKind {
        NormKind::Layer
    }

    fn generates(&self) -> bool {
        false
    }

    fn read_hparams(&self, k: &Keys<'_>, hp: &mut HParams) -> Result<()> {
        let key = "tokenizer.ggml.token_type_count";
        let bad = |reason: String| LlmError::BadHyperParameter { key: key.into(), reason };
        match k.file.opt_u32(key)? {
            Some(n) if (1..=MAX_TOKEN_TYPES).contains(&n) => {
                hp.embedding.n_token_types = n as usize
            }
            Some(n) => return Err(bad(format!("{n} is not between 1 and {MAX_TOKEN_TYPES}"))),
            None => return Err(bad("missing: a BERT model defines its token types".into())),
        }
        if hp.head_dim_k != hp.head_dim_v {
            return Err(k.bad(
                "attention.value_length",
                format!("{} differs from the key length {}", hp.head_dim_v, hp.head_dim_k),
            ));
        }
        Ok(())
    }

    fn tensors(&self, t: &mut Lookup<'_>, hp: &HParams) -> Result<ModelTensors> {
        let mut m = t.embeddings(hp)?;
        let (e, f) = (hp.n_embd, hp.n_ff);
        let types = hp.embedding.n_token_types;
        m.type_embd = t.opt_table("token_types.weight", &[e, types], true)?;
        let name = "position_embd.weight";
        m.pos_embd =
            Some(t.opt_table(name, &[e, hp.n_ctx_train], false)?.ok_or_else(|| {
                LlmError::MissingTensor { arch: "bert".into(), name: name.into() }
            })?);
        let n_cls_out = hp.embedding.n_cls_out;
        m.head.cls = t.opt_matrix("cls.weight", &[e, e])?;
        m.head.cls_b = t.opt_vector("cls.bias", e)?;
        m.head.cls_out = t.opt_matrix("cls.output.weight", &[e, n_cls_out])?;
        m.head.cls_out_b = t.opt_vector("cls.output.bias", n_cls_out)?;
        m.tok_norm = Some(t.vector("token_embd_norm.weight", e)?);
        m.tok_norm_b = Some(t.vector("token_embd_norm.bias", e)?);
        for il in 0..hp.n_layer {
            let n = |s: &str| blk(il, s);
            let qkv = t.qkv(il, hp, false)?;
            let wo = t.matrix(&n("attn_output.weight"), &[hp.head_dim_v * hp.n_head, e])?;
            let bo = t.opt_vector(&n("attn_output.bias"), e)?;
            let attn_norm = t.vector(&n("attn_output_norm.weight"), e)?;
            let attn_norm_b = Some(t.vector(&n("attn_output_norm.bias"), e)?);
            let ffn = FfnTensors::Plain {
                up: t.matrix(&n("ffn_up.weight"), &[e, f])?,
                up_b: t.opt_vector(&n("ffn_up.bias"), f)?,
                down: t.matrix(&n("ffn_down.weight"), &[f, e])?,
                down_b: t.opt_vector(&n("ffn_down.bias"), e)?,
            };
            let ffn_norm = t.vector(&n("layer_output_norm.weight"), e)?;
            let ffn_norm_b = Some(t.vector(&n("layer_output_norm.bias"), e)?);
            let mut l = LayerTensors::new(attn_norm, qkv, wo, ffn_norm, ffn);
            l.bo = bo;
            l.attn_norm_b = attn_norm_b;
            l.ffn_norm_b = ffn_norm_b;
            m.layers.push(l);
        }
        Ok(m)
    }

    fn build(&self, b: &mut Builder<'_>) -> Result<TensorId> {
        let (hp, t) = (b.hp, b.t);
        let mut x = b.embeddings()?;
        // Every token is of type 0 ("sentence A"), as llama.cpp has it.
        if let Some(te) = &t.type_embd {
            let te = b.weight(te)?;
            let row0 = b.g.view(te, &[hp.n_embd], &[], 0)?;
            x = b.g.add(x, row0)?;
        }
        if let Some(pe) = &t.pos_embd {
            let pe = b.weight(pe)?;
            let pos = b.g.get_rows(pe, b.inp.positions)?;
            x = b.g.add(pos, x)?;
        }
        b.name(x, "inp_embd", None)?;
        let (tw, tb) = (t.tok_norm.as_ref(), &t.tok_norm_b);
        if let Some(tw) = tw {
            x = b.layer_norm(x, tw, tb, "inp_norm", Some(0))?;
        }
        let kq_scale = 1.0 / (hp.head_dim_k as f32).sqrt();
        for (il, l) in t.layers.iter().enumerate() {
            let il_ = Some(il);
            let (q, k, v) = b.qkv(l, x, il)?;
            let o = b.attention(l, q, k, v, kq_scale, il)?;
            let (o, residual) = b.last_layer_rows(il, o, x)?;
            let sum = b.g.add(o, residual)?;
            let ffn_inp = b.layer_norm(sum, &l.attn_norm, &l.attn_norm_b, "ffn_inp", il_)?;
            let f = b.ffn(&l.ffn, ffn_inp, GluOp::Geglu, il)?;
            b.name(f, "ffn_out", il_)?;
            let sum = b.g.add(f, ffn_inp)?;
            x = b.layer_norm(sum, &l.ffn_norm, &l.ffn_norm_b, "l_out", il_)?;
        }
        b.name(x, "result_embd", None)
    }
}
