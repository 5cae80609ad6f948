//! The op rules of `tessera_core::shape_rules`, one op family at a time, against answers worked
//! out by hand from ggml's constructors (`ggml_add`, `ggml_mul_mat`, `ggml_get_rows`, ...):
//! the result's type and shape for operands that fit, the error kind, op and operand for
//! operands that do not.

use tessera_core::op::{AttnParams, GluOp, RopeParams, UnaryOp, ROPE_MODE_NEOX};
use tessera_core::shape_rules::{output_layout, reshape_layout, view_layout};
use tessera_core::{DType, Error, Graph, Layout, Op};

use DType::{BF16, F16, F32, I32, Q4_0, Q4_1, Q5_0, Q8_0};

fn l(dtype: DType, ne: &[usize]) -> Layout {
    Layout::contiguous(dtype, ne).unwrap()
}

/// The result of `op` on `srcs`, as (type, ne).
fn out(op: Op, srcs: &[Layout]) -> (DType, [usize; 4]) {
    let refs: Vec<&Layout> = srcs.iter().collect();
    let r = output_layout(&op, &refs).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    let r = r.unwrap_or_else(|| panic!("{op:?}: no layout"));
    (r.dtype, r.ne)
}

/// The error of `op` on `srcs`.
fn err(op: Op, srcs: &[Layout]) -> Error {
    let refs: Vec<&Layout> = srcs.iter().collect();
    match output_layout(&op, &refs) {
        Ok(r) => panic!("{op:?} on {srcs:?} accepted: {r:?}"),
        Err(e) => e,
    }
}

/// Asserts a shape error of `op` whose text names `what`.
fn is_shape(e: Error, op: &str, what: &str) {
    match &e {
        Error::ShapeMismatch { op: o, reason } if o == op && reason.contains(what) => {}
        _ => panic!("expected a {op} shape error naming {what:?}, got {e:?}"),
    }
}

/// Asserts a type error of `op` for `dtype` whose text names operand `which`.
fn is_type(e: Error, op: &str, dtype: DType, which: &str) {
    match &e {
        Error::UnsupportedType { op: o, dtype: d, reason }
            if o == op && *d == dtype && reason.contains(which) => {}
        _ => panic!("expected a {op} type error for {dtype} naming {which:?}, got {e:?}"),
    }
}

/// Asserts a parameter error of `op` whose text names `what`.
fn is_param(e: Error, op: &str, what: &str) {
    match &e {
        Error::InvalidParam { op: o, reason } if o == op && reason.contains(what) => {}
        _ => panic!("expected a {op} parameter error naming {what:?}, got {e:?}"),
    }
}

#[test]
fn binary_ops_keep_src0_and_broadcast_src1() {
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        assert_eq!(out(op.clone(), &[l(F32, &[4, 3, 2]), l(F32, &[4, 1, 2])]), (F32, [4, 3, 2, 1]));
        assert_eq!(out(op.clone(), &[l(F16, &[4, 3]), l(F32, &[1])]), (F16, [4, 3, 1, 1]));
        assert_eq!(out(op.clone(), &[l(BF16, &[4, 6]), l(F16, &[4, 3])]), (BF16, [4, 6, 1, 1]));
        let name = op.name();
        // 3 does not divide 4; src1 larger than src0.
        is_shape(err(op.clone(), &[l(F32, &[4, 3]), l(F32, &[3, 3])]), name, "src1");
        is_shape(err(op.clone(), &[l(F32, &[4, 1]), l(F32, &[4, 2])]), name, "broadcast");
        is_type(err(op.clone(), &[l(I32, &[4]), l(F32, &[4])]), name, I32, "src0");
        is_type(err(op.clone(), &[l(F32, &[32]), l(Q8_0, &[32])]), name, Q8_0, "src1");
        is_shape(err(op, &[l(F32, &[4])]), name, "expects 2 operands, got 1");
    }
}

