//! The CPU backend's graph plan: per node, the kernel chosen and its operands resolved (host
//! addresses and strides, repacked weights found once), made once per graph shape; computing
//! runs the list with no shape rule, no allocation and no reference counting per node.
//!
//! Weights in a repacked buffer are the exception: whether their bytes are repacked is decided
//! when they are written, which may be after the plan is made (a graph's weights set after the
//! scheduler allocated it), so a node reading such a buffer looks its operands' packing up again
//! (one map lookup each) when it runs, and chooses its kernel again if it changed.
//!
//! A node the plan cannot compute (an op the reference lacks, a result in read-only memory, a
//! repacked weight read by the wrong op, memory that is not the host's) keeps its error, which
//! the compute returns when it reaches the node, after the nodes before it, as a compute node by
//! node would. Nodes left to the reference are recorded with the reason
//! ([`GraphPlan::fallbacks`]).

use super::{attention, conv, copy, delta_net, fast_ops, rows};
use crate::buffer::CPU_NAME;
use crate::kernels::repack::{PackLayout, Packing, RepackBuffer};
use crate::kernels::MatKernel;
use crate::matmul;
use crate::reference::{self, HostTensor};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_core::backend::{Buffer, GraphPlan, PlanFallback};
use tessera_core::{DType, Error, Graph, Op, Result, TensorId};

/// The kernel a node runs, chosen when the plan is made.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kernel {
    /// MUL_MAT through the matmul driver with this kernel (of weights repacked in `packed`
    /// when set); `k` is the shared dimension.
    MatMul { kernel: MatKernel, packed: Option<PackLayout>, k: usize },
    /// MUL_MAT of a weight type without kernels: the reference, split over the weight rows
    /// among the threads.
    MatMulRows,
    /// FLASH_ATTN_EXT's vectorized kernel.
    Attention,
    /// GET_ROWS on dense rows (of a repacked table in this layout, when set).
    GetRows(Option<PackLayout>),
    /// SET_ROWS on dense rows.
    SetRows,
    /// SSM_CONV's kernel.
    SsmConv,
    /// GATED_DELTA_NET's kernel.
    GatedDeltaNet,
    /// The vectorized element-wise rows (`fast_ops`).
    FastOp,
    /// DUP, CONT, CPY or CONCAT as byte copies (`copy`).
    Copy,
    /// The scalar reference, for this reason.
    Reference(&'static str),
    /// The node cannot be computed: the error at this index of the plan's errors.
    Refused(usize),
}

impl Kernel {
    /// Whether the kernel counts as vectorized ([`super::CpuBackend::vectorized_nodes`]).
    pub(super) fn vectorized(self) -> bool {
        !matches!(
            self,
            Kernel::MatMul { .. } | Kernel::MatMulRows | Kernel::Reference(_) | Kernel::Refused(_)
        )
    }
}

/// One node of a plan: its op, kernel and operands (`operands[first]` is the result, the
/// `n_src` sources follow it).
#[derive(Clone, Debug)]
pub(super) struct Step {
    pub(super) op: Op,
    pub(super) kernel: Kernel,
    /// The repacked layout of the weights (MUL_MAT) or table (GET_ROWS) the kernel was chosen
    /// for.
    pub(super) packed: Option<PackLayout>,
    first: usize,
    n_src: usize,
    /// The step's operands in repacked buffers: `checks[range]` of the plan.
    checks: std::ops::Range<usize>,
}

impl Step {
    /// Whether an operand lives in a repacked buffer (its packing is looked up at each run).
    pub(super) fn reads_repacked(&self) -> bool {
        !self.checks.is_empty()
    }
}

/// An operand of a step that lives in a repacked buffer.
#[derive(Clone, Debug)]
struct RepackCheck {
    /// Its operand index.
    src: usize,
    /// The buffer: an index into the plan's buffers.
    buffer: usize,
    offset: usize,
    len: usize,
    dtype: DType,
    /// The error when its bytes are repacked and the op cannot read them.
    refusal: String,
}

/// A plan of the CPU backend (see the module's documentation). It computes the memory it
/// resolved when it was made (its buffers kept alive), whatever graph it is later computed
/// with: computing it with a graph of another size is refused, and a caller that changes a
/// graph's storage or shapes makes a new plan (the scheduler makes its plans at each
/// `alloc_graph`, from the graphs it keeps unchanged until the next).
#[derive(Debug)]
pub struct CpuGraphPlan {
    nodes: Vec<TensorId>,
    steps: Vec<Step>,
    operands: Vec<HostTensor>,
    errors: Vec<Error>,
    checks: Vec<RepackCheck>,
    fallbacks: Vec<PlanFallback>,
    /// The number of tensors of the graph it was made for (a cheap check that it is computed
    /// with that graph).
    graph_len: usize,
    /// The buffers of every operand, kept alive as long as the plan holds their addresses.
    buffers: Vec<Arc<dyn Buffer>>,
}

