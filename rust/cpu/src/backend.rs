//! The CPU backend: computes graphs on host memory with `n` threads of the process's shared
//! worker pool ([`crate::workers`]).

mod attention;
mod conv;
mod delta_net;
mod fast_ops;
mod rope;
mod rows;

use crate::buffer::CPU_NAME;
use crate::device::{default_threads, CpuDevice};
use crate::kernels::repack::{PackLayout, Packing, RepackBuffer};
use crate::matmul::{self, try_chunks, AbortFn, MatMul, TensorRef};
use crate::reference::{self, HostTensor};
use crate::team::Threads;
use crate::workers::Lease;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tessera_core::backend::{AbortCallback, Backend, Device, GraphPlan};
use tessera_core::{Error, Graph, Op, Result, TensorId};

/// The largest thread count accepted (far above any phone or desktop).
pub const MAX_THREADS: usize = 512;

/// A plan: the nodes to compute, resolved once.
#[derive(Debug, Clone)]
pub struct CpuGraphPlan {
    nodes: Vec<TensorId>,
}

impl GraphPlan for CpuGraphPlan {
    fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The CPU backend.
pub struct CpuBackend {
    threads: usize,
    workers: Lease,
    abort: Option<AbortCallback>,
    matmul: MatMul,
    rope_tables: rope::RopeTables,
    vectorized: AtomicU64,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuBackend({} threads)", self.threads)
    }
}

/// `n` as a thread count, or the error naming it as given and the range (1 to [`MAX_THREADS`]):
/// the one check of a thread count, which the FFI's options use too.
pub fn check_threads(n: u64) -> Result<usize> {
    match usize::try_from(n) {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(Error::InvalidArgument(format!(
            "thread count {n} must be an integer between 1 and {MAX_THREADS}"
        ))),
    }
}

/// A host pointer that may cross to pool threads.
#[derive(Clone, Copy)]
struct SendTensor(HostTensor);
// SAFETY: the pointed-to memory outlives the parallel section (it is joined before returning),
// and parallel parts write disjoint regions of the destination.
unsafe impl Send for SendTensor {}
// SAFETY: as for `Send`; sources are only read.
unsafe impl Sync for SendTensor {}

impl CpuBackend {
    /// A backend with `threads` workers (`None`: [`default_threads`]).
    pub fn new(threads: Option<usize>) -> Result<CpuBackend> {
        let threads = check_threads(threads.unwrap_or_else(default_threads) as u64)?;
        Ok(CpuBackend {
            threads,
            workers: Lease::new(threads)?,
            abort: None,
            matmul: MatMul::new(),
            rope_tables: rope::RopeTables::default(),
            vectorized: AtomicU64::new(0),
        })
    }

