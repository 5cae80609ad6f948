//! Rough timings of MUL_MAT on the GPU (ignored by default; run with `--ignored --nocapture`).
//! Nothing is asserted about time.

mod common;

use common::{gpu, random_bytes, Rng};
use std::sync::Arc;
use std::time::Instant;
use tessera_core::backend::{BufferType, Device};
use tessera_core::tensor_data::set_tensor;
use tessera_core::{DType, Graph};

#[test]
#[ignore]
fn mul_mat_timings() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(1);
    for (dtype, m, n, k) in [
        (DType::Q4_0, 4096, 1, 4096),
        (DType::Q8_0, 4096, 1, 4096),
        (DType::F16, 4096, 1, 4096),
        (DType::Q4_0, 1024, 64, 1024),
        (DType::F32, 512, 512, 512),
        // Gemma 3 270M's projections (generation, then a 64-token prompt).
        (DType::Q5_0, 2048, 1, 640),
        (DType::Q4_K, 640, 1, 2048),
        (DType::Q6_K, 640, 1, 2048),
        (DType::Q8_0, 32768, 1, 640),
        (DType::Q5_0, 2048, 64, 640),
        (DType::Q4_K, 640, 64, 2048),
    ] {
        let mut g = Graph::new();
        let a = g.weight("a", dtype, &[k, m]).unwrap();
        let b = g.input("b", DType::F32, &[k, n]).unwrap();
        let _c = g.mul_mat(a, b).unwrap();
        let bt: Arc<dyn BufferType> = dev.buffer_type();
        let _buf = tessera_gpu::allocate_graph(&mut g, &bt).unwrap();
        set_tensor(&g, a, &random_bytes(&mut rng, dtype, k * m)).unwrap();
        set_tensor(&g, b, &random_bytes(&mut rng, DType::F32, k * n)).unwrap();
        let mut backend = dev.init_backend(&Default::default()).unwrap();
        backend.graph_compute(&g).unwrap();
        let reps = 5;
        let t = Instant::now();
        for _ in 0..reps {
            backend.graph_compute(&g).unwrap();
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        eprintln!(
            "{}: mul_mat {dtype} M={m} N={n} K={k}: {:.2} ms, {:.2} GFLOP/s",
            dev.name(),
            s * 1e3,
            2.0 * (m * n * k) as f64 / s / 1e9
        );
    }
}
