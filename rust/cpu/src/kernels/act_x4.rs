//! The interleaved 4-row "Q8_0 with sums" activation format of the ARM repacked kernels
//! (dotprod and i8mm, Q4_0 / Q8_0 weights): four activation rows stored block by block, so
//! that one vector load holds a word of every row and one `sdot` / `smmla` weight register
//! serves the four rows without a reload per row.
//!
//! Block `b` of a group of four rows (its `4 * q8_1::BYTES` = 144 bytes at `b * BLOCK`, the same
//! bytes the four plain rows take) holds the four f16 scales ([`D`]), the four i16 values
//! `-8 * sum` of each row's quants ([`NEG8_SUM`]: Q4_0's nibbles are used as 0..15) and the
//! quants ([`QS`]) in chunks of `word` bytes: chunk `h` of row `r` at `QS + (4 h + r) * word`
//! (`word` 4 for dotprod's `sdot` by element, 8 for i8mm's `smmla`).

use super::blocks::{q8_1, F16_BYTES};

/// Activation rows of one group.
pub(crate) const ROWS: usize = 4;
/// Bytes of one block of a group.
pub(crate) const BLOCK: usize = ROWS * q8_1::BYTES;
/// Offset of the four f16 scales in a block.
pub(crate) const D: usize = 0;
/// Offset of the four i16 `-8 * sum` in a block.
pub(crate) const NEG8_SUM: usize = ROWS * F16_BYTES;
/// Offset of the interleaved quants in a block.
pub(crate) const QS: usize = NEG8_SUM + ROWS * 2;

/// Rewrites four "Q8_0 with sums" rows of `k` values (`src`, one after the other) as one group
/// of the interleaved format with `word`-byte chunks in `dst` (as long as `src`).
pub(crate) fn interleave(word: usize, k: usize, src: &[u8], dst: &mut [u8]) {
    let row = k / 32 * q8_1::BYTES;
    debug_assert!(src.len() == ROWS * row && dst.len() == src.len() && 32 % word == 0);
    for (b, out) in dst.chunks_exact_mut(BLOCK).enumerate() {
        for r in 0..ROWS {
            let blk = &src[r * row + b * q8_1::BYTES..][..q8_1::BYTES];
            out[D + F16_BYTES * r..][..F16_BYTES].copy_from_slice(&blk[..F16_BYTES]);
            let sum = i16::from_le_bytes([blk[q8_1::S], blk[q8_1::S + 1]]);
            // |sum| <= 32 * 127, so 8 * sum fits an i16.
            out[NEG8_SUM + 2 * r..][..2].copy_from_slice(&(-8 * sum).to_le_bytes());
            for h in 0..32 / word {
                out[QS + (ROWS * h + r) * word..][..word]
                    .copy_from_slice(&blk[q8_1::QS + h * word..][..word]);
            }
        }
    }
}
