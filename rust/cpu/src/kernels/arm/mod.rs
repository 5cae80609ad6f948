//! aarch64 tiers: NEON, NEON + dotprod (`sdot`), NEON + i8mm (`smmla`).
//!
//! `sdot` and `smmla` are emitted with `asm!` (their intrinsics are unstable on stable Rust)
//! inside functions compiled with `#[target_feature(enable = "neon,dotprod")]` /
//! `"neon,i8mm"`, reached only once the tier is known to be supported.

mod dotprod;
pub(crate) mod ew;
mod i8mm;
mod neon;

use super::TileFn;
use tessera_core::DType;

/// Splits a tile request into full `MR x NR` tiles and 1-wide edges (as the x86 one).
macro_rules! tiled {
    ($feat:literal, $name:ident, $inner:ident, $MR:literal, $NR:literal, $g:expr) => {
        /// Tile kernel (see [`TileFn`](crate::kernels::TileFn)).
        ///
        /// # Safety
        ///
        /// As [`TileFn`](crate::kernels::TileFn).
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            k: usize,
            a: *const u8,
            lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
            mr: usize,
            nr: usize,
        ) {
            let mut i = 0;
            while i < mr {
                let rs = if mr - i >= $MR { $MR } else { 1 };
                let mut j = 0;
                while j < nr {
                    let cs = if nr - j >= $NR { $NR } else { 1 };
                    let (ap, bp, cp) = (a.add(i * lda), b.add(j * ldb), c.add(j * ldc + i));
                    match (rs == $MR, cs == $NR) {
                        (true, true) => $inner::<$MR, $NR, $g>(k, ap, lda, bp, ldb, cp, ldc),
                        (true, false) => $inner::<$MR, 1, $g>(k, ap, lda, bp, ldb, cp, ldc),
                        (false, true) => $inner::<1, $NR, $g>(k, ap, lda, bp, ldb, cp, ldc),
                        (false, false) => $inner::<1, 1, $g>(k, ap, lda, bp, ldb, cp, ldc),
                    }
                    j += cs;
                }
                i += rs;
            }
        }
    };
}
pub(super) use tiled;

/// The f16 at `p` (unaligned) as f32.
///
/// # Safety
///
/// `p` must point to two readable bytes.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: caller's contract.
    half::f16::from_bits(unsafe { std::ptr::read_unaligned(p.cast::<u16>()) }).to_f32()
}

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
