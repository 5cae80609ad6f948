//! The GPU backend: computes graph nodes with the WGSL kernels, one compute pass per node,
//! submitting in batches and waiting for the device at the end.

use crate::context::Context;
use crate::device::GpuDevice;
use crate::kernels::{self, Dispatch};
use std::any::Any;
use std::sync::Arc;
use tessera_core::backend::{AbortCallback, Backend, Device, GraphPlan};
use tessera_core::{Error, Graph, Result, TensorId};

/// Nodes encoded into one command buffer before it is submitted (and the abort callback is
/// polled again).
const NODES_PER_SUBMIT: usize = 64;

/// A stream of work on a [`GpuDevice`].
pub struct GpuBackend {
    device: GpuDevice,
    abort: Option<AbortCallback>,
}

/// A plan of the GPU backend: the nodes to compute, in order.
struct GpuPlan {
    nodes: Vec<TensorId>,
}

impl GraphPlan for GpuPlan {
    fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl GpuBackend {
    /// A backend on `device`.
    pub fn new(device: GpuDevice) -> GpuBackend {
        GpuBackend { device, abort: None }
    }

    fn ctx(&self) -> &Arc<Context> {
        self.device.context()
    }

    fn aborted(&self) -> bool {
        self.abort.as_ref().is_some_and(|f| f())
    }

    fn submit(&self, dispatches: &[Dispatch]) -> Result<()> {
        if dispatches.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx();
        ctx.guarded(
            || ctx.error("out of memory while encoding compute"),
            || {
                let cmd = kernels::encode(ctx, dispatches)?;
                ctx.queue.submit([cmd]);
                Ok(())
            },
        )
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        self.device.name()
    }

    fn device(&self) -> Arc<dyn Device> {
        Arc::new(self.device.clone())
    }

    fn synchronize(&mut self) -> Result<()> {
        self.ctx().wait()
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
            graph.get(id)?;
        }
        Ok(Box::new(GpuPlan { nodes: nodes.to_vec() }))
    }

    fn graph_plan_compute(&mut self, graph: &Graph, plan: &dyn GraphPlan) -> Result<()> {
        let plan = plan.as_any().downcast_ref::<GpuPlan>().ok_or_else(|| {
            Error::InvalidArgument("the plan was not made by a GPU backend".into())
        })?;
        self.compute_nodes(graph, &plan.nodes)
    }

    /// Checks every node first (supported op, operands in this device's memory), then encodes
    /// and submits them in order and waits for the result.
    fn compute_nodes(&mut self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        self.ctx().check()?;
        for &id in nodes {
            if !self.device.supports_op(graph, id) {
                let t = graph.get(id)?;
                let types: Vec<String> =
                    t.src.iter().map(|&s| graph.tensor(s).dtype().to_string()).collect();
                return Err(Error::UnsupportedOp {
                    device: self.device.name(),
                    op: format!(
                        "{} {} ({} -> {})",
                        t.op.name(),
                        t.label(id),
                        types.join(", "),
                        t.dtype()
                    ),
                });
            }
        }
        for chunk in nodes.chunks(NODES_PER_SUBMIT) {
            if self.aborted() {
                self.ctx().wait()?;
                return Err(Error::Aborted);
            }
            let mut dispatches = Vec::with_capacity(chunk.len());
            for &id in chunk {
                if let Some(d) = kernels::plan(self.ctx(), graph, id)? {
                    dispatches.push(d);
                }
            }
            self.submit(&dispatches)?;
        }
        self.ctx().wait()
    }
}
