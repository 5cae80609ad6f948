//! Ops and their parameters, with ggml's semantics and parameter meanings.

use serde::{Deserialize, Serialize};

/// Element-wise activation functions (ggml's unary ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UnaryOp {
    /// x * sigmoid(x).
    Silu,
    /// The tanh approximation of GELU, as ggml's `ggml_gelu`.
    Gelu,
    /// max(x, 0).
    Relu,
    /// tanh(x).
    Tanh,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `log(1 + exp(x))`, `x` itself above 20 (as ggml's `ggml_softplus`).
    Softplus,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 6] = [
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::Relu,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Softplus,
    ];

    /// The op's name ("SILU", ...).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Silu => "SILU",
            UnaryOp::Gelu => "GELU",
            UnaryOp::Relu => "RELU",
            UnaryOp::Tanh => "TANH",
            UnaryOp::Sigmoid => "SIGMOID",
            UnaryOp::Softplus => "SOFTPLUS",
        }
    }
}

/// Gated linear units: `act(a) * b` (ggml's GLU ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GluOp {
    /// silu(a) * b.
    Swiglu,
    /// gelu(a) * b.
    Geglu,
}

impl GluOp {
    /// The op's name ("SWIGLU", "GEGLU").
    pub fn name(self) -> &'static str {
        match self {
            GluOp::Swiglu => "SWIGLU",
            GluOp::Geglu => "GEGLU",
        }
    }

    /// The activation applied to the gate.
    pub fn activation(self) -> UnaryOp {
        match self {
            GluOp::Swiglu => UnaryOp::Silu,
            GluOp::Geglu => UnaryOp::Gelu,
        }
    }
}

/// ROPE mode: normal (adjacent pairs) or NeoX (pairs half the rotated dims apart).
pub const ROPE_MODE_NORMAL: u32 = 0;
/// ROPE mode value of NeoX, as ggml's `GGML_ROPE_TYPE_NEOX`.
pub const ROPE_MODE_NEOX: u32 = 2;

/// Parameters of ROPE, as ggml's `ggml_rope_ext`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RopeParams {
    /// Number of leading dims of each row that are rotated (even, at most `ne[0]`).
    pub n_dims: usize,
    /// [`ROPE_MODE_NORMAL`] or [`ROPE_MODE_NEOX`].
    pub mode: u32,
    /// Original training context length (YaRN).
    pub n_ctx_orig: usize,
    /// Frequency base (theta), e.g. 10000.
    pub freq_base: f32,
    /// Frequency scale (1 / linear scaling factor).
    pub freq_scale: f32,
    /// YaRN extrapolation mix factor (0 disables YaRN).
    pub ext_factor: f32,
    /// Magnitude scale.
    pub attn_factor: f32,
    /// YaRN low correction dim.
    pub beta_fast: f32,
    /// YaRN high correction dim.
    pub beta_slow: f32,
}

