//! Hyper-parameters read from a GGUF file's metadata, with llama.cpp's defaults: the keys every
//! transformer has are read here, then the architecture's module ([`crate::arch`]) reads its own
//! and sets what it fixes.

use crate::arch::{Architecture, NormKind};
use crate::embed::Pooling;
use crate::error::{LlmError, Result};
use tessera_gguf::GgufFile;

/// How RoPE frequencies are scaled beyond the training context.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE (or linear scaling with factor 1).
    Linear,
    /// YaRN (ggml's `ext_factor` 1).
    Yarn,
    /// LongRoPE (Phi-3): per-dimension frequency factors, short or long by the context size
    /// (`rope_factors_short` / `rope_factors_long`), no `ext_factor`.
    LongRope,
}

/// How a sliding-window layer's window is measured (llama.cpp's `llama_swa_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwaType {
    /// A query at `q` sees the keys at `q - n_swa < p <= q` (Gemma 3).
    Standard,
    /// A query at `q` sees the keys at `|p - q| <= n_swa / 2`, on both sides (EmbeddingGemma).
    Symmetric,
}

/// What embedding and reranking models add: how the tokens' states are pooled, and the heads
/// after pooling.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbeddingParams {
    /// The pooling the file names (`pooling_type`: 1 mean, 2 CLS, 3 last, 4 rank), `None`
    /// when it names none (0 or absent).
    pub pooling: Option<Pooling>,
    /// Under rank pooling, the pooling before the classification head
    /// (`classifier.pooling_type`): mean when the file says 1, else the CLS token's state (the
    /// last token's in a causal model), as llama.cpp's `build_pooling`.
    pub rank_pooling: Pooling,
    /// Outputs of the classification head (`classifier.output_labels`; 1 when it lists none).
    pub n_cls_out: usize,
    /// Token types of a BERT model (`tokenizer.ggml.token_type_count`).
    pub n_token_types: usize,
    /// Width of EmbeddingGemma's first dense projection after pooling (`dense_2_feat_out`;
    /// 0: none).
    pub dense_2_out: usize,
    /// Input width of its second (`dense_3_feat_in`; 0: none).
    pub dense_3_in: usize,
}

