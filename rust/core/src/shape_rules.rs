//! The shape and type rules of every op, in one place.
//!
//! [`output_layout`] answers, for an op and the layouts of its operands (in ggml's order), the
//! layout of its result, or the typed error naming the op and the operand that does not fit.
//! The graph builder ([`crate::Graph`]) makes every node through it, the CPU reference checks a
//! node with it before computing, and the GPU's `supports_op` starts from it, adding only what
//! its kernels cannot do. RESHAPE and VIEW take their shape from the node's own parameters,
//! which [`Op`] does not hold: their rules are [`reshape_layout`] and [`view_layout`].
//!
//! The rules are ggml's constructor assertions (`ggml_add`, `ggml_mul_mat`, ...) returned as
//! errors: [`Error::ShapeMismatch`] for operands that do not fit each other (or a wrong operand
//! count), [`Error::UnsupportedType`] for a type the op does not take, [`Error::InvalidParam`]
//! for a parameter out of range and [`Error::ViewOutOfBounds`] for a view outside its source.
//! When several things are wrong, the first in the order written here is reported; the
//! TypeScript builder (`src/graph.ts`) keeps a copy of these rules in the same order, and
//! `tests/node/differential.test.ts` compares the two on random graphs.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::{AttnParams, GluOp, Op, RopeParams, ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use crate::tensor::{normalize_shape, Layout, MAX_DIMS};

/// A shape as messages write it: `[a, b, c, d]`.
pub fn fmt_ne(ne: &[usize; MAX_DIMS]) -> String {
    format!("[{}, {}, {}, {}]", ne[0], ne[1], ne[2], ne[3])
}

/// Whether `small` can be tiled to `big` (each dim of `big` a multiple of `small`'s), as
/// ggml's `ggml_can_repeat`.
pub fn can_repeat(small: &[usize; MAX_DIMS], big: &[usize; MAX_DIMS]) -> bool {
    (0..MAX_DIMS).all(|i| big[i].is_multiple_of(small[i]))
}

/// The fewest and most operands `op` takes.
pub fn operand_count(op: &Op) -> (usize, usize) {
    match op {
        Op::None => (0, 0),
        Op::Add | Op::Sub | Op::Mul | Op::Div => (2, 2),
        Op::Cpy | Op::Concat { .. } | Op::SsmConv | Op::MulMat | Op::GetRows => (2, 2),
        Op::SetRows => (3, 3),
        Op::GatedDeltaNet => (6, 6),
        Op::FlashAttnExt(_) => (3, 4),
        Op::SoftMax { .. } | Op::Glu { .. } => (1, 2),
        Op::Rope(_) => (2, 3),
        Op::Dup
        | Op::Cont
        | Op::Scale { .. }
        | Op::Sqr
        | Op::Sqrt
        | Op::Clamp { .. }
        | Op::Sum
        | Op::SumRows
        | Op::Mean
        | Op::Argmax
        | Op::Repeat { .. }
        | Op::DiagMaskInf { .. }
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::Unary(_)
        | Op::Reshape
        | Op::View
        | Op::Permute { .. }
        | Op::Transpose => (1, 1),
    }
}

