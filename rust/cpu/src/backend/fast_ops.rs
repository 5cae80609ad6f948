//! The CPU backend's vectorized element-wise ops: SiLU, GELU, SIGMOID, SOFTPLUS, ADD, MUL,
//! RMS_NORM, SOFT_MAX, ROPE and the SiLU / GELU gated linear units on F32 tensors whose rows are
//! contiguous, computed row by row with the kernels of [`crate::kernels::ew`] and split over the
//! backend's threads in chunks of rows.
//!
//! [`compute`] returns `None` for anything else (other ops and types, strided rows, odd
//! overlaps of the result with an operand), and the backend falls back to the reference.

use super::rope::{RopeCache, RopeTables};
use crate::kernels::ew;
use crate::matmul::{try_chunks, AbortFn};
use crate::reference::HostTensor;
use crate::team::Threads;
use std::ops::Range;
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::{DType, Error, Layout, Op, Result, UnaryOp};

/// Below this many elements an op runs on the calling thread only.
const MIN_PARALLEL: usize = 1 << 14;
/// A broadcast row of ADD / MUL shorter than its destination's is used when at least this long
/// (shorter ones go to the reference).
const MIN_BROADCAST_ROW: usize = 32;
/// Rows between two polls of the abort callback.
const POLL_ROWS: usize = 64;

/// An F32 operand with contiguous rows, indexed by destination row (broadcast by modulo).
#[derive(Clone, Copy)]
struct Rows {
    t: HostTensor,
    /// The operand is the very memory of the destination (in place): read rows through a copy.
    aliased: bool,
}

impl Rows {
    /// Address of row `i` (`[i1, i2, i3]`, reduced modulo this operand's shape).
    fn row(&self, i: [usize; 3]) -> *mut f32 {
        let (ne, nb) = (&self.t.layout.ne, &self.t.layout.nb);
        let off = i[0] % ne[1] * nb[1] + i[1] % ne[2] * nb[2] + i[2] % ne[3] * nb[3];
        self.t.ptr.wrapping_add(off).cast()
    }
}

/// Whether `l` is F32 (or `dtype`) with contiguous, aligned rows at `ptr`.
fn rows_ok(t: &HostTensor, dtype: DType) -> bool {
    let l = &t.layout;
    let size = dtype.type_size();
    l.dtype == dtype
        && l.nb[0] == size
        && (t.ptr as usize).is_multiple_of(size)
        && l.nb[1..].iter().all(|b| b.is_multiple_of(size))
}

fn byte_range(l: &Layout, ptr: *mut u8) -> Range<usize> {
    let start = ptr as usize;
    start..start + l.nbytes()
}

/// `src` as an operand of `dst`: `None` when it overlaps `dst` other than exactly (in place).
fn operand(dst: &HostTensor, src: HostTensor) -> Option<Rows> {
    let (d, s) = (byte_range(&dst.layout, dst.ptr), byte_range(&src.layout, src.ptr));
    if d.start >= s.end || s.start >= d.end || d.is_empty() || s.is_empty() {
        return Some(Rows { t: src, aliased: false });
    }
    let same =
        src.ptr == dst.ptr && src.layout.ne == dst.layout.ne && src.layout.nb == dst.layout.nb;
    same.then_some(Rows { t: src, aliased: true })
}

/// A row kernel of one operand.
type UnaryRow = fn(&[f32], &mut [f32]) -> Result<()>;
/// A row kernel of two operands.
type BinaryRow = fn(&[f32], &[f32], &mut [f32]) -> Result<()>;

/// The row computation of one op: destination row, then the source rows.
enum Kernel {
    Unary(UnaryRow),
    Binary(BinaryRow),
    /// `x * scale + bias`.
    Scale {
        scale: f32,
        bias: f32,
    },
    RmsNorm(f32),
    SoftMax {
        scale: f32,
        max_bias: f32,
        mask: Option<(HostTensor, DType)>,
    },
    /// ROPE with these parameters, before its table is taken ([`compute`] makes it `Rope`).
    RopeOf(tessera_core::RopeParams),
    Rope(RopeCache),
    /// A gated linear unit: `act(x) * g`, from the halves of src0's rows or from two operands.
    Glu {
        act: UnaryRow,
        swapped: bool,
    },
}

