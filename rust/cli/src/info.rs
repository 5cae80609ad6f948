//! `tessera info`: the build, the host CPU, the devices, and a small graph computed and checked.

use std::fmt::Write as _;
use tessera_core::backend::{BackendParams, DeviceType};
use tessera_core::registry::{DeviceChoice, Registry};
use tessera_core::sched::Scheduler;
use tessera_core::{quant, tensor_data, DType, Graph, Result};
use tessera_cpu::features::{self, CpuFeatures};

/// Weight rows (outputs) and row length of the demo matmul.
const DEMO_M: usize = 8;
const DEMO_K: usize = 64;
const DEMO_N: usize = 2;

/// The report printed by `tessera info`, and whether the demo's result was right.
pub fn info(registry: &Registry) -> Result<(String, bool)> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Tessera {} ({} build, {})",
        env!("CARGO_PKG_VERSION"),
        profile(),
        std::env::consts::ARCH
    );
    let cpu = CpuFeatures::detect();
    let mem = features::memory_info();
    let _ = writeln!(out, "\nHost CPU: {}", features::cpu_description());
    let _ = writeln!(
        out,
        "  arch {}, memory {:.1} GiB free of {:.1} GiB",
        cpu.arch(),
        gib(mem.free),
        gib(mem.total)
    );
    let on: Vec<String> = cpu
        .pairs()
        .into_iter()
        .filter(|(_, v)| v != "0")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(out, "  features: {}", on.join(" "));
    let tiers: Vec<String> = tessera_cpu::kernels::tier::tiers_by_type()
        .into_iter()
        .map(|(dtype, tier)| format!("{dtype}={tier}"))
        .collect();
    let _ = writeln!(out, "  kernel tier per weight type: {}", tiers.join(" "));
    #[cfg(target_arch = "x86_64")]
    {
        let sites: Vec<String> = tessera_cpu::kernels::prefetch_sites()
            .into_iter()
            .map(|(site, on)| format!("{site}={}", if on { "on" } else { "off" }))
            .collect();
        let env = tessera_cpu::kernels::PREFETCH_ENV;
        let _ = writeln!(out, "  matrix-vector prefetch ({env}): {}", sites.join(" "));
    }
    let _ = writeln!(out, "\nDevices:");
    for d in registry.devices() {
        let m = d.memory();
        let _ = writeln!(
            out,
            "  {:8} {:5} {} ({:.1} / {:.1} GiB){}",
            d.name(),
            d.device_type().short_name(),
            d.description(),
            gib(m.free),
            gib(m.total),
            if d.is_software() { ", a software GPU: runs on the CPU" } else { "" }
        );
    }
    for s in registry.skipped() {
        let _ = writeln!(out, "  (skipped: {s})");
    }
    if registry.devices().iter().all(|d| d.device_type() == DeviceType::Cpu) {
        let _ = writeln!(out, "  {}", no_gpu_hint());
    }
    let (text, ok) = demo(registry)?;
    out.push_str(&text);
    Ok((out, ok))
}

/// What to do when no GPU device was found.
fn no_gpu_hint() -> String {
    if tessera_gpu::disabled_by_env() {
        return format!("no GPU device: {}=1 leaves it out", tessera_gpu::NO_GPU_ENV);
    }
    let how = if cfg!(target_vendor = "apple") {
        "Metal found no usable GPU"
    } else if cfg!(target_os = "android") {
        "this device's Vulkan driver offers no usable GPU"
    } else {
        "install a Vulkan driver: your GPU's (Mesa's mesa-vulkan-drivers covers AMD and Intel) \
         with libvulkan1; mesa-vulkan-drivers also brings lavapipe, a software GPU for tests; \
         `vulkaninfo --summary` (vulkan-tools) lists what the loader sees"
    };
    format!("no GPU device, everything runs on the CPU: {how}")
}

