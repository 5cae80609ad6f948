//! aarch64 tiers: NEON, NEON + dotprod (`sdot`), NEON + i8mm (`smmla`).
//!
//! `sdot` and `smmla` are emitted with `asm!` (their intrinsics are unstable on stable Rust)
//! inside functions compiled with `#[target_feature(enable = "neon,dotprod")]` /
//! `"neon,i8mm"`, reached only once the tier is known to be supported.

mod dotprod;
pub(crate) mod ew;
mod i8mm;
mod legacy;
mod neon;
mod packed_dotprod;
mod packed_i8mm;
mod q5_k;
mod quant_act;

use super::blocks::{q2_k, q3_k, q6_k};
use super::TileFn;
use std::arch::aarch64::*;
use tessera_core::DType;

/// The f16 at `p` (unaligned) as f32, with one inline `fcvt` (half-precision conversion is in
/// the base ARMv8-A FP instructions; `half`'s conversion is an out-of-line call that checks for
/// the FP16 extension, which counted 10 % of a generated token under qemu).
///
/// # Safety
///
/// `p` must point to two readable bytes.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: caller's contract.
    let bits = unsafe { std::ptr::read_unaligned(p.cast::<u16>()) } as i16;
    let out: f32;
    // SAFETY: `fcvt` from a half-precision register exists on every ARMv8-A CPU with FP (all
    // aarch64 targets); it reads and writes registers only.
    unsafe {
        std::arch::asm!(
            "fcvt {out:s}, {bits:h}",
            out = lateout(vreg) out,
            bits = in(vreg) bits,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    out
}

/// The four f16 at `p` (unaligned, consecutive) as f32 lanes: one 8-byte load and one `fcvtl`
/// (base ARMv8-A, as `fcvt` in [`f16_at`]).
///
/// # Safety
///
/// `p` must point to eight readable bytes.
#[inline(always)]
unsafe fn f16x4_at(p: *const u8) -> float32x4_t {
    // SAFETY: caller's contract; NEON is part of every aarch64 target this crate builds for.
    let h = unsafe { vcreate_u16(std::ptr::read_unaligned(p.cast::<u64>())) };
    let out: float32x4_t;
    // SAFETY: `fcvtl` (half to single precision, vector) is an ARMv8-A FP / AdvSIMD
    // instruction; it reads and writes registers only.
    unsafe {
        std::arch::asm!(
            "fcvtl {out:v}.4s, {h:v}.4h",
            out = lateout(vreg) out,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    out
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

/// The dotprod kernel for repacked (4 x 4) weights of `wt`, with its tile size.
pub(super) fn dotprod_packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    packed_dotprod::packed_tile(wt)
}

/// The i8mm kernel for repacked (4 x 8) weights of `wt`, with its tile size.
pub(super) fn i8mm_packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    packed_i8mm::packed_tile(wt)
}

/// Converts an activation row with NEON when a kernel exists for `act`; `false` otherwise.
/// Only called once the NEON tier is known to be supported.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    neon::quantize_act(act, src, dst)
}

use super::kquant::q3_k_scale_words;
pub(super) use super::kquant::scales_mins;

/// A Q4_K x Q8_K tile kernel body; `$dot32` sums the products of two 32-byte signed vectors
/// (as pairs of `int8x16_t`) into an `i32`.
macro_rules! q4_k_body {
    ($MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot32:ident) => {{
        use crate::kernels::blocks::{q4_k, q8_k};
        let mut acc = [[0f32; $NR]; $MR];
        let m4 = vdupq_n_u8(0x0f);
        for blk in 0..$k / 256 {
            let mut d = [0f32; $MR];
            let mut dmin = [0f32; $MR];
            let mut sc = [[0i32; 8]; $MR];
            let mut mn = [[0i32; 8]; $MR];
            for i in 0..$MR {
                let p = $a.add(i * $lda + blk * q4_k::BYTES);
                d[i] = super::f16_at(p);
                dmin[i] = super::f16_at(p.add(q4_k::DMIN));
                let (s, m) = super::scales_mins(&std::ptr::read_unaligned(
                    p.add(q4_k::SCALES).cast::<[u8; 12]>(),
                ));
                for t in 0..8 {
                    sc[i][t] = i32::from(s[t]);
                    mn[i][t] = i32::from(m[t]);
                }
            }
            for j in 0..$NR {
                let p = $b.add(j * $ldb + blk * q8_k::BYTES);
                let bd = std::ptr::read_unaligned(p.cast::<f32>());
                let bs = std::ptr::read_unaligned(p.add(q8_k::BSUMS).cast::<[i16; 16]>());
                for i in 0..$MR {
                    let mut sumi = 0i32;
                    for ch in 0..4 {
                        let q = $a.add(i * $lda + blk * q4_k::BYTES + q4_k::QS + 32 * ch);
                        let (q0, q1) = (vld1q_u8(q), vld1q_u8(q.add(16)));
                        let lo = (
                            vreinterpretq_s8_u8(vandq_u8(q0, m4)),
                            vreinterpretq_s8_u8(vandq_u8(q1, m4)),
                        );
                        let hi = (
                            vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0)),
                            vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1)),
                        );
                        let y = p.add(q8_k::QS + 64 * ch).cast::<i8>();
                        let yl = (vld1q_s8(y), vld1q_s8(y.add(16)));
                        let yh = (vld1q_s8(y.add(32)), vld1q_s8(y.add(48)));
                        sumi +=
                            sc[i][2 * ch] * $dot32!(lo, yl) + sc[i][2 * ch + 1] * $dot32!(hi, yh);
                    }
                    let mut ms = 0i32;
                    for t in 0..8 {
                        ms += mn[i][t] * (i32::from(bs[2 * t]) + i32::from(bs[2 * t + 1]));
                    }
                    acc[i][j] += d[i] * bd * sumi as f32 - dmin[i] * bd * ms as f32;
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
pub(super) use q4_k_body;

/// The 16 groups of 16 quants of the Q6_K block at `p`, as signed values `q - 32`.
///
/// # Safety
///
/// `p` must point to a readable Q6_K block.
#[inline(always)]
unsafe fn q6_k_groups(p: *const u8) -> [int8x16_t; 16] {
    // SAFETY: the loads are within the block's 128 low-bit bytes and its 64 high-bit bytes
    // (the caller's contract); NEON is part of every aarch64 target this crate builds for.
    unsafe {
        let m4 = vdupq_n_u8(0x0f);
        let m3 = vdupq_n_u8(0x03);
        let off = vdupq_n_s8(32);
        let mut q = [vdupq_n_s8(0); 16];
        for n in 0..2 {
            let (ql, qh) = (p.add(q6_k::QL + 64 * n), p.add(q6_k::QH + 32 * n));
            for h in 0..2 {
                let (l0, l1, hb) = (
                    vld1q_u8(ql.add(16 * h)),
                    vld1q_u8(ql.add(32 + 16 * h)),
                    vld1q_u8(qh.add(16 * h)),
                );
                let parts = [
                    vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8::<4>(vandq_u8(hb, m3))),
                    vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(hb), m3))),
                    vorrq_u8(
                        vshrq_n_u8::<4>(l0),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(hb), m3)),
                    ),
                    vorrq_u8(vshrq_n_u8::<4>(l1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(hb))),
                ];
                for (m, v) in parts.into_iter().enumerate() {
                    // Group 8n + 2m + h holds values 128n + 32m + 16h ..
                    q[8 * n + 2 * m + h] = vsubq_s8(vreinterpretq_s8_u8(v), off);
                }
            }
        }
        q
    }
}

