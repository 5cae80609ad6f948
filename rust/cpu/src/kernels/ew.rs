//! Element-wise kernels for the hot paths of a transformer (one row at a time, F32): SiLU, GELU
//! (tanh approximation), sigmoid, softplus, add, mul, RMS norm, the softmax core and the ROPE rotation (normal and
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

/// `y = 1 / (1 + exp(-x))` (ggml's SIGMOID), as `1 / (1 + e)` for `x >= 0` and `e / (1 + e)`
/// below, `e = exp(-|x|)`: no overflow, and the relative accuracy kept where the result is tiny
/// (0 below `x = -87.3`, where it is under `1.2e-38`).
pub fn sigmoid(x: &[f32], y: &mut [f32]) -> Result<()> {
    check("sigmoid", x.len(), y.len())?;
    dispatch!(sigmoid, x, y)
}

/// `y = log(1 + exp(x))`, and `x` itself above 20 (ggml's SOFTPLUS): `max(x, 0) + log1p(e)`
/// with `e = exp(-|x|)` and `log1p(e) = 2 atanh(e / (2 + e))` (a series in `z = e / (2 + e) <=
/// 1/3`), so no overflow and the relative accuracy kept where the result is tiny.
pub fn softplus(x: &[f32], y: &mut [f32]) -> Result<()> {
    check("softplus", x.len(), y.len())?;
    dispatch!(softplus, x, y)
}

/// The coefficients `1 / (2n + 1)`, n = 7 down to 0, of `atanh(z) / z` in `z^2` (Horner order):
/// [`softplus`]'s `log1p(e) = 2 z atanh(z) / z` for `z <= 1/3`, whose first omitted term is under
/// 1.5e-9 relative.
pub(crate) const ATANH_SERIES: [f32; 8] =
    [1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0];

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

    /// `y = 1 / (1 + exp(-x))` (see [`super::sigmoid`]).
    pub fn sigmoid(x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            let e = (-v.abs()).exp();
            *o = if v >= 0.0 { 1.0 } else { e } / (1.0 + e);
        }
    }

    /// `y = log(1 + exp(x))`, `x` above 20 (see [`super::softplus`]).
    pub fn softplus(x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = if v > 20.0 { v } else { v.max(0.0) + (-v.abs()).exp().ln_1p() };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A row kernel.
    type Row = fn(&[f32], &mut [f32]);

    /// The implementations of sigmoid (or softplus) this CPU can run: the scalar one and the
    /// vector one, by name.
    fn versions(sigmoid: bool) -> Vec<(&'static str, Row)> {
        let mut v: Vec<(&'static str, Row)> =
            vec![("scalar", if sigmoid { scalar::sigmoid } else { scalar::softplus })];
        #[cfg(target_arch = "x86_64")]
        if Tier::Avx2.is_supported() {
            v.push((
                "avx2",
                if sigmoid {
                    // SAFETY: the CPU has AVX2 and FMA (checked above); the test passes slices of
                    // one length.
                    |x, y| unsafe { super::super::x86::ew::sigmoid(x, y) }
                } else {
                    // SAFETY: as above.
                    |x, y| unsafe { super::super::x86::ew::softplus(x, y) }
                },
            ));
        }
        #[cfg(target_arch = "aarch64")]
        if Tier::Neon.is_supported() {
            v.push((
                "neon",
                if sigmoid {
                    // SAFETY: the CPU has NEON (checked above); the test passes slices of one
                    // length.
                    |x, y| unsafe { super::super::arm::ew::sigmoid(x, y) }
                } else {
                    // SAFETY: as above.
                    |x, y| unsafe { super::super::arm::ew::softplus(x, y) }
                },
            ));
        }
        v
    }

    /// Distance from `got` to `want` in units in the last place of `want` rounded to f32 (the
    /// smallest subnormal's below 2^-126).
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        let ulp = if w.abs() < f32::MIN_POSITIVE {
            f64::from(f32::from_bits(1))
        } else {
            f64::from(f32::from_bits(w.abs().to_bits() + 1) - w.abs())
        };
        (f64::from(got) - want).abs() / ulp
    }

    /// Inputs: a dense sweep of [-100, 100] (each length's tail through the scalar code), the
    /// thresholds (20, the exp clamp at -87.3), signed zeros and infinities.
    fn inputs() -> Vec<f32> {
        let mut x: Vec<f32> = (0..40_001).map(|i| -100.0 + i as f32 * 0.005).collect();
        x.extend([0.0, -0.0, 20.0, 20.000002, 19.999998, -87.3, -87.4, 1e-30, -1e-30, 88.0]);
        x.extend([f32::INFINITY, f32::NEG_INFINITY, 5.0, -5.0, 0.5]);
        x
    }

    /// Below this, results may be flushed to 0: `exp(-87.3)`, under which the vector exp is 0.
    const FLUSHED: f64 = 1.28e-38;

    /// Checks every version of `op` against `f` in f64 within `max_ulps`, and results under
    /// [`FLUSHED`] within that.
    fn check_op(sigmoid: bool, f: fn(f64) -> f64, max_ulps: f64) {
        let x = inputs();
        for (name, op) in versions(sigmoid) {
            for n in [x.len(), 7, 13] {
                let mut y = vec![f32::NAN; n];
                op(&x[..n], &mut y);
                for (&xi, &yi) in x.iter().zip(&y) {
                    let want = f(f64::from(xi));
                    let ok = if want.abs() < FLUSHED {
                        (f64::from(yi) - want).abs() <= FLUSHED
                    } else if want.is_infinite() {
                        yi == want as f32
                    } else {
                        ulps(yi, want) <= max_ulps
                    };
                    assert!(ok, "{name}({xi}) = {yi}, want {want} ({} ulps)", ulps(yi, want));
                }
            }
        }
    }

    #[test]
    fn sigmoid_is_within_four_ulps_of_f64() {
        check_op(true, |x| 1.0 / (1.0 + (-x).exp()), 4.0);
    }

    #[test]
    fn softplus_is_within_four_ulps_of_f64() {
        check_op(false, |x| if x > 20.0 { x } else { x.exp().ln_1p() }, 4.0);
    }

    #[test]
    fn sigmoid_and_softplus_refuse_mismatched_slices() {
        assert!(sigmoid(&[1.0, 2.0], &mut [0.0]).is_err());
        assert!(softplus(&[1.0], &mut [0.0, 0.0]).is_err());
    }
}
