//! Reading and writing elements and rows of any type through a tensor's layout.
//!
//! [`Mem`] is the only place where the reference touches raw memory: it is built (unsafely)
//! from a [`HostTensor`] whose pointer is valid for its layout's `nbytes()` bytes, and from then
//! on every access is safe, goes through the layout's strides, and checks its indices against
//! the shape. Reads and writes use unaligned raw-pointer accesses and never create references to
//! tensor memory, so a destination may be the very same memory as a source (in-place ops).

use super::HostTensor;
use half::f16;
use tessera_core::{DType, Error, Layout, Result};

/// Number of dims of a tensor.
pub(crate) const DIMS: usize = 4;

/// f32 to bfloat16 bits with ggml's rounding (`ggml_compute_fp32_to_bf16`): NaNs become quiet
/// NaNs keeping their sign, everything else rounds to nearest even.
pub(crate) fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    // No overflow: u <= 0xff80_0000 here and the rounding adds at most 0x8000.
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// bfloat16 bits to f32 (exact).
pub(crate) fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// An allocation failure as a typed error instead of an abort.
fn oom(bytes: usize) -> Error {
    Error::OutOfMemory { device: "CPU (reference scratch)".into(), size: bytes }
}

/// Values per span: ops that treat elements independently (element-wise ops, reductions,
/// conversions, row copies) read and write rows in spans of at most this many values, so their
/// scratch is bounded whatever the row length (a multiple of every block size).
pub(crate) const SPAN: usize = 4096;

/// The spans of a row of `ne0` values: `[start, end)` ranges of at most [`SPAN`] values.
pub(crate) fn spans(ne0: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..ne0.div_ceil(SPAN)).map(move |i| i * SPAN..((i + 1) * SPAN).min(ne0))
}

/// A zeroed `Vec<f32>` of `n` values, or [`Error::OutOfMemory`].
pub(crate) fn scratch_f32(n: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom(n.saturating_mul(4)))?;
    v.resize(n, 0.0);
    Ok(v)
}

/// A zeroed `Vec<f64>` of `n` values, or [`Error::OutOfMemory`].
pub(crate) fn scratch_f64(n: usize) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom(n.saturating_mul(8)))?;
    v.resize(n, 0.0);
    Ok(v)
}

/// Per-op scratch memory reused across rows (no per-element or per-row allocation).
#[derive(Default)]
pub(crate) struct Scratch {
    /// Raw bytes of one quantized row.
    row: Vec<u8>,
}

impl Scratch {
    /// The row buffer resized to `len` bytes (contents unspecified).
    fn row(&mut self, len: usize) -> Result<&mut [u8]> {
        if len > self.row.len() {
            self.row.try_reserve_exact(len - self.row.len()).map_err(|_| oom(len))?;
            self.row.resize(len, 0);
        }
        Ok(&mut self.row[..len])
    }
}

/// Calls `abort` every so much work, turning a `true` into [`Error::Aborted`].
pub(crate) struct Poller<'a> {
    abort: &'a dyn Fn() -> bool,
    work: usize,
}

/// Work (roughly: elements processed) between two calls of the abort callback; a few hundred
/// microseconds of scalar work at most.
const POLL_EVERY: usize = 1 << 16;

impl<'a> Poller<'a> {
    /// A poller calling `abort`.
    pub(crate) fn new(abort: &'a dyn Fn() -> bool) -> Poller<'a> {
        Poller { abort, work: 0 }
    }

    /// Records `work` more units; polls the callback once enough has accumulated.
    pub(crate) fn tick(&mut self, work: usize) -> Result<()> {
        self.work = self.work.saturating_add(work.max(1));
        if self.work >= POLL_EVERY {
            self.work = 0;
            self.check()?;
        }
        Ok(())
    }

    /// Polls the callback now.
    pub(crate) fn check(&mut self) -> Result<()> {
        if (self.abort)() {
            Err(Error::Aborted)
        } else {
            Ok(())
        }
    }
}

/// Row coordinates `[i1, i2, i3]` of every row of shape `ne`, in row-major order (i1 fastest).
pub(crate) fn rows(ne: [usize; DIMS]) -> impl Iterator<Item = [usize; 3]> {
    (0..ne[3])
        .flat_map(move |i3| (0..ne[2]).flat_map(move |i2| (0..ne[1]).map(move |i1| [i1, i2, i3])))
}

/// Row coordinates of the `k`-th row (in row-major order) of shape `ne`.
pub(crate) fn row_at(ne: [usize; DIMS], k: usize) -> [usize; 3] {
    [k % ne[1], (k / ne[1]) % ne[2], k / (ne[1] * ne[2])]
}

/// Number of rows of shape `ne`.
pub(crate) fn nrows(ne: [usize; DIMS]) -> usize {
    ne[1] * ne[2] * ne[3]
}

/// A tensor's memory with its layout; every access is checked against the shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mem {
    layout: Layout,
    ptr: *mut u8,
}

