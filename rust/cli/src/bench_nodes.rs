//! `tessera bench nodes`: the CPU backend's cost per node, on a graph of many small
//! element-wise nodes computed through the scheduler.
//!
//! ```text
//! tessera bench nodes [--nodes 1000] [--width 16] [--threads t,..] [--runs R]
//! ```
//!
//! The graph is a chain of `--nodes` element-wise nodes (ADD, MUL, SCALE, ADD of a constant
//! input, in turn) on F32 vectors of `--width` elements, so small that a node's arithmetic is a
//! few nanoseconds and its time is the backend's overhead. The scheduler allocates the graph
//! once; each run computes it (`Scheduler::compute`). Reported per thread count: the median of
//! `R` runs (default 200, after 5 warm-ups) in microseconds per graph and nanoseconds per node,
//! and the process's threads (`Threads` of `/proc/self/status`, sampled during the computes,
//! less the sampling thread).

use crate::args;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tessera_core::backend::Backend;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::set_f32;
use tessera_core::{DType, Graph, TensorId};
use tessera_cpu::CpuBackend;

/// The chain of `nodes` element-wise nodes on vectors of `width`: its graph, its two inputs
/// and its result.
pub fn chain(nodes: usize, width: usize) -> tessera_core::Result<(Graph, [TensorId; 2], TensorId)> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[width])?;
    let b = g.input("b", DType::F32, &[width])?;
    let mut y = a;
    for i in 0..nodes {
        y = match i % 4 {
            0 => g.add(y, b)?,
            1 => g.mul(y, b)?,
            2 => g.scale(y, 0.5)?,
            _ => g.add(y, a)?,
        };
    }
    g.set_output(y)?;
    Ok((g, [a, b], y))
}

/// Threads of this process now, from `/proc/self/status` (0 where it cannot be read).
pub fn process_threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `tessera bench nodes <args>`.
pub fn run(args: &[String]) -> Result<(), String> {
    let e = |e: tessera_core::Error| e.to_string();
    let threads = args::thread_list(args, "1,2")?;
    let runs = args::count(args, "--runs", 200)?;
    let nodes = args::count(args, "--nodes", 1000)?;
    let width = args::count(args, "--width", 16)?;
    if runs == 0 || nodes == 0 || width == 0 || nodes > 1_000_000 || width > 1 << 20 {
        return Err("--runs, --nodes (up to 1e6) and --width (up to 2^20) must be positive".into());
    }
    println!("threads  us_per_graph  ns_per_node  process_threads");
    for &t in &threads {
        let backend: Box<dyn Backend> = Box::new(CpuBackend::new(Some(t)).map_err(e)?);
        let mut sched = Scheduler::new(vec![backend]).map_err(e)?;
        let (mut g, [a, b], _) = chain(nodes, width).map_err(e)?;
        sched.alloc_graph(&mut g).map_err(e)?;
        set_f32(&g, a, &vec![1.0; width]).map_err(e)?;
        set_f32(&g, b, &vec![0.25; width]).map_err(e)?;
        // The sampler: the most threads seen while the computes run.
        let stop = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (stop, most) = (stop.clone(), most.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    most.fetch_max(process_threads(), Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            })
        };
        let mut us = Vec::with_capacity(runs);
        for i in 0..runs + 5 {
            let t0 = Instant::now();
            sched.compute().map_err(e)?;
            if i >= 5 {
                us.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        let m = median(&mut us);
        let seen = most.load(Ordering::Relaxed).saturating_sub(1);
        println!("{t:>7}  {m:>12.1}  {:>11.1}  {seen:>15}", m * 1e3 / nodes as f64);
    }
    Ok(())
}
