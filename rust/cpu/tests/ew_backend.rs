//! The CPU backend's vectorized element-wise ops (SiLU, GELU, SIGMOID, SOFTPLUS, ADD, MUL,
//! RMS_NORM, SOFT_MAX, ROPE, SWIGLU / GEGLU), SSM_CONV and GATED_DELTA_NET against the scalar
//! reference `compute_graph`, on odd shapes, broadcasts, masks, ALiBi, YaRN, strided and
//! permuted inputs and in-place memory, with 1 and 3 threads; and weights placed in CPU_REPACK
//! by the scheduler.

mod common;

use common::{Rng, R};
use half::f16;
use tessera_core::alloc::GraphAllocator;
use tessera_core::backend::Backend;
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::tensor_data::{get_f32, set_f32, set_tensor};
use tessera_core::{DType, Graph, RopeParams, TensorId};
use tessera_cpu::buffer::{allocate_all, CpuBufferType};
use tessera_cpu::{reference, CpuBackend};

/// NMSE allowed between the vectorized rows and the f64 reference.
const TOL: f64 = 1e-7;

/// Values of one input: F32 values, written as the input's type (F32, F16 or I32).
type Inputs = Vec<(TensorId, Vec<f32>)>;

fn write(g: &Graph, id: TensorId, v: &[f32]) -> R {
    match g.tensor(id).dtype() {
        DType::F32 => set_f32(g, id, v)?,
        DType::F16 => {
            let b: Vec<u8> = v.iter().flat_map(|&x| f16::from_f32(x).to_le_bytes()).collect();
            set_tensor(g, id, &b)?
        }
        DType::I32 => {
            let b: Vec<u8> = v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect();
            set_tensor(g, id, &b)?
        }
        other => panic!("no test writer for {other}"),
    }
    Ok(())
}

/// NMSE of `got` against `want`, where NaN must match NaN and zero must match zero.
fn compare(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (mut num, mut den) = (0f64, 0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}: element {i}: got {g}, want NaN");
            continue;
        }
        assert!(g.is_finite(), "{what}: element {i}: got {g}, want {w}");
        // Exact zeros stay exact (masked softmax entries, products with zero).
        assert!(w != 0.0 || g == 0.0, "{what}: element {i}: got {g}, want 0");
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    let e = if den == 0.0 { num } else { num / den };
    assert!(e <= TOL, "{what}: nmse {e:e} > {TOL:e}");
}

/// The graph of `build` (inputs from seed `seed`) computed by the reference, every tensor in
/// memory of its own: the output's values.
fn reference_output<F>(build: &F, seed: u64) -> R<Vec<f32>>
where
    F: Fn(&mut Graph, &mut Rng) -> R<(Inputs, TensorId)>,
{
    let mut g = Graph::new();
    let (inputs, out) = build(&mut g, &mut Rng::new(seed))?;
    allocate_all(&mut g)?;
    for (id, v) in &inputs {
        write(&g, *id, v)?;
    }
    reference::compute_graph(&g, &|| false)?;
    Ok(get_f32(&g, out)?)
}

/// The graph of `build` with memory planned by the graph allocator (element-wise nodes may
/// run in place) and its inputs written; and its output.
fn planned_graph<F>(build: &F, seed: u64) -> R<(Graph, TensorId)>
where
    F: Fn(&mut Graph, &mut Rng) -> R<(Inputs, TensorId)>,
{
    let mut g = Graph::new();
    let (inputs, out) = build(&mut g, &mut Rng::new(seed))?;
    GraphAllocator::new(CpuBufferType::shared()).alloc_graph(&mut g)?;
    for (id, v) in &inputs {
        write(&g, *id, v)?;
    }
    Ok((g, out))
}

