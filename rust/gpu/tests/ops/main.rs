//! Every op and type the GPU supports, computed on the GPU and compared with the reference
//! (normalized mean squared error at most 1e-7, matmul 5e-4), on shapes that are not multiples
//! of the tile sizes, with broadcasting, F16, quantized weights and strided operands.

mod attention;
#[path = "../common/mod.rs"]
mod common;
mod kv_quant;
mod recurrent;
mod weights;

use common::{check, gpu, gpu_int, i32_bytes, output_on, Case, Rng};
use std::collections::HashMap;
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::{DType, GluOp, Graph, RopeParams, TensorId, UnaryOp};

pub(crate) const TOL: f64 = 1e-7;

type UnaryBuilder = Box<dyn Fn(&mut Graph, TensorId) -> TensorId>;
pub(crate) const TOL_MATMUL: f64 = 5e-4;

pub(crate) fn case(
    name: impl Into<String>,
    graph: Graph,
    output: TensorId,
    tolerance: f64,
) -> Case {
    Case { name: name.into(), graph, output, data: HashMap::new(), tolerance }
}

#[test]
fn binary_ops_with_broadcasting() {
    let Some(dev) = gpu() else { return };
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[5, 7, 3, 2], &[5, 7, 3, 2]),
        (&[5, 7, 3, 2], &[5, 1, 3, 1]),
        (&[5, 7, 3, 2], &[1, 1, 1, 1]),
        (&[130, 3], &[130, 1]),
        (&[1000, 3, 2], &[1000, 3, 1]),
    ];
    type Builder = fn(&mut Graph, TensorId, TensorId) -> tessera_core::Result<TensorId>;
    let ops: [(&str, Builder); 4] =
        [("add", Graph::add), ("sub", Graph::sub), ("mul", Graph::mul), ("div", Graph::div)];
    for (name, op) in ops {
        for (sa, sb) in shapes {
            for (ta, tb) in
                [(DType::F32, DType::F32), (DType::F16, DType::F32), (DType::F32, DType::F16)]
            {
                let mut g = Graph::new();
                let a = g.input("a", ta, sa).unwrap();
                let b = g.input("b", tb, sb).unwrap();
                let c = op(&mut g, a, b).unwrap();
                let mut k = case(format!("{name} {ta}{sa:?} {tb}{sb:?}"), g, c, TOL);
                if name == "div" {
                    // Keep divisors away from zero.
                    let mut rng = Rng::new(7);
                    let n: usize = sb.iter().product();
                    let bytes = match tb {
                        DType::F32 => {
                            (0..n).flat_map(|_| rng.uniform(0.5, 2.0).to_le_bytes()).collect()
                        }
                        _ => (0..n)
                            .flat_map(|_| half::f16::from_f32(rng.uniform(0.5, 2.0)).to_le_bytes())
                            .collect(),
                    };
                    k.data.insert(b, bytes);
                }
                check(&dev, &k);
            }
        }
    }
}

#[test]
fn binary_ops_on_strided_operands() {
    let Some(dev) = gpu() else { return };
    let mut g = Graph::new();
    let a0 = g.input("a", DType::F32, &[6, 9, 2]).unwrap();
    let a = g.transpose(a0).unwrap(); // [9, 6, 2]
    let b0 = g.input("b", DType::F32, &[9, 2]).unwrap();
    let b = g.view(b0, &[9, 1], &[36], 36).unwrap(); // the second row
    let c = g.add(a, b).unwrap();
    check(&dev, &case("add transposed src0, view src1", g, c, TOL));

    let mut g = Graph::new();
    let a0 = g.input("a", DType::F16, &[4, 5, 6]).unwrap();
    let a = g.permute(a0, [2, 0, 1, 3]).unwrap(); // [5, 6, 4]
    let b = g.input("b", DType::F16, &[5, 1, 4]).unwrap();
    let c = g.mul(a, b).unwrap();
    check(&dev, &case("mul F16 permuted src0, broadcast F16 src1", g, c, TOL));
}