/// The layout of `op`'s result on operands of layouts `srcs` (in ggml's order, as
/// [`crate::Tensor::src`]), or the error naming the op and the operand that does not fit.
///
/// Ops that compute give a contiguous layout of the result's type and shape; CPY and SET_ROWS
/// give their destination operand's layout (their result is a view of it); PERMUTE and
/// TRANSPOSE give the reordered layout of their operand. `Ok(None)` for leaves ([`Op::None`]),
/// RESHAPE and VIEW, whose layout is the node's own (see [`reshape_layout`], [`view_layout`]).
pub fn output_layout(op: &Op, srcs: &[&Layout]) -> Result<Option<Layout>> {
    let name = op.name();
    let (min, max) = operand_count(op);
    if srcs.len() < min || srcs.len() > max {
        let want = if min == max { format!("{min}") } else { format!("{min} to {max}") };
        return Err(Error::shape(name, format!("expects {want} operands, got {}", srcs.len())));
    }
    let src = |i: usize| *srcs[i];
    let layout = match op {
        Op::None | Op::Reshape | Op::View => return Ok(None),
        Op::Dup | Op::Cont => {
            let a = src(0);
            dense_rows(name, &a, "src0")?;
            new(a.dtype, &a.ne)?
        }
        Op::Cpy => cpy(&src(0), &src(1))?,
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let (a, b) = (src(0), src(1));
            float(name, &a, "src0")?;
            float(name, &b, "src1")?;
            if !can_repeat(&b.ne, &a.ne) {
                return Err(Error::shape(
                    name,
                    format!("src1 {} cannot be broadcast to src0 {}", fmt_ne(&b.ne), fmt_ne(&a.ne)),
                ));
            }
            new(a.dtype, &a.ne)?
        }
        Op::Clamp { min, max } => {
            if min.is_nan() || max.is_nan() || min > max {
                return Err(Error::param(name, format!("min {min} must not be above max {max}")));
            }
            let a = src(0);
            float(name, &a, "src0")?;
            new(a.dtype, &a.ne)?
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Unary(_) => {
            let a = src(0);
            float(name, &a, "src0")?;
            new(a.dtype, &a.ne)?
        }
        Op::Sum => {
            let a = src(0);
            float(name, &a, "src0")?;
            new(a.dtype, &[1])?
        }
        Op::SumRows | Op::Mean => {
            let a = src(0);
            float(name, &a, "src0")?;
            let dtype = if matches!(op, Op::Mean) { DType::F32 } else { a.dtype };
            new(dtype, &[1, a.ne[1], a.ne[2], a.ne[3]])?
        }
        Op::Argmax => {
            let a = src(0);
            float(name, &a, "src0")?;
            if a.ne[2] != 1 || a.ne[3] != 1 {
                return Err(Error::shape(name, format!("src0 {} is not a matrix", fmt_ne(&a.ne))));
            }
            if a.ne[0] > i32::MAX as usize + 1 {
                return Err(Error::shape(
                    name,
                    format!("src0 rows of {} values do not fit I32 indices", a.ne[0]),
                ));
            }
            new(DType::I32, &[a.ne[1]])?
        }
        Op::Repeat { ne } => {
            let a = src(0);
            float(name, &a, "src0")?;
            let target = normalize_shape(ne)?;
            if !can_repeat(&a.ne, &target) {
                return Err(Error::shape(
                    name,
                    format!("src0 {} cannot be tiled to {}", fmt_ne(&a.ne), fmt_ne(&target)),
                ));
            }
            new(a.dtype, &target)?
        }
        Op::Concat { dim } => concat(&src(0), &src(1), *dim)?,
        Op::SsmConv => ssm_conv(&src(0), &src(1))?,
        Op::GatedDeltaNet => gated_delta_net(srcs)?,
        Op::MulMat => mul_mat(&src(0), &src(1))?,
        Op::GetRows => get_rows(&src(0), &src(1))?,
        Op::SetRows => set_rows(&src(0), &src(1), &src(2))?,
        Op::FlashAttnExt(p) => flash_attn_ext(&src(0), &src(1), &src(2), srcs.get(3).copied(), p)?,
        Op::SoftMax { scale, max_bias } => {
            soft_max(&src(0), srcs.get(1).copied(), *scale, *max_bias)?
        }
        Op::DiagMaskInf { .. } => {
            let a = src(0);
            f32_only(name, &a, "src0")?;
            new(DType::F32, &a.ne)?
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            let a = src(0);
            f32_only(name, &a, "src0")?;
            if !(eps.is_finite() && *eps >= 0.0) {
                return Err(Error::param(name, format!("eps {eps} must be finite, >= 0")));
            }
            new(DType::F32, &a.ne)?
        }
        Op::Rope(p) => rope(&src(0), &src(1), srcs.get(2).copied(), p)?,
        Op::Glu { op, swapped } => glu(*op, *swapped, &src(0), srcs.get(1).copied())?,
        Op::Permute { axes } => permute(&src(0), axes)?,
        Op::Transpose => {
            let a = src(0);
            if a.dtype.is_quantized() {
                return Err(Error::shape(name, "a quantized tensor cannot be transposed"));
            }
            let mut l = a;
            l.ne.swap(0, 1);
            l.nb.swap(0, 1);
            l
        }
    };
    Ok(Some(layout))
}

