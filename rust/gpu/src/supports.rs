//! What the GPU kernels implement, answered per node: the op's rule in tessera-core
//! (`tessera_core::shape_rules`: the types, shapes and parameters every device takes), then
//! only what the kernels add to it: the types they have shaders for, the ops they implement,
//! and their layout and dispatch limits. The table gives the result of both.
//!
//! | op | types | constraints |
//! |---|---|---|
//! | view ops (RESHAPE, VIEW, PERMUTE, TRANSPOSE), leaves | any | nothing to compute |
//! | ADD, SUB, MUL, DIV | src0, src1, dst F32 or F16 | src1 broadcast as in ggml; any strides |
//! | SCALE, SQR, SQRT, CLAMP, SILU, GELU, RELU, TANH, SIGMOID, SOFTPLUS | F32 or F16 (dst = src0's type) | any strides |
//! | SWIGLU, GEGLU | F32 or F16, one operand (row halves, swapped or not) or two | any strides |
//! | CPY, CONT, DUP | F32 or F16 to F32 or F16; I32 to I32 | any strides |
//! | MUL_MAT | src0 a weight type (below); src1 F32, F16 or BF16; dst F32 | any strides (block rows dense), src0 broadcast over dims 2, 3 |
//! | GET_ROWS | src0 a weight type (to F32) or I32 (to I32); indices I32 | any strides; an index out of range is an error |
//! | SET_ROWS | rows F32 into F32, F16, Q8_0 or Q4_0 (quantized as ggml's reference quantizers); indices I32 (broadcast over dims 2, 3) | any strides (destination rows dense); an index out of range is an error; repeated indices: the last row wins |
//! | FLASH_ATTN_EXT | q F32, k and v F32, F16, Q8_0 or Q4_0 (the KV cache types), mask F32 or F16 | head dims up to 512; grouped-query heads; scale, ALiBi, soft cap; any strides (rows dense) |
//! | SOFT_MAX | src0 F32, mask F32 or F16, ALiBi | any strides |
//! | RMS_NORM, NORM | F32 | any strides |
//! | ROPE | src0 F32, positions I32, frequency factors F32 | normal or NeoX mode, YaRN (`ext_factor`, `beta_fast`, `beta_slow`, `n_ctx_orig`) |
//! | CONCAT | F32, F16 or BF16 (both operands and the result of one type) | any dim; any strides |
//! | SSM_CONV | F32 | any strides (LFM2 and Qwen 3.5 feed a transposed view) |
//! | GATED_DELTA_NET | F32 | the rule's layouts (q, k, v rows dense); decay per head or per key dim |
//!
//! The weight types are F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K,
//! Q6_K, IQ4_NL and IQ4_XS (every type but Q8_1 and Q8_K, which GGUF files do not use for
//! weights).
//!
//! GET_ROWS and SET_ROWS check their indices in the kernel: one outside the rows makes the
//! compute fail with `Error::IndexOutOfRange` naming it, as on the CPU (never a row of zeros).
//!
//! Every operand must also be addressable by the kernels: F32 and I32 tensors 4-byte aligned
//! (view offsets and strides multiples of 4), F16 and quantized tensors 2-byte aligned, sizes,
//! shapes and strides within 32 bits and within one storage binding (except the weights of
//! MUL_MAT and the table of GET_ROWS: a matrix larger than a binding, such as a large
//! vocabulary's embeddings, is read in ranges of rows, one dispatch each), and the dispatch
//! within the workgroup-count limits.

use crate::kernels::dtype_code;
use tessera_core::shape_rules;
use tessera_core::tensor::Tensor;
use tessera_core::{DType, Graph, Layout, Op, TensorId};

/// Most workgroups in one dispatch dimension.
const MAX_GROUPS: usize = 65535;

/// Whether tensor `id` can be read or written by the kernels: a known type, element-aligned
/// view offset and strides, and 32-bit shapes and sizes within `max_binding` bytes; or, for
/// the weights of MUL_MAT and the table of GET_ROWS (`in_row_ranges`), a matrix whose every
/// row fits, which the kernels then read in ranges of rows.
fn addressable(graph: &Graph, id: TensorId, max_binding: u64, in_row_ranges: bool) -> bool {
    let t = graph.tensor(id);
    if dtype_code(t.dtype()).is_none() {
        return false;
    }
    let align = match t.dtype() {
        DType::F32 | DType::I32 => 4,
        _ => 2,
    };
    let (_, offs) = graph.view_root(id);
    let fits = |v: usize| u32::try_from(v).is_ok();
    let limit = max_binding.min(u64::from(u32::MAX));
    let size_ok = (t.nbytes() as u64) + 256 <= limit
        || in_row_ranges && t.ne()[2] * t.ne()[3] == 1 && {
            let mut row = t.layout;
            row.ne[1] = 1;
            (row.nbytes() as u64) + 256 <= limit / 2
        };
    offs.is_multiple_of(align)
        && t.nb().iter().all(|&nb| nb.is_multiple_of(align) && fits(nb))
        && t.ne().iter().all(|&n| fits(n))
        && fits(t.nelements())
        && size_ok
}

/// Whether `dtype` is a weight type the kernels decode (`shaders/quant.wgsl`).
pub fn is_weight_type(dtype: DType) -> bool {
    dtype != DType::I32 && dtype_code(dtype).is_some()
}