    /// How many nodes this backend computed with the vectorized element-wise rows (the others,
    /// except MUL_MAT, went to the reference).
    pub fn vectorized_nodes(&self) -> u64 {
        self.vectorized.load(Ordering::Relaxed)
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn compute_node(
        &self,
        threads: &Threads<'_>,
        graph: &Graph,
        id: TensorId,
        aborted: AbortFn<'_>,
    ) -> Result<()> {
        let t = graph.get(id)?;
        if !t.op.computes() {
            return Ok(());
        }
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
        let weights_packed = Self::check_repacked_readers(graph, id)?;
        let dst = reference::host_tensor(graph, id)?;
        let srcs =
            t.src.iter().map(|&s| reference::host_tensor(graph, s)).collect::<Result<Vec<_>>>()?;
        if matches!(t.op, Op::MulMat) {
            return self.mul_mat(threads, dst, &srcs, weights_packed, aborted);
        }
        // The fast paths: as for the reference below; `supports` validated the operands
        // for the op.
        let fast = match &t.op {
            // SAFETY: see above.
            Op::FlashAttnExt(p) => unsafe {
                attention::flash_attn_ext(p, dst, &srcs, threads, aborted)
            },
            // SAFETY: see above.
            Op::GetRows => unsafe { rows::get_rows(dst, &srcs, weights_packed) },
            // SAFETY: see above.
            Op::SetRows => unsafe { rows::set_rows(dst, &srcs) },
            // SAFETY: see above.
            Op::SsmConv => unsafe { conv::ssm_conv(dst, &srcs, threads, aborted) },
            // SAFETY: see above.
            Op::GatedDeltaNet => unsafe {
                delta_net::gated_delta_net(dst, &srcs, threads, aborted)
            },
            _ => None,
        };
        if let Some(done) = fast {
            self.vectorized.fetch_add(1, Ordering::Relaxed);
            return done;
        }
        let tables = &self.rope_tables;
        // SAFETY: as for the reference below; `supports` validated the operands for the op.
        let fast = unsafe { fast_ops::compute(&t.op, dst, &srcs, threads, tables, aborted) };
        if let Some(done) = fast {
            self.vectorized.fetch_add(1, Ordering::Relaxed);
            return done;
        }
        // SAFETY: every pointer comes from a checked storage of its tensor's layout; the
        // allocator only aliases dst and src0 for ops that can run in place.
        unsafe { reference::compute_op(&t.op, dst, &srcs, aborted) }
    }

    /// Refuses a node that would read repacked weights other than as MUL_MAT's weights with a
    /// kernel for them or as GET_ROWS's table (their bytes are not GGUF's); returns the layout
    /// of a MUL_MAT's repacked weights or a GET_ROWS's repacked table, as the buffer holding
    /// them records it.
    fn check_repacked_readers(graph: &Graph, id: TensorId) -> Result<Option<PackLayout>> {
        let t = graph.tensor(id);
        let mut weights_packed = None;
        for (i, &s) in t.src.iter().enumerate() {
            let Some(storage) = graph.storage_of(s) else { continue };
            let Some(rb) = storage.buffer.as_any().downcast_ref::<RepackBuffer>() else {
                continue;
            };
            let st = graph.tensor(s);
            // MUL_MAT's weights, and GET_ROWS's table (a tied output's embeddings, stored
            // once, repacked for the output product).
            let matmul_weight = i == 0 && matches!(t.op, Op::MulMat | Op::GetRows);
            let ok = match rb.packing(storage.offset, st.nbytes()) {
                Packing::Plain => true,
                Packing::Packed(dtype, pl) if matmul_weight && dtype == st.dtype() => {
                    weights_packed = Some(pl);
                    true
                }
                _ => false,
            };
            if !ok {
                return Err(Error::Backend {
                    backend: CPU_NAME.into(),
                    message: format!(
                        "{} ({}) reads {}, a repacked weight, which only MUL_MAT and GET_ROWS can read",
                        t.op.name(),
                        t.label(id),
                        st.label(s)
                    ),
                });
            }
        }
        Ok(weights_packed)
    }

    /// MUL_MAT through the kernel driver of the active tier (of the weights' repacked layout
    /// `packed`, when they are), or, for a weight type without kernels, the reference split over
    /// the weight rows among the pool's threads.
    fn mul_mat(
        &self,
        threads: &Threads<'_>,
        dst: HostTensor,
        srcs: &[HostTensor],
        packed: Option<PackLayout>,
        aborted: AbortFn<'_>,
    ) -> Result<()> {
        let (a, b) = (srcs[0], srcs[1]);
        if matmul::supports(&dst.layout, &a.layout, &b.layout) {
            let a = TensorRef { layout: a.layout, ptr: a.ptr, packed };
            let b = TensorRef::plain(b.layout, b.ptr);
            // SAFETY: the pointers come from checked storages of their layouts, and a matmul's
            // result never shares memory with its operands (it cannot run in place).
            return unsafe { self.matmul.run_on(threads, (dst.layout, dst.ptr), a, b, aborted) };
        }
        if packed.is_some() {
            // The reference reads GGUF bytes only.
            return Err(Error::Backend {
                backend: CPU_NAME.into(),
                message: "MUL_MAT of repacked weights needs an F32 result with dense rows and \
                          F32, F16 or BF16 activations"
                    .into(),
            });
        }
        let m = a.layout.ne[1];
        let per = m.div_ceil((threads.n() * 4).min(m).max(1));
        let (d, a, b) = (SendTensor(dst), SendTensor(a), SendTensor(b));
        try_chunks(threads, m.div_ceil(per), aborted, |c| {
            let (start, end) = (c * per, ((c + 1) * per).min(m));
            let mut a_part = a.0;
            a_part.layout.ne[1] = end - start;
            // SAFETY: rows start..end of src0 lie within it.
            a_part.ptr = unsafe { a.0.ptr.add(start * a.0.layout.nb[1]) };
            let mut d_part = d.0;
            d_part.layout.ne[0] = end - start;
            // SAFETY: columns start..end of dst lie within it; parts write disjoint columns.
            d_part.ptr = unsafe { d.0.ptr.add(start * d.0.layout.nb[0]) };
            // SAFETY: the parts are sub-views of valid tensors (see above).
            unsafe { reference::compute_op(&Op::MulMat, d_part, &[a_part, b.0], aborted) }
        })
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        CPU_NAME.to_string()
    }

    fn device(&self) -> Arc<dyn Device> {
        CpuDevice::shared()
    }

    fn set_n_threads(&mut self, n: usize) -> Result<()> {
        let n = check_threads(n as u64)?;
        self.workers.set(n)?;
        self.threads = n;
        Ok(())
    }

    fn set_abort_callback(&mut self, callback: Option<AbortCallback>) {
        self.abort = callback;
    }

    fn graph_plan_create(
        &mut self,
        graph: &Graph,
        nodes: &[TensorId],
    ) -> Result<Box<dyn GraphPlan>> {
        for &id in nodes {
            let t = graph.get(id)?;
            if t.op.computes() && !reference::supports(graph, id) {
                return Err(Error::UnsupportedOp {
                    device: CPU_NAME.into(),
                    op: t.op.name().into(),
                });
            }
        }
        let nodes = nodes.iter().copied().filter(|&id| graph.tensor(id).op.computes()).collect();
        Ok(Box::new(CpuGraphPlan { nodes }))
    }

    fn graph_plan_compute(&mut self, graph: &Graph, plan: &dyn GraphPlan) -> Result<()> {
        let plan = plan.as_any().downcast_ref::<CpuGraphPlan>().ok_or_else(|| Error::Backend {
            backend: CPU_NAME.into(),
            message: "the plan was made by another backend".into(),
        })?;
        self.compute_nodes(graph, &plan.nodes)
    }

    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let abort = self.abort.clone();
        let aborted = move || abort.as_ref().is_some_and(|f| f());
        // A crew of the shared workers, held for this call only: its helpers stay with this
        // compute from the first node to the last.
        self.workers.with_team(|threads| {
            for &id in nodes {
                if aborted() {
                    return Err(Error::Aborted);
                }
                self.compute_node(threads, graph, id, &aborted)?;
            }
            Ok(())
        })?
    }
}
