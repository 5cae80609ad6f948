//! The scalar reference ops: hand-computed answers for every op, randomized comparisons with
//! independent f64 implementations (strided inputs, broadcasting, every weight type), rejected
//! graphs, and compute-time errors.

mod common;

use common::*;
use std::cell::Cell;
use tessera_core::op::{RopeParams, ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::tensor_data::{get_f32, get_tensor, set_f32};
use tessera_core::{DType, Error, GluOp, Graph, Layout, Op, TensorId, UnaryOp};
use tessera_cpu::buffer::allocate_all;
use tessera_cpu::reference::{compute_graph, compute_nodes, compute_op, supports, HostTensor};

const NEVER: &dyn Fn() -> bool = &|| false;

/// Allocates `g` and returns the buffer (kept alive by the graph too).
fn alloc(g: &mut Graph) {
    allocate_all(g).unwrap();
}

fn run(g: &Graph) {
    compute_graph(g, NEVER).unwrap();
}

/// A graph with one F32 input of shape `ne` holding `vals`, the node made by `f`, computed.
fn unary_graph(
    ne: &[usize],
    vals: &[f32],
    f: impl FnOnce(&mut Graph, TensorId) -> tessera_core::Result<TensorId>,
) -> Vec<f32> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, ne).unwrap();
    let out = f(&mut g, a).unwrap();
    alloc(&mut g);
    set_f32(&g, a, vals).unwrap();
    run(&g);
    get_vals(&g, out)
}

/// Same with two F32 inputs.
fn binary_graph(
    na: &[usize],
    va: &[f32],
    nb: &[usize],
    vb: &[f32],
    f: impl FnOnce(&mut Graph, TensorId, TensorId) -> tessera_core::Result<TensorId>,
) -> Vec<f32> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, na).unwrap();
    let b = g.input("b", DType::F32, nb).unwrap();
    let out = f(&mut g, a, b).unwrap();
    alloc(&mut g);
    set_f32(&g, a, va).unwrap();
    set_f32(&g, b, vb).unwrap();
    run(&g);
    get_vals(&g, out)
}

const INF: f32 = f32::INFINITY;

// ---------------------------------------------------------------------------------------------
// Known answers
// ---------------------------------------------------------------------------------------------

#[test]
fn binary_ops_broadcast_known_answers() {
    let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let b = [10.0, 20.0, 30.0];
    let add = binary_graph(&[3, 2], &a, &[3, 1], &b, |g, a, b| g.add(a, b));
    assert_close("add", &add, &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0], 0.0);
    let sub = binary_graph(&[3, 2], &a, &[3, 1], &b, |g, a, b| g.sub(a, b));
    assert_close("sub", &sub, &[-9.0, -18.0, -27.0, -6.0, -15.0, -24.0], 0.0);
    let mul = binary_graph(&[3, 2], &a, &[1, 2], &[2.0, -1.0], |g, a, b| g.mul(a, b));
    assert_close("mul", &mul, &[2.0, 4.0, 6.0, -4.0, -5.0, -6.0], 0.0);
    let div = binary_graph(&[3, 2], &a, &[3, 1], &[1.0, 2.0, 4.0], |g, a, b| g.div(a, b));
    assert_close("div", &div, &[1.0, 1.0, 0.75, 4.0, 2.5, 1.5], 0.0);
    // A single value broadcast everywhere.
    let add1 = binary_graph(&[2, 2, 2], &[0.0; 8], &[1], &[7.0], |g, a, b| g.add(a, b));
    assert_close("add scalar", &add1, &[7.0; 8], 0.0);
}

#[test]
fn scale_sqr_sqrt_clamp_known_answers() {
    let s = unary_graph(&[3], &[1.0, -2.0, 0.5], |g, a| g.scale(a, 3.0));
    assert_close("scale", &s, &[3.0, -6.0, 1.5], 0.0);
    let sb = unary_graph(&[2], &[1.0, -2.0], |g, a| g.scale_bias(a, 2.0, 1.0));
    assert_close("scale+bias", &sb, &[3.0, -3.0], 0.0);
    let q = unary_graph(&[2], &[-3.0, 0.5], |g, a| g.sqr(a));
    assert_close("sqr", &q, &[9.0, 0.25], 0.0);
    let r = unary_graph(&[2], &[4.0, 2.25], |g, a| g.sqrt(a));
    assert_close("sqrt", &r, &[2.0, 1.5], 0.0);
    let c = unary_graph(&[4], &[-5.0, 0.5, 5.0, -1.0], |g, a| g.clamp(a, -1.0, 1.0));
    assert_close("clamp", &c, &[-1.0, 0.5, 1.0, -1.0], 0.0);
}

#[test]
fn activations_known_answers() {
    let x = [1.0, -1.0, 0.5, 0.0];
    let silu = unary_graph(&[4], &x, |g, a| g.silu(a));
    assert_close("silu", &silu, &[0.731_058_6, -0.268_941_42, 0.311_229_67, 0.0], 1e-6);
    let gelu = unary_graph(&[4], &x, |g, a| g.gelu(a));
    assert_close("gelu", &gelu, &[0.841_192, -0.158_808_01, 0.345_714, 0.0], 1e-6);
    let relu = unary_graph(&[4], &x, |g, a| g.relu(a));
    assert_close("relu", &relu, &[1.0, 0.0, 0.5, 0.0], 0.0);
    let tanh = unary_graph(&[2], &[0.5, -2.0], |g, a| g.tanh(a));
    assert_close("tanh", &tanh, &[0.462_117_16, -0.964_027_6], 1e-6);
    // Limits at infinity (documented: ggml gives NaN for silu(-inf)).
    let inf = unary_graph(&[2], &[-INF, INF], |g, a| g.silu(a));
    assert_close("silu inf", &inf, &[0.0, INF], 0.0);
    let inf = unary_graph(&[2], &[-INF, INF], |g, a| g.gelu(a));
    assert_close("gelu inf", &inf, &[0.0, INF], 0.0);
}

#[test]
fn glu_known_answers() {
    // One row [x0, x1 | g0, g1].
    let row = [1.0, -1.0, 2.0, 3.0];
    let sw = unary_graph(&[4], &row, |g, a| g.swiglu(a));
    assert_close("swiglu", &sw, &[1.462_117_2, -0.806_824_26], 1e-6);
    // Swapped: the activation is applied to the second half, times the first.
    let sws = unary_graph(&[4], &row, |g, a| g.glu(a, GluOp::Swiglu, true));
    assert_close("swiglu swapped", &sws, &[1.761_594_2, -2.857_722_3], 1e-6);
    let ge = unary_graph(&[4], &row, |g, a| g.geglu(a));
    assert_close("geglu", &ge, &[1.682_384, -0.476_424_03], 1e-6);
    // Two operands: act(a) * b.
    let split = binary_graph(&[2], &[1.0, -1.0], &[2], &[2.0, 3.0], |g, a, b| {
        g.glu_split(a, b, GluOp::Swiglu)
    });
    assert_close("swiglu split", &split, &[1.462_117_2, -0.806_824_26], 1e-6);
    // Two rows, so the halves are taken per row.
    let two = unary_graph(&[2, 2], &[1.0, 2.0, -1.0, 3.0], |g, a| g.geglu(a));
    assert_close("geglu rows", &two, &[1.682_384, -0.476_424_03], 1e-6);
}

#[test]
fn reductions_known_answers() {
    let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    assert_close("sum", &unary_graph(&[3, 2], &v, |g, a| g.sum(a)), &[21.0], 0.0);
    assert_close("sum_rows", &unary_graph(&[3, 2], &v, |g, a| g.sum_rows(a)), &[6.0, 15.0], 0.0);
    assert_close("mean", &unary_graph(&[3, 2], &v, |g, a| g.mean(a)), &[2.0, 5.0], 0.0);
    let sr = unary_graph(&[2, 1, 3], &v, |g, a| g.sum_rows(a));
    assert_close("sum_rows 3d", &sr, &[3.0, 7.0, 11.0], 0.0);
}

#[test]
fn argmax_known_answers() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[3, 3]).unwrap();
    let out = g.argmax(a).unwrap();
    alloc(&mut g);
    // Ties go to the last index (ggml's `ggml_vec_argmax_f32`); NaN is skipped.
    set_f32(&g, a, &[1.0, 5.0, 3.0, 7.0, 2.0, 7.0, f32::NAN, -1.0, -2.0]).unwrap();
    run(&g);
    assert_eq!(get_vals(&g, out), vec![1.0, 2.0, 1.0]);
    assert_eq!(g.tensor(out).dtype(), DType::I32);
}

