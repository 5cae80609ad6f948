//! DUP, CONT and CPY between tensors of one type whose rows are dense, and CONCAT of dense
//! tensors: byte copies split over the threads (the recurrent models' state write-backs and
//! convolution inputs, once per layer and token); CONCAT of strided operands of 4-byte elements
//! (a transposed one: the convolution window of a prompt) in tiles. Conversions between types
//! and other strided rows go to the reference.

use super::fast_ops::split_rows;
use crate::matmul::AbortFn;
use crate::reference::HostTensor;
use crate::team::Threads;
use std::ops::Range;
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
    /// CONCAT along this dim into a dense result of 4-byte elements from operands of any
    /// (4-byte aligned) strides, such as a transposed one (the recurrent models' convolution
    /// window: the carried state, then the transposed projection): element by element in tiles
    /// of [`TILE`] x [`TILE`] of the first two dims, so that both sides stay in cache lines.
    ConcatStrided(usize),
}

/// The side of a [`CopyPlan::ConcatStrided`] tile.
const TILE: usize = 32;

/// The byte range of a tensor's layout.
fn bytes(t: &HostTensor) -> Range<usize> {
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
    // 4-byte elements at 4-byte aligned addresses and strides.
    let words = |t: &HostTensor| {
        t.layout.dtype.block_size() == 1
            && t.layout.dtype.type_size() == 4
            && (t.ptr as usize).is_multiple_of(4)
            && t.layout.nb.iter().all(|b| b.is_multiple_of(4))
    };
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
            } else if !disjoint(a, dst) || !disjoint(b, dst) {
                Err("concat: the result overlaps an operand")
            } else if dense(a) && dense(b) && dense(dst) {
                Ok(CopyPlan::Concat(*dim))
            } else if dense(dst) && [a, b, dst].into_iter().all(words) {
                Ok(CopyPlan::ConcatStrided(*dim))
            } else {
                Err("concat: a strided operand of other than 4-byte elements")
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
        CopyPlan::ConcatStrided(dim) => {
            // SAFETY: `choose` checked the operands for the strided concat (see above).
            unsafe { concat_strided(dim, &dst, srcs[0], srcs[1], threads, aborted) }
        }
    })
}

/// Copies the `n0 x n1` 4-byte elements of a 2-D region, element `(i, j)` from `src + i * s0 +
/// j * s1` to `dst + i * 4 + j * d1` (byte addresses and strides), in [`TILE`] x [`TILE`] tiles.
///
/// # Safety
///
/// Every such element is readable at its source, writable at its destination, 4-byte aligned,
/// and the two regions do not overlap.
unsafe fn tile_copy(src: usize, [s0, s1]: [usize; 2], dst: usize, d1: usize, [n0, n1]: [usize; 2]) {
    for j0 in (0..n1).step_by(TILE) {
        for i0 in (0..n0).step_by(TILE) {
            for j in j0..(j0 + TILE).min(n1) {
                let (from, to) = (src + j * s1, dst + j * d1);
                for i in i0..(i0 + TILE).min(n0) {
                    // SAFETY: element (i, j) of both regions (caller's contract).
                    unsafe { *((to + i * 4) as *mut u32) = *((from + i * s0) as *const u32) };
                }
            }
        }
    }
}

/// [`CopyPlan::ConcatStrided`]: the dense result's rows (dim 1) in blocks of [`TILE`] per index of
/// dims 2 and 3, split over the threads; each block's part from each operand copied by
/// [`tile_copy`].
///
/// # Safety
///
/// As [`copy`], with operands of 4-byte elements at aligned addresses and strides, the result
/// dense and disjoint from them, and the shape rule of CONCAT checked.
unsafe fn concat_strided(
    dim: usize,
    dst: &HostTensor,
    a: HostTensor,
    b: HostTensor,
    threads: &Threads<'_>,
    aborted: AbortFn<'_>,
) -> Result<()> {
    let ne = dst.layout.ne;
    let dn = dst.layout.nb;
    let blocks = ne[1].div_ceil(TILE);
    let na = a.layout.ne[dim];
    split_rows(threads, blocks * ne[2] * ne[3], TILE * ne[0], aborted, &|units| {
        for u in units {
            let (jb, i2, i3) = (u % blocks, u / blocks % ne[2], u / blocks / ne[2]);
            let rows = jb * TILE..((jb + 1) * TILE).min(ne[1]);
            // The part [i0, j, i2, i3] of dst from the first operand or the second (whose index
            // along `dim` starts at `na` in dst).
            let part = |second: bool, i0: Range<usize>, j: Range<usize>| {
                if i0.is_empty() || j.is_empty() {
                    return;
                }
                let mut at = [i0.start, j.start, i2, i3];
                let t = if second { &b } else { &a };
                if second {
                    at[dim] -= na;
                }
                let nb = t.layout.nb;
                let src = t.ptr as usize + (0..4).map(|d| at[d] * nb[d]).sum::<usize>();
                let to =
                    dst.ptr as usize + i0.start * dn[0] + j.start * dn[1] + i2 * dn[2] + i3 * dn[3];
                // SAFETY: the shape rule makes the part's elements lie within `t` and dst; dst
                // is dense, disjoint from the operands and written here by this unit alone.
                unsafe { tile_copy(src, [nb[0], nb[1]], to, dn[1], [i0.len(), j.len()]) };
            };
            match dim {
                0 => {
                    part(false, 0..na, rows.clone());
                    part(true, na..ne[0], rows);
                }
                1 => {
                    part(false, 0..ne[0], rows.start.min(na)..rows.end.min(na));
                    part(true, 0..ne[0], rows.start.max(na)..rows.end.max(na));
                }
                _ => part([i2, i3][dim - 2] >= na, 0..ne[0], rows),
            }
        }
        Ok(())
    })
}
