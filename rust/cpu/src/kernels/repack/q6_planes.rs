//! Q6_K's quants in the AVX2 tier's 8 x 8 layout ([`PackLayout::R8W8`]) as whole 6-bit values
//! in three byte planes, so that the matrix-vector kernel unpacks four words of four rows with
//! 11 byte-vector operations (three masks for three words, the fourth gathered from the planes'
//! top bits) instead of the 17-odd that `ql` nibbles and `qh` bit pairs take.
//!
//! A group block's quants (after its header, `8 * 192` bytes) are, per 32 values `τ` (`0..8`)
//! and half `h` of the group (rows `4h..4h + 4`), three 32-byte planes `π` (`0..3`) at
//! `((2τ + h) * 3 + π) * 32`. Byte `8q + i` of plane `π` is row `4h + q`'s value `32τ + 8π + i`
//! (stored as Q6_K stores it, `q + 32` in `0..64`) in bits 0..6, and bits `2π..2π + 2` of its
//! value `32τ + 24 + i` in bits 6..8.
//!
//! The group's header is the generic one (`d`, then the 16 scale bytes byte-planar); only the
//! quants are rewritten, after the generic copy ([`super::pack_as`]) and before the generic
//! copy back ([`super::unpack_as`], [`super::unpack_row_as`]).
//!
//! [`PackLayout::R8W8`]: super::PackLayout::R8W8

use super::PackLayout;
use crate::kernels::blocks::q6_k;
use tessera_core::quant::blocks::QK_K;
use tessera_core::DType;

/// Rows of a group.
const ROWS: usize = 8;
/// Rows of a half group (one 32-byte plane holds a word of each).
const HALF: usize = 4;
/// Values of a word.
const WORD: usize = 8;
/// Bytes of one row's quants in a block (`ql` then `qh`).
pub(super) const ROW_QUANTS: usize = q6_k::SCALES - q6_k::QL;

/// Whether tensors of `dtype` stored in `pl` keep their quants in planes.
pub(super) fn applies(dtype: DType, pl: PackLayout) -> bool {
    dtype == DType::Q6_K && pl == PackLayout::R8W8
}

/// The 256 stored quants (`q + 32`) of one Q6_K block's `ql` and `qh` (`ROW_QUANTS` bytes).
fn values(quants: &[u8]) -> [u8; QK_K] {
    let (ql, qh) = quants.split_at(q6_k::QH - q6_k::QL);
    let mut v = [0u8; QK_K];
    for n in 0..2 {
        for l in 0..32 {
            let (a, b, h) = (ql[64 * n + l], ql[64 * n + 32 + l], qh[32 * n + l]);
            v[128 * n + l] = a & 0xf | (h & 3) << 4;
            v[128 * n + 32 + l] = b & 0xf | (h >> 2 & 3) << 4;
            v[128 * n + 64 + l] = a >> 4 | (h >> 4 & 3) << 4;
            v[128 * n + 96 + l] = b >> 4 | (h >> 6 & 3) << 4;
        }
    }
    v
}

/// Undoes [`values`]: one block's `ql` and `qh` from its 256 stored quants.
fn store(v: &[u8; QK_K], quants: &mut [u8]) {
    let (ql, qh) = quants.split_at_mut(q6_k::QH - q6_k::QL);
    for n in 0..2 {
        for l in 0..32 {
            let at = |j: usize| v[128 * n + 32 * j + l];
            ql[64 * n + l] = at(0) & 0xf | (at(2) & 0xf) << 4;
            ql[64 * n + 32 + l] = at(1) & 0xf | (at(3) & 0xf) << 4;
            qh[32 * n + l] = at(0) >> 4 | (at(1) >> 4) << 2 | (at(2) >> 4) << 4 | (at(3) >> 4) << 6;
        }
    }
}

/// The byte of the planes holding row `r`'s value `32 tau + 8 plane + i` in its low six bits
/// and bits `2 plane..2 plane + 2` of its value `32 tau + 24 + i` in its top two.
fn plane_byte(r: usize, tau: usize, plane: usize, i: usize) -> usize {
    let (h, q) = (r / HALF, r % HALF);
    ((2 * tau + h) * 3 + plane) * 32 + WORD * q + i
}