/// The layout of RESHAPE of `a` to shape `ne`: `a` contiguous, the same element count.
pub fn reshape_layout(a: &Layout, ne: &[usize]) -> Result<Layout> {
    if !a.is_contiguous() {
        return Err(Error::shape("RESHAPE", "src0 is not contiguous (make it CONT first)"));
    }
    let layout = Layout::contiguous(a.dtype, ne)?;
    if layout.nelements() != a.nelements() {
        return Err(Error::shape(
            "RESHAPE",
            format!(
                "src0 {} has {} elements, shape {:?} has {}",
                fmt_ne(&a.ne),
                a.nelements(),
                ne,
                layout.nelements()
            ),
        ));
    }
    Ok(layout)
}

/// The layout of VIEW of `a` with shape `ne`, byte strides `nb` for dims 1..
/// (`nb.len() == ne.len() - 1`) and byte offset `offset`: it must lie within `a`'s
/// `nbytes`, and start on a block for quantized types.
pub fn view_layout(a: &Layout, ne: &[usize], nb: &[usize], offset: usize) -> Result<Layout> {
    const OP: &str = "VIEW";
    let dtype = a.dtype;
    let full = normalize_shape(ne)?;
    if nb.len() + 1 != ne.len() {
        return Err(Error::param(
            OP,
            format!("{} dims need {} strides, got {}", ne.len(), ne.len() - 1, nb.len()),
        ));
    }
    let mut layout = Layout::contiguous(dtype, &full)?;
    for (i, &s) in nb.iter().enumerate() {
        layout.nb[i + 1] = s;
    }
    for i in nb.len() + 1..MAX_DIMS {
        // An overflow here needs a stride above usize::MAX / 2 on a dim of 2 or more: such a
        // view spans more than any tensor, so it is out of bounds (and must not panic).
        layout.nb[i] = layout.nb[i - 1].checked_mul(layout.ne[i - 1]).ok_or_else(|| {
            Error::ViewOutOfBounds {
                op: OP.into(),
                reason: format!("strides {nb:?} of shape {ne:?} overflow"),
            }
        })?;
    }
    let span = (0..MAX_DIMS).try_fold(layout.row_bytes(), |acc: usize, i| {
        let extra = if i == 0 { Some(0) } else { (layout.ne[i] - 1).checked_mul(layout.nb[i]) };
        extra.and_then(|e| acc.checked_add(e))
    });
    match span.and_then(|s| s.checked_add(offset)) {
        Some(end) if end <= a.nbytes() => {}
        _ => {
            return Err(Error::ViewOutOfBounds {
                op: OP.into(),
                reason: format!(
                    "shape {ne:?} strides {nb:?} at offset {offset} exceed the {} bytes of src0 {}",
                    a.nbytes(),
                    fmt_ne(&a.ne)
                ),
            })
        }
    }
    if dtype.is_quantized() && !offset.is_multiple_of(dtype.type_size()) {
        return Err(Error::ViewOutOfBounds {
            op: OP.into(),
            reason: format!("offset {offset} is not at a {dtype} block boundary"),
        });
    }
    Ok(layout)
}

fn new(dtype: DType, ne: &[usize]) -> Result<Layout> {
    Layout::contiguous(dtype, ne)
}

fn float(op: &str, l: &Layout, which: &str) -> Result<()> {
    if !l.dtype.is_float() {
        return Err(Error::dtype(op, l.dtype, format!("{which} must be F32, F16 or BF16")));
    }
    Ok(())
}

fn f32_only(op: &str, l: &Layout, which: &str) -> Result<()> {
    if l.dtype != DType::F32 {
        return Err(Error::dtype(op, l.dtype, format!("{which} must be F32")));
    }
    Ok(())
}

/// Whether `dtype` is one of the quantized KV cache types (llama.cpp's `cache_type_k` /
/// `cache_type_v` beside F16): SET_ROWS writes them and FLASH_ATTN_EXT reads them.
pub fn is_kv_type(dtype: DType) -> bool {
    matches!(dtype, DType::Q8_0 | DType::Q4_0)
}

fn f16_or_f32(op: &str, l: &Layout, which: &str) -> Result<()> {
    if !matches!(l.dtype, DType::F16 | DType::F32) {
        return Err(Error::dtype(op, l.dtype, format!("{which} must be F16 or F32")));
    }
    Ok(())
}

fn dense_rows(op: &str, l: &Layout, which: &str) -> Result<()> {
    if l.dtype.is_quantized() && !l.rows_contiguous() {
        return Err(Error::shape(op, format!("quantized {which} must have contiguous rows")));
    }
    Ok(())
}

