//! AVX2 + FMA element-wise kernels (see [`crate::kernels::ew`]); tails in scalar code.

use crate::kernels::ew::{scalar, ATANH_SERIES, GELU_A, GELU_C};
use std::arch::x86_64::*;

/// `exp` of 8 lanes: range reduction by ln 2 and a degree-6 polynomial (about 1e-7 relative);
/// inputs are clamped to [-87.3, 88.3], and below -87.3 (including `-inf`, a masked logit) the
/// result is exactly 0.
macro_rules! exp8 {
    ($x:expr) => {{
        let xin = $x;
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(xin, _mm256_set1_ps(-87.3));
        let x = _mm256_max_ps(_mm256_min_ps(xin, _mm256_set1_ps(88.3)), _mm256_set1_ps(-87.3));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)))
    }};
}

/// Horizontal sum of 8 lanes.
macro_rules! hsum8 {
    ($v:expr) => {{
        let v = $v;
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }};
}

/// Applies `$body` (a closure-like macro on one 8-lane vector) to `x` into `y`.
macro_rules! map8 {
    ($x:expr, $y:expr, |$v:ident| $body:expr, $tail:path) => {{
        let n = $x.len() / 8 * 8;
        let mut i = 0;
        while i < n {
            // SAFETY: i + 8 <= n <= x.len() == y.len() (the caller's contract).
            unsafe {
                let $v = _mm256_loadu_ps($x.as_ptr().add(i));
                _mm256_storeu_ps($y.as_mut_ptr().add(i), $body);
            }
            i += 8;
        }
        $tail(&$x[n..], &mut $y[n..]);
    }};
}

/// SiLU.
///
/// # Safety
///
/// The CPU supports AVX2 and FMA; `y.len() == x.len()`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu(x: &[f32], y: &mut [f32]) {
    let one = _mm256_set1_ps(1.0);
    map8!(
        x,
        y,
        |v| _mm256_div_ps(v, _mm256_add_ps(one, exp8!(_mm256_sub_ps(_mm256_setzero_ps(), v)))),
        scalar::silu
    );
}

/// GELU (tanh approximation; tanh(z) = 1 - 2 / (exp(2z) + 1)).
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gelu(x: &[f32], y: &mut [f32]) {
    let one = _mm256_set1_ps(1.0);
    let two = _mm256_set1_ps(2.0);
    let half = _mm256_set1_ps(0.5);
    map8!(
        x,
        y,
        |v| {
            let z = _mm256_mul_ps(
                _mm256_set1_ps(GELU_C),
                _mm256_mul_ps(v, _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), _mm256_mul_ps(v, v), one)),
            );
            let t = _mm256_sub_ps(
                one,
                _mm256_div_ps(two, _mm256_add_ps(exp8!(_mm256_mul_ps(two, z)), one)),
            );
            _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t))
        },
        scalar::gelu
    );
}

/// Sigmoid (see [`crate::kernels::ew::sigmoid`]).
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn sigmoid(x: &[f32], y: &mut [f32]) {
    let one = _mm256_set1_ps(1.0);
    let sign = _mm256_set1_ps(-0.0);
    map8!(
        x,
        y,
        |v| {
            let e = exp8!(_mm256_or_ps(v, sign));
            // e where x's sign bit is set, 1 elsewhere (-0 gives e = 1 either way).
            _mm256_div_ps(_mm256_blendv_ps(one, e, v), _mm256_add_ps(one, e))
        },
        scalar::sigmoid
    );
}

/// Softplus (see [`crate::kernels::ew::softplus`]).
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softplus(x: &[f32], y: &mut [f32]) {
    let two = _mm256_set1_ps(2.0);
    let sign = _mm256_set1_ps(-0.0);
    map8!(
        x,
        y,
        |v| {
            let e = exp8!(_mm256_or_ps(v, sign));
            let z = _mm256_div_ps(e, _mm256_add_ps(two, e));
            let z2 = _mm256_mul_ps(z, z);
            let mut p = _mm256_set1_ps(ATANH_SERIES[0]);
            for c in &ATANH_SERIES[1..] {
                p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(*c));
            }
            let l = _mm256_mul_ps(_mm256_add_ps(z, z), p);
            let r = _mm256_add_ps(_mm256_max_ps(v, _mm256_setzero_ps()), l);
            _mm256_blendv_ps(r, v, _mm256_cmp_ps::<_CMP_GT_OQ>(v, _mm256_set1_ps(20.0)))
        },
        scalar::softplus
    );
}

/// `y = a + b`.
///
/// # Safety
///
/// The CPU supports AVX2; the three slices have the same length.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    let n = a.len() / 8 * 8;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= the length of the three slices (the caller's contract).
        unsafe {
            let v = _mm256_add_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            );
            _mm256_storeu_ps(y.as_mut_ptr().add(i), v);
        }
    }
    scalar::add(&a[n..], &b[n..], &mut y[n..]);
}

