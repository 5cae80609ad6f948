//! The AVX2 Q8_K activation quantizer (the activations of every k-quant matmul), bit-identical
//! to `tessera_core`'s reference `quantize_row(DType::Q8_K, ..)`: the same lane-wise `abs_max`,
//! the first value of largest magnitude as `max`, `iscale = -127 / max`, quants by ggml's
//! `nearest_int` (the `+ 12582912` trick, a separate multiply and add, never fused), capped at
//! 127 and truncated to i8, and the sixteen sums of sixteen quants.

use crate::kernels::blocks::q8_k;
use std::arch::x86_64::*;

/// Bytes of one Q8_K block: f32 `d`, 256 quants, 16 i16 sums.
const BLOCK: usize = q8_k::BYTES;

/// Quantizes `src` (a multiple of 256 values) to the Q8_K blocks of `dst`.
///
/// # Safety
///
/// The CPU supports AVX2, FMA and F16C; `dst` holds one Q8_K block per 256 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_row_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(256).zip(dst.chunks_exact_mut(BLOCK)) {
        // SAFETY: 256 values in, one whole block out (the chunks' lengths).
        unsafe { q8_k_block(x.as_ptr(), out.as_mut_ptr()) };
    }
}

/// The reference `abs_max` of 256 values: eight lanes of `if m > a { m } else { a }` over the
/// 8-value chunks, then the same fold over the lanes.
///
/// Without NaNs that is the plain maximum, which for magnitudes (non-negative floats) is the
/// maximum of their bits as integers: two independent chains of `vpmaxsd`, then a horizontal
/// maximum. A NaN magnitude (bits above infinity's) makes the reference depend on the order;
/// the chunks are then folded one by one with `vmaxps(m, a)`, which is exactly its step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn abs_max(x: *const f32) -> f32 {
    // SAFETY: the caller guarantees AVX2 and 256 readable f32 at `x`: the loads below.
    unsafe {
        let mask = _mm256_set1_epi32(0x7fff_ffff);
        let mut m = [_mm256_setzero_si256(); 2];
        for c in (0..32).step_by(2) {
            for (t, mt) in m.iter_mut().enumerate() {
                let v = _mm256_loadu_si256(x.add(8 * (c + t)).cast());
                *mt = _mm256_max_epi32(*mt, _mm256_and_si256(v, mask));
            }
        }
        let m8 = _mm256_max_epi32(m[0], m[1]);
        let m4 = _mm_max_epi32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256::<1>(m8));
        let m2 = _mm_max_epi32(m4, _mm_shuffle_epi32::<0b01_00_11_10>(m4));
        let m1 = _mm_max_epi32(m2, _mm_shuffle_epi32::<0b10_11_00_01>(m2));
        let bits = _mm_cvtsi128_si32(m1);
        if bits <= 0x7f80_0000 {
            return f32::from_bits(bits as u32);
        }
        let sign = _mm256_set1_ps(-0.0);
        let mut ms = _mm256_setzero_ps();
        for c in 0..32 {
            ms = _mm256_max_ps(ms, _mm256_andnot_ps(sign, _mm256_loadu_ps(x.add(8 * c))));
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), ms);
        let mut amax = 0f32;
        for a in lanes {
            amax = if amax > a { amax } else { a };
        }
        amax
    }
}

/// The first of 256 values whose magnitude is `amax` (`amax` itself when there is none, e.g.
/// for a NaN `amax`), as the reference's strict `ax > amax` scan finds it.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn first_of_magnitude(x: *const f32, amax: f32) -> f32 {
    // SAFETY: the caller guarantees AVX2 and 256 readable f32 at `x`: the loads below.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let av = _mm256_set1_ps(amax);
        for c in 0..32 {
            let v = _mm256_loadu_ps(x.add(8 * c));
            let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, v), av);
            let mask = _mm256_movemask_ps(eq);
            if mask != 0 {
                return *x.add(8 * c + mask.trailing_zeros() as usize);
            }
        }
        amax
    }
}

/// Quantizes 256 values at `x` to one Q8_K block at `out`.
///
/// # Safety
///
/// The CPU supports AVX2; `x` points to 256 readable f32 and `out` to one writable Q8_K block.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_k_block(x: *const f32, out: *mut u8) {
    // SAFETY: the caller guarantees AVX2, 256 readable f32 at `x` and one writable Q8_K block at
    // `out`: every load and store below is within them.
    unsafe {
        let amax = abs_max(x);
        if amax == 0.0 {
            std::ptr::write_bytes(out, 0, BLOCK);
            return;
        }
        let max = first_of_magnitude(x, amax);
        let iscale = -127.0 / max;
        // With a finite iscale, |iscale * v| < 127.5 for every number v and a NaN v gives its
        // payload (0..2^22), so after the cap at 127 the quants are in -127..=127 and the
        // truncation to i8 is a no-op; it matters only for an infinite iscale (a tiny |max|).
        let in_range = iscale.is_finite();
        let isv = _mm256_set1_ps(iscale);
        let magic = _mm256_set1_ps(12_582_912.0);
        let mant = _mm256_set1_epi32(0x007f_ffff);
        let bias = _mm256_set1_epi32(0x0040_0000);
        let cap = _mm256_set1_epi32(127);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let qs = out.add(q8_k::QS);
        // Per group of 16 quants, their sums in eight lanes.
        let mut gsum = [_mm256_setzero_si256(); 16];
        for ch in 0..8 {
            let mut r = [_mm256_setzero_si256(); 4];
            for (t, rt) in r.iter_mut().enumerate() {
                let v = _mm256_loadu_ps(x.add(32 * ch + 8 * t));
                // nearest_int(iscale * v): the mantissa of `iscale * v + 1.5 * 2^23`, minus 2^22.
                let f = _mm256_add_ps(_mm256_mul_ps(isv, v), magic);
                let n = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(f), mant), bias);
                // min(127), then `as i8` (the low byte, sign-extended).
                let n = _mm256_min_epi32(n, cap);
                *rt =
                    if in_range { n } else { _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(n)) };
            }
            let p =
                _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
            // The packs interleave 128-bit lanes: restore the order of the 8-value groups.
            _mm256_storeu_si256(qs.add(32 * ch).cast(), _mm256_permutevar8x32_epi32(p, order));
            gsum[2 * ch] = _mm256_add_epi32(r[0], r[1]);
            gsum[2 * ch + 1] = _mm256_add_epi32(r[2], r[3]);
        }
        // Horizontal sums of four groups at a time: two rounds of hadd leave
        // [g0 g1 g2 g3 | g0 g1 g2 g3] halves, added together.
        let mut sums = [_mm_setzero_si128(); 4];
        for (q, s) in sums.iter_mut().enumerate() {
            let g = &gsum[4 * q..4 * q + 4];
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(g[0], g[1]), _mm256_hadd_epi32(g[2], g[3]));
            *s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        }
        let bsums = out.add(q8_k::BSUMS);
        _mm_storeu_si128(bsums.cast(), _mm_packs_epi32(sums[0], sums[1]));
        _mm_storeu_si128(bsums.add(16).cast(), _mm_packs_epi32(sums[2], sums[3]));
        let d = 1.0 / iscale;
        std::ptr::copy_nonoverlapping(d.to_le_bytes().as_ptr(), out, size_of::<f32>());
    }
}
