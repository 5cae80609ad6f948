//! F16 weights in their repacked group ([`F16_GROUP`]): 8 rows, each row's 16-value block in
//! turn (32 bytes), block after block. A matrix-vector product reads the group as one
//! sequential stream (8 separate row streams are about 20 % slower from RAM on x86), converts
//! each 8-value half with `vcvtph2ps` (256-bit: the 512-bit conversion is slower on Zen 4)
//! and keeps one accumulator per row (AVX2), or two, the 16 lanes of its sub-tiles (AVX-512), so
//! that a row sums as the sub-tiles sum it. With several activation rows, each sub-tile of the
//! group's rows (8 on AVX-512, 4 on AVX2) takes every column in turn, reusing each converted
//! weight vector for two activation rows from registers (of 2 x 8 ... 8 x 3 sub-tiles, the
//! tallest with two columns measured best), and prefetches its next lines into L1 and the
//! next group into L2.
//!
//! [`F16_GROUP`]: crate::kernels::repack::F16_GROUP
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::kern::hsum;
use crate::kernels::{Operands, TileFn};
use std::arch::x86_64::*;
use tessera_core::DType;

/// Rows per group.
const ROWS: usize = 8;
/// Values of one row's block.
const BLOCK: usize = 16;
/// Bytes of one block of the whole group.
const GROUP_BLOCK: usize = ROWS * BLOCK * 2;
/// Blocks ahead that the multi-column kernels prefetch into L1 (4 KiB: the group is in L2
/// while the columns pass, and the software prefetch lifts the sub-tile's next lines; 10-15 %
/// at N = 16 and 128, measured against 4, 32 and 64 blocks). The matrix-vector kernel does
/// not prefetch: on this Zen 4 every software prefetch measured (in-stream or next group,
/// T0 / T1 / NTA) made it 10-20 % slower from RAM, though up to 1.6x faster from L3.
const PREFETCH_BLOCKS: usize = 16;
/// Activation rows of one tile call on AVX2.
const NR_AVX2: usize = 8;
/// Activation rows of one tile call on AVX-512: two passes of the six-column sub-tile.
const NR_AVX512: usize = 12;

/// Defines the sub-tile kernel `$group::<N>` of one tier (`$feat`): `$sub` rows of a group by N
/// activation rows, with vectors `$v` of `$lanes` f32 (`$zero` and `$fma` the tier's
/// intrinsics, `$cvt` converting `$lanes` f16 at a pointer, `$ld` loading `$lanes` f32, `$hsum`
/// summing a vector's lanes).
macro_rules! f16_group {
    ($feat:literal, $group:ident, $sub:literal, $lanes:literal, $v:ty, $zero:ident, $fma:ident,
     $cvt:ident, $ld:ident, $hsum:ident) => {
        /// Rows `r0..r0 + $sub` of one F16 group times `N` F32 activation rows (`ldb` bytes
        /// apart): `c[j * ldc + r0 + r]`; the converted weights serve the `N` rows from
        /// registers.
        ///
        /// # Safety
        ///
        /// `a` holds one group of `k` (a multiple of 16) values per row, `r0 + $sub <= 8`, the
        /// activation rows hold `k` f32, the block of `c` is writable; the CPU supports the
        /// tier.
        #[target_feature(enable = $feat)]
        unsafe fn $group<const N: usize>(
            k: usize,
            a: *const u8,
            r0: usize,
            b: *const u8,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            let mut acc = [[$zero(); N]; $sub];
            let mut t = 0;
            while t < k {
                // The sub-tile's lines PREFETCH_BLOCKS ahead into L1, and the same lines of the
                // next group (the next rows, usually this chunk's next tile) into L2, so that
                // the first pass over it does not wait on RAM. (A prefetch of any address is
                // harmless.)
                let here = t / BLOCK * GROUP_BLOCK + r0 * BLOCK * 2;
                let ahead = a.wrapping_add(here + PREFETCH_BLOCKS * GROUP_BLOCK);
                let next_group = a.wrapping_add(here + k * 2 * ROWS);
                for l in (0..$sub * BLOCK * 2).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
                    _mm_prefetch::<_MM_HINT_T1>(next_group.wrapping_add(l).cast());
                }
                for h in 0..BLOCK / $lanes {
                    // SAFETY: rows r0..r0 + $sub of block t / 16 and values t..t + 16 of the N
                    // activation rows are in bounds.
                    unsafe {
                        let w = a.add(t / BLOCK * GROUP_BLOCK + r0 * BLOCK * 2 + h * $lanes * 2);
                        let wv: [$v; $sub] = std::array::from_fn(|r| $cvt(w.add(r * BLOCK * 2)));
                        for j in 0..N {
                            let bv = $ld(b.add(j * ldb).cast::<f32>().add(t + $lanes * h));
                            for r in 0..$sub {
                                acc[r][j] = $fma(wv[r], bv, acc[r][j]);
                            }
                        }
                    }
                }
                t += BLOCK;
            }
            for r in 0..$sub {
                for j in 0..N {
                    // SAFETY: the block of c is writable.
                    unsafe { *c.add(j * ldc + r0 + r) = $hsum(acc[r][j]) };
                }
            }
        }
    };
}

/// Eight f16 at `p` as f32.
///
/// # Safety
///
/// `p` has 16 readable bytes; the CPU supports F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn cvt8(p: *const u8) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

/// Sixteen f16 at `p` as f32.
///
/// # Safety
///
/// `p` has 32 readable bytes; the CPU supports AVX-512F.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn cvt16(p: *const u8) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
}

