//! SOFT_MAX (`shaders/soft_max.wgsl`): one workgroup per row, optional mask, ALiBi.

use super::{grid, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Op, Result, TensorId};

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let Op::SoftMax { scale, max_bias } = t.op else {
        return Err(ctx.error("not SOFT_MAX"));
    };
    let a = operand(ctx, graph, t.src[0])?;
    let has_mask = t.src.len() > 1;
    let m = operand(ctx, graph, *t.src.get(1).unwrap_or(&t.src[0]))?;
    let d = operand(ctx, graph, id)?;
    // ALiBi slopes as ggml: heads are dim 2 of src0.
    let n_head = graph.tensor(t.src[0]).ne()[2] as u32;
    let n_head_log2 = if n_head == 0 { 0 } else { 1u32 << (31 - n_head.leading_zeros()) };
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    let mut params = Params::default();
    params
        .desc(&a)
        .desc(&m)
        .desc(&d)
        .u32(has_mask as u32)
        .f32(scale)
        .f32(max_bias)
        .f32(m0)
        .f32(m1)
        .u32(n_head_log2);
    let rows = t.layout.nrows();
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::SoftMax,
        operands: vec![a, m, d],
        params,
        groups: grid(ctx, rows)?,
        checks: false,
    })
}
