//! Tessera's CPU device: feature detection, the scalar reference ops, SIMD kernels and the
//! backend.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod backend;
pub mod buffer;
pub mod device;
pub mod error;
pub mod features;
pub mod kernels;
pub mod matmul;
pub mod reference;
pub mod team;
pub mod workers;

pub use backend::CpuBackend;
pub use device::{CpuBackendReg, CpuDevice};
pub use error::CpuError;
