//! SIMD kernels in tiers (scalar, NEON, NEON + dotprod, NEON + i8mm, AVX2, AVX-512 VNNI), chosen
//! once at run time ([`tier`]).
//!
//! The matmul kernels compute tiles of `C[j][i] = dot(A row i, B row j)` with `A` the weights
//! (any type) and `B` the activations already converted to the weight type's activation format
//! ([`act_type`]); the driver in [`crate::matmul`] splits a matmul into such tiles.

/// Defines the [`TileFn`] `$name`, which covers an `mr x nr` request with the register tiles
/// `$tiles` ([`Tiles`]) of the kernel `$inner::<R, C, $g>(k, a, lda, b, ldb, c, ldc)` (the
/// [`Operands`] of the tile, as scalars: the register-tile bodies keep their registers exactly
/// as tuned): one activation row (GEMV) in tiles of `gemv` weight rows, several in `mr x nr`
/// tiles, and 1-wide edges. Every tier's kernels (x86 and ARM) are instantiated through it,
/// inside `#[target_feature(enable = $feat)]`.
macro_rules! tiled {
    ($feat:literal, $name:ident, $inner:ident, $tiles:expr, $g:expr) => {
        /// Tile kernel (see [`TileFn`](crate::kernels::TileFn)).
        ///
        /// # Safety
        ///
        /// As [`TileFn`](crate::kernels::TileFn).
        #[target_feature(enable = $feat)]
        unsafe fn $name(o: $crate::kernels::Operands, mr: usize, nr: usize) {
            use $crate::kernels::Operands;
            const THESE: $crate::kernels::Tiles = $tiles;
            const MR: usize = THESE.mr;
            const NR: usize = THESE.nr;
            const GM: usize = THESE.gemv;
            // SAFETY: the register tiles cover rows `i..i + R` and columns `j..j + C` with
            // `i + R <= mr` and `j + C <= nr`, within the tile's operands, and share this
            // function's target features (TileFn's contract for each of them).
            unsafe {
                let mut i = 0;
                if nr == 1 {
                    while i < mr {
                        let t = o.at(i, 0);
                        let Operands { k, a, lda, b, ldb, c, ldc } = t;
                        if mr - i >= GM {
                            $inner::<GM, 1, $g>(k, a, lda, b, ldb, c, ldc);
                            i += GM;
                        } else if mr - i >= MR {
                            $inner::<MR, 1, $g>(k, a, lda, b, ldb, c, ldc);
                            i += MR;
                        } else {
                            $inner::<1, 1, $g>(k, a, lda, b, ldb, c, ldc);
                            i += 1;
                        }
                    }
                    return;
                }
                while i < mr {
                    let rs = if mr - i >= MR { MR } else { 1 };
                    let mut j = 0;
                    while j < nr {
                        let cs = if nr - j >= NR { NR } else { 1 };
                        let Operands { k, a, lda, b, ldb, c, ldc } = o.at(i, j);
                        match (rs == MR, cs == NR) {
                            (true, true) => $inner::<MR, NR, $g>(k, a, lda, b, ldb, c, ldc),
                            (true, false) => $inner::<MR, 1, $g>(k, a, lda, b, ldb, c, ldc),
                            (false, true) => $inner::<1, NR, $g>(k, a, lda, b, ldb, c, ldc),
                            (false, false) => $inner::<1, 1, $g>(k, a, lda, b, ldb, c, ldc),
                        }
                        j += cs;
                    }
                    i += rs;
                }
            }
        }
    };
}
#[allow(unused_imports)] // Only the architectures' tier modules use it.
pub(crate) use tiled;