fn cpy(a: &Layout, b: &Layout) -> Result<Layout> {
    const OP: &str = "CPY";
    if a.nelements() != b.nelements() {
        return Err(Error::shape(
            OP,
            format!(
                "src0 {} and destination {} have different element counts",
                fmt_ne(&a.ne),
                fmt_ne(&b.ne)
            ),
        ));
    }
    if (a.dtype == DType::I32) != (b.dtype == DType::I32) {
        return Err(Error::dtype(OP, DType::I32, "I32 copies only to I32"));
    }
    dense_rows(OP, a, "src0")?;
    dense_rows(OP, b, "destination")?;
    if b.dtype.is_quantized() && !a.ne[0].is_multiple_of(b.dtype.block_size()) {
        return Err(Error::shape(
            OP,
            format!("src0 rows of {} are not whole {} blocks", a.ne[0], b.dtype),
        ));
    }
    Ok(*b)
}

fn concat(a: &Layout, b: &Layout, dim: usize) -> Result<Layout> {
    const OP: &str = "CONCAT";
    float(OP, a, "src0")?;
    float(OP, b, "src1")?;
    if dim >= MAX_DIMS {
        return Err(Error::param(OP, format!("dim {dim} is not below 4")));
    }
    if a.dtype != b.dtype {
        return Err(Error::dtype(OP, b.dtype, format!("src1 must have src0's type {}", a.dtype)));
    }
    if (0..MAX_DIMS).any(|i| i != dim && a.ne[i] != b.ne[i]) {
        return Err(Error::shape(
            OP,
            format!("src0 {} and src1 {} differ outside dim {dim}", fmt_ne(&a.ne), fmt_ne(&b.ne)),
        ));
    }
    let mut ne = a.ne;
    ne[dim] += b.ne[dim];
    new(a.dtype, &ne)
}

/// ggml's `ggml_ssm_conv`: `sx` `[d_conv - 1 + n_t, d_inner, n_s]`, `c` a matrix
/// `[d_conv, d_inner]`, both F32 (the only type its kernels take); at least one token.
fn ssm_conv(sx: &Layout, c: &Layout) -> Result<Layout> {
    const OP: &str = "SSM_CONV";
    f32_only(OP, sx, "src0 (sx)")?;
    f32_only(OP, c, "src1 (c)")?;
    let (ns, nc) = (sx.ne, c.ne);
    if ns[3] != 1 || nc[2] != 1 || nc[3] != 1 {
        return Err(Error::shape(
            OP,
            format!("src0 {} must be 3-D and src1 {} a matrix", fmt_ne(&ns), fmt_ne(&nc)),
        ));
    }
    if ns[1] != nc[1] || ns[0] < nc[0] {
        return Err(Error::shape(
            OP,
            format!(
                "src0 {} must be [d_conv - 1 + n_t, d_inner, n_s] with n_t >= 1 for src1 {} \
                 [d_conv, d_inner]",
                fmt_ne(&ns),
                fmt_ne(&nc)
            ),
        ));
    }
    new(DType::F32, &[nc[1], ns[0] - nc[0] + 1, ns[2]])
}