#[test]
fn unary_ops_keep_type_and_shape() {
    let ops = [
        Op::Scale { scale: 2.0, bias: 1.0 },
        Op::Sqr,
        Op::Sqrt,
        Op::Clamp { min: -1.0, max: 1.0 },
        Op::Unary(UnaryOp::Silu),
        Op::Unary(UnaryOp::Tanh),
    ];
    for op in ops {
        assert_eq!(out(op.clone(), &[l(F16, &[5, 2, 3])]), (F16, [5, 2, 3, 1]));
        is_type(err(op.clone(), &[l(I32, &[5])]), op.name(), I32, "src0");
        is_type(err(op.clone(), &[l(Q4_0, &[32])]), op.name(), Q4_0, "src0");
    }
    is_param(err(Op::Clamp { min: 2.0, max: 1.0 }, &[l(F32, &[4])]), "CLAMP", "min 2");
    is_param(err(Op::Clamp { min: f32::NAN, max: 1.0 }, &[l(F32, &[4])]), "CLAMP", "NaN");
    // The bounds are checked before the operand, as in the TypeScript builder.
    is_param(err(Op::Clamp { min: 2.0, max: 1.0 }, &[l(I32, &[4])]), "CLAMP", "max 1");
}

#[test]
fn reductions_give_their_row_shapes_and_types() {
    assert_eq!(out(Op::Sum, &[l(F16, &[4, 3, 2])]), (F16, [1, 1, 1, 1]));
    assert_eq!(out(Op::SumRows, &[l(F16, &[4, 3, 2])]), (F16, [1, 3, 2, 1]));
    assert_eq!(out(Op::Mean, &[l(F16, &[4, 3, 2])]), (F32, [1, 3, 2, 1]));
    assert_eq!(out(Op::Argmax, &[l(F32, &[5, 3])]), (I32, [3, 1, 1, 1]));
    is_shape(err(Op::Argmax, &[l(F32, &[5, 3, 2])]), "ARGMAX", "not a matrix");
    is_type(err(Op::Sum, &[l(I32, &[4])]), "SUM", I32, "src0");
    is_type(err(Op::Mean, &[l(Q8_0, &[32])]), "MEAN", Q8_0, "src0");
    // Rows longer than I32 indices reach (2^31 + 1 values of F32 in one row).
    let long = Layout::contiguous(F32, &[(1 << 31) + 1]).unwrap();
    is_shape(err(Op::Argmax, &[long]), "ARGMAX", "I32 indices");
}

#[test]
fn repeat_and_concat_give_the_tiled_and_joined_shapes() {
    let r = |ne: [usize; 4]| Op::Repeat { ne };
    assert_eq!(out(r([4, 6, 2, 1]), &[l(F32, &[2, 3])]), (F32, [4, 6, 2, 1]));
    assert_eq!(out(r([2, 3, 1, 1]), &[l(F16, &[2, 3])]), (F16, [2, 3, 1, 1]));
    is_shape(err(r([3, 6, 1, 1]), &[l(F32, &[2, 3])]), "REPEAT", "cannot be tiled");
    is_type(err(r([4, 1, 1, 1]), &[l(I32, &[2])]), "REPEAT", I32, "src0");
    assert!(matches!(err(r([0, 1, 1, 1]), &[l(F32, &[1])]), Error::InvalidShape { .. }));

    let c = |dim| Op::Concat { dim };
    assert_eq!(out(c(1), &[l(F32, &[4, 2]), l(F32, &[4, 3])]), (F32, [4, 5, 1, 1]));
    assert_eq!(out(c(3), &[l(F16, &[4, 2]), l(F16, &[4, 2])]), (F16, [4, 2, 1, 2]));
    is_shape(err(c(1), &[l(F32, &[4, 2]), l(F32, &[5, 3])]), "CONCAT", "outside dim 1");
    is_param(err(c(4), &[l(F32, &[4]), l(F32, &[4])]), "CONCAT", "dim 4");
    is_type(err(c(0), &[l(F32, &[4]), l(F16, &[4])]), "CONCAT", F16, "src1");
    is_type(err(c(0), &[l(I32, &[4]), l(I32, &[4])]), "CONCAT", I32, "src0");
}

