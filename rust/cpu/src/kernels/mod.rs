//! SIMD kernels in tiers (scalar, NEON, NEON + dotprod, NEON + i8mm, AVX2, AVX-512 VNNI), chosen
//! once at run time ([`tier`]).
//!
//! The matmul kernels compute tiles of `C[j][i] = dot(A row i, B row j)` with `A` the weights
//! (any type) and `B` the activations already converted to the weight type's activation format
//! ([`act_type`]); the driver in [`crate::matmul`] splits a matmul into such tiles.

/// Defines the [`TileFn`] `$name`, which covers an `mr x nr` request with register tiles
/// `$inner::<R, C, $g>(k, a, lda, b, ldb, c, ldc)`: one activation row (GEMV) in tiles of `$GM`
/// weight rows (default `$MR`), several in `$MR x $NR` tiles, and 1-wide edges. Every tier's
/// kernels (x86 and ARM) are instantiated through it, inside `#[target_feature(enable = $feat)]`.
macro_rules! tiled {
    ($feat:literal, $name:ident, $inner:ident, $MR:literal, $NR:literal, $g:expr) => {
        $crate::kernels::tiled!($feat, $name, $inner, $MR, $NR, gemv $MR, $g);
    };
    ($feat:literal, $name:ident, $inner:ident, $MR:literal, $NR:literal, gemv $GM:literal, $g:expr) => {
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
            if nr == 1 {
                while i < mr {
                    let (ap, cp) = (a.add(i * lda), c.add(i));
                    if mr - i >= $GM {
                        $inner::<$GM, 1, $g>(k, ap, lda, b, ldb, cp, ldc);
                        i += $GM;
                    } else if mr - i >= $MR {
                        $inner::<$MR, 1, $g>(k, ap, lda, b, ldb, cp, ldc);
                        i += $MR;
                    } else {
                        $inner::<1, 1, $g>(k, ap, lda, b, ldb, cp, ldc);
                        i += 1;
                    }
                }
                return;
            }
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
#[allow(unused_imports)] // Only the architectures' tier modules use it.
pub(crate) use tiled;

/// Defines the [`TileFn`] `$name` for repacked weights: one group of `$rows` interleaved rows
/// (the `mr` the driver passes) times the activation rows, in kernels `$group::<N, $flag>(k, a,
/// b, ldb, c, ldc)` of `N` activation rows taken widest first from `[$($n),+]`, whose last
/// width must be 1.
macro_rules! packed_tiled {
    ($feat:literal, $name:ident, $group:ident, $flag:expr, $rows:expr, [$($n:literal),+]) => {
        /// Tile kernel on repacked weights (see [`TileFn`](crate::kernels::TileFn)).
        ///
        /// # Safety
        ///
        /// As [`TileFn`](crate::kernels::TileFn); `a` points to one group of repacked rows.
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            k: usize,
            a: *const u8,
            _lda: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
            mr: usize,
            nr: usize,
        ) {
            debug_assert_eq!(mr, $rows);
            let mut j = 0;
            while j < nr {
                let left = nr - j;
                // SAFETY: columns j.. of the tile (the caller's contract).
                let (bp, cp) = unsafe { (b.add(j * ldb), c.add(j * ldc)) };
                $(
                    if left >= $n {
                        // SAFETY: `$n` activation rows remain; the group is the caller's.
                        unsafe { $group::<$n, $flag>(k, a, bp, ldb, cp, ldc) };
                        j += $n;
                        continue;
                    }
                )+
            }
        }
    };
}

pub mod tier;

mod blocks;
pub mod ew;
pub mod repack;
mod scalar;
pub mod vec;

#[cfg(target_arch = "aarch64")]
mod arm;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use scalar::vec_dot as scalar_vec_dot;
pub use tier::{
    active_tier, detected_tier, force_tier, last_tier_used, reset_tier, tier_for, tier_name,
    tier_use_count, tiers_by_type, Tier, TIER_ENV,
};

use tessera_core::{DType, Error, Result};

/// A tile kernel: for `i < mr` and `j < nr`, `c[j * ldc + i] = dot(A_i, B_j)` over `k` values,
/// where `A_i` is the weight row at `a + i * lda` and `B_j` the activation row at `b + j * ldb`.
///
/// # Safety
///
/// The CPU supports the kernel's tier; `mr` and `nr` are at most the kernel's tile size; `k` is
/// a multiple of the weight type's block size; the rows hold `k` values of their types; the
/// `C` tile is writable.
pub type TileFn = unsafe fn(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    mr: usize,
    nr: usize,
);

/// A packed-panel GEMM over one chunk: for `i < m` and `j < n`,
/// `c[j * ldc + i] = dot(A_i, B_j)` over `k` values, where `A_i` is the float weight row at
/// `a + i * lda` and `B_j` is column `j % NR` of the activation panel at `b + (j / NR) * k * NR`
/// (panels hold `k` steps of `NR` f32, `panel[t * NR + j]`, zero past `n`).
///
/// # Safety
///
/// The CPU supports the kernel's tier; the rows and panels hold `k >= 1` values; `scratch`
/// holds `MR * KC` writable f32; the `C` block is writable.
pub type GemmFn = unsafe fn(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    m: usize,
    n: usize,
    scratch: *mut f32,
);

/// The packed GEMM serving `kernel` (plain F32 / F16 / BF16 weights on an x86 tier), as
/// (function, `MR`, `NR`, `KC`); `None` when its tier has none.
pub fn gemm_kernel(kernel: &MatKernel) -> Option<(GemmFn, usize, usize, usize)> {
    if kernel.repacked {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    let found = x86::gemm(kernel.tier, kernel.weight);
    #[cfg(not(target_arch = "x86_64"))]
    let found = None;
    found
}

/// The activation format for weights of `wt`: F32 for float weights (F16 and BF16 weights are
/// converted in the kernels, activations stay F32), ggml's `vec_dot_type` for quantized ones.
pub const fn act_type(wt: DType) -> DType {
    match wt {
        DType::F32 | DType::F16 | DType::BF16 | DType::I32 => DType::F32,
        other => other.vec_dot_type(),
    }
}

/// A matmul kernel for one weight type: its tier, activation format and tile.
#[derive(Clone, Copy, Debug)]
pub struct MatKernel {
    /// The tier the kernel belongs to.
    pub tier: Tier,
    /// The weight type.
    pub weight: DType,
    /// The activation format the kernel reads ([`act_type`]).
    pub act: DType,
    /// Rows of the weight tile.
    pub mr: usize,
    /// Columns (activation rows) of the tile.
    pub nr: usize,
    /// Whether the kernel reads repacked weights ([`repack`]); for Q4_0 / Q8_0 weights the
    /// activations are then in the "Q8_0 with sums" format (`act` is Q8_1 for its size): per
    /// block of 32, the f16 scale, the i16 sum of the quants and the Q8_0 quants.
    pub repacked: bool,
    tile: TileFn,
}

impl MatKernel {
    /// Runs the tile kernel (see [`TileFn`]).
    ///
    /// # Safety
    ///
    /// As [`TileFn`], except that the tier check is already done by construction.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn tile(
        &self,
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
        debug_assert!(mr <= self.mr && nr <= self.nr);
        // SAFETY: a MatKernel is only built for a tier the CPU supports; the rest is the
        // caller's contract.
        unsafe { (self.tile)(k, a, lda, b, ldb, c, ldc, mr, nr) }
    }

    /// Bytes of one activation row of `k` values.
    pub fn act_row_size(&self, k: usize) -> Result<usize> {
        self.act.row_size(k)
    }

    /// Converts `src` (one activation row) to the kernel's activation format in `dst`.
    pub fn quantize_act(&self, src: &[f32], dst: &mut [u8]) -> Result<()> {
        if self.repacked && self.act == DType::Q8_1 {
            return quantize_q8_0_sums(src, dst);
        }
        quantize_act(self.tier, self.act, src, dst)
    }
}

/// Whether `tier` has its own matmul kernel for weights of `dtype` (without falling back).
pub fn has_matmul_kernel(tier: Tier, dtype: DType) -> bool {
    raw_tile(tier, dtype).is_some()
}

fn raw_tile(tier: Tier, dtype: DType) -> Option<(TileFn, usize, usize)> {
    match tier {
        Tier::Scalar => scalar::tile(dtype),
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 => x86::avx2_tile(dtype),
        #[cfg(target_arch = "x86_64")]
        Tier::Avx512Vnni => x86::avx512_tile(dtype),
        #[cfg(target_arch = "aarch64")]
        Tier::Neon => arm::neon_tile(dtype),
        #[cfg(target_arch = "aarch64")]
        Tier::Dotprod => arm::dotprod_tile(dtype),
        #[cfg(target_arch = "aarch64")]
        Tier::I8mm => arm::i8mm_tile(dtype),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// The matmul kernel for weights of `dtype` under `tier` (falling back to lower tiers for
/// types `tier` has no kernel for); [`Error::TierUnsupported`] when the CPU lacks `tier`,
/// [`Error::UnsupportedType`] when no tier handles `dtype`.
pub fn matmul_kernel_in(tier: Tier, dtype: DType) -> Result<MatKernel> {
    if !tier.is_supported() {
        return Err(Error::TierUnsupported(tier.name().into()));
    }
    let t = tier::tier_for_in(tier, dtype);
    let (tile, mr, nr) = raw_tile(t, dtype)
        .ok_or_else(|| Error::dtype("mul_mat", dtype, "no CPU kernel for this weight type"))?;
    Ok(MatKernel { tier: t, weight: dtype, act: act_type(dtype), mr, nr, repacked: false, tile })
}

/// The kernel for weights of `dtype` stored in the [`repack`] layout of the active tier, if the
/// tier has one (AVX-512 VNNI: Q4_0, Q8_0, Q4_K and F16; AVX2: Q4_0, Q8_0 and F16; dotprod and
/// i8mm: Q4_0 and Q8_0).
pub fn repacked_kernel(dtype: DType) -> Option<MatKernel> {
    repacked_kernel_in(active_tier(), dtype)
}

/// As [`repacked_kernel`] under `tier` (`None` when the CPU lacks it): the kernel that reads
/// weights in `repack::PackLayout::for_tier(tier)`, whose `mr` is the rows of a group of the
/// type in that layout ([`repack::group_rows`]).
pub fn repacked_kernel_in(tier: Tier, dtype: DType) -> Option<MatKernel> {
    if !tier.is_supported() {
        return None;
    }
    let found: Option<(TileFn, usize, usize)> = match tier {
        #[cfg(target_arch = "x86_64")]
        Tier::Avx512Vnni => x86::avx512_packed_tile(dtype),
        #[cfg(target_arch = "x86_64")]
        Tier::Avx2 => x86::avx2_packed_tile(dtype),
        #[cfg(target_arch = "aarch64")]
        Tier::Dotprod => arm::dotprod_packed_tile(dtype),
        #[cfg(target_arch = "aarch64")]
        Tier::I8mm => arm::i8mm_packed_tile(dtype),
        _ => None,
    };
    let (tile, mr, nr) = found?;
    debug_assert_eq!(
        repack::PackLayout::for_tier(tier).map(|l| repack::group_rows(l, dtype)),
        Some(mr)
    );
    // Q4_0 / Q8_0: Q8_0 with sums (sized as Q8_1); Q4_K: plain Q8_K; F16: F32.
    let act = match dtype {
        DType::Q4_K => DType::Q8_K,
        DType::F16 => DType::F32,
        _ => DType::Q8_1,
    };
    Some(MatKernel { tier, weight: dtype, act, mr, nr, repacked: true, tile })
}

/// Quantizes `src` to Q8_0 blocks stored with the sums of their quants (see
/// [`MatKernel::repacked`]); `d` and the quants are exactly the reference Q8_0's.
pub fn quantize_q8_0_sums(src: &[f32], dst: &mut [u8]) -> Result<()> {
    let expected = DType::Q8_1.row_size(src.len())?;
    if dst.len() != expected {
        return Err(Error::DataLength {
            context: format!("quantize_q8_0_sums: {} values", src.len()),
            expected,
            actual: dst.len(),
        });
    }
    use blocks::{q8_0, q8_1, F16_BYTES};
    // The sum (an i16) where Q8_1 has `s`, the quants where Q8_1 has them.
    let sum_at = q8_1::S..q8_1::S + size_of::<i16>();
    #[cfg(target_arch = "x86_64")]
    if Tier::Avx2.is_supported() {
        for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(q8_1::BYTES)) {
            // SAFETY: AVX2 was checked; 32 values in, 32 quant bytes out.
            let (d, sum) = unsafe { x86::q8_block(x.as_ptr(), out.as_mut_ptr().add(q8_1::QS)) };
            out[..F16_BYTES].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
            out[sum_at.clone()].copy_from_slice(&(sum as i16).to_le_bytes());
        }
        return Ok(());
    }
    let mut tmp = [0u8; q8_0::BYTES];
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(q8_1::BYTES)) {
        tessera_core::quant::quantize_row(DType::Q8_0, x, &mut tmp)?;
        let sum: i32 = tmp[q8_0::QS..].iter().map(|&q| i32::from(q as i8)).sum();
        out[..F16_BYTES].copy_from_slice(&tmp[..F16_BYTES]);
        out[sum_at.clone()].copy_from_slice(&(sum as i16).to_le_bytes());
        out[q8_1::QS..].copy_from_slice(&tmp[q8_0::QS..]);
    }
    Ok(())
}

/// The matmul kernel for weights of `dtype` under the active tier.
pub fn matmul_kernel(dtype: DType) -> Result<MatKernel> {
    matmul_kernel_in(active_tier(), dtype)
}

/// Converts one activation row `src` to `act` (F32, Q8_0, Q8_1 or Q8_K) in `dst`
/// (`act.row_size(src.len())` bytes), with the kernels of `tier`; the result is bit-identical to
/// `tessera_core`'s reference quantizers on every tier.
pub fn quantize_act(tier: Tier, act: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    let expected = act.row_size(src.len())?;
    if dst.len() != expected {
        return Err(Error::DataLength {
            context: format!("quantize_act: {} values of {act}", src.len()),
            expected,
            actual: dst.len(),
        });
    }
    if !tier.is_supported() {
        return Err(Error::TierUnsupported(tier.name().into()));
    }
    #[cfg(target_arch = "x86_64")]
    if tier >= Tier::Avx2 && x86::quantize_act(act, src, dst) {
        return Ok(());
    }
    #[cfg(target_arch = "aarch64")]
    if tier >= Tier::Neon && arm::quantize_act(act, src, dst) {
        return Ok(());
    }
    tessera_core::quant::quantize_row(act, src, dst)
}
