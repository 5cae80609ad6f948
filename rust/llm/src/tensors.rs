//! The tensors of a model, by GGUF name, checked against the hyper-parameters: each
//! architecture's table ([`crate::arch`]) asks a [`Lookup`] for every tensor it reads, required or
//! optional, with the shape the hyper-parameters give; the lookup checks name, shape and type
//! and records what it found, so that the weights placed on the device are exactly the tensors
//! the table named. The pieces most tables share (embeddings and output, Q/K/V, the gated FFN, a
//! pre-norm layer) are here, as llama.cpp's `create_tensor_qkv` and friends.

use crate::error::{LlmError, Result};
use crate::hparams::HParams;
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

/// The query, key and value projections of a layer.
// One per layer, made once at load: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum QkvTensors {
    /// Three projections, each with an optional bias (Qwen 2 has them).
    Separate {
        /// `[n_embd, head_dim_k * n_head]`.
        wq: ModelTensor,
        /// `[n_embd, head_dim_k * n_head_kv]`.
        wk: ModelTensor,
        /// `[n_embd, head_dim_v * n_head_kv]`.
        wv: ModelTensor,
        /// `[head_dim_k * n_head]`.
        bq: Option<ModelTensor>,
        /// `[head_dim_k * n_head_kv]`.
        bk: Option<ModelTensor>,
        /// `[head_dim_v * n_head_kv]`.
        bv: Option<ModelTensor>,
    },
    /// One projection whose output rows are the queries, keys and values one after the other
    /// (Phi-3's `attn_qkv`).
    Fused {
        /// `[n_embd, q + k + v widths]`.
        wqkv: ModelTensor,
        /// Its bias, `[q + k + v widths]`.
        bqkv: Option<ModelTensor>,
    },
    /// The queries alone: a layer attending over a lower layer's keys and values (Gemma 4's
    /// shared-KV layers).
    QueryOnly {
        /// `[n_embd, head_dim_k * n_head]`.
        wq: ModelTensor,
    },
}

/// The feed-forward network of a layer.
// One per layer, made once at load: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum FfnTensors {
    /// `down(act(gate x) * up x)` with optional biases.
    Gated {
        /// `[n_embd, n_ff]`.
        gate: ModelTensor,
        /// `[n_embd, n_ff]`.
        up: ModelTensor,
        /// `[n_ff, n_embd]`.
        down: ModelTensor,
        /// `[n_ff]`.
        gate_b: Option<ModelTensor>,
        /// `[n_ff]`.
        up_b: Option<ModelTensor>,
        /// `[n_embd]`.
        down_b: Option<ModelTensor>,
    },
    /// Gate and up in one projection, `[n_embd, 2 n_ff]` (the gate's rows first):
    /// `down(act(g) * u)` over the halves of its output (Phi-3's `ffn_up`).
    FusedGateUp {
        /// `[n_embd, 2 n_ff]`.
        up: ModelTensor,
        /// `[n_ff, n_embd]`.
        down: ModelTensor,
    },
    /// No gate: `down(act(up x + up_b)) + down_b` (BERT's GELU FFN, llama.cpp's `LLM_FFN_SEQ`).
    Plain {
        /// `[n_embd, n_ff]`.
        up: ModelTensor,
        /// `[n_ff]`.
        up_b: Option<ModelTensor>,
        /// `[n_ff, n_embd]`.
        down: ModelTensor,
        /// `[n_embd]`.
        down_b: Option<ModelTensor>,
    },
}

