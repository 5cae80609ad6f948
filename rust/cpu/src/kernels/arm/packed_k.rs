//! What the repacked K-quant kernels on plain Q8_K activation rows share
//! ([`super::packed_q4_k`]: Q4_K and Q5_K, [`super::packed_q6_k`]: Q6_K): a group of four
//! weight rows per call, up to four activation rows (columns) per call, the activation blocks
//! of one weight block, the scaling of a block's integer sums and the stores of the four rows'
//! outputs.

use crate::kernels::blocks::q8_k;
use crate::kernels::Operands;
use std::arch::aarch64::*;

/// Rows per group.
pub(super) const ROWS: usize = 4;
/// Activation rows per call of a group kernel.
pub(super) const COLS: usize = 4;

/// The Q8_K blocks `blk` of the `NR` activation rows `b + j * ldb`.
///
/// # Safety
///
/// The rows hold more than `blk` blocks.
#[inline(always)]
pub(super) unsafe fn act_blocks<const NR: usize>(
    b: *const u8,
    ldb: usize,
    blk: usize,
) -> [*const u8; NR] {
    // SAFETY: within the rows (caller's contract).
    std::array::from_fn(|j| unsafe { b.add(j * ldb + blk * q8_k::BYTES) })
}

/// The Q8_K blocks `blk` of the `2 * NP` activation rows `b + j * ldb`, in pairs (rows
/// `2p, 2p + 1`), as the `smmla` bodies take them.
///
/// # Safety
///
/// The rows hold more than `blk` blocks.
#[inline(always)]
pub(super) unsafe fn act_block_pairs<const NP: usize>(
    b: *const u8,
    ldb: usize,
    blk: usize,
) -> [[*const u8; 2]; NP] {
    // SAFETY: within the rows (caller's contract).
    std::array::from_fn(|p| unsafe { act_blocks::<2>(b.add(2 * p * ldb), ldb, blk) })
}

/// `acc + isum * d * bd`: the four rows' integer sums of a block (lanes: rows) scaled by their
/// `d` and by the Q8_K block's scale `bd` (its leading f32 at `y`).
///
/// # Safety
///
/// `y` points to a readable Q8_K block.
#[inline(always)]
pub(super) unsafe fn scaled(
    acc: float32x4_t,
    isum: int32x4_t,
    d: float32x4_t,
    y: *const u8,
) -> float32x4_t {
    // SAFETY: the block's scale (caller's contract); NEON is part of every aarch64 target this
    // crate builds for.
    unsafe {
        let bd = std::ptr::read_unaligned(y.cast::<f32>());
        vfmaq_f32(acc, vcvtq_f32_s32(isum), vmulq_n_f32(d, bd))
    }
}

/// Stores the four rows' outputs of each of `NR` activation rows at `c + j * ldc`.
///
/// # Safety
///
/// `c + j * ldc .. + 4` (`j < NR`) are writable.
#[inline(always)]
pub(super) unsafe fn store<const NR: usize>(c: *mut f32, ldc: usize, acc: &[float32x4_t; NR]) {
    for (j, &v) in acc.iter().enumerate() {
        // SAFETY: caller's contract.
        unsafe { vst1q_f32(c.add(j * ldc), v) };
    }
}

/// Calls `run(u, n)` for each group of four rows of a tile of `mr` rows and `nr` activation
/// rows and each run of `n <= COLS` of its activation rows (`u`: the operands from the group's
/// first row and the run's first activation row).
///
/// # Safety
///
/// As [`crate::kernels::TileFn`] for the tile `o`, `mr`, `nr`; `mr` is a multiple of [`ROWS`].
#[inline(always)]
pub(super) unsafe fn for_each_run(
    o: Operands,
    mr: usize,
    nr: usize,
    mut run: impl FnMut(Operands, usize),
) {
    debug_assert!(mr.is_multiple_of(ROWS));
    for gi in 0..mr / ROWS {
        let mut j = 0;
        while j < nr {
            let n = (nr - j).min(COLS);
            // SAFETY: group gi of the tile and its activation row j (caller's contract).
            run(unsafe { o.at(ROWS * gi, j) }, n);
            j += n;
        }
    }
}
