//! NEON element-wise kernels (see [`crate::kernels::ew`]); tails in scalar code.

use crate::kernels::ew::{scalar, ATANH_SERIES, GELU_A, GELU_C};
use std::arch::aarch64::*;

/// `exp` of 4 lanes: range reduction by ln 2 and a degree-6 polynomial (about 1e-7 relative);
/// inputs are clamped to [-87.3, 88.3], and below -87.3 (including `-inf`, a masked logit) the
/// result is exactly 0.
macro_rules! exp4 {
    ($x:expr) => {{
        let xin = $x;
        let under = vcltq_f32(xin, vdupq_n_f32(-87.3));
        let x = vmaxq_f32(vminq_f32(xin, vdupq_n_f32(88.3)), vdupq_n_f32(-87.3));
        let n = vrndnq_f32(vmulq_n_f32(x, std::f32::consts::LOG2_E));
        let r = vfmsq_f32(x, n, vdupq_n_f32(0.693_359_4));
        let r = vfmsq_f32(r, n, vdupq_n_f32(-2.121_944_4e-4));
        let mut p = vdupq_n_f32(1.0 / 720.0);
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = vfmaq_f32(vdupq_n_f32(c), p, r);
        }
        let e = vshlq_n_s32::<23>(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)));
        let y = vmulq_f32(p, vreinterpretq_f32_s32(e));
        vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), under))
    }};
}

/// Applies `$body` to each 4-lane vector of `x` into `y`, the tail with `$tail`.
macro_rules! map4 {
    ($x:expr, $y:expr, |$v:ident| $body:expr, $tail:path) => {{
        let n = $x.len() / 4 * 4;
        let mut i = 0;
        while i < n {
            let $v = vld1q_f32($x.as_ptr().add(i));
            vst1q_f32($y.as_mut_ptr().add(i), $body);
            i += 4;
        }
        $tail(&$x[n..], &mut $y[n..]);
    }};
}

/// SiLU.
///
/// # Safety
///
/// The CPU supports NEON; `y.len() == x.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn silu(x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let one = vdupq_n_f32(1.0);
        map4!(x, y, |v| vdivq_f32(v, vaddq_f32(one, exp4!(vnegq_f32(v)))), scalar::silu);
    }
}

/// GELU (tanh approximation; tanh(z) = 1 - 2 / (exp(2z) + 1)).
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn gelu(x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let one = vdupq_n_f32(1.0);
        let two = vdupq_n_f32(2.0);
        map4!(
            x,
            y,
            |v| {
                let z = vmulq_n_f32(
                    vmulq_f32(v, vfmaq_f32(one, vdupq_n_f32(GELU_A), vmulq_f32(v, v))),
                    GELU_C,
                );
                let t = vsubq_f32(one, vdivq_f32(two, vaddq_f32(exp4!(vmulq_f32(two, z)), one)));
                vmulq_f32(vmulq_n_f32(v, 0.5), vaddq_f32(one, t))
            },
            scalar::gelu
        );
    }
}

/// Sigmoid (see [`crate::kernels::ew::sigmoid`]).
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn sigmoid(x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let one = vdupq_n_f32(1.0);
        map4!(
            x,
            y,
            |v| {
                let e = exp4!(vnegq_f32(vabsq_f32(v)));
                let neg = vcltq_f32(v, vdupq_n_f32(0.0));
                vdivq_f32(vbslq_f32(neg, e, one), vaddq_f32(one, e))
            },
            scalar::sigmoid
        );
    }
}

/// Softplus (see [`crate::kernels::ew::softplus`]).
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn softplus(x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let two = vdupq_n_f32(2.0);
        map4!(
            x,
            y,
            |v| {
                let e = exp4!(vnegq_f32(vabsq_f32(v)));
                let z = vdivq_f32(e, vaddq_f32(two, e));
                let z2 = vmulq_f32(z, z);
                let mut p = vdupq_n_f32(ATANH_SERIES[0]);
                for c in &ATANH_SERIES[1..] {
                    p = vfmaq_f32(vdupq_n_f32(*c), p, z2);
                }
                let l = vmulq_f32(vaddq_f32(z, z), p);
                let r = vaddq_f32(vmaxq_f32(v, vdupq_n_f32(0.0)), l);
                vbslq_f32(vcgtq_f32(v, vdupq_n_f32(20.0)), v, r)
            },
            scalar::softplus
        );
    }
}

/// `y = a + b`.
///
/// # Safety
///
/// The CPU supports NEON; the three slices have the same length.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let n = a.len() / 4 * 4;
        for i in (0..n).step_by(4) {
            vst1q_f32(
                y.as_mut_ptr().add(i),
                vaddq_f32(vld1q_f32(a.as_ptr().add(i)), vld1q_f32(b.as_ptr().add(i))),
            );
        }
        scalar::add(&a[n..], &b[n..], &mut y[n..]);
    }
}

