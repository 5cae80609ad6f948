//! Operand checks done before computing: operand count, types and shapes of the sources and
//! of the destination, mirroring the graph builder's checks (and accepting a little more where
//! the reference can compute it, e.g. F16 activations in MUL_MAT).
//!
//! They make [`super::compute_op`] return typed errors instead of reading outside a tensor when
//! handed layouts that do not fit the op.

use super::access::DIMS;
use tessera_core::graph::can_repeat;
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::{DType, Error, Layout, Op, Result};

fn shape(ne: &[usize; DIMS]) -> String {
    format!("[{}, {}, {}, {}]", ne[0], ne[1], ne[2], ne[3])
}

fn mismatch(op: &Op, reason: String) -> Error {
    Error::shape(op.name(), reason)
}

fn operands(op: &Op, srcs: &[&Layout], min: usize, max: usize) -> Result<()> {
    if srcs.len() < min || srcs.len() > max {
        let want = if min == max { format!("{min}") } else { format!("{min} to {max}") };
        return Err(mismatch(op, format!("expects {want} operands, got {}", srcs.len())));
    }
    Ok(())
}

fn float(op: &Op, l: &Layout, which: &str) -> Result<()> {
    if !l.dtype.is_float() {
        return Err(Error::dtype(op.name(), l.dtype, format!("{which} must be F32, F16 or BF16")));
    }
    Ok(())
}

fn same_shape(op: &Op, dst: &Layout, want: [usize; DIMS]) -> Result<()> {
    if dst.ne != want {
        return Err(mismatch(
            op,
            format!("destination {} should be {}", shape(&dst.ne), shape(&want)),
        ));
    }
    Ok(())
}

fn dense_rows(op: &Op, l: &Layout, which: &str) -> Result<()> {
    if l.dtype.is_quantized() && !l.rows_contiguous() {
        return Err(mismatch(op, format!("quantized {which} must have dense rows")));
    }
    Ok(())
}

