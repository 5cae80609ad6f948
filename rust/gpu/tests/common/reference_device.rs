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

/// The repository's root.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The index of the largest value (the lowest on ties, as the fixtures' greedy choice).
pub fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// The largest absolute difference between `a` and `b`.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A registry of the GPU, the CPU (registered before REF, so that a GPU context's CPU
/// fallback is the CPU) and REF; and the GPU device's name.
pub fn gpu_cpu_ref_registry() -> (tessera_core::registry::Registry, String) {
    let mut reg = tessera_core::registry::Registry::new();
    reg.register_with("GPU", tessera_gpu::register);
    reg.register(tessera_cpu::CpuBackendReg::shared());
    reg.register(Arc::new(RefReg));
    (reg, tessera_gpu::api_name().to_string() + "0")
}

/// The model at `path` loaded on the device `name` of `reg`.
pub fn load_on(
    reg: &tessera_core::registry::Registry,
    path: &std::path::Path,
    name: &str,
) -> Arc<tessera_llm::Model> {
    let choice = tessera_llm::DeviceChoice::Named(name.into());
    Arc::new(
        tessera_llm::Model::load(path, reg, &choice, &mut |_| true)
            .unwrap_or_else(|e| panic!("loading {} on {name}: {e}", path.display())),
    )
}
