//! The scheduler places weights read only by MUL_MAT (as src0) in an extra buffer type that
//! accepts them, and everything else as before.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use tessera_core::backend::{
    check_range, Backend, BackendParams, Buffer, BufferType, BufferUsage, Device, DeviceCaps,
    DeviceType, GraphPlan, MemoryInfo, UsageCell,
};
use tessera_core::sched::Scheduler;
use tessera_core::{DType, Graph, Layout, Result, TensorId};

/// A buffer type of plain memory: "FAKE", or "FAKE_EXTRA" accepting Q4_0 weights.
#[derive(Debug)]
struct FakeType {
    extra: bool,
}

impl BufferType for FakeType {
    fn name(&self) -> String {
        if self.extra { "FAKE_EXTRA" } else { "FAKE" }.into()
    }
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(FakeBuffer {
            extra: self.extra,
            bytes: Mutex::new(vec![0; size.max(1)]),
            usage: UsageCell::default(),
        }))
    }
    fn alignment(&self) -> usize {
        32
    }
    fn is_host(&self) -> bool {
        false
    }
    fn device_name(&self) -> String {
        "FAKEDEV".into()
    }
    fn accepts_weight(&self, layout: &Layout) -> bool {
        self.extra && layout.dtype == DType::Q4_0
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[derive(Debug)]
struct FakeBuffer {
    extra: bool,
    bytes: Mutex<Vec<u8>>,
    usage: UsageCell,
}

impl Buffer for FakeBuffer {
    fn name(&self) -> String {
        FakeType { extra: self.extra }.name()
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(FakeType { extra: self.extra })
    }
    fn size(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }
    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage)
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        None
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut b = self.bytes.lock().unwrap();
        check_range(b.len(), offset, data.len())?;
        b[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let b = self.bytes.lock().unwrap();
        check_range(b.len(), offset, out.len())?;
        out.copy_from_slice(&b[offset..offset + out.len()]);
        Ok(())
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        let mut b = self.bytes.lock().unwrap();
        check_range(b.len(), offset, len)?;
        b[offset..offset + len].fill(value);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A device that runs every op and reads "FAKE" buffers, and "FAKE_EXTRA" ones when
/// `reads_extra`.
struct FakeDevice {
    reads_extra: bool,
}

impl Device for FakeDevice {
    fn name(&self) -> String {
        "FAKEDEV".into()
    }
    fn description(&self) -> String {
        "a device for scheduler tests".into()
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo::default()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }
    fn init_backend(&self, _params: &BackendParams) -> Result<Box<dyn Backend>> {
        Ok(Box::new(FakeBackend { reads_extra: self.reads_extra }))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(FakeType { extra: false })
    }
    fn supports_op(&self, _graph: &Graph, _id: TensorId) -> bool {
        true
    }
    fn supports_buffer_type(&self, bt: &dyn BufferType) -> bool {
        bt.name() == "FAKE" || (self.reads_extra && bt.name() == "FAKE_EXTRA")
    }
}

/// A backend that computes nothing (only placement is tested).
struct FakeBackend {
    reads_extra: bool,
}

impl Backend for FakeBackend {
    fn name(&self) -> String {
        "FAKEDEV".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(FakeDevice { reads_extra: self.reads_extra })
    }
    fn graph_plan_create(&mut self, _g: &Graph, _n: &[TensorId]) -> Result<Box<dyn GraphPlan>> {
        unimplemented!("not used by these tests")
    }
    fn graph_plan_compute(&mut self, _g: &Graph, _p: &dyn GraphPlan) -> Result<()> {
        unimplemented!("not used by these tests")
    }
    fn compute_nodes(&mut self, _graph: &Graph, _nodes: &[TensorId]) -> Result<()> {
        Ok(())
    }
}

struct Weights {
    /// Q4_0, read only by a MUL_MAT as src0: eligible.
    w: TensorId,
    /// Q4_0, read by a MUL_MAT and by GET_ROWS.
    shared: TensorId,
    /// F32, read only by a MUL_MAT: the extra type does not accept F32.
    f32w: TensorId,
    /// Q4_0, read by a MUL_MAT through a view.
    viewed: TensorId,
    /// Q4_0, read only by a MUL_MAT, but also a graph output.
    output: TensorId,
    /// The activations (an input).
    x: TensorId,
}

fn graph() -> (Graph, Weights) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[64, 3]).unwrap();
    let idx = g.input("idx", DType::I32, &[2]).unwrap();
    let w = g.weight("w", DType::Q4_0, &[64, 16]).unwrap();
    let shared = g.weight("shared", DType::Q4_0, &[64, 16]).unwrap();
    let f32w = g.weight("f32w", DType::F32, &[64, 16]).unwrap();
    let viewed = g.weight("viewed", DType::Q4_0, &[64, 32]).unwrap();
    let output = g.weight("output", DType::Q4_0, &[64, 16]).unwrap();
    let y1 = g.mul_mat(w, x).unwrap();
    let y2 = g.mul_mat(shared, x).unwrap();
    let rows = g.get_rows(shared, idx).unwrap();
    let y3 = g.mul_mat(f32w, x).unwrap();
    let half = g.view(viewed, &[64, 16], &[g.tensor(viewed).nb()[1]], 0).unwrap();
    let y4 = g.mul_mat(half, x).unwrap();
    let y5 = g.mul_mat(output, x).unwrap();
    for o in [y1, y2, rows, y3, y4, y5, output] {
        g.set_output(o).unwrap();
    }
    (g, Weights { w, shared, f32w, viewed, output, x })
}

