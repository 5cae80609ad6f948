//! Tensor metadata: type, shape (`ne`), byte strides (`nb`), name, flags, the op that produces
//! it and, for views, the tensor whose memory it shares.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::storage::Storage;

/// Maximum number of dimensions, as in ggml.
pub const MAX_DIMS: usize = 4;

/// The largest number of elements one dimension may have (2^40). Larger dimensions are rejected
/// with [`Error::InvalidShape`] long before any allocation is attempted.
pub const MAX_DIM: usize = 1 << 40;

/// The largest size in bytes a tensor may have (2^48 = 256 TiB), far above any device memory,
/// so that size arithmetic never overflows.
pub const MAX_TENSOR_BYTES: usize = 1 << 48;

/// Index of a tensor in its [`crate::graph::Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) usize);

impl TensorId {
    /// The position of the tensor in its graph's arena.
    pub fn index(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for TensorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Roles of a tensor that matter to allocation and scheduling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorFlags {
    /// Set by the caller before each compute; never overwritten by the allocator.
    pub input: bool,
    /// Read by the caller after compute; never overwritten by the allocator.
    pub output: bool,
    /// Model weights (or other constants); never overwritten, and pull ops to their device.
    pub weight: bool,
}

/// Type, shape and strides of a tensor, without the rest of its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Element type.
    pub dtype: DType,
    /// Number of elements per dimension, innermost first (ggml's `ne`).
    pub ne: [usize; MAX_DIMS],
    /// Stride in bytes per dimension (ggml's `nb`); `nb[0]` is the type size, and for quantized
    /// types `nb[1]` is the row size.
    pub nb: [usize; MAX_DIMS],
}

impl Layout {
    /// A contiguous layout of `dtype` with shape `ne` (1 to 4 dimensions, innermost first).
    ///
    /// Rejects zero and over-large dimensions, rows that are not whole blocks, and sizes that
    /// overflow.
    pub fn contiguous(dtype: DType, ne: &[usize]) -> Result<Layout> {
        let ne = normalize_shape(ne)?;
        let row = dtype.row_size(ne[0]).map_err(|e| match e {
            Error::Overflow { .. } => overflow(dtype, &ne),
            e => e,
        })?;
        let mut nb = [dtype.type_size(), row, 0, 0];
        for i in 2..MAX_DIMS {
            nb[i] = nb[i - 1].checked_mul(ne[i - 1]).ok_or_else(|| overflow(dtype, &ne))?;
        }
        let total = nb[3].checked_mul(ne[3]).ok_or_else(|| overflow(dtype, &ne))?;
        if total > MAX_TENSOR_BYTES {
            return Err(Error::InvalidShape {
                shape: ne.to_vec(),
                reason: format!("{total} bytes of {dtype} exceed the limit of {MAX_TENSOR_BYTES}"),
            });
        }
        Ok(Layout { dtype, ne, nb })
    }

    /// Number of elements.
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Number of rows (elements divided by `ne[0]`).
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned from the first to one past the last element, as ggml's `ggml_nbytes`.
    pub fn nbytes(&self) -> usize {
        let blck = self.dtype.block_size();
        let mut n = if blck == 1 { self.dtype.type_size() } else { self.ne[0] / blck * self.nb[0] };
        let start = if blck == 1 { 0 } else { 1 };
        for i in start..MAX_DIMS {
            n += (self.ne[i] - 1) * self.nb[i];
        }
        n
    }

    /// Bytes of one row of `ne[0]` elements.
    pub fn row_bytes(&self) -> usize {
        self.ne[0] / self.dtype.block_size() * self.dtype.type_size()
    }

    /// Whether the elements are densely packed in order (ggml's `ggml_is_contiguous`).
    pub fn is_contiguous(&self) -> bool {
        self.is_contiguous_from(0)
    }

    /// Whether each row is dense (`nb[0]` is the type size), whatever the other strides.
    pub fn rows_contiguous(&self) -> bool {
        self.nb[0] == self.dtype.type_size()
    }

    /// Whether dimensions `dim..` are densely packed given dense rows below them
    /// (ggml's `ggml_is_contiguous_n`).
    pub fn is_contiguous_from(&self, dim: usize) -> bool {
        let mut next = self.dtype.type_size();
        if self.ne[0] != self.dtype.block_size() && self.nb[0] != next {
            return false;
        }
        next *= self.ne[0] / self.dtype.block_size();
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if i > dim {
                    if self.nb[i] != next {
                        return false;
                    }
                    next *= self.ne[i];
                } else {
                    next = self.ne[i] * self.nb[i];
                }
            }
        }
        true
    }

    /// Whether dims 0 and 1 are swapped (`nb[0] > nb[1]`).
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }

    /// Whether the shape is equal to `other`'s.
    pub fn same_shape(&self, other: &Layout) -> bool {
        self.ne == other.ne
    }

    /// Byte offset of element `(i0, i1, i2, i3)` (for quantized types, `i0` must be a block start).
    pub fn offset(&self, i: [usize; MAX_DIMS]) -> usize {
        i[0] / self.dtype.block_size() * self.nb[0]
            + i[1] * self.nb[1]
            + i[2] * self.nb[2]
            + i[3] * self.nb[3]
    }
}

