//! Outputs that are views of intermediate results keep their memory (issue 12): the graph
//! allocator must treat the memory owner of an output view as live to the end of the graph,
//! through any chain of views, or a later node overwrites it before the caller reads it.

mod common;

use common::{assert_nmse, Rng};
use half::f16;
use tessera_core::backend::Backend;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_tensor_dense, set_f32, set_tensor};
use tessera_core::{DType, Graph, TensorId};
use tessera_cpu::buffer::allocate_all;
use tessera_cpu::{reference, CpuBackend};

fn scheduler(threads: usize) -> Scheduler {
    let cpu: Box<dyn Backend> = Box::new(CpuBackend::new(Some(threads)).unwrap());
    Scheduler::new(vec![cpu]).unwrap()
}

/// The values of `id` in logical order, read through its strides.
fn dense_f32(g: &Graph, id: TensorId) -> Vec<f32> {
    get_tensor_dense(g, id)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The issue's graph: `y = 2x` seen through `view(y)`, an output, while `c = 5 tanh(x^2)` is
/// computed after `y`'s last reader.
fn issue_graph(view: impl Fn(&mut Graph, TensorId) -> TensorId) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8, 4]).unwrap();
    let y = g.scale(x, 2.0).unwrap();
    let v = view(&mut g, y);
    g.set_output(v).unwrap();
    let a = g.sqr(x).unwrap();
    let b = g.tanh(a).unwrap();
    let c = g.scale(b, 5.0).unwrap();
    g.set_output(c).unwrap();
    (g, x, v)
}

/// `2x` in the logical order of the view `v` of `y` (shape `[8, 4]`), from its strides.
fn expected_view(g: &Graph, v: TensorId, xs: &[f32]) -> Vec<f32> {
    let (_, offs) = g.view_root(v);
    let l = g.tensor(v).layout;
    let mut out = Vec::new();
    for i3 in 0..l.ne[3] {
        for i2 in 0..l.ne[2] {
            for i1 in 0..l.ne[1] {
                for i0 in 0..l.ne[0] {
                    let byte = offs + i0 * l.nb[0] + i1 * l.nb[1] + i2 * l.nb[2] + i3 * l.nb[3];
                    out.push(2.0 * xs[byte / 4]);
                }
            }
        }
    }
    out
}

type ViewFn = fn(&mut Graph, TensorId) -> TensorId;

fn views() -> Vec<(&'static str, ViewFn)> {
    vec![
        ("RESHAPE", |g, y| g.reshape(y, &[32]).unwrap()),
        ("VIEW offset 32", |g, y| g.view(y, &[8, 2], &[32], 32).unwrap()),
        ("VIEW strided", |g, y| g.view(y, &[3, 2], &[64], 8).unwrap()),
        ("PERMUTE", |g, y| {
            let r = g.reshape(y, &[4, 2, 4]).unwrap();
            g.permute(r, [2, 0, 1, 3]).unwrap()
        }),
        ("TRANSPOSE", |g, y| g.transpose(y).unwrap()),
        ("view of a view of a view", |g, y| {
            let t = g.transpose(y).unwrap();
            let v = g.view(t, &[2, 4], &[32], 4).unwrap();
            g.transpose(v).unwrap()
        }),
    ]
}

#[test]
fn an_output_view_of_an_intermediate_keeps_its_values() {
    let xs: Vec<f32> = (0..32).map(|i| i as f32 * 0.25 - 3.0).collect();
    for threads in [1, 2] {
        for (name, view) in views() {
            let (mut g, x, v) = issue_graph(view);
            let mut sched = scheduler(threads);
            sched.alloc_graph(&mut g).unwrap();
            set_f32(&g, x, &xs).unwrap();
            sched.compute().unwrap();
            // Doubling is exact, so the values must be exactly 2x.
            assert_eq!(dense_f32(&g, v), expected_view(&g, v, &xs), "{name}, {threads} threads");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random graphs: every output equals the same graph with every tensor an output, and the
// scalar reference.

#[derive(Clone, Copy, Debug)]
enum Step {
    Scale(usize, f32),
    Sqr(usize),
    Tanh(usize),
    Silu(usize),
    Add(usize, usize),
    Mul(usize, usize),
    Reshape(usize),
    Transpose(usize),
    Permute(usize),
    ViewRows(usize),
    Cont(usize),
}

/// A random recipe over one input of shape [8, 4, 2]: element-wise ops, binary ops between
/// tensors of equal shape, and views (RESHAPE, TRANSPOSE, PERMUTE, VIEW of rows, CONT).
fn recipe(rng: &mut Rng, len: usize) -> Vec<Step> {
    let mut shapes: Vec<[usize; 4]> = vec![[8, 4, 2, 1]];
    let mut contiguous = vec![true];
    let mut steps = Vec::new();
    while steps.len() < len {
        let a = rng.below(shapes.len());
        let step = match rng.below(11) {
            0 => Step::Scale(a, rng.uniform(-2.0, 2.0)),
            1 => Step::Sqr(a),
            2 => Step::Tanh(a),
            3 => Step::Silu(a),
            k @ (4 | 5) => {
                let same: Vec<usize> =
                    (0..shapes.len()).filter(|&i| shapes[i] == shapes[a]).collect();
                let b = same[rng.below(same.len())];
                if k == 4 {
                    Step::Add(a, b)
                } else {
                    Step::Mul(a, b)
                }
            }
            6 if contiguous[a] => Step::Reshape(a),
            7 => Step::Transpose(a),
            8 => Step::Permute(a),
            9 if shapes[a][1] > 1 => Step::ViewRows(a),
            _ => Step::Cont(a),
        };
        let ne = shapes[a];
        let (shape, dense) = match step {
            Step::Reshape(_) => ([ne[0] * ne[1], ne[2], ne[3], 1], true),
            Step::Transpose(_) => ([ne[1], ne[0], ne[2], ne[3]], false),
            Step::Permute(_) => ([ne[2], ne[0], ne[1], ne[3]], false),
            Step::ViewRows(_) => ([ne[0], ne[1] - 1, ne[2], ne[3]], false),
            _ => (ne, true),
        };
        shapes.push(shape);
        contiguous.push(dense);
        steps.push(step);
    }
    steps
}

/// Builds the recipe; returns the graph, its input and every tensor made by a step.
fn build(steps: &[Step]) -> (Graph, TensorId, Vec<TensorId>) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8, 4, 2]).unwrap();
    let mut t = vec![x];
    for &s in steps {
        let id = match s {
            Step::Scale(a, k) => g.scale(t[a], k),
            Step::Sqr(a) => g.sqr(t[a]),
            Step::Tanh(a) => g.tanh(t[a]),
            Step::Silu(a) => g.silu(t[a]),
            Step::Add(a, b) => g.add(t[a], t[b]),
            Step::Mul(a, b) => g.mul(t[a], t[b]),
            Step::Reshape(a) => {
                let ne = g.tensor(t[a]).ne();
                g.reshape(t[a], &[ne[0] * ne[1], ne[2], ne[3]])
            }
            Step::Transpose(a) => g.transpose(t[a]),
            Step::Permute(a) => g.permute(t[a], [1, 2, 0, 3]),
            Step::ViewRows(a) => {
                let l = g.tensor(t[a]).layout;
                g.view(t[a], &[l.ne[0], l.ne[1] - 1, l.ne[2], l.ne[3]], &l.nb[1..], l.nb[1])
            }
            Step::Cont(a) => g.cont(t[a]),
        }
        .unwrap();
        t.push(id);
    }
    (g, x, t[1..].to_vec())
}

