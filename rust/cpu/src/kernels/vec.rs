//! Vector primitives of the attention kernel on F32 slices: dot product, `y += w x`, `y *= s`,
//! and F16 to F32 conversion.
//!
//! Each is one plain-Rust body over 16-lane blocks, compiled three ways: inside an
//! `avx2,fma,f16c` function on x86_64 (where LLVM turns the blocks into AVX2 FMAs), directly on
//! aarch64 (where NEON and FMA are baseline), and without fused multiply-adds for the scalar
//! tier. The active kernel tier picks the version at run time, as for every other kernel, so
//! the crate is never compiled with target features a CPU may lack.

use super::tier::{active_tier, Tier};
use half::f16;

/// Lanes of the blocked loops (one AVX-512 register, four NEON ones).
const LANES: usize = 16;

#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

#[inline(always)]
fn dot_body<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            acc[l] = madd::<FMA>(x[l], y[l], acc[l]);
        }
    }
    let mut tail = 0f32;
    for (x, y) in ar.iter().zip(br) {
        tail = madd::<FMA>(*x, *y, tail);
    }
    sum_lanes(acc) + tail
}

/// The sum of the lanes, reduced pairwise.
#[inline(always)]
fn sum_lanes(mut acc: [f32; LANES]) -> f32 {
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    acc[0]
}

#[inline(always)]
fn axpy_body<const FMA: bool>(y: &mut [f32], x: &[f32], w: f32) {
    let n = y.len().min(x.len());
    let (y, x) = (&mut y[..n], &x[..n]);
    let mut yc = y.chunks_exact_mut(LANES);
    let mut xc = x.chunks_exact(LANES);
    for (yb, xb) in (&mut yc).zip(&mut xc) {
        for l in 0..LANES {
            yb[l] = madd::<FMA>(xb[l], w, yb[l]);
        }
    }
    for (yv, xv) in yc.into_remainder().iter_mut().zip(xc.remainder()) {
        *yv = madd::<FMA>(*xv, w, *yv);
    }
}

#[inline(always)]
fn scale_body(y: &mut [f32], s: f32) {
    for v in y.iter_mut() {
        *v *= s;
    }
}

/// `out[i * nk + j] = a_i . b_j` for rows `a_i` of `a` (`na` rows of `d`) and `b_j` of `b`
/// (`nk` rows of `d`), in `TI x TJ` register tiles of [`LANES`]-wide accumulators (each loaded
/// `a` value used `TJ` times, each `b` value `TI` times); the tile must fit the registers (4 x 4
/// in AVX-512's 32, 2 x 2 in AVX2's 16 and NEON's 32 of 4 lanes), or it spills.
#[inline(always)]
fn dots_body<const FMA: bool, const TI: usize, const TJ: usize>(
    a: &[f32],
    na: usize,
    b: &[f32],
    nk: usize,
    d: usize,
    out: &mut [f32],
) {
    let tile = |i0: usize, j0: usize, ni: usize, nj: usize, out: &mut [f32]| {
        let mut acc = [[[0f32; LANES]; TJ]; TI];
        let full = d / LANES * LANES;
        let mut t = 0;
        while t < full {
            for (ii, accs) in acc.iter_mut().enumerate().take(ni) {
                let x = &a[(i0 + ii) * d + t..][..LANES];
                for (jj, acc) in accs.iter_mut().enumerate().take(nj) {
                    let y = &b[(j0 + jj) * d + t..][..LANES];
                    for l in 0..LANES {
                        acc[l] = madd::<FMA>(x[l], y[l], acc[l]);
                    }
                }
            }
            t += LANES;
        }
        for ii in 0..ni {
            for jj in 0..nj {
                let mut v = sum_lanes(acc[ii][jj]);
                for tt in full..d {
                    v = madd::<FMA>(a[(i0 + ii) * d + tt], b[(j0 + jj) * d + tt], v);
                }
                out[(i0 + ii) * nk + j0 + jj] = v;
            }
        }
    };
    for i0 in (0..na).step_by(TI) {
        for j0 in (0..nk).step_by(TJ) {
            tile(i0, j0, (na - i0).min(TI), (nk - j0).min(TJ), out);
        }
    }
}

