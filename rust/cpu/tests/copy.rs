//! The CPU backend's byte copies under the scheduler: a recurrent state's write-back (CPY of a
//! view whose rows are dense but apart, into a tensor of its shape), a convolution input
//! (CONCAT of the state and the new column along dim 0), and a dense CONT, each computed by the
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