/// Defines the [`TileFn`] `$name` for repacked weights: one group of `$rows` interleaved rows
/// (the `mr` the driver passes) times the activation rows, in kernels `$group::<N, $flag>(k, a,
/// b, ldb, c, ldc)` of `N` activation rows taken widest first from `[$($n),+]`, whose last
/// width must be 1 (`a` is the group). (The x86 tiers' packed kernels; the ARM ones have tiles of
/// several groups.)
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_macros))]
macro_rules! packed_tiled {
    ($feat:literal, $name:ident, $group:ident, $flag:expr, $rows:expr, [$($n:literal),+]) => {
        /// Tile kernel on repacked weights (see [`TileFn`](crate::kernels::TileFn)).
        ///
        /// # Safety
        ///
        /// As [`TileFn`](crate::kernels::TileFn); `o.a` points to one group of repacked rows.
        #[target_feature(enable = $feat)]
        unsafe fn $name(o: $crate::kernels::Operands, mr: usize, nr: usize) {
            debug_assert_eq!(mr, $rows);
            let mut j = 0;
            while j < nr {
                let left = nr - j;
                // SAFETY: columns j.. of the tile (the caller's contract).
                let t = unsafe { o.at(0, j) };
                $(
                    if left >= $n {
                        // SAFETY: `$n` activation rows remain; the group is the caller's.
                        unsafe { $group::<$n, $flag>(t.k, t.a, t.b, t.ldb, t.c, t.ldc) };
                        j += $n;
                        continue;
                    }
                )+
            }
        }
    };
}

pub mod tier;

mod act_x4;
pub mod attn_tiles;
mod blocks;
pub mod delta_rule;
pub mod ew;
mod kquant;
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
#[cfg(target_arch = "x86_64")]
pub use x86::{prefetch_sites, PREFETCH_ENV};

use crate::error::CpuError;

/// Activation rows of one group of the interleaved 4-row format ([`MatKernel::act_x4`]).
pub const ACT_X4_ROWS: usize = act_x4::ROWS;
use tessera_core::{DType, Error, Result};

/// The operands of one tile-kernel call: weight rows `A_i` at `a + i * lda`, activation rows
/// `B_j` (in the kernel's activation format) at `b + j * ldb`, both of `k` values, and the
/// outputs `C[i][j]` at `c + j * ldc + i`.
#[derive(Clone, Copy, Debug)]
pub struct Operands {
    /// Values per row (a multiple of the weight type's block size).
    pub k: usize,
    /// The first weight row.
    pub a: *const u8,
    /// Bytes from one weight row to the next.
    pub lda: usize,
    /// The first activation row.
    pub b: *const u8,
    /// Bytes from one activation row to the next.
    pub ldb: usize,
    /// The first output.
    pub c: *mut f32,
    /// Outputs from one activation row's to the next.
    pub ldc: usize,
}

impl Operands {
    /// The operands from weight row `i` and activation row `j` on.
    ///
    /// # Safety
    ///
    /// Rows `i` and `j` lie within the operands' memory (so do their outputs).
    #[inline(always)]
    pub unsafe fn at(self, i: usize, j: usize) -> Operands {
        // SAFETY: within the operands (the caller's contract).
        unsafe {
            Operands {
                a: self.a.add(i * self.lda),
                b: self.b.add(j * self.ldb),
                c: self.c.add(j * self.ldc + i),
                ..self
            }
        }
    }
}

/// The register tiles of one matmul kernel: `mr x nr` (weight rows by activation rows) when
/// there are several activation rows, `gemv` weight rows side by side when there is one (more
/// rows in flight read more of memory's bandwidth, up to what the registers hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiles {
    /// Weight rows of the tile for several activation rows.
    pub(crate) mr: usize,
    /// Activation rows of the tile.
    pub(crate) nr: usize,
    /// Weight rows of the tile for one activation row.
    pub(crate) gemv: usize,
}

impl Tiles {
    /// `mr x nr` tiles, and `mr`-row tiles for one activation row.
    pub(crate) const fn new(mr: usize, nr: usize) -> Tiles {
        Tiles { mr, nr, gemv: mr }
    }