#[test]
fn repeat_and_concat_known_answers() {
    let r = unary_graph(&[2], &[1.0, 2.0], |g, a| g.repeat_to(a, &[4, 2]));
    assert_close("repeat", &r, &[1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0], 0.0);
    let r = unary_graph(&[1, 2], &[1.0, 2.0], |g, a| g.repeat_to(a, &[2, 2, 2]));
    assert_close("repeat rows", &r, &[1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0], 0.0);

    let c0 = binary_graph(&[2, 2], &[1.0, 2.0, 3.0, 4.0], &[1, 2], &[5.0, 6.0], |g, a, b| {
        g.concat(a, b, 0)
    });
    assert_close("concat dim 0", &c0, &[1.0, 2.0, 5.0, 3.0, 4.0, 6.0], 0.0);
    let c1 = binary_graph(&[2, 1], &[1.0, 2.0], &[2, 2], &[3.0, 4.0, 5.0, 6.0], |g, a, b| {
        g.concat(a, b, 1)
    });
    assert_close("concat dim 1", &c1, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    let c2 =
        binary_graph(&[1, 2, 1], &[1.0, 2.0], &[1, 2, 1], &[3.0, 4.0], |g, a, b| g.concat(a, b, 2));
    assert_close("concat dim 2", &c2, &[1.0, 2.0, 3.0, 4.0], 0.0);
    let c3 = binary_graph(
        &[2, 1, 1, 1],
        &[1.0, 2.0],
        &[2, 1, 1, 2],
        &[3.0, 4.0, 5.0, 6.0],
        |g, a, b| g.concat(a, b, 3),
    );
    assert_close("concat dim 3", &c3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    // Interleaved: dim 1 of [2, 1, 2] and [2, 2, 2].
    let c = binary_graph(
        &[2, 1, 2],
        &[1.0, 2.0, 7.0, 8.0],
        &[2, 2, 2],
        &[3.0, 4.0, 5.0, 6.0, 9.0, 10.0, 11.0, 12.0],
        |g, a, b| g.concat(a, b, 1),
    );
    let want: Vec<f32> = (1..=12).map(|x| x as f32).collect();
    assert_close("concat dim 1 batched", &c, &want, 0.0);
}

/// SSM_CONV by hand: two channels, d_conv 3, two tokens after the two carried over; then a
/// strided input (a transposed view, as LFM2 feeds it: tokens along dim 1, transposed so that
/// each channel's window is a row) of several sequences against an independent f64 loop.
#[test]
fn ssm_conv_known_answer_and_strided_windows() {
    // Channel 0: [1, 2, 3, 4] * [1, 0, -1]; channel 1: [5, 6, 7, 8] * [0.5, 0.25, 2].
    let out = binary_graph(
        &[4, 2],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        &[3, 2],
        &[1.0, 0.0, -1.0, 0.5, 0.25, 2.0],
        |g, sx, c| g.ssm_conv(sx, c),
    );
    // [d_inner, n_t]: token 0 = (1 - 3, 2.5 + 1.5 + 14), token 1 = (2 - 4, 3 + 1.75 + 16).
    assert_close("ssm_conv", &out, &[-2.0, 18.0, -2.0, 20.75], 0.0);

    let (d_conv, d_inner, n_t, n_s) = (4, 5, 6, 2);
    let w = d_conv - 1 + n_t;
    let xs = rand_vec(d_inner * w * n_s, 31);
    let cs = rand_vec(d_conv * d_inner, 32);
    let mut g = Graph::new();
    // Stored [d_inner, w, n_s] (channels fastest); the op reads it transposed, [w, d_inner, n_s].
    let x = g.input("x", DType::F32, &[d_inner, w, n_s]).unwrap();
    let c = g.input("c", DType::F32, &[d_conv, d_inner]).unwrap();
    let sx = g.transpose(x).unwrap();
    let out = g.ssm_conv(sx, c).unwrap();
    alloc(&mut g);
    set_f32(&g, x, &xs).unwrap();
    set_f32(&g, c, &cs).unwrap();
    run(&g);
    let got = get_vals(&g, out);
    let mut want = Vec::new();
    for s in 0..n_s {
        for t in 0..n_t {
            for i in 0..d_inner {
                let sum: f64 = (0..d_conv)
                    .map(|k| {
                        let xv = xs[i + d_inner * (t + k) + d_inner * w * s];
                        f64::from(xv) * f64::from(cs[k + d_conv * i])
                    })
                    .sum();
                want.push(sum);
            }
        }
    }
    assert_nmse("ssm_conv strided", &got, &want, 1e-14);
}

#[test]
fn mul_mat_known_answer() {
    // Weights rows [1, 2] and [3, 4]; activations columns [5, 6] and [1, -1].
    let out =
        binary_graph(&[2, 2], &[1.0, 2.0, 3.0, 4.0], &[2, 2], &[5.0, 6.0, 1.0, -1.0], |g, a, b| {
            g.mul_mat(a, b)
        });
    assert_close("mul_mat", &out, &[17.0, 39.0, -1.0, -1.0], 0.0);
}

#[test]
fn get_rows_known_answers() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[2, 3]).unwrap();
    let ai = g.input("ai", DType::I32, &[2, 3]).unwrap();
    let ah = g.input("ah", DType::F16, &[2, 3]).unwrap();
    let idx = g.input("idx", DType::I32, &[3]).unwrap();
    let out = g.get_rows(a, idx).unwrap();
    let outi = g.get_rows(ai, idx).unwrap();
    let outh = g.get_rows(ah, idx).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    set_i32(&g, ai, &[-1, 2_000_000_001, 3, 4, 5, 6]);
    set_vals(&g, ah, &[1.5, 2.0, 3.0, 4.0, 5.0, 0.1]);
    set_i32(&g, idx, &[2, 0, 2]);
    run(&g);
    assert_close("get_rows", &get_vals(&g, out), &[5.0, 6.0, 1.0, 2.0, 5.0, 6.0], 0.0);
    assert_eq!(g.tensor(outi).dtype(), DType::I32);
    let ints: Vec<i32> = get_tensor(&g, outi)
        .unwrap()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(ints, vec![5, 6, -1, 2_000_000_001, 5, 6]);
    assert_eq!(g.tensor(outh).dtype(), DType::F32);
    assert_close(
        "get_rows f16",
        &get_vals(&g, outh),
        &[5.0, 0.099_975_586, 1.5, 2.0, 5.0, 0.099_975_586],
        0.0,
    );
}

#[test]
fn get_rows_batched_known_answer() {
    // src0 [1, 2, 2]: per batch two rows; indices [2, 2].
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[1, 2, 2]).unwrap();
    let idx = g.input("idx", DType::I32, &[2, 2]).unwrap();
    let out = g.get_rows(a, idx).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &[10.0, 11.0, 20.0, 21.0]).unwrap();
    set_i32(&g, idx, &[1, 0, 0, 0]);
    run(&g);
    assert_close("get_rows batched", &get_vals(&g, out), &[11.0, 10.0, 20.0, 20.0], 0.0);
}

#[test]
fn soft_max_known_answers() {
    let s = unary_graph(&[3], &[1.0, 2.0, 3.0], |g, a| g.soft_max(a));
    assert_close("softmax", &s, &[0.090_030_57, 0.244_728_47, 0.665_240_96], 1e-6);
    // Rows are independent; a constant shift changes nothing.
    let s = unary_graph(&[3, 2], &[1.0, 2.0, 3.0, 101.0, 102.0, 103.0], |g, a| g.soft_max(a));
    assert_close(
        "softmax rows",
        &s,
        &[0.090_030_57, 0.244_728_47, 0.665_240_96, 0.090_030_57, 0.244_728_47, 0.665_240_96],
        1e-6,
    );
    // Scale 0.5 of [2, 4, 6] is [1, 2, 3]; mask -inf removes the last.
    let m = binary_graph(&[3], &[2.0, 4.0, 6.0], &[3], &[0.0, 0.0, -INF], |g, a, b| {
        g.soft_max_ext(a, Some(b), 0.5, 0.0)
    });
    assert_close("softmax mask", &m, &[0.268_941_42, 0.731_058_6, 0.0], 1e-6);
}

#[test]
fn soft_max_alibi_known_answer() {
    // Three heads (ne2), one row each, x = 0, mask [0, -16]. max_bias 8: n_head_log2 = 2,
    // m0 = 2^-4, m1 = 2^-2; slopes 1/16, 1/256, 1/4; the second logit is -16 * slope.
    let out = binary_graph(&[2, 1, 3], &[0.0; 6], &[2], &[0.0, -16.0], |g, a, m| {
        g.soft_max_ext(a, Some(m), 1.0, 8.0)
    });
    let want = [0.731_058_6, 0.268_941_42, 0.515_619_9, 0.484_380_08, 0.982_013_8, 0.017_986_21];
    assert_close("alibi", &out, &want, 1e-6);
}

#[test]
fn soft_max_fully_masked_row_is_nan_like_ggml() {
    let m = binary_graph(
        &[2, 2],
        &[1.0, 2.0, 1.0, 2.0],
        &[2, 2],
        &[0.0, 0.0, -INF, -INF],
        |g, a, b| g.soft_max_ext(a, Some(b), 1.0, 0.0),
    );
    assert_close("first row", &m[..2], &[0.268_941_42, 0.731_058_6], 1e-6);
    assert!(m[2].is_nan() && m[3].is_nan(), "a fully masked row is NaN: {m:?}");
}

#[test]
fn diag_mask_inf_known_answers() {
    let ones = [1.0f32; 9];
    let d = unary_graph(&[3, 3], &ones, |g, a| g.diag_mask_inf(a, 0));
    assert_close("n_past 0", &d, &[1.0, -INF, -INF, 1.0, 1.0, -INF, 1.0, 1.0, 1.0], 0.0);
    let d = unary_graph(&[3, 2, 2], &[1.0; 12], |g, a| g.diag_mask_inf(a, 1));
    let row = [1.0, 1.0, -INF, 1.0, 1.0, 1.0];
    assert_close("n_past 1, batched", &d, &[row, row].concat(), 0.0);
}

#[test]
fn norms_known_answers() {
    let r = unary_graph(&[2], &[3.0, 4.0], |g, a| g.rms_norm(a, 0.0));
    assert_close("rms_norm", &r, &[0.848_528_1, 1.131_370_8], 1e-6);
    // eps: [3, 4] with eps 37.5: mean square 12.5 + 37.5 = 50, sqrt 7.0710678.
    let r = unary_graph(&[2], &[3.0, 4.0], |g, a| g.rms_norm(a, 37.5));
    assert_close("rms_norm eps", &r, &[0.424_264_07, 0.565_685_4], 1e-6);
    let n = unary_graph(&[4], &[1.0, 2.0, 3.0, 4.0], |g, a| g.norm(a, 0.0));
    assert_close("norm", &n, &[-1.341_640_8, -0.447_213_6, 0.447_213_6, 1.341_640_8], 1e-6);
    let n = unary_graph(&[2, 2], &[1.0, 3.0, 5.0, 5.0], |g, a| g.norm(a, 0.0));
    // Second row has zero variance: (x - mean) * inf = 0 * inf... with eps 0 it is NaN in ggml
    // too; only check the first row here.
    assert_close("norm row 0", &n[..2], &[-1.0, 1.0], 1e-6);
}

fn rope_once(x: &[f32], n_dims: usize, mode: u32, pos: i32) -> Vec<f32> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[x.len(), 1, 1]).unwrap();
    let p = g.input("p", DType::I32, &[1]).unwrap();
    let out = g.rope(a, p, n_dims, mode).unwrap();
    alloc(&mut g);
    set_f32(&g, a, x).unwrap();
    set_i32(&g, p, &[pos]);
    run(&g);
    get_vals(&g, out)
}

#[test]
fn rope_known_answers() {
    // Position 1, base 10000, 4 rotated dims: pair 0 has theta 1, pair 1 theta 10000^-0.5 = 0.01.
    let (c1, s1) = (0.540_302_3, 0.841_470_96);
    let (c2, s2) = (0.999_950_03, 0.009_999_833);
    let x = [1.0, 0.0, 0.0, 1.0];
    // Normal: pairs (0, 1) and (2, 3).
    assert_close("normal", &rope_once(&x, 4, ROPE_MODE_NORMAL, 1), &[c1, s1, -s2, c2], 1e-6);
    // NeoX: pairs (0, 2) and (1, 3).
    assert_close("neox", &rope_once(&x, 4, ROPE_MODE_NEOX, 1), &[c1, -s2, s1, c2], 1e-6);
    // Only 2 rotated dims: the rest is copied.
    let x = [1.0, 0.0, 5.0, 6.0];
    assert_close("partial", &rope_once(&x, 2, ROPE_MODE_NORMAL, 1), &[c1, s1, 5.0, 6.0], 1e-6);
    // Position 0 is the identity; position -1 rotates back.
    assert_close("pos 0", &rope_once(&x, 4, ROPE_MODE_NORMAL, 0), &x, 0.0);
    assert_close("pos -1", &rope_once(&[1.0, 0.0], 2, ROPE_MODE_NORMAL, -1), &[c1, -s1], 1e-6);
}

