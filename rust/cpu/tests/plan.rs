//! The CPU backend's graph plan under the scheduler: nodes that no fast kernel takes are
//! reported once, with the reason, when the graph is allocated, and computed right by the
//! reference at every compute.

use tessera_core::backend::Backend;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_f32, set_f32};
use tessera_core::{DType, Graph};
use tessera_cpu::CpuBackend;

#[test]
fn reference_fallbacks_are_reported_once_with_the_reason_and_compute_right() {
    // y = (transpose(x) + 1.5 * transpose(x)) - w, with x [3, 4] and w [4, 3]: SCALE reads a
    // transposed view (strided rows: the reference), ADD of two contiguous rows (vectorized),
    // SUB (no vectorized kernel: the reference), CONT of the transposed view (strided: no byte
    // copy, the reference).
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[3, 4]).unwrap();
    let w = g.input("w", DType::F32, &[4, 3]).unwrap();
    let xt = g.transpose(x).unwrap();
    let scaled = g.scale(xt, 1.5).unwrap();
    let xc = g.cont(xt).unwrap();
    let sum = g.add(xc, scaled).unwrap();
    let y = g.sub(sum, w).unwrap();
    g.set_output(y).unwrap();
    let backend: Box<dyn Backend> = Box::new(CpuBackend::new(Some(2)).unwrap());
    let mut sched = Scheduler::new(vec![backend]).unwrap();
    sched.alloc_graph(&mut g).unwrap();

    let fallbacks = sched.reference_fallbacks();
    let mut seen: Vec<(&str, &str)> =
        fallbacks.iter().map(|f| (f.op.as_str(), f.reason.as_str())).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("CONT", "copy: a strided operand"),
            ("SCALE", "vectorized rows: result or first operand not F32 with contiguous rows"),
            ("SUB", "no vectorized kernel for the op"),
        ]
    );
    let sub = fallbacks.iter().find(|f| f.op == "SUB").unwrap();
    assert_eq!(sub.node, y);
    assert!(sub.label.contains(&format!("{}", y.index())), "label {:?}", sub.label);

    let xv: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    let wv: Vec<f32> = (0..12).map(|i| (i * 7 % 5) as f32 - 2.0).collect();
    for round in 0..3 {
        let xr: Vec<f32> = xv.iter().map(|v| v + round as f32).collect();
        set_f32(&g, x, &xr).unwrap();
        set_f32(&g, w, &wv).unwrap();
        sched.compute().unwrap();
        // y[j, i] (ne0 = 4 columns j of the transpose, ne1 = 3 rows i) in f64.
        let mut want = Vec::new();
        for i in 0..3 {
            for j in 0..4 {
                let xt = f64::from(xr[j * 3 + i]);
                want.push(xt + 1.5 * xt - f64::from(wv[i * 4 + j]));
            }
        }
        let got = get_f32(&g, y).unwrap();
        for (k, (&a, &b)) in got.iter().zip(&want).enumerate() {
            assert!((f64::from(a) - b).abs() <= 1e-6 * b.abs().max(1.0), "y[{k}] {a} vs {b}");
        }
        // Known once: computing does not report again.
        assert_eq!(sched.reference_fallbacks(), fallbacks);
    }
}
