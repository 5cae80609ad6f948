//! The CPU device and its backend registration.

use crate::backend::CpuBackend;
use crate::buffer::{CpuBufferType, HostBuffer, CPU_NAME};
use crate::features::{self, CpuFeatures};
use crate::kernels::repack::{self, RepackBufferType};
use std::sync::Arc;
use tessera_core::backend::{
    Backend, BackendParams, BackendReg, Buffer, BufferType, Device, DeviceCaps, DeviceType,
    HostMemory, MemoryInfo,
};
use tessera_core::{Graph, Result, TensorId};

/// The host CPU as a device.
#[derive(Debug, Default)]
pub struct CpuDevice;

impl CpuDevice {
    /// The device as a shared trait object.
    pub fn shared() -> Arc<dyn Device> {
        Arc::new(CpuDevice)
    }
}

impl Device for CpuDevice {
    fn name(&self) -> String {
        CPU_NAME.to_string()
    }

    fn description(&self) -> String {
        features::cpu_description()
    }

    fn memory(&self) -> MemoryInfo {
        let m = features::memory_info();
        MemoryInfo { free: m.free, total: m.total }
    }

    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_ops: false,
            host_buffer: false,
            buffer_from_host_ptr: true,
            events: false,
        }
    }

    fn init_backend(&self, params: &BackendParams) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new(params.threads)?))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        CpuBufferType::shared()
    }

    fn buffer_from_host_memory(
        &self,
        memory: Arc<dyn HostMemory>,
        _max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(HostBuffer::from_host_memory(memory)))
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        crate::reference::supports(graph, id)
    }

    /// Host memory, and "CPU_REPACK" buffers, whose tensors only MUL_MAT reads (as weights:
    /// the scheduler places nothing else there, and the backend refuses other readers).
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        buffer_type.is_host() || buffer_type.as_any().is::<RepackBufferType>()
    }
}

/// The CPU backend registration: one device, the feature list and extra buffer types.
#[derive(Debug, Default)]
pub struct CpuBackendReg;

impl CpuBackendReg {
    /// The registration as a shared trait object.
    pub fn shared() -> Arc<dyn BackendReg> {
        Arc::new(CpuBackendReg)
    }
}

impl BackendReg for CpuBackendReg {
    fn name(&self) -> String {
        CPU_NAME.to_string()
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![CpuDevice::shared()]
    }

    /// "CPU_REPACK" when the active kernel tier has kernels for interleaved weights; it
    /// accepts the weights that [`repack::can_repack`] allows.
    fn extra_buffer_types(&self, _device: &dyn Device) -> Vec<Arc<dyn BufferType>> {
        repack::repack_buffer_type().into_iter().collect()
    }

    /// The CPU features with ggml's names, then the kernel tier chosen for each weight type
    /// as `TIER_<type> = <tier>`.
    fn features(&self) -> Vec<(String, String)> {
        let mut pairs = CpuFeatures::detect().pairs();
        pairs.extend(
            crate::kernels::tier::tiers_by_type()
                .into_iter()
                .map(|(dtype, tier)| (format!("TIER_{dtype}"), tier.to_string())),
        );
        pairs
    }
}

/// The default thread count: the performance cores where known, else the available
/// parallelism.
pub fn default_threads() -> usize {
    features::performance_core_count()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}
