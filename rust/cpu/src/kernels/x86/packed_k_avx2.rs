//! AVX2 kernels for the k-quants on the 8 x 8 repacked layout ([`PackLayout::R8W8`]): a group
//! of eight rows, per 256-value block the rows' header fields (byte-planar scales) and then
//! their quants in chunks of eight 8-byte words, one per row (see [`crate::kernels::repack`]).
//!
//! One 32-byte load holds a word of four rows (rows 0..4 or 4..8 of the group); `vpmaddubsw`
//! multiplies it by an 8-byte word of the activations broadcast to the four lanes, so that the
//! weights are read once and every lane stays with its row: the products of four words that
//! share a scale are added as i16, scaled with one `vpmaddwd` by a vector holding each row's
//! scale in its lanes, and summed as i32 over the block. The per-row scale vectors come from
//! the byte-planar header with a few byte shuffles per block, for all eight rows at once.
//!
//! Activations are plain Q8_K rows. Q4_K / Q5_K's mins come off through the activations'
//! `bsums` (per 32 values: the sum of two of them) times the rows' 6-bit mins, with
//! `vpmaddwd` on pairs of sub-blocks.
//!
//! [`PackLayout::R8W8`]: crate::kernels::repack::PackLayout::R8W8
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use crate::kernels::blocks::{q2_k, q3_k, q4_k, q5_k, q6_k, q8_k, F16_BYTES};
use crate::kernels::TileFn;
use std::arch::x86_64::*;
use tessera_core::DType;

/// Rows per group.
const ROWS: usize = 8;
/// The order of the rows in the lanes after `vphaddd` of rows 0..4 and rows 4..8 (its own
/// inverse: the same permutation puts them back in order).
const LANES: [i32; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

/// Packed kernel kind of [`q45k_group`]: Q4_K weights.
const P_Q4_K: u8 = 0;
/// Packed kernel kind of [`q45k_group`]: Q5_K weights (Q4_K's header, the fifth bits' `qh`
/// words before the nibbles).
const P_Q5_K: u8 = 1;

// Q5_K's header is Q4_K's (d, dmin, 12 scale bytes), so both share the group's field layout.
const _: () = assert!(q5_k::DMIN == q4_k::DMIN && q5_k::SCALES == q4_k::SCALES);
const _: () = assert!(q5_k::QS == q5_k::QH + 32 && q4_k::QS == q4_k::SCALES + 12);

/// `vpshufb` masks that spread the 6-bit scales of two sub-blocks (bytes 0..8: sub-block `2p`,
/// rows 0..8; bytes 8..16: sub-block `2p + 1`, in both 128-bit lanes) into the i16 lanes of the
/// products of one half of the group: mask `2e + h` puts sub-block `2p + e`'s scale of row
/// `4h + q` into i16 lanes `4q..4q + 4` (the lanes of row `q` of the half in a 32-byte load).
const SCALE_MASKS: [[i8; 32]; 4] = {
    let mut m = [[-128i8; 32]; 4];
    let mut e = 0;
    while e < 2 {
        let mut h = 0;
        while h < 2 {
            let mut byte = 0;
            while byte < 32 {
                // i16 lane byte / 2 is in the lanes of row 4h + byte / 8.
                let row = 4 * h + byte / 8;
                if byte % 2 == 0 {
                    m[2 * e + h][byte] = (8 * e + row) as i8;
                }
                byte += 1;
            }
            h += 1;
        }
        e += 1;
    }
    m
};

/// `vpshufb` mask that interleaves the mins of two sub-blocks (bytes 0..8 and 8..16, rows 0..8)
/// as byte pairs per row, the rows in [`LANES`] order: after zero extension to i16, i32 lane `i`
/// holds row `LANES[i]`'s pair, for `vpmaddwd` with a pair of activation sums.
const MIN_PAIRS: [i8; 16] = {
    let mut m = [0i8; 16];
    let mut i = 0;
    while i < 8 {
        m[2 * i] = LANES[i] as i8;
        m[2 * i + 1] = 8 + LANES[i] as i8;
        i += 1;
    }
    m
};

/// The f16 values of eight rows at `p` as f32 in [`LANES`] order.
///
/// # Safety
///
/// 16 bytes at `p` are readable; the CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16x8_lanes(p: *const u8) -> __m256 {
    // SAFETY: caller's contract.
    unsafe {
        let lanes = _mm256_loadu_si256(LANES.as_ptr().cast());
        _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128(p.cast())), lanes)
    }
}

/// An 8-byte activation word at `p` in all four 64-bit lanes.
///
/// # Safety
///
/// 8 bytes at `p` are readable; the CPU supports AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn word(p: *const u8) -> __m256i {
    // SAFETY: caller's contract.
    unsafe { _mm256_set1_epi64x(std::ptr::read_unaligned(p.cast::<i64>())) }
}

