//! The GPU backend: computes graph nodes with the WGSL kernels, one compute pass per node,
//! submitting in batches and waiting for the device at the end.

use crate::buffer::GpuBuffer;
use crate::context::Context;
use crate::device::GpuDevice;
use crate::kernels::{self, Checks, Dispatch, STATUS_WORDS};
use std::any::Any;
use std::sync::Arc;
use tessera_core::backend::{AbortCallback, Backend, Buffer, Device, GraphPlan};
use tessera_core::{Error, Graph, Result, TensorId};

/// Nodes encoded into one command buffer before it is submitted (and the abort callback is
/// polled again).
const NODES_PER_SUBMIT: usize = 64;

/// A stream of work on a [`GpuDevice`].
pub struct GpuBackend {
    device: GpuDevice,
    abort: Option<AbortCallback>,
    /// Where kernels that check their input (GET_ROWS indices) report, made on first use.
    status: Option<GpuBuffer>,
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
        GpuBackend { device, abort: None, status: None }
    }

    fn ctx(&self) -> &Arc<Context> {
        self.device.context()
    }

    fn aborted(&self) -> bool {
        self.abort.as_ref().is_some_and(|f| f())
    }

    /// The status buffer, allocated on first use.
    fn status(&mut self) -> Result<wgpu::Buffer> {
        if self.status.is_none() {
            self.status = Some(GpuBuffer::new(self.ctx().clone(), STATUS_WORDS * 4)?);
        }
        Ok(self.status.as_ref().map(|b| b.raw().clone()).expect("allocated above"))
    }

    /// Fails with the first report of a checking kernel of `nodes` since the status was
    /// cleared.
    fn check_status(&self, graph: &Graph, nodes: &[TensorId]) -> Result<()> {
        let Some(status) = &self.status else { return Ok(()) };
        let mut bytes = [0u8; STATUS_WORDS * 4];
        status.read(0, &mut bytes)?;
        let w: Vec<u32> =
            bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if w[0] == 0 {
            return Ok(());
        }
        let id = *nodes.get(w[1] as usize).ok_or_else(|| {
            self.ctx().error(format!("a kernel reported bad input for unknown node {}", w[1]))
        })?;
        Err(kernels::input_error(graph, id, w[2], [w[3], w[4], w[5]]))
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
        let status = self.status()?;
        let mut cleared = false;
        for (c, chunk) in nodes.chunks(NODES_PER_SUBMIT).enumerate() {
            if self.aborted() {
                self.ctx().wait()?;
                return Err(Error::Aborted);
            }
            let mut dispatches = Vec::with_capacity(chunk.len());
            for (i, &id) in chunk.iter().enumerate() {
                let tag = (c * NODES_PER_SUBMIT + i) as u32;
                let checks = Checks { status: &status, tag };
                for d in kernels::plan(self.ctx(), graph, id, &checks)? {
                    if d.checks && !cleared {
                        // Queued before this chunk's command buffer.
                        if let Some(s) = &self.status {
                            s.fill(0, STATUS_WORDS * 4, 0)?;
                        }
                        cleared = true;
                    }
                    dispatches.push(d);
                }
            }
            self.submit(&dispatches)?;
        }
        self.ctx().wait()?;
        if cleared {
            self.check_status(graph, nodes)?;
        }
        Ok(())
    }
}