#[test]
fn copies_known_answers() {
    // F32 -> F16 -> F32: rounding to nearest even, overflow to inf, underflow to 0.
    let vals = [1.0, 0.1, 65504.0, 1e-8, 70000.0, -2.5];
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[6]).unwrap();
    let h = g.new_tensor(DType::F16, &[6]).unwrap();
    let bf = g.new_tensor(DType::BF16, &[3, 2]).unwrap();
    let back = g.new_tensor(DType::F32, &[6]).unwrap();
    let ch = g.cpy(a, h).unwrap();
    let cb = g.cpy(a, bf).unwrap();
    let cback = g.cpy(ch, back).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &vals).unwrap();
    run(&g);
    assert_close(
        "f16 round trip",
        &get_f32(&g, cback).unwrap(),
        &[1.0, 0.099_975_586, 65504.0, 0.0, INF, -2.5],
        0.0,
    );
    // bf16 keeps 8 significant bits: 0.1 rounds up to 0x3dcd (0.10009765625).
    let bfv = get_vals(&g, cb);
    assert_close(
        "bf16",
        &bfv,
        &[1.0, f32::from_bits(0x3dcd_0000), 65536.0, 1.001_171_8e-8, 70144.0, -2.5],
        0.0,
    );

    // DUP / CONT of a transposed matrix give its transpose densely.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[3, 2]).unwrap();
    let t = g.transpose(a).unwrap();
    let c = g.cont(t).unwrap();
    let d = g.dup(t).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    run(&g);
    assert_close("cont", &get_vals(&g, c), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], 0.0);
    assert_close("dup", &get_vals(&g, d), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], 0.0);

    // I32 -> I32 through a transpose, exact beyond 2^24.
    let mut g = Graph::new();
    let a = g.input("a", DType::I32, &[2, 2]).unwrap();
    let t = g.transpose(a).unwrap();
    let dst = g.new_tensor(DType::I32, &[4]).unwrap();
    let c = g.cpy(t, dst).unwrap();
    alloc(&mut g);
    set_i32(&g, a, &[16_777_217, -3, i32::MAX, i32::MIN]);
    run(&g);
    let ints: Vec<i32> = get_tensor(&g, c)
        .unwrap()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(ints, vec![16_777_217, i32::MAX, -3, i32::MIN]);
}

#[test]
fn copy_to_and_from_q8_0_known_answer() {
    // Integers with absolute maximum 127 quantize exactly to Q8_0 (scale 1).
    let vals: Vec<f32> = (0..64).map(|i| ((i * 37) % 255) as f32 - 127.0).collect();
    assert!(vals.iter().all(|v| v.abs() <= 127.0) && vals[..32].contains(&-127.0));
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[32, 2]).unwrap();
    let q = g.new_tensor(DType::Q8_0, &[64]).unwrap();
    let back = g.new_tensor(DType::F32, &[16, 4]).unwrap();
    let cq = g.cpy(a, q).unwrap();
    let cb = g.cpy(cq, back).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &vals).unwrap();
    run(&g);
    assert_eq!(get_f32(&g, cb).unwrap(), vals);
    // Block 0: f16 scale 1.0 (0x3c00) then the quants.
    let bytes = get_tensor(&g, cq).unwrap();
    assert_eq!(&bytes[..2], &[0x00, 0x3c]);
    assert_eq!(bytes[2] as i8, -127);
}

#[test]
fn view_ops_compute_nothing_and_read_through() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[2, 3]).unwrap();
    let r = g.reshape(a, &[3, 2]).unwrap();
    let v = g.view(a, &[2, 2], &[8], 8).unwrap(); // rows 1 and 2
    let p = g.permute(r, [1, 0, 2, 3]).unwrap();
    let s = g.scale(v, 10.0).unwrap();
    let c = g.cont(p).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    assert_eq!(g.nodes().len(), 2);
    run(&g);
    assert_close("view", &get_vals(&g, s), &[30.0, 40.0, 50.0, 60.0], 0.0);
    assert_close("permute of reshape", &get_vals(&g, c), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], 0.0);
}

#[test]
fn f16_and_bf16_paths() {
    for dtype in [DType::F16, DType::BF16] {
        let mut g = Graph::new();
        let a = g.new_tensor(dtype, &[4]).unwrap();
        let b = g.new_tensor(DType::F32, &[4]).unwrap();
        let add = g.add(a, b).unwrap();
        let sc = g.scale_bias(a, 2.0, 0.5).unwrap();
        let sq = g.sqr(a).unwrap();
        let si = g.silu(a).unwrap();
        let sum = g.sum(a).unwrap();
        let rep = g.repeat_to(a, &[8]).unwrap();
        let glu = g.swiglu(a).unwrap();
        alloc(&mut g);
        let av = set_vals(&g, a, &[1.0, 2.0, -3.0, 0.5]);
        set_f32(&g, b, &[0.25, 0.25, 0.25, 0.25]).unwrap();
        run(&g);
        for (id, want) in [
            (add, vec![1.25, 2.25, -2.75, 0.75]),
            (sc, vec![2.5, 4.5, -5.5, 1.5]),
            (sq, vec![1.0, 4.0, 9.0, 0.25]),
            (sum, vec![0.5]),
            (rep, [av.clone(), av.clone()].concat()),
            (glu, vec![0.731_058_6 * -3.0, 1.761_594_2 * 0.5]),
        ] {
            assert_eq!(g.tensor(id).dtype(), dtype);
            // Results are rounded to the type: 8 (bf16) or 11 (f16) significant bits.
            assert_close(&format!("{dtype} {:?}", g.tensor(id).op), &get_vals(&g, id), &want, 4e-3);
        }
        let want_silu = [0.731_058_6, 1.761_594_2, -0.142_277_25, 0.311_229_67];
        assert_close("silu", &get_vals(&g, si), &want_silu, 4e-3);
    }
}

// ---------------------------------------------------------------------------------------------
// Randomized comparisons with f64 implementations
// ---------------------------------------------------------------------------------------------

/// `C[m, n, i2, i3] = sum_k A[k, m, i2 / r2, i3 / r3] B[k, n, i2, i3]` in f64.
fn naive_mul_mat(a: &[f64], na: [usize; 4], b: &[f64], nb: [usize; 4]) -> Vec<f64> {
    let nd = [na[1], nb[1], nb[2], nb[3]];
    let (r2, r3) = (nb[2] / na[2], nb[3] / na[3]);
    indices(nd)
        .map(|[m, n, i2, i3]| {
            (0..na[0])
                .map(|k| a[lin(na, [k, m, i2 / r2, i3 / r3])] * b[lin(nb, [k, n, i2, i3])])
                .sum()
        })
        .collect()
}

/// A mul_mat of weights `wtype` of shape `na` (`[k, m, a2, a3]`) with activations of shape `nb`
/// (`[k, n, b2, b3]`) given as a strided view (`layout`: 0 contiguous, 1 permuted dims 1 and 2,
/// 2 transposed).
fn check_mul_mat(wtype: DType, na: [usize; 4], nb: [usize; 4], layout: u8, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new();
    let (k, n) = (nb[0], nb[1]);
    let a = g.weight("a", wtype, &na).unwrap();
    let (bleaf, b) = match layout {
        0 => {
            let l = g.input("b", DType::F32, &nb).unwrap();
            (l, l)
        }
        1 => {
            let l = g.input("b", DType::F32, &[k, nb[2], n, nb[3]]).unwrap();
            (l, g.permute(l, [0, 2, 1, 3]).unwrap())
        }
        _ => {
            let l = g.input("b", DType::F32, &[n, k, nb[2], nb[3]]).unwrap();
            (l, g.transpose(l).unwrap())
        }
    };
    assert_eq!(g.tensor(b).ne(), nb);
    let out = g.mul_mat(a, b).unwrap();
    assert!(supports(&g, out));
    alloc(&mut g);
    let av = set_vals(&g, a, &rng.vec(na.iter().product(), -1.0, 1.0));
    let bv = set_vals(&g, bleaf, &rng.vec(nb.iter().product(), -1.0, 1.0));
    run(&g);
    let a64: Vec<f64> = av.iter().map(|&x| f64::from(x)).collect();
    let b64 = logical(&g, b, &bv);
    let want = naive_mul_mat(&a64, na, &b64, nb);
    // Against the dequantized weights the error is rounding only, even for block types.
    assert_nmse(&format!("mul_mat {wtype} layout {layout}"), &get_vals(&g, out), &want, 1e-10);
}

#[test]
fn mul_mat_float_weights_random() {
    for (i, wtype) in [DType::F32, DType::F16, DType::BF16].into_iter().enumerate() {
        for layout in 0..3 {
            let seed = 11 + i as u64 * 3 + layout as u64;
            check_mul_mat(wtype, [48, 7, 2, 1], [48, 5, 4, 3], layout, seed);
        }
        // Broadcast over both dims 2 and 3.
        check_mul_mat(wtype, [16, 3, 2, 3], [16, 4, 4, 6], 1, 99 + i as u64);
    }
}

#[test]
fn mul_mat_quantized_weights_random() {
    for (i, wtype) in DType::QUANTIZED.into_iter().enumerate() {
        let k = wtype.block_size() * 2;
        check_mul_mat(wtype, [k, 5, 2, 1], [k, 3, 2, 2], (i % 3) as u8, 1000 + i as u64);
    }
}

#[test]
fn mul_mat_256_cubed_polls_abort_and_stops_when_asked() {
    let mut rng = Rng::new(5);
    let mut g = Graph::new();
    let a = g.weight("a", DType::F32, &[256, 256]).unwrap();
    let b = g.input("b", DType::F32, &[256, 256]).unwrap();
    let out = g.mul_mat(a, b).unwrap();
    alloc(&mut g);
    let av = set_vals(&g, a, &rng.vec(256 * 256, -1.0, 1.0));
    let bv = set_vals(&g, b, &rng.vec(256 * 256, -1.0, 1.0));
    let polls = Cell::new(0usize);
    compute_graph(&g, &|| {
        polls.set(polls.get() + 1);
        false
    })
    .unwrap();
    let total = polls.get();
    // The reference polls through the op (at least once per output row), not only between
    // nodes, and computes the product.
    assert!(total >= 256, "abort polled only {total} times");
    let a64: Vec<f64> = av.iter().map(|&x| f64::from(x)).collect();
    let b64: Vec<f64> = bv.iter().map(|&x| f64::from(x)).collect();
    let want = naive_mul_mat(&a64, [256, 256, 1, 1], &b64, [256, 256, 1, 1]);
    assert_nmse("mul_mat 256^3", &get_vals(&g, out), &want, 1e-10);
    // Asked to stop halfway, it stops at that poll with Aborted.
    let stop_at = total / 2;
    polls.set(0);
    let r = compute_graph(&g, &|| {
        polls.set(polls.get() + 1);
        polls.get() >= stop_at
    });
    assert!(matches!(r, Err(Error::Aborted)), "{r:?}");
    assert_eq!(polls.get(), stop_at, "polled on after being told to stop");
}

