//! The scalar reference implementation of every op.
//!
//! Single-threaded, plain and meant to be obviously right: every SIMD kernel and every other
//! device is compared with it. Semantics are ggml's (see [`tessera_core::Op`]); values are
//! widened to f32 (dequantized for block types) and accumulations are done in f64. Any input may
//! be strided (views, permutes, transposes): every access goes through the layout's strides.
//!
//! Where ggml's behaviour is a corner case, the choice made here is documented on the op's
//! function: SOFT_MAX of a fully masked row is NaN (as ggml), ARGMAX returns the last index of
//! tied maxima (as ggml), CLAMP keeps NaN, SILU / GELU of `-inf` are `-0`.
//!
//! Modules: `access` (the only raw-memory code), `check` (operand checks), then one module per
//! family of ops.

mod access;
mod attention;
mod check;
mod conv;
mod copy;
mod delta_net;
mod elementwise;
mod matmul;
mod norm;
mod reduce;
mod rope;
mod softmax;

use access::{Mem, Poller};
use tessera_core::{DType, Error, Graph, Layout, Op, Result, TensorId};

/// A tensor in host memory: its layout and the address of its first byte.
#[derive(Clone, Copy, Debug)]
pub struct HostTensor {
    /// Type, shape and byte strides.
    pub layout: Layout,
    /// Address of the first byte (the element at index `[0, 0, 0, 0]`).
    pub ptr: *mut u8,
}

// SAFETY: a `HostTensor` is only an address and a layout; nothing is read or written through it
// except by `compute_op`, which is `unsafe` and whose contract covers access from several
// threads (shared sources read concurrently, disjoint destinations written concurrently).
unsafe impl Send for HostTensor {}
// SAFETY: as for `Send`: sharing the address gives no access by itself.
unsafe impl Sync for HostTensor {}

/// Computes `op` into `dst` from `srcs` (in ggml's operand order, as in
/// [`tessera_core::Tensor::src`]).
///
/// The operands are checked against the op first (count, types, shapes, as the graph builder
/// checks them), so layouts that do not fit give a typed error, never an out-of-bounds access.
/// View ops and [`Op::None`] compute nothing. `abort` is polled every few tens of thousands of
/// elements of work (about a millisecond of scalar work at most); when it returns true the
/// computation stops with [`Error::Aborted`], leaving `dst` partly written.
///
/// # Safety
///
/// Every pointer must be valid for reads (sources) and writes (`dst`) of its layout's
/// `nbytes()` bytes for the whole call. During the call nobody else may write any of that memory,
/// nor read or write the bytes of `dst`'s elements; other threads may read the sources at the
/// same time, and may run `compute_op` into other, disjoint parts of a larger destination (as a
/// threaded backend does when it splits a matmul). `dst` may be the very same memory with the
/// same layout as `srcs[0]` (in-place) for ops where [`Op::can_run_in_place`]; for CPY, `dst` is
/// the destination tensor's memory (`srcs[1]` is that same tensor). Other overlaps between `dst`
/// and a source give unspecified (but memory-safe) results.
pub unsafe fn compute_op(
    op: &Op,
    dst: HostTensor,
    srcs: &[HostTensor],
    abort: &dyn Fn() -> bool,
) -> Result<()> {
    let src_layouts: Vec<&Layout> = srcs.iter().map(|s| &s.layout).collect();
    check::validate(op, &dst.layout, &src_layouts)?;
    if !op.computes() {
        return Ok(());
    }
    // SAFETY: the caller guarantees that every pointer is valid for its layout's bytes for the
    // duration of this call and that nobody else writes that memory (or touches dst) meanwhile.
    let (dst, srcs): (Mem, Vec<Mem>) =
        unsafe { (Mem::new(dst), srcs.iter().map(|&s| Mem::new(s)).collect()) };
    run(op, &dst, &srcs, &mut Poller::new(abort))
}

/// Dispatches a validated op.
fn run(op: &Op, dst: &Mem, srcs: &[Mem], p: &mut Poller) -> Result<()> {
    let a = &srcs[0];
    match op {
        Op::None | Op::Reshape | Op::View | Op::Permute { .. } | Op::Transpose => Ok(()),
        Op::Dup | Op::Cont | Op::Cpy => copy::copy(dst, a, p),
        Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::binary(op, dst, a, &srcs[1], p),
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Clamp { .. } | Op::Unary(_) => {
            elementwise::unary_like(op, dst, a, p)
        }
        Op::Glu { op, swapped } => elementwise::glu(*op, *swapped, dst, a, srcs.get(1), p),
        Op::Sum => reduce::sum(dst, a, p),
        Op::SumRows => reduce::sum_rows(dst, a, false, p),
        Op::Mean => reduce::sum_rows(dst, a, true, p),
        Op::Argmax => reduce::argmax(dst, a, p),
        Op::Repeat { .. } => copy::repeat(dst, a, p),
        Op::Concat { dim } => copy::concat(dst, a, &srcs[1], *dim, p),
        Op::SsmConv => conv::ssm_conv(dst, a, &srcs[1], p),
        Op::GatedDeltaNet => delta_net::gated_delta_net(dst, srcs, p),
        Op::GetRows => copy::get_rows(dst, a, &srcs[1], p),
        Op::SetRows => copy::set_rows(dst, &srcs[1], &srcs[2], p),
        Op::FlashAttnExt(params) => {
            attention::flash_attn_ext(dst, a, &srcs[1], &srcs[2], srcs.get(3), params, p)
        }
        Op::MulMat => matmul::mul_mat(dst, a, &srcs[1], p),
        Op::SoftMax { scale, max_bias } => {
            softmax::soft_max(dst, a, srcs.get(1), *scale, *max_bias, p)
        }
        Op::DiagMaskInf { n_past } => softmax::diag_mask_inf(dst, a, *n_past, p),
        Op::RmsNorm { eps } => norm::norm(dst, a, *eps, true, p),
        Op::Norm { eps } => norm::norm(dst, a, *eps, false, p),
        Op::Rope(params) => rope::rope(dst, a, &srcs[1], srcs.get(2), params, p),
    }
}

