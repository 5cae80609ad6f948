//! A GPU device: one wgpu adapter with its logical device, named after its API ("Vulkan0",
//! "Metal").
//!
//! What it reports:
//! - description: the adapter's name (e.g. "Apple M2", "llvmpipe (LLVM 15.0.6, 256 bits)");
//! - type: [`DeviceType::Gpu`] for discrete, virtual and unknown adapters,
//!   [`DeviceType::IntegratedGpu`] for integrated ones and for software rasterizers such as
//!   lavapipe (wgpu's `DeviceType::Cpu`), whose memory is host memory like an integrated GPU's;
//!   [`GpuDevice::is_software`] tells them apart;
//! - memory: wgpu exposes no heap sizes, so `total` is the adapter's largest buffer
//!   (`Limits::max_buffer_size`), a bound on what one allocation can take, and `free` is that
//!   bound minus the bytes this device's buffers hold now.

use crate::backend::GpuBackend;
use crate::buffer::GpuBuffer;
use crate::buffer::GpuBufferType;
use crate::context::Context;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tessera_core::backend::{
    Backend, BackendParams, Buffer, BufferType, Device, DeviceCaps, DeviceType, HostMemory,
    MemoryInfo,
};
use tessera_core::{Graph, Result, TensorId};

/// One GPU adapter as a Tessera device.
#[derive(Clone, Debug)]
pub struct GpuDevice {
    ctx: Arc<Context>,
}

impl GpuDevice {
    pub(crate) fn new(ctx: Arc<Context>) -> GpuDevice {
        GpuDevice { ctx }
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// What wgpu reports about the adapter (name, vendor, driver, backend, type).
    pub fn adapter_info(&self) -> wgpu::AdapterInfo {
        self.ctx.info.clone()
    }

    /// The limits of the logical device (the adapter's best limits).
    pub fn limits(&self) -> wgpu::Limits {
        self.ctx.limits.clone()
    }

    /// Whether the adapter offers 16-bit floats in shaders (`shader-f16`). The kernels do not
    /// need it (they decode F16 with integer arithmetic), but use it where it is enabled (see
    /// [`GpuDevice::uses_shader_f16`]).
    pub fn has_shader_f16(&self) -> bool {
        self.ctx.adapter_features.contains(wgpu::Features::SHADER_F16)
    }

    /// Whether the kernels run from their `shader-f16` sources on this device (the adapter
    /// offers it and `TESSERA_GPU_F16=0` was not set when the device was opened).
    pub fn uses_shader_f16(&self) -> bool {
        self.ctx.f16
    }

    /// Whether the adapter is a software rasterizer on the CPU (lavapipe, SwiftShader).
    pub fn is_software(&self) -> bool {
        self.ctx.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Whether the device was lost; every later operation fails with `Error::Backend`.
    pub fn is_lost(&self) -> bool {
        self.ctx.is_lost()
    }

    /// Destroys the wgpu device, as a driver reset would: every later transfer or compute on
    /// this device fails with `Error::Backend`. Used to test device loss.
    pub fn destroy(&self) {
        self.ctx.mark_lost("the device was destroyed");
        self.ctx.device.destroy();
    }
}

/// Tessera's type of a wgpu adapter type (see the module documentation).
pub fn device_type_of(t: wgpu::DeviceType) -> DeviceType {
    match t {
        wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu => DeviceType::IntegratedGpu,
        wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::VirtualGpu | wgpu::DeviceType::Other => {
            DeviceType::Gpu
        }
    }
}

impl Device for GpuDevice {
    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn is_software(&self) -> bool {
        GpuDevice::is_software(self)
    }

    fn description(&self) -> String {
        self.ctx.info.name.clone()
    }

    fn memory(&self) -> MemoryInfo {
        let total = self.ctx.limits.max_buffer_size;
        let used = self.ctx.allocated.load(Ordering::Relaxed);
        MemoryInfo { free: total.saturating_sub(used), total }
    }

    fn device_type(&self) -> DeviceType {
        device_type_of(self.ctx.info.device_type)
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_ops: false,
            host_buffer: false,
            buffer_from_host_ptr: false,
            events: false,
        }
    }

    fn init_backend(&self, params: &BackendParams) -> Result<Box<dyn Backend>> {
        let _ = params;
        self.ctx.check()?;
        Ok(Box::new(GpuBackend::new(self.clone())))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(GpuBufferType::new(self.ctx.clone()))
    }

    /// A buffer in device memory holding a copy of `memory` (a model file mapped read-only,
    /// say): wgpu cannot compute on host memory, so the bytes are uploaded once, in pieces,
    /// with at most a few tens of MiB of staging memory at a time (never a second full copy),
    /// and the upload has finished when this returns (`memory` may then be unmapped).
    /// `max_tensor_size` is not needed: a tensor may span the whole buffer. Nobody may write
    /// `memory` during the call.
    fn buffer_from_host_memory(
        &self,
        memory: Arc<dyn HostMemory>,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        let _ = max_tensor_size;
        let buf = GpuBuffer::new(self.ctx.clone(), memory.len())?;
        // SAFETY: `HostMemory` guarantees `len()` valid bytes at `ptr()` for as long as the
        // value lives, and `memory` is held until the end of this function; nobody writes it
        // meanwhile (this function's contract), so a shared slice of it is sound.
        let bytes = unsafe { std::slice::from_raw_parts(memory.ptr().as_ptr(), memory.len()) };
        buf.write(0, bytes)?;
        self.ctx.wait()?;
        Ok(Arc::new(buf))
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        crate::supports::supports_op(graph, id, self.ctx.max_binding)
    }

    /// This device's own buffers (of a buffer type made from its context).
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        buffer_type.as_any().downcast_ref::<GpuBufferType>().is_some_and(|b| b.is_of(&self.ctx))
    }
}