/// The tensors of one transformer block.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerTensors {
    /// RMS norm before attention, `[n_embd]` (in BERT's post-norm block, the layer norm after
    /// attention, `attn_output_norm`).
    pub attn_norm: ModelTensor,
    /// The bias of a layer norm `attn_norm` (BERT), `[n_embd]`.
    pub attn_norm_b: Option<ModelTensor>,
    /// Query, key and value projections.
    pub qkv: QkvTensors,
    /// Output projection, `[head_dim_v * n_head, n_embd]`.
    pub wo: ModelTensor,
    /// Output projection bias, `[n_embd]`.
    pub bo: Option<ModelTensor>,
    /// RMS norm of each query head (Gemma 3, Qwen 3), `[head_dim_k]`.
    pub q_norm: Option<ModelTensor>,
    /// RMS norm of each key head, `[head_dim_k]`.
    pub k_norm: Option<ModelTensor>,
    /// RMS norm after attention (Gemma 3), `[n_embd]`.
    pub post_attn_norm: Option<ModelTensor>,
    /// RMS norm before the feed-forward network, `[n_embd]` (in BERT, the layer norm after it,
    /// `layer_output_norm`).
    pub ffn_norm: ModelTensor,
    /// The bias of a layer norm `ffn_norm` (BERT), `[n_embd]`.
    pub ffn_norm_b: Option<ModelTensor>,
    /// The feed-forward network.
    pub ffn: FfnTensors,
    /// RMS norm after the feed-forward network (Gemma 3), `[n_embd]`.
    pub post_ffn_norm: Option<ModelTensor>,
    /// The layer's scale of its output (Gemma 4's `layer_output_scale`), `[1]`.
    pub out_scale: Option<ModelTensor>,
    /// The layer's use of its slice of the per-layer token embeddings (Gemma 4).
    pub per_layer: Option<PerLayerBlock>,
}

/// How a layer adds its per-layer embedding (Gemma 4): `x + post_norm(proj(gelu(inp_gate x) *
/// e))`, `e` the layer's slice of [`PerLayerInputs`].
#[derive(Clone, Debug, PartialEq)]
pub struct PerLayerBlock {
    /// `[n_embd, n_embd_per_layer]` (`inp_gate`).
    pub inp_gate: ModelTensor,
    /// `[n_embd_per_layer, n_embd]` (`proj`).
    pub proj: ModelTensor,
    /// RMS norm after the projection, `[n_embd]` (`post_norm`).
    pub post_norm: ModelTensor,
}

/// Gemma 4's per-layer token embeddings: a table of `n_embd_per_layer` values per layer for
/// every token (read in place by GET_ROWS, only the rows of the batch's tokens), plus a
/// projection of the scaled token embeddings to the same widths, RMS-normed.
#[derive(Clone, Debug, PartialEq)]
pub struct PerLayerInputs {
    /// `[n_embd_per_layer * n_layer, n_vocab]` (`per_layer_token_embd`).
    pub token_embd: ModelTensor,
    /// `[n_embd, n_embd_per_layer * n_layer]` (`per_layer_model_proj`).
    pub model_proj: ModelTensor,
    /// `[n_embd_per_layer]` (`per_layer_proj_norm`).
    pub proj_norm: ModelTensor,
}

impl LayerTensors {
    /// A layer of these tensors, without head norms, post norms or output bias.
    pub fn new(
        attn_norm: ModelTensor,
        qkv: QkvTensors,
        wo: ModelTensor,
        ffn_norm: ModelTensor,
        ffn: FfnTensors,
    ) -> LayerTensors {
        LayerTensors {
            attn_norm,
            attn_norm_b: None,
            qkv,
            wo,
            bo: None,
            q_norm: None,
            k_norm: None,
            post_attn_norm: None,
            ffn_norm,
            ffn_norm_b: None,
            ffn,
            post_ffn_norm: None,
            out_scale: None,
            per_layer: None,
        }
    }
}

/// A recurrent layer's short causal convolution (LFM2's `shortconv`): the input projected to
/// three parts `B`, `C`, `X`; `B * X` convolved along the tokens (with the state of the
/// previous tokens), times `C`, projected out.
#[derive(Clone, Debug, PartialEq)]
pub struct ShortConvTensors {
    /// `[n_embd, 3 n_embd]`: `B`, `C`, `X` one after the other.
    pub in_proj: ModelTensor,
    /// F32 `[conv_kernel, n_embd]`: each channel's taps, oldest first.
    pub conv: ModelTensor,
    /// `[n_embd, n_embd]`.
    pub out_proj: ModelTensor,
}