// SAFETY: the plan's host addresses point into the buffers it keeps alive (`Buffer` is `Send`
// and `Sync`); it reads or writes nothing itself, and its computes run under `&mut` of the
// backend, as a compute of the graph would.
unsafe impl Send for CpuGraphPlan {}

impl GraphPlan for CpuGraphPlan {
    fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn fallbacks(&self) -> &[PlanFallback] {
        &self.fallbacks
    }
}

impl CpuGraphPlan {
    /// The plan of `nodes` of `graph` (those that compute: leaves and views are left out).
    pub(super) fn new(graph: &Graph, nodes: &[TensorId]) -> CpuGraphPlan {
        let mut plan = CpuGraphPlan {
            nodes: Vec::with_capacity(nodes.len()),
            steps: Vec::with_capacity(nodes.len()),
            operands: Vec::new(),
            errors: Vec::new(),
            checks: Vec::new(),
            fallbacks: Vec::new(),
            graph_len: graph.len(),
            buffers: Vec::new(),
        };
        let mut seen = HashMap::new();
        for &id in nodes {
            let op = match graph.get(id) {
                Ok(t) if !t.op.computes() => continue,
                Ok(t) => t.op.clone(),
                Err(e) => {
                    plan.refuse(id, Op::None, e);
                    continue;
                }
            };
            let first = plan.operands.len();
            let checks_from = plan.checks.len();
            let planned = plan.resolve(graph, id, &mut seen).and_then(|()| {
                let n_src = plan.operands.len() - first - 1;
                let checks = checks_from..plan.checks.len();
                let packed = plan.packing(&op, checks.clone())?;
                let ops = &plan.operands[first..];
                let kernel = choose(&op, ops[0], &ops[1..], packed)?;
                Ok(Step { op: op.clone(), kernel, packed, first, n_src, checks })
            });
            let step = match planned {
                Ok(step) => step,
                Err(e) => {
                    plan.operands.truncate(first);
                    plan.checks.truncate(checks_from);
                    plan.refuse(id, op, e);
                    continue;
                }
            };
            let reason = match step.kernel {
                Kernel::Reference(reason) => Some(reason),
                Kernel::MatMulRows => Some(
                    "MUL_MAT: no matmul kernel for these types or layouts (the reference, split \
                     over the weight rows)",
                ),
                _ => None,
            };
            if let Some(reason) = reason {
                plan.fallbacks.push(PlanFallback {
                    node: id,
                    op: op.name().to_string(),
                    label: graph.tensor(id).label(id),
                    reason: reason.to_string(),
                });
            }
            plan.nodes.push(id);
            plan.steps.push(step);
        }
        plan
    }

    /// Records node `id` as one that fails with `e` when computed.
    fn refuse(&mut self, id: TensorId, op: Op, e: Error) {
        let first = self.operands.len();
        self.errors.push(e);
        let kernel = Kernel::Refused(self.errors.len() - 1);
        self.nodes.push(id);
        let checks = self.checks.len()..self.checks.len();
        self.steps.push(Step { op, kernel, packed: None, first, n_src: 0, checks });
    }

    /// Whether the plan was made for a graph of `graph`'s size.
    pub(super) fn fits(&self, graph: &Graph) -> bool {
        self.graph_len == graph.len()
    }

    /// The steps.
    pub(super) fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The result and sources of `step` (an error for a refused node, which has none).
    pub(super) fn operands(&self, step: &Step) -> Result<(HostTensor, &[HostTensor])> {
        if let Kernel::Refused(i) = step.kernel {
            return Err(self.error(i));
        }
        match self.operands.get(step.first..step.first + 1 + step.n_src) {
            Some([dst, srcs @ ..]) => Ok((*dst, srcs)),
            _ => Err(Error::Backend {
                backend: CPU_NAME.into(),
                message: "a plan's node without its operands".into(),
            }),
        }
    }

    /// The error of a refused node.
    pub(super) fn error(&self, i: usize) -> Error {
        self.errors.get(i).cloned().unwrap_or_else(|| Error::Backend {
            backend: CPU_NAME.into(),
            message: "a plan's node without its error".into(),
        })
    }
}