fn naive_binary(op: &str, a: &[f64], na: [usize; 4], b: &[f64], nb: [usize; 4]) -> Vec<f64> {
    indices(na)
        .map(|i| {
            let x = a[lin(na, i)];
            let y = b[lin(nb, [i[0] % nb[0], i[1] % nb[1], i[2] % nb[2], i[3] % nb[3]])];
            match op {
                "add" => x + y,
                "sub" => x - y,
                "mul" => x * y,
                _ => x / y,
            }
        })
        .collect()
}

#[test]
fn binary_ops_random_broadcast_and_strided() {
    let na = [5, 4, 3, 2];
    let shapes: [[usize; 4]; 5] =
        [[5, 4, 3, 2], [5, 1, 3, 1], [1, 4, 1, 2], [5, 4, 1, 1], [1, 1, 1, 1]];
    let mut seed = 1;
    for nb in shapes {
        for op in ["add", "sub", "mul", "div"] {
            for strided in [false, true] {
                seed += 1;
                let mut rng = Rng::new(seed);
                let mut g = Graph::new();
                // Strided: src0 is a permute of a leaf; src1 a transposed leaf.
                let (aleaf, a) = if strided {
                    let l = g.input("a", DType::F32, &[na[0], na[2], na[1], na[3]]).unwrap();
                    (l, g.permute(l, [0, 2, 1, 3]).unwrap())
                } else {
                    let l = g.input("a", DType::F32, &na).unwrap();
                    (l, l)
                };
                let (bleaf, b) = if strided {
                    let l = g.input("b", DType::F32, &[nb[1], nb[0], nb[2], nb[3]]).unwrap();
                    (l, g.transpose(l).unwrap())
                } else {
                    let l = g.input("b", DType::F32, &nb).unwrap();
                    (l, l)
                };
                let out = match op {
                    "add" => g.add(a, b),
                    "sub" => g.sub(a, b),
                    "mul" => g.mul(a, b),
                    _ => g.div(a, b),
                }
                .unwrap();
                alloc(&mut g);
                let av = set_vals(&g, aleaf, &rng.vec(na.iter().product(), -2.0, 2.0));
                let bv = set_vals(&g, bleaf, &rng.vec(nb.iter().product(), 0.5, 2.0));
                run(&g);
                let want = naive_binary(op, &logical(&g, a, &av), na, &logical(&g, b, &bv), nb);
                assert_nmse(
                    &format!("{op} {nb:?} strided {strided}"),
                    &get_vals(&g, out),
                    &want,
                    1e-12,
                );
            }
        }
    }
}

#[test]
fn binary_ops_f16_random() {
    let mut rng = Rng::new(77);
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F16, &[8, 3]).unwrap();
    let b = g.new_tensor(DType::F16, &[8, 1]).unwrap();
    let out = g.mul(a, b).unwrap();
    alloc(&mut g);
    let av = set_vals(&g, a, &rng.vec(24, -2.0, 2.0));
    let bv = set_vals(&g, b, &rng.vec(8, -2.0, 2.0));
    run(&g);
    let a64: Vec<f64> = av.iter().map(|&x| f64::from(x)).collect();
    let b64: Vec<f64> = bv.iter().map(|&x| f64::from(x)).collect();
    let want = naive_binary("mul", &a64, [8, 3, 1, 1], &b64, [8, 1, 1, 1]);
    // Only the final rounding to f16 (relative 2^-11).
    assert_nmse("f16 mul", &get_vals(&g, out), &want, 1e-6);
}

#[test]
fn unary_ops_random_strided() {
    let silu = |x: f64| x / (1.0 + (-x).exp());
    let gelu = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x)).tanh())
    };
    let mut rng = Rng::new(3);
    for (i, u) in UnaryOp::ALL.into_iter().enumerate() {
        let mut g = Graph::new();
        let leaf = g.input("a", DType::F32, &[6, 5, 2]).unwrap();
        let a = g.permute(leaf, [1, 0, 2, 3]).unwrap();
        let out = g.unary(a, u).unwrap();
        alloc(&mut g);
        let v = set_vals(&g, leaf, &rng.vec(60, -6.0, 6.0));
        run(&g);
        let want: Vec<f64> = logical(&g, a, &v)
            .into_iter()
            .map(|x| match u {
                UnaryOp::Silu => silu(x),
                UnaryOp::Gelu => gelu(x),
                UnaryOp::Relu => x.max(0.0),
                UnaryOp::Tanh => x.tanh(),
                UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                UnaryOp::Softplus => (1.0 + x.exp()).ln(),
            })
            .collect();
        assert_nmse(&format!("unary {i}"), &get_vals(&g, out), &want, 1e-12);
    }
}

fn naive_soft_max(
    x: &[f64],
    ne: [usize; 4],
    mask: Option<(&[f64], [usize; 4])>,
    scale: f64,
    max_bias: f64,
) -> Vec<f64> {
    let n_head = ne[2];
    let n_head_log2 = {
        let mut p = 1;
        while p * 2 <= n_head {
            p *= 2;
        }
        p
    };
    let mut out = vec![0.0; x.len()];
    for i3 in 0..ne[3] {
        for h in 0..ne[2] {
            let slope = if max_bias > 0.0 {
                let m0 = 2f64.powf(-max_bias / n_head_log2 as f64);
                let m1 = 2f64.powf(-(max_bias / 2.0) / n_head_log2 as f64);
                if h < n_head_log2 {
                    m0.powi(h as i32 + 1)
                } else {
                    m1.powi(2 * (h - n_head_log2) as i32 + 1)
                }
            } else {
                1.0
            };
            for i1 in 0..ne[1] {
                let w: Vec<f64> = (0..ne[0])
                    .map(|i0| {
                        let mut v = x[lin(ne, [i0, i1, h, i3])] * scale;
                        if let Some((m, nm)) = mask {
                            v += slope * m[lin(nm, [i0, i1, h % nm[2], i3 % nm[3]])];
                        }
                        v
                    })
                    .collect();
                let max = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = w.iter().map(|v| (v - max).exp()).sum();
                for i0 in 0..ne[0] {
                    out[lin(ne, [i0, i1, h, i3])] = (w[i0] - max).exp() / sum;
                }
            }
        }
    }
    out
}

/// src0 shape, optional mask shape and type, scale, max_bias, whether src0 is a permuted view.
type SoftMaxCase = ([usize; 4], Option<([usize; 4], DType)>, f32, f32, bool);

#[test]
fn soft_max_random_with_mask_and_alibi() {
    // (src0 shape, mask shape, mask type, scale, max_bias, permuted src0)
    let cases: [SoftMaxCase; 6] = [
        ([16, 5, 4, 2], None, 1.0, 0.0, false),
        ([16, 5, 4, 2], None, 0.3, 0.0, true),
        ([16, 5, 4, 2], Some(([16, 7, 1, 1], DType::F16)), 0.7, 0.0, false),
        ([16, 5, 4, 2], Some(([16, 5, 2, 1], DType::F32)), 0.7, 8.0, true),
        ([9, 3, 6, 1], Some(([9, 3, 1, 1], DType::F32)), 1.5, 8.0, false),
        ([9, 3, 12, 2], Some(([9, 4, 3, 2], DType::F16)), 0.125, 4.0, true),
    ];
    for (c, (ne, mask, scale, max_bias, permuted)) in cases.into_iter().enumerate() {
        let mut rng = Rng::new(500 + c as u64);
        let mut g = Graph::new();
        let (leaf, a) = if permuted {
            let l = g.input("a", DType::F32, &[ne[0], ne[2], ne[1], ne[3]]).unwrap();
            (l, g.permute(l, [0, 2, 1, 3]).unwrap())
        } else {
            let l = g.input("a", DType::F32, &ne).unwrap();
            (l, l)
        };
        let m = mask.map(|(nm, t)| g.input("m", t, &nm).unwrap());
        let out = g.soft_max_ext(a, m, scale, max_bias).unwrap();
        alloc(&mut g);
        let av = set_vals(&g, leaf, &rng.vec(ne.iter().product(), -4.0, 4.0));
        let mv = mask.map(|(nm, _)| {
            let vals: Vec<f32> = (0..nm.iter().product::<usize>())
                .map(|_| if rng.below(5) == 0 { -INF } else { rng.uniform(-3.0, 0.0) })
                .collect();
            set_vals(&g, m.unwrap(), &vals).iter().map(|&x| f64::from(x)).collect::<Vec<f64>>()
        });
        run(&g);
        let x = logical(&g, a, &av);
        let want = naive_soft_max(
            &x,
            ne,
            mv.as_deref().zip(mask.map(|(nm, _)| nm)),
            f64::from(scale),
            f64::from(max_bias),
        );
        let got = get_vals(&g, out);
        // Rows that the random mask fully masked are NaN in both; compare the rest.
        let keep: Vec<usize> = (0..want.len()).filter(|&i| !want[i].is_nan()).collect();
        let got: Vec<f32> = keep.iter().map(|&i| got[i]).collect();
        let want: Vec<f64> = keep.iter().map(|&i| want[i]).collect();
        assert_nmse(&format!("softmax case {c}"), &got, &want, 1e-12);
    }
}