/// Checks that `dst` and `srcs` fit `op` (see the module doc).
pub(crate) fn validate(op: &Op, dst: &Layout, srcs: &[&Layout]) -> Result<()> {
    match op {
        Op::None | Op::Reshape | Op::View | Op::Permute { .. } | Op::Transpose => Ok(()),
        Op::Dup | Op::Cont => {
            operands(op, srcs, 1, 1)?;
            let a = srcs[0];
            if dst.dtype != a.dtype {
                return Err(Error::dtype(
                    op.name(),
                    dst.dtype,
                    format!("destination must be {}", a.dtype),
                ));
            }
            same_shape(op, dst, a.ne)?;
            dense_rows(op, a, "src0")?;
            dense_rows(op, dst, "destination")
        }
        Op::Cpy => {
            operands(op, srcs, 2, 2)?;
            let (a, b) = (srcs[0], srcs[1]);
            if dst.dtype != b.dtype || dst.ne != b.ne {
                return Err(mismatch(op, "the destination must have src1's type and shape".into()));
            }
            if a.nelements() != dst.nelements() {
                return Err(mismatch(
                    op,
                    format!(
                        "src0 {} and destination {} have different element counts",
                        shape(&a.ne),
                        shape(&dst.ne)
                    ),
                ));
            }
            if (a.dtype == DType::I32) != (dst.dtype == DType::I32) {
                return Err(Error::dtype(op.name(), DType::I32, "I32 copies only to I32"));
            }
            dense_rows(op, a, "src0")?;
            dense_rows(op, dst, "destination")
        }
        Op::SetRows => {
            operands(op, srcs, 3, 3)?;
            let (a, b, c) = (srcs[0], srcs[1], srcs[2]);
            if dst.dtype != a.dtype || dst.ne != a.ne {
                return Err(mismatch(op, "the destination must have src0's type and shape".into()));
            }
            float(op, a, "destination")?;
            if b.dtype != DType::F32 || c.dtype != DType::I32 {
                return Err(Error::dtype(op.name(), b.dtype, "rows must be F32, indices I32"));
            }
            let fits = a.ne[0] == b.ne[0]
                && b.ne[1] == c.ne[0]
                && a.ne[2] == b.ne[2]
                && a.ne[3] == b.ne[3]
                && c.ne[3] == 1
                && b.ne[2].is_multiple_of(c.ne[1])
                && b.ne[3].is_multiple_of(c.ne[2]);
            if !fits {
                return Err(mismatch(
                    op,
                    format!(
                        "destination {}, rows {} and indices {} do not fit",
                        shape(&a.ne),
                        shape(&b.ne),
                        shape(&c.ne)
                    ),
                ));
            }
            if !a.rows_contiguous() || !dst.rows_contiguous() {
                return Err(mismatch(op, "the destination must have dense rows".into()));
            }
            Ok(())
        }
        Op::FlashAttnExt(_) => {
            operands(op, srcs, 3, 4)?;
            let (q, k, v) = (srcs[0], srcs[1], srcs[2]);
            if q.dtype != DType::F32 || dst.dtype != DType::F32 {
                return Err(Error::dtype(op.name(), q.dtype, "q and the result must be F32"));
            }
            for (l, which) in
                [(k, "k"), (v, "v")].into_iter().chain(srcs.get(3).map(|m| (*m, "mask")))
            {
                if !matches!(l.dtype, DType::F16 | DType::F32) {
                    return Err(Error::dtype(
                        op.name(),
                        l.dtype,
                        format!("{which} must be F16 or F32"),
                    ));
                }
                if !l.rows_contiguous() {
                    return Err(mismatch(op, format!("{which} must have dense rows")));
                }
            }
            let fits = k.ne[0] == q.ne[0]
                && v.ne[1] == k.ne[1]
                && v.ne[2] == k.ne[2]
                && k.ne[3] == q.ne[3]
                && v.ne[3] == q.ne[3]
                && q.ne[2].is_multiple_of(k.ne[2]);
            if !fits {
                return Err(mismatch(
                    op,
                    format!(
                        "q {}, k {} and v {} do not fit",
                        shape(&q.ne),
                        shape(&k.ne),
                        shape(&v.ne)
                    ),
                ));
            }
            if let Some(m) = srcs.get(3) {
                if m.ne[0] != k.ne[1] || m.ne[1] < q.ne[1] || m.ne[2] != 1 || m.ne[3] != 1 {
                    return Err(mismatch(op, format!("mask {} does not fit", shape(&m.ne))));
                }
            }
            same_shape(op, dst, [v.ne[0], q.ne[2], q.ne[1], q.ne[3]])
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            operands(op, srcs, 2, 2)?;
            let (a, b) = (srcs[0], srcs[1]);
            float(op, a, "src0")?;
            float(op, b, "src1")?;
            float(op, dst, "destination")?;
            if !can_repeat(&b.ne, &a.ne) {
                return Err(mismatch(
                    op,
                    format!("src1 {} cannot be broadcast to src0 {}", shape(&b.ne), shape(&a.ne)),
                ));
            }
            same_shape(op, dst, a.ne)
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Clamp { .. } | Op::Unary(_) => {
            operands(op, srcs, 1, 1)?;
            float(op, srcs[0], "src0")?;
            float(op, dst, "destination")?;
            same_shape(op, dst, srcs[0].ne)
        }
        Op::Sum => {
            operands(op, srcs, 1, 1)?;
            float(op, srcs[0], "src0")?;
            float(op, dst, "destination")?;
            same_shape(op, dst, [1, 1, 1, 1])
        }
        Op::SumRows | Op::Mean => {
            operands(op, srcs, 1, 1)?;
            let a = srcs[0];
            float(op, a, "src0")?;
            float(op, dst, "destination")?;
            same_shape(op, dst, [1, a.ne[1], a.ne[2], a.ne[3]])
        }
        Op::Argmax => {
            operands(op, srcs, 1, 1)?;
            let a = srcs[0];
            float(op, a, "src0")?;
            if a.ne[2] != 1 || a.ne[3] != 1 {
                return Err(mismatch(op, format!("src0 {} is not a matrix", shape(&a.ne))));
            }
            if a.ne[0] > i32::MAX as usize + 1 {
                return Err(mismatch(
                    op,
                    format!("rows of {} values do not fit I32 indices", a.ne[0]),
                ));
            }
            if dst.dtype != DType::I32 {
                return Err(Error::dtype(op.name(), dst.dtype, "destination must be I32"));
            }
            same_shape(op, dst, [a.ne[1], 1, 1, 1])
        }
        Op::Repeat => {
            operands(op, srcs, 1, 1)?;
            let a = srcs[0];
            if a.dtype.is_quantized() || dst.dtype != a.dtype {
                return Err(Error::dtype(op.name(), dst.dtype, "needs src0's non-quantized type"));
            }
            if !can_repeat(&a.ne, &dst.ne) {
                return Err(mismatch(
                    op,
                    format!("src0 {} cannot be tiled to {}", shape(&a.ne), shape(&dst.ne)),
                ));
            }
            Ok(())
        }
        Op::Concat { dim } => {
            operands(op, srcs, 2, 2)?;
            let (a, b) = (srcs[0], srcs[1]);
            if *dim >= DIMS {
                return Err(Error::InvalidArgument(format!("CONCAT: dim {dim} is not below 4")));
            }
            if a.dtype.is_quantized() || b.dtype != a.dtype || dst.dtype != a.dtype {
                return Err(Error::dtype(
                    op.name(),
                    b.dtype,
                    "operands need one non-quantized type",
                ));
            }
            if (0..DIMS).any(|i| i != *dim && a.ne[i] != b.ne[i]) {
                return Err(mismatch(
                    op,
                    format!(
                        "src0 {} and src1 {} differ outside dim {dim}",
                        shape(&a.ne),
                        shape(&b.ne)
                    ),
                ));
            }
            let mut ne = a.ne;
            ne[*dim] += b.ne[*dim];
            same_shape(op, dst, ne)
        }
        Op::MulMat => {
            operands(op, srcs, 2, 2)?;
            let (a, b) = (srcs[0], srcs[1]);
            if a.dtype == DType::I32 {
                return Err(Error::dtype(op.name(), a.dtype, "src0 (weights) must not be I32"));
            }
            float(op, b, "src1")?;
            float(op, dst, "destination")?;
            dense_rows(op, a, "src0")?;
            if a.ne[0] != b.ne[0] || b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0 {
                return Err(mismatch(
                    op,
                    format!(
                        "src0 {} and src1 {} need equal ne0 and src1's ne2, ne3 multiples of src0's",
                        shape(&a.ne),
                        shape(&b.ne)
                    ),
                ));
            }
            same_shape(op, dst, [a.ne[1], b.ne[1], b.ne[2], b.ne[3]])
        }
        Op::GetRows => {
            operands(op, srcs, 2, 2)?;
            let (a, b) = (srcs[0], srcs[1]);
            if b.dtype != DType::I32 {
                return Err(Error::dtype(op.name(), b.dtype, "src1 (indices) must be I32"));
            }
            if a.ne[2] != b.ne[1] || a.ne[3] != b.ne[2] || b.ne[3] != 1 {
                return Err(mismatch(
                    op,
                    format!("src0 {} does not fit indices {}", shape(&a.ne), shape(&b.ne)),
                ));
            }
            dense_rows(op, a, "src0")?;
            if a.dtype == DType::I32 {
                if dst.dtype != DType::I32 {
                    return Err(Error::dtype(op.name(), dst.dtype, "rows of I32 must go to I32"));
                }
            } else {
                float(op, dst, "destination")?;
            }
            same_shape(op, dst, [a.ne[0], b.ne[0], b.ne[1], b.ne[2]])
        }
        Op::SoftMax { .. } => {
            operands(op, srcs, 1, 2)?;
            let a = srcs[0];
            float(op, a, "src0")?;
            float(op, dst, "destination")?;
            if let Some(m) = srcs.get(1) {
                float(op, m, "mask")?;
                if m.ne[0] != a.ne[0]
                    || m.ne[1] < a.ne[1]
                    || !a.ne[2].is_multiple_of(m.ne[2])
                    || !a.ne[3].is_multiple_of(m.ne[3])
                {
                    return Err(mismatch(
                        op,
                        format!("mask {} does not fit src0 {}", shape(&m.ne), shape(&a.ne)),
                    ));
                }
            }
            same_shape(op, dst, a.ne)
        }
        Op::DiagMaskInf { .. } | Op::RmsNorm { .. } | Op::Norm { .. } => {
            operands(op, srcs, 1, 1)?;
            float(op, srcs[0], "src0")?;
            float(op, dst, "destination")?;
            same_shape(op, dst, srcs[0].ne)
        }
        Op::Rope(p) => {
            operands(op, srcs, 2, 3)?;
            let (a, pos) = (srcs[0], srcs[1]);
            float(op, a, "src0")?;
            float(op, dst, "destination")?;
            if pos.dtype != DType::I32 {
                return Err(Error::dtype(op.name(), pos.dtype, "positions must be I32"));
            }
            if pos.ne != [a.ne[2], 1, 1, 1] {
                return Err(mismatch(
                    op,
                    format!(
                        "positions {} must be a vector of src0's ne2 = {}",
                        shape(&pos.ne),
                        a.ne[2]
                    ),
                ));
            }
            if p.n_dims == 0 || p.n_dims % 2 != 0 || p.n_dims > a.ne[0] {
                return Err(Error::InvalidArgument(format!(
                    "ROPE: n_dims {} must be even, > 0 and at most ne0 = {}",
                    p.n_dims, a.ne[0]
                )));
            }
            if p.mode != ROPE_MODE_NORMAL && p.mode != ROPE_MODE_NEOX {
                return Err(Error::InvalidArgument(format!("ROPE: mode {} is not 0 or 2", p.mode)));
            }
            if let Some(f) = srcs.get(2) {
                float(op, f, "frequency factors")?;
                if f.ne[0] < p.n_dims / 2 {
                    return Err(mismatch(
                        op,
                        format!("frequency factors need at least {} values", p.n_dims / 2),
                    ));
                }
            }
            same_shape(op, dst, a.ne)
        }
        Op::Glu { .. } => {
            operands(op, srcs, 1, 2)?;
            let a = srcs[0];
            float(op, a, "src0")?;
            float(op, dst, "destination")?;
            if let Some(b) = srcs.get(1) {
                float(op, b, "src1")?;
                if b.ne != a.ne {
                    return Err(mismatch(
                        op,
                        format!("src0 {} and src1 {} differ", shape(&a.ne), shape(&b.ne)),
                    ));
                }
                same_shape(op, dst, a.ne)
            } else {
                if !a.ne[0].is_multiple_of(2) {
                    return Err(mismatch(op, format!("src0 ne0 = {} is not even", a.ne[0])));
                }
                same_shape(op, dst, [a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]])
            }
        }
    }
}
