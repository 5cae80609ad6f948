//! The NEON + i8mm tier: Q8_0 and Q4_0 weights with `smmla` (emitted with `asm!`), two weight
//! rows by two activation rows per instruction; edges use the dotprod kernel.
#![allow(clippy::needless_range_loop)] // SIMD tiles index several arrays at once.

use super::dotprod;
use super::f16_at;
use super::neon::load_q;
use crate::kernels::TileFn;
use std::arch::aarch64::*;
use std::arch::asm;
use tessera_core::DType;

/// `acc += smmla(a, b)`: `a` two rows of 8 signed bytes, `b` two columns of 8; `acc` the 2 x 2
/// int32 products `[r0c0, r0c1, r1c0, r1c1]`.
macro_rules! smmla {
    ($acc:expr, $a:expr, $b:expr) => {{
        let mut r: int32x4_t = $acc;
        let (a, b): (int8x16_t, int8x16_t) = ($a, $b);
        asm!("smmla {r:v}.4s, {a:v}.16b, {b:v}.16b", r = inout(vreg) r, a = in(vreg) a,
             b = in(vreg) b, options(pure, nomem, nostack, preserves_flags));
        r
    }};
}

/// Interleaves two 32-byte rows (as two halves each) into four `smmla` operands: 8 bytes of
/// row 0 then the same 8 bytes of row 1.
macro_rules! zip_rows {
    ($r0:expr, $r1:expr) => {{
        let ((x0, x1), (y0, y1)): ((int8x16_t, int8x16_t), (int8x16_t, int8x16_t)) = ($r0, $r1);
        let z = |p: int8x16_t, q: int8x16_t| {
            (
                vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(p), vreinterpretq_s64_s8(q))),
                vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(p), vreinterpretq_s64_s8(q))),
            )
        };
        let (a0, a1) = z(x0, y0);
        let (a2, a3) = z(x1, y1);
        [a0, a1, a2, a3]
    }};
}

/// A 4 x 4 tile (two row pairs by two column pairs) of Q8_0 / Q4_0 weights times Q8_0
/// activations.
#[target_feature(enable = "neon,i8mm")]
unsafe fn q_0_4x4<const Q4: bool>(
    k: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    let ws = if Q4 { 18 } else { 34 };
    // acc[rp][cp] = [r0c0, r0c1, r1c0, r1c1] of row pair rp and column pair cp.
    let mut acc = [[vdupq_n_f32(0.0); 2]; 2];
    for blk in 0..k / 32 {
        let mut wz = [[vdupq_n_s8(0); 4]; 2];
        let mut wd = [vdupq_n_f32(0.0); 2];
        for rp in 0..2 {
            let p0 = a.add(2 * rp * lda + blk * ws);
            let p1 = p0.add(lda);
            wz[rp] = zip_rows!(load_q!(p0.add(2), Q4), load_q!(p1.add(2), Q4));
            let (d0, d1) = (f16_at(p0), f16_at(p1));
            wd[rp] = vld1q_f32([d0, d0, d1, d1].as_ptr());
        }
        for cp in 0..2 {
            let q0 = b.add(2 * cp * ldb + blk * 34);
            let q1 = q0.add(ldb);
            let bz = zip_rows!(load_q!(q0.add(2), false), load_q!(q1.add(2), false));
            let (e0, e1) = (f16_at(q0), f16_at(q1));
            let bd = vld1q_f32([e0, e1, e0, e1].as_ptr());
            for rp in 0..2 {
                let mut s = vdupq_n_s32(0);
                for h in 0..4 {
                    s = smmla!(s, wz[rp][h], bz[h]);
                }
                acc[rp][cp] = vfmaq_f32(acc[rp][cp], vcvtq_f32_s32(s), vmulq_f32(wd[rp], bd));
            }
        }
    }
    for rp in 0..2 {
        for cp in 0..2 {
            let mut v = [0f32; 4];
            vst1q_f32(v.as_mut_ptr(), acc[rp][cp]);
            for (n, &x) in v.iter().enumerate() {
                let (r, cc) = (2 * rp + n / 2, 2 * cp + n % 2);
                *c.add(cc * ldc + r) = x;
            }
        }
    }
}

macro_rules! i8mm_tile {
    ($name:ident, $q4:expr) => {
        /// Tile kernel (see [`TileFn`]): full 4 x 4 tiles with `smmla`, edges with `sdot`.
        ///
        /// # Safety
        ///
        /// As [`TileFn`].
        #[target_feature(enable = "neon,dotprod,i8mm")]
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
            if mr == 4 && nr == 4 {
                q_0_4x4::<$q4>(k, a, lda, b, ldb, c, ldc);
                return;
            }
            for i in 0..mr {
                for j in 0..nr {
                    dotprod::q_0_tile::<1, 1, $q4>(
                        k,
                        a.add(i * lda),
                        lda,
                        b.add(j * ldb),
                        ldb,
                        c.add(j * ldc + i),
                        ldc,
                    );
                }
            }
        }
    };
}

i8mm_tile!(tile_q8_0, false);
i8mm_tile!(tile_q4_0, true);

/// The i8mm tile kernel for weights of `wt`, with its tile size.
pub(super) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    Some(match wt {
        DType::Q8_0 => (tile_q8_0 as TileFn, 4, 4),
        DType::Q4_0 => (tile_q4_0 as TileFn, 4, 4),
        _ => return None,
    })
}