/// The sums of the activation block at `p` per 32 values (`bsums[2s] + bsums[2s + 1]`) as
/// eight i16 in both 128-bit lanes: i32 lane `p` holds the pair of sub-blocks `2p, 2p + 1`.
///
/// # Safety
///
/// `p` is a readable Q8_K block; the CPU supports AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn sums32(p: *const u8) -> __m256i {
    // SAFETY: caller's contract.
    unsafe {
        let bs = _mm256_loadu_si256(p.add(q8_k::BSUMS).cast());
        let s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
        _mm256_broadcastsi128_si256(s)
    }
}

/// Group blocks ahead that the kernels prefetch into L1, for any number of columns: the
/// hardware prefetchers alone leave the weights of a group block to arrive while the kernel
/// waits, in the matrix-matrix products as well (figures: docs/x86-measurements.md).
const PREFETCH_BLOCKS: usize = 1;
/// Group blocks ahead that the kernels prefetch into L2.
const PREFETCH_L2_BLOCKS: usize = 3;

/// Prefetches the group block [`PREFETCH_BLOCKS`] past the one at `g` into L1 and the one
/// [`PREFETCH_L2_BLOCKS`] past it into L2 (`gsize` bytes each; past the group's end: the next
/// group's, which follows it).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn prefetch_ahead(g: *const u8, gsize: usize) {
    let (near, far) =
        (g.wrapping_add(PREFETCH_BLOCKS * gsize), g.wrapping_add(PREFETCH_L2_BLOCKS * gsize));
    for l in (0..gsize).step_by(64) {
        // A prefetch of any address is harmless.
        _mm_prefetch::<_MM_HINT_T0>(near.wrapping_add(l).cast());
        _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(l).cast());
    }
}

/// Activation columns of one pass over a Q4_K / Q5_K group block: the kernels take the
/// columns of their tile a few at a time per block, so that a block's weights are unpacked
/// once per slice of columns while they are in L1, and its header once for all of them.
const COLS_Q45: usize = 8;
/// Activation columns of one pass over a Q6_K / Q3_K / Q2_K group block (their unpacking
/// costs more per product than Q4_K's: more columns share it).
const COLS_K16: usize = 8;

/// Runs `$body::<W>(acc)` over the `NR` columns' accumulators `$acc` in slices of `$C`
/// (at most 8; the last slice narrower), passing the slice's first column `j`.
macro_rules! column_slices {
    ($C:expr, $NR:expr, $acc:expr, |$j:ident, $W:ident, $slice:ident| $body:expr) => {{
        let mut $j = 0;
        while $j + $C <= $NR {
            let $slice: &mut [__m256; $C] = (&mut $acc[$j..$j + $C]).try_into().unwrap();
            {
                const $W: usize = $C;
                $body;
            }
            $j += $C;
        }
        column_slices!(@rest $NR - $j, $acc, $j, $W, $slice, $body, 7, 6, 5, 4, 3, 2, 1);
    }};
    (@rest $left:expr, $acc:expr, $j:ident, $W:ident, $slice:ident, $body:expr, $($n:literal),+) => {{
        let left = $left;
        $(
            if left == $n {
                let $slice: &mut [__m256; $n] = (&mut $acc[$j..]).try_into().unwrap();
                const $W: usize = $n;
                $body;
            }
        )+
    }};
}

/// A Q4_K / Q5_K group block's header, decoded for the eight rows.
struct Q45Header {
    /// `d` in [`LANES`] order.
    d: __m256,
    /// `dmin` in [`LANES`] order.
    dmin: __m256,
    /// `scv[4 ch + 2 e + h]`: sub-block `2 ch + e`'s scales for half `h`, as i16 ([`SCALE_MASKS`]).
    scv: [__m256i; 16],
    /// `mins[p]`: the mins of sub-blocks `2p, 2p + 1` as i16 pairs per row, in [`LANES`] order.
    mins: [__m256i; 4],
}