#[test]
fn unary_ops_and_activations() {
    let Some(dev) = gpu() else { return };
    for dtype in [DType::F32, DType::F16] {
        for shape in [&[1usize][..], &[7, 3], &[1000, 5], &[33, 2, 3, 2]] {
            let ops: Vec<(&str, UnaryBuilder)> = vec![
                ("scale", Box::new(|g, a| g.scale(a, 0.37).unwrap())),
                ("scale_bias", Box::new(|g, a| g.scale_bias(a, -1.5, 0.25).unwrap())),
                ("silu", Box::new(|g, a| g.silu(a).unwrap())),
                ("gelu", Box::new(|g, a| g.gelu(a).unwrap())),
                ("relu", Box::new(|g, a| g.relu(a).unwrap())),
                ("tanh", Box::new(|g, a| g.tanh(a).unwrap())),
                ("sqr", Box::new(|g, a| g.sqr(a).unwrap())),
                (
                    "sqrt(sqr)",
                    Box::new(|g, a| {
                        let s = g.sqr(a).unwrap();
                        g.sqrt(s).unwrap()
                    }),
                ),
                ("clamp", Box::new(|g, a| g.clamp(a, -0.5, 0.25).unwrap())),
            ];
            for (name, op) in ops {
                let mut g = Graph::new();
                let a = g.input("a", dtype, shape).unwrap();
                let c = op(&mut g, a);
                check(&dev, &case(format!("{name} {dtype}{shape:?}"), g, c, TOL));
            }
        }
    }
    // Large inputs: activations must not overflow.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[64]).unwrap();
    let s = g.scale(a, 200.0).unwrap();
    let x = g.gelu(s).unwrap();
    let y = g.silu(x).unwrap();
    let z = g.tanh(s).unwrap();
    let w = g.add(y, z).unwrap();
    check(&dev, &case("gelu, silu, tanh of values up to 200", g, w, TOL));
}

#[test]
fn unary_on_strided_input() {
    let Some(dev) = gpu() else { return };
    for op in [UnaryOp::Silu, UnaryOp::Gelu] {
        let mut g = Graph::new();
        let a0 = g.input("a", DType::F32, &[5, 8, 3]).unwrap();
        let a = g.permute(a0, [1, 2, 0, 3]).unwrap();
        let c = g.unary(a, op).unwrap();
        check(&dev, &case(format!("{} of a permuted tensor", op.name()), g, c, TOL));
    }
}

#[test]
fn soft_max_variants() {
    let Some(dev) = gpu() else { return };
    for ne0 in [1usize, 7, 130, 300] {
        for (mask, mtype) in [(false, DType::F32), (true, DType::F32), (true, DType::F16)] {
            for max_bias in [0.0f32, 8.0] {
                if max_bias > 0.0 && !mask {
                    continue;
                }
                let mut g = Graph::new();
                let a = g.input("a", DType::F32, &[ne0, 3, 5, 2]).unwrap();
                let m = if mask { Some(g.input("mask", mtype, &[ne0, 4]).unwrap()) } else { None };
                let c = g.soft_max_ext(a, m, 0.7, max_bias).unwrap();
                let name = format!(
                    "soft_max ne0={ne0} mask={} max_bias={max_bias}",
                    if mask { mtype.name() } else { "none" }
                );
                check(&dev, &case(name, g, c, TOL));
            }
        }
    }
    // A causal mask with -inf, and a plain soft_max of a transposed input.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[6, 6, 2]).unwrap();
    let m = g.input("mask", DType::F32, &[6, 6]).unwrap();
    let c = g.soft_max_ext(a, Some(m), 0.125, 0.0).unwrap();
    let mut k = case("soft_max causal -inf mask", g, c, TOL);
    let causal: Vec<u8> = (0..36)
        .flat_map(|i| (if i % 6 > i / 6 { f32::NEG_INFINITY } else { 0.0 }).to_le_bytes())
        .collect();
    k.data.insert(m, causal);
    check(&dev, &k);

    let mut g = Graph::new();
    let a0 = g.input("a", DType::F32, &[9, 11]).unwrap();
    let a = g.transpose(a0).unwrap();
    let c = g.soft_max(a).unwrap();
    check(&dev, &case("soft_max transposed input", g, c, TOL));
}

#[test]
fn rms_norm_rows() {
    let Some(dev) = gpu() else { return };
    for ne0 in [1usize, 5, 130, 1000, 4096] {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[ne0, 3, 2]).unwrap();
        let c = g.rms_norm(a, 1e-6).unwrap();
        check(&dev, &case(format!("rms_norm ne0={ne0}"), g, c, TOL));
    }
    let mut g = Graph::new();
    let a0 = g.input("a", DType::F32, &[4, 33, 2]).unwrap();
    let a = g.permute(a0, [1, 0, 2, 3]).unwrap();
    let c = g.rms_norm(a, 1e-5).unwrap();
    check(&dev, &case("rms_norm permuted input", g, c, TOL));
}