fn naive_norm(x: &[f64], ne0: usize, eps: f64, rms: bool) -> Vec<f64> {
    x.chunks(ne0)
        .flat_map(|row| {
            let n = ne0 as f64;
            let mean = if rms { 0.0 } else { row.iter().sum::<f64>() / n };
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let inv = 1.0 / (var + eps).sqrt();
            row.iter().map(move |v| (v - mean) * inv).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn norms_random_strided() {
    for rms in [true, false] {
        for permuted in [false, true] {
            let mut rng = Rng::new(40 + rms as u64 * 2 + permuted as u64);
            let ne = [33, 4, 3, 2];
            let mut g = Graph::new();
            let (leaf, a) = if permuted {
                let l = g.input("a", DType::F32, &[ne[0], ne[3], ne[2], ne[1]]).unwrap();
                (l, g.permute(l, [0, 3, 2, 1]).unwrap())
            } else {
                let l = g.input("a", DType::F32, &ne).unwrap();
                (l, l)
            };
            assert_eq!(g.tensor(a).ne(), ne);
            let eps = 1e-5;
            let out = if rms { g.rms_norm(a, eps) } else { g.norm(a, eps) }.unwrap();
            alloc(&mut g);
            let v = set_vals(&g, leaf, &rng.vec(ne.iter().product(), -3.0, 5.0));
            run(&g);
            let want = naive_norm(&logical(&g, a, &v), ne[0], f64::from(eps), rms);
            assert_nmse(
                &format!("norm rms={rms} permuted={permuted}"),
                &get_vals(&g, out),
                &want,
                1e-12,
            );
        }
    }
}

/// ROPE in f64 from the formulas (with YaRN corr dims computed in f64 too).
fn naive_rope(
    x: &[f64],
    ne: [usize; 4],
    pos: &[i32],
    ff: Option<&[f64]>,
    p: &RopeParams,
) -> Vec<f64> {
    let nd = p.n_dims;
    let corr_dim = |n_rot: f64| {
        nd as f64 * (p.n_ctx_orig as f64 / (n_rot * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * f64::from(p.freq_base).ln())
    };
    let low = corr_dim(f64::from(p.beta_fast)).floor().max(0.0);
    let high = corr_dim(f64::from(p.beta_slow)).ceil().min(nd as f64 - 1.0);
    let mut out = x.to_vec();
    for i in indices([1, ne[1], ne[2], ne[3]]) {
        let pos = f64::from(pos[i[2]]);
        for k in 0..nd / 2 {
            let f = ff.map_or(1.0, |f| f[k]);
            let extrap = pos / f64::from(p.freq_base).powf(2.0 * k as f64 / nd as f64) / f;
            let interp = f64::from(p.freq_scale) * extrap;
            let (theta, mut mscale) = if p.ext_factor != 0.0 {
                let y = (k as f64 - low) / (high - low).max(0.001);
                let mix = (1.0 - y.clamp(0.0, 1.0)) * f64::from(p.ext_factor);
                let m = 1.0 + 0.1 * (1.0 / f64::from(p.freq_scale)).ln();
                (interp * (1.0 - mix) + extrap * mix, m)
            } else {
                (interp, 1.0)
            };
            mscale *= f64::from(p.attn_factor);
            let (j0, j1) =
                if p.mode == ROPE_MODE_NEOX { (k, k + nd / 2) } else { (2 * k, 2 * k + 1) };
            let (x0, x1) = (x[lin(ne, [j0, i[1], i[2], i[3]])], x[lin(ne, [j1, i[1], i[2], i[3]])]);
            out[lin(ne, [j0, i[1], i[2], i[3]])] = (x0 * theta.cos() - x1 * theta.sin()) * mscale;
            out[lin(ne, [j1, i[1], i[2], i[3]])] = (x0 * theta.sin() + x1 * theta.cos()) * mscale;
        }
    }
    out
}

#[test]
fn rope_random_normal_and_neox_with_yarn() {
    let mut case = 0;
    for mode in [ROPE_MODE_NORMAL, ROPE_MODE_NEOX] {
        for (freq_scale, ext_factor, attn_factor, with_ff, permuted) in [
            (1.0, 0.0, 1.0, false, false),
            (0.25, 0.0, 1.0, false, true),
            (0.25, 1.0, 1.0, false, false),
            (0.5, 0.5, 0.8, true, true),
        ] {
            case += 1;
            let mut rng = Rng::new(900 + case);
            let ne = [24, 3, 5, 2];
            let p = RopeParams {
                n_dims: 16,
                mode,
                n_ctx_orig: 512,
                freq_base: 10000.0,
                freq_scale,
                ext_factor,
                attn_factor,
                beta_fast: 32.0,
                beta_slow: 1.0,
            };
            let mut g = Graph::new();
            let (leaf, a) = if permuted {
                let l = g.input("a", DType::F32, &[ne[0], ne[2], ne[1], ne[3]]).unwrap();
                (l, g.permute(l, [0, 2, 1, 3]).unwrap())
            } else {
                let l = g.input("a", DType::F32, &ne).unwrap();
                (l, l)
            };
            let pos = g.input("pos", DType::I32, &[ne[2]]).unwrap();
            let ff = if with_ff { Some(g.input("ff", DType::F32, &[8]).unwrap()) } else { None };
            let out = g.rope_ext(a, pos, ff, p).unwrap();
            alloc(&mut g);
            let v = set_vals(&g, leaf, &rng.vec(ne.iter().product(), -1.0, 1.0));
            let positions: Vec<i32> = (0..ne[2]).map(|_| rng.below(300) as i32).collect();
            set_i32(&g, pos, &positions);
            let ffv = ff.map(|f| set_vals(&g, f, &rng.vec(8, 1.0, 4.0)));
            run(&g);
            let ff64: Option<Vec<f64>> = ffv.map(|v| v.iter().map(|&x| f64::from(x)).collect());
            let want = naive_rope(&logical(&g, a, &v), ne, &positions, ff64.as_deref(), &p);
            assert_nmse(&format!("rope case {case}"), &get_vals(&g, out), &want, 1e-10);
        }
    }
}

#[test]
fn repeat_concat_reductions_random_strided() {
    let mut rng = Rng::new(31);
    let mut g = Graph::new();
    let leaf = g.input("a", DType::F32, &[3, 4, 2]).unwrap();
    let a = g.permute(leaf, [1, 0, 2, 3]).unwrap(); // [4, 3, 2], strided
    let b = g.input("b", DType::F32, &[4, 3, 5]).unwrap();
    let rep = g.repeat_to(a, &[8, 6, 2, 2]).unwrap();
    let cat = g.concat(a, b, 2).unwrap();
    let cat0 = g.concat(b, b, 0).unwrap();
    let sr = g.sum_rows(a).unwrap();
    let mean = g.mean(a).unwrap();
    let sum = g.sum(a).unwrap();
    alloc(&mut g);
    let av = set_vals(&g, leaf, &rng.vec(24, -1.0, 1.0));
    let bv = set_vals(&g, b, &rng.vec(60, -1.0, 1.0));
    run(&g);
    let (na, nb) = ([4, 3, 2, 1], [4, 3, 5, 1]);
    let a64 = logical(&g, a, &av);
    let b64: Vec<f64> = bv.iter().map(|&x| f64::from(x)).collect();
    let want_rep: Vec<f32> =
        indices([8, 6, 2, 2]).map(|i| a64[lin(na, [i[0] % 4, i[1] % 3, i[2], 0])] as f32).collect();
    assert_eq!(get_vals(&g, rep), want_rep);
    let want_cat: Vec<f32> = indices([4, 3, 7, 1])
        .map(|i| {
            if i[2] < 2 {
                a64[lin(na, i)] as f32
            } else {
                b64[lin(nb, [i[0], i[1], i[2] - 2, 0])] as f32
            }
        })
        .collect();
    assert_eq!(get_vals(&g, cat), want_cat);
    let want_cat0: Vec<f32> =
        indices([8, 3, 5, 1]).map(|i| b64[lin(nb, [i[0] % 4, i[1], i[2], 0])] as f32).collect();
    assert_eq!(get_vals(&g, cat0), want_cat0);
    let rows: Vec<f64> = a64.chunks(4).map(|r| r.iter().sum()).collect();
    assert_nmse("sum_rows", &get_vals(&g, sr), &rows, 1e-14);
    let means: Vec<f64> = rows.iter().map(|s| s / 4.0).collect();
    assert_nmse("mean", &get_vals(&g, mean), &means, 1e-14);
    assert_nmse("sum", &get_vals(&g, sum), &[a64.iter().sum()], 1e-14);
}

#[test]
fn glu_random_both_forms() {
    let silu = |x: f64| x / (1.0 + (-x).exp());
    let mut rng = Rng::new(61);
    for swapped in [false, true] {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[12, 3, 2]).unwrap();
        let out = g.glu(a, GluOp::Swiglu, swapped).unwrap();
        alloc(&mut g);
        let v = set_vals(&g, a, &rng.vec(72, -3.0, 3.0));
        run(&g);
        let want: Vec<f64> = v
            .chunks(12)
            .flat_map(|row| {
                let (x, gate) =
                    if swapped { (&row[6..], &row[..6]) } else { (&row[..6], &row[6..]) };
                x.iter()
                    .zip(gate)
                    .map(|(&x, &gt)| silu(f64::from(x)) * f64::from(gt))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_nmse(&format!("swiglu swapped={swapped}"), &get_vals(&g, out), &want, 1e-12);
    }
}

#[test]
fn get_rows_every_type_random() {
    let types = [DType::F32, DType::F16, DType::BF16].into_iter().chain(DType::QUANTIZED);
    for (i, t) in types.enumerate() {
        let mut rng = Rng::new(300 + i as u64);
        let ne0 = t.block_size().max(8) * 2;
        let mut g = Graph::new();
        let a = g.weight("a", t, &[ne0, 5, 2]).unwrap();
        let idx = g.input("idx", DType::I32, &[4, 2]).unwrap();
        let out = g.get_rows(a, idx).unwrap();
        assert!(supports(&g, out), "{t}");
        alloc(&mut g);
        let v = set_vals(&g, a, &rng.vec(ne0 * 10, -1.0, 1.0));
        let ids: Vec<i32> = (0..8).map(|_| rng.below(5) as i32).collect();
        set_i32(&g, idx, &ids);
        run(&g);
        let want: Vec<f64> = (0..8)
            .flat_map(|j| {
                let (row, batch) = (ids[j] as usize, j / 4);
                let start = (batch * 5 + row) * ne0;
                v[start..start + ne0].iter().map(|&x| f64::from(x)).collect::<Vec<_>>()
            })
            .collect();
        assert_nmse(&format!("get_rows {t}"), &get_vals(&g, out), &want, 1e-14);
    }
}

#[test]
fn cpy_between_every_type_matches_quantize_and_dequantize() {
    for (i, t) in DType::QUANTIZED.into_iter().enumerate() {
        let mut rng = Rng::new(700 + i as u64);
        let bs = t.block_size();
        let vals = rng.vec(bs * 4, -2.0, 2.0);
        let mut g = Graph::new();
        // Source rows of 2 blocks; destination rows of 1 block: the flattening carries over.
        let a = g.input("a", DType::F32, &[bs * 2, 2]).unwrap();
        let q = g.new_tensor(t, &[bs, 4]).unwrap();
        let f16 = g.new_tensor(DType::F16, &[bs * 4]).unwrap();
        let q2 = g.new_tensor(t, &[bs * 4]).unwrap();
        let cq = g.cpy(a, q).unwrap();
        let cf = g.cpy(cq, f16).unwrap();
        // Same-type copy of blocks: bit for bit.
        let cq2 = g.cpy(cq, q2).unwrap();
        for id in [cq, cf, cq2] {
            assert!(supports(&g, id), "{t}");
        }
        alloc(&mut g);
        set_f32(&g, a, &vals).unwrap();
        run(&g);
        let want_bytes = to_bytes(t, &vals, bs);
        assert_eq!(get_tensor(&g, cq).unwrap(), want_bytes, "{t}: F32 -> {t} bytes");
        assert_eq!(get_tensor(&g, cq2).unwrap(), want_bytes, "{t}: {t} -> {t} bytes");
        let deq = from_bytes(t, &want_bytes, bs);
        let want_f16: Vec<f32> = deq.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect();
        assert_eq!(get_vals(&g, cf), want_f16, "{t} -> F16");
    }
}

#[test]
fn cpy_float_types_random_strided() {
    let mut rng = Rng::new(4242);
    for src in [DType::F32, DType::F16, DType::BF16] {
        for dst in [DType::F32, DType::F16, DType::BF16] {
            let mut g = Graph::new();
            let leaf = g.new_tensor(src, &[4, 3, 2]).unwrap();
            let t = g.permute(leaf, [2, 0, 1, 3]).unwrap(); // ne = [3, 2, 4]
            let d = g.new_tensor(dst, &[6, 4]).unwrap();
            let c = g.cpy(t, d).unwrap();
            alloc(&mut g);
            let v = set_vals(&g, leaf, &rng.vec(24, -10.0, 10.0));
            run(&g);
            let want: Vec<f32> = logical(&g, t, &v)
                .into_iter()
                .map(|x| match dst {
                    DType::F16 => half::f16::from_f64(x).to_f32(),
                    DType::BF16 => bf16_round(x as f32),
                    _ => x as f32,
                })
                .collect();
            assert_eq!(get_vals(&g, c), want, "{src} -> {dst}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// In-place and direct calls
// ---------------------------------------------------------------------------------------------

fn host(layout: Layout, mem: &mut [u8]) -> HostTensor {
    assert!(mem.len() >= layout.nbytes());
    HostTensor { layout, ptr: mem.as_mut_ptr() }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn in_place_matches_out_of_place() {
    let mut rng = Rng::new(8);
    let l = Layout::contiguous(DType::F32, &[7, 3]).unwrap();
    let lb = Layout::contiguous(DType::F32, &[7, 1]).unwrap();
    let x = rng.vec(21, -2.0, 2.0);
    let bvals = rng.vec(7, 0.5, 1.5);
    let ops = [
        (Op::Add, true),
        (Op::Div, true),
        (Op::Scale { scale: 0.5, bias: 1.0 }, false),
        (Op::Unary(UnaryOp::Gelu), false),
        (Op::SoftMax { scale: 2.0, max_bias: 0.0 }, false),
        (Op::RmsNorm { eps: 1e-6 }, false),
        (Op::Norm { eps: 1e-6 }, false),
        (Op::DiagMaskInf { n_past: 1 }, false),
    ];
    for (op, binary) in ops {
        assert!(op.can_run_in_place());
        let mut b = f32_bytes(&bvals);
        let mut src = f32_bytes(&x);
        let mut out = vec![0u8; l.nbytes()];
        let mut inplace = f32_bytes(&x);
        let bt = host(lb, &mut b);
        let srcs_out = if binary { vec![host(l, &mut src), bt] } else { vec![host(l, &mut src)] };
        // SAFETY: every pointer is a live Vec of at least the layout's bytes.
        unsafe { compute_op(&op, host(l, &mut out), &srcs_out, NEVER) }.unwrap();
        let ip = host(l, &mut inplace);
        let srcs_in = if binary { vec![ip, bt] } else { vec![ip] };
        // SAFETY: as above; dst is the same memory and layout as srcs[0] (in-place).
        unsafe { compute_op(&op, ip, &srcs_in, NEVER) }.unwrap();
        assert_eq!(out, inplace, "{}", op.name());
    }
}

#[test]
fn compute_op_on_disjoint_parts_from_two_threads() {
    // A threaded backend splits a matmul's weight rows (dst's dim 0) between threads, each
    // calling compute_op on its part: the result is the same as one call.
    let mut rng = Rng::new(12);
    let (k, m, n) = (64, 10, 3);
    let la = Layout::contiguous(DType::F32, &[k, m]).unwrap();
    let lb = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let ld = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let mut a = f32_bytes(&rng.vec(k * m, -1.0, 1.0));
    let mut b = f32_bytes(&rng.vec(k * n, -1.0, 1.0));
    let mut whole = vec![0u8; ld.nbytes()];
    let mut split = vec![0u8; ld.nbytes()];
    let (ha, hb) = (host(la, &mut a), host(lb, &mut b));
    // SAFETY: live Vecs of exactly the layouts' bytes.
    unsafe { compute_op(&Op::MulMat, host(ld, &mut whole), &[ha, hb], NEVER) }.unwrap();
    let hd = host(ld, &mut split);
    std::thread::scope(|s| {
        for (start, end) in [(0, 4), (4, 10)] {
            let mut a_part = ha;
            a_part.layout.ne[1] = end - start;
            a_part.ptr = ha.ptr.wrapping_add(start * la.nb[1]);
            let mut d_part = hd;
            d_part.layout.ne[0] = end - start;
            d_part.ptr = hd.ptr.wrapping_add(start * ld.nb[0]);
            s.spawn(move || {
                // SAFETY: the parts lie within the Vecs, which outlive the scope; the sources
                // are only read, and the two destination parts are disjoint elements.
                unsafe { compute_op(&Op::MulMat, d_part, &[a_part, hb], &|| false) }.unwrap();
            });
        }
    });
    assert_eq!(whole, split);
}

#[test]
fn compute_op_rejects_layouts_that_do_not_fit() {
    let l3 = Layout::contiguous(DType::F32, &[3]).unwrap();
    let l4 = Layout::contiguous(DType::F32, &[4]).unwrap();
    let li = Layout::contiguous(DType::I32, &[3]).unwrap();
    let mut a = vec![0u8; 16];
    let mut b = vec![0u8; 16];
    let mut d = vec![0u8; 16];
    let (ha, hb, hd) = (host(l3, &mut a), host(l4, &mut b), host(l4, &mut d));
    // SAFETY (all calls): live Vecs of 16 bytes, enough for every layout used.
    let e = unsafe { compute_op(&Op::Add, hd, &[ha, hb], NEVER) }.unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { op, .. } if op == "ADD"), "{e}");
    let e = unsafe { compute_op(&Op::Add, hd, &[hb], NEVER) }.unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { op, .. } if op == "ADD"), "{e}");
    let e = unsafe { compute_op(&Op::Sqr, hd, &[ha], NEVER) }.unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { op, .. } if op == "SQR"), "{e}");
    let hi = host(li, &mut a);
    let e = unsafe { compute_op(&Op::Sqr, host(l3, &mut d), &[hi], NEVER) }.unwrap_err();
    assert!(matches!(&e, Error::UnsupportedType { op, .. } if op == "SQR"), "{e}");
    let e = unsafe { compute_op(&Op::MulMat, hd, &[ha, hb], NEVER) }.unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { op, .. } if op == "MUL_MAT"), "{e}");
    // The destination must be what the core's rule gives: ADD of F32 is F32, not F16.
    let mut h = vec![0u8; 8];
    let hh = host(Layout::contiguous(DType::F16, &[4]).unwrap(), &mut h);
    let e = unsafe { compute_op(&Op::Add, hh, &[hb, hb], NEVER) }.unwrap_err();
    assert!(
        matches!(&e, Error::UnsupportedType { op, dtype: DType::F16, reason } if op == "ADD" && reason.contains("destination")),
        "{e}"
    );
    // The rule's parameter checks too: ROPE's n_dims, as the graph builder refuses it.
    let pos = host(Layout::contiguous(DType::I32, &[1]).unwrap(), &mut a);
    let rope = Op::Rope(tessera_core::RopeParams { n_dims: 6, ..Default::default() });
    let e = unsafe { compute_op(&rope, hd, &[hb, pos], NEVER) }.unwrap_err();
    assert!(matches!(&e, Error::InvalidParam { op, .. } if op == "ROPE"), "{e}");
    // View ops compute nothing.
    unsafe { compute_op(&Op::Transpose, hd, &[hb], NEVER) }.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Compute-time errors
// ---------------------------------------------------------------------------------------------

#[test]
fn get_rows_index_out_of_range_is_an_error_naming_it() {
    for bad in [3, -1, i32::MAX] {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[2, 3]).unwrap();
        let idx = g.input("idx", DType::I32, &[2]).unwrap();
        let _out = g.get_rows(a, idx).unwrap();
        alloc(&mut g);
        set_i32(&g, idx, &[0, bad]);
        let e = compute_graph(&g, NEVER).unwrap_err();
        assert!(matches!(&e, Error::IndexOutOfRange { op, .. } if op == "GET_ROWS"), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("GET_ROWS") && msg.contains(&bad.to_string()), "{msg}");
    }
}

#[test]
fn unallocated_tensor_is_an_error() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4]).unwrap();
    let _ = g.sqr(a).unwrap();
    let e = compute_graph(&g, NEVER).unwrap_err();
    assert!(matches!(&e, Error::NotAllocated(_)), "{e}");
}