/// ggml_ssm_conv: sx `[d_conv - 1 + n_t, d_inner, n_s]` and c `[d_conv, d_inner]` give F32
/// `[d_inner, n_t, n_s]`.
#[test]
fn ssm_conv_gives_one_output_per_token_and_channel() {
    let op = || Op::SsmConv;
    // LFM2: d_conv 3, 1024 channels, 7 tokens after the 2 carried over, one sequence.
    assert_eq!(out(op(), &[l(F32, &[9, 1024]), l(F32, &[3, 1024])]), (F32, [1024, 7, 1, 1]));
    assert_eq!(out(op(), &[l(F32, &[4, 8, 2]), l(F32, &[4, 8])]), (F32, [8, 1, 2, 1]));
    is_shape(err(op(), &[l(F32, &[9, 1024]), l(F32, &[3, 512])]), "SSM_CONV", "d_inner");
    is_shape(err(op(), &[l(F32, &[2, 8]), l(F32, &[3, 8])]), "SSM_CONV", "n_t >= 1");
    is_shape(err(op(), &[l(F32, &[4, 8, 1, 2]), l(F32, &[3, 8])]), "SSM_CONV", "3-D");
    is_shape(err(op(), &[l(F32, &[4, 8]), l(F32, &[3, 8, 2])]), "SSM_CONV", "a matrix");
    is_type(err(op(), &[l(F16, &[4, 8]), l(F32, &[3, 8])]), "SSM_CONV", F16, "src0");
    is_type(err(op(), &[l(F32, &[4, 8]), l(F16, &[3, 8])]), "SSM_CONV", F16, "src1");
    is_shape(err(op(), &[l(F32, &[4, 8])]), "SSM_CONV", "expects 2 operands");
}

/// ggml_gated_delta_net (one state snapshot): q, k `[S, H_k, n_t, n_s]`, v `[S, H, n_t, n_s]`,
/// g `[1 or S, H, n_t, n_s]`, beta `[1, H, n_t, n_s]`, state `[S, S, H, n_s]` give F32
/// `[S * H, n_t * n_s + S * n_s]` (outputs, then final states).
#[test]
fn gated_delta_net_gives_outputs_then_states() {
    let op = || Op::GatedDeltaNet;
    let ops = |q: &[usize], v: &[usize], g: &[usize], b: &[usize], s: &[usize]| {
        vec![l(F32, q), l(F32, q), l(F32, v), l(F32, g), l(F32, b), l(F32, s)]
    };
    // Qwen 3.5 0.8B: heads of 128, 16 key and 16 value heads, 7 tokens.
    let o = ops(&[128, 16, 7], &[128, 16, 7], &[1, 16, 7], &[1, 16, 7], &[128, 128, 16]);
    assert_eq!(out(op(), &o), (F32, [2048, 7 + 128, 1, 1]));
    // Two value heads per key head, one decay per key dim, two sequences.
    let o = ops(&[16, 2, 3, 2], &[16, 4, 3, 2], &[16, 4, 3, 2], &[1, 4, 3, 2], &[16, 16, 4, 2]);
    assert_eq!(out(op(), &o), (F32, [64, 6 + 32, 1, 1]));
    const OP: &str = "GATED_DELTA_NET";
    let o = ops(&[16, 3, 3], &[16, 4, 3], &[1, 4, 3], &[1, 4, 3], &[16, 16, 4]);
    is_shape(err(op(), &o), OP, "do not divide");
    let o = ops(&[16, 2, 3], &[8, 4, 3], &[1, 4, 3], &[1, 4, 3], &[8, 8, 4]);
    is_shape(err(op(), &o), OP, "src0");
    let o = ops(&[16, 2, 3], &[16, 4, 3], &[2, 4, 3], &[1, 4, 3], &[16, 16, 4]);
    is_shape(err(op(), &o), OP, "src3 (g)");
    let o = ops(&[16, 2, 3], &[16, 4, 3], &[1, 4, 3], &[1, 4, 2], &[16, 16, 4]);
    is_shape(err(op(), &o), OP, "src4 (beta)");
    let o = ops(&[16, 2, 3], &[16, 4, 3], &[1, 4, 3], &[1, 4, 3], &[16, 16, 2]);
    is_shape(err(op(), &o), OP, "src5 (state)");
    let mut o = ops(&[16, 2, 3], &[16, 4, 3], &[1, 4, 3], &[1, 4, 3], &[16, 16, 4]);
    o[2] = l(F16, &[16, 4, 3]);
    is_type(err(op(), &o), OP, F16, "src2");
    // A transposed state is not contiguous.
    let mut o = ops(&[16, 2, 3], &[16, 4, 3], &[1, 4, 3], &[1, 4, 3], &[16, 16, 4]);
    o[5].nb.swap(0, 1);
    is_shape(err(op(), &o), OP, "contiguous");
    is_shape(err(op(), &o[..5]), OP, "expects 6 operands");
}

