//! Where each weight lives on the device that runs the model.
//!
//! On a host device (the CPU) the weights are used in place: the GGUF file is mapped read-only
//! and wrapped as a buffer, so a tensor's data pointer lies inside the mapping and no weight byte
//! is copied. Weights that only MUL_MAT reads and that an extra buffer type of the device's
//! registration accepts (the CPU's `CPU_REPACK`) are copied once into its interleaved layout, one
//! tensor at a time, as llama.cpp does; a tied output repacked so is the token embeddings' only
//! copy (the CPU's GET_ROWS reads rows out of the repacked groups). On other devices (GPUs) every weight is uploaded once
//! into device memory, straight from the mapping.

use crate::error::{LlmError, Result};
use crate::tensors::{ModelTensor, ModelTensors};
use std::collections::HashMap;
use std::sync::Arc;
use tessera_core::backend::{weight_buffer_type, Buffer, BufferType, BufferUsage, Device};
use tessera_core::registry::Registry;
use tessera_core::{Layout, Storage};
use tessera_gguf::GgufFile;

/// Weight memory of a loaded model.
pub struct WeightStore {
    /// Name -> where the tensor's bytes are.
    placed: HashMap<String, Storage>,
    /// Bytes of weights copied out of the mapping (repacked or uploaded).
    copied_bytes: usize,
    /// Bytes of weights read in place from the mapping.
    mapped_bytes: usize,
}

/// Called with the fraction of weights placed (0 to 1); returning `false` cancels the load.
pub type Progress<'a> = &'a mut dyn FnMut(f32) -> bool;

fn aligned(n: usize, align: usize) -> usize {
    n.div_ceil(align.max(1)) * align.max(1)
}

impl WeightStore {
    /// Places every tensor of `tensors` for `device` (see the module doc).
    pub fn place(
        file: &GgufFile,
        tensors: &ModelTensors,
        device: &Arc<dyn Device>,
        registry: &Registry,
        progress: Progress<'_>,
    ) -> Result<WeightStore> {
        let all = tensors.all();
        // A tied output placed on its own (repacked) is written once more.
        let tied = tensors.tied_output();
        let tied_extra = tied.map_or(0, |o| o.info.size);
        let total: usize = all.iter().map(|t| t.info.size).sum::<usize>().max(1) + tied_extra;
        let mut done = 0usize;
        let mut step = |n: usize| -> Result<()> {
            done += n;
            if progress(done as f32 / total as f32) {
                Ok(())
            } else {
                Err(LlmError::Cancelled)
            }
        };
        let mut placed = HashMap::new();
        let (mut copied_bytes, mut mapped_bytes) = (0, 0);
        if device.buffer_type().is_host() {
            let mapping = device.buffer_from_host_memory(file.memory(), file.file_size())?;
            mapping.set_usage(BufferUsage::Weights);
            // The weights only MUL_MAT reads, in the extra buffer type the core's rule gives
            // them (repacked), grouped by type.
            let extra = registry.extra_buffer_types(device.as_ref());
            let mut groups: Vec<(&Arc<dyn BufferType>, Vec<&ModelTensor>)> = Vec::new();
            for t in tensors.matmul_only() {
                let layout = t.info.layout();
                let Some(bt) = weight_buffer_type(&extra, device.as_ref(), &layout) else {
                    continue;
                };
                match groups.iter_mut().find(|(g, _)| Arc::ptr_eq(g, bt)) {
                    Some((_, list)) => list.push(t),
                    None => groups.push((bt, vec![t])),
                }
            }
            for (bt, repack) in groups {
                let buffer = alloc_for(bt.as_ref(), &repack)?;
                let mut offset = 0;
                for t in &repack {
                    write_tensor(file, t, &buffer, offset)?;
                    // Its mapped bytes are not read again (a tied output's embeddings are
                    // read from this copy, below): they leave resident memory.
                    file.release_pages(&t.info);
                    placed.insert(t.name.clone(), Storage { buffer: buffer.clone(), offset });
                    offset += aligned(bt.alloc_size(&t.info.layout()), bt.alignment());
                    copied_bytes += t.info.size;
                    step(t.info.size)?;
                }
            }
            // A repacked tied output is the embeddings' only copy: GET_ROWS reads its rows out
            // of the repacked groups, and the mapped bytes are never touched.
            if let Some(o) = tied {
                if let Some(s) = placed.get(&o.name).cloned() {
                    placed.insert(tensors.token_embd.name.clone(), s);
                    step(tensors.token_embd.info.size)?;
                }
            }
            for t in all.iter().copied().chain(tied) {
                if placed.contains_key(&t.name) {
                    continue;
                }
                let offset = file.data_offset() + t.info.offset;
                placed.insert(t.name.clone(), Storage { buffer: mapping.clone(), offset });
                if tied.is_none_or(|o| t.name != o.name) {
                    mapped_bytes += t.info.size;
                }
                step(t.info.size)?;
            }
        } else {
            let bt = device.buffer_type();
            let buffer = alloc_for(bt.as_ref(), &all)?;
            let mut offset = 0;
            if tied.is_some() {
                step(tied_extra)?;
            }
            for t in &all {
                write_tensor(file, t, &buffer, offset)?;
                file.release_pages(&t.info);
                placed.insert(t.name.clone(), Storage { buffer: buffer.clone(), offset });
                offset += aligned(bt.alloc_size(&t.info.layout()), bt.alignment());
                copied_bytes += t.info.size;
                step(t.info.size)?;
            }
            // A tied output reads the uploaded embeddings.
            if let Some(o) = tied {
                let embd = placed.get(&tensors.token_embd.name).cloned();
                if let Some(s) = embd {
                    placed.insert(o.name.clone(), s);
                }
            }
        }
        Ok(WeightStore { placed, copied_bytes, mapped_bytes })
    }

    /// Where `t`'s bytes are.
    pub fn storage(&self, t: &ModelTensor) -> Result<Storage> {
        self.placed
            .get(&t.name)
            .cloned()
            .ok_or_else(|| LlmError::InvalidArgument(format!("weight {:?} was not placed", t.name)))
    }

    /// Bytes of weights copied out of the file (repacked or uploaded to a device).
    pub fn copied_bytes(&self) -> usize {
        self.copied_bytes
    }

    /// Bytes of weights used in place from the mapped file.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped_bytes
    }
}

/// One buffer of `bt` holding every tensor of `list`, each at an aligned offset.
fn alloc_for(bt: &dyn BufferType, list: &[&ModelTensor]) -> Result<Arc<dyn Buffer>> {
    let mut size = 0usize;
    for t in list {
        let n = aligned(bt.alloc_size(&t.info.layout()), bt.alignment());
        size = size.checked_add(n).ok_or_else(|| tessera_core::Error::Overflow {
            what: "the weights' buffer size".into(),
        })?;
    }
    let buffer = bt.alloc(size.max(1))?;
    buffer.set_usage(BufferUsage::Weights);
    Ok(buffer)
}

/// Copies `t` from the mapped file into `buffer` at `offset` (the buffer converts: a repack
/// buffer interleaves, a GPU buffer uploads).
fn write_tensor(
    file: &GgufFile,
    t: &ModelTensor,
    buffer: &Arc<dyn Buffer>,
    offset: usize,
) -> Result<()> {
    let layout: Layout = t.info.layout();
    buffer.init_tensor(&layout, offset)?;
    buffer.write(offset, file.tensor_data(&t.info))?;
    Ok(())
}