fn run(g: &mut Graph, x: TensorId, xs: &[f32], threads: usize) {
    let mut sched = scheduler(threads);
    sched.alloc_graph(g).unwrap();
    set_f32(g, x, xs).unwrap();
    sched.compute().unwrap();
}

#[test]
fn random_graphs_with_random_outputs_match_every_node_an_output_and_the_reference() {
    for seed in 1..=120u64 {
        let mut rng = Rng::new(seed);
        let len = 6 + rng.below(14);
        let steps = recipe(&mut rng, len);
        let xs = rng.vec(64, -1.5, 1.5);
        let (mut some, x, made) = build(&steps);
        let chosen: Vec<usize> = (0..made.len()).filter(|_| rng.below(3) == 0).collect();
        let chosen = if chosen.is_empty() { vec![made.len() - 1] } else { chosen };
        for &i in &chosen {
            some.set_output(made[i]).unwrap();
        }
        let (mut all, x_all, made_all) = build(&steps);
        for &id in &made_all {
            all.set_output(id).unwrap();
        }
        let threads = 1 + (seed % 2) as usize;
        run(&mut some, x, &xs, threads);
        run(&mut all, x_all, &xs, threads);
        let (mut reference_graph, x_ref, made_ref) = build(&steps);
        allocate_all(&mut reference_graph).unwrap();
        set_f32(&reference_graph, x_ref, &xs).unwrap();
        reference::compute_graph(&reference_graph, &|| false).unwrap();
        for &i in &chosen {
            let got = dense_f32(&some, made[i]);
            let want_all = dense_f32(&all, made_all[i]);
            assert_eq!(got, want_all, "seed {seed}, step {i} {:?} of {steps:?}", steps[i]);
            let want: Vec<f64> =
                dense_f32(&reference_graph, made_ref[i]).iter().map(|&v| f64::from(v)).collect();
            assert_nmse(&format!("seed {seed}, step {i} vs reference"), &got, &want, 1e-10);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MUL_MAT with F16 weights and F16 activations (ggml accepts it).

#[test]
fn f16_weights_times_f16_activations_match_f64() {
    let (k, m, n) = (96, 20, 7);
    let mut rng = Rng::new(7);
    let w: Vec<f16> = rng.vec(k * m, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let b: Vec<f16> = rng.vec(k * n, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let bytes = |v: &[f16]| v.iter().flat_map(|h| h.to_le_bytes()).collect::<Vec<u8>>();
    for threads in [1, 2] {
        let mut g = Graph::new();
        let wt = g.weight("w", DType::F16, &[k, m]).unwrap();
        let bt = g.input("b", DType::F16, &[k, n]).unwrap();
        let y = g.mul_mat(wt, bt).unwrap();
        g.set_output(y).unwrap();
        let mut sched = scheduler(threads);
        sched.alloc_graph(&mut g).unwrap();
        set_tensor(&g, wt, &bytes(&w)).unwrap();
        set_tensor(&g, bt, &bytes(&b)).unwrap();
        sched.compute().unwrap();
        let got = dense_f32(&g, y);
        let want: Vec<f64> = (0..n)
            .flat_map(|j| {
                let (w, b) = (&w, &b);
                (0..m).map(move |i| {
                    (0..k).map(|t| f64::from(w[i * k + t]) * f64::from(b[j * k + t])).sum::<f64>()
                })
            })
            .collect();
        // The products of F16 values are exact in f32; the only error is f32 accumulation
        // over 96 terms (about 1e-14 NMSE): a wrong element or a wrong row fails.
        assert_nmse(&format!("F16 x F16, {threads} threads"), &got, &want, 1e-10);
    }
}
