//! `tessera bench ew`: the CPU backend's vectorized element-wise ops against the scalar
//! reference, one node at a time.
//!
//! ```text
//! tessera bench ew [--threads t,..] [--runs R] [--rows N]
//! ```
//!
//! Each op runs on a `[4096, N]` F32 tensor (default `N = 32`; ROPE on `[128, 32, N]`, the same
//! element count; SWIGLU of two such tensors): the reference (`reference::compute_nodes`, one thread) and the CPU backend
//! with each thread count, interleaved run by run; the median of `R` runs (default 20, after 2
//! warm-ups) is reported in microseconds, with the speed-up over the reference.

use crate::args;
use std::time::Instant;
use tessera_core::backend::Backend;
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::tensor_data::{set_f32, set_tensor};
use tessera_core::{DType, Graph, RopeParams, TensorId};
use tessera_cpu::{buffer::allocate_all, reference, CpuBackend};

const OPS: [&str; 10] = [
    "silu",
    "gelu",
    "add",
    "mul",
    "rms_norm",
    "soft_max",
    "soft_max_mask",
    "rope",
    "rope_neox",
    "swiglu",
];

/// Builds the graph of `op` on `rows` rows, with its inputs set; returns it and its node.
fn build(op: &str, rows: usize) -> Result<(Graph, TensorId), String> {
    let e = |e: tessera_core::Error| e.to_string();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4096, rows]).map_err(e)?;
    let mut seed = 0x9e37_79b9u32;
    let mut values = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed >> 8) as f32 / (1 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    };
    let mut inputs = vec![(x, values(4096 * rows))];
    let node = match op {
        "silu" => g.silu(x),
        "gelu" => g.gelu(x),
        "add" | "mul" => {
            let b = g.input("b", DType::F32, &[4096, rows]).map_err(e)?;
            inputs.push((b, values(4096 * rows)));
            if op == "add" {
                g.add(x, b)
            } else {
                g.mul(x, b)
            }
        }
        "rms_norm" => g.rms_norm(x, 1e-6),
        "swiglu" => {
            let gate = g.input("gate", DType::F32, &[4096, rows]).map_err(e)?;
            inputs.push((gate, values(4096 * rows)));
            g.glu_split(x, gate, tessera_core::GluOp::Swiglu)
        }
        "soft_max" => g.soft_max(x),
        "soft_max_mask" => {
            let m = g.input("mask", DType::F32, &[4096, rows]).map_err(e)?;
            inputs.push((m, values(4096 * rows)));
            g.soft_max_ext(x, Some(m), 0.125, 0.0)
        }
        "rope" | "rope_neox" => {
            let x3 = g.reshape(x, &[128, 32, rows]).map_err(e)?;
            let pos = g.input("pos", DType::I32, &[rows]).map_err(e)?;
            let mode = if op == "rope" { ROPE_MODE_NORMAL } else { ROPE_MODE_NEOX };
            let p = RopeParams { n_dims: 128, mode, ..Default::default() };
            let node = g.rope_ext(x3, pos, None, p).map_err(e)?;
            allocate_all(&mut g).map_err(e)?;
            let pv: Vec<u8> = (0..rows as i32).flat_map(|p| (p * 37).to_le_bytes()).collect();
            set_tensor(&g, pos, &pv).map_err(e)?;
            for (id, v) in &inputs {
                set_f32(&g, *id, v).map_err(e)?;
            }
            return Ok((g, node));
        }
        other => return Err(format!("unknown op {other:?}")),
    }
    .map_err(e)?;
    allocate_all(&mut g).map_err(e)?;
    for (id, v) in &inputs {
        set_f32(&g, *id, v).map_err(e)?;
    }
    Ok((g, node))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `tessera bench ew <args>`.
pub fn run(args: &[String]) -> Result<(), String> {
    let threads = args::thread_list(args, "1,2")?;
    let runs = args::count(args, "--runs", 20)?;
    let rows = args::count(args, "--rows", 32)?;
    let mut backends = threads
        .iter()
        .map(|&t| CpuBackend::new(Some(t)).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    print!("{:<14} {:>12}", "op", "reference_us");
    for t in &threads {
        print!(" {:>10} {:>8}", format!("vec_{t}t_us"), "speedup");
    }
    println!();
    for op in OPS {
        let (g, node) = build(op, rows)?;
        let mut reference_us = Vec::new();
        let mut vec_us = vec![Vec::new(); threads.len()];
        for i in 0..runs + 2 {
            let t0 = Instant::now();
            reference::compute_nodes(&g, &[node], &|| false).map_err(|e| e.to_string())?;
            let r = t0.elapsed().as_secs_f64() * 1e6;
            if i >= 2 {
                reference_us.push(r);
            }
            for (b, out) in backends.iter_mut().zip(vec_us.iter_mut()) {
                let t0 = Instant::now();
                b.compute_nodes(&g, &[node]).map_err(|e| e.to_string())?;
                if i >= 2 {
                    out.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        let r = median(&mut reference_us);
        print!("{op:<14} {r:>12.1}");
        for v in &mut vec_us {
            let m = median(v);
            print!(" {m:>10.1} {:>7.1}x", r / m);
        }
        println!();
    }
    Ok(())
}