/// ggml's `ggml_gated_delta_net` with one state snapshot: `q`, `k` `[S, H_k, n_t, n_s]`, `v`
/// `[S, H, n_t, n_s]` with `H` a multiple of `H_k`, rows of all three contiguous; `g` `[1 or S,
/// H, n_t, n_s]`, `beta` `[1, H, n_t, n_s]` and `state` `[S, S, H, n_s]` contiguous; all F32.
fn gated_delta_net(srcs: &[&Layout]) -> Result<Layout> {
    const OP: &str = "GATED_DELTA_NET";
    const NAMES: [&str; 6] =
        ["src0 (q)", "src1 (k)", "src2 (v)", "src3 (g)", "src4 (beta)", "src5 (state)"];
    for (l, name) in srcs.iter().zip(NAMES) {
        f32_only(OP, l, name)?;
    }
    let (q, k, v, g, beta, state) = (srcs[0], srcs[1], srcs[2], srcs[3], srcs[4], srcs[5]);
    let [s, h, n_t, n_s] = v.ne;
    if q.ne != k.ne || q.ne[0] != s || q.ne[2] != n_t || q.ne[3] != n_s {
        return Err(Error::shape(
            OP,
            format!(
                "src0 {} and src1 {} must both be [S, H_k, n_t, n_s] of src2 (v) {}",
                fmt_ne(&q.ne),
                fmt_ne(&k.ne),
                fmt_ne(&v.ne)
            ),
        ));
    }
    if !h.is_multiple_of(q.ne[1]) {
        return Err(Error::shape(
            OP,
            format!("the {} key heads do not divide the {h} value heads", q.ne[1]),
        ));
    }
    if (g.ne[0] != 1 && g.ne[0] != s) || g.ne[1..] != v.ne[1..] {
        return Err(Error::shape(
            OP,
            format!("src3 (g) {} must be [1 or {s}, {h}, {n_t}, {n_s}]", fmt_ne(&g.ne)),
        ));
    }
    if beta.ne != [1, h, n_t, n_s] {
        return Err(Error::shape(
            OP,
            format!("src4 (beta) {} must be [1, {h}, {n_t}, {n_s}]", fmt_ne(&beta.ne)),
        ));
    }
    if state.ne != [s, s, h, n_s] {
        return Err(Error::shape(
            OP,
            format!("src5 (state) {} must be [{s}, {s}, {h}, {n_s}]", fmt_ne(&state.ne)),
        ));
    }
    for (l, name) in [(q, NAMES[0]), (k, NAMES[1]), (v, NAMES[2])] {
        if l.nb[0] != 4 {
            return Err(Error::shape(OP, format!("{name} rows must be contiguous")));
        }
    }
    for (l, name) in [(g, NAMES[3]), (beta, NAMES[4]), (state, NAMES[5])] {
        if !l.is_contiguous() {
            return Err(Error::shape(OP, format!("{name} must be contiguous")));
        }
    }
    new(DType::F32, &[s * h, n_t * n_s + s * n_s])
}

fn mul_mat(a: &Layout, b: &Layout) -> Result<Layout> {
    const OP: &str = "MUL_MAT";
    if a.dtype == DType::I32 {
        return Err(Error::dtype(OP, DType::I32, "src0 (weights) must not be I32"));
    }
    float(OP, b, "src1 (activations)")?;
    let (na, nb) = (a.ne, b.ne);
    if na[0] != nb[0] || !nb[2].is_multiple_of(na[2]) || !nb[3].is_multiple_of(na[3]) {
        return Err(Error::shape(
            OP,
            format!(
                "src0 {} and src1 {} need equal ne0 and src1's ne2, ne3 multiples of src0's",
                fmt_ne(&na),
                fmt_ne(&nb)
            ),
        ));
    }
    if a.is_transposed() {
        return Err(Error::shape(OP, "src0 must not be transposed (make it CONT)"));
    }
    dense_rows(OP, a, "src0")?;
    new(DType::F32, &[na[1], nb[1], nb[2], nb[3]])
}

fn get_rows(a: &Layout, b: &Layout) -> Result<Layout> {
    const OP: &str = "GET_ROWS";
    if b.dtype != DType::I32 {
        return Err(Error::dtype(OP, b.dtype, "src1 (indices) must be I32"));
    }
    let (na, nb) = (a.ne, b.ne);
    if na[2] != nb[1] || na[3] != nb[2] || nb[3] != 1 {
        return Err(Error::shape(
            OP,
            format!(
                "src0 {} and indices {}: need src0 ne2 == indices ne1, src0 ne3 == indices ne2",
                fmt_ne(&na),
                fmt_ne(&nb)
            ),
        ));
    }
    dense_rows(OP, a, "src0")?;
    let out = if a.dtype == DType::I32 { DType::I32 } else { DType::F32 };
    new(out, &[na[0], nb[0], nb[1], nb[2]])
}

fn set_rows(a: &Layout, b: &Layout, c: &Layout) -> Result<Layout> {
    const OP: &str = "SET_ROWS";
    if !a.dtype.is_float() && !is_kv_type(a.dtype) {
        return Err(Error::dtype(
            OP,
            a.dtype,
            "destination must be F32, F16, BF16, Q8_0 or Q4_0 (the KV cache types)",
        ));
    }
    if b.dtype != DType::F32 {
        return Err(Error::dtype(OP, b.dtype, "src (rows) must be F32"));
    }
    if c.dtype != DType::I32 {
        return Err(Error::dtype(OP, c.dtype, "indices must be I32"));
    }
    if !a.rows_contiguous() {
        return Err(Error::shape(OP, "the destination must have dense rows"));
    }
    let (na, nb, nc) = (a.ne, b.ne, c.ne);
    if na[0] != nb[0]
        || nb[1] != nc[0]
        || na[2] != nb[2]
        || na[3] != nb[3]
        || nc[3] != 1
        || !nb[2].is_multiple_of(nc[1])
        || !nb[3].is_multiple_of(nc[2])
    {
        return Err(Error::shape(
            OP,
            format!(
                "destination {}, rows {} and indices {}: need equal ne0, one index per row \
                 (indices ne0 == rows ne1), equal ne2 and ne3 for destination and rows, and \
                 rows' ne2, ne3 multiples of the indices' ne1, ne2",
                fmt_ne(&na),
                fmt_ne(&nb),
                fmt_ne(&nc)
            ),
        ));
    }
    Ok(*a)
}

