//! The CPU backend's byte copies under the scheduler: a recurrent state's write-back (CPY of a
//! view whose rows are dense but apart, into a tensor of its shape), a convolution input
//! (CONCAT of the state and the new column along dim 0), a dense CONT, and CONCATs of a
//! transposed operand (a prompt's convolution window) along every dim, each computed by the
//! copies rather than the reference (no fallback reported) and equal to the values they move.

use tessera_core::backend::Backend;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_f32, set_f32};
use tessera_core::{DType, Graph};
use tessera_cpu::CpuBackend;

#[test]
fn state_write_backs_and_concats_are_byte_copies_of_the_right_values() {
    let (taps, ch) = (4usize, 37usize);
    let mut g = Graph::new();
    // The window of each channel: its last `taps - 1` inputs, then this token's.
    let state = g.input("state", DType::F32, &[taps - 1, ch]).unwrap();
    let x = g.input("x", DType::F32, &[1, ch]).unwrap();
    let window = g.concat(state, x, 0).unwrap();
    // The new state: columns 1.. of each window row (rows of 3 dense values, 4 apart).
    let tail = g.view(window, &[taps - 1, ch], &[taps * 4], 4).unwrap();
    let next = g.input("next", DType::F32, &[taps - 1, ch]).unwrap();
    let written = g.cpy(tail, next).unwrap();
    let dense = g.cont(window).unwrap();
    g.set_output(written).unwrap();
    g.set_output(dense).unwrap();
    let backend: Box<dyn Backend> = Box::new(CpuBackend::new(Some(2)).unwrap());
    let mut sched = Scheduler::new(vec![backend]).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    let fallbacks: Vec<String> =
        sched.reference_fallbacks().iter().map(|f| format!("{} ({})", f.op, f.reason)).collect();
    assert!(fallbacks.is_empty(), "left to the reference: {fallbacks:?}");

    for round in 0..2 {
        let sv: Vec<f32> = (0..(taps - 1) * ch).map(|i| i as f32 + 1000.0 * round as f32).collect();
        let xv: Vec<f32> = (0..ch).map(|c| -(c as f32) - 0.5).collect();
        set_f32(&g, state, &sv).unwrap();
        set_f32(&g, x, &xv).unwrap();
        sched.compute().unwrap();
        let win: Vec<f32> = (0..ch)
            .flat_map(|c| sv[c * (taps - 1)..(c + 1) * (taps - 1)].iter().copied().chain([xv[c]]))
            .collect();
        assert_eq!(get_f32(&g, dense).unwrap(), win, "round {round}: the window");
        let want: Vec<f32> =
            (0..ch).flat_map(|c| win[c * taps + 1..(c + 1) * taps].to_vec()).collect();
        assert_eq!(get_f32(&g, next).unwrap(), want, "round {round}: the new state");
    }
}

/// The graph `concat(a, transpose(x), dim)` (or `concat(transpose(x), a, dim)`), with `x`
/// transposed so that its rows are strided, and `a` dense; both orders, along every dim, with
/// sizes across the copy's 32 x 32 tiles: computed by the backend's strided concat (no fallback)
/// and equal to the reference's, element for element.
#[test]
fn strided_concats_are_tiled_copies_of_the_right_values() {
    use tessera_cpu::buffer::allocate_all;
    // [ne0, ne1, ne2, ne3] of the result's second part (the transposed operand's shape after the
    // transpose) for a concat along `dim`; the first part has `extra` along `dim`.
    for (dim, ne, extra) in [
        (0, [45, 70, 1, 1], 3),
        (0, [1, 33, 2, 1], 2),
        (1, [37, 29, 2, 1], 40),
        (2, [33, 31, 2, 2], 1),
        (3, [5, 66, 1, 1], 2),
    ] {
        for transposed_first in [false, true] {
            let what = format!(
                "concat along {dim}, {ne:?} + {extra}, transposed first {transposed_first}"
            );
            let build = |g: &mut Graph| {
                // x is stored as [ne1, ne0, ne2, ne3]; its transpose has shape `ne`.
                let x = g.input("x", DType::F32, &[ne[1], ne[0], ne[2], ne[3]]).unwrap();
                let xt = g.transpose(x).unwrap();
                let mut na = ne;
                na[dim] = extra;
                let a = g.input("a", DType::F32, &na).unwrap();
                let y = if transposed_first {
                    g.concat(xt, a, dim).unwrap()
                } else {
                    g.concat(a, xt, dim).unwrap()
                };
                g.set_output(y).unwrap();
                (x, a, y)
            };
            let values = |g: &Graph, x, a| {
                let n = |t| g.tensor(t).layout.nelements();
                let xv: Vec<f32> = (0..n(x)).map(|i| i as f32 * 0.5 - 7.0).collect();
                let av: Vec<f32> = (0..n(a)).map(|i| -(i as f32) - 0.25).collect();
                set_f32(g, x, &xv).unwrap();
                set_f32(g, a, &av).unwrap();
            };
            let mut r = Graph::new();
            let (x, a, y) = build(&mut r);
            allocate_all(&mut r).unwrap();
            values(&r, x, a);
            tessera_cpu::reference::compute_graph(&r, &|| false).unwrap();
            let want = get_f32(&r, y).unwrap();

            let mut g = Graph::new();
            let (x, a, y) = build(&mut g);
            let backend: Box<dyn Backend> = Box::new(CpuBackend::new(Some(3)).unwrap());
            let mut sched = Scheduler::new(vec![backend]).unwrap();
            sched.alloc_graph(&mut g).unwrap();
            let fallbacks: Vec<String> = sched
                .reference_fallbacks()
                .iter()
                .map(|f| format!("{} ({})", f.op, f.reason))
                .collect();
            assert!(fallbacks.is_empty(), "{what}: left to the reference: {fallbacks:?}");
            values(&g, x, a);
            sched.compute().unwrap();
            let got = get_f32(&g, y).unwrap();
            assert_eq!(got.len(), want.len(), "{what}: length");
            let wrong = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
            assert!(wrong.is_none(), "{what}: first wrong element {wrong:?}");
        }
    }
}
