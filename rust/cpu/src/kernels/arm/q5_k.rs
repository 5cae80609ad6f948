//! The Q5_K x Q8_K tile body shared by the NEON and dotprod tiers (they differ only in their
//! int8 dot).
//!
//! A Q5_K block (176 bytes: `d`, `dmin`, 12 bytes of 6-bit scales and mins, 32 bytes `qh`, 128
//! bytes of nibbles) holds 8 groups of 32 values `x = d * sc * q - dmin * m`, `q` in `0..32`:
//! group `2c` takes the low nibbles of `qs[32c..32c + 32]`, group `2c + 1` the high ones, and
//! bit `g` of `qh[l]` is the fifth bit of value `l` of group `g`. Each weight row's block is
//! unpacked once and used for every activation row of the tile; the mins go through Q8_K's
//! `bsums`.

use crate::kernels::blocks::q5_k;
use std::arch::aarch64::*;

/// Bytes of a Q5_K block.
pub(super) const BLOCK: usize = q5_k::BYTES;

/// A Q5_K block unpacked for the dot products.
pub(super) struct Unpacked {
    /// Super-block scale of the group scales.
    pub(super) d: f32,
    /// Super-block scale of the group mins.
    pub(super) dmin: f32,
    /// The 8 group scales.
    pub(super) sc: [i32; 8],
    /// The 8 group mins.
    pub(super) mn: [i32; 8],
    /// The 8 groups of 32 quants (`0..32`) as signed bytes, each as two `int8x16_t`.
    pub(super) q: [(int8x16_t, int8x16_t); 8],
}

/// Unpacks the Q5_K block at `p`.
///
/// # Safety
///
/// `p` must point to a readable Q5_K block.
#[inline(always)]
pub(super) unsafe fn load_block(p: *const u8) -> Unpacked {
    // SAFETY: every read is inside the block (caller's contract).
    unsafe {
        let d = super::f16_at(p);
        let dmin = super::f16_at(p.add(q5_k::DMIN));
        let scales = std::ptr::read_unaligned(p.add(q5_k::SCALES).cast::<[u8; 12]>());
        let (s, m) = super::scales_mins(&scales);
        let sc = s.map(i32::from);
        let mn = m.map(i32::from);
        let qh = (vld1q_u8(p.add(q5_k::QH)), vld1q_u8(p.add(q5_k::QH + 16)));
        let m4 = vdupq_n_u8(0x0f);
        let sixteen = vdupq_n_u8(0x10);
        let mut q = [(vdupq_n_s8(0), vdupq_n_s8(0)); 8];
        for ch in 0..4 {
            let ql = p.add(q5_k::QS + 32 * ch);
            let (q0, q1) = (vld1q_u8(ql), vld1q_u8(ql.add(16)));
            for (h, nib) in
                [(vandq_u8(q0, m4), vandq_u8(q1, m4)), (vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1))]
                    .into_iter()
                    .enumerate()
            {
                let g = 2 * ch + h;
                let bit = vdupq_n_u8(1 << g);
                let h0 = vandq_u8(vtstq_u8(qh.0, bit), sixteen);
                let h1 = vandq_u8(vtstq_u8(qh.1, bit), sixteen);
                q[g] = (
                    vreinterpretq_s8_u8(vorrq_u8(nib.0, h0)),
                    vreinterpretq_s8_u8(vorrq_u8(nib.1, h1)),
                );
            }
        }
        Unpacked { d, dmin, sc, mn, q }
    }
}

/// A Q5_K x Q8_K tile kernel body; `$dot32` sums the products of two 32-byte signed vectors
/// (as pairs of `int8x16_t`) into an `int32x4_t` (scaled per group and reduced once per block).
macro_rules! q5_k_body {
    ($MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot32:ident) => {{
        use super::q5_k;
        use crate::kernels::blocks::q8_k;
        let mut acc = [[0f32; $NR]; $MR];
        for blk in 0..$k / 256 {
            for i in 0..$MR {
                let q5_k::Unpacked { d, dmin, sc, mn, q } =
                    q5_k::load_block($a.add(i * $lda + blk * q5_k::BLOCK));
                for j in 0..$NR {
                    let y = $b.add(j * $ldb + blk * q8_k::BYTES);
                    let bd = std::ptr::read_unaligned(y.cast::<f32>());
                    let bs = std::ptr::read_unaligned(y.add(q8_k::BSUMS).cast::<[i16; 16]>());
                    let ys = y.add(q8_k::QS).cast::<i8>();
                    let mut sumv = vdupq_n_s32(0);
                    for g in 0..8 {
                        let yv = (vld1q_s8(ys.add(32 * g)), vld1q_s8(ys.add(32 * g + 16)));
                        sumv = vmlaq_n_s32(sumv, $dot32!(q[g], yv), sc[g]);
                    }
                    let sumi = vaddvq_s32(sumv);
                    let mut ms = 0i32;
                    for g in 0..8 {
                        ms += mn[g] * (i32::from(bs[2 * g]) + i32::from(bs[2 * g + 1]));
                    }
                    acc[i][j] += d * bd * sumi as f32 - dmin * bd * ms as f32;
                }
            }
        }
        for i in 0..$MR {
            for j in 0..$NR {
                *$c.add(j * $ldc + i) = acc[i][j];
            }
        }
    }};
}
pub(super) use q5_k_body;