#[test]
fn copies_keep_or_take_the_destination() {
    for op in [Op::Dup, Op::Cont] {
        assert_eq!(out(op.clone(), &[l(Q8_0, &[64, 3])]), (Q8_0, [64, 3, 1, 1]));
        assert_eq!(out(op.clone(), &[l(I32, &[5, 2])]), (I32, [5, 2, 1, 1]));
        // A quantized layout whose blocks are not dense (every other block of a row).
        let mut strided = l(Q8_0, &[32, 4]);
        strided.nb[0] *= 2;
        is_shape(err(op.clone(), &[strided]), op.name(), "quantized src0");
    }
    // CPY: the destination's layout, whatever its shape, for the same element count.
    let dst = l(F16, &[2, 3]);
    let refs = [&l(F32, &[6]), &dst];
    assert_eq!(output_layout(&Op::Cpy, &refs).unwrap(), Some(dst));
    assert_eq!(out(Op::Cpy, &[l(F32, &[32, 3]), l(Q8_0, &[96])]), (Q8_0, [96, 1, 1, 1]));
    is_shape(err(Op::Cpy, &[l(F32, &[7]), l(F16, &[6])]), "CPY", "element counts");
    is_type(err(Op::Cpy, &[l(I32, &[6]), l(F32, &[6])]), "CPY", I32, "I32 copies only to I32");
    is_type(err(Op::Cpy, &[l(F32, &[6]), l(I32, &[6])]), "CPY", I32, "I32 copies only to I32");
    // 96 values in rows of 48 do not make whole Q8_0 blocks of 32.
    is_shape(err(Op::Cpy, &[l(F32, &[48, 2]), l(Q8_0, &[32, 3])]), "CPY", "whole Q8_0 blocks");
}

#[test]
fn mul_mat_gives_m_by_n_f32_with_broadcast_weights() {
    assert_eq!(out(Op::MulMat, &[l(Q4_0, &[64, 5]), l(F32, &[64, 7, 3])]), (F32, [5, 7, 3, 1]));
    assert_eq!(out(Op::MulMat, &[l(F16, &[8, 5, 2]), l(BF16, &[8, 1, 4, 3])]), (F32, [5, 1, 4, 3]));
    is_type(err(Op::MulMat, &[l(I32, &[8, 5]), l(F32, &[8, 7])]), "MUL_MAT", I32, "src0");
    is_type(err(Op::MulMat, &[l(F32, &[32, 5]), l(Q8_0, &[32, 7])]), "MUL_MAT", Q8_0, "src1");
    is_shape(err(Op::MulMat, &[l(F32, &[8, 5]), l(F32, &[9, 7])]), "MUL_MAT", "equal ne0");
    is_shape(err(Op::MulMat, &[l(F32, &[8, 5, 2]), l(F32, &[8, 7, 3])]), "MUL_MAT", "multiples");
    let mut transposed = l(F32, &[5, 8]);
    transposed.ne.swap(0, 1);
    transposed.nb.swap(0, 1);
    is_shape(err(Op::MulMat, &[transposed, l(F32, &[8, 7])]), "MUL_MAT", "transposed");
}