/// Every hyper-parameter the graphs need.
#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    /// The architecture.
    pub arch: Architecture,
    /// Tokens in the vocabulary (rows of the embedding).
    pub n_vocab: usize,
    /// The context length the model was trained with.
    pub n_ctx_train: usize,
    /// Width of the residual stream.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key / value heads of the attention layers (grouped-query attention when fewer than
    /// `n_head`).
    pub n_head_kv: usize,
    /// Key / value heads per layer (`attention.head_count_kv` as one count or one per layer):
    /// `n_head_kv`, or 0 in a layer without attention (LFM2's short-convolution layers).
    pub n_head_kv_layers: Vec<usize>,
    /// Dimension of each key (and query) head.
    pub head_dim_k: usize,
    /// Dimension of each value head.
    pub head_dim_v: usize,
    /// Dimension of each key (and query) head of the sliding-window layers
    /// (`attention.key_length_swa`; `head_dim_k` when absent).
    pub head_dim_k_swa: usize,
    /// Dimension of each value head of the sliding-window layers
    /// (`attention.value_length_swa`; `head_dim_v` when absent).
    pub head_dim_v_swa: usize,
    /// Hidden width of the feed-forward network (the widest layer's).
    pub n_ff: usize,
    /// Hidden width of each layer's feed-forward network (`feed_forward_length` as one width
    /// or one per layer).
    pub n_ff_layers: Vec<usize>,
    /// Layers, from the first, that write a KV cache of their own (llama.cpp's
    /// `n_layer_kv_from_start`): `n_layer`, or fewer when the top layers reuse the cache of
    /// the last sliding-window / global layer below them (Gemma 4's `shared_kv_layers`).
    pub n_layer_kv: usize,
    /// Width of each layer's slice of the per-layer token embeddings (Gemma 4's
    /// `embedding_length_per_layer_input`; 0: none).
    pub n_embd_per_layer: usize,
    /// Epsilon of the RMS norms (0 in a model of layer norms).
    pub rms_eps: f32,
    /// Epsilon of the layer norms (BERT; 0 in a model of RMS norms).
    pub norm_eps: f32,
    /// Whether attention is causal (`attention.causal`; BERT and EmbeddingGemma attend both
    /// ways).
    pub causal: bool,
    /// Rotated dimensions of each head.
    pub n_rot: usize,
    /// Rotated dimensions of each head of the sliding-window layers
    /// (`rope.dimension_count_swa`; `n_rot` when absent).
    pub n_rot_swa: usize,
    /// RoPE mode (`ROPE_MODE_NORMAL` or `ROPE_MODE_NEOX`).
    pub rope_mode: u32,
    /// RoPE base of the global layers.
    pub rope_freq_base: f32,
    /// RoPE frequency scale of the global layers (1 / linear factor).
    pub rope_freq_scale: f32,
    /// RoPE base of the sliding-window layers.
    pub rope_freq_base_swa: f32,
    /// RoPE frequency scale of the sliding-window layers.
    pub rope_freq_scale_swa: f32,
    /// RoPE scaling kind.
    pub rope_scaling: RopeScaling,
    /// The original context of YaRN scaling.
    pub n_ctx_orig: usize,
    /// YaRN's attention factor.
    pub rope_attn_factor: f32,
    /// Sliding-window size (`0`: no sliding-window layers).
    pub n_swa: usize,
    /// How the window is measured.
    pub swa_type: SwaType,
    /// Per layer, whether it attends through the sliding window.
    pub swa_layers: Vec<bool>,
    /// Per layer, whether it rotates its queries and keys (SmolLM3 leaves every fourth layer
    /// without RoPE).
    pub rope_layers: Vec<bool>,
    /// Scale of `q k^T`.
    pub attn_scale: f32,
    /// Soft cap of the final logits (0: none).
    pub final_logit_softcap: f32,
    /// Per layer, whether it is recurrent (a state of fixed size carried from token to token,
    /// no KV cache): LFM2's short-convolution layers.
    pub recurrent_layers: Vec<bool>,
    /// Taps of the recurrent layers' causal convolution (ggml's `d_conv`; LFM2's
    /// `shortconv.l_cache`); 0 without recurrent layers.
    pub conv_kernel: usize,
    /// Channels of that convolution (its state holds the last `conv_kernel - 1` inputs of
    /// each).
    pub conv_channels: usize,
    /// The gated delta-net of the recurrent layers (Qwen 3.5's linear attention); `None` in
    /// other models.
    pub delta_net: Option<DeltaNetParams>,
    /// Pooling and heads of embedding and reranking models.
    pub embedding: EmbeddingParams,
}

/// The shape of a gated delta-net layer (llama.cpp's `ssm_*` hyper-parameters of Qwen 3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaNetParams {
    /// Dimension of each key and value head (`ssm.state_size`): the state of a head is
    /// `head_dim x head_dim`.
    pub head_dim: usize,
    /// Key (and query) heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of the key heads.
    pub n_v_heads: usize,
}

impl DeltaNetParams {
    /// Width of the queries (and of the keys) of a token, all heads.
    pub fn key_dim(&self) -> usize {
        self.head_dim * self.n_k_heads
    }

    /// Width of the values of a token, all heads (llama.cpp's `ssm_d_inner`).
    pub fn value_dim(&self) -> usize {
        self.head_dim * self.n_v_heads
    }

    /// F32 values of one layer's state, every value head (llama.cpp's `n_embd_s`).
    pub fn state_len(&self) -> usize {
        self.head_dim * self.head_dim * self.n_v_heads
    }
}

/// Reads metadata keys of one architecture (`{arch}.{key}`), naming the key in errors.
pub(crate) struct Keys<'a> {
    /// The file.
    pub file: &'a GgufFile,
    arch: &'static str,
}