/// Writes one group block's quants as planes into `out` (`ROWS * ROW_QUANTS` bytes) from the
/// plain rows' quants: `row(r)` is row `r`'s `ql` and `qh` of the block.
pub(super) fn to_planes<'a>(row: impl Fn(usize) -> &'a [u8], out: &mut [u8]) {
    for r in 0..ROWS {
        let v = values(row(r));
        for tau in 0..QK_K / 32 {
            for i in 0..WORD {
                let top = v[32 * tau + 24 + i];
                for plane in 0..3 {
                    out[plane_byte(r, tau, plane, i)] =
                        v[32 * tau + 8 * plane + i] | (top >> (2 * plane) & 3) << 6;
                }
            }
        }
    }
}

/// Undoes [`to_planes`] for the group's `rows`: `put(r, quants)` receives row `r`'s `ql` and
/// `qh` of the block from the planes `src` (`ROWS * ROW_QUANTS` bytes).
pub(super) fn from_planes(
    src: &[u8],
    rows: std::ops::Range<usize>,
    mut put: impl FnMut(usize, &[u8]),
) {
    for r in rows {
        let mut v = [0u8; QK_K];
        for tau in 0..QK_K / 32 {
            for i in 0..WORD {
                let mut top = 0;
                for plane in 0..3 {
                    let byte = src[plane_byte(r, tau, plane, i)];
                    v[32 * tau + 8 * plane + i] = byte & 0x3f;
                    top |= (byte >> 6) << (2 * plane);
                }
                v[32 * tau + 24 + i] = top;
            }
        }
        let mut quants = [0u8; ROW_QUANTS];
        store(&v, &mut quants);
        put(r, &quants);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain quants with every value and bit pattern somewhere.
    fn plain(seed: usize) -> Vec<u8> {
        (0..ROWS * ROW_QUANTS).map(|i| ((i * 97 + seed * 31) ^ (i >> 3)) as u8).collect()
    }

    #[test]
    fn values_match_ggml_dequantization_order() {
        // ggml's dequantize_row_q6_K: value 128 n + l + 32 j from ql / qh as below.
        let q = plain(3);
        let q = &q[..ROW_QUANTS];
        let v = values(q);
        for n in 0..2 {
            for l in 0..32 {
                let (ql, qh) = (&q[64 * n..], q[128 + 32 * n + l]);
                assert_eq!(v[128 * n + l], ql[l] & 0xf | (qh & 3) << 4);
                assert_eq!(v[128 * n + 32 + l], ql[l + 32] & 0xf | (qh >> 2 & 3) << 4);
                assert_eq!(v[128 * n + 64 + l], ql[l] >> 4 | (qh >> 4 & 3) << 4);
                assert_eq!(v[128 * n + 96 + l], ql[l + 32] >> 4 | (qh >> 6 & 3) << 4);
            }
        }
    }

    #[test]
    fn planes_round_trip_and_hold_the_values_where_documented() {
        for seed in 0..4 {
            let src = plain(seed);
            let row = |r: usize| &src[r * ROW_QUANTS..(r + 1) * ROW_QUANTS];
            let mut planes = vec![0u8; ROWS * ROW_QUANTS];
            to_planes(row, &mut planes);
            for r in 0..ROWS {
                let v = values(row(r));
                for (t, &want) in v.iter().enumerate() {
                    let (tau, e, i) = (t / 32, t % 32 / 8, t % 8);
                    let got = if e < 3 {
                        planes[plane_byte(r, tau, e, i)] & 0x3f
                    } else {
                        (0..3).fold(0, |acc, p| {
                            acc | (planes[plane_byte(r, tau, p, i)] >> 6) << (2 * p)
                        })
                    };
                    assert_eq!(got, want, "row {r} value {t}");
                }
            }
            let mut back = vec![0u8; ROWS * ROW_QUANTS];
            from_planes(&planes, 0..ROWS, |r, q| {
                back[r * ROW_QUANTS..(r + 1) * ROW_QUANTS].copy_from_slice(q)
            });
            assert_eq!(back, src);
        }
    }
}