/// Builds a graph with `build` twice: computes one copy with the reference (every tensor in
/// memory of its own) and the other with a CPU backend of `threads` threads (memory planned by
/// the graph allocator, so element-wise nodes may run in place); compares the output. Returns
/// how many nodes the backend vectorized.
fn check<F>(what: &str, threads: usize, build: F) -> R<u64>
where
    F: Fn(&mut Graph, &mut Rng) -> R<(Inputs, TensorId)>,
{
    let want = reference_output(&build, 7)?;
    let (g2, out2) = planned_graph(&build, 7)?;
    let mut cpu = CpuBackend::new(Some(threads))?;
    cpu.graph_compute(&g2)?;
    compare(&format!("{what}, {threads} threads"), &get_f32(&g2, out2)?, &want);
    Ok(cpu.vectorized_nodes())
}

/// Shapes with ne0 = 1, 7, 33 and 4096, some large enough to be split over threads.
const SHAPES: [[usize; 4]; 6] =
    [[1, 5, 1, 1], [7, 3, 2, 1], [33, 9, 4, 3], [33, 700, 1, 1], [4096, 6, 1, 1], [4096, 1, 1, 1]];

fn input(
    g: &mut Graph,
    rng: &mut Rng,
    name: &str,
    ne: &[usize],
    lo: f32,
    hi: f32,
) -> R<(TensorId, Vec<f32>)> {
    let id = g.input(name, DType::F32, ne)?;
    let n: usize = ne.iter().product();
    Ok((id, rng.vec(n, lo, hi)))
}

#[test]
fn unary_ops_match_the_reference() -> R {
    for threads in [1, 3] {
        for ne in SHAPES {
            for name in ["silu", "gelu", "sigmoid", "softplus"] {
                let n = check(&format!("{name} {ne:?}"), threads, |g, rng| {
                    // Past softplus's threshold (20) and where sigmoid's result is tiny.
                    let r = if name.starts_with('s') && name != "silu" { 30.0 } else { 8.0 };
                    let (x, xv) = input(g, rng, "x", &ne, -r, r)?;
                    let y = match name {
                        "silu" => g.silu(x)?,
                        "gelu" => g.gelu(x)?,
                        "sigmoid" => g.sigmoid(x)?,
                        _ => g.softplus(x)?,
                    };
                    g.set_output(y)?;
                    Ok((vec![(x, xv)], y))
                })?;
                assert_eq!(n, 1, "{name} {ne:?} vectorized");
            }
        }
    }
    Ok(())
}

#[test]
fn gated_linear_units_match_the_reference() -> R {
    use tessera_core::GluOp;
    for threads in [1, 3] {
        for ne in SHAPES {
            for op in [GluOp::Swiglu, GluOp::Geglu] {
                for swapped in [false, true] {
                    let what = format!("{op:?} of halves {ne:?} swapped {swapped}");
                    let n = check(&what, threads, |g, rng| {
                        let ne2 = [2 * ne[0], ne[1], ne[2], ne[3]];
                        let (x, xv) = input(g, rng, "x", &ne2, -6.0, 6.0)?;
                        let y = g.glu(x, op, swapped)?;
                        g.set_output(y)?;
                        Ok((vec![(x, xv)], y))
                    })?;
                    assert_eq!(n, 1, "{what}");
                }
                let what = format!("{op:?} of two {ne:?}");
                let n = check(&what, threads, |g, rng| {
                    let (x, xv) = input(g, rng, "x", &ne, -6.0, 6.0)?;
                    let (gt, gv) = input(g, rng, "g", &ne, -2.0, 2.0)?;
                    let y = g.glu_split(x, gt, op)?;
                    g.set_output(y)?;
                    Ok((vec![(x, xv), (gt, gv)], y))
                })?;
                assert_eq!(n, 1, "{what}");
            }
        }
    }
    Ok(())
}

