//! aarch64 tiers: NEON, NEON + dotprod (`sdot`), NEON + i8mm (`smmla`).

mod dotprod;
mod i8mm;
mod neon;

use super::TileFn;
use tessera_core::DType;

/// The NEON tile kernel for weights of `wt`, with its tile size.
pub(super) fn neon_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    neon::tile(wt)
}

/// The dotprod tile kernel for weights of `wt`, with its tile size.
pub(super) fn dotprod_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    dotprod::tile(wt)
}

/// The i8mm tile kernel for weights of `wt`, with its tile size.
pub(super) fn i8mm_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    i8mm::tile(wt)
}

/// Converts an activation row with NEON when a kernel exists for `act`; `false` otherwise.
/// Only called once the NEON tier is known to be supported.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    neon::quantize_act(act, src, dst)
}
