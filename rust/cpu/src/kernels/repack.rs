//! The repacked weight layout ("CPU_REPACK"): Q4_0, Q8_0 and Q4_K rows interleaved sixteen at
//! a time at upload, so that one 64-byte load holds four quant bytes of each of sixteen rows
//! and the AVX-512 VNNI GEMM kernel multiplies sixteen rows by a broadcast activation word with
//! one `vpdpbusd`, reusing each weight register across several activation rows.
//!
//! Layout of a group of [`GROUP`] rows, block `b` after block `b - 1`: the rows' header
//! fields, field by field (Q4_0 / Q8_0: the f16 scales, 32 bytes; Q4_K: the sixteen `d`, the
//! sixteen `dmin`, then byte `s` of the sixteen 12-byte `scales` for `s` in 0..12), then the quants in 64-byte chunks `h`, each
//! holding bytes `4h..4h + 4` of the block's quants (`qs`) of rows 0..16. A group takes exactly
//! the bytes of its plain
//! rows, so tensors keep their GGUF size and offsets.
//!
//! [`RepackBufferType`] allocates buffers whose `write` repacks whole weight tensors and whose
//! `read` returns the GGUF bytes again. The matmul driver recognizes repacked tensors by their
//! address (a registry filled by the buffers) and uses [`super::repacked_kernel`].

use crate::buffer::{HostBuffer, CPU_ALIGNMENT, CPU_NAME};
use std::any::Any;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, RwLock};
use tessera_core::backend::{check_range, Buffer, BufferType, BufferUsage};
use tessera_core::{DType, Error, Layout, Result};

/// Name of the repack buffer type.
pub const REPACK_NAME: &str = "CPU_REPACK";

/// Rows interleaved per group.
pub const GROUP: usize = 16;

/// The block geometry of a repackable type: values per block, block bytes, the per-row header
/// fields (offset, length) kept whole and stored field by field for the group's rows, and the
/// quants (offset, length) interleaved in 4-byte words.
struct Geometry {
    values: usize,
    size: usize,
    fields: &'static [(usize, usize)],
    quants: (usize, usize),
}

fn geometry(dtype: DType) -> Option<Geometry> {
    match dtype {
        DType::Q4_0 => Some(Geometry { values: 32, size: 18, fields: &[(0, 2)], quants: (2, 16) }),
        DType::Q8_0 => Some(Geometry { values: 32, size: 34, fields: &[(0, 2)], quants: (2, 32) }),
        DType::Q4_K => Some(Geometry {
            values: 256,
            size: 144,
            // The 12 scale bytes byte-planar (byte s of the 16 rows together), so that the
            // kernel decodes the 6-bit scales of all rows with byte-vector operations.
            fields: &[
                (0, 2),
                (2, 2),
                (4, 1),
                (5, 1),
                (6, 1),
                (7, 1),
                (8, 1),
                (9, 1),
                (10, 1),
                (11, 1),
                (12, 1),
                (13, 1),
                (14, 1),
                (15, 1),
            ],
            quants: (16, 128),
        }),
        _ => None,
    }
}

/// Whether a tensor of `layout` can be stored repacked: Q4_0, Q8_0 or Q4_K, contiguous, rows of
/// every plane a multiple of [`GROUP`], and the active tier has repacked kernels for the type.
pub fn can_repack(layout: &Layout) -> bool {
    geometry(layout.dtype).is_some()
        && layout.is_contiguous()
        && layout.ne[1].is_multiple_of(GROUP)
        && super::repacked_kernel(layout.dtype).is_some()
}

fn check_len(dtype: DType, k: usize, src: usize, dst: usize) -> Result<(usize, Geometry)> {
    let row = dtype.row_size(k)?;
    let Some(g) = geometry(dtype) else {
        return Err(Error::dtype("repack", dtype, "only Q4_0, Q8_0 and Q4_K are repacked"));
    };
    if src != dst || row == 0 || !src.is_multiple_of(row * GROUP) {
        return Err(Error::DataLength {
            context: format!("repack of {dtype} rows of {k} values in groups of {GROUP}"),
            expected: src.div_ceil((row * GROUP).max(1)) * row * GROUP,
            actual: dst,
        });
    }
    Ok((row, g))
}

/// Calls `f(plain_range, packed_range)` for every byte run of one group's block `b`.
fn block_map(g: &Geometry, row: usize, b: usize, mut f: impl FnMut(usize, usize, usize)) {
    let base = b * g.size * GROUP;
    let mut o = base;
    for &(off, len) in g.fields {
        for r in 0..GROUP {
            f(r * row + b * g.size + off, o, len);
            o += len;
        }
    }
    let (qoff, qlen) = g.quants;
    for h in 0..qlen / 4 {
        for r in 0..GROUP {
            f(r * row + b * g.size + qoff + 4 * h, o, 4);
            o += 4;
        }
    }
}