#[test]
fn add_and_mul_with_broadcast_match_the_reference() -> R {
    for threads in [1, 3] {
        for ne in SHAPES {
            let bshapes = [ne, [ne[0], 1, 1, 1], [ne[0], 1, ne[2], ne[3]]];
            for bne in bshapes {
                for mul in [false, true] {
                    let what = format!("{} {ne:?} by {bne:?}", if mul { "mul" } else { "add" });
                    let n = check(&what, threads, |g, rng| {
                        let (a, av) = input(g, rng, "a", &ne, -4.0, 4.0)?;
                        let (b, bv) = input(g, rng, "b", &bne, -4.0, 4.0)?;
                        let y = if mul { g.mul(a, b)? } else { g.add(a, b)? };
                        g.set_output(y)?;
                        Ok((vec![(a, av), (b, bv)], y))
                    })?;
                    assert_eq!(n, 1, "{what} vectorized");
                }
            }
        }
        // A row repeated along dim 0 (64 = 2 x 32) is vectorized in pieces; a scalar per row
        // (ne0 = 1) goes to the reference.
        for (bne0, fast) in [(32, 1), (1, 0)] {
            let what = format!("add [64, 300] by [{bne0}, 300]");
            let n = check(&what, threads, |g, rng| {
                let (a, av) = input(g, rng, "a", &[64, 300], -4.0, 4.0)?;
                let (b, bv) = input(g, rng, "b", &[bne0, 300], -4.0, 4.0)?;
                let y = g.add(a, b)?;
                g.set_output(y)?;
                Ok((vec![(a, av), (b, bv)], y))
            })?;
            assert_eq!(n, fast, "{what}");
        }
    }
    Ok(())
}

#[test]
fn rms_norm_matches_the_reference() -> R {
    for threads in [1, 3] {
        for ne in SHAPES {
            for eps in [1e-6, 1e-5, 0.5] {
                let n = check(&format!("rms_norm {ne:?} eps {eps}"), threads, |g, rng| {
                    let (x, xv) = input(g, rng, "x", &ne, -3.0, 5.0)?;
                    let y = g.rms_norm(x, eps)?;
                    g.set_output(y)?;
                    Ok((vec![(x, xv)], y))
                })?;
                assert_eq!(n, 1);
            }
        }
    }
    Ok(())
}

/// A causal mask `[ne0, rows]`: `-inf` where `i0 > i1 + ne0 - rows`, else small values.
fn causal_mask(ne0: usize, rows: usize, rng: &mut Rng) -> Vec<f32> {
    let mut m = Vec::with_capacity(ne0 * rows);
    for i1 in 0..rows {
        for i0 in 0..ne0 {
            let visible = i0 + rows <= i1 + ne0;
            m.push(if visible { rng.uniform(-1.0, 1.0) } else { f32::NEG_INFINITY });
        }
    }
    m
}

#[test]
fn soft_max_with_scale_mask_and_alibi_matches_the_reference() -> R {
    // Five heads: ALiBi slopes of both of ggml's series (m0 for heads 0-3, m1 for head 4).
    let shapes = SHAPES.iter().copied().chain([[40, 3, 5, 2]]);
    for threads in [1, 3] {
        for ne in shapes.clone() {
            let n = check(&format!("soft_max {ne:?}"), threads, |g, rng| {
                let (x, xv) = input(g, rng, "x", &ne, -10.0, 10.0)?;
                let y = g.soft_max(x)?;
                g.set_output(y)?;
                Ok((vec![(x, xv)], y))
            })?;
            assert_eq!(n, 1);
            for (mask_type, max_bias) in [(DType::F32, 0.0), (DType::F16, 0.0), (DType::F32, 8.0)] {
                let what = format!("soft_max {ne:?} mask {mask_type} max_bias {max_bias}");
                let n = check(&what, threads, |g, rng| {
                    let (x, xv) = input(g, rng, "x", &ne, -10.0, 10.0)?;
                    // One more mask row than needed, broadcast over dims 2 and 3.
                    let m = g.input("mask", mask_type, &[ne[0], ne[1] + 1])?;
                    let mv = causal_mask(ne[0], ne[1] + 1, rng);
                    let y = g.soft_max_ext(x, Some(m), 0.125, max_bias)?;
                    g.set_output(y)?;
                    Ok((vec![(x, xv), (m, mv)], y))
                })?;
                assert_eq!(n, 1, "{what}");
            }
        }
    }
    // A fully masked row is NaN, as in the reference.
    let n = check("soft_max fully masked row", 1, |g, rng| {
        let (x, xv) = input(g, rng, "x", &[40, 3], -1.0, 1.0)?;
        let m = g.input("mask", DType::F32, &[40, 3])?;
        let mut mv = rng.vec(120, -1.0, 1.0);
        mv[40..80].fill(f32::NEG_INFINITY);
        let y = g.soft_max_ext(x, Some(m), 1.0, 0.0)?;
        g.set_output(y)?;
        Ok((vec![(x, xv), (m, mv)], y))
    })?;
    assert_eq!(n, 1);
    Ok(())
}