#[test]
fn abort_during_long_matmul() {
    let mut g = Graph::new();
    let a = g.weight("a", DType::F32, &[256, 256]).unwrap();
    let b = g.input("b", DType::F32, &[256, 256]).unwrap();
    let out = g.mul_mat(a, b).unwrap();
    let _after = g.scale(out, 2.0).unwrap();
    alloc(&mut g);
    let calls = Cell::new(0usize);
    // The first poll is before the node; the third is inside the matmul.
    let e = compute_graph(&g, &|| {
        calls.set(calls.get() + 1);
        calls.get() >= 3
    })
    .unwrap_err();
    assert_eq!(e, Error::Aborted);
    assert_eq!(calls.get(), 3);
    // Aborting before anything runs.
    assert_eq!(compute_graph(&g, &|| true).unwrap_err(), Error::Aborted);
}

#[test]
fn compute_nodes_runs_a_subset_in_order() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[2]).unwrap();
    let s = g.scale(a, 2.0).unwrap();
    let q = g.sqr(s).unwrap();
    alloc(&mut g);
    set_f32(&g, a, &[1.0, 3.0]).unwrap();
    compute_nodes(&g, &[a, s], NEVER).unwrap(); // the leaf is skipped
    assert_eq!(get_vals(&g, s), vec![2.0, 6.0]);
    assert_eq!(get_vals(&g, q), vec![0.0, 0.0]);
    compute_nodes(&g, &[q], NEVER).unwrap();
    assert_eq!(get_vals(&g, q), vec![4.0, 36.0]);
}

