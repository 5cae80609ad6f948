//! The backend traits, after ggml-backend: buffer types allocate buffers, devices offer buffer
//! types and create backends, registrations group devices, backends compute graphs, and events
//! order work between backends.
//!
//! ggml's vtables become traits and its `get_proc_address` extensions become methods with
//! defaults, so an implementation states what it supports in its type.

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::{Layout, TensorId};
use std::any::Any;
use std::fmt::Debug;
use std::ptr::NonNull;
use std::sync::Arc;

/// What a buffer holds, which guides scheduling (ggml's `ggml_backend_buffer_usage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BufferUsage {
    /// Anything.
    #[default]
    Any,
    /// Model weights: ops that read them are pulled to the buffer's device.
    Weights,
    /// Intermediate results of a graph.
    Compute,
}

/// A buffer's [`BufferUsage`], readable and settable through a shared reference.
#[derive(Debug, Default)]
pub struct UsageCell(std::sync::atomic::AtomicU8);

impl UsageCell {
    /// The current usage.
    pub fn get(&self) -> BufferUsage {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            1 => BufferUsage::Weights,
            2 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }

    /// Sets the usage.
    pub fn set(&self, usage: BufferUsage) {
        let v = match usage {
            BufferUsage::Any => 0,
            BufferUsage::Weights => 1,
            BufferUsage::Compute => 2,
        };
        self.0.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A kind of memory on a device (ggml's `ggml_backend_buffer_type`).
pub trait BufferType: Send + Sync + Debug {
    /// Name, e.g. "CPU" or "CPU_REPACK".
    fn name(&self) -> String;
    /// Allocates a buffer of `size` bytes (at least one byte is always allocated).
    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>>;
    /// Alignment in bytes of every tensor placed in buffers of this type.
    fn alignment(&self) -> usize;
    /// Largest buffer this type can allocate.
    fn max_size(&self) -> usize {
        usize::MAX
    }
    /// Bytes a tensor of `layout` needs in this buffer type (may exceed `nbytes`, e.g. padding).
    fn alloc_size(&self, layout: &Layout) -> usize {
        layout.nbytes()
    }
    /// Whether the memory is host memory that the CPU can read and write directly.
    fn is_host(&self) -> bool;
    /// Name of the device that owns the memory.
    fn device_name(&self) -> String;
    /// Whether this (extra) buffer type wants to hold a weight of `layout` whose only readers
    /// are MUL_MAT nodes taking it as their first operand (ggml's extra buffer types chosen
    /// for weights by their consumer op, e.g. "CPU_REPACK" for the types it interleaves). The
    /// scheduler then places such weights here (see [`crate::sched::Scheduler`]).
    fn accepts_weight(&self, layout: &Layout) -> bool {
        let _ = layout;
        false
    }
    /// The concrete buffer type, so that a device recognises its own types by what they are
    /// rather than by their names.
    fn as_any(&self) -> &dyn Any;
}

/// The buffer type for a weight of `layout` on `device` whose only readers are MUL_MAT nodes
/// taking it as their first operand: the first of `extra` (the device's extra buffer types,
/// [`crate::registry::Registry::extra_buffer_types`]) that [accepts](BufferType::accepts_weight)
/// it and that the device reads; `None` for the device's own memory. The one rule for placing
/// weights in a layout of their own (repacked), used for graph constants (the scheduler), model
/// weights (the runtime) and model-file tensors of graph documents (the FFI).
pub fn weight_buffer_type<'a>(
    extra: &'a [Arc<dyn BufferType>],
    device: &dyn Device,
    layout: &Layout,
) -> Option<&'a Arc<dyn BufferType>> {
    extra.iter().find(|bt| bt.accepts_weight(layout) && device.supports_buffer_type(bt.as_ref()))
}

/// Memory owned by someone else (a memory-mapped file, a caller's array) that a device can wrap
/// as a buffer without copying.
///
/// # Safety
///
/// `ptr()` must point to `len()` bytes that stay valid, and are not moved, for as long as the
/// value lives, and that may be read through the pointer from any thread. Unless
/// [`HostMemory::read_only`] says otherwise they may also be written from any thread; memory
/// that is read-only (a file mapped with `PROT_READ`) must say so, and buffers wrapping it
/// refuse every write with an error instead of faulting.
pub unsafe trait HostMemory: Send + Sync {
    /// Start of the memory.
    fn ptr(&self) -> NonNull<u8>;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the memory must never be written (e.g. a read-only file mapping).
    fn read_only(&self) -> bool {
        false
    }
}

/// Memory on a device (ggml's `ggml_backend_buffer`).
///
/// Offsets are absolute byte positions in the buffer; every access is bounds-checked and
/// returns [`Error::OutOfBounds`] instead of touching memory outside the buffer.
pub trait Buffer: Send + Sync + Debug {
    /// Name of the buffer type.
    fn name(&self) -> String;
    /// The buffer type that allocated this buffer.
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    /// Size in bytes.
    fn size(&self) -> usize;
    /// Current usage.
    fn usage(&self) -> BufferUsage;
    /// Sets the usage.
    fn set_usage(&self, usage: BufferUsage);
    /// Start of the memory when the CPU can address it directly.
    fn host_ptr(&self) -> Option<NonNull<u8>>;
    /// Whether the memory must never be written (a read-only file mapping): writes, fills and
    /// copies into it fail with [`Error::ReadOnly`], and backends refuse to compute into it.
    fn is_read_only(&self) -> bool {
        false
    }
    /// Prepares a tensor of `layout` placed at `offset` (e.g. padding, extra metadata).
    fn init_tensor(&self, layout: &Layout, offset: usize) -> Result<()> {
        check_range(self.size(), offset, layout.nbytes())
    }
    /// Writes `data` at `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Reads `out.len()` bytes from `offset`.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Sets `len` bytes from `offset` to `value`.
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()>;
    /// Copies `len` bytes from `src` at `src_offset` to `dst_offset` of this buffer if this
    /// buffer type can do so directly; returns `Ok(false)` when the caller must go through host
    /// memory instead.
    fn copy_from(
        &self,
        src: &dyn Buffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<bool> {
        let _ = (src, src_offset, dst_offset, len);
        Ok(false)
    }
    /// Sets every byte to `value`.
    fn clear(&self, value: u8) -> Result<()> {
        self.fill(0, self.size(), value)
    }
    /// Forgets per-tensor state set by `init_tensor`.
    fn reset(&self) {}
    /// The concrete buffer, for backends that need their own buffer type.
    fn as_any(&self) -> &dyn Any;
}

/// The entries `range` of a plan's `steps` (its nodes, or a backend's own per-node steps), or
/// the error naming the range and the plan's size ([`Backend::graph_plan_compute_range`]).
pub fn plan_range<T>(steps: &[T], range: std::ops::Range<usize>) -> Result<&[T]> {
    let n = steps.len();
    steps
        .get(range.clone())
        .ok_or_else(|| Error::InvalidArgument(format!("nodes {range:?} of a plan of {n} nodes")))
}

/// Checks that `len` bytes from `offset` lie within `size` bytes.
pub fn check_range(size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds(format!(
            "{len} bytes at offset {offset} exceed a buffer of {size} bytes"
        ))),
    }
}