impl Mem {
    /// Wraps a host tensor.
    ///
    /// # Safety
    ///
    /// `t.ptr` must be valid for reads (and, for a destination, writes) of `t.layout.nbytes()`
    /// bytes for as long as the returned value is used; meanwhile nobody else may write that
    /// memory, except the other `Mem`s of the same computation (in-place ops) or other threads
    /// writing disjoint bytes (a destination split between threads).
    pub(crate) unsafe fn new(t: HostTensor) -> Mem {
        Mem { layout: t.layout, ptr: t.ptr }
    }

    /// The shape.
    pub(crate) fn ne(&self) -> [usize; DIMS] {
        self.layout.ne
    }

    /// The element type.
    pub(crate) fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// Byte offset of the element (block for quantized types) at `i`; panics if `i` is outside
    /// the shape (an internal bug: the op's shapes were validated beforehand).
    fn offset(&self, i: [usize; DIMS]) -> usize {
        let ne = self.layout.ne;
        assert!(
            i[0] < ne[0] && i[1] < ne[1] && i[2] < ne[2] && i[3] < ne[3],
            "reference: index {i:?} outside shape {ne:?}"
        );
        self.layout.offset(i)
    }

    /// Copies `out.len()` raw bytes starting at byte `off` of the tensor.
    fn read_bytes(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.layout.nbytes(), "reference: read outside tensor");
        // SAFETY: `off + len <= nbytes` and `ptr` is valid for `nbytes` bytes (`Mem::new`);
        // `out` is a separate allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) }
    }

    /// Writes raw bytes starting at byte `off` of the tensor.
    fn write_bytes(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.layout.nbytes(), "reference: write outside tensor");
        // SAFETY: as in `read_bytes`; `data` never points into tensor memory (it is always a
        // local array or scratch vector).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }

    fn read_array<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        self.read_bytes(off, &mut b);
        b
    }

    /// The element at `i` as f32 (F32, F16, BF16; I32 converted to the nearest f32).
    /// Quantized types have no element access: use [`Mem::read_row`].
    pub(crate) fn get(&self, i: [usize; DIMS]) -> f32 {
        let off = self.offset(i);
        match self.layout.dtype {
            DType::F32 => f32::from_le_bytes(self.read_array(off)),
            DType::F16 => f16::from_bits(u16::from_le_bytes(self.read_array(off))).to_f32(),
            DType::BF16 => bf16_bits_to_f32(u16::from_le_bytes(self.read_array(off))),
            DType::I32 => i32::from_le_bytes(self.read_array(off)) as f32,
            t => unreachable!("reference: element read of {t}"),
        }
    }

    /// Writes `v` at `i`, rounded to the element type (F32, F16, BF16).
    pub(crate) fn set(&self, i: [usize; DIMS], v: f32) {
        let off = self.offset(i);
        match self.layout.dtype {
            DType::F32 => self.write_bytes(off, &v.to_le_bytes()),
            DType::F16 => self.write_bytes(off, &f16::from_f32(v).to_bits().to_le_bytes()),
            DType::BF16 => self.write_bytes(off, &f32_to_bf16_bits(v).to_le_bytes()),
            t => unreachable!("reference: element write of {t}"),
        }
    }

    /// The I32 element at `i`.
    pub(crate) fn get_i32(&self, i: [usize; DIMS]) -> i32 {
        i32::from_le_bytes(self.read_array(self.offset(i)))
    }

    /// Writes the I32 element at `i`.
    pub(crate) fn set_i32(&self, i: [usize; DIMS], v: i32) {
        self.write_bytes(self.offset(i), &v.to_le_bytes())
    }

    /// Copies the raw bytes of one element (one block for quantized types, `i[0]` a multiple of
    /// the block size) into `out` (`type_size` bytes).
    pub(crate) fn read_unit(&self, i: [usize; DIMS], out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.layout.dtype.type_size());
        self.read_bytes(self.offset(i), out)
    }

    /// Writes the raw bytes of one element (or block) at `i`.
    pub(crate) fn write_unit(&self, i: [usize; DIMS], data: &[u8]) {
        debug_assert_eq!(data.len(), self.layout.dtype.type_size());
        self.write_bytes(self.offset(i), data)
    }

    /// Reads row `r` (`ne0` values) as f32 into `out`, dequantizing block types.
    pub(crate) fn read_row(&self, r: [usize; 3], out: &mut [f32], s: &mut Scratch) -> Result<()> {
        let ne0 = self.layout.ne[0];
        debug_assert_eq!(out.len(), ne0);
        let dtype = self.layout.dtype;
        if dtype.is_quantized() {
            let off = self.dense_row_offset(r)?;
            let bytes = s.row(self.layout.row_bytes())?;
            self.read_bytes(off, bytes);
            return tessera_core::quant::dequantize_row(dtype, bytes, out);
        }
        for (i0, o) in out.iter_mut().enumerate() {
            *o = self.get([i0, r[0], r[1], r[2]]);
        }
        Ok(())
    }

    /// Writes row `r` from the f32 values `src` (`ne0` values), quantizing block types.
    pub(crate) fn write_row(&self, r: [usize; 3], src: &[f32], s: &mut Scratch) -> Result<()> {
        let ne0 = self.layout.ne[0];
        debug_assert_eq!(src.len(), ne0);
        let dtype = self.layout.dtype;
        if dtype.is_quantized() {
            let off = self.dense_row_offset(r)?;
            let bytes = s.row(self.layout.row_bytes())?;
            tessera_core::quant::quantize_row(dtype, src, bytes)?;
            self.write_bytes(off, bytes);
            return Ok(());
        }
        for (i0, &v) in src.iter().enumerate() {
            self.set([i0, r[0], r[1], r[2]], v);
        }
        Ok(())
    }

    /// Reads values `start..start + out.len()` of row `r` as f32 into `out`, dequantizing block
    /// types (`start` and the length then whole blocks, or the length reaching the row's end).
    pub(crate) fn read_span(
        &self,
        r: [usize; 3],
        start: usize,
        out: &mut [f32],
        s: &mut Scratch,
    ) -> Result<()> {
        let dtype = self.layout.dtype;
        if dtype.is_quantized() {
            let bs = dtype.block_size();
            debug_assert!(start.is_multiple_of(bs) && out.len().is_multiple_of(bs));
            let off = self.dense_row_offset(r)? + start / bs * dtype.type_size();
            let bytes = s.row(out.len() / bs * dtype.type_size())?;
            self.read_bytes(off, bytes);
            return tessera_core::quant::dequantize_row(dtype, bytes, out);
        }
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.get([start + i, r[0], r[1], r[2]]);
        }
        Ok(())
    }

    /// Writes values `start..start + src.len()` of row `r` from `src`, quantizing block types
    /// (whole blocks, as for [`Mem::read_span`]).
    pub(crate) fn write_span(
        &self,
        r: [usize; 3],
        start: usize,
        src: &[f32],
        s: &mut Scratch,
    ) -> Result<()> {
        let dtype = self.layout.dtype;
        if dtype.is_quantized() {
            let bs = dtype.block_size();
            debug_assert!(start.is_multiple_of(bs) && src.len().is_multiple_of(bs));
            let off = self.dense_row_offset(r)? + start / bs * dtype.type_size();
            let bytes = s.row(src.len() / bs * dtype.type_size())?;
            tessera_core::quant::quantize_row(dtype, src, bytes)?;
            self.write_bytes(off, bytes);
            return Ok(());
        }
        for (i, &v) in src.iter().enumerate() {
            self.set([start + i, r[0], r[1], r[2]], v);
        }
        Ok(())
    }

    /// Byte offset of row `r` of a block type, whose blocks must be densely packed.
    fn dense_row_offset(&self, r: [usize; 3]) -> Result<usize> {
        if !self.layout.rows_contiguous() {
            return Err(Error::shape(
                "reference",
                format!(
                    "rows of {} must be dense (nb0 = {})",
                    self.layout.dtype, self.layout.nb[0]
                ),
            ));
        }
        Ok(self.offset([0, r[0], r[1], r[2]]))
    }
}
