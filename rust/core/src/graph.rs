//! Graphs: an arena of tensors addressed by [`TensorId`], built op by op.
//!
//! Every builder method checks its operands the way ggml's constructors assert them, through
//! the op's rule in [`crate::shape_rules`], and returns a typed [`Error`] naming the op and the
//! shapes instead of aborting. A tensor can only refer
//! to tensors created before it, so the arena order is a valid forward (topological) order and
//! a graph built here has no cycles.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::{AttnParams, GluOp, Op, RopeParams, UnaryOp};
use crate::shape_rules;
use crate::storage::Storage;
use crate::tensor::{normalize_shape, Layout, Tensor, TensorFlags, TensorId};
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

pub use crate::shape_rules::can_repeat;

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

    /// For each tensor (by index): the nodes reading it when every read is a MUL_MAT taking
    /// it directly (not through a view) as its first operand, `None` when another read exists
    /// or none. Such weights are what an extra buffer type may hold in a layout of its own
    /// ([`crate::backend::weight_buffer_type`]).
    pub fn matmul_weight_readers(&self) -> Vec<Option<Vec<TensorId>>> {
        let mut readers: Vec<Option<Vec<TensorId>>> = vec![Some(Vec::new()); self.len()];
        for id in self.ids() {
            let t = self.tensor(id);
            if let Some(v) = t.view_src {
                readers[self.view_root(v).0.index()] = None;
            }
            for (i, &s) in t.src.iter().enumerate() {
                let root = self.view_root(s).0;
                let slot = &mut readers[root.index()];
                if s != root || i != 0 || !matches!(t.op, Op::MulMat) {
                    *slot = None;
                } else if let Some(r) = slot {
                    r.push(id);
                }
            }
        }
        for r in &mut readers {
            if r.as_ref().is_some_and(Vec::is_empty) {
                *r = None;
            }
        }
        readers
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

    /// The layouts of `src`, checking that each id belongs to this graph.
    fn layouts(&self, src: &[TensorId]) -> Result<Vec<Layout>> {
        src.iter().map(|&s| self.get(s).map(|t| t.layout)).collect()
    }

    /// Appends the node of `op` on `src`, its layout from [`shape_rules::output_layout`]:
    /// a view of the destination for CPY and SET_ROWS, of the operand for PERMUTE and
    /// TRANSPOSE, a new tensor otherwise.
    fn node(&mut self, op: Op, src: Vec<TensorId>) -> Result<TensorId> {
        let layouts = self.layouts(&src)?;
        let refs: Vec<&Layout> = layouts.iter().collect();
        let layout = shape_rules::output_layout(&op, &refs)?.ok_or_else(|| {
            Error::InvalidGraph(format!("{} takes its layout from its own parameters", op.name()))
        })?;
        let view_of = match op.destination_operand() {
            Some(d) => Some(src[d]),
            None if op.is_view() => Some(src[0]),
            None => None,
        };
        let id = self.push(Tensor {
            layout,
            name: String::new(),
            flags: TensorFlags::default(),
            op,
            src,
            view_src: view_of,
            view_offs: 0,
            storage: None,
        });
        Ok(id)
    }

    /// `a + b`, `b` broadcast to `a`'s shape.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.node(Op::Add, vec![a, b])
    }

    /// `a - b`, `b` broadcast to `a`'s shape.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.node(Op::Sub, vec![a, b])
    }

    /// `a * b` element-wise, `b` broadcast to `a`'s shape.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.node(Op::Mul, vec![a, b])
    }

    /// `a / b` element-wise, `b` broadcast to `a`'s shape.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.node(Op::Div, vec![a, b])
    }

    /// `a * scale`.
    pub fn scale(&mut self, a: TensorId, scale: f32) -> Result<TensorId> {
        self.scale_bias(a, scale, 0.0)
    }

    /// `a * scale + bias`.
    pub fn scale_bias(&mut self, a: TensorId, scale: f32, bias: f32) -> Result<TensorId> {
        self.node(Op::Scale { scale, bias }, vec![a])
    }

    /// `a * a`.
    pub fn sqr(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Sqr, vec![a])
    }

    /// `sqrt(a)`.
    pub fn sqrt(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Sqrt, vec![a])
    }

    /// `a` clamped to `[min, max]`.
    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> Result<TensorId> {
        self.node(Op::Clamp { min, max }, vec![a])
    }

    /// An element-wise activation.
    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        self.node(Op::Unary(op), vec![a])
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

    /// `sigmoid(a)`.
    pub fn sigmoid(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Sigmoid)
    }

    /// `softplus(a)` (`a` itself above 20).
    pub fn softplus(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Softplus)
    }

    /// Sum of all elements of `a`: a 1-element tensor of `a`'s type.
    pub fn sum(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Sum, vec![a])
    }

    /// Sum of each row of `a`: `[1, ne1, ne2, ne3]`.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::SumRows, vec![a])
    }

    /// Mean of each row of `a`: F32 `[1, ne1, ne2, ne3]`.
    pub fn mean(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Mean, vec![a])
    }

    /// Index of the largest element of each row of the F32 matrix `a`: I32 `[ne1]`.
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Argmax, vec![a])
    }

    /// `a` tiled to the shape of `b` (only `b`'s shape is used).
    pub fn repeat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ne = self.check(b)?.ne();
        self.repeat_to(a, &ne)
    }

    /// `a` tiled to shape `ne` (each dim a multiple of `a`'s).
    pub fn repeat_to(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let ne = match normalize_shape(ne) {
            Ok(ne) => ne,
            Err(e) => {
                // The rule checks the operand before the target shape: with `a`'s own shape
                // as the target only the operand can fail, so its error comes first.
                let la = self.check(a)?.layout;
                shape_rules::output_layout(&Op::Repeat { ne: la.ne }, &[&la])?;
                return Err(e);
            }
        };
        self.node(Op::Repeat { ne }, vec![a])
    }

    /// `a` and `b` joined along `dim`.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        self.node(Op::Concat { dim }, vec![a, b])
    }

    /// The short causal convolution (ggml's `ggml_ssm_conv`): `sx` F32 `[d_conv - 1 + n_t,
    /// d_inner, n_s]` convolved with `c` F32 `[d_conv, d_inner]` per channel; result F32
    /// `[d_inner, n_t, n_s]` (see [`Op::SsmConv`]).
    pub fn ssm_conv(&mut self, sx: TensorId, c: TensorId) -> Result<TensorId> {
        self.node(Op::SsmConv, vec![sx, c])
    }

    /// The gated delta rule (ggml's `ggml_gated_delta_net` with one state snapshot) of `q`, `k`
    /// `[S, H_k, n_t, n_s]`, `v` `[S, H, n_t, n_s]`, the log-decay `g` and `beta` `[1, H, n_t,
    /// n_s]` and the initial `state` `[S, S, H, n_s]`: F32 `[S * H, n_t * n_s + S * n_s]`, the
    /// outputs then the final states (see [`Op::GatedDeltaNet`]).
    pub fn gated_delta_net(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        g: TensorId,
        beta: TensorId,
        state: TensorId,
    ) -> Result<TensorId> {
        self.node(Op::GatedDeltaNet, vec![q, k, v, g, beta, state])
    }

    /// `C[n, m] = sum_k A[m, k] B[n, k]`: `a` weights `[K, M, ne2, ne3]` of any type but I32,
    /// `b` activations (F32, F16 or BF16, as ggml accepts) `[K, N, ne12, ne13]` with `ne12`,
    /// `ne13` multiples of `a`'s; result F32 `[M, N, ne12, ne13]`.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.node(Op::MulMat, vec![a, b])
    }

    /// Rows of `a` (`[ne0, rows, ne2, ne3]`, any type) picked by the I32 indices `b`
    /// (`[n, ne2, ne3]`): F32 `[ne0, n, ne2, ne3]` (I32 when `a` is I32).
    pub fn get_rows(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.node(Op::GetRows, vec![a, b])
    }

    /// Writes row `i` of `b` (F32 `[ne0, n, ne2, ne3]`) into row `c[i]` of `a` (F32, F16 or
    /// BF16 `[ne0, rows, ne2, ne3]` with dense rows), converting to `a`'s type; `c` holds I32
    /// indices `[n, ne12, ne13]` with `ne2`, `ne3` multiples of `ne12`, `ne13`. The result is
    /// a view of `a` (as CPY's), so later readers of it see the written rows. Indices outside
    /// `0..rows` are an error at compute time.
    pub fn set_rows(&mut self, a: TensorId, b: TensorId, c: TensorId) -> Result<TensorId> {
        self.check_writable("SET_ROWS", a)?;
        self.node(Op::SetRows, vec![a, b, c])
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
        let mut src = vec![q, k, v];
        src.extend(mask);
        self.node(Op::FlashAttnExt(params), src)
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
        let mut src = vec![a];
        src.extend(mask);
        self.node(Op::SoftMax { scale, max_bias }, src)
    }

    /// Sets `a[i0, i1] = -inf` for `i0 > n_past + i1` (a causal mask).
    pub fn diag_mask_inf(&mut self, a: TensorId, n_past: usize) -> Result<TensorId> {
        self.node(Op::DiagMaskInf { n_past }, vec![a])
    }

    /// Each row divided by its root mean square (plus `eps`).
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.node(Op::RmsNorm { eps }, vec![a])
    }

    /// Each row normalized to zero mean and unit variance (plus `eps`).
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.node(Op::Norm { eps }, vec![a])
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
        let mut src = vec![a, pos];
        src.extend(freq_factors);
        self.node(Op::Rope(p), src)
    }

    /// A gated linear unit on the halves of `a`'s rows: `act(x) * g` with `[x, g]` the two
    /// halves (`[g, x]` when `swapped`); result `[ne0 / 2, ne1, ne2, ne3]`.
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> Result<TensorId> {
        self.node(Op::Glu { op, swapped }, vec![a])
    }

    /// A gated linear unit of two tensors of equal shape: `act(a) * b`.
    pub fn glu_split(&mut self, a: TensorId, b: TensorId, op: GluOp) -> Result<TensorId> {
        self.node(Op::Glu { op, swapped: false }, vec![a, b])
    }

    /// A gated linear unit of one operand (`glu`) or two (`glu_split`) with its `swapped` flag
    /// as a graph document gives it (with two operands, `swapped` is refused).
    pub fn glu_node(&mut self, op: GluOp, swapped: bool, src: &[TensorId]) -> Result<TensorId> {
        self.node(Op::Glu { op, swapped }, src.to_vec())
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
        self.node(Op::Dup, vec![a])
    }

    /// A contiguous copy of a possibly strided `a`.
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Cont, vec![a])
    }

    /// Converts `a` into the memory of `b` (same number of elements, any types but I32 to
    /// or from another type); the result is a view of `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.check_writable("CPY", b)?;
        self.node(Op::Cpy, vec![a, b])
    }

    /// A view of the contiguous `a` with shape `ne` (same element count).
    pub fn reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let layout = shape_rules::reshape_layout(&self.check(a)?.layout, ne)?;
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
        let layout = shape_rules::view_layout(&self.check(a)?.layout, ne, nb, offset)?;
        Ok(self.push_view(Op::View, layout, a, offset))
    }

    /// A view of `a` with its dims reordered: source dim `i` goes to position `axes[i]`.
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        self.node(Op::Permute { axes }, vec![a])
    }

    /// A view of `a` with dims 0 and 1 swapped.
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        self.node(Op::Transpose, vec![a])
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