/// Copies `len` bytes between two buffers, directly when the destination supports it, else
/// through host memory.
pub fn copy_between(
    src: &dyn Buffer,
    src_offset: usize,
    dst: &dyn Buffer,
    dst_offset: usize,
    len: usize,
) -> Result<()> {
    check_range(src.size(), src_offset, len)?;
    check_range(dst.size(), dst_offset, len)?;
    if dst.copy_from(src, src_offset, dst_offset, len)? {
        return Ok(());
    }
    let mut tmp = vec![0u8; len];
    src.read(src_offset, &mut tmp)?;
    dst.write(dst_offset, &tmp)
}

/// A group of buffers allocated together and handled as one (ggml's multi-buffer): usage and
/// clearing apply to every part.
#[derive(Debug, Clone, Default)]
pub struct MultiBuffer {
    /// The parts.
    pub parts: Vec<Arc<dyn Buffer>>,
}

impl MultiBuffer {
    /// Total size of the parts.
    pub fn size(&self) -> usize {
        self.parts.iter().map(|b| b.size()).sum()
    }
    /// Sets the usage of every part.
    pub fn set_usage(&self, usage: BufferUsage) {
        self.parts.iter().for_each(|b| b.set_usage(usage));
    }
    /// Clears every part.
    pub fn clear(&self, value: u8) -> Result<()> {
        self.parts.iter().try_for_each(|b| b.clear(value))
    }
}

/// The kind of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// A discrete GPU with its own memory.
    Gpu,
    /// A GPU that shares memory with the CPU (phones, Apple silicon).
    IntegratedGpu,
    /// Another accelerator (NPU, ...).
    Accelerator,
}

