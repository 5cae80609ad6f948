//! Shared test harness: the GPU device (failing loudly when there is none, unless
//! `TESSERA_ALLOW_NO_GPU=1`), random inputs, and the comparison of a graph computed on the GPU
//! with the same graph computed by the CPU scalar reference (`tessera_cpu::reference`).

#![allow(dead_code)]

pub mod hybrid;
pub mod reference_device;

use half::f16;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use tessera_core::backend::{BufferType, Device};
use tessera_core::tensor_data::{get_tensor, set_tensor};
use tessera_core::{DType, Graph, Result, TensorId};
use tessera_gpu::{GpuDevice, GpuReg};

/// Whether running without a GPU adapter is allowed (the GPU tests then pass vacuously).
pub fn no_gpu_allowed() -> bool {
    std::env::var("TESSERA_ALLOW_NO_GPU").is_ok_and(|v| v == "1")
}

/// The first GPU device, shared by the tests of one binary. Panics when there is none, unless
/// `TESSERA_ALLOW_NO_GPU=1`, in which case it returns `None` and the test returns early.
pub fn gpu() -> Option<GpuDevice> {
    static DEVICE: OnceLock<Option<GpuDevice>> = OnceLock::new();
    let dev = DEVICE.get_or_init(open_device).clone();
    if dev.is_none() {
        if no_gpu_allowed() {
            eprintln!("no GPU adapter: skipping (TESSERA_ALLOW_NO_GPU=1)");
        } else {
            panic!(
                "no GPU adapter found: install a Vulkan driver (Debian: apt-get install \
                 mesa-vulkan-drivers libvulkan1) or set TESSERA_ALLOW_NO_GPU=1 to skip GPU tests"
            );
        }
    }
    dev
}

/// The first GPU device opened without `shader-f16`, when the adapter offers it (`None`
/// otherwise: [`gpu`] then already runs the integer F16 decoding).
pub fn gpu_int() -> Option<GpuDevice> {
    static DEVICE: OnceLock<Option<GpuDevice>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let dev = gpu()?;
            if !dev.uses_shader_f16() {
                return None;
            }
            let options = tessera_gpu::GpuOptions { shader_f16: false, binding_limit: None };
            match GpuReg::with_options(tessera_gpu::default_backends(), options) {
                Ok(reg) => reg.map(|r| r.gpu_devices()[0].clone()),
                Err(e) => panic!("GPU registration failed: {e}"),
            }
        })
        .clone()
}

/// The first GPU device opened with bindings of at most `limit` bytes (a fresh device).
pub fn gpu_with_binding_limit(limit: u64) -> Option<GpuDevice> {
    gpu()?;
    let options = tessera_gpu::GpuOptions { binding_limit: Some(limit), ..Default::default() };
    match GpuReg::with_options(tessera_gpu::default_backends(), options) {
        Ok(reg) => reg.map(|r| r.gpu_devices()[0].clone()),
        Err(e) => panic!("GPU registration failed: {e}"),
    }
}

/// [`gpu`] and, where the adapter offers `shader-f16`, [`gpu_int`]: every kernel variant.
pub fn all_gpus() -> Vec<GpuDevice> {
    gpu().into_iter().chain(gpu_int()).collect()
}

/// A fresh registration's first device (with its own wgpu device), or `None` without
/// adapters; registration errors panic.
pub fn open_device() -> Option<GpuDevice> {
    match GpuReg::new(tessera_gpu::default_backends()) {
        Ok(reg) => reg.map(|r| r.gpu_devices()[0].clone()),
        Err(e) => panic!("GPU registration failed: {e}"),
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Byte offsets of the f16 scales (d, and dmin or m where the type has one) in a block of
/// `dtype`.
pub fn scale_offsets(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        other => panic!("no scales in {other}"),
    }
}

/// The block types of GGUF weights.
pub const BLOCK_TYPES: [DType; 12] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
];

/// Random bytes for a tensor of `dtype` with `n` elements: F32 / F16 / BF16 uniform in
/// [-1, 1), I32 in [0, 8), quantized blocks of random bytes (every bit pattern of the quants,
/// scales and mins) whose f16 scales are replaced by random values of magnitude 0.002 .. 0.05
/// and either sign.
pub fn random_bytes(rng: &mut Rng, dtype: DType, n: usize) -> Vec<u8> {
    match dtype {
        DType::F32 => (0..n).flat_map(|_| rng.uniform(-1.0, 1.0).to_le_bytes()).collect(),
        DType::F16 => {
            (0..n).flat_map(|_| f16::from_f32(rng.uniform(-1.0, 1.0)).to_le_bytes()).collect()
        }
        DType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.uniform(-1.0, 1.0)).to_le_bytes())
            .collect(),
        DType::I32 => (0..n).flat_map(|_| (rng.below(8) as i32).to_le_bytes()).collect(),
        t if BLOCK_TYPES.contains(&t) => {
            let blocks = n / t.block_size();
            let size = t.type_size();
            let mut out: Vec<u8> = (0..blocks * size).map(|_| rng.below(256) as u8).collect();
            for b in out.chunks_exact_mut(size) {
                for &o in scale_offsets(t) {
                    let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
                    let d = f16::from_f32(sign * rng.uniform(0.002, 0.05));
                    b[o..o + 2].copy_from_slice(&d.to_le_bytes());
                }
            }
            out
        }
        other => panic!("no random data for {other}"),
    }
}