/// Repacks plain rows of `k` values of `dtype` (`src`, a whole number of [`GROUP`]-row groups)
/// into `dst` (same length).
pub fn pack(dtype: DType, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (row, g) = check_len(dtype, k, src.len(), dst.len())?;
    for (sg, dg) in src.chunks_exact(row * GROUP).zip(dst.chunks_exact_mut(row * GROUP)) {
        for b in 0..k / g.values {
            block_map(&g, row, b, |p, q, n| dg[q..q + n].copy_from_slice(&sg[p..p + n]));
        }
    }
    Ok(())
}

/// Undoes [`pack`]: the plain GGUF rows of repacked `src`.
pub fn unpack(dtype: DType, k: usize, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (row, g) = check_len(dtype, k, src.len(), dst.len())?;
    for (sg, dg) in src.chunks_exact(row * GROUP).zip(dst.chunks_exact_mut(row * GROUP)) {
        for b in 0..k / g.values {
            block_map(&g, row, b, |p, q, n| dg[p..p + n].copy_from_slice(&sg[q..q + n]));
        }
    }
    Ok(())
}

/// Repacked tensors by start address: (length, type).
static REGISTRY: RwLock<BTreeMap<usize, (usize, DType)>> = RwLock::new(BTreeMap::new());

fn register(ptr: *const u8, len: usize, dtype: DType) {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner()).insert(ptr as usize, (len, dtype));
}

fn unregister_range(start: usize, len: usize) {
    let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    let keys: Vec<usize> = reg.range(start..start.saturating_add(len)).map(|(&k, _)| k).collect();
    for k in keys {
        reg.remove(&k);
    }
}

/// What the registry knows about `len` bytes at `ptr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Not in a repacked tensor: plain GGUF bytes.
    Plain,
    /// Exactly a repacked tensor of this type.
    Packed(DType),
    /// Part of a repacked tensor (a view): its bytes are not GGUF's and no kernel reads them.
    Partial,
}

/// Whether `len` bytes at `ptr` are a repacked tensor, part of one, or plain bytes.
pub fn lookup(ptr: *const u8, len: usize) -> Lookup {
    let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let p = ptr as usize;
    match reg.range(..p.saturating_add(len.max(1))).next_back() {
        Some((&start, &(l, t))) if start == p && l == len => Lookup::Packed(t),
        Some((&start, &(l, _))) if start < p.saturating_add(len.max(1)) && p < start + l => {
            Lookup::Partial
        }
        _ => Lookup::Plain,
    }
}

/// A repacked weight matrix outside any buffer (benchmarks, tests): registered while alive.
#[derive(Debug)]
pub struct PackedWeights {
    bytes: Vec<u8>,
}

impl PackedWeights {
    /// Repacks the plain bytes of a tensor of `layout`; `None` when it cannot be repacked.
    pub fn new(layout: &Layout, plain: &[u8]) -> Option<PackedWeights> {
        if !can_repack(layout) || plain.len() != layout.nbytes() {
            return None;
        }
        let mut bytes = vec![0u8; plain.len()];
        pack(layout.dtype, layout.ne[0], plain, &mut bytes).ok()?;
        register(bytes.as_ptr(), bytes.len(), layout.dtype);
        Some(PackedWeights { bytes })
    }

    /// The repacked bytes (pass their address to the matmul driver).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Clone for PackedWeights {
    fn clone(&self) -> Self {
        let bytes = self.bytes.clone();
        if let Lookup::Packed(t) = lookup(self.bytes.as_ptr(), self.bytes.len()) {
            register(bytes.as_ptr(), bytes.len(), t);
        }
        PackedWeights { bytes }
    }
}

impl Drop for PackedWeights {
    fn drop(&mut self) {
        unregister_range(self.bytes.as_ptr() as usize, 1);
    }
}

/// The repacked bytes of a weight matrix for benchmarks, `None` when the active tier has no
/// repacked kernels for its type.
pub fn repack_for_bench(layout: &Layout, bytes: &[u8]) -> Option<PackedWeights> {
    PackedWeights::new(layout, bytes)
}

/// The repack buffer type of the active tier, `None` when the tier has no repacked kernels.
pub fn repack_buffer_type() -> Option<Arc<dyn BufferType>> {
    if super::repacked_kernel(DType::Q4_0).is_some() {
        Some(Arc::new(RepackBufferType))
    } else {
        None
    }
}