impl DeviceType {
    /// Lower-case name: "cpu", "gpu", "igpu", "accel".
    pub fn short_name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Gpu => "gpu",
            DeviceType::IntegratedGpu => "igpu",
            DeviceType::Accelerator => "accel",
        }
    }
}

/// What a device can do besides compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Asynchronous transfers and compute.
    pub async_ops: bool,
    /// A pinned host buffer type for faster transfers.
    pub host_buffer: bool,
    /// Wrapping caller memory as a buffer without a copy.
    pub buffer_from_host_ptr: bool,
    /// Events for synchronisation.
    pub events: bool,
}

/// Free and total memory of a device, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes available now.
    pub free: u64,
    /// Bytes in all.
    pub total: u64,
}

/// Everything a device reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Short name, e.g. "CPU", "Vulkan0".
    pub name: String,
    /// Human-readable description, e.g. the CPU model or the GPU adapter's name.
    pub description: String,
    /// Memory.
    pub memory: MemoryInfo,
    /// Kind.
    pub device_type: DeviceType,
    /// Capabilities.
    pub caps: DeviceCaps,
}

/// Options for creating a backend on a device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendParams {
    /// Worker threads, where the device uses them; `None` for the device's default.
    pub threads: Option<usize>,
}

/// A function polled during compute; returning `true` stops it with [`Error::Aborted`].
pub type AbortCallback = Arc<dyn Fn() -> bool + Send + Sync>;

/// A compute device (ggml's `ggml_backend_dev`).
pub trait Device: Send + Sync {
    /// Short name, unique in a registry.
    fn name(&self) -> String;
    /// Human-readable description.
    fn description(&self) -> String;
    /// Free and total memory.
    fn memory(&self) -> MemoryInfo;
    /// Kind of device.
    fn device_type(&self) -> DeviceType;
    /// Capabilities.
    fn caps(&self) -> DeviceCaps;
    /// Whether the device is a software emulation running on the CPU (e.g. lavapipe): usable
    /// and tested, but never preferred over the CPU itself.
    fn is_software(&self) -> bool {
        false
    }
    /// Everything at once.
    fn props(&self) -> DeviceProps {
        DeviceProps {
            name: self.name(),
            description: self.description(),
            memory: self.memory(),
            device_type: self.device_type(),
            caps: self.caps(),
        }
    }
    /// Creates a backend (a stream of work) on this device.
    fn init_backend(&self, params: &BackendParams) -> Result<Box<dyn Backend>>;
    /// The device's default buffer type.
    fn buffer_type(&self) -> Arc<dyn BufferType>;
    /// A host buffer type that makes transfers to this device faster, if any.
    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        None
    }
    /// Wraps `memory` as a buffer without copying; fails where the device cannot.
    fn buffer_from_host_memory(
        &self,
        memory: Arc<dyn HostMemory>,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        let _ = (memory, max_tensor_size);
        Err(Error::Backend {
            backend: self.name(),
            message: "buffers from host memory are not supported".into(),
        })
    }
    /// Whether the device can compute node `id` of `graph` (its op and operand types).
    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool;
    /// Whether backends of this device can read tensors from buffers of `buffer_type`.
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool;
    /// Whether an op whose weights live on the host should still run on this device
    /// (worth the transfer, e.g. large batches).
    fn offload_op(&self, graph: &Graph, id: TensorId) -> bool {
        let _ = (graph, id);
        false
    }
    /// A new event, when the device supports them.
    fn new_event(&self) -> Option<Arc<dyn Event>> {
        None
    }
}

/// A point in a backend's stream of work that others can wait for (ggml's `ggml_backend_event`).
pub trait Event: Send + Sync {
    /// Blocks until the work recorded before this event has finished.
    fn synchronize(&self) -> Result<()>;
    /// Marks the event as pending, to be signalled by [`Event::signal`].
    fn reset(&self);
    /// Signals the event: the work recorded before it has finished.
    fn signal(&self);
}

/// A group of devices of one kind (ggml's `ggml_backend_reg`), with optional extensions.
pub trait BackendReg: Send + Sync {
    /// Name, e.g. "CPU", "Vulkan".
    fn name(&self) -> String;
    /// The devices.
    fn devices(&self) -> Vec<Arc<dyn Device>>;
    /// Feature list as `name = value` pairs (e.g. `DOTPROD = 1`).
    fn features(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Extra buffer types of a device of this registration (e.g. "CPU_REPACK").
    fn extra_buffer_types(&self, device: &dyn Device) -> Vec<Arc<dyn BufferType>> {
        let _ = device;
        Vec::new()
    }
}

/// A node that a plan computes with a backend's reference code rather than a fast kernel,
/// and why (recorded once, when the plan is made).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanFallback {
    /// The node.
    pub node: TensorId,
    /// Its op's name, e.g. "CONT".
    pub op: String,
    /// Its label (name and id).
    pub label: String,
    /// Why no fast kernel takes it.
    pub reason: String,
}

