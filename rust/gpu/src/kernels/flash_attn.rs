//! FLASH_ATTN_EXT (`shaders/flash_attn.wgsl`): one workgroup per query and head, an online
//! softmax over blocks of 64 keys; grouped-query heads, F16 or F32 K / V views, mask, ALiBi
//! and logit soft cap.

use super::{grid, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Op, Result, TensorId};

/// Largest head dim (of q and k, and of v) the kernel takes.
pub const MAX_HEAD_DIM: usize = 512;

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let Op::FlashAttnExt(ap) = t.op else {
        return Err(ctx.error("not FLASH_ATTN_EXT"));
    };
    let q = operand(ctx, graph, t.src[0])?;
    let k = operand(ctx, graph, t.src[1])?;
    let v = operand(ctx, graph, t.src[2])?;
    let has_mask = t.src.len() > 3;
    let m = operand(ctx, graph, *t.src.get(3).unwrap_or(&t.src[0]))?;
    let d = operand(ctx, graph, id)?;
    let nq = graph.tensor(t.src[0]).ne();
    // ALiBi slopes as ggml: heads are q's dim 2.
    let n_head = nq[2] as u32;
    let n_head_log2 = if n_head == 0 { 0 } else { 1u32 << (31 - n_head.leading_zeros()) };
    let m0 = 2f32.powf(-ap.max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(ap.max_bias / 2.0) / n_head_log2 as f32);
    let mut params = Params::default();
    params
        .desc(&q)
        .desc(&k)
        .desc(&v)
        .desc(&m)
        .desc(&d)
        .u32(has_mask as u32)
        .f32(ap.scale)
        .f32(ap.softcap)
        .f32(ap.max_bias)
        .f32(m0)
        .f32(m1)
        .u32(n_head_log2);
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::FlashAttn,
        operands: vec![q, k, v, m, d],
        params,
        groups: grid(ctx, nq[1] * nq[2] * nq[3])?,
        checks: false,
    })
}
