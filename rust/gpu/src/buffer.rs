//! Device-local memory: the GPU buffer type and its buffers, with transfers to and from the
//! host through the queue (writes) and mapped staging buffers (reads).

use crate::context::Context;
use std::any::Any;
use std::ptr::NonNull;

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tessera_core::backend::{check_range, Buffer, BufferType, BufferUsage, UsageCell};
use tessera_core::{Error, Result};

/// wgpu's alignment of copy offsets and sizes.
const COPY_ALIGN: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

/// How long a read waits for its staging buffer to be mapped after the GPU finished.
const MAP_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest chunk written at once by [`Buffer::fill`].
const FILL_CHUNK: usize = 4 << 20;

/// Largest piece of a write handed to the queue at once: wgpu copies each into staging memory
/// of its own, freed once the GPU has taken it.
const UPLOAD_CHUNK: usize = 8 << 20;

/// Bytes of a large write queued before waiting for the GPU to take them, which bounds the
/// staging memory of an upload (a model's weights from a mapped file) to this much rather than
/// a second copy of the whole data.
const UPLOAD_WINDOW: usize = 32 << 20;

fn align_down(v: u64) -> u64 {
    v / COPY_ALIGN * COPY_ALIGN
}

/// `v` rounded up to [`COPY_ALIGN`]; saturates to the largest aligned value (only reachable
/// with sizes no device can allocate, which [`GpuBuffer::new`] refuses first).
fn align_up(v: u64) -> u64 {
    v.checked_next_multiple_of(COPY_ALIGN).unwrap_or(u64::MAX / COPY_ALIGN * COPY_ALIGN)
}

/// The memory of one GPU device (named after the device, e.g. "Vulkan0").
#[derive(Debug, Clone)]
pub struct GpuBufferType {
    ctx: Arc<Context>,
}

impl GpuBufferType {
    /// Whether the buffers of this type live on the device of `ctx`.
    pub(crate) fn is_of(&self, ctx: &Arc<Context>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    pub(crate) fn new(ctx: Arc<Context>) -> GpuBufferType {
        GpuBufferType { ctx }
    }
}

impl BufferType for GpuBufferType {
    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(GpuBuffer::new(self.ctx.clone(), size)?))
    }

    /// The adapter's storage buffer offset alignment (at least 16 bytes).
    fn alignment(&self) -> usize {
        self.ctx.limits.min_storage_buffer_offset_alignment.max(16) as usize
    }

    /// The adapter's largest buffer.
    fn max_size(&self) -> usize {
        usize::try_from(self.ctx.limits.max_buffer_size).unwrap_or(usize::MAX)
    }

    fn is_host(&self) -> bool {
        false
    }

    fn device_name(&self) -> String {
        self.ctx.name.clone()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A buffer in GPU memory (a wgpu storage buffer, its size rounded up to 4 bytes).
pub struct GpuBuffer {
    ctx: Arc<Context>,
    buffer: wgpu::Buffer,
    size: usize,
    usage: UsageCell,
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBuffer({}, {} bytes)", self.ctx.name, self.size)
    }
}

impl GpuBuffer {
    pub(crate) fn new(ctx: Arc<Context>, size: usize) -> Result<GpuBuffer> {
        let oom = || Error::OutOfMemory { device: ctx.name.clone(), size };
        let alloc = u64::try_from(size.max(1))
            .ok()
            .and_then(|s| s.checked_next_multiple_of(COPY_ALIGN))
            .filter(|&a| a <= ctx.limits.max_buffer_size)
            .ok_or_else(oom)?;
        let buffer = ctx.guarded(oom, || {
            Ok(ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera"),
                size: alloc,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }))
        })?;
        ctx.add_allocated(alloc);
        Ok(GpuBuffer { ctx, buffer, size, usage: UsageCell::default() })
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Bytes actually allocated (the size rounded up to 4).
    pub fn allocated_size(&self) -> u64 {
        self.buffer.size()
    }

    /// Reads the 4-byte aligned range `[start, end)` of the wgpu buffer through a staging
    /// buffer.
    fn read_aligned(&self, start: u64, end: u64) -> Result<Vec<u8>> {
        let len = end - start;
        if len == 0 {
            return Ok(Vec::new());
        }
        let ctx = &self.ctx;
        let oom = || Error::OutOfMemory { device: ctx.name.clone(), size: len as usize };
        let staging = ctx.guarded(oom, || {
            let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera read"),
                size: len,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&self.buffer, start, &staging, 0, len);
            ctx.queue.submit([enc.finish()]);
            Ok(staging)
        })?;
        let (tx, rx) = mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        // The callback runs in whichever thread polls the device: when another thread's poll
        // took it, wait for that thread to run it.
        let start = Instant::now();
        loop {
            ctx.wait()?;
            match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(Ok(())) => break,
                Ok(Err(e)) => return Err(ctx.error(format!("mapping a read buffer failed: {e}"))),
                Err(mpsc::RecvTimeoutError::Timeout) if start.elapsed() < MAP_TIMEOUT => {}
                Err(_) => return Err(ctx.error("a read buffer was never mapped")),
            }
        }
        let out = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| ctx.error(format!("reading a mapped buffer failed: {e}")))?;
            view.to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// Queues a write of `data` at the 4-byte aligned `offset` (`data.len()` a multiple of 4),
    /// in pieces of [`UPLOAD_CHUNK`] bytes, waiting for the GPU after every [`UPLOAD_WINDOW`].
    fn write_aligned(&self, offset: u64, data: &[u8]) -> Result<()> {
        let ctx = &self.ctx;
        let mut queued = 0;
        for (i, piece) in data.chunks(UPLOAD_CHUNK).enumerate() {
            if queued >= UPLOAD_WINDOW {
                ctx.wait()?;
                queued = 0;
            }
            let at = offset + (i * UPLOAD_CHUNK) as u64;
            let oom = || Error::OutOfMemory { device: ctx.name.clone(), size: piece.len() };
            ctx.guarded(oom, || {
                ctx.queue.write_buffer(&self.buffer, at, piece);
                ctx.queue.submit([]);
                Ok(())
            })?;
            queued += piece.len();
        }
        Ok(())
    }
}

