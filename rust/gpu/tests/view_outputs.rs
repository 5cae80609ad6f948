//! Outputs that are views of intermediate results keep their memory on the GPU device and
//! across a GPU / CPU split (issue 12).

mod common;

use tessera_core::backend::{Backend, BackendParams, Device};
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_tensor_dense, set_f32};
use tessera_core::{DType, Graph, TensorId};
use tessera_cpu::CpuBackend;

fn dense_f32(g: &Graph, id: TensorId) -> Vec<f32> {
    get_tensor_dense(g, id)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `2x` in the logical order of the view `v` (of a tensor holding `2x` contiguously).
fn doubled_view(g: &Graph, v: TensorId, xs: &[f32]) -> Vec<f32> {
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

const VIEWS: [(&str, ViewFn); 5] = [
    ("RESHAPE", |g, y| g.reshape(y, &[32]).unwrap()),
    ("VIEW offset 32", |g, y| g.view(y, &[8, 2], &[32], 32).unwrap()),
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
];

/// The graph on the GPU alone (`cpu_tail` false) or with a CPU-only op (SUM_ROWS)
/// after the view so that the graph splits GPU -> CPU -> GPU.
fn build(view: ViewFn, cpu_tail: bool) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8, 4]).unwrap();
    let y = g.scale(x, 2.0).unwrap();
    let v = view(&mut g, y);
    g.set_output(v).unwrap();
    let a = g.sqr(x).unwrap();
    let a = if cpu_tail {
        let s = g.sum_rows(a).unwrap(); // CPU only
        g.add(a, s).unwrap()
    } else {
        a
    };
    let b = g.tanh(a).unwrap();
    let c = g.scale(b, 5.0).unwrap();
    g.set_output(c).unwrap();
    (g, x, v)
}

#[test]
fn output_views_of_intermediates_keep_their_values_on_the_gpu_and_across_a_split() {
    let Some(gpu) = common::gpu() else { return };
    let xs: Vec<f32> = (0..32).map(|i| i as f32 * 0.25 - 3.0).collect();
    for cpu_tail in [false, true] {
        for (name, view) in VIEWS {
            let backends: Vec<Box<dyn Backend>> = vec![
                gpu.init_backend(&BackendParams::default()).unwrap(),
                Box::new(CpuBackend::new(Some(2)).unwrap()),
            ];
            let mut sched = Scheduler::new(backends).unwrap();
            let (mut g, x, v) = build(view, cpu_tail);
            sched.alloc_graph(&mut g).unwrap();
            let y = g.view_root(v).0;
            assert_eq!(sched.assignment(y), Some(0), "{name}: SCALE runs on the GPU");
            if cpu_tail {
                let on: Vec<usize> = sched.splits().iter().map(|s| s.backend).collect();
                assert_eq!(on, vec![0, 1, 0], "{name}: GPU, CPU, GPU");
            }
            set_f32(&g, x, &xs).unwrap();
            sched.compute().unwrap();
            assert_eq!(dense_f32(&g, v), doubled_view(&g, v, &xs), "{name}, split {cpu_tail}");
        }
    }
}
