//! MUL_MAT (`shaders/mul_mat.wgsl`), weights of every type `quant.wgsl` decodes: a
//! matrix-vector kernel (8 weight rows per workgroup) for up to [`MAT_VEC_MAX_N`] activation
//! rows, else the tiled kernel (32 x 32 results per workgroup, both tiles decoded into
//! workgroup memory). Weights larger than one binding (a large vocabulary's output matrix)
//! are computed in ranges of rows, one dispatch each.

use super::{grid, max_binding, operand, operand_rows, row_chunks, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Result, TensorId};

/// Rows and columns of the result computed by one workgroup.
pub const TILE: usize = 32;

/// Most activation rows (N) computed by the matrix-vector kernel.
pub const MAT_VEC_MAX_N: usize = 8;

/// Weight rows per workgroup of the matrix-vector kernel.
const MAT_VEC_ROWS: usize = 8;

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Vec<Dispatch>> {
    let t = graph.tensor(id);
    let src0 = graph.tensor(t.src[0]);
    let b = operand(ctx, graph, t.src[1])?;
    let nb = graph.tensor(t.src[1]).ne();
    let batches = (nb[2] * nb[3]) as u32;
    let wtype = super::dtype_code(src0.dtype()).unwrap_or(0);
    let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment.max(4));
    let mut out = Vec::new();
    for (m0, m1) in row_chunks(&src0.layout, max_binding(ctx), align) {
        let whole = (m0, m1) == (0, src0.ne()[1]);
        let a = operand_rows(ctx, graph, t.src[0], (!whole).then_some((m0, m1)))?;
        let mut d = operand(ctx, graph, id)?;
        // Result rows m0.. of this range: dst element [m, n] is at m * nb0 + n * nb1.
        d.desc[8] += (m0 * t.nb()[0]) as u32;
        let m = m1 - m0;
        let (kernel, groups) = if nb[1] <= MAT_VEC_MAX_N {
            let [x, y, _] = grid(ctx, m.div_ceil(MAT_VEC_ROWS))?;
            (Kernel::MulMatVec, [x, y, batches])
        } else {
            (Kernel::MulMat, [m.div_ceil(TILE) as u32, nb[1].div_ceil(TILE) as u32, batches])
        };
        let mut params = Params::default();
        params.desc(&a).desc(&b).desc(&d);
        out.push(Dispatch {
            wtype,
            kernel,
            operands: vec![a, b.clone(), d],
            params,
            groups,
            checks: false,
        });
    }
    Ok(out)
}