impl Keys<'_> {
    /// The full name of `{arch}.{k}`.
    pub fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// [`LlmError::BadHyperParameter`] naming `{arch}.{k}`.
    pub fn bad(&self, k: &str, reason: impl Into<String>) -> LlmError {
        LlmError::BadHyperParameter { key: self.key(k), reason: reason.into() }
    }

    /// A required count, at least 1 and at most `max`.
    pub fn count(&self, k: &str, max: usize) -> Result<usize> {
        let key = self.key(k);
        let v = self.file.get_u64(&key)?;
        self.check_count(k, v, max)
    }

    /// An optional count, at least 1 and at most `max` when present.
    pub fn opt_count(&self, k: &str, max: usize) -> Result<Option<usize>> {
        match self.file.opt_u64(&self.key(k))? {
            Some(v) => Ok(Some(self.check_count(k, v, max)?)),
            None => Ok(None),
        }
    }

    fn check_count(&self, k: &str, v: u64, max: usize) -> Result<usize> {
        match usize::try_from(v) {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(self.bad(k, format!("{v} is not between 1 and {max}"))),
        }
    }

    /// An optional per-layer count: one count for every layer (at least 1), or an array of
    /// `n_layer` counts (llama.cpp's `get_key_or_arr`), where 0 marks a layer without it; each
    /// at most `max`.
    pub fn opt_layer_counts(
        &self,
        k: &str,
        n_layer: usize,
        max: usize,
    ) -> Result<Option<Vec<usize>>> {
        let Some(v) = self.file.get(&self.key(k)) else { return Ok(None) };
        let Some(arr) = v.as_array() else {
            let n = self.count(k, max)?;
            return Ok(Some(vec![n; n_layer]));
        };
        if arr.len() != n_layer {
            return Err(self.bad(k, format!("{} entries for {n_layer} layers", arr.len())));
        }
        let values = arr.to_i64_vec().ok_or_else(|| self.bad(k, "not an integer array"))?;
        values
            .iter()
            .enumerate()
            .map(|(il, &x)| match usize::try_from(x) {
                Ok(n) if n <= max => Ok(n),
                _ => Err(self.bad(k, format!("layer {il}: {x} is not between 0 and {max}"))),
            })
            .collect::<Result<Vec<usize>>>()
            .map(Some)
    }

    /// An optional boolean.
    pub fn opt_bool(&self, k: &str) -> Result<Option<bool>> {
        Ok(self.file.opt_bool(&self.key(k))?)
    }

    /// An optional width, at most `max` (0 allowed).
    pub fn opt_width(&self, k: &str, max: usize) -> Result<Option<usize>> {
        match self.file.opt_u64(&self.key(k))? {
            Some(v) => match usize::try_from(v) {
                Ok(n) if n <= max => Ok(Some(n)),
                _ => Err(self.bad(k, format!("{v} is more than {max}"))),
            },
            None => Ok(None),
        }
    }

    /// An optional finite float.
    pub fn opt_f32(&self, k: &str) -> Result<Option<f32>> {
        let v = self.file.opt_f32(&self.key(k))?;
        if let Some(x) = v {
            if !x.is_finite() {
                return Err(self.bad(k, format!("{x} is not finite")));
            }
        }
        Ok(v)
    }
}

/// Bounds that keep every size computed from the metadata far from overflow.
const MAX_WIDTH: usize = 1 << 20;
const MAX_LAYERS: usize = 4096;
const MAX_HEADS: usize = 4096;
/// Longest context (and sliding window) accepted from the metadata.
pub(crate) const MAX_CTX: usize = 1 << 24;

