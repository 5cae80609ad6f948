//! Graphs: an arena of tensors addressed by [`TensorId`], built op by op.
//!
//! Every builder method checks its operands the way ggml's constructors assert them, but returns
//! a typed [`Error`] naming the op and the shapes instead of aborting. A tensor can only refer
//! to tensors created before it, so the arena order is a valid forward (topological) order and
//! a graph built here has no cycles.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::{AttnParams, GluOp, Op, RopeParams, UnaryOp, ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use crate::storage::Storage;
use crate::tensor::{normalize_shape, Layout, Tensor, TensorFlags, TensorId, MAX_DIMS};
use std::collections::HashMap;

/// A computation graph: tensors (leaves, views and op results) in forward order.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    tensors: Vec<Tensor>,
    names: HashMap<String, TensorId>,
    outputs: Vec<TensorId>,
    /// The same tensors as `outputs`, for constant-time membership (documents may mark tens
    /// of thousands of outputs).
    output_set: std::collections::HashSet<TensorId>,
}

fn fmt_shape(ne: &[usize; MAX_DIMS]) -> String {
    format!("[{}, {}, {}, {}]", ne[0], ne[1], ne[2], ne[3])
}

/// Whether `small` can be tiled to `big` (each dim of `big` a multiple of `small`'s), as
/// ggml's `ggml_can_repeat`.
pub fn can_repeat(small: &[usize; MAX_DIMS], big: &[usize; MAX_DIMS]) -> bool {
    (0..MAX_DIMS).all(|i| big[i].is_multiple_of(small[i]))
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Number of tensors (leaves, views and nodes).
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the graph has no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Every tensor id, in forward order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.tensors.len()).map(TensorId)
    }

    /// The ids of the tensors that an op computes (not leaves, not views), in forward order.
    pub fn nodes(&self) -> Vec<TensorId> {
        self.ids().filter(|&id| self.tensors[id.0].op.computes()).collect()
    }

    /// The tensor `id`; panics if `id` is not from this graph (use [`Graph::get`] for a
    /// checked lookup).
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.0]
    }

    /// The tensor `id`, or [`Error::InvalidTensorId`].
    pub fn get(&self, id: TensorId) -> Result<&Tensor> {
        self.tensors.get(id.0).ok_or(Error::InvalidTensorId(id.0))
    }

    /// Mutable access to tensor `id`'s metadata that does not change its shape: name, flags
    /// and storage are set through the dedicated methods instead.
    fn get_mut(&mut self, id: TensorId) -> Result<&mut Tensor> {
        self.tensors.get_mut(id.0).ok_or(Error::InvalidTensorId(id.0))
    }

    /// The tensor named `name`.
    pub fn by_name(&self, name: &str) -> Option<TensorId> {
        self.names.get(name).copied()
    }

    /// The tensors marked as outputs, in the order they were marked.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Names tensor `id`; names are unique within a graph.
    pub fn set_name(&mut self, id: TensorId, name: &str) -> Result<()> {
        self.get(id)?;
        if let Some(&other) = self.names.get(name) {
            if other != id {
                return Err(Error::DuplicateName(name.to_string()));
            }
            return Ok(());
        }
        let old = std::mem::replace(&mut self.tensors[id.0].name, name.to_string());
        self.names.remove(&old);
        if !name.is_empty() {
            self.names.insert(name.to_string(), id);
        }
        Ok(())
    }

    /// Marks `id` as an output: its memory is never reused by the allocator.
    pub fn set_output(&mut self, id: TensorId) -> Result<()> {
        self.get_mut(id)?.flags.output = true;
        if self.output_set.insert(id) {
            self.outputs.push(id);
        }
        Ok(())
    }

    /// Marks `id` as an input.
    pub fn set_input(&mut self, id: TensorId) -> Result<()> {
        self.get_mut(id)?.flags.input = true;
        Ok(())
    }

    /// Marks `id` as a weight.
    pub fn set_weight(&mut self, id: TensorId) -> Result<()> {
        self.get_mut(id)?.flags.weight = true;
        Ok(())
    }

    /// Assigns memory to tensor `id` (used by allocators and by callers that own the memory).
    /// The storage must hold at least the tensor's bytes.
    pub fn set_storage(&mut self, id: TensorId, storage: Storage) -> Result<()> {
        let t = self.get(id)?;
        let need = t.nbytes();
        if storage.offset.checked_add(need).is_none_or(|end| end > storage.buffer.size()) {
            return Err(Error::OutOfBounds(format!(
                "tensor {} needs {need} bytes at offset {} of a buffer of {}",
                t.label(id),
                storage.offset,
                storage.buffer.size()
            )));
        }
        storage.buffer.init_tensor(&t.layout, storage.offset)?;
        self.tensors[id.0].storage = Some(storage);
        Ok(())
    }

    /// Removes the memory assignment of every tensor that is not a weight and was not given
    /// memory by the caller, so that the graph can be allocated again.
    pub fn clear_storage(&mut self, keep: impl Fn(&Tensor) -> bool) {
        for t in &mut self.tensors {
            if !keep(t) {
                t.storage = None;
            }
        }
    }

    /// The tensor that owns `id`'s memory (following views) and the byte offset of `id` in it.
    pub fn view_root(&self, id: TensorId) -> (TensorId, usize) {
        let mut cur = id;
        let mut offs = 0;
        while let Some(src) = self.tensors[cur.0].view_src {
            offs += self.tensors[cur.0].view_offs;
            cur = src;
        }
        (cur, offs)
    }

    /// The memory of `id`: its own storage, or its view root's storage shifted by the view
    /// offset.
    pub fn storage_of(&self, id: TensorId) -> Option<Storage> {
        let (root, offs) = self.view_root(id);
        self.tensors[root.0]
            .storage
            .as_ref()
            .map(|s| Storage { buffer: s.buffer.clone(), offset: s.offset + offs })
    }

    fn check(&self, id: TensorId) -> Result<&Tensor> {
        self.get(id)
    }

    /// Refuses `op` writing into `dst` when `dst`'s memory (its view root) is a weight: a
    /// constant must read the same at every compute of a graph kept for the next one.
    fn check_writable(&self, op: &str, dst: TensorId) -> Result<()> {
        self.get(dst)?;
        let root = self.view_root(dst).0;
        let t = &self.tensors[root.0];
        if t.flags.weight {
            return Err(Error::WriteToConstant { op: op.into(), constant: t.label(root) });
        }
        Ok(())
    }

    /// Checks that no node writes into a weight (CPY or SET_ROWS whose destination's memory is
    /// a tensor flagged [`TensorFlags::weight`]): the builders refuse such nodes, and this
    /// catches a flag set afterwards. The error names the node.
    pub fn check_constant_writes(&self) -> Result<()> {
        for (i, t) in self.tensors.iter().enumerate() {
            if let Some(d) = t.op.destination_operand() {
                let dst = t.src.get(d).copied().ok_or(Error::InvalidTensorId(i))?;
                self.check_writable(t.op.name(), dst).map_err(|e| Error::InGraph {
                    kind: "node".into(),
                    name: t.label(TensorId(i)),
                    error: Box::new(e),
                })?;
            }
        }
        Ok(())
    }

    /// Appends a tensor as given (for the scheduler's copies); its sources must exist.
    pub(crate) fn push_raw(&mut self, tensor: Tensor) -> TensorId {
        self.push(tensor)
    }

    /// Replaces operand `i` of tensor `id` (for the scheduler's copies).
    pub(crate) fn replace_src(&mut self, id: TensorId, i: usize, new: TensorId) {
        let old = std::mem::replace(&mut self.tensors[id.0].src[i], new);
        if self.tensors[id.0].view_src == Some(old) {
            self.tensors[id.0].view_src = Some(new);
        }
    }

    fn push(&mut self, tensor: Tensor) -> TensorId {
        let id = TensorId(self.tensors.len());
        self.tensors.push(tensor);
        id
    }

    fn push_node(&mut self, op: Op, layout: Layout, src: Vec<TensorId>) -> TensorId {
        self.push(Tensor {
            layout,
            name: String::new(),
            flags: TensorFlags::default(),
            op,
            src,
            view_src: None,
            view_offs: 0,
            storage: None,
        })
    }

    fn push_view(&mut self, op: Op, layout: Layout, a: TensorId, offset: usize) -> TensorId {
        self.push(Tensor {
            layout,
            name: String::new(),
            flags: TensorFlags::default(),
            op,
            src: vec![a],
            view_src: Some(a),
            view_offs: offset,
            storage: None,
        })
    }

    /// A new leaf tensor of `dtype` and shape `ne` (1 to 4 dims, innermost first).
    pub fn new_tensor(&mut self, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        let layout = Layout::contiguous(dtype, ne)?;
        Ok(self.push_node(Op::None, layout, vec![]))
    }

    /// A named input leaf.
    pub fn input(&mut self, name: &str, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        self.named_leaf(name, dtype, ne, TensorFlags { input: true, ..Default::default() })
    }

    /// A named weight leaf.
    pub fn weight(&mut self, name: &str, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        self.named_leaf(name, dtype, ne, TensorFlags { weight: true, ..Default::default() })
    }

    fn named_leaf(
        &mut self,
        name: &str,
        dtype: DType,
        ne: &[usize],
        flags: TensorFlags,
    ) -> Result<TensorId> {
        if self.names.contains_key(name) {
            return Err(Error::DuplicateName(name.to_string()));
        }
        let id = self.new_tensor(dtype, ne)?;
        self.tensors[id.0].flags = flags;
        self.set_name(id, name)?;
        Ok(id)
    }

    fn float_operand(&self, op: &str, id: TensorId, which: &str) -> Result<&Tensor> {
        let t = self.check(id)?;
        if !t.dtype().is_float() {
            return Err(Error::dtype(op, t.dtype(), format!("{which} must be F32, F16 or BF16")));
        }
        Ok(t)
    }

    fn contiguous_like(&self, dtype: DType, ne: [usize; MAX_DIMS]) -> Result<Layout> {
        Layout::contiguous(dtype, &ne)
    }

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = op.name();
        let ta = self.float_operand(name, a, "src0")?;
        let tb = self.float_operand(name, b, "src1")?;
        if !can_repeat(&tb.ne(), &ta.ne()) {
            return Err(Error::shape(
                name,
                format!(
                    "src1 {} cannot be broadcast to src0 {}",
                    fmt_shape(&tb.ne()),
                    fmt_shape(&ta.ne())
                ),
            ));
        }
        let layout = self.contiguous_like(ta.dtype(), ta.ne())?;
        Ok(self.push_node(op, layout, vec![a, b]))
    }

    /// `a + b`, `b` broadcast to `a`'s shape.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }

    /// `a - b`, `b` broadcast to `a`'s shape.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Sub, a, b)
    }

    /// `a * b` element-wise, `b` broadcast to `a`'s shape.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Mul, a, b)
    }

    /// `a / b` element-wise, `b` broadcast to `a`'s shape.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Div, a, b)
    }

    fn elementwise(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        let ta = self.float_operand(op.name(), a, "src0")?;
        let layout = self.contiguous_like(ta.dtype(), ta.ne())?;
        Ok(self.push_node(op, layout, vec![a]))
    }

    /// `a * scale`.
    pub fn scale(&mut self, a: TensorId, scale: f32) -> Result<TensorId> {
        self.scale_bias(a, scale, 0.0)
    }

    /// `a * scale + bias`.
    pub fn scale_bias(&mut self, a: TensorId, scale: f32, bias: f32) -> Result<TensorId> {
        self.elementwise(Op::Scale { scale, bias }, a)
    }

    /// `a * a`.
    pub fn sqr(&mut self, a: TensorId) -> Result<TensorId> {
        self.elementwise(Op::Sqr, a)
    }

    /// `sqrt(a)`.
    pub fn sqrt(&mut self, a: TensorId) -> Result<TensorId> {
        self.elementwise(Op::Sqrt, a)
    }

    /// `a` clamped to `[min, max]`.
    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> Result<TensorId> {
        if min.is_nan() || max.is_nan() || min > max {
            return Err(Error::param("CLAMP", format!("min {min} must not be above max {max}")));
        }
        self.elementwise(Op::Clamp { min, max }, a)
    }

    /// An element-wise activation.
    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        self.elementwise(Op::Unary(op), a)
    }

    /// `silu(a)`.
    pub fn silu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Silu)
    }

    /// `gelu(a)` (tanh approximation).
    pub fn gelu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Gelu)
    }

    /// `relu(a)`.
    pub fn relu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Relu)
    }

    /// `tanh(a)`.
    pub fn tanh(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Tanh)
    }

    /// Sum of all elements of `a`: a 1-element tensor of `a`'s type.
    pub fn sum(&mut self, a: TensorId) -> Result<TensorId> {
        let ta = self.float_operand("SUM", a, "src0")?;
        let layout = Layout::contiguous(ta.dtype(), &[1])?;
        Ok(self.push_node(Op::Sum, layout, vec![a]))
    }

    /// Sum of each row of `a`: `[1, ne1, ne2, ne3]`.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        let ta = self.float_operand("SUM_ROWS", a, "src0")?;
        let ne = ta.ne();
        let layout = Layout::contiguous(ta.dtype(), &[1, ne[1], ne[2], ne[3]])?;
        Ok(self.push_node(Op::SumRows, layout, vec![a]))
    }

    /// Mean of each row of `a`: F32 `[1, ne1, ne2, ne3]`.
    pub fn mean(&mut self, a: TensorId) -> Result<TensorId> {
        let ta = self.float_operand("MEAN", a, "src0")?;
        let ne = ta.ne();
        let layout = Layout::contiguous(DType::F32, &[1, ne[1], ne[2], ne[3]])?;
        Ok(self.push_node(Op::Mean, layout, vec![a]))
    }

    /// Index of the largest element of each row of the F32 matrix `a`: I32 `[ne1]`.
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        let ta = self.float_operand("ARGMAX", a, "src0")?;
        let ne = ta.ne();
        if ne[2] != 1 || ne[3] != 1 {
            return Err(Error::shape("ARGMAX", format!("src0 {} is not a matrix", fmt_shape(&ne))));
        }
        let layout = Layout::contiguous(DType::I32, &[ne[1]])?;
        Ok(self.push_node(Op::Argmax, layout, vec![a]))
    }

    /// `a` tiled to the shape of `b` (only `b`'s shape is used).
    pub fn repeat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ne = self.check(b)?.ne();
        self.repeat_to(a, &ne)
    }

    /// `a` tiled to shape `ne` (each dim a multiple of `a`'s).
    pub fn repeat_to(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ta = self.float_operand("REPEAT", a, "src0")?;
        let target = normalize_shape(ne)?;
        if !can_repeat(&ta.ne(), &target) {
            return Err(Error::shape(
                "REPEAT",
                format!("src0 {} cannot be tiled to {}", fmt_shape(&ta.ne()), fmt_shape(&target)),
            ));
        }
        let layout = Layout::contiguous(ta.dtype(), &target)?;
        Ok(self.push_node(Op::Repeat, layout, vec![a]))
    }

    /// `a` and `b` joined along `dim`.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let ta = self.float_operand("CONCAT", a, "src0")?;
        let tb = self.float_operand("CONCAT", b, "src1")?;
        if dim >= MAX_DIMS {
            return Err(Error::param("CONCAT", format!("dim {dim} is not below 4")));
        }
        if ta.dtype() != tb.dtype() {
            return Err(Error::dtype(
                "CONCAT",
                tb.dtype(),
                format!("src1 must have src0's type {}", ta.dtype()),
            ));
        }
        let (na, nb) = (ta.ne(), tb.ne());
        if (0..MAX_DIMS).any(|i| i != dim && na[i] != nb[i]) {
            return Err(Error::shape(
                "CONCAT",
                format!(
                    "src0 {} and src1 {} differ outside dim {dim}",
                    fmt_shape(&na),
                    fmt_shape(&nb)
                ),
            ));
        }
        let mut ne = na;
        ne[dim] += nb[dim];
        let layout = Layout::contiguous(ta.dtype(), &ne)?;
        Ok(self.push_node(Op::Concat { dim }, layout, vec![a, b]))
    }

    /// `C[n, m] = sum_k A[m, k] B[n, k]`: `a` weights `[K, M, ne2, ne3]` of any type but I32,
    /// `b` activations (F32, F16 or BF16, as ggml accepts) `[K, N, ne12, ne13]` with `ne12`,
    /// `ne13` multiples of `a`'s; result F32 `[M, N, ne12, ne13]`.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ta = self.check(a)?;
        let tb = self.check(b)?;
        if ta.dtype() == DType::I32 {
            return Err(Error::dtype("MUL_MAT", DType::I32, "src0 (weights) must not be I32"));
        }
        if !tb.dtype().is_float() {
            return Err(Error::dtype(
                "MUL_MAT",
                tb.dtype(),
                "src1 (activations) must be F32, F16 or BF16",
            ));
        }
        let (na, nb) = (ta.ne(), tb.ne());
        if na[0] != nb[0] || nb[2] % na[2] != 0 || nb[3] % na[3] != 0 {
            return Err(Error::shape(
                "MUL_MAT",
                format!(
                    "src0 {} and src1 {} need equal ne0 and src1's ne2, ne3 multiples of src0's",
                    fmt_shape(&na),
                    fmt_shape(&nb)
                ),
            ));
        }
        if ta.layout.is_transposed() {
            return Err(Error::shape("MUL_MAT", "src0 must not be transposed (make it CONT)"));
        }
        if ta.dtype().is_quantized() && !ta.layout.rows_contiguous() {
            return Err(Error::shape("MUL_MAT", "quantized src0 must have contiguous rows"));
        }
        let layout = Layout::contiguous(DType::F32, &[na[1], nb[1], nb[2], nb[3]])?;
        Ok(self.push_node(Op::MulMat, layout, vec![a, b]))
    }

    /// Rows of `a` (`[ne0, rows, ne2, ne3]`, any type) picked by the I32 indices `b`
    /// (`[n, ne2, ne3]`): F32 `[ne0, n, ne2, ne3]` (I32 when `a` is I32).
    pub fn get_rows(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ta = self.check(a)?;
        let tb = self.check(b)?;
        if tb.dtype() != DType::I32 {
            return Err(Error::dtype("GET_ROWS", tb.dtype(), "src1 (indices) must be I32"));
        }
        let (na, nb) = (ta.ne(), tb.ne());
        if na[2] != nb[1] || na[3] != nb[2] || nb[3] != 1 {
            return Err(Error::shape(
                "GET_ROWS",
                format!(
                    "src0 {} and indices {}: need src0 ne2 == indices ne1, src0 ne3 == indices ne2",
                    fmt_shape(&na),
                    fmt_shape(&nb)
                ),
            ));
        }
        if ta.dtype().is_quantized() && !ta.layout.rows_contiguous() {
            return Err(Error::shape("GET_ROWS", "quantized src0 must have contiguous rows"));
        }
        let out = if ta.dtype() == DType::I32 { DType::I32 } else { DType::F32 };
        let layout = Layout::contiguous(out, &[na[0], nb[0], nb[1], nb[2]])?;
        Ok(self.push_node(Op::GetRows, layout, vec![a, b]))
    }

    /// Writes row `i` of `b` (F32 `[ne0, n, ne2, ne3]`) into row `c[i]` of `a` (F32, F16 or
    /// BF16 `[ne0, rows, ne2, ne3]` with dense rows), converting to `a`'s type; `c` holds I32
    /// indices `[n, ne12, ne13]` with `ne2`, `ne3` multiples of `ne12`, `ne13`. The result is
    /// a view of `a` (as CPY's), so later readers of it see the written rows. Indices outside
    /// `0..rows` are an error at compute time.
    pub fn set_rows(&mut self, a: TensorId, b: TensorId, c: TensorId) -> Result<TensorId> {
        self.check_writable("SET_ROWS", a)?;
        let ta = self.float_operand("SET_ROWS", a, "destination")?;
        let tb = self.check(b)?;
        let tc = self.check(c)?;
        if tb.dtype() != DType::F32 {
            return Err(Error::dtype("SET_ROWS", tb.dtype(), "src (rows) must be F32"));
        }
        if tc.dtype() != DType::I32 {
            return Err(Error::dtype("SET_ROWS", tc.dtype(), "indices must be I32"));
        }
        if !ta.layout.rows_contiguous() {
            return Err(Error::shape("SET_ROWS", "the destination must have dense rows"));
        }
        let (na, nb, nc) = (ta.ne(), tb.ne(), tc.ne());
        if na[0] != nb[0]
            || nb[1] != nc[0]
            || na[2] != nb[2]
            || na[3] != nb[3]
            || nc[3] != 1
            || !nb[2].is_multiple_of(nc[1])
            || !nb[3].is_multiple_of(nc[2])
        {
            return Err(Error::shape(
                "SET_ROWS",
                format!(
                    "destination {}, rows {} and indices {}: need equal ne0, one index per row \
                     (indices ne0 == rows ne1), equal ne2 and ne3 for destination and rows, and \
                     rows' ne2, ne3 multiples of the indices' ne1, ne2",
                    fmt_shape(&na),
                    fmt_shape(&nb),
                    fmt_shape(&nc)
                ),
            ));
        }
        let layout = ta.layout;
        Ok(self.push(Tensor {
            layout,
            name: String::new(),
            flags: TensorFlags::default(),
            op: Op::SetRows,
            src: vec![a, b, c],
            view_src: Some(a),
            view_offs: 0,
            storage: None,
        }))
    }

    /// Fused attention, as ggml's `ggml_flash_attn_ext`: `q` F32 `[D, n_q, n_head, ne3]`, `k`
    /// `[D, n_kv, n_head_kv, ne3]` and `v` `[Dv, n_kv, n_head_kv, ne3]` (F16 or F32, any
    /// strides with dense rows), `n_head` a multiple of `n_head_kv`; `mask` (F16 or F32,
    /// `[n_kv, >= n_q, 1, 1]`, dense rows) is added to the scaled (and soft-capped) scores.
    /// Result: F32 `[Dv, n_head, n_q, ne3]` (heads of one query side by side, as ggml).
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        params: AttnParams,
    ) -> Result<TensorId> {
        const OP: &str = "FLASH_ATTN_EXT";
        let AttnParams { scale, max_bias, softcap } = params;
        let tq = self.check(q)?;
        let tk = self.check(k)?;
        let tv = self.check(v)?;
        if tq.dtype() != DType::F32 {
            return Err(Error::dtype(OP, tq.dtype(), "q must be F32"));
        }
        for (t, which) in [(tk, "k"), (tv, "v")] {
            if !matches!(t.dtype(), DType::F16 | DType::F32) {
                return Err(Error::dtype(OP, t.dtype(), format!("{which} must be F16 or F32")));
            }
            if !t.layout.rows_contiguous() {
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
        let (nq, nk, nv) = (tq.ne(), tk.ne(), tv.ne());
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
                    fmt_shape(&nq),
                    fmt_shape(&nk),
                    fmt_shape(&nv)
                ),
            ));
        }
        let mut src = vec![q, k, v];
        if let Some(m) = mask {
            let tm = self.check(m)?;
            if !matches!(tm.dtype(), DType::F16 | DType::F32) {
                return Err(Error::dtype(OP, tm.dtype(), "mask must be F16 or F32"));
            }
            let nm = tm.ne();
            if nm[0] != nk[1] || nm[1] < nq[1] || nm[2] != 1 || nm[3] != 1 {
                return Err(Error::shape(
                    OP,
                    format!(
                        "mask {} does not fit: need ne0 = n_kv = {} and at least n_q = {} rows",
                        fmt_shape(&nm),
                        nk[1],
                        nq[1]
                    ),
                ));
            }
            if !tm.layout.rows_contiguous() {
                return Err(Error::shape(OP, "the mask must have dense rows"));
            }
            src.push(m);
        } else if max_bias > 0.0 {
            return Err(Error::param(OP, "max_bias > 0 needs a mask"));
        }
        let layout = Layout::contiguous(DType::F32, &[nv[0], nq[2], nq[1], nq[3]])?;
        Ok(self.push_node(Op::FlashAttnExt(params), layout, src))
    }

    /// `softmax(a)` along rows.
    pub fn soft_max(&mut self, a: TensorId) -> Result<TensorId> {
        self.soft_max_ext(a, None, 1.0, 0.0)
    }

    /// `softmax(a * scale + mask + alibi)` along rows. `mask` (F32 or F16) has `a`'s `ne0`, at
    /// least `a`'s `ne1` rows and is broadcast over dims 2 and 3; `max_bias > 0` adds ALiBi
    /// slopes per head (dim 2) and requires a mask.
    pub fn soft_max_ext(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        let ta = self.check(a)?;
        if ta.dtype() != DType::F32 {
            return Err(Error::dtype("SOFT_MAX", ta.dtype(), "src0 must be F32"));
        }
        if !scale.is_finite() || !max_bias.is_finite() || max_bias < 0.0 {
            return Err(Error::param(
                "SOFT_MAX",
                format!("scale {scale} must be finite and max_bias {max_bias} finite and >= 0"),
            ));
        }
        let na = ta.ne();
        let mut src = vec![a];
        if let Some(m) = mask {
            let tm = self.check(m)?;
            if !matches!(tm.dtype(), DType::F32 | DType::F16) {
                return Err(Error::dtype("SOFT_MAX", tm.dtype(), "mask must be F32 or F16"));
            }
            let nm = tm.ne();
            if nm[0] != na[0] || nm[1] < na[1] || na[2] % nm[2] != 0 || na[3] % nm[3] != 0 {
                return Err(Error::shape(
                    "SOFT_MAX",
                    format!(
                        "mask {} does not fit src0 {}: need equal ne0, at least as many rows, \
                         and ne2, ne3 dividing src0's",
                        fmt_shape(&nm),
                        fmt_shape(&na)
                    ),
                ));
            }
            src.push(m);
        } else if max_bias > 0.0 {
            return Err(Error::param("SOFT_MAX", "max_bias > 0 needs a mask"));
        }
        let layout = Layout::contiguous(DType::F32, &na)?;
        Ok(self.push_node(Op::SoftMax { scale, max_bias }, layout, src))
    }

    /// Sets `a[i0, i1] = -inf` for `i0 > n_past + i1` (a causal mask).
    pub fn diag_mask_inf(&mut self, a: TensorId, n_past: usize) -> Result<TensorId> {
        let ta = self.check(a)?;
        if ta.dtype() != DType::F32 {
            return Err(Error::dtype("DIAG_MASK_INF", ta.dtype(), "src0 must be F32"));
        }
        let layout = Layout::contiguous(DType::F32, &ta.ne())?;
        Ok(self.push_node(Op::DiagMaskInf { n_past }, layout, vec![a]))
    }

    fn norm_op(&mut self, op: Op, a: TensorId, eps: f32) -> Result<TensorId> {
        let name = op.name();
        let ta = self.check(a)?;
        if ta.dtype() != DType::F32 {
            return Err(Error::dtype(name, ta.dtype(), "src0 must be F32"));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::param(name, format!("eps {eps} must be finite, >= 0")));
        }
        let layout = Layout::contiguous(DType::F32, &ta.ne())?;
        Ok(self.push_node(op, layout, vec![a]))
    }

    /// Each row divided by its root mean square (plus `eps`).
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.norm_op(Op::RmsNorm { eps }, a, eps)
    }

    /// Each row normalized to zero mean and unit variance (plus `eps`).
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.norm_op(Op::Norm { eps }, a, eps)
    }

    /// Rotary position embedding of `a` (`[head_dim, n_head, n_tokens, 1]`, F32) at the I32
    /// positions `pos` (`[n_tokens]`), with default frequency parameters.
    pub fn rope(
        &mut self,
        a: TensorId,
        pos: TensorId,
        n_dims: usize,
        mode: u32,
    ) -> Result<TensorId> {
        self.rope_ext(a, pos, None, RopeParams { n_dims, mode, ..Default::default() })
    }

    /// Rotary position embedding with every ggml parameter and optional F32 frequency factors
    /// (`[n_dims / 2]`).
    pub fn rope_ext(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        p: RopeParams,
    ) -> Result<TensorId> {
        let ta = self.check(a)?;
        let tp = self.check(pos)?;
        if ta.dtype() != DType::F32 {
            return Err(Error::dtype("ROPE", ta.dtype(), "src0 must be F32"));
        }
        if tp.dtype() != DType::I32 {
            return Err(Error::dtype("ROPE", tp.dtype(), "positions must be I32"));
        }
        let (na, np) = (ta.ne(), tp.ne());
        if np[1..] != [1, 1, 1] || np[0] != na[2] {
            return Err(Error::shape(
                "ROPE",
                format!(
                    "positions {} must be a vector of src0's ne2 = {} (src0 {})",
                    fmt_shape(&np),
                    na[2],
                    fmt_shape(&na)
                ),
            ));
        }
        if p.n_dims == 0 || !p.n_dims.is_multiple_of(2) || p.n_dims > na[0] {
            return Err(Error::param(
                "ROPE",
                format!("n_dims {} must be even, > 0 and at most ne0 = {}", p.n_dims, na[0]),
            ));
        }
        if p.mode != ROPE_MODE_NORMAL && p.mode != ROPE_MODE_NEOX {
            return Err(Error::param(
                "ROPE",
                format!("mode {} is not 0 (normal) or 2 (NeoX)", p.mode),
            ));
        }
        let floats =
            [p.freq_base, p.freq_scale, p.ext_factor, p.attn_factor, p.beta_fast, p.beta_slow];
        if floats.iter().any(|f| !f.is_finite()) || p.freq_base <= 0.0 {
            return Err(Error::param(
                "ROPE",
                format!(
                    "freq_base {}, freq_scale {}, ext_factor {}, attn_factor {}, beta_fast {} and \
                     beta_slow {} must be finite, freq_base > 0",
                    p.freq_base,
                    p.freq_scale,
                    p.ext_factor,
                    p.attn_factor,
                    p.beta_fast,
                    p.beta_slow
                ),
            ));
        }
        let mut src = vec![a, pos];
        if let Some(f) = freq_factors {
            let tf = self.check(f)?;
            if tf.dtype() != DType::F32 {
                return Err(Error::dtype("ROPE", tf.dtype(), "frequency factors must be F32"));
            }
            if tf.ne()[0] < p.n_dims / 2 {
                return Err(Error::shape(
                    "ROPE",
                    format!(
                        "frequency factors {} need at least n_dims / 2 = {} values",
                        fmt_shape(&tf.ne()),
                        p.n_dims / 2
                    ),
                ));
            }
            src.push(f);
        }
        let layout = Layout::contiguous(DType::F32, &na)?;
        Ok(self.push_node(Op::Rope(p), layout, src))
    }

    /// A gated linear unit on the halves of `a`'s rows: `act(x) * g` with `[x, g]` the two
    /// halves (`[g, x]` when `swapped`); result `[ne0 / 2, ne1, ne2, ne3]`.
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> Result<TensorId> {
        let ta = self.float_operand(op.name(), a, "src0")?;
        let mut ne = ta.ne();
        if ne[0] % 2 != 0 {
            return Err(Error::shape(op.name(), format!("src0 ne0 = {} is not even", ne[0])));
        }
        ne[0] /= 2;
        let layout = Layout::contiguous(ta.dtype(), &ne)?;
        Ok(self.push_node(Op::Glu { op, swapped }, layout, vec![a]))
    }

    /// A gated linear unit of two tensors of equal shape: `act(a) * b`.
    pub fn glu_split(&mut self, a: TensorId, b: TensorId, op: GluOp) -> Result<TensorId> {
        let ta = self.float_operand(op.name(), a, "src0")?;
        let tb = self.float_operand(op.name(), b, "src1")?;
        if ta.ne() != tb.ne() {
            return Err(Error::shape(
                op.name(),
                format!("src0 {} and src1 {} differ", fmt_shape(&ta.ne()), fmt_shape(&tb.ne())),
            ));
        }
        let layout = Layout::contiguous(ta.dtype(), &ta.ne())?;
        Ok(self.push_node(Op::Glu { op, swapped: false }, layout, vec![a, b]))
    }

    /// `silu(x) * g` on the halves of `a`'s rows.
    pub fn swiglu(&mut self, a: TensorId) -> Result<TensorId> {
        self.glu(a, GluOp::Swiglu, false)
    }

    /// `gelu(x) * g` on the halves of `a`'s rows.
    pub fn geglu(&mut self, a: TensorId) -> Result<TensorId> {
        self.glu(a, GluOp::Geglu, false)
    }

    /// A contiguous copy of `a`.
    pub fn dup(&mut self, a: TensorId) -> Result<TensorId> {
        self.copy_op(Op::Dup, a)
    }

    /// A contiguous copy of a possibly strided `a`.
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        self.copy_op(Op::Cont, a)
    }

    fn copy_op(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        let ta = self.check(a)?;
        if ta.dtype().is_quantized() && !ta.layout.rows_contiguous() {
            return Err(Error::shape(op.name(), "quantized src0 must have contiguous rows"));
        }
        let layout = Layout::contiguous(ta.dtype(), &ta.ne())?;
        Ok(self.push_node(op, layout, vec![a]))
    }

    /// Converts `a` into the memory of `b` (same number of elements, any types but I32 to
    /// or from another type); the result is a view of `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.check_writable("CPY", b)?;
        let ta = self.check(a)?;
        let tb = self.check(b)?;
        if ta.nelements() != tb.nelements() {
            return Err(Error::shape(
                "CPY",
                format!(
                    "src0 {} and destination {} have different element counts",
                    fmt_shape(&ta.ne()),
                    fmt_shape(&tb.ne())
                ),
            ));
        }
        if (ta.dtype() == DType::I32) != (tb.dtype() == DType::I32) {
            return Err(Error::dtype("CPY", DType::I32, "I32 copies only to I32"));
        }
        for (t, which) in [(ta, "src0"), (tb, "destination")] {
            if t.dtype().is_quantized() && !t.layout.rows_contiguous() {
                return Err(Error::shape("CPY", format!("quantized {which} must have dense rows")));
            }
        }
        if tb.dtype().is_quantized() && ta.ne()[0] % tb.dtype().block_size() != 0 {
            return Err(Error::shape(
                "CPY",
                format!("src0 rows of {} are not whole {} blocks", ta.ne()[0], tb.dtype()),
            ));
        }
        let layout = tb.layout;
        let id = self.push(Tensor {
            layout,
            name: String::new(),
            flags: TensorFlags::default(),
            op: Op::Cpy,
            src: vec![a, b],
            view_src: Some(b),
            view_offs: 0,
            storage: None,
        });
        Ok(id)
    }

    /// A view of the contiguous `a` with shape `ne` (same element count).
    pub fn reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ta = self.check(a)?;
        if !ta.layout.is_contiguous() {
            return Err(Error::shape("RESHAPE", "src0 is not contiguous (make it CONT first)"));
        }
        let layout = Layout::contiguous(ta.dtype(), ne)?;
        if layout.nelements() != ta.nelements() {
            return Err(Error::shape(
                "RESHAPE",
                format!(
                    "src0 {} has {} elements, shape {:?} has {}",
                    fmt_shape(&ta.ne()),
                    ta.nelements(),
                    ne,
                    layout.nelements()
                ),
            ));
        }
        Ok(self.push_view(Op::Reshape, layout, a, 0))
    }

    /// A view of `a` with shape `ne`, byte strides `nb` for dims 1.. (`nb.len() == ne.len() - 1`)
    /// and byte offset `offset`; it must lie within `a`.
    pub fn view(
        &mut self,
        a: TensorId,
        ne: &[usize],
        nb: &[usize],
        offset: usize,
    ) -> Result<TensorId> {
        let ta = self.check(a)?;
        let dtype = ta.dtype();
        let full = normalize_shape(ne)?;
        if nb.len() + 1 != ne.len() {
            return Err(Error::param(
                "VIEW",
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
                    op: "VIEW".into(),
                    reason: format!("strides {nb:?} of shape {ne:?} overflow"),
                }
            })?;
        }
        let span = (0..MAX_DIMS).try_fold(layout.row_bytes(), |acc: usize, i| {
            let extra = if i == 0 { Some(0) } else { (layout.ne[i] - 1).checked_mul(layout.nb[i]) };
            extra.and_then(|e| acc.checked_add(e))
        });
        let end = span.and_then(|s| s.checked_add(offset));
        match end {
            Some(end) if end <= ta.nbytes() => {}
            _ => {
                return Err(Error::ViewOutOfBounds {
                    op: "VIEW".into(),
                    reason: format!(
                    "shape {ne:?} strides {nb:?} at offset {offset} exceed the {} bytes of src0 {}",
                    ta.nbytes(),
                    fmt_shape(&ta.ne())
                ),
                })
            }
        }
        if dtype.is_quantized() && !offset.is_multiple_of(dtype.type_size()) {
            return Err(Error::ViewOutOfBounds {
                op: "VIEW".into(),
                reason: format!("offset {offset} is not at a {dtype} block boundary"),
            });
        }
        Ok(self.push_view(Op::View, layout, a, offset))
    }

    /// A view of `a` with its dims reordered: source dim `i` goes to position `axes[i]`.
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        let ta = self.check(a)?;
        let mut seen = [false; MAX_DIMS];
        for &ax in &axes {
            if ax >= MAX_DIMS || seen[ax] {
                return Err(Error::param(
                    "PERMUTE",
                    format!("axes {axes:?} are not a permutation of 0..4"),
                ));
            }
            seen[ax] = true;
        }
        if ta.dtype().is_quantized() && axes[0] != 0 {
            return Err(Error::shape("PERMUTE", "a quantized tensor's dim 0 must stay in place"));
        }
        let mut layout = ta.layout;
        for (i, &ax) in axes.iter().enumerate() {
            layout.ne[ax] = ta.layout.ne[i];
            layout.nb[ax] = ta.layout.nb[i];
        }
        Ok(self.push_view(Op::Permute { axes }, layout, a, 0))
    }

    /// A view of `a` with dims 0 and 1 swapped.
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let ta = self.check(a)?;
        if ta.dtype().is_quantized() {
            return Err(Error::shape("TRANSPOSE", "a quantized tensor cannot be transposed"));
        }
        let mut layout = ta.layout;
        layout.ne.swap(0, 1);
        layout.nb.swap(0, 1);
        Ok(self.push_view(Op::Transpose, layout, a, 0))
    }

    /// For every tensor, the index (in forward order) of the last tensor that reads it, or
    /// `None` when nothing does. Views count as reads of their source.
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.tensors.len()];
        for (i, t) in self.tensors.iter().enumerate() {
            for s in &t.src {
                last[s.0] = Some(i);
            }
        }
        last
    }
}