/// The kernel of a node and its operands, as [`compute`] runs them.
struct Choice {
    kernel: Kernel,
    a: Rows,
    b: Option<Rows>,
}

/// Why the vectorized rows leave `op` with these operands to the reference (`None`: they take
/// it). The same rule as [`compute`]'s, asked once when a plan is made.
pub(super) fn refusal(op: &Op, dst: &HostTensor, srcs: &[HostTensor]) -> Option<&'static str> {
    choose(op, dst, srcs).err()
}

/// The vectorized rows' kernel of `op` with these operands, or why there is none.
fn choose(
    op: &Op,
    dst: &HostTensor,
    srcs: &[HostTensor],
) -> std::result::Result<Choice, &'static str> {
    let kernel = match op {
        Op::Unary(UnaryOp::Silu) => Kernel::Unary(ew::silu),
        Op::Unary(UnaryOp::Gelu) => Kernel::Unary(ew::gelu),
        Op::Unary(UnaryOp::Sigmoid) => Kernel::Unary(ew::sigmoid),
        Op::Unary(UnaryOp::Softplus) => Kernel::Unary(ew::softplus),
        Op::Scale { scale, bias } => Kernel::Scale { scale: *scale, bias: *bias },
        Op::Add | Op::Mul => Kernel::Binary(if matches!(op, Op::Add) { ew::add } else { ew::mul }),
        Op::RmsNorm { eps } => Kernel::RmsNorm(*eps),
        Op::SoftMax { scale, max_bias } => {
            Kernel::SoftMax { scale: *scale, max_bias: *max_bias, mask: None }
        }
        Op::Rope(p) => Kernel::RopeOf(*p),
        Op::Glu { op, .. } if !matches!(op.activation(), UnaryOp::Silu | UnaryOp::Gelu) => {
            return Err("vectorized rows: a gated unit other than SiLU or GELU");
        }
        Op::Glu { op, swapped } => Kernel::Glu {
            act: if op.activation() == UnaryOp::Silu { ew::silu } else { ew::gelu },
            swapped: *swapped,
        },
        _ => return Err("no vectorized kernel for the op"),
    };
    if !rows_ok(dst, DType::F32) || srcs.is_empty() || !rows_ok(&srcs[0], DType::F32) {
        return Err("vectorized rows: result or first operand not F32 with contiguous rows");
    }
    let ne0 = dst.layout.ne[0];
    let kernel = match kernel {
        Kernel::Binary(_) => {
            let b = srcs[1].layout.ne[0];
            if !rows_ok(&srcs[1], DType::F32) {
                return Err("vectorized rows: second operand not F32 with contiguous rows");
            }
            if b != ne0 && b < MIN_BROADCAST_ROW {
                return Err("vectorized rows: a broadcast row shorter than 32");
            }
            kernel
        }
        Kernel::SoftMax { scale, max_bias, .. } => {
            let mask = match srcs.get(1) {
                None => None,
                Some(m) if rows_ok(m, DType::F32) => Some((*m, DType::F32)),
                Some(m) if rows_ok(m, DType::F16) => Some((*m, DType::F16)),
                Some(_) => {
                    return Err("vectorized rows: a mask not F32 or F16 with contiguous rows")
                }
            };
            Kernel::SoftMax { scale, max_bias, mask }
        }
        Kernel::RopeOf(p) => {
            let pos = srcs.get(1).ok_or("ROPE: no positions")?;
            if pos.layout.dtype != DType::I32
                || !(p.mode == ROPE_MODE_NORMAL || p.mode == ROPE_MODE_NEOX)
                || srcs.get(2).is_some_and(|f| f.layout.dtype != DType::F32)
            {
                return Err("vectorized rows: ROPE of a mode other than normal or NeoX");
            }
            kernel
        }
        Kernel::Glu { .. } => {
            if srcs.get(1).is_some_and(|g| !rows_ok(g, DType::F32)) {
                return Err("vectorized rows: a gate not F32 with contiguous rows");
            }
            kernel
        }
        other => other,
    };
    let overlap = "vectorized rows: the result overlaps an operand other than in place";
    let a = operand(dst, srcs[0]).ok_or(overlap)?;
    let b = match kernel {
        Kernel::Binary(_) => Some(operand(dst, srcs[1]).ok_or(overlap)?),
        Kernel::Glu { .. } if srcs.len() > 1 => Some(operand(dst, srcs[1]).ok_or(overlap)?),
        _ => None,
    };
    if let Kernel::SoftMax { mask: Some((m, _)), .. } = &kernel {
        // The mask is only read; it must not overlap the result at all.
        if operand(dst, *m).ok_or(overlap)?.aliased {
            return Err(overlap);
        }
    }
    Ok(Choice { kernel, a, b })
}

