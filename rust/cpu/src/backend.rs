//! The CPU backend: computes graphs on host memory with `n` threads of the process's shared
//! worker pool ([`crate::workers`]).

mod attention;
mod conv;
mod copy;
mod delta_net;
mod fast_ops;
mod plan;
mod rope;
mod rows;

pub use plan::CpuGraphPlan;

use crate::buffer::CPU_NAME;
use crate::device::{default_threads, CpuDevice};
use crate::matmul::{try_chunks, AbortFn, MatMul, TensorRef};
use crate::reference::{self, HostTensor};
use crate::team::Threads;
use crate::workers::Lease;
use plan::{Kernel, Step};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tessera_core::backend::{AbortCallback, Backend, Device, GraphPlan};
use tessera_core::{Error, Graph, Op, Result, TensorId};

/// The largest thread count accepted (far above any phone or desktop).
pub const MAX_THREADS: usize = 512;

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

    /// Computes the steps `range` of `plan` on `threads`, polling `aborted` before each.
    fn run_plan(
        &self,
        threads: &Threads<'_>,
        plan: &CpuGraphPlan,
        range: std::ops::Range<usize>,
        aborted: AbortFn<'_>,
    ) -> Result<()> {
        let steps = tessera_core::backend::plan_range(plan.steps(), range)?;
        for step in steps {
            if aborted() {
                return Err(Error::Aborted);
            }
            self.run_step(threads, plan, step, aborted)?;
        }
        Ok(())
    }

    /// Computes one step of a plan with the kernel the plan chose.
    fn run_step(
        &self,
        threads: &Threads<'_>,
        plan: &CpuGraphPlan,
        step: &Step,
        aborted: AbortFn<'_>,
    ) -> Result<()> {
        let kernel = plan.kernel_now(step)?;
        let (dst, srcs) = plan.operands(step)?;
        // The fast paths below: as for the reference at the end; the plan validated the
        // operands for the op and chose the kernel for them.
        let fast = match kernel {
            Kernel::Refused(i) => return Err(plan.error(i)),
            Kernel::MatMul { kernel, packed, k } => {
                let (a, b) = (srcs[0], srcs[1]);
                let a = TensorRef { layout: a.layout, ptr: a.ptr, packed };
                let b = TensorRef::plain(b.layout, b.ptr);
                // SAFETY: the pointers come from checked storages of their layouts, kept alive
                // by the plan; a matmul's result never shares memory with its operands (it
                // cannot run in place); the plan checked the shapes (`matmul::supports`) and
                // chose the kernel for the weights.
                return unsafe {
                    self.matmul.run_planned(
                        &kernel,
                        threads,
                        (dst.layout, dst.ptr),
                        a,
                        b,
                        k,
                        aborted,
                    )
                };
            }
            Kernel::MatMulRows => return self.mul_mat_rows(threads, dst, srcs, aborted),
            Kernel::Reference(_) => None,
            Kernel::Attention => match &step.op {
                // SAFETY: see above.
                Op::FlashAttnExt(p) => unsafe {
                    attention::flash_attn_ext(p, dst, srcs, threads, aborted)
                },
                _ => None,
            },
            // SAFETY: see above.
            Kernel::GetRows(packed) => unsafe { rows::get_rows(dst, srcs, packed) },
            // SAFETY: see above.
            Kernel::SetRows => unsafe { rows::set_rows(dst, srcs) },
            // SAFETY: see above.
            Kernel::SsmConv => unsafe { conv::ssm_conv(dst, srcs, threads, aborted) },
            // SAFETY: see above.
            Kernel::GatedDeltaNet => unsafe {
                delta_net::gated_delta_net(dst, srcs, threads, aborted)
            },
            // SAFETY: see above.
            Kernel::Copy => unsafe { copy::copy(&step.op, dst, srcs, threads, aborted) },
            // SAFETY: see above.
            Kernel::FastOp => unsafe {
                fast_ops::compute(&step.op, dst, srcs, threads, &self.rope_tables, aborted)
            },
        };
        if let Some(done) = fast {
            if kernel.vectorized() {
                self.vectorized.fetch_add(1, Ordering::Relaxed);
            }
            return done;
        }
        // SAFETY: every pointer comes from a checked storage of its tensor's layout, kept alive
        // by the plan; the allocator only aliases dst and src0 for ops that can run in place.
        unsafe { reference::compute_op(&step.op, dst, srcs, aborted) }
    }

    /// Computes `plan` (made for `graph`) from step `range`, with a crew of the shared workers
    /// held for this call only: its helpers stay with this compute from the first node to the
    /// last.
    fn compute_plan(
        &self,
        graph: &Graph,
        plan: &CpuGraphPlan,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        if !plan.fits(graph) {
            return Err(Error::Backend {
                backend: CPU_NAME.into(),
                message: "the plan was made for another graph".into(),
            });
        }
        let abort = self.abort.clone();
        let aborted = move || abort.as_ref().is_some_and(|f| f());
        self.workers.with_team(|threads| self.run_plan(threads, plan, range, &aborted))?
    }

    /// `plan` as this backend's plan.
    fn own_plan(plan: &dyn GraphPlan) -> Result<&CpuGraphPlan> {
        plan.as_any().downcast_ref::<CpuGraphPlan>().ok_or_else(|| Error::Backend {
            backend: CPU_NAME.into(),
            message: "the plan was made by another backend".into(),
        })
    }

    /// The plan of `nodes` of `graph`, its reference fallbacks logged (at debug level).
    fn logged_plan(graph: &Graph, nodes: &[TensorId]) -> CpuGraphPlan {
        let plan = CpuGraphPlan::new(graph, nodes);
        for f in plan.fallbacks() {
            log::debug!("CPU plan: {} ({}) runs on the reference: {}", f.op, f.label, f.reason);
        }
        plan
    }

    /// MUL_MAT of a weight type without kernels: the reference split over the weight rows
    /// among the pool's threads.
    fn mul_mat_rows(
        &self,
        threads: &Threads<'_>,
        dst: HostTensor,
        srcs: &[HostTensor],
        aborted: AbortFn<'_>,
    ) -> Result<()> {
        let (a, b) = (srcs[0], srcs[1]);
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
        Ok(Box::new(Self::logged_plan(graph, nodes)))
    }

    fn graph_plan_prepare(
        &mut self,
        graph: &Graph,
        nodes: &[TensorId],
    ) -> Result<Option<Box<dyn GraphPlan>>> {
        Ok(Some(Box::new(Self::logged_plan(graph, nodes))))
    }

    fn graph_plan_compute(&mut self, graph: &Graph, plan: &dyn GraphPlan) -> Result<()> {
        let plan = Self::own_plan(plan)?;
        self.compute_plan(graph, plan, 0..plan.steps().len())
    }

    fn graph_plan_compute_range(
        &mut self,
        graph: &Graph,
        plan: &dyn GraphPlan,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        self.compute_plan(graph, Self::own_plan(plan)?, range)
    }

    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        // A plan for this call only (a scheduler keeps its plans, `graph_plan_prepare`).
        let plan = CpuGraphPlan::new(graph, nodes);
        self.compute_plan(graph, &plan, 0..plan.steps().len())
    }
}