/// The "CPU_REPACK" buffer type: host memory whose Q4_0 / Q8_0 weight tensors are stored
/// interleaved. Not a plain host buffer (`is_host` is false: its bytes are not GGUF's), but the
/// CPU backend computes on it directly.
#[derive(Debug, Default)]
pub struct RepackBufferType;

impl BufferType for RepackBufferType {
    fn name(&self) -> String {
        REPACK_NAME.to_string()
    }

    fn alloc(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(RepackBuffer {
            mem: HostBuffer::new(size)?,
            tensors: Mutex::new(BTreeMap::new()),
        }))
    }

    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }

    fn max_size(&self) -> usize {
        isize::MAX as usize / 2
    }

    fn is_host(&self) -> bool {
        false
    }

    fn device_name(&self) -> String {
        CPU_NAME.to_string()
    }
}

/// A buffer of [`RepackBufferType`].
#[derive(Debug)]
pub struct RepackBuffer {
    mem: HostBuffer,
    /// Tensors placed by `init_tensor`: offset -> (layout, repacked).
    tensors: Mutex<BTreeMap<usize, (Layout, bool)>>,
}

impl RepackBuffer {
    fn base(&self) -> NonNull<u8> {
        self.mem.host_ptr().unwrap_or(NonNull::dangling())
    }

    /// The repacked tensors overlapping `offset..offset + len`: (offset, layout).
    fn packed_overlapping(&self, offset: usize, len: usize) -> Vec<(usize, Layout)> {
        let t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        t.iter()
            .filter(|(&o, (l, packed))| *packed && o < offset + len && offset < o + l.nbytes())
            .map(|(&o, (l, _))| (o, *l))
            .collect()
    }
}

impl Drop for RepackBuffer {
    fn drop(&mut self) {
        unregister_range(self.base().as_ptr() as usize, self.mem.size().max(1));
    }
}

impl Buffer for RepackBuffer {
    fn name(&self) -> String {
        REPACK_NAME.to_string()
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(RepackBufferType)
    }

    fn size(&self) -> usize {
        self.mem.size()
    }

    fn usage(&self) -> BufferUsage {
        self.mem.usage()
    }

    fn set_usage(&self, usage: BufferUsage) {
        self.mem.set_usage(usage)
    }

    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.mem.host_ptr()
    }

    fn init_tensor(&self, layout: &Layout, offset: usize) -> Result<()> {
        check_range(self.size(), offset, layout.nbytes())?;
        let mut t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        t.insert(offset, (*layout, false));
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self.size(), offset, data.len())?;
        let target = {
            let t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
            t.range(..=offset).next_back().map(|(&o, &(l, _))| (o, l))
        };
        if let Some((o, l)) = target {
            if offset < o + l.nbytes() && can_repack(&l) {
                if o != offset || data.len() != l.nbytes() {
                    return Err(Error::InvalidArgument(format!(
                        "{REPACK_NAME}: weight tensors must be written whole ({} bytes at {o}), \
                         not {} bytes at {offset}",
                        l.nbytes(),
                        data.len()
                    )));
                }
                let mut packed = vec![0u8; data.len()];
                pack(l.dtype, l.ne[0], data, &mut packed)?;
                self.mem.write(offset, &packed)?;
                // SAFETY: offset lies within the buffer (checked above).
                let ptr = unsafe { self.base().as_ptr().add(offset) };
                register(ptr, data.len(), l.dtype);
                let mut t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
                t.insert(o, (l, true));
                return Ok(());
            }
        }
        self.mem.write(offset, data)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.mem.read(offset, out)?;
        for (o, l) in self.packed_overlapping(offset, out.len()) {
            let n = l.nbytes();
            let mut packed = vec![0u8; n];
            self.mem.read(o, &mut packed)?;
            let mut plain = vec![0u8; n];
            unpack(l.dtype, l.ne[0], &packed, &mut plain)?;
            let (from, to) = (offset.max(o), (offset + out.len()).min(o + n));
            out[from - offset..to - offset].copy_from_slice(&plain[from - o..to - o]);
        }
        Ok(())
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        // A filled tensor is plain again (unless the value is 0: zeros are zeros in both).
        if value != 0 {
            let mut t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
            for (&o, (l, packed)) in t.iter_mut() {
                if *packed && o < offset + len && offset < o + l.nbytes() {
                    *packed = false;
                    unregister_range(self.base().as_ptr() as usize + o, 1);
                }
            }
        }
        self.mem.fill(offset, len, value)
    }

    fn reset(&self) {
        self.tensors.lock().unwrap_or_else(|e| e.into_inner()).clear();
        unregister_range(self.base().as_ptr() as usize, self.mem.size().max(1));
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
