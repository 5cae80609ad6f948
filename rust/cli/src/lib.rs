//! The `tessera` command line: `info` (the demo), `backend-ops` (the conformance harness) and
//! `bench` (matmul benchmarks), usable as a library by tests.
#![warn(missing_docs)]

pub mod backend_ops;
pub mod bench;
pub mod info;

use tessera_core::registry::Registry;

/// The registry of every device this build can use: the GPU first when one works, then the CPU.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(tessera_cpu::CpuBackendReg::shared());
    r
}