fn flash_attn_ext(
    q: &Layout,
    k: &Layout,
    v: &Layout,
    mask: Option<&Layout>,
    params: &AttnParams,
) -> Result<Layout> {
    const OP: &str = "FLASH_ATTN_EXT";
    let AttnParams { scale, max_bias, softcap } = *params;
    f32_only(OP, q, "q")?;
    for (t, which) in [(k, "k"), (v, "v")] {
        if !matches!(t.dtype, DType::F16 | DType::F32) && !is_kv_type(t.dtype) {
            return Err(Error::dtype(
                OP,
                t.dtype,
                format!("{which} must be F16, F32, Q8_0 or Q4_0"),
            ));
        }
        if !t.rows_contiguous() {
            return Err(Error::shape(OP, format!("{which} must have dense rows")));
        }
    }
    if ![scale, max_bias, softcap].iter().all(|f| f.is_finite()) || max_bias < 0.0 {
        return Err(Error::param(
            OP,
            format!(
                "scale {scale}, max_bias {max_bias} and softcap {softcap} must be finite, \
                 max_bias >= 0"
            ),
        ));
    }
    if softcap < 0.0 {
        return Err(Error::param(OP, format!("softcap {softcap} must be >= 0")));
    }
    let (nq, nk, nv) = (q.ne, k.ne, v.ne);
    if nk[0] != nq[0]
        || nv[1] != nk[1]
        || nv[2] != nk[2]
        || nk[3] != nq[3]
        || nv[3] != nq[3]
        || !nq[2].is_multiple_of(nk[2])
    {
        return Err(Error::shape(
            OP,
            format!(
                "q {}, k {} and v {}: need q and k with equal ne0, k and v with equal ne1 \
                 and ne2, equal ne3, and q's heads (ne2) a multiple of k's",
                fmt_ne(&nq),
                fmt_ne(&nk),
                fmt_ne(&nv)
            ),
        ));
    }
    if let Some(m) = mask {
        f16_or_f32(OP, m, "mask")?;
        let nm = m.ne;
        if nm[0] != nk[1] || nm[1] < nq[1] || nm[2] != 1 || nm[3] != 1 {
            return Err(Error::shape(
                OP,
                format!(
                    "mask {} does not fit: need ne0 = n_kv = {} and at least n_q = {} rows",
                    fmt_ne(&nm),
                    nk[1],
                    nq[1]
                ),
            ));
        }
        if !m.rows_contiguous() {
            return Err(Error::shape(OP, "the mask must have dense rows"));
        }
    } else if max_bias > 0.0 {
        return Err(Error::param(OP, "max_bias > 0 needs a mask"));
    }
    new(DType::F32, &[nv[0], nq[2], nq[1], nq[3]])
}

fn soft_max(a: &Layout, mask: Option<&Layout>, scale: f32, max_bias: f32) -> Result<Layout> {
    const OP: &str = "SOFT_MAX";
    f32_only(OP, a, "src0")?;
    if !scale.is_finite() || !max_bias.is_finite() || max_bias < 0.0 {
        return Err(Error::param(
            OP,
            format!("scale {scale} must be finite and max_bias {max_bias} finite and >= 0"),
        ));
    }
    let na = a.ne;
    if let Some(m) = mask {
        if !matches!(m.dtype, DType::F32 | DType::F16) {
            return Err(Error::dtype(OP, m.dtype, "mask must be F32 or F16"));
        }
        let nm = m.ne;
        if nm[0] != na[0]
            || nm[1] < na[1]
            || !na[2].is_multiple_of(nm[2])
            || !na[3].is_multiple_of(nm[3])
        {
            return Err(Error::shape(
                OP,
                format!(
                    "mask {} does not fit src0 {}: need equal ne0, at least as many rows, \
                     and ne2, ne3 dividing src0's",
                    fmt_ne(&nm),
                    fmt_ne(&na)
                ),
            ));
        }
    } else if max_bias > 0.0 {
        return Err(Error::param(OP, "max_bias > 0 needs a mask"));
    }
    new(DType::F32, &na)
}

