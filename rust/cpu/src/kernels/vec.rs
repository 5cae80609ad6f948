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
pub const LANES: usize = 16;

#[inline(always)]
pub(super) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
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
pub(super) fn sum_lanes(mut acc: [f32; LANES]) -> f32 {
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};

    /// F16 bits to F32 with F16C, 8 values per instruction; the tail through `half`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(super) fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let full = n / 8 * 8;
        for (s, d) in src[..full].chunks_exact(8).zip(dst[..full].chunks_exact_mut(8)) {
            // SAFETY: `s` holds 8 readable u16 and `d` 8 writable f32 (exact chunks); F16C and
            // AVX are enabled here.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast::<__m128i>()));
                _mm256_storeu_ps(d.as_mut_ptr(), v);
            }
        }
        super::f16_to_f32_half(&src[full..n], &mut dst[full..n]);
    }

    /// [`super::f16_rows_to_f32`] with F16C (shapes checked by the caller).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn f16_rows_to_f32<'a>(
        row: impl Fn(usize) -> &'a [u16],
        rows: usize,
        n: usize,
        dst: &mut [f32],
    ) {
        for (r, out) in dst.chunks_exact_mut(n).take(rows).enumerate() {
            f16_to_f32(row(r), out);
        }
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

/// `y[i] *= s`.
pub fn scale(y: &mut [f32], s: f32) {
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::scale(y, s) },
        _ => scale_body(y, s),
    }
}

/// F16 values (their bits) to F32, over the common length: with F16C in the x86 tiers, else
/// through the `half` crate (NEON when the CPU has it, detected at run time).
pub fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::f16_to_f32(src, dst) },
        #[cfg(target_arch = "aarch64")]
        Flavor::ArmFma => arm::f16_to_f32(src, dst),
        _ => f16_to_f32_half(src, dst),
    }
}

/// `rows` rows of `n` F16 values (their bits), `stride` values apart from `src`, to F32 in
/// consecutive rows of `n` in `dst`: [`f16_to_f32`] per row, with one tier dispatch for the
/// whole block (a block of keys or values of one head of a KV cache, whose rows interleave the
/// heads).
///
/// # Safety
///
/// Row `r < rows` at `src + r * stride` holds `n` readable, initialized `u16`.
///
/// # Panics
///
/// When `dst` is shorter than `rows * n`.
pub unsafe fn f16_rows_to_f32(
    src: *const u16,
    stride: usize,
    rows: usize,
    n: usize,
    dst: &mut [f32],
) {
    assert!(dst.len() >= rows * n, "f16_rows_to_f32: shapes");
    if n == 0 {
        return;
    }
    let row = |r: usize| {
        // SAFETY: row r holds n readable u16 (caller).
        unsafe { std::slice::from_raw_parts(src.wrapping_add(r * stride), n) }
    };
    match flavor() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Flavor::X86Fma => unsafe { x86::f16_rows_to_f32(row, rows, n, dst) },
        #[cfg(target_arch = "aarch64")]
        Flavor::ArmFma => {
            for (r, out) in dst.chunks_exact_mut(n).take(rows).enumerate() {
                arm::f16_to_f32(row(r), out);
            }
        }
        _ => {
            for (r, out) in dst.chunks_exact_mut(n).take(rows).enumerate() {
                f16_to_f32_half(row(r), out);
            }
        }
    }
}

/// Asks the CPU to bring the 64-byte lines of `bytes` bytes from `p` into L1 ahead of their
/// use (`prefetcht0` on x86_64, `prfm pldl1keep` on aarch64, nothing elsewhere). A hint: any
/// address is harmless, nothing is read.
pub fn prefetch_lines(p: *const u8, bytes: usize) {
    for at in (0..bytes).step_by(64) {
        let line = p.wrapping_add(at);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE is baseline on x86_64; a prefetch of any address neither faults nor
        // reads memory into the program.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast())
        };
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `prfm` is a hint in the base instruction set; it neither faults nor changes
        // registers or memory.
        unsafe {
            std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) line, options(nostack, readonly, preserves_flags))
        };
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let _ = line;
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::{float32x4_t, vst1q_f32};

    /// F16 bits to F32, 4 values per `fcvtl` (base ARMv8-A: no FP16 extension needed, no
    /// run-time check); the tail through `half`.
    pub(super) fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let full = n / 4 * 4;
        for (s, d) in src[..full].chunks_exact(4).zip(dst[..full].chunks_exact_mut(4)) {
            let bits = u64::from(s[0])
                | u64::from(s[1]) << 16
                | u64::from(s[2]) << 32
                | u64::from(s[3]) << 48;
            let v: float32x4_t;
            // SAFETY: `fcvtl` is in the base ARMv8-A SIMD instructions (NEON is baseline on
            // aarch64); it reads and writes registers only.
            unsafe {
                std::arch::asm!(
                    "fmov {t:d}, {bits}",
                    "fcvtl {v:v}.4s, {t:v}.4h",
                    bits = in(reg) bits,
                    t = out(vreg) _,
                    v = lateout(vreg) v,
                    options(pure, nomem, nostack, preserves_flags)
                )
            };
            // SAFETY: `d` holds 4 writable f32 (an exact chunk).
            unsafe { vst1q_f32(d.as_mut_ptr(), v) };
        }
        super::f16_to_f32_half(&src[full..n], &mut dst[full..n]);
    }
}

/// [`f16_to_f32`] through the `half` crate.
fn f16_to_f32_half(src: &[u16], dst: &mut [f32]) {
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
pub(crate) mod tests {
    use super::*;

    /// `n` deterministic values in [-1, 1) (shared with the attention tiles' tests).
    pub(crate) fn data(n: usize, seed: u32) -> Vec<f32> {
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
    fn f16_conversion_is_exact() {
        // Every bit pattern (vector body and tail), against `half`'s scalar conversion.
        let bits: Vec<u16> = (0..=u16::MAX).chain([0x3c00, 0x3555, 0xfc00]).collect();
        let mut out = vec![0f32; bits.len()];
        f16_to_f32(&bits, &mut out);
        for (b, o) in bits.iter().zip(&out) {
            let want = f16::from_bits(*b).to_f32();
            if want.is_nan() {
                assert!(o.is_nan(), "{b:#06x}: {o}");
            } else {
                assert_eq!(want.to_bits(), o.to_bits(), "{b:#06x}");
            }
        }
    }

    #[test]
    fn f16_rows_convert_each_row_and_skip_the_gaps() {
        // 5 rows of 19 values, 40 apart: rows are converted into consecutive rows of dst, the
        // values between rows never read into it.
        let (rows, n, stride) = (5, 19, 40);
        let src: Vec<u16> = (0..(rows - 1) * stride + n).map(|i| 0x3c00 + i as u16).collect();
        let mut out = vec![f32::NAN; rows * n + 3];
        // SAFETY: row r < rows starts at r * stride < src.len() - n + 1.
        unsafe { f16_rows_to_f32(src.as_ptr(), stride, rows, n, &mut out) };
        for r in 0..rows {
            for c in 0..n {
                let want = f16::from_bits(src[r * stride + c]).to_f32();
                assert_eq!(out[r * n + c].to_bits(), want.to_bits(), "row {r} col {c}");
            }
        }
        assert!(out[rows * n..].iter().all(|v| v.is_nan()), "written past the rows");
    }
}