/// A recurrent layer's gated delta-net (Qwen 3.5's linear attention, llama.cpp's `ssm_*`
/// tensors): the input projected to the queries, keys and values (`attn_qkv`, convolved along
/// the tokens with `ssm_conv1d` and the layer's state, then SiLU), to the output gate `z`
/// (`attn_gate`), to each value head's `beta` (`ssm_beta`) and decay rate (`ssm_alpha`, plus
/// `ssm_dt.bias`, soft-plus, times `ssm_a`); the gated delta rule; the per-head RMS norm
/// (`ssm_norm`) times `silu(z)`; the output projection (`ssm_out`).
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaNetTensors {
    /// `[n_embd, 2 key_dim + value_dim]`: queries, keys, values one after the other.
    pub qkv: ModelTensor,
    /// `[n_embd, value_dim]`.
    pub gate: ModelTensor,
    /// F32 `[conv_kernel, 2 key_dim + value_dim]`: each channel's taps, oldest first.
    pub conv: ModelTensor,
    /// `[n_v_heads]`: the decay rate's bias.
    pub dt_bias: ModelTensor,
    /// `[n_v_heads]`: `-exp(A_log)`, the decay rate's scale.
    pub a: ModelTensor,
    /// `[n_embd, n_v_heads]`.
    pub beta: ModelTensor,
    /// `[n_embd, n_v_heads]`.
    pub alpha: ModelTensor,
    /// `[head_dim]`: the RMS norm of each value head's output.
    pub norm: ModelTensor,
    /// `[value_dim, n_embd]`.
    pub out: ModelTensor,
}

/// One layer of a hybrid model (LFM2, Qwen 3.5), whose layers mix tokens in different ways.
// One per layer, made once at load: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// An attention layer, as the attention-only models' layers.
    Attention(LayerTensors),
    /// A short-convolution layer: its own mixer between the norms and FFN every layer has.
    ShortConv {
        /// RMS norm before the convolution, `[n_embd]`.
        attn_norm: ModelTensor,
        /// The convolution.
        conv: ShortConvTensors,
        /// RMS norm before the feed-forward network, `[n_embd]`.
        ffn_norm: ModelTensor,
        /// The feed-forward network.
        ffn: FfnTensors,
    },
    /// A gated delta-net layer (Qwen 3.5): its own mixer between the norms and FFN every layer
    /// has.
    DeltaNet {
        /// RMS norm before the delta-net, `[n_embd]`.
        attn_norm: ModelTensor,
        /// The delta-net.
        net: DeltaNetTensors,
        /// RMS norm before the feed-forward network (`post_attention_norm`), `[n_embd]`.
        ffn_norm: ModelTensor,
        /// The feed-forward network.
        ffn: FfnTensors,
    },
}

impl Block {
    /// The norm before the layer's mixer, the norm before its FFN, and the FFN.
    pub fn norms_and_ffn(&self) -> (&ModelTensor, &ModelTensor, &FfnTensors) {
        match self {
            Block::Attention(l) => (&l.attn_norm, &l.ffn_norm, &l.ffn),
            Block::ShortConv { attn_norm, ffn_norm, ffn, .. }
            | Block::DeltaNet { attn_norm, ffn_norm, ffn, .. } => (attn_norm, ffn_norm, ffn),
        }
    }
}

/// How the graph reads a tensor (where it may be placed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadBy {
    /// Only as the weights of MUL_MAT (it may be repacked).
    MatMul,
    /// By other ops (GET_ROWS, element-wise ops, RoPE).
    Other,
}

/// A tensor found by a [`Lookup`], and how the graph reads it.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    tensor: ModelTensor,
    read_by: ReadBy,
    /// The output layer made from the token embeddings' bytes (tied).
    tied: bool,
}

/// The heads after pooling of embedding and reranking models (llama.cpp's `build_pooling` and
/// `build_dense_out`), each optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolingHead {
    /// The classification head's dense layer (`cls`), `[n_embd, n_embd]`, followed by tanh.
    pub cls: Option<ModelTensor>,
    /// Its bias, `[n_embd]`.
    pub cls_b: Option<ModelTensor>,
    /// The classifier (`cls.output`), `[n_embd, n_cls_out]`: the rerank score.
    pub cls_out: Option<ModelTensor>,
    /// Its bias, `[n_cls_out]`.
    pub cls_out_b: Option<ModelTensor>,
    /// EmbeddingGemma's first dense projection after pooling (`dense_2`),
    /// `[n_embd, dense_2_out]`.
    pub dense_2: Option<ModelTensor>,
    /// Its second (`dense_3`), `[dense_3_in, n_embd]`.
    pub dense_3: Option<ModelTensor>,
}

