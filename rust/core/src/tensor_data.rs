//! Reading and writing a tensor's bytes through its storage, with bounds checks.

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::TensorId;

fn located(graph: &Graph, id: TensorId, offset: usize, len: usize) -> Result<crate::Storage> {
    let t = graph.get(id)?;
    let nbytes = t.nbytes();
    match offset.checked_add(len) {
        Some(end) if end <= nbytes => {}
        _ => {
            return Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} of tensor {} of {nbytes} bytes",
                t.label(id)
            )))
        }
    }
    graph.storage_of(id).ok_or_else(|| Error::NotAllocated(t.label(id)))
}

/// Writes `data` into tensor `id` from byte `offset` of the tensor.
pub fn write_tensor(graph: &Graph, id: TensorId, offset: usize, data: &[u8]) -> Result<()> {
    let s = located(graph, id, offset, data.len())?;
    s.buffer.write(s.offset + offset, data)
}

/// Reads `out.len()` bytes of tensor `id` from byte `offset` of the tensor.
pub fn read_tensor(graph: &Graph, id: TensorId, offset: usize, out: &mut [u8]) -> Result<()> {
    let s = located(graph, id, offset, out.len())?;
    s.buffer.read(s.offset + offset, out)
}

/// Writes the whole of tensor `id`; `data` must be exactly its size.
pub fn set_tensor(graph: &Graph, id: TensorId, data: &[u8]) -> Result<()> {
    let t = graph.get(id)?;
    if data.len() != t.nbytes() {
        return Err(Error::DataLength {
            context: format!("tensor {}", t.label(id)),
            expected: t.nbytes(),
            actual: data.len(),
        });
    }
    write_tensor(graph, id, 0, data)
}

/// Reads the whole of tensor `id`.
pub fn get_tensor(graph: &Graph, id: TensorId) -> Result<Vec<u8>> {
    let mut out = vec![0u8; graph.get(id)?.nbytes()];
    read_tensor(graph, id, 0, &mut out)?;
    Ok(out)
}

/// Writes F32 values into the contiguous F32 tensor `id`.
pub fn set_f32(graph: &Graph, id: TensorId, values: &[f32]) -> Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    set_tensor(graph, id, &bytes)
}

/// Reads the contiguous F32 tensor `id` as values.
pub fn get_f32(graph: &Graph, id: TensorId) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    read_f32_into(graph, id, &mut out)?;
    Ok(out)
}

/// Reads the contiguous F32 tensor `id` into `out` (resized to its element count), with one
/// copy and no allocation when `out` already has the room. A model's logits are a megabyte or
/// more per token: reading them through a fresh byte vector cost two allocations (each new
/// pages to fault in) and two copies.
pub fn read_f32_into(graph: &Graph, id: TensorId, out: &mut Vec<f32>) -> Result<()> {
    let n = graph.get(id)?.nbytes() / 4;
    if out.len() != n {
        out.clear();
        out.resize(n, 0.0);
    }
    read_tensor(graph, id, 0, bytemuck::cast_slice_mut(out))
}

/// Reads tensor `id` in logical order (ne0 fastest, then ne1, ne2, ne3), densely packed: for
/// a contiguous tensor its bytes as stored; for a strided view (a transpose, a permutation, a
/// view with strides of its own) the elements gathered through its strides. Quantized views
/// must have whole rows (their blocks are copied row by row).
pub fn get_tensor_dense(graph: &Graph, id: TensorId) -> Result<Vec<u8>> {
    let t = graph.get(id)?;
    let l = t.layout;
    if l.is_contiguous() {
        return get_tensor(graph, id);
    }
    let raw = get_tensor(graph, id)?;
    let (unit, count) = if l.rows_contiguous() {
        (l.row_bytes(), 1)
    } else if l.dtype.is_quantized() {
        return Err(Error::InvalidArgument(format!(
            "tensor {}: a quantized view must have contiguous rows to be read",
            t.label(id)
        )));
    } else {
        (l.dtype.type_size(), l.ne[0])
    };
    let mut out = Vec::with_capacity(l.nrows() * l.row_bytes());
    for i3 in 0..l.ne[3] {
        for i2 in 0..l.ne[2] {
            for i1 in 0..l.ne[1] {
                let row = i1 * l.nb[1] + i2 * l.nb[2] + i3 * l.nb[3];
                for i0 in 0..count {
                    let at = row + i0 * l.nb[0];
                    let bytes = raw.get(at..at + unit).ok_or_else(|| {
                        Error::OutOfBounds(format!("element of view {} at {at}", t.label(id)))
                    })?;
                    out.extend_from_slice(bytes);
                }
            }
        }
    }
    Ok(out)
}
