//! RMS_NORM (`shaders/rms_norm.wgsl`): one workgroup per row.

use super::{grid, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Op, Result, TensorId};

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let Op::RmsNorm { eps } = t.op else {
        return Err(ctx.error("not RMS_NORM"));
    };
    let a = operand(ctx, graph, t.src[0])?;
    let d = operand(ctx, graph, id)?;
    let mut params = Params::default();
    params.desc(&a).desc(&d).f32(eps);
    let rows = t.layout.nrows();
    Ok(Dispatch {
        kernel: Kernel::RmsNorm,
        operands: vec![a, d],
        params,
        groups: grid(ctx, rows)?,
        checks: false,
    })
}
