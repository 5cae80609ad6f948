//! MUL_MAT (`shaders/mul_mat.wgsl`), weights F32, F16, Q8_0 or Q4_0: a matrix-vector kernel
//! (one workgroup per weight row) for up to [`MAT_VEC_MAX_N`] activation rows, else the tiled
//! kernel (32 x 32 results per workgroup, both tiles decoded into workgroup memory).

use super::{grid, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Result, TensorId};

/// Rows and columns of the result computed by one workgroup.
pub const TILE: usize = 32;

/// Most activation rows (N) computed by the matrix-vector kernel.
pub const MAT_VEC_MAX_N: usize = 8;

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let a = operand(ctx, graph, t.src[0])?;
    let b = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let na = graph.tensor(t.src[0]).ne();
    let nb = graph.tensor(t.src[1]).ne();
    let batches = (nb[2] * nb[3]) as u32;
    let (kernel, groups) = if nb[1] <= MAT_VEC_MAX_N {
        let [x, y, _] = grid(ctx, na[1])?;
        (Kernel::MulMatVec, [x, y, batches])
    } else {
        (Kernel::MulMat, [na[1].div_ceil(TILE) as u32, nb[1].div_ceil(TILE) as u32, batches])
    };
    let mut params = Params::default();
    params.desc(&a).desc(&b).desc(&d);
    Ok(Dispatch { kernel, operands: vec![a, b, d], params, groups, checks: false })
}