#[test]
fn rope_normal_and_neox() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(3);
    for mode in [ROPE_MODE_NORMAL, ROPE_MODE_NEOX] {
        for (ne0, n_dims) in [(64usize, 64usize), (64, 32), (9, 6), (128, 128)] {
            for (freq_base, freq_scale, attn_factor, ff) in [
                (10000.0f32, 1.0f32, 1.0f32, false),
                (500000.0, 0.25, 1.2, false),
                (10000.0, 1.0, 1.0, true),
            ] {
                let n_tokens = 5;
                let mut g = Graph::new();
                let a = g.input("a", DType::F32, &[ne0, 3, n_tokens]).unwrap();
                let pos = g.input("pos", DType::I32, &[n_tokens]).unwrap();
                let f =
                    if ff { Some(g.input("ff", DType::F32, &[n_dims / 2]).unwrap()) } else { None };
                let p = RopeParams {
                    n_dims,
                    mode,
                    freq_base,
                    freq_scale,
                    attn_factor,
                    ..Default::default()
                };
                let c = g.rope_ext(a, pos, f, p).unwrap();
                let name = format!(
                    "rope {} ne0={ne0} n_dims={n_dims} base={freq_base} scale={freq_scale} attn={attn_factor} ff={ff}",
                    if mode == ROPE_MODE_NEOX { "neox" } else { "normal" }
                );
                let mut k = case(name, g, c, TOL);
                let positions: Vec<i32> = (0..n_tokens).map(|_| rng.below(100) as i32).collect();
                k.data.insert(pos, i32_bytes(&positions));
                if let Some(f) = f {
                    let factors: Vec<u8> =
                        (0..n_dims / 2).flat_map(|_| rng.uniform(1.0, 4.0).to_le_bytes()).collect();
                    k.data.insert(f, factors);
                }
                check(&dev, &k);
            }
        }
    }
    // A strided input: a view of the first 8 heads' worth of a fused QKV row.
    let mut g = Graph::new();
    let qkv = g.input("qkv", DType::F32, &[3 * 16 * 4, 5]).unwrap();
    let q = g.view(qkv, &[16, 4, 5], &[64, 768], 0).unwrap();
    let pos = g.input("pos", DType::I32, &[5]).unwrap();
    let c = g.rope(q, pos, 16, ROPE_MODE_NEOX).unwrap();
    let mut k = case("rope neox on a strided view", g, c, TOL);
    k.data.insert(pos, i32_bytes(&[0, 1, 2, 3, 4]));
    check(&dev, &k);
}

#[test]
fn rope_with_yarn() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(5);
    for mode in [ROPE_MODE_NORMAL, ROPE_MODE_NEOX] {
        for (n_dims, ff, freq_scale, ext_factor, n_ctx_orig) in [
            (64usize, false, 0.25f32, 1.0f32, 4096usize),
            (60, true, 0.5, 1.0, 2048),
            (64, false, 0.125, 0.5, 8192),
        ] {
            let (ne0, n_tokens) = (64usize, 4usize);
            let mut g = Graph::new();
            let a = g.input("a", DType::F32, &[ne0, 3, n_tokens]).unwrap();
            let pos = g.input("pos", DType::I32, &[n_tokens]).unwrap();
            let f = if ff { Some(g.input("ff", DType::F32, &[n_dims / 2]).unwrap()) } else { None };
            let p = RopeParams {
                n_dims,
                mode,
                n_ctx_orig,
                freq_base: 10000.0,
                freq_scale,
                ext_factor,
                attn_factor: 1.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
            };
            let c = g.rope_ext(a, pos, f, p).unwrap();
            let name = format!(
                "rope yarn mode {mode} n_dims={n_dims} ff={ff} scale={freq_scale} ext={ext_factor} ctx={n_ctx_orig}"
            );
            let mut k = case(name, g, c, TOL);
            let positions: Vec<i32> = (0..n_tokens).map(|_| rng.below(3000) as i32).collect();
            k.data.insert(pos, i32_bytes(&positions));
            if let Some(f) = f {
                let factors: Vec<u8> =
                    (0..n_dims / 2).flat_map(|_| rng.uniform(1.0, 4.0).to_le_bytes()).collect();
                k.data.insert(f, factors);
            }
            check(&dev, &k);
        }
    }
}