/// The sum of a vector's eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum8(v: __m256) -> f32 {
    hsum!(v)
}

/// The sum of a vector's sixteen lanes: its two halves added, then [`hsum8`] (an explicit
/// order, the one the AVX-512 GEMV's two 8-lane accumulators are summed in).
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
fn hsum16(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    hsum8(_mm256_add_ps(lo, hi))
}

/// Defines, for one tier (`$feat`), the GEMV `$gemv` and the tile function `$tile`, which runs
/// the sub-tile kernel `$group::<N>` ($sub rows, N activation rows; defined by [`f16_group`])
/// taking the activation rows widest first from `[$($n),+]`.
macro_rules! f16_tier {
    ($feat:literal, $tile:ident, $group:ident, $gemv:ident, $sub:literal, [$($n:literal),+],
     two: $two:literal) => {
        /// One F16 group times one F32 activation row: `c[0..8]`. Each row's sum is the one the
        /// sub-tile kernel makes (issue 38: a column's result does not depend on the batch):
        /// with `two` (AVX-512: its sub-tiles' 16 lanes) the block's halves go to two 8-lane
        /// accumulators, summed as [`hsum16`] sums, else (AVX2: 8 lanes) to one, summed as
        /// [`hsum8`].
        ///
        /// # Safety
        ///
        /// `a` holds one group of `k` (a multiple of 16) values per row, `b` holds `k` f32,
        /// `c` 8 writable f32; the CPU supports the tier.
        #[target_feature(enable = $feat)]
        unsafe fn $gemv(k: usize, a: *const u8, b: *const f32, c: *mut f32) {
            let mut acc0 = [_mm256_setzero_ps(); ROWS];
            let mut acc1 = [_mm256_setzero_ps(); ROWS];
            let mut t = 0;
            while t < k {
                // SAFETY: block t / 16 of the group and values t..t + 16 of b are in bounds.
                unsafe {
                    let b0 = _mm256_loadu_ps(b.add(t));
                    let b1 = _mm256_loadu_ps(b.add(t + 8));
                    let w = a.add(t / BLOCK * GROUP_BLOCK);
                    for r in 0..ROWS {
                        let p = w.add(r * BLOCK * 2);
                        let lo = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
                        let hi = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast()));
                        if $two {
                            acc0[r] = _mm256_fmadd_ps(lo, b0, acc0[r]);
                            acc1[r] = _mm256_fmadd_ps(hi, b1, acc1[r]);
                        } else {
                            acc0[r] = _mm256_fmadd_ps(lo, b0, acc0[r]);
                            acc0[r] = _mm256_fmadd_ps(hi, b1, acc0[r]);
                        }
                    }
                }
                t += BLOCK;
            }
            for r in 0..ROWS {
                let s = if $two { _mm256_add_ps(acc0[r], acc1[r]) } else { acc0[r] };
                // SAFETY: c holds 8 writable f32.
                unsafe { *c.add(r) = hsum8(s) };
            }
        }

        /// Tile kernel on one repacked F16 group (see [`TileFn`]): one activation row by the
        /// GEMV; more by sub-tiles of `$sub` rows, each taking all the columns (widest first
        /// from `[$($n),+]`) while its weights are in L1.
        ///
        /// # Safety
        ///
        /// As [`TileFn`]; `a` points to one group of repacked F16 rows and `mr` is 8.
        #[target_feature(enable = $feat)]
        unsafe fn $tile(o: Operands, mr: usize, nr: usize) {
            debug_assert_eq!(mr, ROWS);
            if nr == 1 {
                // SAFETY: forwarded contract (column 0 of c is c[0..8]).
                return unsafe { $gemv(o.k, o.a, o.b.cast(), o.c) };
            }
            for r0 in (0..ROWS).step_by($sub) {
                let mut j = 0;
                while j < nr {
                    let left = nr - j;
                    // SAFETY: columns j.. of the tile (the caller's contract).
                    let t = unsafe { o.at(0, j) };
                    $(
                        if left >= $n {
                            // SAFETY: `$n` activation rows remain; the group is the caller's.
                            unsafe { $group::<$n>(t.k, t.a, r0, t.b, t.ldb, t.c, t.ldc) };
                            j += $n;
                            continue;
                        }
                    )+
                }
            }
        }
    };
}

f16_group!(
    "avx2,fma,f16c",
    avx2_group,
    4,
    8,
    __m256,
    _mm256_setzero_ps,
    _mm256_fmadd_ps,
    cvt8,
    _mm256_loadu_ps,
    hsum8
);
f16_tier!("avx2,fma,f16c", avx2_f16, avx2_group, avx2_gemv, 4, [2, 1], two: false);
f16_group!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    avx512_group,
    4,
    16,
    __m512,
    _mm512_setzero_ps,
    _mm512_fmadd_ps,
    cvt16,
    _mm512_loadu_ps,
    hsum16
);
f16_tier!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    avx512_f16,
    avx512_group,
    avx512_gemv,
    4,
    [6, 4, 2, 1],
    two: true
);

/// The AVX2 kernel for repacked F16 weights, with its tile size.
pub(super) fn avx2_tile() -> (TileFn, usize, usize) {
    (avx2_f16 as TileFn, ROWS, NR_AVX2)
}

/// The AVX-512 VNNI tier's kernel for repacked F16 weights, with its tile size.
pub(super) fn avx512_tile() -> (TileFn, usize, usize) {
    (avx512_f16 as TileFn, ROWS, NR_AVX512)
}

/// Whether `wt` is the type these kernels read.
pub(super) fn reads(wt: DType) -> bool {
    wt == DType::F16
}