#[test]
fn rope_normal_neox_and_yarn_match_the_reference() -> R {
    let yarn = RopeParams {
        n_ctx_orig: 4096,
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 1.2,
        beta_fast: 32.0,
        beta_slow: 1.0,
        ..Default::default()
    };
    // (ne0, n_dims, heads, tokens)
    let shapes =
        [(7, 6, 3, 2), (33, 32, 5, 3), (128, 128, 8, 5), (80, 64, 3, 70), (4096, 4096, 1, 2)];
    for threads in [1, 3] {
        for (ne0, n_dims, heads, tokens) in shapes {
            for mode in [ROPE_MODE_NORMAL, ROPE_MODE_NEOX] {
                for (label, base, factors) in
                    [("plain", RopeParams::default(), false), ("yarn", yarn, true)]
                {
                    let p = RopeParams { n_dims, mode, freq_base: 10000.0, ..base };
                    let what = format!(
                        "rope {label} mode {mode} [{ne0}, {heads}, {tokens}] n_dims {n_dims}"
                    );
                    let n = check(&what, threads, |g, rng| {
                        let (x, xv) = input(g, rng, "x", &[ne0, heads, tokens], -2.0, 2.0)?;
                        let pos = g.input("pos", DType::I32, &[tokens])?;
                        let pv: Vec<f32> = (0..tokens).map(|_| rng.below(5000) as f32).collect();
                        let mut inputs = vec![(x, xv), (pos, pv)];
                        let ff = if factors {
                            let (f, fv) = input(g, rng, "ff", &[n_dims / 2], 1.0, 4.0)?;
                            inputs.push((f, fv));
                            Some(f)
                        } else {
                            None
                        };
                        let y = g.rope_ext(x, pos, ff, p)?;
                        g.set_output(y)?;
                        Ok((inputs, y))
                    })?;
                    assert_eq!(n, 1, "{what}");
                }
            }
        }
    }
    Ok(())
}

#[test]
fn strided_rows_are_vectorized_and_permuted_rows_fall_back() -> R {
    for threads in [1, 3] {
        // Dims 1 and 2 swapped: rows stay contiguous, read through strides.
        let n = check("silu of a [33, 5, 4] with dims 1, 2 swapped", threads, |g, rng| {
            let (x, xv) = input(g, rng, "x", &[33, 5, 4], -3.0, 3.0)?;
            let p = g.permute(x, [0, 2, 1, 3])?;
            let y = g.silu(p)?;
            let z = g.add(y, p)?;
            g.set_output(z)?;
            Ok((vec![(x, xv)], z))
        })?;
        assert_eq!(n, 2);
        // Dims 0 and 1 swapped: values of a row are strided, the reference computes.
        let n = check("silu, rms_norm and add of a transposed [33, 7]", threads, |g, rng| {
            let (x, xv) = input(g, rng, "x", &[33, 7], -3.0, 3.0)?;
            let t = g.transpose(x)?;
            let y = g.silu(t)?;
            let r = g.rms_norm(t, 1e-5)?;
            let z = g.add(t, y)?;
            let o = g.add(z, r)?;
            g.set_output(o)?;
            Ok((vec![(x, xv)], o))
        })?;
        // Only the last ADD (of two computed, contiguous tensors) is vectorized.
        assert_eq!(n, 1);
    }
    Ok(())
}

