//! Host memory: the CPU buffer type (64-byte aligned) and buffers wrapping caller memory.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout as AllocLayout};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;
use tessera_core::backend::{check_range, Buffer, BufferType, BufferUsage, HostMemory, UsageCell};
use tessera_core::{Error, Result};

/// Alignment of every CPU buffer and of every tensor placed in one, in bytes.
pub const CPU_ALIGNMENT: usize = 64;

/// Size of a transparent huge page on the platforms that advise them (Linux, Android); CPU
/// buffers at least this large are aligned to it.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Advises the kernel to back `len` bytes at `ptr` (not yet touched) with transparent huge
/// pages where the platform has them; a hint only, failures are ignored.
pub fn advise_huge_pages(ptr: NonNull<u8>, len: usize) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let page = 4096usize;
        let start = (ptr.as_ptr() as usize).next_multiple_of(page);
        let end = (ptr.as_ptr() as usize + len) / page * page;
        if end > start {
            // SAFETY: madvise only changes the paging policy of pages inside this allocation
            // (the range is rounded inwards to whole pages); it never unmaps or writes memory.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (ptr, len);
}

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
    fn as_any(&self) -> &dyn std::any::Any {
        self
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
    /// Allocates `size` zeroed bytes aligned to [`CPU_ALIGNMENT`]; buffers of at least
    /// [`HUGE_PAGE_SIZE`] are aligned to it and, on Linux and Android, advised to use
    /// transparent huge pages before their first touch (weights streamed by a matrix-vector
    /// product then miss the TLB 512 times less often).
    pub fn new(size: usize) -> Result<HostBuffer> {
        let oom = || Error::OutOfMemory { device: CPU_NAME.into(), size };
        let huge = size >= HUGE_PAGE_SIZE;
        let align = if huge { HUGE_PAGE_SIZE } else { CPU_ALIGNMENT };
        let layout = AllocLayout::from_size_align(size.max(1), align).map_err(|_| oom())?;
        let ptr = if huge {
            // SAFETY: the layout has a non-zero size.
            let ptr = NonNull::new(unsafe { alloc(layout) }).ok_or_else(oom)?;
            advise_huge_pages(ptr, layout.size());
            // SAFETY: the allocation holds `layout.size()` writable bytes.
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, layout.size()) };
            ptr
        } else {
            // SAFETY: the layout has a non-zero size.
            NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(oom)?
        };
        Ok(HostBuffer { memory: Memory::Owned { ptr, layout }, size, usage: UsageCell::default() })
    }

    /// Wraps caller memory without copying.
    pub fn from_host_memory(memory: Arc<dyn HostMemory>) -> HostBuffer {
        let size = memory.len();
        HostBuffer { memory: Memory::Borrowed(memory), size, usage: UsageCell::default() }
    }

    /// Refuses a write into read-only memory.
    fn writable(&self) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::ReadOnly(format!(
                "a CPU buffer of {} bytes wrapping read-only memory (a mapped file)",
                self.size
            )));
        }
        Ok(())
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
            // SAFETY: `ptr` was returned by `alloc` / `alloc_zeroed` with this `layout` and is
            // freed once.
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

    fn is_read_only(&self) -> bool {
        matches!(&self.memory, Memory::Borrowed(m) if m.read_only())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.writable()?;
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
        self.writable()?;
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
        self.writable()?;
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
