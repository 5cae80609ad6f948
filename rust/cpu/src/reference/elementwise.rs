//! Element-wise ops: binary ops with broadcasting, SCALE, SQR, SQRT, CLAMP, the activations and
//! the gated linear units. Every value is converted to f32, computed, and rounded to the
//! destination's type (as ggml does for F16 and BF16).

use super::access::{rows, scratch_f32, spans, Mem, Poller, Scratch, SPAN};
use tessera_core::{GluOp, Op, Result, UnaryOp};

/// `sqrt(2 / pi)`.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of GELU's tanh approximation.
const GELU_COEF_A: f64 = 0.044_715;

/// `x * sigmoid(x)`, computed in f64; `silu(-inf) = -0` (the limit; ggml gives NaN there).
pub(crate) fn silu(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    let x = f64::from(x);
    (x / (1.0 + (-x).exp())) as f32
}

/// ggml's tanh approximation of GELU, `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`,
/// computed in f64 (ggml evaluates it in f32, or through an F16 table); `gelu(-inf) = -0`.
pub(crate) fn gelu(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    let x = f64::from(x);
    (0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())) as f32
}

/// The activation `u`.
pub(crate) fn activation(u: UnaryOp) -> fn(f32) -> f32 {
    match u {
        UnaryOp::Silu => silu,
        UnaryOp::Gelu => gelu,
        // ggml: `x > 0 ? x : 0` (so NaN gives 0).
        UnaryOp::Relu => |x| if x > 0.0 { x } else { 0.0 },
        UnaryOp::Tanh => f32::tanh,
        UnaryOp::Sigmoid => |x| (1.0 / (1.0 + (-f64::from(x)).exp())) as f32,
        // ggml: `x > 20 ? x : log(1 + exp(x))`.
        UnaryOp::Softplus => |x| if x > 20.0 { x } else { f64::from(x).exp().ln_1p() as f32 },
    }
}

/// ADD, SUB, MUL, DIV: `dst[i] = a[i] op b[i mod ne(b)]` on each dim.
pub(crate) fn binary(op: &Op, dst: &Mem, a: &Mem, b: &Mem, p: &mut Poller) -> Result<()> {
    let f: fn(f32, f32) -> f32 = match op {
        Op::Add => |x, y| x + y,
        Op::Sub => |x, y| x - y,
        Op::Mul => |x, y| x * y,
        _ => |x, y| x / y,
    };
    let (ne, nb) = (dst.ne(), b.ne());
    let mut s = Scratch::default();
    let mut ra = scratch_f32(ne[0].min(SPAN))?;
    for r in rows(ne) {
        let rb = [r[0] % nb[1], r[1] % nb[2], r[2] % nb[3]];
        for span in spans(ne[0]) {
            let part = &mut ra[..span.len()];
            a.read_span(r, span.start, part, &mut s)?;
            for (i, x) in part.iter_mut().enumerate() {
                // The operands are float types: b is read element by element.
                *x = f(*x, b.get([(span.start + i) % nb[0], rb[0], rb[1], rb[2]]));
            }
            dst.write_span(r, span.start, part, &mut s)?;
        }
        p.tick(ne[0])?;
    }
    Ok(())
}

/// `dst[i] = f(a[i])`.
pub(crate) fn map(dst: &Mem, a: &Mem, f: impl Fn(f32) -> f32, p: &mut Poller) -> Result<()> {
    let ne = dst.ne();
    let mut s = Scratch::default();
    let mut buf = scratch_f32(ne[0].min(SPAN))?;
    for r in rows(ne) {
        for span in spans(ne[0]) {
            let part = &mut buf[..span.len()];
            a.read_span(r, span.start, part, &mut s)?;
            for x in part.iter_mut() {
                *x = f(*x);
            }
            dst.write_span(r, span.start, part, &mut s)?;
        }
        p.tick(ne[0])?;
    }
    Ok(())
}

/// The element-wise single-operand ops (SCALE, SQR, SQRT, CLAMP and the activations).
pub(crate) fn unary_like(op: &Op, dst: &Mem, a: &Mem, p: &mut Poller) -> Result<()> {
    match *op {
        // ggml: `x * s + b` in f32 (not fused).
        Op::Scale { scale, bias } => map(dst, a, |x| x * scale + bias, p),
        Op::Sqr => map(dst, a, |x| x * x, p),
        // Negative values give NaN, as in ggml.
        Op::Sqrt => map(dst, a, f32::sqrt, p),
        // NaN stays NaN (ggml's `MAX(MIN(x, max), min)` would give `max`).
        Op::Clamp { min, max } => map(
            dst,
            a,
            |x| {
                if x < min {
                    min
                } else if x > max {
                    max
                } else {
                    x
                }
            },
            p,
        ),
        Op::Unary(u) => map(dst, a, activation(u), p),
        _ => unreachable!("reference: {} is not element-wise", op.name()),
    }
}

/// SWIGLU / GEGLU. With one operand each row is split into halves; the activation is applied to
/// the first half and multiplied by the second (`swapped`: activation of the second half times
/// the first), as ggml's `ggml_glu`. With two operands, `act(a) * b` (`swapped` is ignored, as
/// in ggml).
pub(crate) fn glu(
    op: GluOp,
    swapped: bool,
    dst: &Mem,
    a: &Mem,
    b: Option<&Mem>,
    p: &mut Poller,
) -> Result<()> {
    let act = activation(op.activation());
    let ne = dst.ne();
    let nc = ne[0];
    let mut s = Scratch::default();
    let mut ra = scratch_f32(a.ne()[0])?;
    let mut rg = scratch_f32(if b.is_some() { nc } else { 0 })?;
    let mut out = scratch_f32(nc)?;
    for r in rows(ne) {
        a.read_row(r, &mut ra, &mut s)?;
        let (x, g): (&[f32], &[f32]) = match b {
            Some(b) => {
                b.read_row(r, &mut rg, &mut s)?;
                (&ra, &rg)
            }
            None => {
                let (first, second) = ra.split_at(nc);
                if swapped {
                    (second, first)
                } else {
                    (first, second)
                }
            }
        };
        for ((o, &x), &g) in out.iter_mut().zip(x).zip(g) {
            *o = act(x) * g;
        }
        dst.write_row(r, &out, &mut s)?;
        p.tick(nc)?;
    }
    Ok(())
}