mod not_host {
    use std::any::Any;
    use std::ptr::NonNull;
    use std::sync::Arc;
    use tessera_core::backend::{Buffer, BufferType, BufferUsage};
    use tessera_core::Result;

    /// A buffer type whose memory the CPU cannot address (like a GPU's).
    #[derive(Debug)]
    pub struct DeviceType;
    impl BufferType for DeviceType {
        fn name(&self) -> String {
            "FAKE_GPU".into()
        }
        fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
            Ok(Arc::new(DeviceBuffer(size)))
        }
        fn alignment(&self) -> usize {
            64
        }
        fn is_host(&self) -> bool {
            false
        }
        fn device_name(&self) -> String {
            "FAKE_GPU".into()
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    /// Its buffer.
    #[derive(Debug)]
    pub struct DeviceBuffer(pub usize);
    impl Buffer for DeviceBuffer {
        fn name(&self) -> String {
            "FAKE_GPU".into()
        }
        fn buffer_type(&self) -> Arc<dyn BufferType> {
            Arc::new(DeviceType)
        }
        fn size(&self) -> usize {
            self.0
        }
        fn usage(&self) -> BufferUsage {
            BufferUsage::Any
        }
        fn set_usage(&self, _: BufferUsage) {}
        fn host_ptr(&self) -> Option<NonNull<u8>> {
            None
        }
        fn write(&self, _: usize, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn read(&self, _: usize, _: &mut [u8]) -> Result<()> {
            Ok(())
        }
        fn fill(&self, _: usize, _: usize, _: u8) -> Result<()> {
            Ok(())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }
}

#[test]
fn non_host_memory_is_a_backend_error() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4]).unwrap();
    let s = g.sqr(a).unwrap();
    let buf: std::sync::Arc<dyn tessera_core::backend::Buffer> =
        std::sync::Arc::new(not_host::DeviceBuffer(1024));
    g.set_storage(a, tessera_core::Storage { buffer: buf.clone(), offset: 0 }).unwrap();
    g.set_storage(s, tessera_core::Storage { buffer: buf, offset: 64 }).unwrap();
    let e = compute_graph(&g, NEVER).unwrap_err();
    assert!(matches!(&e, Error::Backend { .. }), "{e}");
}

#[test]
fn supports_every_builder_op() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[8, 4, 2]).unwrap();
    let h = g.input("h", DType::F16, &[8, 4, 2]).unwrap();
    let pos = g.input("pos", DType::I32, &[2]).unwrap();
    let w = g.weight("w", DType::Q4_K, &[256, 4]).unwrap();
    let x = g.input("x", DType::F32, &[256, 3]).unwrap();
    let mut ids = vec![
        g.add(a, h).unwrap(),
        g.mul(h, a).unwrap(),
        g.scale(h, 2.0).unwrap(),
        g.sum(a).unwrap(),
        g.mean(a).unwrap(),
        g.soft_max(a).unwrap(),
        g.rope(a, pos, 8, ROPE_MODE_NEOX).unwrap(),
        g.mul_mat(w, x).unwrap(),
        g.swiglu(h).unwrap(),
        g.transpose(a).unwrap(),
        g.concat(a, a, 2).unwrap(),
    ];
    let m = g.reshape(a, &[8, 8]).unwrap();
    ids.push(g.argmax(m).unwrap());
    for id in ids {
        assert!(supports(&g, id), "{:?}", g.tensor(id).op);
    }
}

// ---------------------------------------------------------------------------------------------
// Rejected graphs: the builder's errors, typed and naming the op
// ---------------------------------------------------------------------------------------------

fn expect_shape(r: tessera_core::Result<TensorId>, op: &str) {
    match r {
        Err(Error::ShapeMismatch { op: o, reason }) => {
            assert_eq!(o, op, "{reason}");
            assert!(Error::shape(o.clone(), reason).to_string().starts_with(op));
        }
        other => panic!("{op}: expected ShapeMismatch, got {other:?}"),
    }
}

fn expect_type(r: tessera_core::Result<TensorId>, op: &str) {
    match r {
        Err(Error::UnsupportedType { op: o, .. }) => assert_eq!(o, op),
        other => panic!("{op}: expected UnsupportedType, got {other:?}"),
    }
}

fn expect_arg(r: tessera_core::Result<TensorId>, op: &str) {
    match r {
        Err(Error::InvalidParam { op: o, .. }) => assert_eq!(o, op),
        other => panic!("{op}: expected InvalidParam, got {other:?}"),
    }
}

#[test]
fn builder_rejects_bad_shapes_per_op() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 3]).unwrap();
    let b = g.input("b", DType::F32, &[3, 3]).unwrap();
    let c = g.input("c", DType::F32, &[4, 3, 2]).unwrap();
    let v = g.input("v", DType::F32, &[5]).unwrap();
    let i = g.input("i", DType::I32, &[3]).unwrap();
    expect_shape(g.add(a, b), "ADD");
    expect_shape(g.sub(a, c), "SUB"); // src1 larger than src0
    expect_shape(g.mul(a, b), "MUL");
    expect_shape(g.div(a, b), "DIV");
    expect_shape(g.mul_mat(a, b), "MUL_MAT");
    let t = g.transpose(b).unwrap();
    let x3 = g.input("x3", DType::F32, &[3, 2]).unwrap();
    expect_shape(g.mul_mat(t, x3), "MUL_MAT"); // transposed weights
    let a3 = g.input("a3", DType::F32, &[4, 2, 3]).unwrap();
    let b2 = g.input("b2", DType::F32, &[4, 2, 2]).unwrap();
    expect_shape(g.mul_mat(a3, b2), "MUL_MAT"); // 2 is not a multiple of 3
    expect_shape(g.get_rows(c, i), "GET_ROWS");
    expect_shape(g.concat(a, b, 1), "CONCAT");
    expect_shape(g.repeat_to(a, &[6, 3]), "REPEAT");
    expect_shape(g.repeat(c, a), "REPEAT");
    expect_shape(g.argmax(c), "ARGMAX");
    expect_shape(g.glu(b, GluOp::Swiglu, false), "SWIGLU");
    expect_shape(g.glu_split(a, b, GluOp::Geglu), "GEGLU");
    expect_shape(g.soft_max_ext(a, Some(v), 1.0, 0.0), "SOFT_MAX");
    let few_rows = g.input("m2", DType::F32, &[4, 2]).unwrap();
    expect_shape(g.soft_max_ext(a, Some(few_rows), 1.0, 0.0), "SOFT_MAX");
    expect_shape(g.reshape(a, &[5, 2]), "RESHAPE");
    let tr = g.transpose(a).unwrap();
    expect_shape(g.reshape(tr, &[12]), "RESHAPE");
    expect_shape(g.cpy(a, v), "CPY");
    let q = g.new_tensor(DType::Q4_0, &[32]).unwrap();
    let f48 = g.input("f48", DType::F32, &[16, 2]).unwrap();
    expect_shape(g.cpy(f48, q), "CPY"); // rows of 16 are not whole Q4_0 blocks
    expect_shape(g.transpose(q), "TRANSPOSE");
    let qm = g.new_tensor(DType::Q4_0, &[32, 2]).unwrap();
    expect_shape(g.permute(qm, [1, 0, 2, 3]), "PERMUTE");
}

#[test]
fn rope_positions_must_match_ne2() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[8, 2, 3]).unwrap();
    let p = g.input("p", DType::I32, &[2]).unwrap();
    expect_shape(g.rope(a, p, 8, ROPE_MODE_NORMAL), "ROPE");
    let p2 = g.input("p2", DType::I32, &[3, 2]).unwrap();
    expect_shape(g.rope(a, p2, 8, ROPE_MODE_NORMAL), "ROPE");
}

#[test]
fn builder_rejects_bad_types_per_op() {
    let mut g = Graph::new();
    let f = g.input("f", DType::F32, &[32, 2]).unwrap();
    let h = g.input("h", DType::F16, &[32, 2]).unwrap();
    let i = g.input("i", DType::I32, &[32, 2]).unwrap();
    let q = g.weight("q", DType::Q8_0, &[32, 2]).unwrap();
    let iv = g.input("iv", DType::I32, &[2]).unwrap();
    expect_type(g.add(f, i), "ADD");
    expect_type(g.add(q, f), "ADD");
    expect_type(g.scale(i, 2.0), "SCALE");
    expect_type(g.silu(q), "SILU");
    expect_type(g.sum(i), "SUM");
    // Activations must be F32, F16 or BF16 (ggml's rule); weights anything but I32.
    expect_type(g.mul_mat(f, i), "MUL_MAT");
    expect_type(g.mul_mat(f, q), "MUL_MAT");
    expect_type(g.mul_mat(i, f), "MUL_MAT");
    assert!(g.mul_mat(f, h).is_ok(), "F16 activations are accepted");
    expect_type(g.get_rows(f, f), "GET_ROWS"); // indices must be I32
    expect_type(g.soft_max(h), "SOFT_MAX");
    expect_type(g.soft_max_ext(f, Some(i), 1.0, 0.0), "SOFT_MAX");
    expect_type(g.diag_mask_inf(h, 0), "DIAG_MASK_INF");
    expect_type(g.rms_norm(h, 1e-6), "RMS_NORM");
    expect_type(g.norm(q, 1e-6), "NORM");
    let a = g.input("a", DType::F32, &[8, 1, 2]).unwrap();
    let fpos = g.input("fpos", DType::F32, &[2]).unwrap();
    expect_type(g.rope(a, fpos, 8, ROPE_MODE_NORMAL), "ROPE");
    expect_type(g.rope(i, iv, 8, ROPE_MODE_NORMAL), "ROPE");
    expect_type(g.concat(f, h, 0), "CONCAT");
    expect_type(g.cpy(i, f), "CPY");
    expect_type(g.cpy(f, i), "CPY");
    expect_type(g.argmax(i), "ARGMAX");
    expect_type(g.repeat(q, f), "REPEAT");
}