/// `y = a * b`.
///
/// # Safety
///
/// As [`add`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let n = a.len() / 4 * 4;
        for i in (0..n).step_by(4) {
            vst1q_f32(
                y.as_mut_ptr().add(i),
                vmulq_f32(vld1q_f32(a.as_ptr().add(i)), vld1q_f32(b.as_ptr().add(i))),
            );
        }
        scalar::mul(&a[n..], &b[n..], &mut y[n..]);
    }
}

/// RMS norm of one row.
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rms_norm(x: &[f32], eps: f32, y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let n = x.len() / 4 * 4;
        let mut acc = [vdupq_n_f32(0.0); 4];
        for i in (0..n).step_by(4) {
            let v = vld1q_f32(x.as_ptr().add(i));
            let s = (i / 4) % 4;
            acc[s] = vfmaq_f32(acc[s], v, v);
        }
        let total = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut ss = f64::from(vaddvq_f32(total));
        for &v in &x[n..] {
            ss += f64::from(v) * f64::from(v);
        }
        let scale = 1.0 / ((ss / x.len().max(1) as f64) as f32 + eps).sqrt();
        for i in (0..n).step_by(4) {
            vst1q_f32(y.as_mut_ptr().add(i), vmulq_n_f32(vld1q_f32(x.as_ptr().add(i)), scale));
        }
        for (o, &v) in y[n..].iter_mut().zip(&x[n..]) {
            *o = v * scale;
        }
    }
}

/// Softmax of one row.
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn softmax(x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let n = x.len() / 4 * 4;
        let mut mv = vdupq_n_f32(f32::NEG_INFINITY);
        for i in (0..n).step_by(4) {
            mv = vmaxq_f32(mv, vld1q_f32(x.as_ptr().add(i)));
        }
        let max = x[n..].iter().copied().fold(vmaxvq_f32(mv), f32::max);
        let m = vdupq_n_f32(max);
        let mut sv = vdupq_n_f32(0.0);
        for i in (0..n).step_by(4) {
            let e = exp4!(vsubq_f32(vld1q_f32(x.as_ptr().add(i)), m));
            vst1q_f32(y.as_mut_ptr().add(i), e);
            sv = vaddq_f32(sv, e);
        }
        let mut sum = f64::from(vaddvq_f32(sv));
        for (o, &v) in y[n..].iter_mut().zip(&x[n..]) {
            *o = (v - max).exp();
            sum += f64::from(*o);
        }
        let inv = (1.0 / sum) as f32;
        for i in (0..n).step_by(4) {
            let p = y.as_mut_ptr().add(i);
            vst1q_f32(p, vmulq_n_f32(vld1q_f32(p), inv));
        }
        for o in y[n..].iter_mut() {
            *o *= inv;
        }
    }
}

/// ROPE of adjacent pairs (see the x86 version; the cache holds each pair's value twice).
///
/// # Safety
///
/// The CPU supports NEON; the four slices have the same even length.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rope_normal(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let n = x.len() / 4 * 4;
        let sign = vld1q_f32([-1.0f32, 1.0, -1.0, 1.0].as_ptr());
        for i in (0..n).step_by(4) {
            let v = vld1q_f32(x.as_ptr().add(i));
            // [x1, x0, x3, x2]: each pair swapped.
            let sw = vrev64q_f32(v);
            let c = vld1q_f32(cos.as_ptr().add(i));
            let s = vmulq_f32(vld1q_f32(sin.as_ptr().add(i)), sign);
            // Even lanes x0 c - x1 s, odd lanes x1 c + x0 s.
            vst1q_f32(y.as_mut_ptr().add(i), vfmaq_f32(vmulq_f32(v, c), sw, s));
        }
        scalar::rope_normal(&x[n..], &cos[n..], &sin[n..], &mut y[n..]);
    }
}

/// ROPE of the pairs `(x[i], x[i + h])` (see the x86 version).
///
/// # Safety
///
/// The CPU supports NEON; `x` and `y` have the same even length `2 h`, `cos` and `sin` the
/// length `h`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rope_neox(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees NEON and the slices' lengths (see the function's contract); every
    // vector load and store below is at an index `i` with `i + 4 <= n`, within every slice.
    unsafe {
        let h = x.len() / 2;
        let n = h / 4 * 4;
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        for i in (0..n).step_by(4) {
            let a = vld1q_f32(xp.add(i));
            let b = vld1q_f32(xp.add(i + h));
            let c = vld1q_f32(cos.as_ptr().add(i));
            let s = vld1q_f32(sin.as_ptr().add(i));
            vst1q_f32(yp.add(i), vfmsq_f32(vmulq_f32(a, c), b, s));
            vst1q_f32(yp.add(i + h), vfmaq_f32(vmulq_f32(b, c), a, s));
        }
        for i in n..h {
            let (a, b) = (x[i], x[i + h]);
            y[i] = a * cos[i] - b * sin[i];
            y[i + h] = a * sin[i] + b * cos[i];
        }
    }
}
