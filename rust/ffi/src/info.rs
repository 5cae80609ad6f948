//! What the library and the machine offer: devices, CPU features and kernel tiers, and the
//! build.

use crate::error::{guard, FfiResult};
use serde::Serialize;
use tessera_core::backend::{self, Device};

/// The kind of a device.
// In the JSON protocol its lower-case name: "cpu", "gpu", "igpu", "accel".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// A discrete GPU with its own memory.
    Gpu,
    /// A GPU that shares memory with the CPU (phones, Apple silicon).
    Igpu,
    /// Another accelerator (NPU ...).
    Accel,
}

impl From<backend::DeviceType> for DeviceType {
    fn from(t: backend::DeviceType) -> DeviceType {
        match t {
            backend::DeviceType::Cpu => DeviceType::Cpu,
            backend::DeviceType::Gpu => DeviceType::Gpu,
            backend::DeviceType::IntegratedGpu => DeviceType::Igpu,
            backend::DeviceType::Accelerator => DeviceType::Accel,
        }
    }
}

/// What a device can do besides compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCaps {
    /// Asynchronous transfers and compute.
    pub async_ops: bool,
    /// A pinned host buffer type for faster transfers.
    pub host_buffer: bool,
    /// Wrapping caller memory as a buffer without a copy.
    pub buffer_from_host_ptr: bool,
    /// Events for synchronisation between devices.
    pub events: bool,
}

/// A compute device of a registered backend.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    /// The backend registration that provides the device ("CPU", "Vulkan", "Metal" ...).
    pub backend: String,
    /// The device's name: pass it as `SessionOptions.device`.
    pub name: String,
    /// A human-readable description (the CPU model, the GPU adapter).
    pub description: String,
    /// The kind of device.
    #[serde(rename = "type")]
    pub device_type: DeviceType,
    /// Bytes of memory available now.
    pub memory_free: u64,
    /// Bytes of memory in all.
    pub memory_total: u64,
    /// Capabilities.
    pub caps: DeviceCaps,
}

fn device_info(device: &dyn Device, backend: &str) -> DeviceInfo {
    let props = device.props();
    DeviceInfo {
        backend: backend.to_string(),
        name: props.name,
        description: props.description,
        device_type: props.device_type.into(),
        memory_free: props.memory.free,
        memory_total: props.memory.total,
        caps: DeviceCaps {
            async_ops: props.caps.async_ops,
            host_buffer: props.caps.host_buffer,
            buffer_from_host_ptr: props.caps.buffer_from_host_ptr,
            events: props.caps.events,
        },
    }
}

/// Every device of the default registry, in registration (priority) order: the GPU first
/// when there is one, the CPU last.
#[uniffi::export]
pub fn devices() -> FfiResult<Vec<DeviceInfo>> {
    guard("devices", || {
        let loaded = crate::registry::loaded();
        Ok(loaded
            .registry
            .devices()
            .iter()
            .map(|d| {
                let name = d.name();
                let backend = loaded.backend_of.get(&name).cloned().unwrap_or(name);
                device_info(d.as_ref(), &backend)
            })
            .collect())
    })
}

/// One CPU feature as ggml names it, e.g. `DOTPROD = 1`, `SVE_CNT = 32`.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
pub struct FeaturePair {
    /// The feature's name.
    pub name: String,
    /// Its value: "1" / "0", or a number.
    pub value: String,
}

/// The kernel tier the CPU backend uses for matmuls with weights of one type.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
pub struct TierInfo {
    /// The weight type ("F32", "Q4_0" ...).
    pub dtype: String,
    /// The tier (tessera-cpu's kernel tier names): "scalar", "neon", "dotprod", "i8mm",
    /// "avx2", "avx512_vnni" ...
    pub tier: String,
}

/// The CPU's features and the kernel tier chosen for each weight type.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
pub struct CpuFeatureInfo {
    /// Every feature known for the architecture, present ("1") or not ("0").
    pub pairs: Vec<FeaturePair>,
    /// The kernel tier per weight type.
    pub tiers: Vec<TierInfo>,
}

/// The CPU's features (`name = value` pairs, as ggml lists them) and the kernel tier chosen
/// per weight type (`tessera_cpu::kernels::tier::tiers_by_type`).
#[uniffi::export]
pub fn cpu_features() -> FfiResult<CpuFeatureInfo> {
    guard("cpu_features", || {
        crate::logging::ensure_installed();
        let pairs = tessera_cpu::features::CpuFeatures::detect()
            .pairs()
            .into_iter()
            .map(|(name, value)| FeaturePair { name, value })
            .collect();
        let tiers = tessera_cpu::kernels::tier::tiers_by_type()
            .into_iter()
            .map(|(dtype, tier)| TierInfo { dtype: dtype.to_string(), tier: tier.to_string() })
            .collect();
        Ok(CpuFeatureInfo { pairs, tiers })
    })
}

/// How this library was built.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize)]
pub struct BuildInfo {
    /// The crate version.
    pub version: String,
    /// The target triple, e.g. "aarch64-linux-android".
    pub target: String,
    /// The cargo features enabled for tessera-ffi.
    pub features: Vec<String>,
    /// "debug" or "release" (whether debug assertions are on).
    pub profile: String,
}

/// The version, target triple, enabled features and profile of this build.
#[uniffi::export]
pub fn build_info() -> FfiResult<BuildInfo> {
    guard("build_info", || {
        let features = env!("TESSERA_FFI_FEATURES")
            .split(',')
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect();
        Ok(BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            target: env!("TESSERA_FFI_TARGET").to_string(),
            features,
            profile: if cfg!(debug_assertions) { "debug" } else { "release" }.to_string(),
        })
    })
}