/// Decodes the header of the Q4_K / Q5_K group block at `g`: d, dmin (8 f16 each), then the 12
/// scale bytes byte-planar (planes 0..4, 4..8, 8..12: sub-block `s` of rows 0..8 at `8 s`;
/// ggml's `get_scale_min_k4` on byte vectors).
///
/// # Safety
///
/// `g` is a readable group block; the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q45_header(g: *const u8) -> Q45Header {
    // SAFETY: the header's 128 bytes are readable (caller's contract).
    unsafe {
        let (m0f, m30, m63) =
            (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30), _mm256_set1_epi8(63));
        let sc_at = 2 * F16_BYTES * ROWS;
        let pa = _mm256_loadu_si256(g.add(sc_at).cast());
        let pb = _mm256_loadu_si256(g.add(sc_at + 32).cast());
        let pc = _mm256_loadu_si256(g.add(sc_at + 64).cast());
        let sc03 = _mm256_and_si256(pa, m63);
        let mn03 = _mm256_and_si256(pb, m63);
        let sc47 = _mm256_or_si256(
            _mm256_and_si256(pc, m0f),
            _mm256_and_si256(_mm256_srli_epi16::<2>(pa), m30),
        );
        let mn47 = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(pc), m0f),
            _mm256_and_si256(_mm256_srli_epi16::<2>(pb), m30),
        );
        let min_pairs = _mm_loadu_si128(MIN_PAIRS.as_ptr().cast());
        let mut scv = [_mm256_setzero_si256(); 16];
        let mut mins = [_mm256_setzero_si256(); 4];
        for p in 0..4 {
            let src = if p < 2 { sc03 } else { sc47 };
            let both = if p % 2 == 0 {
                _mm256_permute4x64_epi64::<0x44>(src)
            } else {
                _mm256_permute4x64_epi64::<0xee>(src)
            };
            for i in 0..4 {
                let mask = _mm256_loadu_si256(SCALE_MASKS[i].as_ptr().cast());
                scv[4 * p + i] = _mm256_shuffle_epi8(both, mask);
            }
            let msrc = if p < 2 { mn03 } else { mn47 };
            let m128 = if p % 2 == 0 {
                _mm256_castsi256_si128(msrc)
            } else {
                _mm256_extracti128_si256::<1>(msrc)
            };
            mins[p] = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(m128, min_pairs));
        }
        Q45Header { d: f16x8_lanes(g), dmin: f16x8_lanes(g.add(F16_BYTES * ROWS)), scv, mins }
    }
}

/// Adds the products of the Q4_K / Q5_K (`KIND`) group block at `g` (header `hd`) with `W`
/// activation blocks (at `b + j * ldb`) to `acc` (in [`LANES`] order).
///
/// Per half of the group (rows 0..4, 4..8) and pair of sub-blocks `ch` (values `64 ch..64 ch +
/// 64`), four chunks of quants: their low nibbles are sub-block `2 ch` (values `64 ch + 8 c..`,
/// chunk `c`), their high nibbles sub-block `2 ch + 1` (values `64 ch + 32 + 8 c..`); Q5_K's
/// fifth bits are bits `2 ch` and `2 ch + 1` of its `qh` chunk `c`.
///
/// # Safety
///
/// `g` is a readable group block of `KIND`, `b + j * ldb` (`j < W`) readable Q8_K blocks; the
/// CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q45_cols<const W: usize, const KIND: u8>(
    hd: &Q45Header,
    g: *const u8,
    b: *const u8,
    ldb: usize,
    acc: &mut [__m256; W],
) {
    // SAFETY: every load stays within the group block and the activation blocks (caller's
    // contract).
    unsafe {
        let m0f = _mm256_set1_epi8(0x0f);
        let bit4 = _mm256_set1_epi8(0x10);
        // The quants (Q5_K: 4 chunks of `qh`, then 16 chunks of nibbles).
        let qs_at = if KIND == P_Q5_K { q5_k::QS * ROWS } else { q4_k::QS * ROWS };
        let (q, qh) = (g.add(qs_at), g.add(q5_k::QH * ROWS));
        let mut bd = [0f32; W];
        for j in 0..W {
            let p = b.add(j * ldb);
            bd[j] = std::ptr::read_unaligned(p.cast::<f32>());
            let s = sums32(p);
            let m01 = _mm256_add_epi32(
                _mm256_madd_epi16(hd.mins[0], _mm256_shuffle_epi32::<0x00>(s)),
                _mm256_madd_epi16(hd.mins[1], _mm256_shuffle_epi32::<0x55>(s)),
            );
            let m23 = _mm256_add_epi32(
                _mm256_madd_epi16(hd.mins[2], _mm256_shuffle_epi32::<0xaa>(s)),
                _mm256_madd_epi16(hd.mins[3], _mm256_shuffle_epi32::<0xff>(s)),
            );
            let m = _mm256_cvtepi32_ps(_mm256_add_epi32(m01, m23));
            acc[j] = _mm256_fnmadd_ps(m, _mm256_mul_ps(hd.dmin, _mm256_set1_ps(bd[j])), acc[j]);
        }
        let mut isum = [[_mm256_setzero_si256(); W]; 2];
        for h in 0..2 {
            for ch in 0..4 {
                // The low nibbles (sub-block 2 ch), then the high ones (2 ch + 1), each
                // unpacked once for the columns.
                for part in 0..2 {
                    let mut w = [_mm256_setzero_si256(); 4];
                    for cc in 0..4 {
                        let raw = _mm256_loadu_si256(q.add(64 * (4 * ch + cc) + 32 * h).cast());
                        let raw = if part == 0 { raw } else { _mm256_srli_epi16::<4>(raw) };
                        w[cc] = _mm256_and_si256(raw, m0f);
                        if KIND == P_Q5_K {
                            // Bit 2 ch + part of qh chunk cc, moved to bit 4.
                            let bits = _mm256_loadu_si256(qh.add(64 * cc + 32 * h).cast());
                            let b4 = match 2 * ch + part {
                                0 => _mm256_slli_epi16::<4>(bits),
                                1 => _mm256_slli_epi16::<3>(bits),
                                2 => _mm256_slli_epi16::<2>(bits),
                                3 => _mm256_slli_epi16::<1>(bits),
                                4 => bits,
                                5 => _mm256_srli_epi16::<1>(bits),
                                6 => _mm256_srli_epi16::<2>(bits),
                                _ => _mm256_srli_epi16::<3>(bits),
                            };
                            w[cc] = _mm256_or_si256(w[cc], _mm256_and_si256(b4, bit4));
                        }
                    }
                    let sv = hd.scv[4 * ch + 2 * part + h];
                    for j in 0..W {
                        let p = b.add(j * ldb + q8_k::QS + 64 * ch + 32 * part);
                        // Four products of at most 2 * 31 * 127 each: the sum fits in i16.
                        let x = _mm256_add_epi16(
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(w[0], word(p)),
                                _mm256_maddubs_epi16(w[1], word(p.add(8))),
                            ),
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(w[2], word(p.add(16))),
                                _mm256_maddubs_epi16(w[3], word(p.add(24))),
                            ),
                        );
                        isum[h][j] = _mm256_add_epi32(isum[h][j], _mm256_madd_epi16(x, sv));
                    }
                }
            }
        }
        for j in 0..W {
            let s = _mm256_cvtepi32_ps(_mm256_hadd_epi32(isum[0][j], isum[1][j]));
            acc[j] = _mm256_fmadd_ps(s, _mm256_mul_ps(hd.d, _mm256_set1_ps(bd[j])), acc[j]);
        }
    }
}

