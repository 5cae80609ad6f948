//! Host memory: the CPU buffer type (64-byte aligned) and buffers wrapping caller memory.

use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_core::backend::{check_range, Buffer, BufferType, BufferUsage, HostMemory, UsageCell};
use tessera_core::{Error, Result};

/// Alignment of every CPU buffer and of every tensor placed in one, in bytes.
pub const CPU_ALIGNMENT: usize = 64;

/// Name of the CPU device and of its buffer type.
pub const CPU_NAME: &str = "CPU";

/// The CPU's buffer type: 64-byte aligned host memory.
#[derive(Debug, Default)]
pub struct CpuBufferType;

impl CpuBufferType {
    /// The buffer type as a shared trait object.
    pub fn shared() -> Arc<dyn BufferType> {
        Arc::new(CpuBufferType)
    }
}

impl BufferType for CpuBufferType {
    fn name(&self) -> String {
        CPU_NAME.to_string()
    }

    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(HostBuffer::new(size)?))
    }

    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }

    fn max_size(&self) -> usize {
        isize::MAX as usize / 2
    }

    fn is_host(&self) -> bool {
        true
    }

    fn device_name(&self) -> String {
        CPU_NAME.to_string()
    }
}

enum Memory {
    Owned { ptr: NonNull<u8>, layout: AllocLayout },
    Borrowed(Arc<dyn HostMemory>),
}

/// A buffer of host memory, either allocated here or wrapping caller memory.
pub struct HostBuffer {
    memory: Memory,
    size: usize,
    usage: UsageCell,
}

// SAFETY: the buffer owns (or keeps alive through `HostMemory`, whose contract requires
// thread-safe access) a plain byte allocation; all access goes through raw pointers whose
// synchronisation is the caller's (as in ggml, a buffer is written by one party at a time).
unsafe impl Send for HostBuffer {}
// SAFETY: see `Send`; no interior references are handed out beyond raw pointers.
unsafe impl Sync for HostBuffer {}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBuffer({} bytes)", self.size)
    }
}

impl HostBuffer {
    /// Allocates `size` zeroed bytes aligned to [`CPU_ALIGNMENT`].
    pub fn new(size: usize) -> Result<HostBuffer> {
        let oom = || Error::OutOfMemory { device: CPU_NAME.into(), size };
        let layout = AllocLayout::from_size_align(size.max(1), CPU_ALIGNMENT).map_err(|_| oom())?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(oom)?;
        Ok(HostBuffer { memory: Memory::Owned { ptr, layout }, size, usage: UsageCell::default() })
    }

    /// Wraps caller memory without copying.
    pub fn from_host_memory(memory: Arc<dyn HostMemory>) -> HostBuffer {
        let size = memory.len();
        HostBuffer { memory: Memory::Borrowed(memory), size, usage: UsageCell::default() }
    }

    fn base(&self) -> NonNull<u8> {
        match &self.memory {
            Memory::Owned { ptr, .. } => *ptr,
            Memory::Borrowed(m) => m.ptr(),
        }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Memory::Owned { ptr, layout } = &self.memory {
            // SAFETY: `ptr` was returned by `alloc_zeroed` with this `layout` and is freed once.
            unsafe { dealloc(ptr.as_ptr(), *layout) };
        }
    }
}

impl Buffer for HostBuffer {
    fn name(&self) -> String {
        CPU_NAME.to_string()
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        CpuBufferType::shared()
    }

    fn size(&self) -> usize {
        self.size
    }

    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }

    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage)
    }

    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.base())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self.size, offset, data.len())?;
        // SAFETY: the range was checked to lie within the buffer; `data` is a separate borrow
        // (it may point into this buffer only through a raw pointer, and `copy` allows overlap).
        unsafe { std::ptr::copy(data.as_ptr(), self.base().as_ptr().add(offset), data.len()) };
        Ok(())
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self.size, offset, out.len())?;
        // SAFETY: the range was checked to lie within the buffer.
        unsafe { std::ptr::copy(self.base().as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self.size, offset, len)?;
        // SAFETY: the range was checked to lie within the buffer.
        unsafe { std::ptr::write_bytes(self.base().as_ptr().add(offset), value, len) };
        Ok(())
    }

    fn copy_from(
        &self,
        src: &dyn Buffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<bool> {
        let Some(sp) = src.host_ptr() else { return Ok(false) };
        check_range(src.size(), src_offset, len)?;
        check_range(self.size, dst_offset, len)?;
        // SAFETY: both ranges were checked against their buffers' sizes; `copy` allows overlap.
        unsafe {
            std::ptr::copy(sp.as_ptr().add(src_offset), self.base().as_ptr().add(dst_offset), len)
        };
        Ok(true)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Caller memory held as a boxed byte slice, for tests and for callers that hand over a
/// `Vec<u8>` to be wrapped without a copy.
pub struct OwnedHostMemory {
    ptr: NonNull<u8>,
    len: usize,
    _owner: Box<[std::cell::UnsafeCell<u8>]>,
}

impl OwnedHostMemory {
    /// Takes ownership of `bytes`.
    pub fn new(bytes: Vec<u8>) -> OwnedHostMemory {
        let len = bytes.len();
        let boxed: Box<[std::cell::UnsafeCell<u8>]> =
            bytes.into_iter().map(std::cell::UnsafeCell::new).collect();
        let ptr = NonNull::new(boxed.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
        OwnedHostMemory { ptr, len, _owner: boxed }
    }
}

// SAFETY: the bytes are owned by the boxed slice, which is never moved or freed while this
// value lives; `UnsafeCell` makes writes through the pointer legitimate.
unsafe impl HostMemory for OwnedHostMemory {
    fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the memory is plain bytes; concurrent access is governed by the buffer's users.
unsafe impl Send for OwnedHostMemory {}
// SAFETY: as for `Send`.
unsafe impl Sync for OwnedHostMemory {}

/// Gives every tensor of `graph` that holds data (not views) and has no memory yet its own
/// range of one new CPU buffer, without any reuse: the simplest correct placement, for tests
/// and references.
pub fn allocate_all(graph: &mut tessera_core::Graph) -> Result<Arc<dyn Buffer>> {
    let ids = tessera_core::alloc::unplaced(graph);
    match tessera_core::alloc::place_sequentially(graph, &ids, &CpuBufferType)? {
        Some(buffer) => Ok(buffer),
        None => Ok(Arc::new(HostBuffer::new(0)?)),
    }
}
