//! The ops of the recurrent layers of LFM2 and Qwen 3.5: CONCAT (`shaders/concat.wgsl`, the
//! convolution state before a batch's inputs), SSM_CONV (`shaders/ssm_conv.wgsl`, the short
//! causal convolution) and GATED_DELTA_NET (`shaders/gated_delta_net.wgsl`, the delta rule).

use super::{grid, grid_256, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Op, Result, TensorId};

/// CONCAT along `dim`: one invocation per result element.
pub(super) fn concat(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let Op::Concat { dim } = t.op else {
        return Err(ctx.error("not CONCAT"));
    };
    let a = operand(ctx, graph, t.src[0])?;
    let b = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let n = t.nelements();
    let mut params = Params::default();
    params.desc(&a).desc(&b).desc(&d).u32(n as u32).u32(dim as u32);
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::Concat,
        operands: vec![a, b, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}

/// SSM_CONV: one invocation per result element.
pub(super) fn ssm_conv(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let sx = operand(ctx, graph, t.src[0])?;
    let c = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let n = t.nelements();
    let mut params = Params::default();
    params.desc(&sx).desc(&c).desc(&d).u32(n as u32);
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::SsmConv,
        operands: vec![sx, c, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}

/// Invocations of one GATED_DELTA_NET workgroup (`shaders/gated_delta_net.wgsl`).
const DELTA_NET_WG: usize = 64;

/// GATED_DELTA_NET: one invocation per column of each state (`S * H * n_s`), carrying it
/// through the tokens.
pub(super) fn gated_delta_net(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let mut operands = Vec::with_capacity(7);
    let mut params = Params::default();
    for &s in &t.src {
        let o = operand(ctx, graph, s)?;
        params.desc(&o);
        operands.push(o);
    }
    let d = operand(ctx, graph, id)?;
    params.desc(&d);
    operands.push(d);
    let v = graph.tensor(t.src[2]).ne();
    let n = v[0] * v[1] * v[3];
    params.u32(n as u32);
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::GatedDeltaNet,
        operands,
        params,
        groups: grid(ctx, n.div_ceil(DELTA_NET_WG))?,
        checks: false,
    })
}