impl Default for RopeParams {
    fn default() -> Self {
        RopeParams {
            n_dims: 0,
            mode: ROPE_MODE_NORMAL,
            n_ctx_orig: 0,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

impl RopeParams {
    /// ggml's `ggml_rope_yarn_corr_dims`: the YaRN correction dims
    /// `[max(0, floor(start)), min(n_dims - 1, ceil(end))]`, computed in f32 exactly as ggml
    /// does (they are floored and ceiled, so an f64 value could land on the other side). Every
    /// ROPE implementation (CPU reference, CPU tables, GPU) uses these.
    pub fn yarn_corr_dims(&self) -> [f32; 2] {
        // ggml's `ggml_rope_yarn_corr_dim`: the dim at which `n_rot` rotations happen over
        // `n_ctx_orig` positions.
        let corr_dim = |n_rot: f32| {
            self.n_dims as f32
                * (self.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = corr_dim(self.beta_fast).floor();
        let end = corr_dim(self.beta_slow).ceil();
        [start.max(0.0), end.min(self.n_dims as f32 - 1.0)]
    }
}

/// Parameters of FLASH_ATTN_EXT, as ggml's `ggml_flash_attn_ext`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AttnParams {
    /// Applied to `q k^T` before the soft cap and the mask (usually `1 / sqrt(D)`).
    pub scale: f32,
    /// ALiBi maximum bias (0 disables ALiBi; needs a mask).
    pub max_bias: f32,
    /// Logit soft cap `c`: scores become `c * tanh(s / c)` (0 disables it).
    pub softcap: f32,
}

impl Default for AttnParams {
    fn default() -> Self {
        AttnParams { scale: 1.0, max_bias: 0.0, softcap: 0.0 }
    }
}

/// An op with its parameters. Operands are the tensor's `src`, in ggml's order.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// No op: a leaf (input, weight, constant).
    None,
    /// `dup(a)`: a contiguous copy of `a` with the same type.
    Dup,
    /// `cpy(a, b)`: converts `a` into the memory of `b` (same element count); the result is a
    /// view of `b`.
    Cpy,
    /// `cont(a)`: a contiguous copy of a possibly strided `a`.
    Cont,
    /// `a + b`, `b` broadcast over `a` (repeated along every dim where it is smaller).
    Add,
    /// `a - b`, broadcasting `b`.
    Sub,
    /// `a * b`, broadcasting `b`.
    Mul,
    /// `a / b`, broadcasting `b`.
    Div,
    /// `a * scale + bias`.
    Scale {
        /// Multiplier.
        scale: f32,
        /// Added after scaling (0 for ggml's plain `ggml_scale`).
        bias: f32,
    },
    /// `a * a`.
    Sqr,
    /// `sqrt(a)`.
    Sqrt,
    /// `min(max(a, min), max)`.
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// Sum of every element, a 1-element tensor.
    Sum,
    /// Sum of each row: shape `[1, ne1, ne2, ne3]`.
    SumRows,
    /// Mean of each row: shape `[1, ne1, ne2, ne3]`.
    Mean,
    /// Index of the largest element of each row of a matrix: I32 `[ne1]`.
    Argmax,
    /// `a` tiled to a larger shape (each dim a multiple of `a`'s).
    Repeat {
        /// The shape of the result.
        ne: [usize; 4],
    },
    /// `a` and `b` joined along `dim`.
    Concat {
        /// The dim along which to join.
        dim: usize,
    },
    /// The short causal convolution of state-space and LFM2 models (ggml's SSM_CONV): `sx` F32
    /// `[d_conv - 1 + n_t, d_inner, n_s]` (per channel, the `d_conv - 1` values carried over
    /// from the previous tokens, then this batch's `n_t`), `c` F32 `[d_conv, d_inner]`; result
    /// F32 `[d_inner, n_t, n_s]`, `out[i, t, s] = sum_k sx[t + k, i, s] c[k, i]`.
    SsmConv,
    /// The gated delta rule of Qwen 3.5's linear attention (ggml's GATED_DELTA_NET, one state
    /// snapshot): operands `q`, `k` F32 `[S, H_k, n_t, n_s]`, `v` F32 `[S, H, n_t, n_s]` (rows
    /// contiguous, `H` a multiple of `H_k`: value head `h` reads query / key head `h % H_k`),
    /// the log-decay `g` F32 `[1, H, n_t, n_s]` (or `[S, H, n_t, n_s]`, one per key dim), `beta`
    /// F32 `[1, H, n_t, n_s]` and the state F32 `[S, S, H, n_s]` (element `[i, j]` is `M[i][j]`,
    /// key dim `i`, value dim `j`). Per head, token by token: `M = M * exp(g)` (scaled along
    /// `i`), `d[j] = beta (v[j] - sum_i M[i][j] k[i])`, `M[i][j] += k[i] d[j]`, output
    /// `o[j] = sum_i M[i][j] q[i] / sqrt(S)`. Result F32 `[S * H, n_t * n_s + S * n_s]`: the
    /// outputs (`[S, H, n_t, n_s]` in order), then the final states (`[S, S, H, n_s]`).
    GatedDeltaNet,
    /// `C[n, m] = sum_k A[m, k] B[n, k]`: `a` the weights `[K, M, ...]`, `b` F32
    /// `[K, N, ...]`, result F32 `[M, N, ...]`, `a` broadcast over dims 2 and 3.
    MulMat,
    /// Rows of `a` selected by the I32 indices in `b`, as F32.
    GetRows,
    /// `set_rows(a, b, c)`: row `i` of `b` (F32) written, converted to `a`'s float type, into
    /// row `c[i]` of `a` (ggml's SET_ROWS, the KV-cache write); the result is a view of `a`.
    /// The I32 indices `c` (`[n, ne12 / k, ne13 / l]`) are broadcast over `b`'s dims 2 and 3.
    SetRows,
    /// Fused attention (ggml's FLASH_ATTN_EXT): `softmax(softcap(q k^T * scale) + mask) v` per
    /// head, online over the keys; `q` F32 `[D, n_q, n_head, ne3]`, `k` `[D, n_kv, n_head_kv,
    /// ne3]` and `v` `[Dv, n_kv, n_head_kv, ne3]` (F16, F32, Q8_0 or Q4_0: the KV cache types;
    /// `n_head` a multiple of `n_head_kv`: grouped-query attention), optional mask (F16 or F32,
    /// `[n_kv, >= n_q]`, broadcast over heads); result F32 `[Dv, n_head, n_q, ne3]`.
    FlashAttnExt(AttnParams),
    /// `softmax(a * scale + mask + alibi)` along rows; optional mask as second operand.
    SoftMax {
        /// Scale applied to `a` before the mask.
        scale: f32,
        /// ALiBi maximum bias (0 disables ALiBi).
        max_bias: f32,
    },
    /// Sets `a[i0, i1] = -inf` where `i0 > n_past + i1`.
    DiagMaskInf {
        /// Number of past positions visible to every row.
        n_past: usize,
    },
    /// Each row divided by its root mean square.
    RmsNorm {
        /// Added to the mean square.
        eps: f32,
    },
    /// Each row normalized to zero mean and unit variance.
    Norm {
        /// Added to the variance.
        eps: f32,
    },
    /// Rotary position embedding; operands `a`, I32 positions `[ne2]`, optional F32 frequency
    /// factors `[n_dims / 2]`.
    Rope(RopeParams),
    /// An element-wise activation.
    Unary(UnaryOp),
    /// A gated linear unit. With one operand, its rows are split in halves `[x, g]`
    /// (`swapped` exchanges them) and the result is `act(x) * g`; with two, `act(a) * b`.
    Glu {
        /// Which activation.
        op: GluOp,
        /// With one operand, whether the gate half comes first.
        swapped: bool,
    },
    /// A view with a new shape of a contiguous tensor.
    Reshape,
    /// A view with given shape, strides and offset.
    View,
    /// A view with dims reordered: source dim `i` goes to position `axes[i]`.
    Permute {
        /// Destination position of each source dim.
        axes: [usize; 4],
    },
    /// A view with dims 0 and 1 swapped.
    Transpose,
}

impl Op {
    /// ggml-style name of the op, as used in graph documents and messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Cpy => "CPY",
            Op::Cont => "CONT",
            Op::Add => "ADD",
            Op::Sub => "SUB",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Scale { .. } => "SCALE",
            Op::Sqr => "SQR",
            Op::Sqrt => "SQRT",
            Op::Clamp { .. } => "CLAMP",
            Op::Sum => "SUM",
            Op::SumRows => "SUM_ROWS",
            Op::Mean => "MEAN",
            Op::Argmax => "ARGMAX",
            Op::Repeat { .. } => "REPEAT",
            Op::Concat { .. } => "CONCAT",
            Op::SsmConv => "SSM_CONV",
            Op::GatedDeltaNet => "GATED_DELTA_NET",
            Op::MulMat => "MUL_MAT",
            Op::GetRows => "GET_ROWS",
            Op::SetRows => "SET_ROWS",
            Op::FlashAttnExt(_) => "FLASH_ATTN_EXT",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::DiagMaskInf { .. } => "DIAG_MASK_INF",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::Norm { .. } => "NORM",
            Op::Rope(_) => "ROPE",
            Op::Unary(u) => u.name(),
            Op::Glu { op, .. } => op.name(),
            Op::Reshape => "RESHAPE",
            Op::View => "VIEW",
            Op::Permute { .. } => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
        }
    }

    /// The operand whose memory the op writes into, for ops whose result is a view of an
    /// operand: CPY's destination (operand 1) and SET_ROWS's (operand 0).
    pub fn destination_operand(&self) -> Option<usize> {
        match self {
            Op::Cpy => Some(1),
            Op::SetRows => Some(0),
            _ => None,
        }
    }

    /// Whether the op only reinterprets memory (computes nothing).
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Reshape | Op::View | Op::Permute { .. } | Op::Transpose)
    }

    /// Whether the op computes something (not a leaf, not a view).
    pub fn computes(&self) -> bool {
        !matches!(self, Op::None) && !self.is_view()
    }

    /// Whether the result may be written over its first operand when that has no later use
    /// (element-wise ops whose output has the operand's layout).
    pub fn can_run_in_place(&self) -> bool {
        matches!(
            self,
            Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Scale { .. }
                | Op::Sqr
                | Op::Sqrt
                | Op::Clamp { .. }
                | Op::Unary(_)
                | Op::SoftMax { .. }
                | Op::DiagMaskInf { .. }
                | Op::RmsNorm { .. }
                | Op::Norm { .. }
        )
    }
}
