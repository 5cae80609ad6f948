//! Context shift on the GPU (lavapipe in CI): the shift graph runs where the cache lives (one
//! split, on the GPU), and the logits after a shift there match the CPU's after the same shift
//! as closely as the two devices match without one; with an F16 cache and with a quantized one
//! (Q8_0 keys, Q4_0 values: the shift reads their rows as F32 with GET_ROWS and quantizes them
//! again with SET_ROWS, on the GPU).

use std::path::PathBuf;
use std::sync::Arc;
use tessera_core::backend::DeviceType;
use tessera_core::registry::{DeviceChoice, Registry};
use tessera_core::DType;
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::{Context, ContextOptions, Model, Rows};

fn gemma_path() -> PathBuf {
    match std::env::var_os("TESSERA_GEMMA_GGUF") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/models/gemma3-270m-q4_k_m.gguf"),
    }
}

fn context(model: &Arc<Model>, registry: &Registry, cache_types: CacheTypes) -> Context {
    let opts = ContextOptions { n_ctx: 64, n_batch: 64, threads: Some(2), cache_types };
    Context::new(model.clone(), registry, &opts).unwrap()
}

/// The largest difference over the top 40 logits of `a`.
fn top40_diff(a: &[f32], b: &[f32]) -> f32 {
    let mut order: Vec<usize> = (0..a.len()).collect();
    order.sort_by(|&i, &j| a[j].total_cmp(&a[i]));
    order[..40].iter().map(|&i| (a[i] - b[i]).abs()).fold(0.0, f32::max)
}

fn argmax(l: &[f32]) -> usize {
    (0..l.len()).fold(0, |m, i| if l[i] > l[m] { i } else { m })
}

#[test]
fn a_shift_on_the_gpu_matches_the_cpu() {
    let registry = tessera_cli::registry();
    let Some(gpu) = registry.devices().iter().find(|d| d.device_type() != DeviceType::Cpu) else {
        eprintln!("no GPU device (install lavapipe: mesa-vulkan-drivers): skipped");
        return;
    };
    let name = gpu.name().to_string();
    let cpu_reg = tessera_cli::cpu_registry();
    let load = |reg: &Registry, choice: DeviceChoice| {
        Arc::new(Model::load(gemma_path(), reg, &choice, &mut |_| true).unwrap())
    };
    let on_gpu = load(&registry, DeviceChoice::parse(&name));
    let on_cpu = load(&cpu_reg, DeviceChoice::Auto);
    let text = "The lighthouse keeper climbed the stairs every evening, counting the steps aloud, \
                while the ships far out at sea waited for the beam to sweep across the water \
                and show them the rocks near the entrance of the harbour.";
    let t = on_cpu.tokenizer().encode(text, true, false);
    assert!(t.len() >= 33, "{} tokens", t.len());
    let (t, next) = (&t[..32], &t[32..33]);
    let f16 = CacheTypes { k: DType::F16, v: DType::F16 };
    let quantized = CacheTypes { k: DType::Q8_0, v: DType::Q4_0 };
    for types in [f16, quantized] {
        let mut g = context(&on_gpu, &registry, types);
        let mut c = context(&on_cpu, &cpu_reg, types);
        for ctx in [&mut g, &mut c] {
            ctx.decode(t, Rows::Last).unwrap();
            ctx.shift(3, 12).unwrap();
        }
        // The shift graph is the scheduler's graph now: all of it on the model's device.
        assert_eq!(g.splits(), vec![0], "{types:?}: the shift ran off the GPU");
        assert_eq!(g.history(), c.history());
        let lg = g.decode(next, Rows::Last).unwrap();
        let lc = c.decode(next, Rows::Last).unwrap();
        let shifted = top40_diff(lc.last(), lg.last());

        // The devices without a shift: the kept tokens decoded fresh on each.
        let kept = c.history().to_vec();
        let mut fg = context(&on_gpu, &registry, types);
        let mut fc = context(&on_cpu, &cpu_reg, types);
        let bg = {
            fg.decode(&kept, Rows::Last).unwrap();
            fg.decode(next, Rows::Last).unwrap()
        };
        let bc = {
            fc.decode(&kept, Rows::Last).unwrap();
            fc.decode(next, Rows::Last).unwrap()
        };
        let devices = top40_diff(bc.last(), bg.last());
        // And how far the shift's logits are from the fresh ones (what a missing shift would look
        // like is further still).
        let effect = top40_diff(lc.last(), bc.last());
        eprintln!(
            "{name}, {}/{} cache: top-40 logits after a shift GPU vs CPU {shifted}, fresh GPU \
             vs CPU {devices}, shifted vs fresh on the CPU {effect}",
            types.k, types.v
        );
        assert_eq!(argmax(lg.last()), argmax(lc.last()));
        // Without a shift the devices agree within what the CPU's 8-bit activations cost
        // (about 1.6 at most on Gemma, see tessera-gpu's tests/gemma.rs; measured here 0.96
        // with the F16 cache, 0.50 with the quantized one), so that a GPU kernel wrong in both
        // runs is not hidden by the relative bound below.
        assert!(devices <= 2.0, "{types:?}: fresh GPU and CPU {devices} apart");
        assert!(
            shifted <= 2.0 * devices + 0.05,
            "{types:?}: GPU and CPU {shifted} apart after a shift"
        );
    }
}