/// Computes `op` with the vectorized rows when its operands allow, split over `threads`;
/// `None` when it does not apply (the caller uses the reference).
///
/// The operands must have been validated for the op (as `reference::supports` does).
///
/// # Safety
///
/// As [`crate::reference::compute_op`]: every pointer is valid for its layout's bytes during
/// the call and nobody else writes that memory (or touches `dst`) meanwhile.
pub(super) unsafe fn compute(
    op: &Op,
    dst: HostTensor,
    srcs: &[HostTensor],
    threads: &Threads<'_>,
    rope_tables: &RopeTables,
    aborted: AbortFn<'_>,
) -> Option<Result<()>> {
    let Choice { kernel, a, b } = choose(op, &dst, srcs).ok()?;
    let kernel = match kernel {
        Kernel::RopeOf(p) => {
            let (pos, factors) = (srcs.get(1)?, srcs.get(2));
            // SAFETY: (caller) the positions and factors are valid for reads of their layouts.
            Kernel::Rope(unsafe { RopeCache::new(&p, pos, factors, rope_tables)? })
        }
        other => other,
    };
    let ne0 = dst.layout.ne[0];
    // src0's row length: dst's, except for a GLU on halves (twice as long).
    let a_len = a.t.layout.ne[0];
    let ne = dst.layout.ne;
    let n_rows = ne[1] * ne[2] * ne[3];
    let run = |rows: Range<usize>| -> Result<()> {
        let mut scratch = vec![0f32; if a.aliased { a_len } else { 0 }];
        let mut b_scratch =
            vec![0f32; b.map_or(0, |b| if b.aliased { b.t.layout.ne[0] } else { 0 })];
        let mut tmp = Vec::new();
        let y_rows = Rows { t: dst, aliased: false };
        for (k, r) in rows.enumerate() {
            if k % POLL_ROWS == POLL_ROWS - 1 && aborted() {
                return Err(Error::Aborted);
            }
            let i = [r % ne[1], r / ne[1] % ne[2], r / ne[1] / ne[2]];
            // Sources first: a source in dst's memory is copied before dst's row is borrowed.
            // SAFETY: row i of src0 (dst's rows) lies within it.
            let x = unsafe { read_row(&a, i, a_len, &mut scratch) };
            // SAFETY: row i (modulo b's shape) of b lies within it.
            let bx = b.map(|b| unsafe { read_row(&b, i, b.t.layout.ne[0], &mut b_scratch) });
            // SAFETY: the row lies within dst (i < ne); dst is written by this chunk only, and
            // no source slice overlaps it (sources in its memory were copied above).
            let y = unsafe { std::slice::from_raw_parts_mut(y_rows.row(i), ne0) };
            match &kernel {
                Kernel::Unary(f) => f(x, y)?,
                Kernel::Scale { scale, bias } => {
                    for (y, &x) in y.iter_mut().zip(x) {
                        *y = x * scale + bias;
                    }
                }
                Kernel::Binary(f) => {
                    let bx = bx.expect("binary ops have two operands");
                    for (xc, yc) in x.chunks(bx.len()).zip(y.chunks_mut(bx.len())) {
                        f(xc, bx, yc)?;
                    }
                }
                Kernel::RmsNorm(eps) => ew::rms_norm(x, *eps, y)?,
                Kernel::SoftMax { scale, max_bias, mask } => {
                    // SAFETY: the mask (if any) has dst's ne0 and at least its rows (checked by
                    // validation), broadcast over dims 2 and 3.
                    unsafe { soft_max_row(x, y, i, ne[2], *scale, *max_bias, mask, &mut tmp)? }
                }
                Kernel::Rope(rc) => rc.row(x, y, i[1])?,
                Kernel::RopeOf(_) => {
                    return Err(Error::InvalidArgument("ROPE without its table".into()))
                }
                Kernel::Glu { act, swapped } => {
                    let (v, g) = match bx {
                        Some(g) => (x, g),
                        None if *swapped => (&x[ne0..], &x[..ne0]),
                        None => (&x[..ne0], &x[ne0..]),
                    };
                    tmp.resize(ne0, 0.0);
                    act(v, &mut tmp)?;
                    ew::mul(&tmp, g, y)?;
                }
            }
        }
        Ok(())
    };
    Some(split_rows(threads, n_rows, ne0, aborted, &run))
}

