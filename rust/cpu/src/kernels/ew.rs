//! Element-wise kernels for the hot paths of a transformer (one row at a time, F32): SiLU, GELU
//! (tanh approximation), add, mul, RMS norm, the softmax core and the ROPE rotation (normal and
//! NeoX pairs, from a precomputed cos / sin cache), vectorized with AVX2 (x86_64)
//! or NEON (aarch64) when the active tier has them, scalar otherwise.
//!
//! Each function checks its slice lengths and returns [`Error::DataLength`] on a mismatch.
//! Results match the scalar versions to about 1e-7 relative (the vector `exp` is a degree-6
//! polynomial after range reduction).

use super::tier::{active_tier, note_used, Tier};
use tessera_core::{Error, Result};

/// sqrt(2 / pi), for GELU.
pub(crate) const GELU_C: f32 = 0.797_884_6;
/// The cubic coefficient of GELU's tanh approximation.
pub(crate) const GELU_A: f32 = 0.044_715;

fn check(what: &str, expected: usize, actual: usize) -> Result<()> {
    if expected != actual {
        return Err(Error::DataLength {
            context: format!("{what}: slice lengths"),
            expected,
            actual,
        });
    }
    Ok(())
}

/// Which vector implementation to use: `Some(tier)` when the active tier has one.
fn simd() -> Option<Tier> {
    let t = active_tier();
    match t {
        Tier::Avx2 | Tier::Avx512Vnni if cfg!(target_arch = "x86_64") => Some(t),
        Tier::Neon | Tier::Dotprod | Tier::I8mm if cfg!(target_arch = "aarch64") => Some(t),
        _ => None,
    }
}

macro_rules! dispatch {
    ($f:ident, $($arg:expr),*) => {{
        if let Some(t) = simd() {
            note_used(t);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the active tier is AVX2 or higher, which the CPU was checked to support.
            unsafe {
                return Ok(super::x86::ew::$f($($arg),*));
            }
            #[cfg(target_arch = "aarch64")]
            // SAFETY: the active tier is NEON or higher, which the CPU was checked to support.
            unsafe {
                return Ok(super::arm::ew::$f($($arg),*));
            }
        }
        note_used(Tier::Scalar);
        Ok(scalar::$f($($arg),*))
    }};
}

/// `y = x * sigmoid(x)`.
pub fn silu(x: &[f32], y: &mut [f32]) -> Result<()> {
    check("silu", x.len(), y.len())?;
    dispatch!(silu, x, y)
}

/// `y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (ggml's GELU).
pub fn gelu(x: &[f32], y: &mut [f32]) -> Result<()> {
    check("gelu", x.len(), y.len())?;
    dispatch!(gelu, x, y)
}

/// `y = a + b`.
pub fn add(a: &[f32], b: &[f32], y: &mut [f32]) -> Result<()> {
    check("add", a.len(), b.len())?;
    check("add", a.len(), y.len())?;
    dispatch!(add, a, b, y)
}

/// `y = a * b`.
pub fn mul(a: &[f32], b: &[f32], y: &mut [f32]) -> Result<()> {
    check("mul", a.len(), b.len())?;
    check("mul", a.len(), y.len())?;
    dispatch!(mul, a, b, y)
}

/// `y = x / sqrt(mean(x^2) + eps)` (ggml's RMS_NORM of one row).
pub fn rms_norm(x: &[f32], eps: f32, y: &mut [f32]) -> Result<()> {
    check("rms_norm", x.len(), y.len())?;
    dispatch!(rms_norm, x, eps, y)
}

/// `y = exp(x - max(x)) / sum(exp(x - max(x)))`: the core of SOFT_MAX for one row (the caller
/// applies ggml's scale, mask and ALiBi bias to `x` first).
pub fn softmax(x: &[f32], y: &mut [f32]) -> Result<()> {
    check("softmax", x.len(), y.len())?;
    dispatch!(softmax, x, y)
}

/// ROPE of adjacent pairs `(x[2i], x[2i+1])` by the angle whose cosine and sine (times the
/// magnitude scale) are `cos[2i] = cos[2i+1]` and `sin[2i] = sin[2i+1]`: `y[2i] = x[2i] c -
/// x[2i+1] s`, `y[2i+1] = x[2i] s + x[2i+1] c`. All four slices have the same even length.
pub fn rope_normal(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) -> Result<()> {
    check("rope_normal", x.len(), cos.len())?;
    check("rope_normal", x.len(), sin.len())?;
    check("rope_normal", x.len(), y.len())?;
    check("rope_normal: even length", x.len() / 2 * 2, x.len())?;
    dispatch!(rope_normal, x, cos, sin, y)
}

/// ROPE of the NeoX pairs `(x[i], x[i + h])`, `h = x.len() / 2`, by the angle of `cos[i]`,
/// `sin[i]`: `y[i] = x[i] c - x[i+h] s`, `y[i+h] = x[i] s + x[i+h] c`. `x` and `y` have the same
/// even length, `cos` and `sin` half of it.
pub fn rope_neox(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) -> Result<()> {
    check("rope_neox", x.len(), y.len())?;
    check("rope_neox: even length", x.len() / 2 * 2, x.len())?;
    check("rope_neox", x.len() / 2, cos.len())?;
    check("rope_neox", x.len() / 2, sin.len())?;
    dispatch!(rope_neox, x, cos, sin, y)
}

/// The scalar versions, the reference of the vector ones.
pub mod scalar {
    use super::{GELU_A, GELU_C};

    /// `y = x * sigmoid(x)`.
    pub fn silu(x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = v / (1.0 + (-v).exp());
        }
    }

    /// ggml's GELU (tanh approximation).
    pub fn gelu(x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = 0.5 * v * (1.0 + (GELU_C * v * (1.0 + GELU_A * v * v)).tanh());
        }
    }

    /// `y = a + b`.
    pub fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
        for ((o, &p), &q) in y.iter_mut().zip(a).zip(b) {
            *o = p + q;
        }
    }

    /// `y = a * b`.
    pub fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
        for ((o, &p), &q) in y.iter_mut().zip(a).zip(b) {
            *o = p * q;
        }
    }

    /// RMS norm of one row.
    pub fn rms_norm(x: &[f32], eps: f32, y: &mut [f32]) {
        let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let scale = 1.0 / ((ss / x.len().max(1) as f64) as f32 + eps).sqrt();
        for (o, &v) in y.iter_mut().zip(x) {
            *o = v * scale;
        }
    }

    /// Softmax of one row.
    pub fn softmax(x: &[f32], y: &mut [f32]) {
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f64;
        for (o, &v) in y.iter_mut().zip(x) {
            *o = (v - max).exp();
            sum += f64::from(*o);
        }
        let inv = (1.0 / sum) as f32;
        for o in y.iter_mut() {
            *o *= inv;
        }
    }

    /// ROPE of adjacent pairs (see [`super::rope_normal`]).
    pub fn rope_normal(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
        for (((o, v), c), s) in y
            .chunks_exact_mut(2)
            .zip(x.chunks_exact(2))
            .zip(cos.iter().step_by(2))
            .zip(sin.iter().step_by(2))
        {
            o[0] = v[0] * c - v[1] * s;
            o[1] = v[0] * s + v[1] * c;
        }
    }

    /// ROPE of the NeoX pairs (see [`super::rope_neox`]).
    pub fn rope_neox(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
        let h = x.len() / 2;
        for i in 0..h {
            let (a, b) = (x[i], x[i + h]);
            y[i] = a * cos[i] - b * sin[i];
            y[i + h] = a * sin[i] + b * cos[i];
        }
    }
}