/// Every tensor the forward pass reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTensors {
    /// Token embeddings, `[n_embd, n_vocab]` (read by GET_ROWS).
    pub token_embd: ModelTensor,
    /// Absolute position embeddings (BERT), `[n_embd, n_ctx_train]` (read by GET_ROWS).
    pub pos_embd: Option<ModelTensor>,
    /// Token-type embeddings (BERT), `[n_embd, n_token_types]`: row 0 is added to every token.
    pub type_embd: Option<ModelTensor>,
    /// Layer norm of the input embeddings (BERT), `[n_embd]`.
    pub tok_norm: Option<ModelTensor>,
    /// Its bias, `[n_embd]`.
    pub tok_norm_b: Option<ModelTensor>,
    /// Final RMS norm, `[n_embd]` (BERT has none).
    pub output_norm: Option<ModelTensor>,
    /// Output projection, `[n_embd, n_vocab]`: `output.weight`, or, when the file has none
    /// (tied embeddings), the token embeddings' bytes under that name, so that the output can be
    /// placed for MUL_MAT (repacked; GET_ROWS then reads the embeddings from that copy, see
    /// `WeightStore::place`). `None` in embedding models, which give no logits.
    pub output: Option<ModelTensor>,
    /// Whether `output` is the token embeddings (tied).
    pub tied: bool,
    /// Output projection bias (Qwen 2), `[n_vocab]`.
    pub output_b: Option<ModelTensor>,
    /// RoPE frequency factors (Llama 3.1+), `[n_rot / 2]`.
    pub rope_freqs: Option<ModelTensor>,
    /// LongRoPE factors for contexts beyond the original one (Phi-3), `[n_rot / 2]`.
    pub rope_long: Option<ModelTensor>,
    /// LongRoPE factors within the original context (Phi-3), `[n_rot / 2]`.
    pub rope_short: Option<ModelTensor>,
    /// The blocks of an attention-only model (empty in a hybrid one).
    pub layers: Vec<LayerTensors>,
    /// The blocks of a hybrid model, one per layer (empty in an attention-only one).
    pub blocks: Vec<Block>,
    /// The heads after pooling.
    pub head: PoolingHead,
    /// The per-layer token embeddings (Gemma 4).
    pub per_layer: Option<PerLayerInputs>,
    /// Every tensor the table found, in lookup order.
    entries: Vec<Entry>,
}

impl ModelTensors {
    /// Looks up and checks every tensor `hp.arch`'s table names in `file`.
    pub fn from_gguf(file: &GgufFile, hp: &HParams) -> Result<ModelTensors> {
        let mut t = Lookup { file, arch: hp.arch.name(), entries: Vec::new() };
        let mut m = hp.arch.imp().tensors(&mut t, hp)?;
        m.entries = t.entries;
        check_block_count(file, hp)?;
        Ok(m)
    }

    /// The output projection when it is the token embeddings (tied).
    pub fn tied_output(&self) -> Option<&ModelTensor> {
        self.output.as_ref().filter(|_| self.tied)
    }

    /// Every tensor of the file the model reads, each once (a tied output is the embeddings).
    pub fn all(&self) -> Vec<&ModelTensor> {
        self.entries.iter().filter(|e| !e.tied).map(|e| &e.tensor).collect()
    }

    /// The weights only MUL_MAT reads: the projections and the output (a tied output is a
    /// graph tensor of its own, read by MUL_MAT only).
    pub fn matmul_only(&self) -> Vec<&ModelTensor> {
        self.entries.iter().filter(|e| e.read_by == ReadBy::MatMul).map(|e| &e.tensor).collect()
    }
}

/// The block count against the tensors: a file whose `blk.N.*` tensors go past
/// `block_count` describes more layers than it says (llama.cpp refuses tensors it did not
/// load); fewer are refused by the table, as a missing tensor.
fn check_block_count(file: &GgufFile, hp: &HParams) -> Result<()> {
    let layer_of = |name: &str| -> Option<usize> {
        name.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()
    };
    let beyond = file
        .tensors()
        .iter()
        .filter_map(|t| Some((layer_of(&t.name)?, t.name.as_str())))
        .filter(|&(il, _)| il >= hp.n_layer)
        .max_by_key(|&(il, _)| il);
    match beyond {
        None => Ok(()),
        Some((il, name)) => Err(LlmError::BadHyperParameter {
            key: format!("{}.block_count", hp.arch.name()),
            reason: format!(
                "{} layers, but the file's tensors describe {} (it has {name:?})",
                hp.n_layer,
                il + 1
            ),
        }),
    }
}