#[test]
fn rope_at_long_positions() {
    // Gemma 3's frequency base and positions far into a long context: angles in the thousands
    // of radians are reduced before sin / cos.
    let Some(dev) = gpu() else { return };
    for mode in [ROPE_MODE_NORMAL, ROPE_MODE_NEOX] {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[256, 2, 4]).unwrap();
        let pos = g.input("pos", DType::I32, &[4]).unwrap();
        let p = RopeParams { n_dims: 256, mode, freq_base: 1e6, ..Default::default() };
        let c = g.rope_ext(a, pos, None, p).unwrap();
        // f32 angles: ulp(32767) = 0.004 rad (the reference computes them in f64).
        let mut k = case(format!("rope mode {mode} base 1e6 at positions to 32767"), g, c, 1e-6);
        k.data.insert(pos, i32_bytes(&[1000, 4097, 20000, 32767]));
        let o = check(&dev, &k);
        assert!(o.max_abs < 1e-2, "max |err| {}", o.max_abs);
    }
}

#[test]
fn gated_linear_units() {
    let Some(dev) = gpu() else { return };
    type GluBuilder = fn(&mut Graph, TensorId, GluOp, bool) -> tessera_core::Result<TensorId>;
    let one: GluBuilder = Graph::glu;
    for op in [GluOp::Swiglu, GluOp::Geglu] {
        for dtype in [DType::F32, DType::F16] {
            for swapped in [false, true] {
                for shape in [&[2usize, 1][..], &[34, 3], &[2048, 2, 2]] {
                    let mut g = Graph::new();
                    let a = g.input("a", dtype, shape).unwrap();
                    let c = one(&mut g, a, op, swapped).unwrap();
                    let name = format!("{} {dtype}{shape:?} swapped {swapped}", op.name());
                    check(&dev, &case(name, g, c, TOL));
                }
            }
            // Two operands; the second of another type.
            let other = if dtype == DType::F32 { DType::F16 } else { DType::F32 };
            let mut g = Graph::new();
            let a = g.input("a", dtype, &[33, 5]).unwrap();
            let b = g.input("b", other, &[33, 5]).unwrap();
            let c = g.glu_split(a, b, op).unwrap();
            check(&dev, &case(format!("{} {dtype} x {other} split", op.name()), g, c, TOL));
        }
        // Strided: the halves of a transposed tensor, and two permuted operands.
        let mut g = Graph::new();
        let a0 = g.input("a", DType::F32, &[5, 12]).unwrap();
        let a = g.transpose(a0).unwrap(); // [12, 5], nb0 = 20
        let c = g.glu(a, op, true).unwrap();
        check(&dev, &case(format!("{} of a transposed tensor", op.name()), g, c, TOL));
        let mut g = Graph::new();
        let a0 = g.input("a", DType::F32, &[4, 6, 3]).unwrap();
        let b0 = g.input("b", DType::F32, &[6, 3, 4]).unwrap();
        let a = g.permute(a0, [2, 0, 1, 3]).unwrap(); // [6, 3, 4]
        let c = g.glu_split(a, b0, op).unwrap();
        check(&dev, &case(format!("{} permuted split", op.name()), g, c, TOL));
    }
}

#[test]
fn layer_norm_rows() {
    let Some(dev) = gpu() else { return };
    for ne0 in [1usize, 5, 130, 1000] {
        let mut g = Graph::new();
        let a0 = g.input("a", DType::F32, &[ne0, 3, 2]).unwrap();
        // An offset far from zero: the mean must be removed before squaring.
        let a = g.scale_bias(a0, 1.0, 30.0).unwrap();
        let c = g.norm(a, 1e-5).unwrap();
        check(&dev, &case(format!("norm ne0={ne0}"), g, c, TOL));
    }
    let mut g = Graph::new();
    let a0 = g.input("a", DType::F32, &[4, 33, 2]).unwrap();
    let a = g.permute(a0, [1, 0, 2, 3]).unwrap();
    let c = g.norm(a, 1e-6).unwrap();
    check(&dev, &case("norm permuted input", g, c, TOL));
}

#[test]
fn i32_copies() {
    let Some(dev) = gpu() else { return };
    let mut g = Graph::new();
    let a0 = g.input("a", DType::I32, &[5, 3]).unwrap();
    let a = g.transpose(a0).unwrap();
    let c = g.cont(a).unwrap();
    let mut k = case("cont I32 transposed", g, c, 0.0);
    let vals: Vec<i32> = (0..15).map(|i| i * 100_003 - 700_000).collect();
    k.data.insert(a0, i32_bytes(&vals));
    check(&dev, &k);
}