/// I32 values as bytes.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// F32 values of a tensor's bytes (F32, F16 or I32 elements, densely packed).
pub fn values(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => {
            bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()).collect()
        }
        DType::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        other => panic!("no values of {other}"),
    }
}

/// Normalized mean squared error of `got` against `want`, as ggml's test-backend-ops.
pub fn nmse(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let err: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// A test case: a graph, explicit data for some leaves (the others get random data), the
/// output to compare and the tolerance.
pub struct Case {
    /// A name for messages.
    pub name: String,
    /// The graph, not allocated.
    pub graph: Graph,
    /// The output compared.
    pub output: TensorId,
    /// Explicit bytes of leaves.
    pub data: HashMap<TensorId, Vec<u8>>,
    /// Largest normalized mean squared error allowed.
    pub tolerance: f64,
}

/// What a comparison measured.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// Normalized mean squared error.
    pub nmse: f64,
    /// Largest absolute difference.
    pub max_abs: f64,
    /// Number of values compared.
    pub n: usize,
}

/// The bytes every leaf gets in `case`.
fn leaf_data(case: &Case, seed: u64) -> Vec<(TensorId, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let g = &case.graph;
    g.ids()
        .filter(|&id| g.tensor(id).is_leaf())
        .map(|id| {
            let bytes = case.data.get(&id).cloned().unwrap_or_else(|| {
                let t = g.tensor(id);
                random_bytes(&mut rng, t.dtype(), t.nelements())
            });
            (id, bytes)
        })
        .collect()
}

/// Computes `case` on `dev` and returns the output's bytes.
pub fn run_gpu(dev: &GpuDevice, case: &Case, inputs: &[(TensorId, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut g = case.graph.clone();
    let bt: Arc<dyn BufferType> = dev.buffer_type();
    let _buf = tessera_gpu::allocate_graph(&mut g, &bt)?;
    for (id, bytes) in inputs {
        set_tensor(&g, *id, bytes)?;
    }
    let mut backend = dev.init_backend(&Default::default())?;
    backend.graph_compute(&g)?;
    get_tensor(&g, case.output)
}

/// Computes `case` with the CPU's scalar reference and returns the output's bytes.
pub fn run_reference(case: &Case, inputs: &[(TensorId, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut g = case.graph.clone();
    let _buf = tessera_cpu::buffer::allocate_all(&mut g)?;
    for (id, bytes) in inputs {
        set_tensor(&g, *id, bytes)?;
    }
    tessera_cpu::reference::compute_graph(&g, &|| false)?;
    get_tensor(&g, case.output)
}

/// The bytes of `case`'s output computed on `dev`, with the leaf data [`check`] gives it.
pub fn output_on(dev: &GpuDevice, case: &Case) -> Vec<u8> {
    let inputs = leaf_data(case, 0x7e55e7a ^ case.name.len() as u64);
    run_gpu(dev, case, &inputs).unwrap_or_else(|e| panic!("{}: GPU: {e}", case.name))
}

/// Computes `case` on the GPU and with the reference and compares the outputs; panics when the
/// error exceeds the tolerance.
pub fn check(dev: &GpuDevice, case: &Case) -> Outcome {
    for id in case.graph.nodes() {
        assert!(
            dev.supports_op(&case.graph, id),
            "{}: {} is not supported",
            case.name,
            case.graph.tensor(id).op.name()
        );
    }
    let inputs = leaf_data(case, 0x7e55e7a ^ case.name.len() as u64);
    let got = run_gpu(dev, case, &inputs).unwrap_or_else(|e| panic!("{}: GPU: {e}", case.name));
    let want =
        run_reference(case, &inputs).unwrap_or_else(|e| panic!("{}: reference: {e}", case.name));
    let t = case.graph.tensor(case.output);
    let (g, w) = (values(t.dtype(), &got), values(t.dtype(), &want));
    let out = Outcome {
        nmse: nmse(&g, &w),
        max_abs: g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max),
        n: g.len(),
    };
    eprintln!(
        "{:<60} n = {:>6}  nmse = {:.3e}  max |err| = {:.3e}",
        case.name, out.n, out.nmse, out.max_abs
    );
    assert!(
        out.nmse <= case.tolerance && out.nmse.is_finite(),
        "{}: nmse {:e} above {:e} (max |err| {:e})",
        case.name,
        out.nmse,
        case.tolerance,
        out.max_abs
    );
    out
}