/// `y = a * b`.
///
/// # Safety
///
/// As [`add`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
    let n = a.len() / 8 * 8;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= the length of the three slices (the caller's contract).
        unsafe {
            let v = _mm256_mul_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            );
            _mm256_storeu_ps(y.as_mut_ptr().add(i), v);
        }
    }
    scalar::mul(&a[n..], &b[n..], &mut y[n..]);
}

/// RMS norm of one row.
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rms_norm(x: &[f32], eps: f32, y: &mut [f32]) {
    let n = x.len() / 8 * 8;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < n {
        // SAFETY: i + 8 <= n <= x.len().
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
        let s = (i / 8) % 4;
        acc[s] = _mm256_fmadd_ps(v, v, acc[s]);
        i += 8;
    }
    let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut ss = f64::from(hsum8!(total));
    for &v in &x[n..] {
        ss += f64::from(v) * f64::from(v);
    }
    let scale = 1.0 / ((ss / x.len().max(1) as f64) as f32 + eps).sqrt();
    let sv = _mm256_set1_ps(scale);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= x.len() == y.len() (the caller's contract).
        unsafe {
            _mm256_storeu_ps(
                y.as_mut_ptr().add(i),
                _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), sv),
            )
        };
    }
    for (o, &v) in y[n..].iter_mut().zip(&x[n..]) {
        *o = v * scale;
    }
}

/// Softmax of one row.
///
/// # Safety
///
/// As [`silu`].
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax(x: &[f32], y: &mut [f32]) {
    let n = x.len() / 8 * 8;
    let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= x.len().
        mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) });
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), mv) };
    let max = lanes.iter().chain(&x[n..]).copied().fold(f32::NEG_INFINITY, f32::max);
    let m = _mm256_set1_ps(max);
    let mut sv = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= x.len() == y.len() (the caller's contract).
        let e = unsafe { exp8!(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), m)) };
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(i), e) };
        sv = _mm256_add_ps(sv, e);
    }
    let mut sum = f64::from(hsum8!(sv));
    for (o, &v) in y[n..].iter_mut().zip(&x[n..]) {
        *o = (v - max).exp();
        sum += f64::from(*o);
    }
    let inv = _mm256_set1_ps((1.0 / sum) as f32);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= y.len().
        unsafe {
            let p = y.as_mut_ptr().add(i);
            _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), inv));
        }
    }
    for o in y[n..].iter_mut() {
        *o *= (1.0 / sum) as f32;
    }
}

/// ROPE of adjacent pairs: `y[2i] = x[2i] c - x[2i+1] s`, `y[2i+1] = x[2i] s + x[2i+1] c`
/// with `c = cos[2i] = cos[2i+1]` and `s = sin[2i] = sin[2i+1]` (the cache holds each pair's
/// value twice).
///
/// # Safety
///
/// The CPU supports AVX2 and FMA; the four slices have the same even length.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rope_normal(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
    let n = x.len() / 8 * 8;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= the length of the four slices (the caller's contract).
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            // [x1, x0, x3, x2, ...]: each pair swapped.
            let sw = _mm256_permute_ps::<0b1011_0001>(v);
            let c = _mm256_loadu_ps(cos.as_ptr().add(i));
            let s = _mm256_loadu_ps(sin.as_ptr().add(i));
            // Even lanes x0 c - x1 s, odd lanes x1 c + x0 s.
            let r = _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(sw, s));
            _mm256_storeu_ps(y.as_mut_ptr().add(i), r);
        }
    }
    scalar::rope_normal(&x[n..], &cos[n..], &sin[n..], &mut y[n..]);
}

/// ROPE of the pairs `(x[i], x[i + h])` for `h = x.len() / 2`: `y[i] = x[i] c - x[i+h] s`,
/// `y[i+h] = x[i] s + x[i+h] c` with `c = cos[i]`, `s = sin[i]`.
///
/// # Safety
///
/// The CPU supports AVX2 and FMA; `x` and `y` have the same even length `2 h`, `cos` and
/// `sin` the length `h`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rope_neox(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
    let h = x.len() / 2;
    let n = h / 8 * 8;
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= h, the length of `cos` and `sin` and half that of `x` and `y`
        // (the caller's contract).
        unsafe {
            let a = _mm256_loadu_ps(xp.add(i));
            let b = _mm256_loadu_ps(xp.add(i + h));
            let c = _mm256_loadu_ps(cos.as_ptr().add(i));
            let s = _mm256_loadu_ps(sin.as_ptr().add(i));
            _mm256_storeu_ps(yp.add(i), _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
            _mm256_storeu_ps(yp.add(i + h), _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
        }
    }
    for i in n..h {
        let (a, b) = (x[i], x[i + h]);
        y[i] = a * cos[i] - b * sin[i];
        y[i + h] = a * sin[i] + b * cos[i];
    }
}