/// Q6_K in [`k16_body`]: 6-bit quants, an 8-bit scale per 16 values.
pub(super) const K16_Q6: u8 = 0;
/// Q3_K in [`k16_body`]: 3-bit quants, a 6-bit scale per 16 values.
pub(super) const K16_Q3: u8 = 1;
/// Q2_K in [`k16_body`]: 2-bit quants, a 4-bit scale and a 4-bit min per 16 values.
pub(super) const K16_Q2: u8 = 2;

/// A Q6_K, Q3_K or Q2_K block as 16 groups of 16 signed values, each with its scale (and, for
/// Q2_K, its min: the value is `d * scale * q - dmin * min`).
pub(super) struct Groups16 {
    /// Super-block scale of the group scales.
    pub(super) d: f32,
    /// Super-block scale of the group mins (Q2_K; 0 otherwise).
    pub(super) dmin: f32,
    /// The 16 group scales.
    pub(super) scales: [i8; 16],
    /// The 16 group mins (Q2_K; 0 otherwise).
    pub(super) mins: [i8; 16],
    /// The 16 groups of 16 quants as signed bytes (offsets already removed).
    pub(super) q: [int8x16_t; 16],
}

/// The bytes of one block of `KIND` ([`K16_Q6`], [`K16_Q3`], [`K16_Q2`]).
pub(super) const fn k16_block_bytes(kind: u8) -> usize {
    match kind {
        K16_Q6 => q6_k::BYTES,
        K16_Q3 => q3_k::BYTES,
        _ => q2_k::BYTES,
    }
}

