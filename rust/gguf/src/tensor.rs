//! The tensor table: [`TensorInfo`], read and checked one entry at a time, and the checks of
//! all entries against the data section.

use crate::error::{GgufError, Result};
use crate::reader::Cursor;
use std::collections::BTreeMap;
use tessera_core::tensor::MAX_DIMS;
use tessera_core::{DType, Layout};

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Elements per dimension, innermost first (ggml's `ne`), padded with 1.
    pub ne: [usize; MAX_DIMS],
    /// Number of dimensions in the file (1 to 4).
    pub n_dims: usize,
    /// Offset of its bytes, relative to the start of the data section.
    pub offset: usize,
    /// Its size in bytes, `Layout::contiguous(dtype, shape).nbytes()`.
    pub size: usize,
}

impl TensorInfo {
    /// The dimensions the file gives, innermost first.
    pub fn shape(&self) -> &[usize] {
        &self.ne[..self.n_dims.min(MAX_DIMS)]
    }

    /// The contiguous layout of the tensor.
    pub fn layout(&self) -> Layout {
        // Built field by field (saturating) so that it cannot fail: for entries read from a
        // file it equals `Layout::contiguous(dtype, shape)`, which the reader checked.
        let t = self.dtype;
        let mut nb =
            [t.type_size(), t.type_size().saturating_mul(self.ne[0] / t.block_size()), 0, 0];
        for i in 2..MAX_DIMS {
            nb[i] = nb[i - 1].saturating_mul(self.ne[i - 1]);
        }
        Layout { dtype: t, ne: self.ne, nb }
    }

    /// Number of elements.
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }
}

/// A table entry as read, with the positions of its fields for later checks.
pub(crate) struct RawTensor {
    pub(crate) info: TensorInfo,
    /// The offset as written (relative to the data section).
    pub(crate) raw_offset: u64,
    /// Where the offset field is in the file.
    pub(crate) offset_at: usize,
}

/// The smallest encoding of a table entry: name length, dimension count, type, offset.
pub(crate) const MIN_TENSOR_INFO: usize = 8 + 4 + 4 + 8;

/// Reads table entry `i` and checks it in itself: name unique (against `seen`), 1 to 4
/// non-zero dimensions, a known type, whole blocks per row, a size that does not overflow and
/// an offset that is a multiple of `alignment`.
pub(crate) fn read_tensor_info(
    c: &mut Cursor<'_>,
    i: usize,
    alignment: usize,
    seen: &mut BTreeMap<String, usize>,
) -> Result<RawTensor> {
    let name_at = c.offset();
    let name = c.string(|| format!("name of tensor {i}"))?;
    if seen.contains_key(&name) {
        return Err(GgufError::DuplicateTensor { name, offset: name_at });
    }
    let dims_at = c.offset();
    let n_dims = c.u32(|| format!("dimension count of tensor {name:?}"))?;
    let bad = |reason: String| GgufError::BadDims { tensor: name.clone(), reason, offset: dims_at };
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(bad(format!("{n_dims} dimensions, expected 1 to {MAX_DIMS}")));
    }
    let n_dims = n_dims as usize;
    let mut raw = [1u64; MAX_DIMS];
    for (d, r) in raw.iter_mut().enumerate().take(n_dims) {
        *r = c.u64(|| format!("dimension {d} of tensor {name:?}"))?;
    }
    let type_at = c.offset();
    let code = c.u32(|| format!("type of tensor {name:?}"))?;
    let offset_at = c.offset();
    let raw_offset = c.u64(|| format!("data offset of tensor {name:?}"))?;

    let shape = &raw[..n_dims];
    if let Some(d) = shape.iter().position(|&n| n == 0) {
        return Err(bad(format!("dimension {d} of {shape:?} is zero")));
    }
    let mut ne = [1usize; MAX_DIMS];
    let mut count: usize = 1;
    for (d, &n) in shape.iter().enumerate() {
        ne[d] = usize::try_from(n)
            .map_err(|_| bad(format!("dimension {d} of {shape:?} is too large")))?;
        count = count
            .checked_mul(ne[d])
            .ok_or_else(|| bad(format!("the element count of {shape:?} overflows")))?;
    }
    let dtype = DType::from_ggml_id(code).map_err(|_| GgufError::UnknownTensorType {
        tensor: name.clone(),
        code,
        offset: type_at,
    })?;
    if ne[0] % dtype.block_size() != 0 {
        return Err(GgufError::NotWholeBlocks {
            tensor: name,
            dtype,
            ne0: ne[0],
            block: dtype.block_size(),
            offset: dims_at,
        });
    }
    let layout = Layout::contiguous(dtype, &ne[..n_dims]).map_err(|e| bad(e.to_string()))?;
    if raw_offset % alignment as u64 != 0 {
        return Err(GgufError::Misaligned {
            tensor: name,
            tensor_offset: raw_offset,
            alignment,
            offset: offset_at,
        });
    }
    seen.insert(name.clone(), i);
    let info = TensorInfo {
        name,
        dtype,
        ne,
        n_dims,
        offset: 0, // set by `check_data` once the data section is known
        size: layout.nbytes(),
    };
    Ok(RawTensor { info, raw_offset, offset_at })
}

/// Checks every entry against the data section (`data_size` bytes from `data_offset`): each
/// tensor's bytes inside it, no two overlapping. Returns the entries with their offsets set.
pub(crate) fn check_data(
    raw: Vec<RawTensor>,
    data_offset: usize,
    data_size: usize,
) -> Result<Vec<TensorInfo>> {
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let end = usize::try_from(r.raw_offset).ok().and_then(|o| o.checked_add(r.info.size));
        match end {
            Some(end) if end <= data_size => {
                let mut info = r.info;
                info.offset = r.raw_offset as usize;
                out.push(info);
            }
            _ => {
                return Err(GgufError::OutOfData {
                    tensor: r.info.name,
                    tensor_offset: r.raw_offset,
                    size: r.info.size,
                    data_offset,
                    data_size,
                    offset: r.offset_at,
                })
            }
        }
    }
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by_key(|&i| (out[i].offset, i));
    for w in order.windows(2) {
        let (a, b) = (&out[w[0]], &out[w[1]]);
        if a.offset + a.size > b.offset {
            return Err(GgufError::Overlap {
                a: a.name.clone(),
                b: b.name.clone(),
                a_range: (a.offset, a.offset + a.size),
                b_range: (b.offset, b.offset + b.size),
            });
        }
    }
    Ok(out)
}