/// Row `i` of `src` (`n` values), through `scratch` when it is the destination's memory.
///
/// # Safety
///
/// Row `i` of `src` lies within its memory and is not written during the returned borrow,
/// except through `scratch` when `src.aliased`.
unsafe fn read_row<'a>(src: &Rows, i: [usize; 3], n: usize, scratch: &'a mut [f32]) -> &'a [f32] {
    let p = src.row(i);
    if src.aliased {
        // SAFETY: (caller) the row lies within src; it is copied before dst's row is written.
        unsafe { std::ptr::copy_nonoverlapping(p, scratch.as_mut_ptr(), n) };
        &scratch[..n]
    } else {
        // SAFETY: (caller) the row lies within src and nobody writes it meanwhile.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

/// ggml's ALiBi slope of head `h` of `n_head` (1 without bias).
fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = 1usize << n_head.max(1).ilog2();
    let m0 = 2f64.powf(-f64::from(max_bias) / n_head_log2 as f64);
    let m1 = 2f64.powf(-(f64::from(max_bias) / 2.0) / n_head_log2 as f64);
    let slope = if h < n_head_log2 {
        m0.powf((h + 1) as f64)
    } else {
        m1.powf((2 * (h - n_head_log2) + 1) as f64)
    };
    slope as f32
}

/// One row of SOFT_MAX: `softmax(x * scale + slope * mask)`; a fully masked row is NaN, as in
/// the reference.
///
/// # Safety
///
/// With a mask, its row `[i1, i2 % ne2, i3 % ne3]` of `x.len()` values lies within it.
#[allow(clippy::too_many_arguments)]
unsafe fn soft_max_row(
    x: &[f32],
    y: &mut [f32],
    i: [usize; 3],
    n_head: usize,
    scale: f32,
    max_bias: f32,
    mask: &Option<(HostTensor, DType)>,
    tmp: &mut Vec<f32>,
) -> Result<()> {
    let n = x.len();
    let w: &[f32] = match mask {
        None if scale == 1.0 => x,
        None => {
            tmp.clear();
            tmp.extend(x.iter().map(|&v| v * scale));
            tmp
        }
        Some((m, dtype)) => {
            let slope = alibi_slope(max_bias, i[1], n_head);
            let rows = Rows { t: *m, aliased: false };
            let p = rows.row(i);
            tmp.clear();
            if *dtype == DType::F32 {
                // SAFETY: (caller) the mask row lies within the mask.
                let mr = unsafe { std::slice::from_raw_parts(p, n) };
                tmp.extend(x.iter().zip(mr).map(|(&v, &mv)| v * scale + slope * mv));
            } else {
                // SAFETY: (caller) the mask row of F16 values lies within the mask.
                let mr = unsafe { std::slice::from_raw_parts(p.cast::<half::f16>(), n) };
                tmp.extend(x.iter().zip(mr).map(|(&v, &mv)| v * scale + slope * mv.to_f32()));
            }
            tmp
        }
    };
    if w.iter().all(|&v| v == f32::NEG_INFINITY) && n > 0 {
        y.fill(f32::NAN);
        return Ok(());
    }
    ew::softmax(w, y)
}

/// Runs `run` over `0..n_rows` in chunks on the pool (on this thread when the op is small).
pub(super) fn split_rows(
    threads: &Threads<'_>,
    n_rows: usize,
    row_len: usize,
    aborted: AbortFn<'_>,
    run: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let chunks = if threads.n() <= 1 || n_rows.saturating_mul(row_len) < MIN_PARALLEL {
        1
    } else {
        (threads.n() * 4).min(n_rows)
    };
    if chunks <= 1 {
        return run(0..n_rows);
    }
    let per = n_rows.div_ceil(chunks);
    try_chunks(
        threads,
        n_rows.div_ceil(per),
        aborted,
        |c| run(c * per..((c + 1) * per).min(n_rows)),
    )
}
