//! GET_ROWS (`shaders/get_rows.wgsl`): rows of F32, F16, Q8_0, Q4_0 (as F32) or I32 picked by
//! I32 indices.

use super::{grid_256, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Result, TensorId};

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let a = operand(ctx, graph, t.src[0])?;
    let b = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let n = t.nelements();
    let mut params = Params::default();
    params.desc(&a).desc(&b).desc(&d).u32(n as u32);
    Ok(Dispatch {
        kernel: Kernel::GetRows,
        operands: vec![a, b, d],
        params,
        groups: grid_256(ctx, n)?,
    })
}
