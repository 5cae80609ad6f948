//! The "CPU_REPACK" buffer type: weight tensors repacked at `write` in the active tier's
//! [`PackLayout`], remembered per tensor by the buffer ([`RepackBuffer::packing`]), and read
//! back as GGUF bytes.

use super::REPACK_NAME;
use super::{can_repack_as, pack_as, unpack_as, PackLayout, Packing};
use crate::buffer::{HostBuffer, CPU_ALIGNMENT, CPU_NAME};
use std::any::Any;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use tessera_core::backend::{check_range, Buffer, BufferType, BufferUsage};
use tessera_core::{Error, Layout, Result};

/// The "CPU_REPACK" buffer type: host memory whose weight tensors ([`super::can_repack`]) are
/// stored interleaved. Not a plain host buffer (`is_host` is false: its bytes are not GGUF's),
/// but the CPU backend computes on it directly.
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

    /// The weights the active tier can interleave ([`super::can_repack`]).
    fn accepts_weight(&self, layout: &Layout) -> bool {
        super::can_repack(layout)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A buffer of [`RepackBufferType`].
#[derive(Debug)]
pub struct RepackBuffer {
    mem: HostBuffer,
    /// Tensors placed by `init_tensor`: offset -> (layout, the layout of its repacked bytes
    /// when it was written repacked).
    tensors: Mutex<BTreeMap<usize, (Layout, Option<PackLayout>)>>,
}

impl RepackBuffer {
    /// How the `len` bytes at `offset` are stored: [`Packing::Packed`] when they are exactly a
    /// repacked tensor (placed with `init_tensor` and written whole under a tier with a
    /// layout), [`Packing::Partial`] when they touch one otherwise (a view), else
    /// [`Packing::Plain`]. The exact case, a MUL_MAT's weights, is one map lookup.
    pub fn packing(&self, offset: usize, len: usize) -> Packing {
        let t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((l, packed)) = t.get(&offset) {
            if l.nbytes() == len {
                return packed.map_or(Packing::Plain, |pl| Packing::Packed(l.dtype, pl));
            }
        }
        let end = offset.saturating_add(len.max(1));
        let touches = t.range(..end).any(|(&o, (l, pl))| pl.is_some() && offset < o + l.nbytes());
        if touches {
            Packing::Partial
        } else {
            Packing::Plain
        }
    }

    /// The repacked tensors overlapping `offset..offset + len`: (offset, layout, pack layout).
    fn packed_overlapping(&self, offset: usize, len: usize) -> Vec<(usize, Layout, PackLayout)> {
        let t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        t.iter()
            .filter(|(&o, (l, _))| o < offset + len && offset < o + l.nbytes())
            .filter_map(|(&o, (l, pl))| pl.map(|pl| (o, *l, pl)))
            .collect()
    }
}

impl RepackBuffer {
    /// Marks the repacked tensors overlapping `offset..offset + len` plain (their bytes are
    /// about to be replaced by plain ones).
    fn mark_plain(&self, offset: usize, len: usize) {
        let mut t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        for (&o, (l, packed)) in t.iter_mut() {
            if packed.is_some() && o < offset + len && offset < o + l.nbytes() {
                *packed = None;
            }
        }
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

    /// Places a tensor of `layout` at `offset`. Placing again the tensor that is already there
    /// with the same layout keeps its bytes as they are (repacked or plain): a weight written
    /// once is used by many graphs, each of which places it.
    fn init_tensor(&self, layout: &Layout, offset: usize) -> Result<()> {
        check_range(self.size(), offset, layout.nbytes())?;
        let mut t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        if t.get(&offset).is_some_and(|(l, _)| l == layout) {
            return Ok(());
        }
        t.insert(offset, (*layout, None));
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self.size(), offset, data.len())?;
        let target = {
            let t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
            t.range(..=offset).next_back().map(|(&o, &(l, _))| (o, l))
        };
        if let (Some((o, l)), Some(pl)) = (target, PackLayout::active()) {
            if offset < o + l.nbytes() && can_repack_as(pl, &l) {
                if o != offset || data.len() != l.nbytes() {
                    return Err(Error::InvalidArgument(format!(
                        "{REPACK_NAME}: weight tensors must be written whole ({} bytes at {o}), \
                         not {} bytes at {offset}",
                        l.nbytes(),
                        data.len()
                    )));
                }
                let mut packed = vec![0u8; data.len()];
                pack_as(pl, l.dtype, l.ne[0], data, &mut packed)?;
                self.mem.write(offset, &packed)?;
                let mut t = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
                t.insert(o, (l, Some(pl)));
                return Ok(());
            }
        }
        // Plain bytes: a repacked tensor they touch (written under another tier) must be
        // overwritten whole, and is plain again.
        for (o, l, _) in self.packed_overlapping(offset, data.len()) {
            if o < offset || offset + data.len() < o + l.nbytes() {
                return Err(Error::InvalidArgument(format!(
                    "{REPACK_NAME}: a repacked tensor ({} bytes at {o}) is written whole, \
                     not in part",
                    l.nbytes()
                )));
            }
        }
        self.mark_plain(offset, data.len());
        self.mem.write(offset, data)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.mem.read(offset, out)?;
        for (o, l, pl) in self.packed_overlapping(offset, out.len()) {
            let n = l.nbytes();
            let mut packed = vec![0u8; n];
            self.mem.read(o, &mut packed)?;
            let mut plain = vec![0u8; n];
            unpack_as(pl, l.dtype, l.ne[0], &packed, &mut plain)?;
            let (from, to) = (offset.max(o), (offset + out.len()).min(o + n));
            out[from - offset..to - offset].copy_from_slice(&plain[from - o..to - o]);
        }
        Ok(())
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        // A filled tensor is plain again (unless the value is 0: zeros are zeros in both).
        if value != 0 {
            self.mark_plain(offset, len);
        }
        self.mem.fill(offset, len, value)
    }

    fn reset(&self) {
        self.tensors.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