fn is_f32_or_f16(t: &Tensor) -> bool {
    matches!(t.dtype(), DType::F32 | DType::F16)
}

/// Whether `t` is of a KV cache type the kernels write and attend over: F32, F16, Q8_0, Q4_0.
fn is_kv_type(t: &Tensor) -> bool {
    matches!(t.dtype(), DType::F32 | DType::F16 | DType::Q8_0 | DType::Q4_0)
}

/// Whether node `t` is what the op's rule in tessera-core gives for its operands (type and
/// shape): the types and shapes that every device takes, which the checks below narrow.
fn follows_the_op_rule(graph: &Graph, t: &Tensor) -> bool {
    let srcs: Vec<&Layout> = t.src.iter().map(|&s| &graph.tensor(s).layout).collect();
    match shape_rules::output_layout(&t.op, &srcs) {
        Ok(Some(want)) => want.dtype == t.dtype() && want.ne == t.ne(),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Whether the GPU kernels compute node `id` of `graph` as it is (op, parameters, operand types
/// and layouts), given the device's largest storage binding `max_binding` in bytes.
///
/// The op's rule ([`shape_rules::output_layout`]) is checked first; what follows is only what
/// the kernels add to it: the types they have shaders for (F32 and F16, no BF16 element-wise;
/// the weight types of `shaders/quant.wgsl`), the ops they implement, head dims and dispatch
/// limits.
pub fn supports_op(graph: &Graph, id: TensorId, max_binding: u64) -> bool {
    let Ok(t) = graph.get(id) else { return false };
    if !t.op.computes() {
        return true;
    }
    if t.src.iter().any(|&s| graph.get(s).is_err()) || !follows_the_op_rule(graph, t) {
        return false;
    }
    let ranged = matches!(t.op, Op::MulMat | Op::GetRows);
    let operands_ok = t
        .src
        .iter()
        .enumerate()
        .all(|(i, &s)| addressable(graph, s, max_binding, ranged && i == 0))
        && addressable(graph, id, max_binding, false);
    if !operands_ok {
        return false;
    }
    let src = |i: usize| graph.tensor(t.src[i]);
    let elements_ok = t.nelements().div_ceil(256) <= MAX_GROUPS * MAX_GROUPS;
    let rows_ok = t.layout.nrows() <= MAX_GROUPS * MAX_GROUPS;
    match &t.op {
        // F32 and F16 shaders only (the rule also takes BF16).
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            elements_ok && is_f32_or_f16(src(0)) && is_f32_or_f16(src(1))
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Clamp { .. } | Op::Unary(_) => {
            elements_ok && is_f32_or_f16(src(0))
        }
        Op::Glu { .. } => {
            elements_ok && is_f32_or_f16(src(0)) && (t.src.len() < 2 || is_f32_or_f16(src(1)))
        }
        // Between F32 and F16, or I32 to I32 (the rule keeps I32 to I32); no block types.
        Op::Cpy | Op::Cont | Op::Dup => {
            elements_ok && (is_f32_or_f16(t) && is_f32_or_f16(src(0)) || t.dtype() == DType::I32)
        }
        // Weights of a type the shaders decode; tiles within the dispatch limits.
        Op::MulMat => {
            let (na, nb) = (src(0).ne(), src(1).ne());
            is_weight_type(src(0).dtype())
                && na[1].div_ceil(crate::kernels::MUL_MAT_TILE) <= MAX_GROUPS
                && nb[1].div_ceil(crate::kernels::MUL_MAT_TILE) <= MAX_GROUPS
                && nb[2] * nb[3] <= MAX_GROUPS
        }
        Op::GetRows => {
            elements_ok && (is_weight_type(src(0).dtype()) || src(0).dtype() == DType::I32)
        }
        // Into F32, F16, Q8_0 or Q4_0 rows (the rule also takes BF16).
        Op::SetRows => elements_ok && is_kv_type(t),
        // Keys and values of the KV cache types (quantized blocks dequantized in the shader).
        Op::FlashAttnExt(_) => {
            let (q, v) = (src(0), src(2));
            let max_d = crate::kernels::FLASH_ATTN_MAX_HEAD_DIM;
            is_kv_type(src(1))
                && is_kv_type(v)
                && q.ne()[0] <= max_d
                && v.ne()[0] <= max_d
                && q.ne()[1] * q.ne()[2] * q.ne()[3] <= MAX_GROUPS * MAX_GROUPS
        }
        Op::SoftMax { .. } | Op::RmsNorm { .. } | Op::Norm { .. } => rows_ok,
        Op::Rope(_) => {
            let ne = t.ne();
            (ne[0].div_ceil(2) * ne[1] * ne[2] * ne[3]).div_ceil(256) <= MAX_GROUPS * MAX_GROUPS
        }
        // Any float type the rule takes (F32, F16, BF16), copied bit for bit.
        Op::Concat { .. } => elements_ok,
        // F32 (the rule's only type).
        Op::SsmConv => elements_ok,
        // F32; one invocation per column of each state.
        Op::GatedDeltaNet => {
            let v = src(2).ne();
            (v[0] * v[1] * v[3]).div_ceil(64) <= MAX_GROUPS * MAX_GROUPS
        }
        // No kernels: SUM, SUM_ROWS, MEAN, ARGMAX, REPEAT, DIAG_MASK_INF.
        _ => false,
    }
}