    /// These tiles with `gemv`-row tiles for one activation row.
    pub(crate) const fn with_gemv(self, gemv: usize) -> Tiles {
        Tiles { gemv, ..self }
    }

    /// The weight rows the kernel offers the driver: a multiple of both `mr` and `gemv`, so that
    /// chunks split into whole tiles either way.
    pub(crate) const fn rows(self) -> usize {
        let (mut x, mut y) = (self.mr, self.gemv);
        while y != 0 {
            (x, y) = (y, x % y);
        }
        self.mr / x * self.gemv
    }

    /// The lookup entry of the tile kernel `f` with these tiles: (kernel, rows, columns).
    pub(crate) const fn entry(self, f: TileFn) -> (TileFn, usize, usize) {
        (f, self.rows(), self.nr)
    }
}

/// A tile kernel: for `i < mr` and `j < nr`, `C[i][j] = dot(A_i, B_j)` over the `k` values of
/// the [`Operands`].
///
/// # Safety
///
/// The CPU supports the kernel's tier; `mr` and `nr` are at most the kernel's tile size; `k` is
/// a multiple of the weight type's block size; the rows hold `k` values of their types; the
/// `C` tile is writable.
pub type TileFn = unsafe fn(o: Operands, mr: usize, nr: usize);

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

/// The packed GEMM serving `kernel` (plain F32 / F16 / BF16 weights and repacked F16 weights
/// on an x86 tier), as (function, `MR`, `NR`, `KC`); `None` when its tier has none.
pub fn gemm_kernel(kernel: &MatKernel) -> Option<(GemmFn, usize, usize, usize)> {
    #[cfg(target_arch = "x86_64")]
    let found = x86::gemm(kernel.tier, kernel.weight, kernel.repacked);
    #[cfg(not(target_arch = "x86_64"))]
    let found = {
        let _ = kernel;
        None
    };
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
    /// Word bytes of the interleaved 4-row activation format (`act_x4`: four activation rows
    /// block by block, their quants alternating in words of this many bytes) that the kernel
    /// reads in its tiles of 4 activation rows; 0 when it reads every tile row by row. The
    /// driver stores each plane's activation rows `4q..4q + 4` so (the rows past the last
    /// multiple of 4 stay rows) and calls the kernel with 4 columns only at such a group.
    pub act_x4: usize,
    tile: TileFn,
}

