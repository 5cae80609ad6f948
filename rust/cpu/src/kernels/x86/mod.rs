//! x86_64 tiers: AVX2 + FMA + F16C, and AVX-512 VNNI.

mod avx2;
mod avx512;
pub(crate) mod ew;
mod gemm;
mod iq4;
mod kern;
mod legacy;
mod packed_avx2;
mod packed_f16;
mod packed_k_avx2;
pub(crate) mod prefetch;

pub use prefetch::{sites as prefetch_sites, PREFETCH_ENV};
mod quant_act;

use super::TileFn;
use tessera_core::DType;

/// The AVX2 tile kernel for weights of `wt`, with its tile size.
pub(super) fn avx2_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    avx2::tile(wt).or_else(|| iq4::avx2::tile(wt))
}

/// The AVX-512 VNNI tile kernel for weights of `wt`, with its tile size.
pub(super) fn avx512_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    avx512::tile(wt).or_else(|| iq4::avx512::tile(wt))
}

/// The AVX-512 VNNI kernel for repacked weights of `wt`, with its tile size.
pub(super) fn avx512_packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    if packed_f16::reads(wt) {
        return Some(packed_f16::avx512_tile());
    }
    avx512::packed_tile(wt).or_else(|| iq4::packed512::packed_tile(wt))
}

/// The AVX2 kernel for repacked (8 x 8, F16: 8 x 32) weights of `wt` (Q4_0 / Q5_0 / Q8_0 in
/// `packed_avx2`, the k-quants in `packed_k_avx2`), with its tile size.
pub(super) fn avx2_packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    if packed_f16::reads(wt) {
        return Some(packed_f16::avx2_tile());
    }
    packed_avx2::packed_tile(wt)
        .or_else(|| packed_k_avx2::packed_tile(wt))
        .or_else(|| iq4::packed256::packed_tile(wt))
}

/// The packed GEMM of `tier` (AVX2 or AVX-512 VNNI) for weights of `wt`: function, `MR`,
/// `NR`, `KC`.
pub(super) fn gemm(
    tier: super::Tier,
    wt: DType,
    repacked: bool,
) -> Option<(super::GemmFn, usize, usize, usize)> {
    match tier {
        super::Tier::Avx2 => gemm::avx2(wt, repacked),
        super::Tier::Avx512Vnni => gemm::avx512(wt, repacked),
        _ => None,
    }
}

pub(super) use avx2::q8_block;

/// Converts an activation row with AVX2 when a kernel exists for `act`; `false` otherwise.
/// Only called once the AVX2 tier is known to be supported.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    avx2::quantize_act(act, src, dst)
}