#[test]
fn get_rows_and_set_rows_follow_their_indices() {
    assert_eq!(out(Op::GetRows, &[l(F16, &[8, 10, 2]), l(I32, &[3, 2])]), (F32, [8, 3, 2, 1]));
    assert_eq!(out(Op::GetRows, &[l(Q4_0, &[32, 10]), l(I32, &[4])]), (F32, [32, 4, 1, 1]));
    assert_eq!(out(Op::GetRows, &[l(I32, &[8, 10]), l(I32, &[3])]), (I32, [8, 3, 1, 1]));
    is_type(err(Op::GetRows, &[l(F32, &[8, 10]), l(F32, &[3])]), "GET_ROWS", F32, "indices");
    is_shape(err(Op::GetRows, &[l(F32, &[8, 10, 2]), l(I32, &[3, 3])]), "GET_ROWS", "indices");

    let dst = l(F16, &[8, 10]);
    let refs = [&dst, &l(F32, &[8, 3]), &l(I32, &[3])];
    assert_eq!(output_layout(&Op::SetRows, &refs).unwrap(), Some(dst));
    // Indices [3, 1] broadcast over rows [8, 3, 2] into a destination [8, 10, 2].
    let srcs = [l(F32, &[8, 10, 2]), l(F32, &[8, 3, 2]), l(I32, &[3, 1])];
    assert_eq!(out(Op::SetRows, &srcs), (F32, [8, 10, 2, 1]));
    let set = |a, b, c| err(Op::SetRows, &[a, b, c]);
    is_type(set(l(F32, &[8, 10]), l(F16, &[8, 3]), l(I32, &[3])), "SET_ROWS", F16, "rows");
    is_type(set(l(F32, &[8, 10]), l(F32, &[8, 3]), l(F32, &[3])), "SET_ROWS", F32, "indices");
    // The KV cache types Q8_0 and Q4_0 are written (quantized); other block types are not.
    for t in [Q8_0, Q4_0] {
        assert_eq!(out(Op::SetRows, &[l(t, &[32, 10]), l(F32, &[32, 3]), l(I32, &[3])]).0, t);
    }
    is_type(
        set(l(Q4_1, &[32, 10]), l(F32, &[32, 3]), l(I32, &[3])),
        "SET_ROWS",
        Q4_1,
        "destination",
    );
    is_shape(set(l(F32, &[8, 10]), l(F32, &[7, 3]), l(I32, &[3])), "SET_ROWS", "one index per row");
    is_shape(set(l(F32, &[8, 10]), l(F32, &[8, 3]), l(I32, &[2])), "SET_ROWS", "one index per row");
}

#[test]
fn flash_attn_ext_gives_dv_by_heads_by_queries() {
    let p = AttnParams { scale: 0.125, max_bias: 0.0, softcap: 0.0 };
    let fa = |p| Op::FlashAttnExt(p);
    let (q, k, v) = (l(F32, &[64, 5, 8]), l(F16, &[64, 16, 2]), l(F16, &[32, 16, 2]));
    let mask = l(F16, &[16, 5]);
    assert_eq!(out(fa(p), &[q, k, v]), (F32, [32, 8, 5, 1]));
    assert_eq!(out(fa(p), &[q, k, v, mask]), (F32, [32, 8, 5, 1]));
    const OP: &str = "FLASH_ATTN_EXT";
    is_type(err(fa(p), &[l(F16, &[64, 5, 8]), k, v]), OP, F16, "q");
    // Quantized KV caches: Q8_0 and Q4_0 keys and values (any mix), no other block type.
    for (kt, vt) in [(Q8_0, Q8_0), (Q4_0, Q4_0), (Q8_0, F16), (F16, Q4_0)] {
        let (k, v) = (l(kt, &[64, 16, 2]), l(vt, &[32, 16, 2]));
        assert_eq!(out(fa(p), &[q, k, v, mask]), (F32, [32, 8, 5, 1]));
    }
    is_type(err(fa(p), &[q, l(Q4_1, &[64, 16, 2]), v]), OP, Q4_1, "k");
    is_type(err(fa(p), &[q, k, l(Q5_0, &[32, 16, 2])]), OP, Q5_0, "v");
    is_type(err(fa(p), &[q, k, v, l(I32, &[16, 5])]), OP, I32, "mask");
    // 8 query heads over 3 key heads; values of another length than the keys.
    is_shape(err(fa(p), &[q, l(F16, &[64, 16, 3]), l(F16, &[32, 16, 3])]), OP, "multiple");
    is_shape(err(fa(p), &[q, k, l(F16, &[32, 15, 2])]), OP, "equal ne1");
    is_shape(err(fa(p), &[q, k, v, l(F16, &[15, 5])]), OP, "n_kv = 16");
    is_shape(err(fa(p), &[q, k, v, l(F16, &[16, 4])]), OP, "n_q = 5");
    is_param(err(fa(AttnParams { max_bias: 8.0, ..p }), &[q, k, v]), OP, "needs a mask");
    is_param(err(fa(AttnParams { softcap: -1.0, ..p }), &[q, k, v]), OP, "softcap -1");
}