/// Why `chosen` runs the demo: the preferred device of `registry` (GPUs first, the CPU next,
/// software GPUs never before the CPU).
fn choice_reason(registry: &Registry, chosen: &dyn tessera_core::backend::Device) -> String {
    if chosen.device_type() != DeviceType::Cpu {
        return if chosen.is_software() {
            "a software GPU: the only device".to_string()
        } else {
            "the preferred device: a GPU (what it cannot run goes to the CPU)".to_string()
        };
    }
    let software: Vec<String> = registry
        .devices()
        .iter()
        .filter(|d| d.device_type() != DeviceType::Cpu && d.is_software())
        .map(|d| format!("{} ({})", d.name(), d.description()))
        .collect();
    if software.is_empty() {
        "no GPU device was found".to_string()
    } else {
        format!(
            "{} {} a software GPU, which runs on the CPU and is slower than the CPU's own \
             kernels, so it is never preferred",
            software.join(", "),
            if software.len() == 1 { "is" } else { "are" }
        )
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// softmax(W x) with W Q8_0 [64, 8] and x F32 [64, 2], on the best device, checked against a
/// double-precision computation from the dequantized weights.
fn demo(registry: &Registry) -> Result<(String, bool)> {
    let w: Vec<f32> = (0..DEMO_M * DEMO_K).map(|i| ((i * 7919) % 97) as f32 / 48.0 - 1.0).collect();
    let x: Vec<f32> =
        (0..DEMO_N * DEMO_K).map(|i| ((i * 104_729) % 89) as f32 / 44.0 - 1.0).collect();
    let wq = quant::quantize_to_vec(DType::Q8_0, &w)?;
    let mut g = Graph::new();
    let wt = g.weight("w", DType::Q8_0, &[DEMO_K, DEMO_M])?;
    let xt = g.input("x", DType::F32, &[DEMO_K, DEMO_N])?;
    let y = g.mul_mat(wt, xt)?;
    let p = g.soft_max(y)?;
    g.set_output(p)?;
    // The preferred device, with the CPU behind it for what that device cannot run.
    let mut devices = vec![registry.choose(&DeviceChoice::Auto)?];
    if devices.iter().all(|d| d.device_type() != DeviceType::Cpu) {
        devices.extend(registry.device_by_type(DeviceType::Cpu));
    }
    let backends = devices
        .iter()
        .map(|d| d.init_backend(&BackendParams::default()))
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = backends.iter().map(|b| b.name()).collect();
    let reason = match devices.first() {
        Some(d) => format!("{}: {}", d.name(), choice_reason(registry, d.as_ref())),
        None => "no device".to_string(),
    };
    let mut sched = Scheduler::new(backends)?;
    sched.alloc_graph(&mut g)?;
    tensor_data::set_tensor(&g, wt, &wq)?;
    tensor_data::set_f32(&g, xt, &x)?;
    sched.compute()?;
    let got = tensor_data::get_f32(&g, p)?;

    // Independent check in f64 from the dequantized weights. The CPU kernels quantize the
    // activations to Q8_0 (as ggml does), so the project's matmul tolerance applies: normalized
    // mean squared error at most 5e-4.
    let wd = quant::dequantize_to_vec(DType::Q8_0, &wq, w.len())?;
    let mut want = Vec::with_capacity(got.len());
    for n in 0..DEMO_N {
        let logits: Vec<f64> = (0..DEMO_M)
            .map(|m| {
                (0..DEMO_K).map(|k| wd[m * DEMO_K + k] as f64 * x[n * DEMO_K + k] as f64).sum()
            })
            .collect();
        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
        want.extend(logits.iter().map(|l| (l - mx).exp() / z));
    }
    let (mut err2, mut ref2, mut max_err) = (0.0f64, 0.0f64, 0.0f64);
    for (&g, &r) in got.iter().zip(&want) {
        err2 += (g as f64 - r).powi(2);
        ref2 += r * r;
        max_err = max_err.max((g as f64 - r).abs());
    }
    let nmse = err2 / ref2;
    let ok = got.len() == want.len() && nmse <= 5e-4;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nDemo graph: softmax(Q8_0 W[{DEMO_K}x{DEMO_M}] x F32 x[{DEMO_K}x{DEMO_N}])"
    );
    let splits: Vec<String> = sched
        .splits()
        .iter()
        .map(|s| format!("{} node(s) on {}", s.nodes.len(), names[s.backend]))
        .collect();
    let _ = writeln!(out, "  device: {reason}");
    let _ = writeln!(out, "  scheduled: {}", splits.join(", "));
    for n in 0..DEMO_N {
        let row: Vec<String> =
            got[n * DEMO_M..(n + 1) * DEMO_M].iter().map(|v| format!("{v:.4}")).collect();
        let _ = writeln!(out, "  column {n}: [{}]", row.join(", "));
    }
    let verdict = if ok { "OK" } else { "WRONG" };
    let _ = writeln!(
        out,
        "  check against f64 reference: {verdict} (nmse {nmse:.1e}, max abs error {max_err:.1e})"
    );
    Ok((out, ok))
}