/// A precomputed plan for running a graph repeatedly (ggml's `ggml_backend_graph_plan`).
pub trait GraphPlan: Send {
    /// The nodes the plan computes, in order.
    fn nodes(&self) -> &[TensorId];
    /// Downcasting for the backend that made the plan.
    fn as_any(&self) -> &dyn Any;
    /// The nodes the plan leaves to reference code, with the reason (none by default).
    fn fallbacks(&self) -> &[PlanFallback] {
        &[]
    }
}

/// A stream of work on a device (ggml's `ggml_backend`).
pub trait Backend: Send {
    /// Name of the backend.
    fn name(&self) -> String;
    /// The device it runs on.
    fn device(&self) -> Arc<dyn Device>;
    /// The default buffer type for tensors computed here.
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.device().buffer_type()
    }
    /// Writes `data` into tensor `id` at byte `offset` of it; may return before the write is
    /// done on asynchronous backends ([`Backend::synchronize`] waits).
    fn set_tensor_async(
        &mut self,
        graph: &Graph,
        id: TensorId,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        crate::tensor_data::write_tensor(graph, id, offset, data)
    }
    /// Reads tensor `id` from byte `offset` into `out`.
    fn get_tensor_async(
        &mut self,
        graph: &Graph,
        id: TensorId,
        offset: usize,
        out: &mut [u8],
    ) -> Result<()> {
        crate::tensor_data::read_tensor(graph, id, offset, out)
    }
    /// Waits for all queued work.
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }
    /// Sets the number of worker threads (errors where the backend has none or `n` is invalid).
    fn set_n_threads(&mut self, n: usize) -> Result<()> {
        let _ = n;
        Err(Error::InvalidArgument(format!("{}: thread count cannot be set", self.name())))
    }
    /// Sets or clears the abort callback, polled between nodes and inside long ops.
    fn set_abort_callback(&mut self, callback: Option<AbortCallback>) {
        let _ = callback;
    }
    /// Prepares to compute `nodes` of `graph` repeatedly.
    fn graph_plan_create(
        &mut self,
        graph: &Graph,
        nodes: &[TensorId],
    ) -> Result<Box<dyn GraphPlan>>;
    /// Computes a plan made by this backend for `graph`.
    fn graph_plan_compute(&mut self, graph: &Graph, plan: &dyn GraphPlan) -> Result<()>;
    /// The plan the scheduler keeps for `nodes` of `graph` (a split of a graph it allocated),
    /// made once per allocation and computed at every [`crate::sched::Scheduler::compute`];
    /// `None` (the default): the scheduler calls [`Backend::compute_nodes`] each time. A
    /// backend's plan may resolve the memory of `graph`'s tensors when it is made: the
    /// scheduler keeps the graph, and its storage, unchanged for as long as it keeps the plan.
    fn graph_plan_prepare(
        &mut self,
        graph: &Graph,
        nodes: &[TensorId],
    ) -> Result<Option<Box<dyn GraphPlan>>> {
        let _ = (graph, nodes);
        Ok(None)
    }
    /// Computes the nodes `range` (indices into [`GraphPlan::nodes`]) of a plan made by this
    /// backend for `graph` (the scheduler computes one node at a time under an eval
    /// callback).
    fn graph_plan_compute_range(
        &mut self,
        graph: &Graph,
        plan: &dyn GraphPlan,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        let nodes = plan_range(plan.nodes(), range)?.to_vec();
        self.compute_nodes(graph, &nodes)
    }
    /// Computes `nodes` (ids of `graph`, in order) whose operands are already computed.
    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()>;
    /// Computes every node of `graph`.
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        let nodes = graph.nodes();
        self.compute_nodes(graph, &nodes)
    }
    /// Records `event` after the work queued so far.
    fn event_record(&mut self, event: &dyn Event) -> Result<()> {
        self.synchronize()?;
        event.signal();
        Ok(())
    }
    /// Makes later work on this backend wait for `event`.
    fn event_wait(&mut self, event: &dyn Event) -> Result<()> {
        event.synchronize()
    }
}