/// The memory of tensor `id` as a [`HostTensor`]: its storage's host address plus offset.
///
/// Errors: [`Error::NotAllocated`] without storage, [`Error::Backend`] when the buffer is not
/// host memory, [`Error::OutOfBounds`] when the tensor does not fit in its buffer. (The
/// reference's graph walk and the backend both resolve tensors here.)
pub(crate) fn host_tensor(graph: &Graph, id: TensorId) -> Result<HostTensor> {
    let t = graph.get(id)?;
    let storage = graph.storage_of(id).ok_or_else(|| Error::NotAllocated(t.label(id)))?;
    let base = storage.buffer.host_ptr().ok_or_else(|| Error::Backend {
        backend: "CPU".into(),
        message: format!(
            "tensor {} is in a {} buffer, which is not host memory",
            t.label(id),
            storage.buffer.name()
        ),
    })?;
    let nbytes = t.nbytes();
    match storage.offset.checked_add(nbytes) {
        Some(end) if end <= storage.buffer.size() => {}
        _ => {
            return Err(Error::OutOfBounds(format!(
                "tensor {} ({nbytes} bytes at offset {}) exceeds its buffer of {} bytes",
                t.label(id),
                storage.offset,
                storage.buffer.size()
            )))
        }
    }
    Ok(HostTensor { layout: t.layout, ptr: base.as_ptr().wrapping_add(storage.offset) })
}

/// Computes every node of `graph` in forward order ([`Graph::nodes`]), resolving each tensor's
/// memory through [`Graph::storage_of`].
///
/// Errors: [`Error::NotAllocated`] for a tensor without memory, [`Error::Backend`] for memory
/// that is not host memory, [`Error::Aborted`] when `abort` returns true (it is also polled
/// before each node), and any error of [`compute_op`].
pub fn compute_graph(graph: &Graph, abort: &dyn Fn() -> bool) -> Result<()> {
    compute_nodes(graph, &graph.nodes(), abort)
}

/// Computes `nodes` of `graph` in the given order (leaves and views among them are skipped);
/// see [`compute_graph`].
pub fn compute_nodes(graph: &Graph, nodes: &[TensorId], abort: &dyn Fn() -> bool) -> Result<()> {
    for &id in nodes {
        let t = graph.get(id)?;
        if !t.op.computes() {
            continue;
        }
        if abort() {
            return Err(Error::Aborted);
        }
        let dst = host_tensor(graph, id)?;
        let srcs = t.src.iter().map(|&s| host_tensor(graph, s)).collect::<Result<Vec<_>>>()?;
        // SAFETY: `host_tensor` checked that each tensor lies within its buffer, whose host
        // pointer is valid for `size()` bytes while the buffer exists; the graph, borrowed for
        // the whole call, keeps the buffers alive through its storage. Buffers are used by one
        // party at a time (the `Buffer` contract), so nothing else touches this memory during
        // the call. Aliasing between `dst` and sources (in place, or an odd memory plan) is
        // memory-safe: the reference only moves bytes through raw pointers, never through
        // references to tensor memory.
        unsafe { compute_op(&t.op, dst, &srcs, abort) }?;
    }
    Ok(())
}

/// Whether a block type can be dequantized (`dequantize`) or quantized by
/// `tessera_core::quant`, probed once per type on a zero block (the backend asks for every
/// node it computes).
fn quant_available(dtype: DType, dequantize: bool) -> bool {
    static PROBED: std::sync::OnceLock<Vec<(DType, [bool; 2])>> = std::sync::OnceLock::new();
    let probe = |dtype: DType| {
        if !dtype.is_quantized() {
            return [true, true];
        }
        let mut bytes = vec![0u8; dtype.type_size()];
        let mut values = vec![0f32; dtype.block_size()];
        let de = tessera_core::quant::dequantize_row(dtype, &bytes, &mut values).is_ok();
        let quant = tessera_core::quant::quantize_row(dtype, &values, &mut bytes).is_ok();
        [de, quant]
    };
    let probed = PROBED.get_or_init(|| DType::ALL.iter().map(|&d| (d, probe(d))).collect());
    let can = probed.iter().find(|(d, _)| *d == dtype).map_or_else(|| probe(dtype), |p| p.1);
    can[usize::from(!dequantize)]
}

/// Whether the reference implements the op of tensor `id` with its operand types and shapes
/// (for a device's `supports_op`). Leaves and views are supported (they compute nothing).
pub fn supports(graph: &Graph, id: TensorId) -> bool {
    let Ok(t) = graph.get(id) else { return false };
    let mut srcs = Vec::with_capacity(t.src.len());
    for &s in &t.src {
        match graph.get(s) {
            Ok(st) => srcs.push(&st.layout),
            Err(_) => return false,
        }
    }
    if check::validate(&t.op, &t.layout, &srcs).is_err() {
        return false;
    }
    let (dst, src0) = (t.layout.dtype, srcs.first().map(|l| l.dtype));
    match t.op {
        // Block rows are dequantized when read as values; same-type copies are bitwise.
        Op::Dup | Op::Cont | Op::Cpy => match src0 {
            Some(s) if s == dst => true,
            Some(s) => quant_available(s, true) && quant_available(dst, false),
            None => false,
        },
        Op::MulMat | Op::GetRows => src0.is_some_and(|s| quant_available(s, true)),
        _ => true,
    }
}