/// SSM_CONV (LFM2's short convolution): its window contiguous per channel (a CONCAT's result, as
/// LFM2's graph feeds it) and transposed (tokens along dim 1, as the harness feeds it), with
/// shapes small and large enough to be split over threads, one token and several (past the
/// kernel's runs of 64 tokens and blocks of 16 channels).
#[test]
fn ssm_conv_matches_the_reference() -> R {
    for threads in [1, 3] {
        for (d_conv, d_inner, n_t, n_s) in
            [(3, 5, 1, 1), (4, 7, 6, 2), (3, 1024, 1, 1), (3, 300, 40, 2), (4, 37, 131, 2)]
        {
            for transposed in [false, true] {
                let what = format!(
                    "ssm_conv {d_conv} taps, {d_inner} x {n_t} x {n_s}, transposed {transposed}"
                );
                let n = check(&what, threads, |g, rng| {
                    let w = d_conv - 1 + n_t;
                    let (x, xv) = if transposed {
                        input(g, rng, "x", &[d_inner, w, n_s], -2.0, 2.0)?
                    } else {
                        input(g, rng, "x", &[w, d_inner, n_s], -2.0, 2.0)?
                    };
                    let (c, cv) = input(g, rng, "c", &[d_conv, d_inner], -1.0, 1.0)?;
                    let sx = if transposed { g.transpose(x)? } else { x };
                    let y = g.ssm_conv(sx, c)?;
                    g.set_output(y)?;
                    Ok((vec![(x, xv), (c, cv)], y))
                })?;
                assert_eq!(n, 1, "{what} vectorized");
            }
        }
    }
    Ok(())
}

#[test]
fn in_place_chains_match_the_reference() -> R {
    for threads in [1, 3] {
        let n = check("a chain of in-place element-wise ops", threads, |g, rng| {
            let (x, xv) = input(g, rng, "x", &[4096, 8], -2.0, 2.0)?;
            let (w, wv) = input(g, rng, "w", &[4096], 0.5, 1.5)?;
            let mut cur = g.rms_norm(x, 1e-6)?;
            cur = g.mul(cur, w)?;
            cur = g.silu(cur)?;
            cur = g.add(cur, x)?;
            cur = g.gelu(cur)?;
            cur = g.soft_max(cur)?;
            g.set_output(cur)?;
            Ok((vec![(x, xv), (w, wv)], cur))
        })?;
        assert_eq!(n, 6);
    }
    Ok(())
}

/// A Q4_0 graph through the scheduler: `silu(W x) + get_rows(E, idx)`, computed with the
/// registration's extra buffer types (W goes to CPU_REPACK when the tier has repacked kernels)
/// and without; returns the output, the buffer type names of W and E, and W read back.
fn q4_graph(extra: bool) -> R<(Vec<f32>, String, String, Vec<u8>)> {
    use tessera_core::registry::Registry;
    use tessera_core::sched::Scheduler;
    let (k, m, n) = (96, 48, 5);
    let mut g = Graph::new();
    let w = g.weight("w", DType::Q4_0, &[k, m])?;
    let e = g.weight("e", DType::Q4_0, &[k, 16])?;
    let x = g.input("x", DType::F32, &[k, n])?;
    let idx = g.input("idx", DType::I32, &[n])?;
    let y = g.mul_mat(w, x)?;
    let y = g.silu(y)?;
    let rows = g.get_rows(e, idx)?;
    let r = g.mul_mat(e, rows)?;
    let y = g.add(y, r)?;
    g.set_output(y)?;
    let mut s = Scheduler::new(vec![Box::new(CpuBackend::new(Some(3))?)])?;
    if extra {
        let mut reg = Registry::new();
        reg.register(tessera_cpu::CpuBackendReg::shared());
        s.use_registry_extra_buffer_types(&reg);
    }
    s.alloc_graph(&mut g)?;
    let mut rng = Rng::new(11);
    let wq = tessera_core::quant::quantize_to_vec(DType::Q4_0, &rng.vec(k * m, -1.0, 1.0))?;
    let eq = tessera_core::quant::quantize_to_vec(DType::Q4_0, &rng.vec(k * 16, -1.0, 1.0))?;
    set_tensor(&g, w, &wq)?;
    set_tensor(&g, e, &eq)?;
    write(&g, x, &rng.vec(k * n, -1.0, 1.0))?;
    write(&g, idx, &(0..n).map(|i| (i * 3 % 16) as f32).collect::<Vec<_>>())?;
    s.compute()?;
    let back = tessera_core::tensor_data::get_tensor(&g, w)?;
    assert_eq!(back, wq, "W reads back as written");
    let name = |id| g.storage_of(id).map(|s| s.buffer.name()).unwrap_or_default();
    Ok((get_f32(&g, y)?, name(w), name(e), back))
}