#[test]
fn soft_max_and_norms_keep_f32_rows() {
    let sm = |scale, max_bias| Op::SoftMax { scale, max_bias };
    let a = l(F32, &[6, 4, 3]);
    assert_eq!(out(sm(1.0, 0.0), &[a]), (F32, [6, 4, 3, 1]));
    assert_eq!(out(sm(0.5, 8.0), &[a, l(F16, &[6, 5])]), (F32, [6, 4, 3, 1]));
    is_type(err(sm(1.0, 0.0), &[l(F16, &[6, 4])]), "SOFT_MAX", F16, "src0");
    is_type(err(sm(1.0, 0.0), &[a, l(I32, &[6, 4])]), "SOFT_MAX", I32, "mask");
    is_shape(err(sm(1.0, 0.0), &[a, l(F32, &[6, 3])]), "SOFT_MAX", "mask");
    is_shape(err(sm(1.0, 0.0), &[a, l(F32, &[6, 4, 2])]), "SOFT_MAX", "dividing");
    is_param(err(sm(1.0, 8.0), &[a]), "SOFT_MAX", "needs a mask");
    is_param(err(sm(f32::NAN, 0.0), &[a]), "SOFT_MAX", "scale NaN");

    for op in [Op::RmsNorm { eps: 1e-6 }, Op::Norm { eps: 0.0 }, Op::DiagMaskInf { n_past: 2 }] {
        assert_eq!(out(op.clone(), &[l(F32, &[6, 4])]), (F32, [6, 4, 1, 1]));
        is_type(err(op.clone(), &[l(F16, &[6, 4])]), op.name(), F16, "src0");
    }
    is_param(err(Op::RmsNorm { eps: -1.0 }, &[l(F32, &[6])]), "RMS_NORM", "eps -1");
    is_param(err(Op::Norm { eps: f32::INFINITY }, &[l(F32, &[6])]), "NORM", "eps inf");
}

#[test]
fn rope_keeps_src0_and_checks_its_parameters() {
    let p = RopeParams { n_dims: 8, mode: ROPE_MODE_NEOX, ..Default::default() };
    let (a, pos) = (l(F32, &[8, 2, 3]), l(I32, &[3]));
    assert_eq!(out(Op::Rope(p), &[a, pos]), (F32, [8, 2, 3, 1]));
    assert_eq!(out(Op::Rope(p), &[a, pos, l(F32, &[4])]), (F32, [8, 2, 3, 1]));
    let rope = |p, srcs: &[Layout]| err(Op::Rope(p), srcs);
    is_type(rope(p, &[l(F16, &[8, 2, 3]), pos]), "ROPE", F16, "src0");
    is_type(rope(p, &[a, l(F32, &[3])]), "ROPE", F32, "positions");
    is_shape(rope(p, &[a, l(I32, &[2])]), "ROPE", "ne2 = 3");
    is_param(rope(RopeParams { n_dims: 3, ..p }, &[a, pos]), "ROPE", "n_dims 3");
    is_param(rope(RopeParams { n_dims: 10, ..p }, &[a, pos]), "ROPE", "at most ne0 = 8");
    is_param(rope(RopeParams { mode: 1, ..p }, &[a, pos]), "ROPE", "mode 1");
    is_param(rope(RopeParams { freq_base: 0.0, ..p }, &[a, pos]), "ROPE", "freq_base 0");
    is_shape(rope(p, &[a, pos, l(F32, &[3])]), "ROPE", "n_dims / 2 = 4");
    is_type(rope(p, &[a, pos, l(F16, &[4])]), "ROPE", F16, "frequency factors");
}

#[test]
fn glus_halve_rows_or_pair_operands() {
    for op in [GluOp::Swiglu, GluOp::Geglu] {
        let g = |swapped| Op::Glu { op, swapped };
        assert_eq!(out(g(false), &[l(F16, &[8, 3])]), (F16, [4, 3, 1, 1]));
        assert_eq!(out(g(true), &[l(F32, &[8, 3])]), (F32, [4, 3, 1, 1]));
        assert_eq!(out(g(false), &[l(F32, &[8, 3]), l(F32, &[8, 3])]), (F32, [8, 3, 1, 1]));
        is_shape(err(g(false), &[l(F32, &[7, 3])]), op.name(), "not even");
        is_shape(err(g(false), &[l(F32, &[8, 3]), l(F32, &[8, 2])]), op.name(), "differ");
        is_param(err(g(true), &[l(F32, &[8]), l(F32, &[8])]), op.name(), "one source only");
        is_type(err(g(false), &[l(F32, &[8]), l(I32, &[8])]), op.name(), I32, "src1");
    }
}