fn buffer_name(g: &Graph, id: TensorId) -> String {
    g.storage_of(id).expect("placed").buffer.name()
}

fn scheduler(reads_extra: bool) -> Scheduler {
    let dev = FakeDevice { reads_extra };
    Scheduler::new(vec![dev.init_backend(&BackendParams::default()).unwrap()]).unwrap()
}

#[test]
fn a_weight_read_only_by_mul_mat_goes_to_the_accepting_extra_buffer_type() {
    let mut s = scheduler(true);
    s.set_extra_buffer_types(0, vec![Arc::new(FakeType { extra: true })]).unwrap();
    let (mut g, w) = graph();
    s.alloc_graph(&mut g).unwrap();
    assert_eq!(buffer_name(&g, w.w), "FAKE_EXTRA");
    let s0 = g.storage_of(w.w).unwrap();
    assert_eq!(s0.buffer.usage(), BufferUsage::Weights);
    for (what, id) in [
        ("a weight GET_ROWS reads too", w.shared),
        ("an F32 weight", w.f32w),
        ("a weight read through a view", w.viewed),
        ("a weight that is an output", w.output),
        ("an input", w.x),
    ] {
        assert_eq!(buffer_name(&g, id), "FAKE", "{what}");
    }
    // The data written to the weight is where the scheduler's graph reads it.
    let bytes: Vec<u8> = (0..g.tensor(w.w).nbytes()).map(|i| i as u8).collect();
    tessera_core::tensor_data::set_tensor(&g, w.w, &bytes).unwrap();
    assert_eq!(tessera_core::tensor_data::get_tensor(&g, w.w).unwrap(), bytes);
    s.compute().unwrap();
}

#[test]
fn without_extra_types_or_a_device_that_reads_them_weights_stay_in_the_default_type() {
    // No extra types.
    let mut s = scheduler(true);
    let (mut g, w) = graph();
    s.alloc_graph(&mut g).unwrap();
    assert_eq!(buffer_name(&g, w.w), "FAKE");
    // An extra type the device cannot read.
    let mut s = scheduler(false);
    s.set_extra_buffer_types(0, vec![Arc::new(FakeType { extra: true })]).unwrap();
    let (mut g, w) = graph();
    s.alloc_graph(&mut g).unwrap();
    assert_eq!(buffer_name(&g, w.w), "FAKE");
    // Setting the types of a backend that does not exist fails.
    assert!(s.set_extra_buffer_types(1, Vec::new()).is_err());
}
