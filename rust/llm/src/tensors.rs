//! The tensors of a model, by GGUF name, checked against the hyper-parameters: every tensor an
//! architecture needs must be in the file with the shape the hyper-parameters give.

use crate::error::{LlmError, Result};
use crate::hparams::{Architecture, HParams};
use tessera_core::DType;
use tessera_gguf::{GgufFile, TensorInfo};

/// A tensor of the model: its GGUF name and its table entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTensor {
    /// The GGUF name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Type, shape and place in the file.
    pub info: TensorInfo,
}

/// The tensors of one transformer block.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerTensors {
    /// RMS norm before attention, `[n_embd]`.
    pub attn_norm: ModelTensor,
    /// Query projection, `[n_embd, head_dim_k * n_head]`.
    pub wq: ModelTensor,
    /// Key projection, `[n_embd, head_dim_k * n_head_kv]`.
    pub wk: ModelTensor,
    /// Value projection, `[n_embd, head_dim_v * n_head_kv]`.
    pub wv: ModelTensor,
    /// Output projection, `[head_dim_v * n_head, n_embd]`.
    pub wo: ModelTensor,
    /// Query bias (Qwen 2), `[head_dim_k * n_head]`.
    pub bq: Option<ModelTensor>,
    /// Key bias, `[head_dim_k * n_head_kv]`.
    pub bk: Option<ModelTensor>,
    /// Value bias, `[head_dim_v * n_head_kv]`.
    pub bv: Option<ModelTensor>,
    /// Output projection bias, `[n_embd]`.
    pub bo: Option<ModelTensor>,
    /// RMS norm of each query head (Gemma 3, Qwen 3), `[head_dim_k]`.
    pub q_norm: Option<ModelTensor>,
    /// RMS norm of each key head, `[head_dim_k]`.
    pub k_norm: Option<ModelTensor>,
    /// RMS norm after attention (Gemma 3), `[n_embd]`.
    pub post_attn_norm: Option<ModelTensor>,
    /// RMS norm before the feed-forward network, `[n_embd]`.
    pub ffn_norm: ModelTensor,
    /// Gate projection, `[n_embd, n_ff]`.
    pub ffn_gate: ModelTensor,
    /// Up projection, `[n_embd, n_ff]`.
    pub ffn_up: ModelTensor,
    /// Down projection, `[n_ff, n_embd]`.
    pub ffn_down: ModelTensor,
    /// RMS norm after the feed-forward network (Gemma 3), `[n_embd]`.
    pub post_ffn_norm: Option<ModelTensor>,
}

/// Every tensor the forward pass reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTensors {
    /// Token embeddings, `[n_embd, n_vocab]` (read by GET_ROWS).
    pub token_embd: ModelTensor,
    /// Final RMS norm, `[n_embd]`.
    pub output_norm: ModelTensor,
    /// Output projection, `[n_embd, n_vocab]`: `output.weight`, or, when the file has none
    /// (tied embeddings), the token embeddings' bytes under that name, so that the output can be
    /// placed for MUL_MAT (repacked) while GET_ROWS reads the embeddings where they are.
    pub output: ModelTensor,
    /// Whether `output` is the token embeddings (tied).
    pub tied: bool,
    /// RoPE frequency factors (Llama 3.1+), `[n_rot / 2]`.
    pub rope_freqs: Option<ModelTensor>,
    /// The blocks.
    pub layers: Vec<LayerTensors>,
}

impl ModelTensors {
    /// Every tensor of the file the model reads, each once (a tied output is the embeddings).
    pub fn all(&self) -> Vec<&ModelTensor> {
        let mut v = vec![&self.token_embd, &self.output_norm];
        if !self.tied {
            v.push(&self.output);
        }
        v.extend(self.rope_freqs.as_ref());
        for l in &self.layers {
            v.extend([&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo]);
            v.extend(
                [&l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm, &l.k_norm, &l.post_attn_norm]
                    .into_iter()
                    .flatten(),
            );
            v.extend([&l.ffn_norm, &l.ffn_gate, &l.ffn_up, &l.ffn_down]);
            v.extend(l.post_ffn_norm.as_ref());
        }
        v
    }

