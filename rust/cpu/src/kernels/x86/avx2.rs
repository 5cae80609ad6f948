//! The AVX2 + FMA + F16C tier: float, Q8_0, Q4_0 and k-quant kernels (see [`super::kern`]),
//! Q4_1 / Q5_0 / Q5_1 kernels (see [`super::legacy`]) and the activation quantizers.

use super::kern::X86Tiles;
// (x86_tier! imports the block modules of its kernels: q8_0 among them.)
use crate::kernels::blocks::{q8_1, F16_BYTES};
use crate::kernels::Tiles;

/// The register tiles of the AVX2 kernels (16 ymm registers), for several activation rows
/// (`mr x nr`) and for one (`gemv` weight rows side by side).
const AVX2_TILES: X86Tiles = X86Tiles {
    float: Tiles::new(4, 2).with_gemv(6),
    q8_0_q4_0: Tiles::new(4, 2),
    q4_k_q5_k: Tiles::new(1, 8).with_gemv(2),
    q2_k_q3_k_q6_k: Tiles::new(1, 8).with_gemv(4),
    q4_1_q5_0_q5_1: Tiles::new(4, 2),
};

super::kern::x86_tier!("avx2,fma,f16c", vnni: false, AVX2_TILES);

/// Quantizes 32 values at `x` to Q8_0 exactly as the reference (`d = amax / 127`, quants
/// rounded half away from zero); returns the f32 scale and the sum of the quants.
///
/// # Safety
///
/// The CPU supports AVX2; `x` points to 32 readable f32 and `q` to 32 writable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_block(x: *const f32, q: *mut u8) -> (f32, i32) {
    // SAFETY: the caller guarantees AVX2 and 32 readable f32 at `x`, 32 writable bytes at `q`: the
    // four loads and the one store below.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.add(8 * i)));
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for vi in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vi));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let idv = _mm256_set1_ps(id);
        let half = _mm256_set1_ps(0.5);
        let mhalf = _mm256_set1_ps(-0.5);
        let mut r = [_mm256_setzero_si256(); 4];
        let mut sum = _mm256_setzero_si256();
        for i in 0..4 {
            let s = _mm256_mul_ps(v[i], idv);
            let t = _mm256_cvttps_epi32(s);
            let f = _mm256_sub_ps(s, _mm256_cvtepi32_ps(t));
            let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(f, half));
            let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(f, mhalf));
            r[i] = _mm256_add_epi32(_mm256_sub_epi32(t, up), down);
            sum = _mm256_add_epi32(sum, r[i]);
        }
        let p01 = _mm256_packs_epi32(r[0], r[1]);
        let p23 = _mm256_packs_epi32(r[2], r[3]);
        let p = _mm256_packs_epi16(p01, p23);
        // The packs interleave 128-bit lanes: restore the order of the 8-value groups.
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.cast(), p);
        let s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256::<1>(sum));
        let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32::<0b01_00_11_10>(s4));
        let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b10_11_00_01>(s2));
        (d, _mm_cvtsi128_si32(s1))
    }
}

/// Converts an activation row with AVX2 when a kernel exists for `act` (Q8_0, Q8_1, Q8_K);
/// `false` otherwise. Only called once the AVX2 tier is known to be supported.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    let (bs, qs) = match act {
        DType::Q8_0 => (q8_0::BYTES, q8_0::QS),
        DType::Q8_1 => (q8_1::BYTES, q8_1::QS),
        DType::Q8_K => {
            // SAFETY: the tier was checked; dst has one block per 256 values (checked by the
            // caller).
            unsafe { super::quant_act::quantize_row_q8_k(src, dst) };
            return true;
        }
        _ => return false,
    };
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bs)) {
        // SAFETY: the tier was checked; 32 values in, 32 quant bytes out (lengths checked by
        // the caller: dst has one block per 32 values).
        let (d, sum) = unsafe { q8_block(x.as_ptr(), out.as_mut_ptr().add(qs)) };
        out[..F16_BYTES].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        if act == DType::Q8_1 {
            let s = half::f16::from_f32(sum as f32 * d).to_bits().to_le_bytes();
            out[q8_1::S..q8_1::S + F16_BYTES].copy_from_slice(&s);
        }
    }
    true
}
