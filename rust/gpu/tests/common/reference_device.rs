//! The scalar reference (`tessera_cpu::reference`: f32 values, f64 sums) as a device named
//! "REF", so that a whole model runs on it: what the GPU's logits are measured against. It
//! reports itself as a CPU, so that a context on it gets no CPU fallback and every node runs
//! here; its memory is the CPU's.

use std::any::Any;
use std::sync::Arc;
use tessera_core::backend::{
    Backend, BackendParams, BackendReg, Buffer, BufferType, Device, DeviceCaps, DeviceType,
    GraphPlan, HostMemory, MemoryInfo,
};
use tessera_core::{Graph, Result, TensorId};

/// The device.
pub struct RefDevice;
struct RefBackend;
struct RefPlan(Vec<TensorId>);
/// Its registration.
pub struct RefReg;

impl GraphPlan for RefPlan {
    fn nodes(&self) -> &[TensorId] {
        &self.0
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Backend for RefBackend {
    fn name(&self) -> String {
        "REF".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(RefDevice)
    }
    fn graph_plan_create(&mut self, _: &Graph, nodes: &[TensorId]) -> Result<Box<dyn GraphPlan>> {
        Ok(Box::new(RefPlan(nodes.to_vec())))
    }
    fn graph_plan_compute(&mut self, graph: &Graph, plan: &dyn GraphPlan) -> Result<()> {
        let nodes = plan.nodes().to_vec();
        self.compute_nodes(graph, &nodes)
    }
    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        tessera_cpu::reference::compute_nodes(graph, nodes, &|| false)
    }
}

impl Device for RefDevice {
    fn name(&self) -> String {
        "REF".into()
    }
    fn description(&self) -> String {
        "the scalar reference".into()
    }
    fn memory(&self) -> MemoryInfo {
        tessera_cpu::CpuDevice.memory()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }
    fn caps(&self) -> DeviceCaps {
        tessera_cpu::CpuDevice.caps()
    }
    fn init_backend(&self, _: &BackendParams) -> Result<Box<dyn Backend>> {
        Ok(Box::new(RefBackend))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        tessera_cpu::CpuDevice.buffer_type()
    }
    fn buffer_from_host_memory(
        &self,
        memory: Arc<dyn HostMemory>,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        tessera_cpu::CpuDevice.buffer_from_host_memory(memory, max_tensor_size)
    }
    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        tessera_cpu::reference::supports(graph, id)
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        buffer_type.is_host()
    }
}

impl BackendReg for RefReg {
    fn name(&self) -> String {
        "REF".into()
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![Arc::new(RefDevice)]
    }
}