/// One group of eight repacked Q4_K or Q5_K rows (`KIND`) times `NR` Q8_K activation rows:
/// per block, the header decoded once ([`q45_header`]), then the columns in slices of
/// [`COLS_Q45`] ([`q45_cols`]).
///
/// # Safety
///
/// The CPU supports AVX2, FMA and F16C; `a` is a group of eight rows of `k` values of `KIND`
/// repacked in 8 x 8; `b + j * ldb` (`j < NR`) are Q8_K rows of `k` values; `c + j * ldc ..
/// + 8` are writable.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q45k_group<const NR: usize, const KIND: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: every pointer passed on stays within the group's and the activation rows'
    // blocks (caller's contract); the stores write the eight outputs of each activation row.
    unsafe {
        let bsize = if KIND == P_Q5_K { q5_k::BYTES } else { q4_k::BYTES };
        let gsize = bsize * ROWS;
        let prefetch = super::prefetch::on(super::prefetch::Site::PackedK256);
        let mut acc = [_mm256_setzero_ps(); NR];
        for blk in 0..k / 256 {
            let g = a.add(blk * gsize);
            if prefetch {
                prefetch_ahead(g, gsize);
            }
            let hd = q45_header(g);
            let bb = b.add(blk * q8_k::BYTES);
            column_slices!(COLS_Q45, NR, acc, |j, W, slice| q45_cols::<W, KIND>(
                &hd,
                g,
                bb.add(j * ldb),
                ldb,
                slice
            ));
        }
        store_lanes(&acc, c, ldc);
    }
}

/// Stores accumulators in [`LANES`] order as eight outputs in row order at `c + j * ldc`.
///
/// # Safety
///
/// `c + j * ldc .. + 8` are writable for `j < acc.len()`; the CPU supports AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn store_lanes(acc: &[__m256], c: *mut f32, ldc: usize) {
    // SAFETY: caller's contract.
    unsafe {
        let lanes = _mm256_loadu_si256(LANES.as_ptr().cast());
        for (j, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(c.add(j * ldc), _mm256_permutevar8x32_ps(*a, lanes));
        }
    }
}

