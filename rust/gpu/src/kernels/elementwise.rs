//! Element-wise ops (`shaders/elementwise.wgsl`): binary ops with broadcasting, unary ops and
//! activations, and copies with F32 / F16 conversion.

use super::{grid_256, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Graph, Op, Result, TensorId, UnaryOp};

/// ADD, SUB, MUL, DIV: `dst = src0 op src1`, src1 repeated over src0.
pub(super) fn binary(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let op = match t.op {
        Op::Add => 0,
        Op::Sub => 1,
        Op::Mul => 2,
        _ => 3,
    };
    let a = operand(ctx, graph, t.src[0])?;
    let b = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let n = t.nelements();
    let mut params = Params::default();
    params.desc(&a).desc(&b).desc(&d).u32(op).u32(n as u32).f32(0.0).f32(0.0);
    Ok(Dispatch {
        kernel: Kernel::Binary,
        operands: vec![a, b, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}

/// The op code and parameters of a unary op in the shader.
pub(crate) fn unary_code(op: &Op) -> Option<(u32, f32, f32)> {
    Some(match *op {
        Op::Cpy | Op::Cont | Op::Dup => (0, 0.0, 0.0),
        Op::Scale { scale, bias } => (1, scale, bias),
        Op::Sqr => (2, 0.0, 0.0),
        Op::Sqrt => (3, 0.0, 0.0),
        Op::Clamp { min, max } => (4, min, max),
        Op::Unary(UnaryOp::Silu) => (5, 0.0, 0.0),
        Op::Unary(UnaryOp::Gelu) => (6, 0.0, 0.0),
        Op::Unary(UnaryOp::Relu) => (7, 0.0, 0.0),
        Op::Unary(UnaryOp::Tanh) => (8, 0.0, 0.0),
        _ => return None,
    })
}

/// Unary ops and copies: result element `i` from source element `i`, each in its own order.
pub(super) fn unary(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let (code, p0, p1) = unary_code(&t.op).ok_or_else(|| ctx.error("not a unary op"))?;
    let a = operand(ctx, graph, t.src[0])?;
    let a2 = operand(ctx, graph, t.src[0])?;
    let d = operand(ctx, graph, id)?;
    let n = t.nelements();
    let mut params = Params::default();
    params.desc(&a).desc(&a2).desc(&d).u32(code).u32(n as u32).f32(p0).f32(p1);
    Ok(Dispatch {
        kernel: Kernel::Unary,
        operands: vec![a, a2, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}