impl MatKernel {
    /// Runs the tile kernel (see [`TileFn`]).
    ///
    /// # Safety
    ///
    /// As [`TileFn`], except that the tier check is already done by construction.
    #[inline]
    pub unsafe fn tile(&self, o: Operands, mr: usize, nr: usize) {
        debug_assert!(mr <= self.mr && nr <= self.nr);
        // SAFETY: a MatKernel is only built for a tier the CPU supports; the rest is the
        // caller's contract.
        unsafe { (self.tile)(o, mr, nr) }
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

    /// Converts four activation rows (of the same length) to one group of the kernel's
    /// interleaved 4-row format ([`MatKernel::act_x4`], non-zero) in `dst`
    /// (`4 * act_row_size`): the same bytes as [`MatKernel::quantize_act`] of each row then
    /// [`MatKernel::interleave_act_x4`].
    pub fn quantize_act_x4(&self, rows: [&[f32]; ACT_X4_ROWS], dst: &mut [u8]) -> Result<()> {
        let k = rows[0].len();
        let len = act_x4::ROWS * self.act_row_size(k)?;
        if self.act_x4 == 0 || rows.iter().any(|r| r.len() != k) || dst.len() != len {
            return Err(Error::InvalidArgument("quantize_act_x4: not four rows".into()));
        }
        #[cfg(target_arch = "aarch64")]
        if self.act == DType::Q8_1 && self.repacked && Tier::Neon.is_supported() {
            arm::quantize_q8_0_sums_x4(self.act_x4, rows, dst);
            return Ok(());
        }
        let row = len / act_x4::ROWS;
        let mut tmp = vec![0u8; len];
        for (x, o) in rows.iter().zip(tmp.chunks_exact_mut(row)) {
            self.quantize_act(x, o)?;
        }
        self.interleave_act_x4(k, &tmp, dst)
    }

    /// Rewrites four activation rows of `k` values in the kernel's row format (`rows`, one
    /// after the other) as one group of its interleaved 4-row format ([`MatKernel::act_x4`],
    /// non-zero) in `dst` (as long as `rows`).
    pub fn interleave_act_x4(&self, k: usize, rows: &[u8], dst: &mut [u8]) -> Result<()> {
        let len = act_x4::ROWS * self.act_row_size(k)?;
        if self.act_x4 == 0 || rows.len() != len || dst.len() != len {
            return Err(Error::InvalidArgument("interleave_act_x4: not four rows".into()));
        }
        act_x4::interleave(self.act_x4, k, rows, dst);
        Ok(())
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
/// types `tier` has no kernel for); [`CpuError::TierUnsupported`] (converted) when the CPU
/// lacks `tier`, [`Error::UnsupportedType`] when no tier handles `dtype`.
pub fn matmul_kernel_in(tier: Tier, dtype: DType) -> Result<MatKernel> {
    if !tier.is_supported() {
        return Err(CpuError::TierUnsupported(tier.name().into()).into());
    }
    let t = tier::tier_for_in(tier, dtype);
    let (tile, mr, nr) = raw_tile(t, dtype)
        .ok_or_else(|| Error::dtype("mul_mat", dtype, "no CPU kernel for this weight type"))?;
    Ok(MatKernel {
        tier: t,
        weight: dtype,
        act: act_type(dtype),
        mr,
        nr,
        repacked: false,
        act_x4: 0,
        tile,
    })
}

/// The kernel for weights of `dtype` stored in the [`repack`] layout of the active tier, if the
/// tier has one (AVX-512 VNNI: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, the k-quants and F16;
/// AVX2: Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS, the k-quants and F16; dotprod and i8mm: Q4_0, Q8_0,
/// IQ4_NL, Q4_K, Q5_K and Q6_K).
pub fn repacked_kernel(dtype: DType) -> Option<MatKernel> {
    repacked_kernel_in(active_tier(), dtype)
}

/// As [`repacked_kernel`] under `tier` (`None` when the CPU lacks it): the kernel that reads
/// weights in `repack::PackLayout::for_tier(tier)`, whose `mr` is a multiple of the rows of a
/// group of the type in that layout ([`repack::group_rows`]; the tile's groups follow each other).
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
    debug_assert!(
        repack::PackLayout::for_tier(tier).is_some_and(|l| mr % repack::group_rows(l, dtype) == 0)
    );
    // Q4_0 / Q8_0 / Q5_0 / Q4_1 / Q5_1 / IQ4_NL: Q8_0 with sums (sized as Q8_1); the k-quants
    // and IQ4_XS: plain Q8_K; F16: F32.
    let act = match dtype {
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => {
            DType::Q8_K
        }
        DType::F16 => DType::F32,
        _ => DType::Q8_1,
    };
    // The ARM Q4_0 / Q8_0 / IQ4_NL kernels read groups of 4 activation rows interleaved in
    // their words.
    let act_x4 = match (tier, dtype) {
        (Tier::Dotprod, DType::Q4_0 | DType::Q8_0 | DType::IQ4_NL) => 4,
        (Tier::I8mm, DType::Q4_0 | DType::Q8_0 | DType::IQ4_NL) => 8,
        _ => 0,
    };
    Some(MatKernel { tier, weight: dtype, act, mr, nr, repacked: true, act_x4, tile })
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
    #[cfg(target_arch = "aarch64")]
    if Tier::Neon.is_supported() {
        arm::quantize_q8_0_sums(src, dst);
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
        return Err(CpuError::TierUnsupported(tier.name().into()).into());
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