/// `vpshufb` masks that spread the signed 8-bit scales of two 16-value groups (bytes 0..8:
/// group `2p`, rows 0..8; bytes 8..16: group `2p + 1`, in both 128-bit lanes) into the high
/// bytes of the i16 lanes of one half of the group (low bytes zero; an arithmetic shift right
/// by 8 then sign-extends them): mask `2e + h` puts group `2p + e`'s scale of row `4h + q` into
/// lanes `4q..4q + 4`.
const SIGNED_SCALE_MASKS: [[i8; 32]; 4] = {
    let mut m = [[-128i8; 32]; 4];
    let mut e = 0;
    while e < 2 {
        let mut h = 0;
        while h < 2 {
            let mut byte = 1;
            while byte < 32 {
                m[2 * e + h][byte] = (8 * e + 4 * h + byte / 8) as i8;
                byte += 2;
            }
            h += 1;
        }
        e += 1;
    }
    m
};

/// Packed kernel kind of [`k16_group`]: Q6_K weights.
const P_Q6_K: u8 = 0;
/// Packed kernel kind of [`k16_group`]: Q3_K weights.
const P_Q3_K: u8 = 1;
/// Packed kernel kind of [`k16_group`]: Q2_K weights.
const P_Q2_K: u8 = 2;

// The kernels read the quants after the header: Q6_K's 192 bytes of `ql` and `qh` (as planes),
// Q3_K's `hmask` then `qs`.
const _: () = assert!(q6_k::QH == q6_k::QL + 128 && q6_k::SCALES == q6_k::QH + 64);
const _: () = assert!(q3_k::QS == q3_k::HMASK + 32 && q3_k::SCALES == q3_k::QS + 64);

/// The geometry of a [`k16_group`] group block of `KIND`: (block bytes, offset of the scale
/// planes, offset of the quants).
const fn k16_geometry(kind: u8) -> (usize, usize, usize) {
    match kind {
        // d, 16 scale planes, then per half block 8 chunks of ql and 4 of qh.
        P_Q6_K => (q6_k::BYTES, F16_BYTES * ROWS, (F16_BYTES + 16) * ROWS),
        // d, 12 scale planes, 4 chunks of hmask, 8 of qs.
        P_Q3_K => (q3_k::BYTES, F16_BYTES * ROWS, (F16_BYTES + 12) * ROWS),
        // d, dmin, 16 scale / min planes, 8 chunks of qs.
        _ => (q2_k::BYTES, 2 * F16_BYTES * ROWS, (2 * F16_BYTES + 16) * ROWS),
    }
}

/// A Q6_K / Q3_K / Q2_K group block's header, decoded for the eight rows.
struct K16Header {
    /// `d` in [`LANES`] order.
    d: __m256,
    /// Q2_K's `dmin` in [`LANES`] order (zero for the others).
    dmin: __m256,
    /// `scv[2 t + h]`: 16-value group `t`'s scales for half `h`, as i16 ([`SIGNED_SCALE_MASKS`]).
    scv: [__m256i; 32],
    /// `pairs[p]`: what multiplies the activations' sums of groups `2p, 2p + 1` (Q6_K / Q3_K:
    /// the scales, times the offset of the stored quants; Q2_K: the mins) as i16 pairs per row,
    /// in [`LANES`] order.
    pairs: [__m256i; 8],
}

/// Decodes the header of the group block of `KIND` at `g` ([`k16_geometry`]): its scales as
/// signed bytes in four 32-byte planes (group `t` of rows 0..8 at `8 t`): Q6_K's as stored,
/// Q3_K's 6-bit ones unpacked from their 12 bytes (ggml's `kmask` unpacking on byte vectors)
/// minus 32, Q2_K's low nibbles (its mins the high ones); then the per-half scale vectors and
/// the pairs.
///
/// # Safety
///
/// `g` is a readable group block of `KIND`; the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k16_header<const KIND: u8>(g: *const u8) -> K16Header {
    // SAFETY: the header's bytes are readable (caller's contract).
    unsafe {
        let (_, sc_at, _) = k16_geometry(KIND);
        let plane = |i: usize| _mm256_loadu_si256(g.add(sc_at + 32 * i).cast::<__m256i>());
        let m0f = _mm256_set1_epi8(0x0f);
        let m03 = _mm256_set1_epi8(0x03);
        let zero = _mm256_setzero_si256();
        let (scales, others): ([__m256i; 4], [__m256i; 4]) = match KIND {
            P_Q6_K => {
                let sc: [__m256i; 4] = std::array::from_fn(plane);
                (sc, sc)
            }
            P_Q3_K => {
                // Groups 0..8: low nibbles of bytes 0..8, 8..16: their high nibbles; the top
                // two bits of group t from bits 2 (t / 4) of byte 8 + t % 4.
                let (p0, p1, p2) = (plane(0), plane(1), plane(2));
                let lo = |x: __m256i| _mm256_and_si256(x, m0f);
                let hi = |x: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(x), m0f);
                let top = |x: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(x, m03));
                let raw = [
                    _mm256_or_si256(lo(p0), top(p2)),
                    _mm256_or_si256(lo(p1), top(_mm256_srli_epi16::<2>(p2))),
                    _mm256_or_si256(hi(p0), top(_mm256_srli_epi16::<4>(p2))),
                    _mm256_or_si256(hi(p1), top(_mm256_srli_epi16::<6>(p2))),
                ];
                let sc = raw.map(|x| _mm256_sub_epi8(x, _mm256_set1_epi8(32)));
                (sc, sc)
            }
            _ => {
                let p: [__m256i; 4] = std::array::from_fn(plane);
                (
                    p.map(|x| _mm256_and_si256(x, m0f)),
                    p.map(|x| _mm256_and_si256(_mm256_srli_epi16::<4>(x), m0f)),
                )
            }
        };
        let min_pairs = _mm_loadu_si128(MIN_PAIRS.as_ptr().cast());
        let mut scv = [zero; 32];
        let mut pairs = [zero; 8];
        for p in 0..8 {
            let half = |x: __m256i| {
                if p % 2 == 0 {
                    _mm256_permute4x64_epi64::<0x44>(x)
                } else {
                    _mm256_permute4x64_epi64::<0xee>(x)
                }
            };
            let both = half(scales[p / 2]);
            for i in 0..4 {
                let mask = _mm256_loadu_si256(SIGNED_SCALE_MASKS[i].as_ptr().cast());
                scv[4 * p + i] = _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(both, mask));
            }
            let other = _mm256_castsi256_si128(half(others[p / 2]));
            pairs[p] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(other, min_pairs));
        }
        let dmin =
            if KIND == P_Q2_K { f16x8_lanes(g.add(F16_BYTES * ROWS)) } else { _mm256_setzero_ps() };
        K16Header { d: f16x8_lanes(g), dmin, scv, pairs }
    }
}

