//! The AVX2 + FMA + F16C tier: float, Q8_0, Q4_0 and Q4_K kernels (see [`super::kern`]).

super::kern::x86_tier!("avx2,fma,f16c", false, (4, 2), (4, 2), (2, 2));

/// Converts an activation row with AVX2 when a kernel exists for `act`; `false` otherwise.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    let _ = (act, src, dst);
    false
}