impl HParams {
    /// Reads the hyper-parameters of `file` with llama.cpp's defaults for absent keys.
    pub fn from_gguf(file: &GgufFile) -> Result<HParams> {
        let arch = Architecture::from_name(file.architecture()?)?;
        let k = Keys { file, arch: arch.name() };
        let n_embd = k.count("embedding_length", MAX_WIDTH)?;
        let n_layer = k.count("block_count", MAX_LAYERS)?;
        let n_head = k.count("attention.head_count", MAX_HEADS)?;
        let n_head_kv_layers = k
            .opt_layer_counts("attention.head_count_kv", n_layer, MAX_HEADS)?
            .unwrap_or_else(|| vec![n_head; n_layer]);
        let n_head_kv = common_count(&k, "attention.head_count_kv", &n_head_kv_layers)?;
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(k.bad(
                "attention.head_count_kv",
                format!("{n_head_kv} does not divide the {n_head} query heads"),
            ));
        }
        // Without explicit head sizes, a head is n_embd / n_head wide: the count must divide it.
        let per_head = |key: &str| -> Result<usize> {
            if n_embd.is_multiple_of(n_head) {
                Ok(n_embd / n_head)
            } else {
                Err(k.bad(
                    "attention.head_count",
                    format!(
                        "{n_head} heads do not divide {} = {n_embd}, and {} is absent to give \
                         the head size",
                        k.key("embedding_length"),
                        k.key(key)
                    ),
                ))
            }
        };
        let head_dim_k = match k.opt_count("attention.key_length", MAX_WIDTH)? {
            Some(n) => n,
            None => per_head("attention.key_length")?,
        };
        let head_dim_v = match k.opt_count("attention.value_length", MAX_WIDTH)? {
            Some(n) => n,
            None => per_head("attention.value_length")?,
        };
        let n_rot = k.opt_count("rope.dimension_count", MAX_WIDTH)?.unwrap_or(head_dim_k);
        if n_rot > head_dim_k || !n_rot.is_multiple_of(2) {
            return Err(k.bad(
                "rope.dimension_count",
                format!("{n_rot} must be even and at most the head dimension {head_dim_k}"),
            ));
        }
        let n_ff_layers = k
            .opt_layer_counts("feed_forward_length", n_layer, MAX_WIDTH * 16)?
            .ok_or_else(|| k.bad("feed_forward_length", "missing"))?;
        let n_ff = n_ff_layers.iter().copied().max().unwrap_or(0);
        if n_ff == 0 {
            return Err(k.bad("feed_forward_length", "0 in every layer"));
        }
        let n_ctx_train = k.count("context_length", MAX_CTX)?;
        let n_vocab = match k.opt_count("vocab_size", 1 << 24)? {
            Some(n) => n,
            None => file
                .opt_array("tokenizer.ggml.tokens")?
                .map(|a| a.len())
                .filter(|&n| n > 0)
                .ok_or_else(|| k.bad("vocab_size", "absent, and no tokenizer.ggml.tokens"))?,
        };
        let eps_key = match arch.imp().norm() {
            NormKind::Rms => "attention.layer_norm_rms_epsilon",
            NormKind::Layer => "attention.layer_norm_epsilon",
        };
        let eps = k.opt_f32(eps_key)?.ok_or_else(|| k.bad(eps_key, "missing"))?;
        if eps < 0.0 {
            return Err(k.bad(eps_key, format!("{eps} < 0")));
        }
        let (rms_eps, norm_eps) = match arch.imp().norm() {
            NormKind::Rms => (eps, 0.0),
            NormKind::Layer => (0.0, eps),
        };
        let rope_freq_base = k.opt_f32("rope.freq_base")?.unwrap_or(10000.0);
        if rope_freq_base <= 0.0 {
            return Err(k.bad("rope.freq_base", format!("{rope_freq_base} <= 0")));
        }
        let scaling = file.opt_str(&k.key("rope.scaling.type"))?.unwrap_or("linear");
        let rope_scaling = match scaling {
            "linear" | "none" => RopeScaling::Linear,
            "yarn" => RopeScaling::Yarn,
            "longrope" => RopeScaling::LongRope,
            other => return Err(k.bad("rope.scaling.type", format!("{other:?} is not supported"))),
        };
        let factor = match k.opt_f32("rope.scaling.factor")? {
            Some(f) => Some(f),
            None => k.opt_f32("rope.scale_linear")?,
        };
        let rope_freq_scale = match factor {
            None => 1.0,
            Some(0.0) => 1.0,
            Some(f) if f > 0.0 => 1.0 / f,
            Some(f) => return Err(k.bad("rope.scaling.factor", format!("{f} < 0"))),
        };
        let n_ctx_orig =
            k.opt_count("rope.scaling.original_context_length", MAX_CTX)?.unwrap_or(n_ctx_train);
        let rope_attn_factor = k.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0);

        let mut hp = HParams {
            arch,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_head_kv_layers,
            head_dim_k,
            head_dim_v,
            head_dim_k_swa: head_dim_k,
            head_dim_v_swa: head_dim_v,
            n_ff,
            n_ff_layers,
            n_layer_kv: n_layer,
            n_embd_per_layer: 0,
            rms_eps,
            norm_eps,
            causal: k.opt_bool("attention.causal")?.unwrap_or(true),
            n_rot,
            n_rot_swa: n_rot,
            rope_mode: arch.rope_mode(),
            rope_freq_base,
            rope_freq_scale,
            rope_freq_base_swa: 10000.0,
            rope_freq_scale_swa: 1.0,
            rope_scaling,
            n_ctx_orig,
            rope_attn_factor,
            n_swa: 0,
            swa_type: SwaType::Standard,
            swa_layers: vec![false; n_layer],
            rope_layers: vec![true; n_layer],
            attn_scale: 1.0 / (head_dim_k as f32).sqrt(),
            final_logit_softcap: 0.0,
            recurrent_layers: vec![false; n_layer],
            conv_kernel: 0,
            conv_channels: 0,
            delta_net: None,
            embedding: EmbeddingParams::read(&k, n_vocab)?,
        };
        arch.imp().read_hparams(&k, &mut hp)?;
        if let Some(il) =
            (0..n_layer).find(|&il| hp.n_head_kv_layers[il] == 0 && !hp.is_recurrent(il))
        {
            return Err(k.bad(
                "attention.head_count_kv",
                format!("layer {il} has no KV heads, and {arch} has no recurrent layers there"),
            ));
        }
        Ok(hp)
    }

    /// Whether the model produces logits: a causal model with an output head (an embedding
    /// model such as BERT or EmbeddingGemma does not).
    pub fn can_generate(&self) -> bool {
        self.causal && self.arch.imp().generates()
    }

    /// Width of one token's keys in a layer (all KV heads).
    pub fn n_embd_k_gqa(&self) -> usize {
        self.head_dim_k * self.n_head_kv
    }

    /// Width of one token's values in a layer (all KV heads).
    pub fn n_embd_v_gqa(&self) -> usize {
        self.head_dim_v * self.n_head_kv
    }

    /// Dimension of each key (and query) head of layer `il` (the sliding-window layers may
    /// have their own).
    pub fn head_dim_k_of(&self, il: usize) -> usize {
        if self.is_swa(il) {
            self.head_dim_k_swa
        } else {
            self.head_dim_k
        }
    }

    /// Dimension of each value head of layer `il`.
    pub fn head_dim_v_of(&self, il: usize) -> usize {
        if self.is_swa(il) {
            self.head_dim_v_swa
        } else {
            self.head_dim_v
        }
    }

    /// Rotated dimensions of each head of layer `il`.
    pub fn n_rot_of(&self, il: usize) -> usize {
        if self.is_swa(il) {
            self.n_rot_swa
        } else {
            self.n_rot
        }
    }

    /// Width of one token's keys in layer `il` (all KV heads).
    pub fn n_embd_k_gqa_of(&self, il: usize) -> usize {
        self.head_dim_k_of(il) * self.n_head_kv
    }

    /// Width of one token's values in layer `il` (all KV heads).
    pub fn n_embd_v_gqa_of(&self, il: usize) -> usize {
        self.head_dim_v_of(il) * self.n_head_kv
    }

    /// Hidden width of layer `il`'s feed-forward network.
    pub fn n_ff_of(&self, il: usize) -> usize {
        self.n_ff_layers.get(il).copied().unwrap_or(self.n_ff)
    }

    /// Whether some layer reuses another layer's KV cache.
    pub fn has_shared_kv(&self) -> bool {
        self.n_layer_kv < self.n_layer
    }

    /// The layer whose KV cache layer `il` attends over: itself when it writes its own, else
    /// the last layer below the shared ones of its kind (sliding-window or global), as
    /// llama.cpp's Gemma 3n / Gemma 4 reuse rule.
    pub fn kv_source(&self, il: usize) -> usize {
        if il < self.n_layer_kv {
            il
        } else if self.is_swa(il) {
            self.n_layer_kv - 2
        } else {
            self.n_layer_kv - 1
        }
    }

    /// Whether layer `il` is recurrent (a state instead of a KV cache).
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.recurrent_layers.get(il).copied().unwrap_or(false)
    }

    /// Whether some layer is recurrent.
    pub fn has_recurrent(&self) -> bool {
        self.recurrent_layers.iter().any(|&r| r)
    }

    /// F32 values of one recurrent layer's convolution state (llama.cpp's `n_embd_r`): the
    /// last `conv_kernel - 1` inputs of each channel.
    pub fn n_embd_r(&self) -> usize {
        self.conv_kernel.saturating_sub(1) * self.conv_channels
    }

    /// Whether layer `il` attends through the sliding window.
    pub fn is_swa(&self, il: usize) -> bool {
        self.n_swa > 0 && self.swa_layers.get(il).copied().unwrap_or(false)
    }

    /// Whether layer `il` rotates its queries and keys.
    pub fn uses_rope(&self, il: usize) -> bool {
        self.rope_layers.get(il).copied().unwrap_or(true)
    }

    /// RoPE base and frequency scale of layer `il`.
    pub fn rope_freqs(&self, il: usize) -> (f32, f32) {
        if self.is_swa(il) {
            (self.rope_freq_base_swa, self.rope_freq_scale_swa)
        } else {
            (self.rope_freq_base, self.rope_freq_scale)
        }
    }
}