/// Adds the products of the group block of `KIND` at `g` (header `hd`) with `W` activation
/// blocks (at `b + j * ldb`) to `acc` (in [`LANES`] order), per 16-value group.
///
/// Q6_K: the group stores whole 6-bit values in planes ([`q6_planes_sums`]). Q3_K: per half
/// block `n` (values `128 n..128 n + 128`) bit pair `m` of `qs` chunk `4 n + e` and bit `4 n + m`
/// of `hmask` chunk `e`; Q2_K: bit pair `m` of `qs` chunk `4 n + e`. The quants are used as stored
/// (Q6_K `q + 32`, Q3_K `q + 4`, unsigned): the offset times `sum(scale * bsums)` comes off
/// each row's integer sum, and Q2_K's `dmin * sum(min * bsums)` off its result, with
/// `vpmaddwd` on pairs of groups.
///
/// # Safety
///
/// `g` is a readable group block of `KIND`, `b + j * ldb` (`j < W`) readable Q8_K blocks; the
/// CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k16_cols<const W: usize, const KIND: u8>(
    hd: &K16Header,
    g: *const u8,
    b: *const u8,
    ldb: usize,
    acc: &mut [__m256; W],
) {
    // SAFETY: every load stays within the group block and the activation blocks (caller's
    // contract).
    unsafe {
        let m03 = _mm256_set1_epi8(0x03);
        let bit2 = _mm256_set1_epi8(0x04);
        let (_, _, q_at) = k16_geometry(KIND);
        let q = g.add(q_at);
        let mut bd = [0f32; W];
        let mut corr = [_mm256_setzero_si256(); W];
        for j in 0..W {
            let p = b.add(j * ldb);
            bd[j] = std::ptr::read_unaligned(p.cast::<f32>());
            let bs = p.add(q8_k::BSUMS).cast::<i32>();
            let pair = |i: usize| {
                _mm256_madd_epi16(
                    hd.pairs[i],
                    _mm256_set1_epi32(std::ptr::read_unaligned(bs.add(i))),
                )
            };
            let s = _mm256_add_epi32(
                _mm256_add_epi32(
                    _mm256_add_epi32(pair(0), pair(1)),
                    _mm256_add_epi32(pair(2), pair(3)),
                ),
                _mm256_add_epi32(
                    _mm256_add_epi32(pair(4), pair(5)),
                    _mm256_add_epi32(pair(6), pair(7)),
                ),
            );
            // Per row in LANES order: the offset of the stored quants times the scaled sums
            // (Q6_K 32, Q3_K 4), or Q2_K's mins times the sums, scaled by dmin at once.
            match KIND {
                P_Q6_K => corr[j] = _mm256_slli_epi32::<5>(s),
                P_Q3_K => corr[j] = _mm256_slli_epi32::<2>(s),
                _ => {
                    let m = _mm256_cvtepi32_ps(s);
                    let dm = _mm256_mul_ps(hd.dmin, _mm256_set1_ps(bd[j]));
                    acc[j] = _mm256_fnmadd_ps(m, dm, acc[j]);
                }
            }
        }
        let load = |at: usize| _mm256_loadu_si256(q.add(at).cast::<__m256i>());
        let mut isum = [[_mm256_setzero_si256(); W]; 2];
        if KIND == P_Q6_K {
            q6_planes_sums(hd, q, b, ldb, &mut isum);
        } else {
            // Half by half (rows 0..4, then 4..8): one half's sums live at a time.
            for h in 0..2 {
                for n in 0..2 {
                    for ep in 0..2 {
                        for m in 0..4 {
                            // Values 128 n + 32 m + 8 (2 ep + i).. of rows 4h..4h + 4, unpacked
                            // once for the columns.
                            let w: [__m256i; 2] = std::array::from_fn(|i| {
                                let e = 2 * ep + i;
                                let pair = |x: __m256i| match m {
                                    0 => x,
                                    1 => _mm256_srli_epi16::<2>(x),
                                    2 => _mm256_srli_epi16::<4>(x),
                                    _ => _mm256_srli_epi16::<6>(x),
                                };
                                match KIND {
                                    P_Q3_K => {
                                        // Bit pair m of qs chunk 4n + e, bit 4n + m of hmask chunk
                                        // e moved to bit 2.
                                        let low = pair(load(256 + 64 * (4 * n + e) + 32 * h));
                                        let hm = load(64 * e + 32 * h);
                                        let high = match 4 * n + m {
                                            0 => _mm256_slli_epi16::<2>(hm),
                                            1 => _mm256_slli_epi16::<1>(hm),
                                            2 => hm,
                                            3 => _mm256_srli_epi16::<1>(hm),
                                            4 => _mm256_srli_epi16::<2>(hm),
                                            5 => _mm256_srli_epi16::<3>(hm),
                                            6 => _mm256_srli_epi16::<4>(hm),
                                            _ => _mm256_srli_epi16::<5>(hm),
                                        };
                                        _mm256_or_si256(
                                            _mm256_and_si256(low, m03),
                                            _mm256_and_si256(high, bit2),
                                        )
                                    }
                                    _ => {
                                        // Bit pair m of qs chunk 4n + e.
                                        let qs = load(64 * (4 * n + e) + 32 * h);
                                        _mm256_and_si256(pair(qs), m03)
                                    }
                                }
                            });
                            let sv = hd.scv[2 * (8 * n + 2 * m + ep) + h];
                            for j in 0..W {
                                let p = b.add(j * ldb + q8_k::QS + 128 * n + 32 * m + 16 * ep);
                                // Two products of at most 2 * 63 * 127 each: the sum fits in i16.
                                let x = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(w[0], word(p)),
                                    _mm256_maddubs_epi16(w[1], word(p.add(8))),
                                );
                                isum[h][j] = _mm256_add_epi32(isum[h][j], _mm256_madd_epi16(x, sv));
                            }
                        }
                    }
                }
            }
        }
        for j in 0..W {
            let s = _mm256_sub_epi32(_mm256_hadd_epi32(isum[0][j], isum[1][j]), corr[j]);
            let s = _mm256_cvtepi32_ps(s);
            acc[j] = _mm256_fmadd_ps(s, _mm256_mul_ps(hd.d, _mm256_set1_ps(bd[j])), acc[j]);
        }
    }
}