#[test]
fn builder_rejects_bad_arguments() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[8, 2, 3]).unwrap();
    let pos = g.input("pos", DType::I32, &[3]).unwrap();
    for n_dims in [0, 3, 10] {
        expect_arg(g.rope(a, pos, n_dims, ROPE_MODE_NORMAL), "ROPE");
    }
    expect_arg(g.rope(a, pos, 8, 1), "ROPE");
    let bad = RopeParams { n_dims: 8, freq_base: 0.0, ..Default::default() };
    expect_arg(g.rope_ext(a, pos, None, bad), "ROPE");
    let bad = RopeParams { n_dims: 8, ext_factor: f32::NAN, ..Default::default() };
    expect_arg(g.rope_ext(a, pos, None, bad), "ROPE");
    let ff = g.input("ff", DType::F32, &[3]).unwrap();
    let p8 = RopeParams { n_dims: 8, ..Default::default() };
    expect_shape(g.rope_ext(a, pos, Some(ff), p8), "ROPE"); // 3 < 8 / 2 factors
    expect_arg(g.concat(a, a, 4), "CONCAT");
    expect_arg(g.clamp(a, 1.0, -1.0), "CLAMP");
    expect_arg(g.clamp(a, f32::NAN, 1.0), "CLAMP");
    expect_arg(g.soft_max_ext(a, None, 1.0, 2.0), "SOFT_MAX"); // ALiBi needs a mask
    expect_arg(g.soft_max_ext(a, None, f32::INFINITY, 0.0), "SOFT_MAX");
    expect_arg(g.soft_max_ext(a, None, 1.0, -1.0), "SOFT_MAX");
    expect_arg(g.rms_norm(a, -1.0), "RMS_NORM");
    expect_arg(g.norm(a, f32::NAN), "NORM");
    for axes in [[0, 0, 1, 2], [0, 1, 2, 4], [3, 2, 1, 1]] {
        expect_arg(g.permute(a, axes), "PERMUTE");
    }
    expect_arg(g.view(a, &[4, 2], &[16, 64], 0), "VIEW"); // wrong number of strides
}

#[test]
fn builder_rejects_bad_leaves_and_views() {
    let mut g = Graph::new();
    assert!(matches!(g.new_tensor(DType::F32, &[4, 0]), Err(Error::InvalidShape { .. })));
    assert!(matches!(g.new_tensor(DType::F32, &[]), Err(Error::InvalidShape { .. })));
    assert!(matches!(g.new_tensor(DType::F32, &[1, 2, 3, 4, 5]), Err(Error::InvalidShape { .. })));
    assert!(matches!(g.new_tensor(DType::F32, &[(1 << 40) + 1]), Err(Error::InvalidShape { .. })));
    let e = g.new_tensor(DType::F32, &[1 << 40, 1 << 40]).unwrap_err();
    assert!(matches!(e, Error::Overflow { .. } | Error::InvalidShape { .. }), "{e}");
    let e = g.new_tensor(DType::F32, &[1 << 30, 1 << 30]).unwrap_err(); // 2^62 bytes
    assert!(matches!(e, Error::Overflow { .. } | Error::InvalidShape { .. }), "{e}");
    assert!(matches!(g.new_tensor(DType::Q4_0, &[33]), Err(Error::BlockAlignment { .. })));
    let a = g.input("a", DType::F32, &[4, 4]).unwrap();
    assert!(matches!(g.input("a", DType::F32, &[1]), Err(Error::DuplicateName(_))));
    // Views reaching past the source, by offset, shape, stride, or overflowing arithmetic.
    for (ne, nb, offset) in [
        (vec![4usize, 4], vec![16usize], 4usize),
        (vec![4, 5], vec![16], 0),
        (vec![4, 4], vec![20], 0),
        (vec![2, 2], vec![usize::MAX], 0),
        (vec![4], vec![], usize::MAX - 8),
    ] {
        match g.view(a, &ne, &nb, offset) {
            Err(Error::ViewOutOfBounds { op, .. }) => assert_eq!(op, "VIEW"),
            other => panic!("view {ne:?} {nb:?} +{offset}: {other:?}"),
        }
    }
    let q = g.new_tensor(DType::Q8_0, &[64]).unwrap();
    assert!(matches!(g.view(q, &[32], &[], 17), Err(Error::ViewOutOfBounds { .. })));
    // An id from elsewhere.
    let mut other = Graph::new();
    for _ in 0..20 {
        other.new_tensor(DType::F32, &[1]).unwrap();
    }
    let foreign = other.new_tensor(DType::F32, &[1]).unwrap();
    assert!(matches!(g.sqr(foreign), Err(Error::InvalidTensorId(_))));
    assert!(!supports(&g, foreign));
}

/// The gated delta rule of `(q, k, v, g, beta, state)` (shapes as GATED_DELTA_NET's rule) in
/// f64, written from the recurrence: per sequence and value head `h` (key head `h % H_k`),
/// `M *= exp(g)`, `d = beta (v - M^T k)`, `M += k d^T`, `o = M^T q / sqrt(S)`; the outputs, then
/// the final states.
#[allow(clippy::too_many_arguments)]
fn naive_delta_net(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    [s_v, h_k, h_v, n_t, n_s]: [usize; 5],
    per_dim: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; s_v * h_v * n_t * n_s];
    let mut states = vec![0.0; s_v * s_v * h_v * n_s];
    for s in 0..n_s {
        for h in 0..h_v {
            let hk = h % h_k;
            // m[i][j]: key dim i, value dim j (state element i + j * S).
            let base = (s * h_v + h) * s_v * s_v;
            let mut m: Vec<Vec<f64>> = (0..s_v)
                .map(|i| (0..s_v).map(|j| f64::from(state[base + i + j * s_v])).collect())
                .collect();
            for t in 0..n_t {
                let qk = |x: &[f32], i: usize| f64::from(x[i + s_v * (hk + h_k * (t + n_t * s))]);
                let row = h + h_v * (t + n_t * s);
                for (i, mi) in m.iter_mut().enumerate() {
                    let gi = if per_dim { g[i + s_v * row] } else { g[row] };
                    mi.iter_mut().for_each(|x| *x *= f64::from(gi).exp());
                }
                let d: Vec<f64> = (0..s_v)
                    .map(|j| {
                        let mk: f64 = (0..s_v).map(|i| m[i][j] * qk(k, i)).sum();
                        f64::from(beta[row]) * (f64::from(v[j + s_v * row]) - mk)
                    })
                    .collect();
                for (i, mi) in m.iter_mut().enumerate() {
                    for (j, x) in mi.iter_mut().enumerate() {
                        *x += qk(k, i) * d[j];
                    }
                }
                for j in 0..s_v {
                    let o: f64 = (0..s_v).map(|i| m[i][j] * qk(q, i)).sum();
                    out[j + s_v * row] = o / (s_v as f64).sqrt();
                }
            }
            for (i, mi) in m.iter().enumerate() {
                for (j, &x) in mi.iter().enumerate() {
                    states[base + i + j * s_v] = x;
                }
            }
        }
    }
    out.extend(states);
    out
}

/// GATED_DELTA_NET by hand (one token from a zero state: `M = beta k v^T`, `o = beta v (k . q)
/// / sqrt(S)`), then random operands of several tokens, sequences and key heads shared by two
/// value heads each, with one decay per head and one per key dim, against the recurrence in
/// f64.
#[test]
fn gated_delta_net_known_answer_and_random_heads() {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[2, 1, 1, 1]).unwrap();
    let k = g.input("k", DType::F32, &[2, 1, 1, 1]).unwrap();
    let v = g.input("v", DType::F32, &[2, 1, 1, 1]).unwrap();
    let gate = g.input("g", DType::F32, &[1, 1, 1, 1]).unwrap();
    let beta = g.input("beta", DType::F32, &[1, 1, 1, 1]).unwrap();
    let state = g.input("state", DType::F32, &[2, 2, 1, 1]).unwrap();
    let out = g.gated_delta_net(q, k, v, gate, beta, state).unwrap();
    alloc(&mut g);
    for (id, vals) in [
        (q, &[1.0, 1.0][..]),
        (k, &[1.0, 0.0]),
        (v, &[2.0, 4.0]),
        (gate, &[0.0]),
        (beta, &[0.5]),
        (state, &[0.0; 4]),
    ] {
        set_f32(&g, id, vals).unwrap();
    }
    run(&g);
    let r = std::f32::consts::FRAC_1_SQRT_2;
    // Outputs [1, 2] / sqrt(2); state M[0][0] = 1, M[0][1] = 2 (elements i + 2 j).
    assert_close("gated_delta_net", &get_vals(&g, out), &[r, 2.0 * r, 1.0, 0.0, 2.0, 0.0], 1e-6);

    let (s_v, h_k, h_v, n_t, n_s) = (8, 2, 4, 5, 2);
    for per_dim in [false, true] {
        let mut rng = Rng::new(35 + u64::from(per_dim));
        let mut g = Graph::new();
        let gw = if per_dim { s_v } else { 1 };
        let shapes: [(&str, [usize; 4]); 6] = [
            ("q", [s_v, h_k, n_t, n_s]),
            ("k", [s_v, h_k, n_t, n_s]),
            ("v", [s_v, h_v, n_t, n_s]),
            ("g", [gw, h_v, n_t, n_s]),
            ("beta", [1, h_v, n_t, n_s]),
            ("state", [s_v, s_v, h_v, n_s]),
        ];
        let ids: Vec<TensorId> =
            shapes.iter().map(|(n, ne)| g.input(n, DType::F32, ne).unwrap()).collect();
        let out = g.gated_delta_net(ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]).unwrap();
        alloc(&mut g);
        let ranges = [(-1.0, 1.0), (-0.5, 0.5), (-2.0, 2.0), (-1.0, 0.0), (0.0, 1.0), (-0.5, 0.5)];
        let vals: Vec<Vec<f32>> = ids
            .iter()
            .zip(&shapes)
            .zip(ranges)
            .map(|((&id, (_, ne)), (lo, hi))| {
                set_vals(&g, id, &rng.vec(ne.iter().product(), lo, hi))
            })
            .collect();
        run(&g);
        let want = naive_delta_net(
            &vals[0],
            &vals[1],
            &vals[2],
            &vals[3],
            &vals[4],
            &vals[5],
            [s_v, h_k, h_v, n_t, n_s],
            per_dim,
        );
        assert_nmse(
            &format!("gated_delta_net per_dim {per_dim}"),
            &get_vals(&g, out),
            &want,
            1e-12,
        );
    }
}

/// SOFTPLUS is `x` itself above 20 (ggml's threshold), `log(1 + exp(x))` below.
#[test]
fn softplus_passes_large_inputs_through() {
    let out = unary_graph(&[4], &[25.0, 20.5, 0.0, -30.0], |g, a| g.softplus(a));
    assert_close("softplus", &out, &[25.0, 20.5, std::f32::consts::LN_2, (-30f32).exp()], 1e-7);
}