fn overflow(dtype: DType, ne: &[usize]) -> Error {
    Error::InvalidShape {
        shape: ne.to_vec(),
        reason: format!("the size of {dtype} data overflows (limit {MAX_TENSOR_BYTES} bytes)"),
    }
}

/// Pads a shape of 1 to 4 dimensions to 4 with ones, rejecting zero, over-large and too many
/// dimensions.
pub fn normalize_shape(shape: &[usize]) -> Result<[usize; MAX_DIMS]> {
    if shape.is_empty() || shape.len() > MAX_DIMS {
        return Err(Error::InvalidShape {
            shape: shape.to_vec(),
            reason: format!("expected 1 to {MAX_DIMS} dimensions, got {}", shape.len()),
        });
    }
    let mut ne = [1usize; MAX_DIMS];
    for (i, &n) in shape.iter().enumerate() {
        if n == 0 {
            return Err(Error::InvalidShape {
                shape: shape.to_vec(),
                reason: format!("dimension {i} is zero"),
            });
        }
        if n > MAX_DIM {
            return Err(Error::InvalidShape {
                shape: shape.to_vec(),
                reason: format!("dimension {i} is larger than {MAX_DIM}"),
            });
        }
        ne[i] = n;
    }
    let mut total: usize = 1;
    for &n in &ne {
        total = total.checked_mul(n).ok_or_else(|| Error::InvalidShape {
            shape: shape.to_vec(),
            reason: "the element count overflows".into(),
        })?;
    }
    Ok(ne)
}

/// A tensor in a graph: its layout, name, flags, producing op and sources, view relation and,
/// once allocated, its memory.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Type, shape and strides.
    pub layout: Layout,
    /// Name, unique within its graph when not empty.
    pub name: String,
    /// Input / output / weight roles.
    pub flags: TensorFlags,
    /// The op that computes this tensor ([`Op::None`] for leaves).
    pub op: Op,
    /// The op's operands, in ggml's order.
    pub src: Vec<TensorId>,
    /// For views (and CPY, whose result is its destination), the tensor whose memory this one
    /// shares.
    pub view_src: Option<TensorId>,
    /// Byte offset of this view in `view_src`.
    pub view_offs: usize,
    /// Memory assigned by an allocator or by the caller.
    pub storage: Option<Storage>,
}

impl Tensor {
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// Shape, innermost first.
    pub fn ne(&self) -> [usize; MAX_DIMS] {
        self.layout.ne
    }

    /// Byte strides.
    pub fn nb(&self) -> [usize; MAX_DIMS] {
        self.layout.nb
    }

    /// Bytes spanned by the tensor.
    pub fn nbytes(&self) -> usize {
        self.layout.nbytes()
    }

    /// Number of elements.
    pub fn nelements(&self) -> usize {
        self.layout.nelements()
    }

    /// Whether this tensor is a leaf (no op computes it).
    pub fn is_leaf(&self) -> bool {
        matches!(self.op, Op::None)
    }

    /// Whether this tensor shares another tensor's memory.
    pub fn is_view(&self) -> bool {
        self.view_src.is_some()
    }

    /// A name for messages: the tensor's name, or its op and id.
    pub fn label(&self, id: TensorId) -> String {
        if self.name.is_empty() {
            format!("{}{}", self.op.name(), id)
        } else {
            self.name.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_layout_strides() {
        let l = Layout::contiguous(DType::F32, &[3, 4, 5]).unwrap();
        assert_eq!(l.ne, [3, 4, 5, 1]);
        assert_eq!(l.nb, [4, 12, 48, 240]);
        assert_eq!(l.nbytes(), 240);
        assert!(l.is_contiguous());
        let q = Layout::contiguous(DType::Q4_0, &[64, 2]).unwrap();
        assert_eq!(q.nb, [18, 36, 72, 72]);
        assert_eq!(q.nbytes(), 72);
    }

    #[test]
    fn bad_shapes_are_rejected() {
        assert!(matches!(Layout::contiguous(DType::F32, &[0, 3]), Err(Error::InvalidShape { .. })));
        assert!(matches!(Layout::contiguous(DType::F32, &[]), Err(Error::InvalidShape { .. })));
        assert!(matches!(
            Layout::contiguous(DType::F32, &[1, 2, 3, 4, 5]),
            Err(Error::InvalidShape { .. })
        ));
        assert!(Layout::contiguous(DType::F32, &[1 << 40, 1 << 40]).is_err());
        assert!(Layout::contiguous(DType::F32, &[1 << 41]).is_err());
        assert!(matches!(
            Layout::contiguous(DType::Q4_0, &[33]),
            Err(Error::BlockAlignment { .. })
        ));
    }
}