/// `acc[i] += sum_j p[i * nk + j] v_j` for `na` accumulator rows of `dv` and `nk` value rows,
/// 64 columns at a time so that a row's accumulator stays in registers across the keys; a zero
/// weight (a hidden key) is skipped.
#[inline(always)]
fn weighted_sum_body<const FMA: bool>(
    acc: &mut [f32],
    na: usize,
    p: &[f32],
    v: &[f32],
    nk: usize,
    dv: usize,
) {
    const C: usize = 64;
    for i in 0..na {
        let row = &mut acc[i * dv..(i + 1) * dv];
        let w = &p[i * nk..(i + 1) * nk];
        let mut c0 = 0;
        while c0 < dv {
            let c1 = (c0 + C).min(dv);
            let mut local = [0f32; C];
            local[..c1 - c0].copy_from_slice(&row[c0..c1]);
            for (j, &pj) in w.iter().enumerate() {
                if pj == 0.0 {
                    continue;
                }
                let x = &v[j * dv + c0..j * dv + c1];
                if x.len() == C {
                    for l in 0..C {
                        local[l] = madd::<FMA>(x[l], pj, local[l]);
                    }
                } else {
                    for (l, &xv) in x.iter().enumerate() {
                        local[l] = madd::<FMA>(xv, pj, local[l]);
                    }
                }
            }
            row[c0..c1].copy_from_slice(&local[..c1 - c0]);
            c0 = c1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dots(a: &[f32], na: usize, b: &[f32], nk: usize, d: usize, out: &mut [f32]) {
        super::dots_body::<true, 2, 2>(a, na, b, nk, d, out)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) fn dots_avx512(
        a: &[f32],
        na: usize,
        b: &[f32],
        nk: usize,
        d: usize,
        out: &mut [f32],
    ) {
        super::dots_body::<true, 4, 4>(a, na, b, nk, d, out)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn weighted_sum(
        acc: &mut [f32],
        na: usize,
        p: &[f32],
        v: &[f32],
        nk: usize,
        dv: usize,
    ) {
        super::weighted_sum_body::<true>(acc, na, p, v, nk, dv)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
        super::dot_body::<true>(a, b)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn axpy(y: &mut [f32], x: &[f32], w: f32) {
        super::axpy_body::<true>(y, x, w)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn scale(y: &mut [f32], s: f32) {
        super::scale_body(y, s)
    }
}

/// Which body the active tier runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Scalar,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    X86Fma,
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    ArmFma,
}

fn flavor() -> Flavor {
    match active_tier() {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 | Tier::Avx512Vnni => Flavor::X86Fma,
        #[cfg(target_arch = "aarch64")]
        Tier::Neon | Tier::Dotprod | Tier::I8mm => Flavor::ArmFma,
        _ => Flavor::Scalar,
    }
}

/// `sum a[i] b[i]` over the common length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the active tier is AVX2 or higher, whose features (AVX2, FMA, F16C) the CPU
        // was checked to have when the tier was chosen.
        Flavor::X86Fma => unsafe { x86::dot(a, b) },
        Flavor::ArmFma => dot_body::<true>(a, b),
        _ => dot_body::<false>(a, b),
    }
}

/// `y[i] += w x[i]` over the common length.
pub fn axpy(y: &mut [f32], x: &[f32], w: f32) {
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::axpy(y, x, w) },
        Flavor::ArmFma => axpy_body::<true>(y, x, w),
        _ => axpy_body::<false>(y, x, w),
    }
}

/// `out[i * nk + j] = a_i . b_j`: every row of `a` (`na` rows of `d` values) against every row
/// of `b` (`nk` rows of `d`), `out` holding `na * nk` values.
///
/// # Panics
///
/// When a slice is shorter than its rows need (callers size them).
pub fn dots(a: &[f32], na: usize, b: &[f32], nk: usize, d: usize, out: &mut [f32]) {
    assert!(a.len() >= na * d && b.len() >= nk * d && out.len() >= na * nk, "dots: slice lengths");
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX-512 VNNI tier was chosen only on a CPU with AVX-512 F (and AVX2, FMA,
        // F16C).
        Flavor::X86Fma if active_tier() == Tier::Avx512Vnni => unsafe {
            x86::dots_avx512(a, na, b, nk, d, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::dots(a, na, b, nk, d, out) },
        Flavor::ArmFma => dots_body::<true, 2, 2>(a, na, b, nk, d, out),
        _ => dots_body::<false, 2, 2>(a, na, b, nk, d, out),
    }
}

/// `acc[i] += sum_j p[i * nk + j] v_j` for `na` rows of `dv` values in `acc` and `nk` rows of
/// `v`; zero weights are skipped.
///
/// # Panics
///
/// When a slice is shorter than its rows need (callers size them).
pub fn weighted_sum(acc: &mut [f32], na: usize, p: &[f32], v: &[f32], nk: usize, dv: usize) {
    assert!(
        acc.len() >= na * dv && p.len() >= na * nk && v.len() >= nk * dv,
        "weighted_sum: slice lengths"
    );
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::weighted_sum(acc, na, p, v, nk, dv) },
        Flavor::ArmFma => weighted_sum_body::<true>(acc, na, p, v, nk, dv),
        _ => weighted_sum_body::<false>(acc, na, p, v, nk, dv),
    }
}

