//! Tessera's GPU device through [wgpu]: Metal on Apple platforms, Vulkan on Android and Linux
//! (where CI runs it on lavapipe, Mesa's software Vulkan device). Kernels are written in WGSL
//! (`shaders/*.wgsl`) and translated by wgpu for the platform's API.
//!
//! - [`register`] enumerates the adapters once, lazily and fallibly: no adapter gives
//!   `Ok(None)`, a failing driver an error, never a panic.
//! - Each usable adapter becomes one [`GpuDevice`], named after its API ("Vulkan0", "Metal"),
//!   described by the adapter's name, with one device-local [`GpuBufferType`].
//! - A [`GpuBackend`] computes graph nodes whose operands live in that buffer type; its device's
//!   `supports_op` answers exactly what the WGSL kernels implement (see [`supports`]), so that a
//!   scheduler sends everything else to the CPU.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod alloc;
pub mod backend;
pub mod buffer;
pub mod device;
pub mod headless;
pub mod kernels;
pub mod registry;
pub mod supports;

mod context;

pub use alloc::allocate_graph;
pub use backend::GpuBackend;
pub use buffer::{GpuBuffer, GpuBufferType};
pub use device::GpuDevice;
pub use headless::quiet_device_select;
pub use registry::{
    api_name, default_backends, disabled_by_env, register, register_unless_disabled, register_with,
    GpuOptions, GpuReg, NO_GPU_ENV,
};

/// The wgpu version this crate is built on, re-exported so that callers of
/// [`register_with`] name the same `Backends` type.
pub use wgpu;