#[test]
fn q4_0_weights_are_placed_in_cpu_repack_automatically_with_the_same_result() -> R {
    let (plain, w_plain, _, _) = q4_graph(false)?;
    let (auto, w_auto, e_auto, _) = q4_graph(true)?;
    assert_eq!(w_plain, "CPU");
    let repack = tessera_cpu::kernels::repack::repack_buffer_type().is_some();
    assert_eq!(w_auto, if repack { "CPU_REPACK" } else { "CPU" });
    // E is also read by GET_ROWS: it stays plain.
    assert_eq!(e_auto, "CPU");
    // The repacked kernel accumulates in another order: equal to about 1e-6.
    compare("Q4_0 with weights auto-placed vs plain", &auto, &plain);
    Ok(())
}

/// Bytes of a Q4_0 row of `k` values.
fn w_row(k: usize) -> usize {
    k / 32 * 18
}

/// MUL_MAT reads repacked weights and GET_ROWS a repacked table (a tied output's embeddings,
/// stored once): the rows come out equal to the plain rows dequantized; any other op is refused.
#[test]
fn only_mul_mat_and_get_rows_may_read_repacked_weights() -> R {
    let Some(bt) = tessera_cpu::kernels::repack::repack_buffer_type() else {
        return Ok(()); // No repacked kernels on this CPU: nothing is ever repacked.
    };
    let (k, m) = (64, 16);
    let mut g = Graph::new();
    let w = g.weight("w", DType::Q4_0, &[k, m])?;
    let x = g.input("x", DType::F32, &[k, 2])?;
    let idx = g.input("idx", DType::I32, &[2])?;
    let y = g.mul_mat(w, x)?;
    let rows = g.get_rows(w, idx)?;
    let copied = g.dup(w)?;
    // A view of part of the table: its bytes are part of a repacked group.
    let half = g.view(w, &[k, m / 2], &[w_row(k)], 0)?;
    let half_rows = g.get_rows(half, idx)?;
    tessera_core::alloc::place_sequentially(&mut g, &[w], bt.as_ref())?;
    allocate_all(&mut g)?;
    let mut rng = Rng::new(3);
    let wq = tessera_core::quant::quantize_to_vec(DType::Q4_0, &rng.vec(k * m, -1.0, 1.0))?;
    set_tensor(&g, w, &wq)?;
    write(&g, x, &rng.vec(k * 2, -1.0, 1.0))?;
    // Rows in two groups of every layout, one past the first group of 8.
    write(&g, idx, &[1.0, 13.0])?;
    let mut cpu = CpuBackend::new(Some(1))?;
    cpu.compute_nodes(&g, &[y])?;
    cpu.compute_nodes(&g, &[rows])?;
    let mut plain = vec![0f32; k * m];
    tessera_core::quant::dequantize_row(DType::Q4_0, &wq, &mut plain)?;
    let want: Vec<f32> = [1, 13].iter().flat_map(|&r| plain[r * k..][..k].to_vec()).collect();
    assert_eq!(get_f32(&g, rows)?, want, "GET_ROWS of the repacked table");
    for (node, what) in [(copied, "DUP of the table"), (half_rows, "GET_ROWS of a view")] {
        let err = cpu.compute_nodes(&g, &[node]).expect_err(what);
        assert!(err.to_string().contains("only MUL_MAT and GET_ROWS"), "{what}: {err}");
    }
    Ok(())
}

