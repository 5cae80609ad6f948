//! DUP, CONT and CPY between tensors of one type whose rows are dense, and CONCAT of dense
//! tensors: byte copies split over the threads (the recurrent models' state write-backs and
//! convolution inputs, once per layer and token). Conversions between types and strided rows go
//! to the reference.

use super::fast_ops::split_rows;
use crate::matmul::AbortFn;
use crate::reference::HostTensor;
use crate::team::Threads;
use tessera_core::{Op, Result};

/// Bytes per piece a whole-tensor copy is split into between the threads.
const PIECE: usize = 16 << 10;

/// How a copy runs.
enum CopyPlan {
    /// Source and result dense, same bytes: one run of bytes.
    Whole,
    /// Source and result of one shape with dense rows: row by row.
    Rows,
    /// CONCAT of dense operands along this dim: per index of the dims above it, the first
    /// operand's block then the second's.
    Concat(usize),
}

/// The byte range of a tensor's layout.
fn bytes(t: &HostTensor) -> std::ops::Range<usize> {
    let start = t.ptr as usize;
    start..start + t.layout.nbytes()
}

/// Whether two tensors' byte ranges are disjoint.
fn disjoint(a: &HostTensor, b: &HostTensor) -> bool {
    let (a, b) = (bytes(a), bytes(b));
    a.end <= b.start || b.end <= a.start
}

/// How the byte copies take `op` with these operands, or why they leave it to the reference.
fn choose(
    op: &Op,
    dst: &HostTensor,
    srcs: &[HostTensor],
) -> std::result::Result<CopyPlan, &'static str> {
    let dense = |t: &HostTensor| t.layout.is_contiguous();
    let rows = |t: &HostTensor| t.layout.rows_contiguous() && t.layout.dtype.block_size() == 1;
    match op {
        Op::Dup | Op::Cont | Op::Cpy => {
            let src = srcs.first().ok_or("copy: no source")?;
            let how = if src.layout.dtype != dst.layout.dtype {
                return Err("copy: a conversion between types");
            } else if dense(src) && dense(dst) && src.layout.nbytes() == dst.layout.nbytes() {
                CopyPlan::Whole
            } else if src.layout.ne == dst.layout.ne && rows(src) && rows(dst) {
                CopyPlan::Rows
            } else {
                return Err("copy: a strided operand");
            };
            if disjoint(src, dst) || (src.ptr == dst.ptr && src.layout == dst.layout) {
                Ok(how)
            } else {
                Err("copy: the result overlaps its source")
            }
        }
        Op::Concat { dim } => {
            let (a, b) = (
                srcs.first().ok_or("concat: no operand")?,
                srcs.get(1).ok_or("concat: no operand")?,
            );
            if a.layout.dtype != dst.layout.dtype || b.layout.dtype != dst.layout.dtype {
                Err("concat: operands of another type than the result")
            } else if dst.layout.dtype.block_size() != 1 || *dim >= 4 {
                Err("concat: a block type or a dim past 3")
            } else if !dense(a) || !dense(b) || !dense(dst) {
                Err("concat: a strided operand")
            } else if !disjoint(a, dst) || !disjoint(b, dst) {
                Err("concat: the result overlaps an operand")
            } else {
                Ok(CopyPlan::Concat(*dim))
            }
        }
        _ => Err("no byte copy for the op"),
    }
}

/// Why the byte copies leave `op` with these operands to the reference (`None`: they take it).
/// The same rule as [`copy`]'s, asked once when a plan is made.
pub(super) fn copy_refusal(op: &Op, dst: &HostTensor, srcs: &[HostTensor]) -> Option<&'static str> {
    choose(op, dst, srcs).err()
}

/// Copies `n` bytes from `from` to `to`.
///
/// # Safety
///
/// Both are valid for `n` bytes and do not overlap.
unsafe fn bytes_to(from: usize, to: usize, n: usize) {
    // SAFETY: caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, n) };
}

/// Computes DUP, CONT, CPY or CONCAT as byte copies; `None` when the operands do not suit them
/// (the reference computes those).
///
/// # Safety
///
/// As [`crate::reference::compute_op`]: every pointer is valid for its layout's bytes during
/// the call and nobody else writes that memory (or touches `dst`) meanwhile.
pub(super) unsafe fn copy(
    op: &Op,
    dst: HostTensor,
    srcs: &[HostTensor],
    threads: &Threads<'_>,
    aborted: AbortFn<'_>,
) -> Option<Result<()>> {
    let how = choose(op, &dst, srcs).ok()?;
    let to = dst.ptr as usize;
    let src = srcs[0].ptr as usize;
    if !matches!(how, CopyPlan::Concat(_)) && src == to {
        return Some(Ok(()));
    }
    // In every case below the runs lie within their operands' layouts, and the result is
    // disjoint from the operands (`choose`).
    Some(match how {
        CopyPlan::Whole => {
            let n = dst.layout.nbytes();
            split_rows(threads, n.div_ceil(PIECE), PIECE / 4, aborted, &|pieces| {
                for p in pieces {
                    let (at, len) = (p * PIECE, PIECE.min(n - p * PIECE));
                    // SAFETY: bytes at..at + len of both (see above).
                    unsafe { bytes_to(src + at, to + at, len) };
                }
                Ok(())
            })
        }
        CopyPlan::Rows => {
            let (ne, sb, db) = (dst.layout.ne, srcs[0].layout.nb, dst.layout.nb);
            let len = ne[0] * dst.layout.dtype.type_size();
            split_rows(threads, ne[1] * ne[2] * ne[3], ne[0], aborted, &|rows| {
                for r in rows {
                    let i = [r % ne[1], r / ne[1] % ne[2], r / ne[1] / ne[2]];
                    let at = |nb: [usize; 4]| i[0] * nb[1] + i[1] * nb[2] + i[2] * nb[3];
                    // SAFETY: row i of both (same shape; see above).
                    unsafe { bytes_to(src + at(sb), to + at(db), len) };
                }
                Ok(())
            })
        }
        CopyPlan::Concat(dim) => {
            let (a, b) = (srcs[0], srcs[1]);
            let block = |t: &HostTensor| {
                t.layout.ne[..=dim].iter().product::<usize>() * t.layout.dtype.type_size()
            };
            let (ca, cb) = (block(&a), block(&b));
            let outer: usize = dst.layout.ne[dim + 1..].iter().product();
            let (pa, pb) = (a.ptr as usize, b.ptr as usize);
            split_rows(threads, outer, (ca + cb) / 4, aborted, &|os| {
                for o in os {
                    let base = to + o * (ca + cb);
                    // SAFETY: block o of each operand and of the result (the shape rule makes
                    // the blocks fill the result; see above).
                    unsafe {
                        bytes_to(pa + o * ca, base, ca);
                        bytes_to(pb + o * cb, base + ca, cb);
                    }
                }
                Ok(())
            })
        }
    })
}