/// The one count the non-zero entries of a per-layer count share (the graphs give every
/// attention layer the same heads), or an error naming `key`.
fn common_count(k: &Keys<'_>, key: &str, per_layer: &[usize]) -> Result<usize> {
    let mut counts = per_layer.iter().copied().filter(|&n| n > 0);
    let first = counts.next().ok_or_else(|| k.bad(key, "0 in every layer"))?;
    if let Some(other) = counts.find(|&n| n != first) {
        return Err(k.bad(key, format!("layers with {first} and with {other} are not supported")));
    }
    Ok(first)
}

impl EmbeddingParams {
    /// The keys every architecture may have (llama.cpp reads them for all): `pooling_type`,
    /// `classifier.pooling_type`, `classifier.output_labels`; the rest are set by the
    /// architectures that have them.
    fn read(k: &Keys<'_>, n_vocab: usize) -> Result<EmbeddingParams> {
        let pooling_of = |key: &str| -> Result<Option<Pooling>> {
            match k.file.opt_i64(&k.key(key))? {
                None | Some(0) | Some(-1) => Ok(None),
                Some(1) => Ok(Some(Pooling::Mean)),
                Some(2) => Ok(Some(Pooling::First)),
                Some(3) => Ok(Some(Pooling::Last)),
                Some(4) => Ok(Some(Pooling::Rank)),
                Some(v) => Err(k.bad(
                    key,
                    format!("pooling type {v} is not one of 0 none, 1 mean, 2 cls, 3 last, 4 rank"),
                )),
            }
        };
        let pooling = pooling_of("pooling_type")?;
        let rank_pooling = match pooling_of("classifier.pooling_type")? {
            Some(Pooling::Mean) => Pooling::Mean,
            _ => Pooling::First,
        };
        let n_cls_out = match k.file.opt_array(&k.key("classifier.output_labels"))? {
            Some(labels) if labels.len() > n_vocab.max(1 << 16) => {
                return Err(k.bad("classifier.output_labels", format!("{} labels", labels.len())))
            }
            Some(labels) if !labels.is_empty() => labels.len(),
            _ => 1,
        };
        Ok(EmbeddingParams {
            pooling,
            rank_pooling,
            n_cls_out,
            n_token_types: 0,
            dense_2_out: 0,
            dense_3_in: 0,
        })
    }
}

/// Which layers use the sliding window (llama.cpp's `load_swa_pattern`):
/// `attention.sliding_window_pattern` as an array of booleans, or a period `n` (every `n`-th
/// layer global, the rest sliding), `default_period` when absent.
pub(crate) fn sliding_window_layers(
    k: &Keys<'_>,
    n_layer: usize,
    default_period: u32,
) -> Result<Vec<bool>> {
    let file = k.file;
    let key = k.key("attention.sliding_window_pattern");
    if let Some(v) = file.get(&key) {
        if let Some(arr) = v.as_array() {
            let flags = arr
                .as_bool_slice()
                .ok_or_else(|| k.bad("attention.sliding_window_pattern", "not a BOOL array"))?;
            if flags.len() != n_layer {
                return Err(k.bad(
                    "attention.sliding_window_pattern",
                    format!("{} entries for {n_layer} layers", flags.len()),
                ));
            }
            return Ok(flags.to_vec());
        }
    }
    let period = file.opt_u32(&key)?.unwrap_or(default_period) as usize;
    Ok((0..n_layer).map(|il| period == 0 || il % period < period - 1).collect())
}
