//! Element-wise kernels for the hot paths of a transformer (one row at a time, F32): SiLU, GELU
//! (tanh approximation), add, mul, RMS norm and the softmax core, vectorized with AVX2 (x86_64)
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
}