impl CpuGraphPlan {
    /// Checks node `id` (an op the reference implements with these operands, a writable
    /// result), appends its result's and sources' memory to the operands, its sources in
    /// repacked buffers to the checks, and their buffers (once each, `seen`) to the buffers.
    fn resolve(
        &mut self,
        graph: &Graph,
        id: TensorId,
        seen: &mut HashMap<usize, usize>,
    ) -> Result<()> {
        let t = graph.get(id)?;
        if !reference::supports(graph, id) {
            return Err(Error::UnsupportedOp { device: CPU_NAME.into(), op: t.op.name().into() });
        }
        if graph.storage_of(id).is_some_and(|s| s.buffer.is_read_only()) {
            return Err(Error::ReadOnly(format!(
                "{} ({}) would write into read-only memory (a tensor of a mapped model file)",
                t.op.name(),
                t.label(id)
            )));
        }
        self.operands.push(reference::host_tensor(graph, id)?);
        for &s in &t.src {
            self.operands.push(reference::host_tensor(graph, s)?);
        }
        for (i, &s) in std::iter::once(&id).chain(&t.src).enumerate() {
            let Some(storage) = graph.storage_of(s) else { continue };
            let key = Arc::as_ptr(&storage.buffer).cast::<u8>() as usize;
            let buffer = *seen.entry(key).or_insert_with(|| {
                self.buffers.push(storage.buffer.clone());
                self.buffers.len() - 1
            });
            if i == 0 || !storage.buffer.as_any().is::<RepackBuffer>() {
                continue;
            }
            let st = graph.tensor(s);
            self.checks.push(RepackCheck {
                src: i - 1,
                buffer,
                offset: storage.offset,
                len: st.nbytes(),
                dtype: st.dtype(),
                refusal: format!(
                    "{} ({}) reads {}, a repacked weight, which only MUL_MAT and GET_ROWS can read",
                    t.op.name(),
                    t.label(id),
                    st.label(s)
                ),
            });
        }
        Ok(())
    }

    /// The packing of the sources `checks` (in repacked buffers) of a node of `op`, as their
    /// buffers record it now: the layout of a MUL_MAT's repacked weights or a GET_ROWS's
    /// repacked table; an error for repacked bytes read otherwise (they are not GGUF's).
    pub(super) fn packing(
        &self,
        op: &Op,
        checks: std::ops::Range<usize>,
    ) -> Result<Option<PackLayout>> {
        let mut packed = None;
        for c in self.checks.get(checks).unwrap_or_default() {
            let rb =
                self.buffers.get(c.buffer).and_then(|b| b.as_any().downcast_ref::<RepackBuffer>());
            let Some(rb) = rb else { continue };
            // MUL_MAT's weights, and GET_ROWS's table (a tied output's embeddings, stored
            // once, repacked for the output product).
            let matmul_weight = c.src == 0 && matches!(op, Op::MulMat | Op::GetRows);
            match rb.packing(c.offset, c.len) {
                Packing::Plain => {}
                Packing::Packed(dtype, pl) if matmul_weight && dtype == c.dtype => {
                    packed = Some(pl)
                }
                _ => {
                    return Err(Error::Backend {
                        backend: CPU_NAME.into(),
                        message: c.refusal.clone(),
                    })
                }
            }
        }
        Ok(packed)
    }

    /// The kernel of `step` now: the planned one, unless the packing of its operands in
    /// repacked buffers changed since (then chosen again, or the error of an operand that no
    /// longer can be read).
    pub(super) fn kernel_now(&self, step: &Step) -> Result<Kernel> {
        if !step.reads_repacked() {
            return Ok(step.kernel);
        }
        let packed = self.packing(&step.op, step.checks.clone())?;
        if packed == step.packed {
            return Ok(step.kernel);
        }
        let (dst, srcs) = self.operands(step)?;
        choose(&step.op, dst, srcs, packed)
    }
}

/// The kernel of `op` with these operands.
fn choose(
    op: &Op,
    dst: HostTensor,
    srcs: &[HostTensor],
    packed: Option<PackLayout>,
) -> Result<Kernel> {
    let fast = |refusal: Option<&'static str>, k: Kernel| match refusal {
        None => k,
        Some(reason) => Kernel::Reference(reason),
    };
    Ok(match op {
        Op::MulMat => {
            let (a, b) = (&srcs[0], &srcs[1]);
            if matmul::supports(&dst.layout, &a.layout, &b.layout) {
                let kernel = matmul::kernel_for(a.layout.dtype, packed)?;
                Kernel::MatMul { kernel, packed, k: a.layout.ne[0] }
            } else if packed.is_some() {
                // The reference reads GGUF bytes only.
                return Err(Error::Backend {
                    backend: CPU_NAME.into(),
                    message: "MUL_MAT of repacked weights needs an F32 result with dense rows \
                              and F32, F16 or BF16 activations"
                        .into(),
                });
            } else {
                Kernel::MatMulRows
            }
        }
        Op::FlashAttnExt(_) => {
            fast(attention::flash_attn_ext_refusal(&dst, srcs), Kernel::Attention)
        }
        Op::GetRows => fast(rows::get_rows_refusal(&dst, srcs, packed), Kernel::GetRows(packed)),
        Op::SetRows => fast(rows::set_rows_refusal(&dst, srcs), Kernel::SetRows),
        Op::SsmConv => fast(conv::ssm_conv_refusal(&dst, srcs), Kernel::SsmConv),
        Op::GatedDeltaNet => {
            fast(delta_net::gated_delta_net_refusal(&dst, srcs), Kernel::GatedDeltaNet)
        }
        Op::Dup | Op::Cont | Op::Cpy | Op::Concat { .. } => {
            fast(copy::copy_refusal(op, &dst, srcs), Kernel::Copy)
        }
        _ => fast(fast_ops::refusal(op, &dst, srcs), Kernel::FastOp),
    })
}