impl GpuBuffer {
    /// Writes `data` at `at` within the aligned range `[start, stop)` (a few words), keeping
    /// the other bytes of the range.
    fn merge(&self, start: u64, stop: u64, at: u64, data: &[u8]) -> Result<()> {
        let mut words = self.read_aligned(start, stop.min(align_up(self.size as u64)))?;
        words.resize((stop - start) as usize, 0);
        let i = (at - start) as usize;
        words[i..i + data.len()].copy_from_slice(data);
        self.write_aligned(start, &words)
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.ctx.sub_allocated(self.buffer.size());
    }
}

impl Buffer for GpuBuffer {
    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(GpuBufferType::new(self.ctx.clone()))
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
        None
    }

    /// Queues the write (ordered before any later read or compute on this device). Unaligned
    /// edges are merged with the bytes around them; the aligned middle is written straight
    /// from `data`, in pieces (see [`UPLOAD_WINDOW`]).
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self.size, offset, data.len())?;
        self.ctx.check()?;
        if data.is_empty() {
            return Ok(());
        }
        let (off, end) = (offset as u64, (offset + data.len()) as u64);
        let (mid0, mid1) = (align_up(off), align_down(end));
        if mid0 >= mid1 {
            return self.merge(align_down(off), align_up(end), off, data);
        }
        if off < mid0 {
            self.merge(align_down(off), mid0, off, &data[..(mid0 - off) as usize])?;
        }
        self.write_aligned(mid0, &data[(mid0 - off) as usize..(mid1 - off) as usize])?;
        if mid1 < end {
            self.merge(mid1, align_up(end), mid1, &data[(mid1 - off) as usize..])?;
        }
        Ok(())
    }

    /// Waits for queued work, then reads through a mapped staging buffer.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self.size, offset, out.len())?;
        if out.is_empty() {
            return self.ctx.check();
        }
        let (off, end) = (offset as u64, (offset + out.len()) as u64);
        let start = align_down(off);
        let bytes = self.read_aligned(start, align_up(end))?;
        let at = (off - start) as usize;
        out.copy_from_slice(&bytes[at..at + out.len()]);
        Ok(())
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self.size, offset, len)?;
        self.ctx.check()?;
        let (off, end) = (offset as u64, (offset + len) as u64);
        if value == 0
            && off.is_multiple_of(COPY_ALIGN)
            && (end.is_multiple_of(COPY_ALIGN) || end == self.size as u64)
        {
            let ctx = &self.ctx;
            let size = align_up(end) - off;
            return ctx.guarded(
                || Error::OutOfMemory { device: ctx.name.clone(), size: len },
                || {
                    let mut enc = ctx.device.create_command_encoder(&Default::default());
                    enc.clear_buffer(&self.buffer, off, Some(size));
                    ctx.queue.submit([enc.finish()]);
                    Ok(())
                },
            );
        }
        let chunk = vec![value; len.min(FILL_CHUNK)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(FILL_CHUNK);
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Copies on the GPU from another buffer of the same device when offsets and length are
    /// 4-byte aligned and the buffers differ; otherwise the caller goes through the host.
    fn copy_from(
        &self,
        src: &dyn Buffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<bool> {
        let Some(src) = src.as_any().downcast_ref::<GpuBuffer>() else { return Ok(false) };
        if !Arc::ptr_eq(&src.ctx, &self.ctx) || src.buffer == self.buffer {
            return Ok(false);
        }
        check_range(src.size, src_offset, len)?;
        check_range(self.size, dst_offset, len)?;
        let aligned = |v: usize| (v as u64).is_multiple_of(COPY_ALIGN);
        if !(aligned(src_offset) && aligned(dst_offset) && aligned(len)) {
            return Ok(false);
        }
        if len == 0 {
            return Ok(true);
        }
        let ctx = &self.ctx;
        ctx.guarded(
            || Error::OutOfMemory { device: ctx.name.clone(), size: len },
            || {
                let mut enc = ctx.device.create_command_encoder(&Default::default());
                enc.copy_buffer_to_buffer(
                    &src.buffer,
                    src_offset as u64,
                    &self.buffer,
                    dst_offset as u64,
                    len as u64,
                );
                ctx.queue.submit([enc.finish()]);
                Ok(())
            },
        )?;
        Ok(true)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