#[test]
fn copies_and_conversions() {
    let Some(dev) = gpu() else { return };
    for (from, to) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
    ] {
        // Whole tensor, different shape of equal size.
        let mut g = Graph::new();
        let a = g.input("a", from, &[7, 9, 2]).unwrap();
        let b = g.new_tensor(to, &[21, 6]).unwrap();
        let c = g.cpy(a, b).unwrap();
        check(&dev, &case(format!("cpy {from} [7,9,2] -> {to} [21,6]"), g, c, TOL));

        // Into a strided view of a larger tensor (a KV cache write), odd f16 offsets included.
        let mut g = Graph::new();
        let a = g.input("a", from, &[5, 3]).unwrap();
        let cache = g.new_tensor(to, &[7, 8]).unwrap();
        let es = to.type_size();
        let view = g.view(cache, &[5, 3], &[7 * es * 2], (7 + 1) * es).unwrap();
        let c = g.cpy(a, view).unwrap();
        check(&dev, &case(format!("cpy {from} [5,3] -> strided view of {to} [7,8]"), g, c, TOL));

        // CONT of a transposed tensor, and DUP.
        let mut g = Graph::new();
        let a0 = g.input("a", from, &[5, 7, 3]).unwrap();
        let a = g.transpose(a0).unwrap();
        let c = g.cont(a).unwrap();
        check(&dev, &case(format!("cont {from} transposed [7,5,3]"), g, c, TOL));

        let mut g = Graph::new();
        let a0 = g.input("a", from, &[6, 4, 3]).unwrap();
        let a = g.permute(a0, [2, 0, 1, 3]).unwrap();
        let c = g.dup(a).unwrap();
        check(&dev, &case(format!("dup {from} permuted"), g, c, TOL));
    }
}

#[test]
fn a_transformer_block_chain() {
    let Some(dev) = gpu() else { return };
    // rms_norm -> mul(norm weight) -> Q4_0 / Q8_0 projections -> rope -> attention scores ->
    // masked soft_max -> weighted sum -> silu-gated F16 feed-forward -> residual add.
    let (d, heads, hd, t) = (64usize, 4usize, 16usize, 6usize);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[d, t]).unwrap();
    let nw = g.weight("norm", DType::F32, &[d]).unwrap();
    let wq = g.weight("wq", DType::Q4_0, &[d, d]).unwrap();
    let wk = g.weight("wk", DType::Q8_0, &[d, d]).unwrap();
    let wv = g.weight("wv", DType::F16, &[d, d]).unwrap();
    let w1 = g.weight("w1", DType::F16, &[d, 96]).unwrap();
    let w2 = g.weight("w2", DType::Q8_0, &[96, d]).unwrap();
    let pos = g.input("pos", DType::I32, &[t]).unwrap();
    let mask = g.input("mask", DType::F16, &[t, t]).unwrap();

    let h = g.rms_norm(x, 1e-5).unwrap();
    let h = g.mul(h, nw).unwrap();
    let q = g.mul_mat(wq, h).unwrap();
    let k = g.mul_mat(wk, h).unwrap();
    let v = g.mul_mat(wv, h).unwrap();
    let q = g.reshape(q, &[hd, heads, t]).unwrap();
    let k = g.reshape(k, &[hd, heads, t]).unwrap();
    let q = g.rope(q, pos, hd, ROPE_MODE_NEOX).unwrap();
    let k = g.rope(k, pos, hd, ROPE_MODE_NEOX).unwrap();
    let q = g.permute(q, [0, 2, 1, 3]).unwrap(); // [hd, t, heads]
    let k = g.permute(k, [0, 2, 1, 3]).unwrap();
    let kq = g.mul_mat(k, q).unwrap(); // [t(k), t(q), heads]
    let kq = g.soft_max_ext(kq, Some(mask), 1.0 / (hd as f32).sqrt(), 0.0).unwrap();
    let v = g.reshape(v, &[hd, heads, t]).unwrap();
    let v = g.permute(v, [1, 2, 0, 3]).unwrap(); // [t, hd, heads]
    let v = g.cont(v).unwrap();
    let o = g.mul_mat(v, kq).unwrap(); // [hd, t, heads]
    let o = g.permute(o, [0, 2, 1, 3]).unwrap(); // [hd, heads, t]
    let o = g.cont(o).unwrap();
    let o = g.reshape(o, &[d, t]).unwrap();
    let x2 = g.add(x, o).unwrap();
    let f = g.mul_mat(w1, x2).unwrap();
    let f = g.silu(f).unwrap();
    let f = g.mul_mat(w2, f).unwrap();
    let out = g.add(x2, f).unwrap();
    g.set_output(out).unwrap();

    let mut c = case("transformer block chain", g, out, TOL_MATMUL);
    c.data.insert(pos, i32_bytes(&[0, 1, 2, 3, 4, 5]));
    let causal: Vec<u8> = (0..t * t)
        .flat_map(|i| {
            half::f16::from_f32(if i % t > i / t { f32::NEG_INFINITY } else { 0.0 }).to_le_bytes()
        })
        .collect();
    c.data.insert(mask, causal);
    let o = check(&dev, &c);
    assert!(o.nmse < 1e-9, "chain nmse {}", o.nmse);
}

