//! MUL_MAT (`shaders/mul_mat.wgsl`): tiled, 32 x 32 results per workgroup, weights F32, F16,
//! Q8_0 or Q4_0 decoded into workgroup memory.

use super::{operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Result, TensorId};

/// Rows and columns of the result computed by one workgroup.
pub const TILE: usize = 32;

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let a = operand(ctx, graph, t.src[0])?;
    let b = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let na = graph.tensor(t.src[0]).ne();
    let nb = graph.tensor(t.src[1]).ne();
    let groups = [na[1].div_ceil(TILE) as u32, nb[1].div_ceil(TILE) as u32, (nb[2] * nb[3]) as u32];
    let mut params = Params::default();
    params.desc(&a).desc(&b).desc(&d);
    Ok(Dispatch { kernel: Kernel::MulMat, operands: vec![a, b, d], params, groups })
}