    /// The weights only MUL_MAT reads: the projections and the output (a tied output is a
    /// graph tensor of its own, read by MUL_MAT only).
    pub fn matmul_only(&self) -> Vec<&ModelTensor> {
        let mut v = vec![&self.output];
        for l in &self.layers {
            v.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down]);
        }
        v
    }

    /// Looks up and checks every tensor `hp.arch` needs in `file`.
    pub fn from_gguf(file: &GgufFile, hp: &HParams) -> Result<ModelTensors> {
        let t = Lookup { file, arch: hp.arch.name() };
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let token_embd = t.need("token_embd.weight", &[e, v])?;
        let output_norm = t.vector("output_norm.weight", e)?;
        let (output, tied) = match t.opt("output.weight", &[e, v])? {
            Some(o) => (o, false),
            None => {
                (ModelTensor { name: "output.weight".into(), info: token_embd.info.clone() }, true)
            }
        };
        let rope_freqs = t.opt_vector("rope_freqs.weight", hp.n_rot / 2)?;
        let gemma = hp.arch == Architecture::Gemma3;
        let head_norms = matches!(hp.arch, Architecture::Gemma3 | Architecture::Qwen3);
        let (nq, nk, nv) = (hp.head_dim_k * hp.n_head, hp.n_embd_k_gqa(), hp.n_embd_v_gqa());
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let required_if = |need: bool, name: &str, len: usize| -> Result<Option<ModelTensor>> {
                if need {
                    t.vector(&n(name), len).map(Some)
                } else {
                    t.opt_vector(&n(name), len)
                }
            };
            layers.push(LayerTensors {
                attn_norm: t.vector(&n("attn_norm.weight"), e)?,
                wq: t.need(&n("attn_q.weight"), &[e, nq])?,
                wk: t.need(&n("attn_k.weight"), &[e, nk])?,
                wv: t.need(&n("attn_v.weight"), &[e, nv])?,
                wo: t.need(&n("attn_output.weight"), &[hp.head_dim_v * hp.n_head, e])?,
                bq: t.opt_vector(&n("attn_q.bias"), nq)?,
                bk: t.opt_vector(&n("attn_k.bias"), nk)?,
                bv: t.opt_vector(&n("attn_v.bias"), nv)?,
                bo: t.opt_vector(&n("attn_output.bias"), e)?,
                q_norm: required_if(head_norms, "attn_q_norm.weight", hp.head_dim_k)?,
                k_norm: required_if(head_norms, "attn_k_norm.weight", hp.head_dim_k)?,
                post_attn_norm: required_if(gemma, "post_attention_norm.weight", e)?,
                ffn_norm: t.vector(&n("ffn_norm.weight"), e)?,
                ffn_gate: t.need(&n("ffn_gate.weight"), &[e, hp.n_ff])?,
                ffn_up: t.need(&n("ffn_up.weight"), &[e, hp.n_ff])?,
                ffn_down: t.need(&n("ffn_down.weight"), &[hp.n_ff, e])?,
                post_ffn_norm: required_if(gemma, "post_ffw_norm.weight", e)?,
            });
        }
        Ok(ModelTensors { token_embd, output_norm, output, tied, rope_freqs, layers })
    }
}

/// Finds tensors of one architecture and checks their shapes and types.
struct Lookup<'a> {
    file: &'a GgufFile,
    arch: &'static str,
}

impl Lookup<'_> {
    fn opt(&self, name: &str, shape: &[usize]) -> Result<Option<ModelTensor>> {
        let Some(info) = self.file.tensor(name) else { return Ok(None) };
        if info.shape() != shape {
            return Err(LlmError::TensorShape {
                arch: self.arch.into(),
                name: name.into(),
                expected: shape.to_vec(),
                found: info.shape().to_vec(),
            });
        }
        if info.dtype == DType::I32 {
            return Err(LlmError::TensorType {
                arch: self.arch.into(),
                name: name.into(),
                dtype: info.dtype,
                reason: "is not a weight type".into(),
            });
        }
        Ok(Some(ModelTensor { name: name.into(), info: info.clone() }))
    }

    fn need(&self, name: &str, shape: &[usize]) -> Result<ModelTensor> {
        self.opt(name, shape)?
            .ok_or_else(|| LlmError::MissingTensor { arch: self.arch.into(), name: name.into() })
    }

    /// A norm weight or bias: a vector of `len` floats (element-wise ops read it).
    fn opt_vector(&self, name: &str, len: usize) -> Result<Option<ModelTensor>> {
        let t = self.opt(name, &[len])?;
        if let Some(t) = &t {
            if !t.info.dtype.is_float() {
                return Err(LlmError::TensorType {
                    arch: self.arch.into(),
                    name: name.into(),
                    dtype: t.info.dtype,
                    reason: "must be F32, F16 or BF16 (an element-wise operand)".into(),
                });
            }
        }
        Ok(t)
    }

    fn vector(&self, name: &str, len: usize) -> Result<ModelTensor> {
        self.opt_vector(name, len)?
            .ok_or_else(|| LlmError::MissingTensor { arch: self.arch.into(), name: name.into() })
    }
}