/// Sessions computing at once on the process's shared pool (each backend keeps its pool
/// helpers for a whole graph compute): four threads, each with a backend of its own thread
/// count, compute a matmul followed by element-wise ops many times; every result matches the
/// reference.
#[test]
fn sessions_computing_at_once_share_the_pool() -> R {
    let build = |g: &mut Graph, rng: &mut Rng| -> R<(Inputs, TensorId)> {
        let (w, wv) = input(g, rng, "w", &[96, 700], -1.0, 1.0)?;
        let (x, xv) = input(g, rng, "x", &[96, 5], -1.0, 1.0)?;
        let (b, bv) = input(g, rng, "b", &[700, 5], -1.0, 1.0)?;
        let y = g.mul_mat(w, x)?;
        let y = g.silu(y)?;
        let y = g.add(y, b)?;
        let y = g.rms_norm(y, 1e-6)?;
        g.set_output(y)?;
        Ok((vec![(w, wv), (x, xv), (b, bv)], y))
    };
    let want = reference_output(&build, 3)?;
    std::thread::scope(|s| {
        let runs: Vec<_> = [2usize, 3, 2, 1]
            .into_iter()
            .map(|threads| {
                let (build, want) = (&build, &want);
                s.spawn(move || -> Result<(), String> {
                    let session = || -> R {
                        let (g, out) = planned_graph(build, 3)?;
                        let mut cpu = CpuBackend::new(Some(threads))?;
                        for i in 0..40 {
                            cpu.graph_compute(&g)?;
                            compare(
                                &format!("{threads} threads, run {i}"),
                                &get_f32(&g, out)?,
                                want,
                            );
                        }
                        Ok(())
                    };
                    session().map_err(|e| e.to_string())
                })
            })
            .collect();
        runs.into_iter().try_for_each(|r| r.join().expect("a session thread panicked"))
    })?;
    Ok(())
}

/// GATED_DELTA_NET (Qwen 3.5's linear attention): q and k as strided views of one wider tensor
/// (as the graph takes them from the convolution's output), several tokens (more than one run
/// of the kernel) and sequences, two or three value heads per key head, one decay per head or
/// per key dim, head sizes of 16 to 128 and an odd 33, with enough heads to split over threads.
#[test]
fn gated_delta_net_matches_the_reference() -> R {
    for threads in [1, 3] {
        for (s_v, h_k, h_v, n_t, n_s, per_dim) in [
            (16, 2, 4, 1, 1, false),
            (16, 2, 4, 7, 2, true),
            (32, 8, 16, 5, 1, false),
            // Past the backend's runs of 16 tokens, S not a multiple of the lanes or groups.
            (33, 1, 3, 37, 2, true),
            (128, 2, 4, 20, 1, false),
        ] {
            let what = format!("gated_delta_net S {s_v}, heads {h_k}/{h_v}, {n_t} x {n_s}");
            let n = check(&what, threads, |g, rng| {
                let w = 2 * s_v * h_k + s_v * h_v;
                let (x, xv) = input(g, rng, "x", &[w, n_t, n_s], -1.0, 1.0)?;
                let row = g.tensor(x).nb()[1];
                let q = g.view(x, &[s_v, h_k, n_t, n_s], &[s_v * 4, row, row * n_t], 0)?;
                let k =
                    g.view(x, &[s_v, h_k, n_t, n_s], &[s_v * 4, row, row * n_t], s_v * h_k * 4)?;
                let v = g.view(
                    x,
                    &[s_v, h_v, n_t, n_s],
                    &[s_v * 4, row, row * n_t],
                    2 * s_v * h_k * 4,
                )?;
                let gw = if per_dim { s_v } else { 1 };
                let (gate, gv) = input(g, rng, "g", &[gw, h_v, n_t, n_s], -1.0, 0.0)?;
                let (beta, bv) = input(g, rng, "beta", &[1, h_v, n_t, n_s], 0.0, 1.0)?;
                let (st, sv) = input(g, rng, "state", &[s_v, s_v, h_v, n_s], -0.5, 0.5)?;
                let y = g.gated_delta_net(q, k, v, gate, beta, st)?;
                g.set_output(y)?;
                Ok((vec![(x, xv), (gate, gv), (beta, bv), (st, sv)], y))
            })?;
            assert_eq!(n, 1, "{what} vectorized");
        }
    }
    Ok(())
}
