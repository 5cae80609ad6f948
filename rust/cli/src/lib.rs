//! The `tessera` command line: `info` (the demo), `backend-ops` (the conformance harness),
//! `bench` (matmul and model benchmarks), `run`, `perplexity` and `gguf` (a GGUF file's metadata and tensors), usable as a
//! library by tests.
#![warn(missing_docs)]

pub mod args;
pub mod backend_ops;
pub mod bench;
pub mod bench_constrained;
pub mod bench_ew;
pub mod bench_nodes;
pub mod bench_session;
pub mod gguf;
pub mod info;
pub mod llm;
pub mod perplexity;
pub mod profile;

use tessera_core::registry::Registry;

/// The registry of every device this build can use, in the app's order (as tessera-ffi's
/// default registry): the GPU first when one works, then the CPU. `TESSERA_NO_GPU=1` leaves
/// the GPU out ([`tessera_gpu::register_unless_disabled`]).
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    tessera_gpu::register_unless_disabled(&mut registry);
    registry.register(tessera_cpu::CpuBackendReg::shared());
    registry
}

/// A registry with the CPU alone.
pub fn cpu_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register(tessera_cpu::CpuBackendReg::shared());
    registry
}
