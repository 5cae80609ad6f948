//! Element-wise ops (`shaders/elementwise.wgsl`): binary ops with broadcasting, the gated
//! linear units, unary ops and activations, and copies with F32 / F16 conversion.

use super::{grid_256, operand, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{GluOp, Graph, Op, Result, TensorId, UnaryOp};

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
        wtype: 0,
        kernel: Kernel::Binary,
        operands: vec![a, b, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}

/// SWIGLU, GEGLU: `dst = act(x) * g`, the binary kernel with `x` and `g` either the two
/// operands, or (one operand) the halves of each row of src0, `swapped` putting the gate half
/// first: both descriptors then bind src0, their offsets pointing at the halves.
pub(super) fn glu(ctx: &Arc<Context>, graph: &Graph, id: TensorId) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let Op::Glu { op, swapped } = t.op else {
        return Err(ctx.error("not a GLU"));
    };
    let code = match op {
        GluOp::Swiglu => 4,
        GluOp::Geglu => 5,
    };
    let mut a = operand(ctx, graph, t.src[0])?;
    let mut b = operand(ctx, graph, *t.src.get(1).unwrap_or(&t.src[0]))?;
    if t.src.len() == 1 {
        // Half a row further: ne0 of the result times src0's element stride.
        let half = u32::try_from(t.ne()[0] * graph.tensor(t.src[0]).nb()[0])
            .map_err(|_| ctx.error("GLU row too long"))?;
        if swapped {
            a.desc[8] += half;
        } else {
            b.desc[8] += half;
        }
    }
    // The gate is read at the result's coordinates (no broadcasting).
    let d = operand(ctx, graph, id)?;
    b.desc[..4].copy_from_slice(&d.desc[..4]);
    let n = t.nelements();
    let mut params = Params::default();
    params.desc(&a).desc(&b).desc(&d).u32(code).u32(n as u32).f32(0.0).f32(0.0);
    Ok(Dispatch {
        wtype: 0,
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
        Op::Unary(UnaryOp::Sigmoid) => (9, 0.0, 0.0),
        Op::Unary(UnaryOp::Softplus) => (10, 0.0, 0.0),
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
        wtype: 0,
        kernel: Kernel::Unary,
        operands: vec![a, a2, d],
        params,
        groups: grid_256(ctx, n)?,
        checks: false,
    })
}
