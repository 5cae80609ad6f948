//! RMS_NORM and NORM (`shaders/rms_norm.wgsl`): one workgroup per row.

use super::{grid, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Op, Result, TensorId};

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let (eps, center) = match t.op {
        Op::RmsNorm { eps } => (eps, false),
        Op::Norm { eps } => (eps, true),
        _ => return Err(ctx.error("not RMS_NORM or NORM")),
    };
    let a = operand(ctx, graph, t.src[0])?;
    let d = operand(ctx, graph, id)?;
    let mut params = Params::default();
    params.desc(&a).desc(&d).f32(eps).u32(center as u32);
    let rows = t.layout.nrows();
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::RmsNorm,
        operands: vec![a, d],
        params,
        groups: grid(ctx, rows)?,
        checks: false,
    })
}