/// The 2-bit fields of a Q3_K / Q2_K block's 64 quant bytes at `qs`, as 16 groups of 16:
/// value `128n + 32m + l` is bits `2m..2m+2` of byte `32n + l`.
///
/// # Safety
///
/// `qs` must point to 64 readable bytes.
#[inline(always)]
unsafe fn two_bit_groups(qs: *const u8) -> [uint8x16_t; 16] {
    // SAFETY: the loads are within the 64 bytes (the caller's contract); NEON is part of every
    // aarch64 target this crate builds for.
    unsafe {
        let three = vdupq_n_u8(3);
        let mut q = [vdupq_n_u8(0); 16];
        for n in 0..2 {
            for h in 0..2 {
                let v = vld1q_u8(qs.add(32 * n + 16 * h));
                q[8 * n + h] = vandq_u8(v, three);
                q[8 * n + 2 + h] = vandq_u8(vshrq_n_u8::<2>(v), three);
                q[8 * n + 4 + h] = vandq_u8(vshrq_n_u8::<4>(v), three);
                q[8 * n + 6 + h] = vshrq_n_u8::<6>(v);
            }
        }
        q
    }
}

/// The block of `KIND` at `p` as 16 groups of 16 values.
///
/// # Safety
///
/// `p` must point to one readable block of `KIND`.
#[inline(always)]
pub(super) unsafe fn groups16<const KIND: u8>(p: *const u8) -> Groups16 {
    // SAFETY: every read below is at a field of the block (caller's contract).
    unsafe {
        match KIND {
            K16_Q6 => Groups16 {
                d: f16_at(p.add(q6_k::D)),
                dmin: 0.0,
                scales: std::ptr::read_unaligned(p.add(q6_k::SCALES).cast()),
                mins: [0; 16],
                q: q6_k_groups(p),
            },
            K16_Q3 => {
                let low = two_bit_groups(p.add(q3_k::QS));
                let four = vdupq_n_s8(4);
                let q = std::array::from_fn(|g| {
                    // Group g = 8n + 2m + h holds values 128n + 32m + 16h ..; their third bit
                    // is bit 4n + m of hmask[16h ..], set for the values that are not - 4.
                    let (n, m, h) = (g / 8, (g % 8) / 2, g % 2);
                    let hm = vld1q_u8(p.add(q3_k::HMASK + 16 * h));
                    let bit =
                        vandq_u8(vshlq_u8(hm, vdupq_n_s8(-((4 * n + m) as i8))), vdupq_n_u8(1));
                    let v = vorrq_u8(low[g], vshlq_n_u8::<2>(bit));
                    vsubq_s8(vreinterpretq_s8_u8(v), four)
                });
                let packed: [u8; 12] = std::ptr::read_unaligned(p.add(q3_k::SCALES).cast());
                // The scales are stored plus 32, four to a little-endian word.
                let mut biased = [0u8; 16];
                for (b, w) in biased.chunks_exact_mut(4).zip(q3_k_scale_words(&packed)) {
                    b.copy_from_slice(&w.to_le_bytes());
                }
                Groups16 {
                    d: f16_at(p.add(q3_k::D)),
                    dmin: 0.0,
                    scales: biased.map(|s| s.wrapping_sub(32) as i8),
                    mins: [0; 16],
                    q,
                }
            }
            _ => {
                let low = two_bit_groups(p.add(q2_k::QS));
                let packed: [u8; 16] = std::ptr::read_unaligned(p.add(q2_k::SCALES).cast());
                Groups16 {
                    d: f16_at(p.add(q2_k::D)),
                    dmin: f16_at(p.add(q2_k::DMIN)),
                    scales: packed.map(|v| (v & 0x0f) as i8),
                    mins: packed.map(|v| (v >> 4) as i8),
                    q: low.map(|v| vreinterpretq_s8_u8(v)),
                }
            }
        }
    }
}

/// A Q6_K / Q3_K / Q2_K (`$KIND`) x Q8_K tile kernel body; `$dot16` sums the products of two
/// 16-byte signed vectors into an `i32`.
macro_rules! k16_body {
    ($KIND:ident, $MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot16:ident) => {{
        use crate::kernels::blocks::q8_k;
        let mut acc = [[0f32; $NR]; $MR];
        let bytes = super::k16_block_bytes($KIND);
        for blk in 0..$k / 256 {
            for i in 0..$MR {
                let w = super::groups16::<$KIND>($a.add(i * $lda + blk * bytes));
                for j in 0..$NR {
                    let y = $b.add(j * $ldb + blk * q8_k::BYTES);
                    let bd = std::ptr::read_unaligned(y.cast::<f32>());
                    let ys = y.add(q8_k::QS).cast::<i8>();
                    let mut sumi = 0i32;
                    for g in 0..16 {
                        sumi += i32::from(w.scales[g]) * $dot16!(w.q[g], vld1q_s8(ys.add(16 * g)));
                    }
                    acc[i][j] += w.d * bd * sumi as f32;
                    if $KIND == super::K16_Q2 {
                        let bs = y.add(q8_k::BSUMS);
                        let bs = std::ptr::read_unaligned(bs.cast::<[i16; 16]>());
                        let mut ms = 0i32;
                        for g in 0..16 {
                            ms += i32::from(w.mins[g]) * i32::from(bs[g]);
                        }
                        acc[i][j] -= w.dmin * bd * ms as f32;
                    }
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
pub(super) use k16_body;