/// Q6_K's part of [`k16_cols`]: the products of a group block's quants, stored as 6-bit planes
/// (`crate::kernels::repack` `q6_planes`: per 32 values `τ` and half `h`, three 32-byte planes
/// at `q + 96 (2τ + h)`, words 0..3 in their low six bits, word 3 in their top two bits), with
/// `W` activation blocks, added per half and column to `isum` (scaled per 16-value group).
///
/// # Safety
///
/// `q` is the quants of a readable Q6_K group block, `b + j * ldb` (`j < W`) readable Q8_K
/// blocks; the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_planes_sums<const W: usize>(
    hd: &K16Header,
    q: *const u8,
    b: *const u8,
    ldb: usize,
    isum: &mut [[__m256i; W]; 2],
) {
    // SAFETY: every load stays within the group block's 1536 bytes of quants and the
    // activation blocks (caller's contract).
    unsafe {
        let m3f = _mm256_set1_epi8(0x3f);
        let mc0 = _mm256_set1_epi8(0xc0u8 as i8);
        // Per 32 values: both halves' words unpacked once for the columns, and each column's
        // activation words broadcast once for both halves (the planes read in order). Against
        // half by half: 4-9 % faster for one column, 3 % slower for 16 (4096 x 4096, Zen 4).
        for tau in 0..8 {
            let w: [[__m256i; 4]; 2] = std::array::from_fn(|h| {
                let at = q.add(96 * (2 * tau + h));
                let p: [__m256i; 3] =
                    std::array::from_fn(|i| _mm256_loadu_si256(at.add(32 * i).cast::<__m256i>()));
                // Masked before the 16-bit shifts: no bit crosses into the byte below.
                let w3 = _mm256_or_si256(
                    _mm256_or_si256(
                        _mm256_srli_epi16::<6>(_mm256_and_si256(p[0], mc0)),
                        _mm256_srli_epi16::<4>(_mm256_and_si256(p[1], mc0)),
                    ),
                    _mm256_srli_epi16::<2>(_mm256_and_si256(p[2], mc0)),
                );
                let low = |x: __m256i| _mm256_and_si256(x, m3f);
                [low(p[0]), low(p[1]), low(p[2]), w3]
            });
            for j in 0..W {
                let x = b.add(j * ldb + q8_k::QS + 32 * tau);
                let x: [__m256i; 4] = std::array::from_fn(|e| word(x.add(8 * e)));
                for h in 0..2 {
                    let (s0, s1) = (hd.scv[2 * (2 * tau) + h], hd.scv[2 * (2 * tau + 1) + h]);
                    let w = &w[h];
                    // Two products of at most 2 * 63 * 128 each: each sum fits in i16.
                    let x0 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w[0], x[0]),
                        _mm256_maddubs_epi16(w[1], x[1]),
                    );
                    let x1 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w[2], x[2]),
                        _mm256_maddubs_epi16(w[3], x[3]),
                    );
                    let s = _mm256_add_epi32(_mm256_madd_epi16(x0, s0), _mm256_madd_epi16(x1, s1));
                    isum[h][j] = _mm256_add_epi32(isum[h][j], s);
                }
            }
        }
    }
}