/// `y[i] *= s`.
pub fn scale(y: &mut [f32], s: f32) {
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::scale(y, s) },
        _ => scale_body(y, s),
    }
}

/// F16 values (their bits) to F32, over the common length (the `half` crate converts with
/// F16C / NEON when the CPU has them, detected at run time).
pub fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len().min(dst.len());
    let halves: &[f16] = bytemuck_f16(&src[..n]);
    halves.convert_to_f32_slice(&mut dst[..n]);
}

/// `u16` bits as `f16` values (same size and alignment, every bit pattern valid).
fn bytemuck_f16(bits: &[u16]) -> &[f16] {
    // SAFETY: `f16` is `repr(transparent)` over `u16`, so the slices have the same layout and
    // every `u16` is a valid `f16`.
    unsafe { std::slice::from_raw_parts(bits.as_ptr().cast::<f16>(), bits.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn dot_axpy_scale_match_f64_on_every_length() {
        for n in [0, 1, 15, 16, 17, 33, 256, 1000] {
            let (a, b) = (data(n, 1), data(n, 7));
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
            let got = f64::from(dot(&a, &b));
            assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "dot n={n}: {got} vs {want}");
            let mut y = data(n, 3);
            let y0 = y.clone();
            axpy(&mut y, &a, 0.75);
            for i in 0..n {
                assert!((y[i] - (y0[i] + 0.75 * a[i])).abs() <= 1e-6, "axpy n={n} i={i}");
            }
            scale(&mut y, -2.0);
            for i in 0..n {
                assert!((y[i] + 2.0 * (y0[i] + 0.75 * a[i])).abs() <= 1e-5, "scale n={n} i={i}");
            }
        }
    }

    #[test]
    fn dots_and_weighted_sums_match_f64_on_odd_shapes() {
        for (na, nk, d) in [(1, 1, 1), (3, 5, 17), (8, 64, 256), (5, 7, 33)] {
            let (a, b) = (data(na * d, 2), data(nk * d, 5));
            let mut out = vec![0f32; na * nk];
            dots(&a, na, &b, nk, d, &mut out);
            for i in 0..na {
                for j in 0..nk {
                    let want: f64 =
                        (0..d).map(|t| f64::from(a[i * d + t]) * f64::from(b[j * d + t])).sum();
                    let got = f64::from(out[i * nk + j]);
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "dots {na}x{nk}x{d} [{i},{j}]"
                    );
                }
            }
            let dv = d + 3;
            let (mut acc, p, v) = (data(na * dv, 9), data(na * nk, 11), data(nk * dv, 13));
            let mut p = p;
            p[0] = 0.0;
            let acc0 = acc.clone();
            weighted_sum(&mut acc, na, &p, &v, nk, dv);
            for i in 0..na {
                for c in 0..dv {
                    let want = f64::from(acc0[i * dv + c])
                        + (0..nk)
                            .map(|j| f64::from(p[i * nk + j]) * f64::from(v[j * dv + c]))
                            .sum::<f64>();
                    assert!(
                        (f64::from(acc[i * dv + c]) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "weighted_sum [{i},{c}]"
                    );
                }
            }
        }
    }

    #[test]
    fn f16_conversion_is_exact() {
        let bits: Vec<u16> = vec![0x0000, 0x3c00, 0xbc00, 0x7bff, 0x0001, 0xfc00, 0x3555];
        let mut out = vec![0f32; bits.len()];
        f16_to_f32(&bits, &mut out);
        for (b, o) in bits.iter().zip(&out) {
            assert_eq!(f16::from_bits(*b).to_f32().to_bits(), o.to_bits());
        }
    }
}