/// The GGUF name of tensor `suffix` of block `il`, e.g. `blk.3.attn_q.weight`.
pub(crate) fn blk(il: usize, suffix: &str) -> String {
    format!("blk.{il}.{suffix}")
}

/// Finds the tensors of one architecture, checks their shapes and types, and records them.
pub(crate) struct Lookup<'a> {
    file: &'a GgufFile,
    arch: &'static str,
    entries: Vec<Entry>,
}

impl Lookup<'_> {
    /// The tensor `name` if the file has it, with its shape checked against `shape`.
    fn find(&self, name: &str, shape: &[usize]) -> Result<Option<ModelTensor>> {
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
            return Err(self.bad_type(name, info.dtype, "is not a weight type"));
        }
        Ok(Some(ModelTensor { name: name.into(), info: info.clone() }))
    }

    fn bad_type(&self, name: &str, dtype: DType, reason: &str) -> LlmError {
        LlmError::TensorType {
            arch: self.arch.into(),
            name: name.into(),
            dtype,
            reason: reason.into(),
        }
    }

    fn missing(&self, name: &str) -> LlmError {
        LlmError::MissingTensor { arch: self.arch.into(), name: name.into() }
    }

    /// Records `t` once: a table may look a tensor up again (Llama's gated FFN with its
    /// biases after the base layer's), and a tensor recorded twice would be placed (repacked,
    /// uploaded) and counted twice.
    fn record(&mut self, t: &ModelTensor, read_by: ReadBy) {
        match self.entries.iter_mut().find(|e| e.tensor.name == t.name) {
            // Read by MUL_MAT only if every lookup says so.
            Some(e) if e.read_by != read_by => e.read_by = ReadBy::Other,
            Some(_) => {}
            None => self.entries.push(Entry { tensor: t.clone(), read_by, tied: false }),
        }
    }

    /// An optional weight matrix that only MUL_MAT reads.
    pub fn opt_matrix(&mut self, name: &str, shape: &[usize]) -> Result<Option<ModelTensor>> {
        let t = self.find(name, shape)?;
        if let Some(t) = &t {
            self.record(t, ReadBy::MatMul);
        }
        Ok(t)
    }

    /// A required weight matrix that only MUL_MAT reads.
    pub fn matrix(&mut self, name: &str, shape: &[usize]) -> Result<ModelTensor> {
        self.opt_matrix(name, shape)?.ok_or_else(|| self.missing(name))
    }

    /// An optional norm weight, bias or factor table: a vector of `len` floats (element-wise
    /// ops read it).
    pub fn opt_vector(&mut self, name: &str, len: usize) -> Result<Option<ModelTensor>> {
        let t = self.find(name, &[len])?;
        if let Some(t) = &t {
            if !t.info.dtype.is_float() {
                return Err(self.bad_type(
                    name,
                    t.info.dtype,
                    "must be F32, F16 or BF16 (an element-wise operand)",
                ));
            }
            self.record(t, ReadBy::Other);
        }
        Ok(t)
    }

    /// A required vector of `len` floats.
    pub fn vector(&mut self, name: &str, len: usize) -> Result<ModelTensor> {
        self.opt_vector(name, len)?.ok_or_else(|| self.missing(name))
    }

    /// An optional table read by GET_ROWS or, a row of it, by element-wise ops (position and
    /// token-type embeddings): any type GET_ROWS reads when `float` is false, else F32 / F16 /
    /// BF16.
    pub fn opt_table(
        &mut self,
        name: &str,
        shape: &[usize],
        float: bool,
    ) -> Result<Option<ModelTensor>> {
        let t = self.find(name, shape)?;
        if let Some(t) = &t {
            if float && !t.info.dtype.is_float() {
                return Err(self.bad_type(
                    name,
                    t.info.dtype,
                    "must be F32, F16 or BF16 (an element-wise operand)",
                ));
            }
            self.record(t, ReadBy::Other);
        }
        Ok(t)
    }

    /// A required table read by GET_ROWS (any type it reads), e.g. Gemma 4's per-layer token
    /// embeddings.
    pub fn table(&mut self, name: &str, shape: &[usize]) -> Result<ModelTensor> {
        self.opt_table(name, shape, false)?.ok_or_else(|| self.missing(name))
    }

    /// The token embeddings alone: the model's other tensors and its layers are left empty for
    /// the table to fill (an embedding model's, which has no output projection).
    pub fn embeddings(&mut self, hp: &HParams) -> Result<ModelTensors> {
        let name = "token_embd.weight";
        let token_embd =
            self.find(name, &[hp.n_embd, hp.n_vocab])?.ok_or_else(|| self.missing(name))?;
        self.record(&token_embd, ReadBy::Other);
        Ok(ModelTensors {
            token_embd,
            pos_embd: None,
            type_embd: None,
            tok_norm: None,
            tok_norm_b: None,
            output_norm: None,
            output: None,
            tied: false,
            output_b: None,
            rope_freqs: None,
            rope_long: None,
            rope_short: None,
            layers: Vec::with_capacity(hp.n_layer),
            blocks: Vec::new(),
            head: PoolingHead::default(),
            per_layer: None,
            entries: Vec::new(),
        })
    }

    /// A required F32 tensor of `shape` read by an op other than MUL_MAT (a convolution's
    /// taps).
    pub fn f32_tensor(&mut self, name: &str, shape: &[usize]) -> Result<ModelTensor> {
        let t = self.find(name, shape)?.ok_or_else(|| self.missing(name))?;
        if t.info.dtype != DType::F32 {
            return Err(self.bad_type(name, t.info.dtype, "must be F32 (read by SSM_CONV)"));
        }
        self.record(&t, ReadBy::Other);
        Ok(t)
    }

    /// The token embeddings, the final norm and the output projection, which is the
    /// embeddings when the file has no `output.weight` (llama.cpp's `TENSOR_DUPLICATED`); the
    /// model's optional tensors and its layers are left empty for the table to fill.
    pub fn embeddings_and_output(&mut self, hp: &HParams) -> Result<ModelTensors> {
        self.embeddings_and_output_norm(hp, "output_norm.weight")
    }

    /// [`Lookup::embeddings_and_output`] with the final norm under the name `norm` (LFM2's
    /// files call it `token_embd_norm.weight`).
    pub fn embeddings_and_output_norm(&mut self, hp: &HParams, norm: &str) -> Result<ModelTensors> {
        let mut m = self.embeddings(hp)?;
        let (e, v) = (hp.n_embd, hp.n_vocab);
        m.output_norm = Some(self.vector(norm, e)?);
        let (output, tied) = match self.opt_matrix("output.weight", &[e, v])? {
            Some(o) => (o, false),
            None => {
                let o =
                    ModelTensor { name: "output.weight".into(), info: m.token_embd.info.clone() };
                let entry = Entry { tensor: o.clone(), read_by: ReadBy::MatMul, tied: true };
                self.entries.push(entry);
                (o, true)
            }
        };
        m.output = Some(output);
        m.tied = tied;
        Ok(m)
    }

    /// Layer `il`'s Q/K/V projections as llama.cpp's `create_tensor_qkv` finds them: the fused
    /// `attn_qkv` when the file has it, else `attn_q`, `attn_k` and `attn_v` (required), each
    /// with an optional bias. When there are neither, the error names `attn_qkv` if `fused` is
    /// the architecture's usual layout, else `attn_q`.
    pub fn qkv(&mut self, il: usize, hp: &HParams, fused: bool) -> Result<QkvTensors> {
        let e = hp.n_embd;
        let (nq, nk, nv) = (hp.head_dim_k * hp.n_head, hp.n_embd_k_gqa(), hp.n_embd_v_gqa());
        let n = |s: &str| blk(il, s);
        let wqkv_name = n("attn_qkv.weight");
        if let Some(wqkv) = self.opt_matrix(&wqkv_name, &[e, nq + nk + nv])? {
            let bqkv = self.opt_vector(&n("attn_qkv.bias"), nq + nk + nv)?;
            return Ok(QkvTensors::Fused { wqkv, bqkv });
        }
        if fused && self.file.tensor(&n("attn_q.weight")).is_none() {
            return Err(self.missing(&wqkv_name));
        }
        Ok(QkvTensors::Separate {
            wq: self.matrix(&n("attn_q.weight"), &[e, nq])?,
            wk: self.matrix(&n("attn_k.weight"), &[e, nk])?,
            wv: self.matrix(&n("attn_v.weight"), &[e, nv])?,
            bq: self.opt_vector(&n("attn_q.bias"), nq)?,
            bk: self.opt_vector(&n("attn_k.bias"), nk)?,
            bv: self.opt_vector(&n("attn_v.bias"), nv)?,
        })
    }

    /// Requires the biases of layer `il`'s Q/K/V projections (`attn_q.bias`, `attn_k.bias`,
    /// `attn_v.bias`, or `attn_qkv.bias` of a fused one): Qwen 2 is trained with them, and a
    /// file without them computes other logits (llama.cpp's Qwen 2 table required them).
    pub fn require_qkv_biases(&self, il: usize, qkv: &QkvTensors) -> Result<()> {
        let missing: Option<&str> = match qkv {
            QkvTensors::Separate { bq, bk, bv, .. } => [
                (bq.is_none(), "attn_q.bias"),
                (bk.is_none(), "attn_k.bias"),
                (bv.is_none(), "attn_v.bias"),
            ]
            .into_iter()
            .find_map(|(absent, name)| absent.then_some(name)),
            QkvTensors::Fused { bqkv, .. } => bqkv.is_none().then_some("attn_qkv.bias"),
            QkvTensors::QueryOnly { .. } => Some("attn_k.bias"),
        };
        match missing {
            Some(name) => Err(self.missing(&blk(il, name))),
            None => Ok(()),
        }
    }

    /// Layer `il`'s gated FFN (of the layer's width): `ffn_gate`, `ffn_up`, `ffn_down`, with
    /// optional biases when `biases` (llama.cpp's Llama table has them).
    pub fn gated_ffn(&mut self, il: usize, hp: &HParams, biases: bool) -> Result<FfnTensors> {
        let (e, f) = (hp.n_embd, hp.n_ff_of(il));
        let n = |s: &str| blk(il, s);
        let gate = self.matrix(&n("ffn_gate.weight"), &[e, f])?;
        let up = self.matrix(&n("ffn_up.weight"), &[e, f])?;
        let down = self.matrix(&n("ffn_down.weight"), &[f, e])?;
        let (gate_b, up_b, down_b) = if biases {
            (
                self.opt_vector(&n("ffn_gate.bias"), f)?,
                self.opt_vector(&n("ffn_up.bias"), f)?,
                self.opt_vector(&n("ffn_down.bias"), e)?,
            )
        } else {
            (None, None, None)
        };
        Ok(FfnTensors::Gated { gate, up, down, gate_b, up_b, down_b })
    }

    /// LongRoPE's factors, `rope_factors_long` and `rope_factors_short` (`[n_rot / 2]`, both
    /// optional, shared by every layer).
    pub fn longrope_factors(&mut self, m: &mut ModelTensors, hp: &HParams) -> Result<()> {
        m.rope_long = self.opt_vector("rope_factors_long.weight", hp.n_rot / 2)?;
        m.rope_short = self.opt_vector("rope_factors_short.weight", hp.n_rot / 2)?;
        Ok(())
    }

    /// The pre-norm block most tables start from: `attn_norm`, Q/K/V ([`Lookup::qkv`]),
    /// `attn_output`, `ffn_norm` and the gated FFN without biases; no head norms, post norms
    /// or output bias (the table adds what its architecture has).
    pub fn layer_base(&mut self, il: usize, hp: &HParams) -> Result<LayerTensors> {
        let e = hp.n_embd;
        let attn_norm = self.vector(&blk(il, "attn_norm.weight"), e)?;
        let qkv = self.qkv(il, hp, false)?;
        let wo = self.matrix(&blk(il, "attn_output.weight"), &[hp.head_dim_v * hp.n_head, e])?;
        let ffn_norm = self.vector(&blk(il, "ffn_norm.weight"), e)?;
        let ffn = self.gated_ffn(il, hp, false)?;
        Ok(LayerTensors::new(attn_norm, qkv, wo, ffn_norm, ffn))
    }
}