/// One group of eight repacked Q6_K, Q3_K or Q2_K rows (`KIND`) times `NR` Q8_K activation
/// rows: per block, the header decoded once ([`k16_header`]), then the columns in slices of
/// [`COLS_K16`] ([`k16_cols`]).
///
/// # Safety
///
/// The CPU supports AVX2, FMA and F16C; `a` is a group of eight rows of `KIND` of `k` values
/// repacked in 8 x 8; `b + j * ldb` (`j < NR`) are Q8_K rows of `k` values; `c + j * ldc ..
/// + 8` are writable.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k16_group<const NR: usize, const KIND: u8>(
    k: usize,
    a: *const u8,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: every pointer passed on stays within the group's and the activation rows'
    // blocks (caller's contract); the stores write the eight outputs of each activation row.
    unsafe {
        let gsize = k16_geometry(KIND).0 * ROWS;
        let prefetch = super::prefetch::on(super::prefetch::Site::PackedK256);
        let mut acc = [_mm256_setzero_ps(); NR];
        for blk in 0..k / 256 {
            let g = a.add(blk * gsize);
            if prefetch {
                prefetch_ahead(g, gsize);
            }
            let hd = k16_header::<KIND>(g);
            let bb = b.add(blk * q8_k::BYTES);
            column_slices!(COLS_K16, NR, acc, |j, W, slice| k16_cols::<W, KIND>(
                &hd,
                g,
                bb.add(j * ldb),
                ldb,
                slice
            ));
        }
        store_lanes(&acc, c, ldc);
    }
}

packed_tiled!("avx2,fma,f16c", packed_q4_k, q45k_group, P_Q4_K, ROWS, [16, 8, 4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_q5_k, q45k_group, P_Q5_K, ROWS, [16, 8, 4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_q6_k, k16_group, P_Q6_K, ROWS, [16, 8, 4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_q3_k, k16_group, P_Q3_K, ROWS, [16, 8, 4, 3, 2, 1]);
packed_tiled!("avx2,fma,f16c", packed_q2_k, k16_group, P_Q2_K, ROWS, [16, 8, 4, 3, 2, 1]);

/// Activation columns of the repacked k-quant tiles.
const TILE_COLS: usize = 16;

/// The kernel for 8 x 8 repacked k-quant weights of `wt`, with its tile size (8 rows,
/// [`TILE_COLS`] columns).
pub(super) fn packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    match wt {
        DType::Q4_K => Some((packed_q4_k as TileFn, ROWS, TILE_COLS)),
        DType::Q5_K => Some((packed_q5_k as TileFn, ROWS, TILE_COLS)),
        DType::Q6_K => Some((packed_q6_k as TileFn, ROWS, TILE_COLS)),
        DType::Q3_K => Some((packed_q3_k as TileFn, ROWS, TILE_COLS)),
        DType::Q2_K => Some((packed_q2_k as TileFn, ROWS, TILE_COLS)),
        _ => None,
    }
}