/// The kernels compiled from their `shader-f16` sources (hardware F16 decoding) and from the
/// integer ones give the very same bits, on a case for every kind of F16 data the kernels
/// decode: element-wise operands, F16 weights and activations, block scales, F16 K / V and
/// masks, F16 destinations. (The other tests run on the default device, which uses
/// `shader-f16` where the adapter has it, as lavapipe does.)
#[test]
fn shader_f16_and_integer_kernels_agree_bit_for_bit() {
    let (Some(dev), Some(int)) = (gpu(), gpu_int()) else {
        eprintln!("the adapter has no shader-f16: the integer kernels are the only ones");
        return;
    };
    assert!(dev.uses_shader_f16() && !int.uses_shader_f16());
    let mut cases = Vec::new();
    let mut g = Graph::new();
    let a = g.input("a", DType::F16, &[33, 5]).unwrap();
    let b = g.input("b", DType::F16, &[33, 1]).unwrap();
    let c = g.add(a, b).unwrap();
    let d = g.new_tensor(DType::F16, &[33, 5]).unwrap();
    let e = g.cpy(c, d).unwrap();
    cases.push(case("add F16 + F16 -> F16", g, e, TOL));
    for (dtype, act, n) in [
        (DType::F16, DType::F32, 1),
        (DType::F16, DType::F32, 16),
        (DType::F32, DType::F16, 3),
        (DType::Q4_K, DType::F32, 1),
        (DType::Q4_K, DType::F32, 16),
        (DType::Q5_0, DType::F32, 2),
    ] {
        let k = dtype.block_size().max(64);
        let mut g = Graph::new();
        let w = g.weight("w", dtype, &[k, 40]).unwrap();
        let x = g.input("x", act, &[k, n]).unwrap();
        let y = g.mul_mat(w, x).unwrap();
        cases.push(case(format!("mul_mat {dtype} x {act} N={n}"), g, y, TOL_MATMUL));
    }
    for dtype in [DType::F16, DType::Q6_K] {
        let mut g = Graph::new();
        let w = g.weight("w", dtype, &[256, 6]).unwrap();
        let i = g.input("i", DType::I32, &[3]).unwrap();
        let y = g.get_rows(w, i).unwrap();
        let mut k = case(format!("get_rows {dtype}"), g, y, 0.0);
        k.data.insert(i, i32_bytes(&[5, 0, 2]));
        cases.push(k);
    }
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[20, 3, 2]).unwrap();
    let m = g.input("m", DType::F16, &[20, 3]).unwrap();
    let y = g.soft_max_ext(x, Some(m), 0.5, 0.0).unwrap();
    cases.push(case("soft_max F16 mask", g, y, TOL));
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[64, 2, 4]).unwrap();
    let kk = g.input("k", DType::F16, &[64, 30, 2]).unwrap();
    let v = g.input("v", DType::F16, &[64, 30, 2]).unwrap();
    let m = g.input("m", DType::F16, &[30, 2]).unwrap();
    let p = tessera_core::AttnParams { scale: 0.125, ..Default::default() };
    let y = g.flash_attn_ext(q, kk, v, Some(m), p).unwrap();
    cases.push(case("flash_attn_ext F16 K, V, mask", g, y, TOL));
    let mut g = Graph::new();
    let cache = g.input("cache", DType::F16, &[16, 8]).unwrap();
    let rows = g.input("rows", DType::F32, &[16, 2]).unwrap();
    let i = g.input("i", DType::I32, &[2]).unwrap();
    let y = g.set_rows(cache, rows, i).unwrap();
    let mut k = case("set_rows into F16", g, y, 0.0);
    k.data.insert(i, i32_bytes(&[6, 1]));
    cases.push(k);
    for k in &cases {
        check(&dev, k);
        assert!(output_on(&dev, k) == output_on(&int, k), "{}: the variants differ", k.name);
    }
}
