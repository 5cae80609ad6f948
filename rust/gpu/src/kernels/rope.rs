//! ROPE (`shaders/rope.wgsl`): normal and NeoX modes, frequency base and scale, frequency
//! factors, attention factor, YaRN (its correction dims from the core's
//! `RopeParams::yarn_corr_dims`, as ggml's `ggml_rope_yarn_corr_dims`).

use super::{grid_256, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{Graph, Op, Result, TensorId};

pub(super) fn plan(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let Op::Rope(rp) = t.op else {
        return Err(ctx.error("not ROPE"));
    };
    let a = operand(ctx, graph, t.src[0])?;
    let pos = operand(ctx, graph, t.src[1])?;
    let has_ff = t.src.len() > 2;
    let ff = operand(ctx, graph, *t.src.get(2).unwrap_or(&t.src[1]))?;
    let d = operand(ctx, graph, id)?;
    let ne = t.ne();
    let n = ne[0].div_ceil(2) * ne[1] * ne[2] * ne[3];
    let corr = rp.yarn_corr_dims();
    let mut params = Params::default();
    params
        .desc(&a)
        .desc(&pos)
        .desc(&ff)
        .desc(&d)
        .u32(n as u32)
        .u32(rp.n_dims as u32)
        .u32((rp.mode & ROPE_MODE_NEOX != 0) as u32)
        .u32(has_ff as u32)
        .f32((rp.freq_base as f64).log2() as f32)
        .f32(rp.freq_scale)
        .f32(rp.attn_factor)
        .f32(rp.ext_factor)
        .f32(corr[0])
        .f32(corr[1])
        .f32((1.0 + 0.1 * (1.0 / f64::from(rp.freq_scale)).ln()) as f32);
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::Rope,
        operands: vec![a, pos, ff, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}