fn rope(a: &Layout, pos: &Layout, freq_factors: Option<&Layout>, p: &RopeParams) -> Result<Layout> {
    const OP: &str = "ROPE";
    f32_only(OP, a, "src0")?;
    if pos.dtype != DType::I32 {
        return Err(Error::dtype(OP, pos.dtype, "positions must be I32"));
    }
    let (na, np) = (a.ne, pos.ne);
    if np[1..] != [1, 1, 1] || np[0] != na[2] {
        return Err(Error::shape(
            OP,
            format!(
                "positions {} must be a vector of src0's ne2 = {} (src0 {})",
                fmt_ne(&np),
                na[2],
                fmt_ne(&na)
            ),
        ));
    }
    if p.n_dims == 0 || !p.n_dims.is_multiple_of(2) || p.n_dims > na[0] {
        return Err(Error::param(
            OP,
            format!("n_dims {} must be even, > 0 and at most ne0 = {}", p.n_dims, na[0]),
        ));
    }
    if p.mode != ROPE_MODE_NORMAL && p.mode != ROPE_MODE_NEOX {
        return Err(Error::param(OP, format!("mode {} is not 0 (normal) or 2 (NeoX)", p.mode)));
    }
    let floats = [p.freq_base, p.freq_scale, p.ext_factor, p.attn_factor, p.beta_fast, p.beta_slow];
    if floats.iter().any(|f| !f.is_finite()) || p.freq_base <= 0.0 {
        return Err(Error::param(
            OP,
            format!(
                "freq_base {}, freq_scale {}, ext_factor {}, attn_factor {}, beta_fast {} and \
                 beta_slow {} must be finite, freq_base > 0",
                p.freq_base, p.freq_scale, p.ext_factor, p.attn_factor, p.beta_fast, p.beta_slow
            ),
        ));
    }
    if let Some(f) = freq_factors {
        f32_only(OP, f, "frequency factors")?;
        if f.ne[0] < p.n_dims / 2 {
            return Err(Error::shape(
                OP,
                format!(
                    "frequency factors {} need at least n_dims / 2 = {} values",
                    fmt_ne(&f.ne),
                    p.n_dims / 2
                ),
            ));
        }
    }
    new(DType::F32, &na)
}

fn glu(op: GluOp, swapped: bool, a: &Layout, b: Option<&Layout>) -> Result<Layout> {
    let name = op.name();
    if b.is_some() && swapped {
        return Err(Error::param(name, "swapped applies to one source only"));
    }
    float(name, a, "src0")?;
    match b {
        Some(b) => {
            float(name, b, "src1")?;
            if a.ne != b.ne {
                return Err(Error::shape(
                    name,
                    format!("src0 {} and src1 {} differ", fmt_ne(&a.ne), fmt_ne(&b.ne)),
                ));
            }
            new(a.dtype, &a.ne)
        }
        None => {
            let mut ne = a.ne;
            if !ne[0].is_multiple_of(2) {
                return Err(Error::shape(name, format!("src0 ne0 = {} is not even", ne[0])));
            }
            ne[0] /= 2;
            new(a.dtype, &ne)
        }
    }
}

fn permute(a: &Layout, axes: &[usize; MAX_DIMS]) -> Result<Layout> {
    const OP: &str = "PERMUTE";
    let mut seen = [false; MAX_DIMS];
    for &ax in axes {
        if ax >= MAX_DIMS || seen[ax] {
            return Err(Error::param(OP, format!("axes {axes:?} are not a permutation of 0..4")));
        }
        seen[ax] = true;
    }
    if a.dtype.is_quantized() && axes[0] != 0 {
        return Err(Error::shape(OP, "a quantized tensor's dim 0 must stay in place"));
    }
    let mut layout = *a;
    for (i, &ax) in axes.iter().enumerate() {
        layout.ne[ax] = a.ne[i];
        layout.nb[ax] = a.nb[i];
    }
    Ok(layout)
}