#[test]
fn views_reorder_or_reinterpret_their_source() {
    let a = l(F32, &[4, 3]);
    let p = output_layout(&Op::Permute { axes: [1, 0, 2, 3] }, &[&a]).unwrap().unwrap();
    assert_eq!((p.ne, p.nb), ([3, 4, 1, 1], [16, 4, 48, 48]));
    let t = output_layout(&Op::Transpose, &[&a]).unwrap().unwrap();
    assert_eq!((t.ne, t.nb), ([3, 4, 1, 1], [16, 4, 48, 48]));
    is_param(err(Op::Permute { axes: [0, 0, 2, 3] }, &[a]), "PERMUTE", "not a permutation");
    is_shape(err(Op::Permute { axes: [1, 0, 2, 3] }, &[l(Q8_0, &[32, 2])]), "PERMUTE", "dim 0");
    is_shape(err(Op::Transpose, &[l(Q4_0, &[32, 2])]), "TRANSPOSE", "quantized");
    // RESHAPE and VIEW take their layout from the node's own parameters.
    for op in [Op::None, Op::Reshape, Op::View] {
        let srcs: Vec<&Layout> = if op == Op::None { vec![] } else { vec![&a] };
        assert_eq!(output_layout(&op, &srcs).unwrap(), None, "{op:?}");
    }
    assert_eq!(reshape_layout(&a, &[2, 6]).unwrap(), l(F32, &[2, 6]));
    is_shape(reshape_layout(&a, &[5]).unwrap_err(), "RESHAPE", "has 12 elements");
    is_shape(reshape_layout(&t, &[12]).unwrap_err(), "RESHAPE", "not contiguous");
    // Rows 1..3 of the 4 x 3 matrix: 2 rows of 4 values at offset 16.
    let v = view_layout(&a, &[4, 2], &[16], 16).unwrap();
    assert_eq!((v.ne, v.nb), ([4, 2, 1, 1], [4, 16, 32, 32]));
    assert!(matches!(view_layout(&a, &[4, 2], &[16], 20), Err(Error::ViewOutOfBounds { .. })));
    let q = l(Q8_0, &[64, 2]);
    assert!(matches!(view_layout(&q, &[32], &[], 2), Err(Error::ViewOutOfBounds { .. })));
    assert!(matches!(view_layout(&a, &[4, 2], &[], 0), Err(Error::InvalidParam { .. })));
}

/// The builder makes every node through the rule: each node's layout is the rule's answer for
/// its operands, and a builder call with operands the rule refuses gives the rule's error.
#[test]
fn the_builder_uses_the_rule() {
    let mut g = Graph::new();
    let x = g.input("x", F32, &[64, 7]).unwrap();
    let w = g.weight("w", Q4_0, &[64, 5]).unwrap();
    let pos = g.input("pos", I32, &[7]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let s = g.soft_max(y).unwrap();
    let r = g.reshape(s, &[5, 7, 1]).unwrap();
    let r = g.permute(r, [0, 2, 1, 3]).unwrap();
    let r = g.rope_ext(r, pos, None, RopeParams { n_dims: 4, ..Default::default() }).unwrap();
    let h = g.swiglu(x).unwrap();
    let idx = g.input("idx", I32, &[3]).unwrap();
    let rows = g.get_rows(w, idx).unwrap();
    let c = g.concat(h, h, 1).unwrap();
    let cache = g.input("cache", F16, &[32, 10]).unwrap();
    let write = g.set_rows(cache, h, pos);
    assert!(write.is_ok(), "{write:?}");
    for id in [y, s, r, h, rows, c, write.unwrap()] {
        let t = g.tensor(id);
        let srcs: Vec<&Layout> = t.src.iter().map(|&s| &g.tensor(s).layout).collect();
        let want = output_layout(&t.op, &srcs).unwrap().unwrap();
        assert_eq!(t.layout, want, "{:?}", t.op);
    }
    assert_eq!(g.tensor(y).ne(), [5, 7, 1, 1]);
    assert_eq!(g.tensor(h).ne(), [32, 7, 1, 1]);
    assert_eq!(g.tensor(c).ne(), [32, 14, 1, 1]);
    let e = g.add(w, x).unwrap_err();
    let want = err(Op::Add, &[g.tensor(w).layout, g.tensor(x).layout]);
    assert_eq!(e, want);
}
