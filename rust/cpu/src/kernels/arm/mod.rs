//! aarch64 tiers: NEON, NEON + dotprod (`sdot`), NEON + i8mm (`smmla`).
//!
//! `sdot` and `smmla` are emitted with `asm!` (their intrinsics are unstable on stable Rust)
//! inside functions compiled with `#[target_feature(enable = "neon,dotprod")]` /
//! `"neon,i8mm"`, reached only once the tier is known to be supported.

mod dotprod;
pub(crate) mod ew;
mod i8mm;
mod iq4;
mod legacy;
mod neon;
mod packed_dotprod;
mod packed_i8mm;
mod packed_k;
mod packed_q4_k;
mod packed_q6_k;
mod q5_k;
mod quant_act;

use super::blocks::{q2_k, q3_k, q6_k};
use super::TileFn;
use std::arch::aarch64::*;
use tessera_core::DType;

/// `acc += sdot(w, y)`: lane `l` of `acc` (`int32x4_t`) gains the dot product of the signed
/// bytes `4l..4l + 4` of `w` and of `y` (`int8x16_t`). Emitted with `asm!` (the intrinsic is
/// unstable): use inside an `unsafe` block of a function compiled with the `dotprod` feature.
macro_rules! sdot {
    ($acc:expr, $w:expr, $y:expr) => {{
        let mut r: ::std::arch::aarch64::int32x4_t = $acc;
        let (w, y): (::std::arch::aarch64::int8x16_t, ::std::arch::aarch64::int8x16_t) = ($w, $y);
        ::std::arch::asm!("sdot {r:v}.4s, {w:v}.16b, {y:v}.16b", r = inout(vreg) r,
             w = in(vreg) w, y = in(vreg) y, options(pure, nomem, nostack, preserves_flags));
        r
    }};
}
pub(super) use sdot;

/// `acc += sdot(w, y.4b[lane])`: lane `r` of `acc` gains the dot product of bytes `4r..4r + 4`
/// of `w` with bytes `4 * lane..4 * lane + 4` of `y` (`$lane` a literal 0..4); as [`sdot`].
macro_rules! sdot_lane {
    ($acc:expr, $w:expr, $y:expr, $lane:literal) => {{
        let mut r: ::std::arch::aarch64::int32x4_t = $acc;
        let (w, y): (::std::arch::aarch64::int8x16_t, ::std::arch::aarch64::int8x16_t) = ($w, $y);
        ::std::arch::asm!(concat!("sdot {r:v}.4s, {w:v}.16b, {y:v}.4b[", $lane, "]"),
             r = inout(vreg) r, w = in(vreg) w, y = in(vreg) y,
             options(pure, nomem, nostack, preserves_flags));
        r
    }};
}
pub(super) use sdot_lane;

/// `acc += smmla(w, y)`: `w` two rows of 8 signed bytes, `y` two columns of 8; `acc` the 2 x 2
/// int32 products `[r0c0, r0c1, r1c0, r1c1]`. Emitted with `asm!` (the intrinsic is
/// unstable): use inside an `unsafe` block of a function compiled with the `i8mm` feature.
macro_rules! smmla {
    ($acc:expr, $w:expr, $y:expr) => {{
        let mut r: ::std::arch::aarch64::int32x4_t = $acc;
        let (w, y): (::std::arch::aarch64::int8x16_t, ::std::arch::aarch64::int8x16_t) = ($w, $y);
        ::std::arch::asm!("smmla {r:v}.4s, {w:v}.16b, {y:v}.16b", r = inout(vreg) r,
             w = in(vreg) w, y = in(vreg) y, options(pure, nomem, nostack, preserves_flags));
        r
    }};
}
pub(super) use smmla;

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

/// Weight kind of the Q8_0 / Q4_0 kernels (`load_q`, the repacked ones): Q8_0.
pub(super) const Q0_Q8_0: u8 = 0;
/// Weight kind of the Q8_0 / Q4_0 kernels: Q4_0 (nibbles used as they are, 0..15, and
/// `8 * sum` of the activation quants subtracted).
pub(super) const Q0_Q4_0: u8 = 1;
/// Weight kind of the Q8_0 / Q4_0 kernels: IQ4_NL (Q4_0's block, each nibble the index of one
/// of its 16 signed levels, looked up with `tbl`).
pub(super) const Q0_IQ4_NL: u8 = 2;

/// Nibbles `v` (0..15 in each byte) as weights of kind `W` (Q4_0 or IQ4_NL): as they are for
/// Q4_0, the levels they index for IQ4_NL.
#[inline(always)]
fn nibble_weights<const W: u8>(v: uint8x16_t) -> int8x16_t {
    // SAFETY: NEON is part of every aarch64 target this crate builds for; the load reads the
    // 16 levels of a static.
    unsafe {
        if W == Q0_IQ4_NL {
            vqtbl1q_s8(vld1q_s8(tessera_core::quant::KVALUES_IQ4NL.as_ptr()), v)
        } else {
            vreinterpretq_s8_u8(v)
        }
    }
}

/// The NEON tile kernel for weights of `wt`, with its tile size.
pub(super) fn neon_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    neon::tile(wt).or_else(|| iq4::neon_tile(wt))
}

/// The dotprod tile kernel for weights of `wt`, with its tile size.
pub(super) fn dotprod_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    dotprod::tile(wt).or_else(|| iq4::dotprod_tile(wt))
}

/// The i8mm tile kernel for weights of `wt`, with its tile size.
pub(super) fn i8mm_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    i8mm::tile(wt).or_else(|| iq4::i8mm_tile(wt))
}

/// The dotprod kernel for repacked (4 x 4) weights of `wt` (Q4_0, Q8_0, IQ4_NL, Q4_K, Q5_K,
/// Q6_K), with its tile size.
pub(super) fn dotprod_packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    packed_dotprod::packed_tile(wt)
        .or_else(|| packed_q4_k::packed_tile(4, wt))
        .or_else(|| packed_q6_k::packed_tile(4, wt))
}

/// The i8mm kernel for repacked (4 x 8) weights of `wt` (Q4_0, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K),
/// with its tile size.
pub(super) fn i8mm_packed_tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    packed_i8mm::packed_tile(wt)
        .or_else(|| packed_q4_k::packed_tile(8, wt))
        .or_else(|| packed_q6_k::packed_tile(8, wt))
}

/// Quantizes an activation row to "Q8_0 with sums" with NEON (`dst` sized by the caller).
pub(super) fn quantize_q8_0_sums(src: &[f32], dst: &mut [u8]) {
    quant_act::quantize_q8_0_sums(src, dst)
}

/// Quantizes four activation rows with NEON straight into one group of the interleaved 4-row
/// format with `word`-byte chunks (`dst` sized by the caller).
pub(super) fn quantize_q8_0_sums_x4(word: usize, rows: [&[f32]; 4], dst: &mut [u8]) {
    quant_act::quantize_q8_0_sums_x4(word, rows, dst)
}

/// Converts an activation row with NEON when a kernel exists for `act`; `false` otherwise.
/// Only called once the NEON tier is known to be supported.
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    neon::quantize_act(act, src, dst)
}

use super::kquant::q3_k_scale_words;
pub(super) use super::kquant::scales_mins;

/// The 6-bit scales and mins of a Q4_K / Q5_K block from its 12 packed bytes, as two vectors of
/// four i32 scales (groups 0..4, 4..8) and eight i16 mins: the low six bits of bytes 0..4 (the
/// scales) and 4..8 (the mins) for groups 0..4; for groups 4..8 the nibbles of bytes 8..12
/// (low: the scales, high: the mins) with the top two bits of bytes 0..4 and 4..8 above them.
/// On 32-bit words (eight scalar operations), then widened as vectors.
///
/// # Safety
///
/// `p` must point to 12 readable bytes.
#[inline(always)]
unsafe fn k4_scales_mins(p: *const u8) -> ([int32x4_t; 2], int16x8_t) {
    // SAFETY: the reads are the 12 bytes (caller's contract); NEON is part of every aarch64
    // target this crate builds for.
    unsafe {
        let w = |i: usize| u32::from_le(std::ptr::read_unaligned(p.add(4 * i).cast::<u32>()));
        let (w0, w1, w2) = (w(0), w(1), w(2));
        let (six, four, two) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
        let sc_lo = w0 & six;
        let sc_hi = (w2 & four) | (((w0 >> 6) & two) << 4);
        let mn_lo = w1 & six;
        let mn_hi = ((w2 >> 4) & four) | (((w1 >> 6) & two) << 4);
        let sc = vmovl_u8(vcreate_u8(u64::from(sc_lo) | u64::from(sc_hi) << 32));
        let mn = vmovl_u8(vcreate_u8(u64::from(mn_lo) | u64::from(mn_hi) << 32));
        (
            [
                vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(sc))),
                vreinterpretq_s32_u32(vmovl_high_u16(sc)),
            ],
            vreinterpretq_s16_u16(mn),
        )
    }
}

/// The products `mins[g] * (bsums[2g] + bsums[2g + 1])` of a Q4_K / Q5_K block against the
/// Q8_K block at `y`, in four i32 lanes whose sum is the mins' share of the dot product
/// (through Q8_K's sums of 16 quants).
///
/// # Safety
///
/// `y` must point to a readable Q8_K block.
#[inline(always)]
unsafe fn k4_min_dot(mins: int16x8_t, y: *const u8) -> int32x4_t {
    use super::blocks::q8_k;
    // SAFETY: the 32 bytes of `bsums` are in the block (caller's contract); NEON is part of
    // every aarch64 target this crate builds for.
    unsafe {
        let bs = vld1q_s16_x2(y.add(q8_k::BSUMS).cast::<i16>());
        // The sums of the eight groups of 32 (each at most 32 * 128 in magnitude).
        let gs = vpaddq_s16(bs.0, bs.1);
        vmlal_high_s16(vmull_s16(vget_low_s16(gs), vget_low_s16(mins)), gs, mins)
    }
}

/// A Q4_K x Q8_K tile kernel body; `$dot32v` gives the products of two 32-byte signed vectors
/// (as pairs of `int8x16_t`) as an `int32x4_t`. Each weight row's block is unpacked once (its
/// nibbles, its scales as vectors) for all the activation rows of the tile; the group dots are
/// folded into two vectors of four group sums (`addp`), times the scale vectors, reduced once
/// per block; the mins go through Q8_K's `bsums`.
macro_rules! q4_k_body {
    ($MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot32v:ident) => {{
        use crate::kernels::blocks::{q4_k, q8_k};
        // acc[i][j]: two lanes, the scales' part and the mins' part (summed at the end).
        let mut acc = [[vdup_n_f32(0.0); $NR]; $MR];
        let m4 = vdupq_n_u8(0x0f);
        let sign = vld1_f32([1.0f32, -1.0].as_ptr());
        for blk in 0..$k / 256 {
            for i in 0..$MR {
                let p = $a.add(i * $lda + blk * q4_k::BYTES);
                // [d, -dmin] (the f16 `d` and `dmin` lead the block).
                let dm = vmul_f32(vget_low_f32(super::f16x4_at(p)), sign);
                let (sc, mins) = super::k4_scales_mins(p.add(q4_k::SCALES));
                // Group 2ch: the low nibbles of bytes 32ch..32ch + 32, group 2ch + 1 the high.
                let mut q = [(vdupq_n_s8(0), vdupq_n_s8(0)); 8];
                for ch in 0..2 {
                    let r = vld1q_u8_x4(p.add(q4_k::QS + 64 * ch));
                    for (h, (x0, x1)) in [(r.0, r.1), (r.2, r.3)].into_iter().enumerate() {
                        let g = 4 * ch + 2 * h;
                        q[g] = (
                            vreinterpretq_s8_u8(vandq_u8(x0, m4)),
                            vreinterpretq_s8_u8(vandq_u8(x1, m4)),
                        );
                        q[g + 1] = (
                            vreinterpretq_s8_u8(vshrq_n_u8::<4>(x0)),
                            vreinterpretq_s8_u8(vshrq_n_u8::<4>(x1)),
                        );
                    }
                }
                for j in 0..$NR {
                    let y = $b.add(j * $ldb + blk * q8_k::BYTES);
                    let bd = std::ptr::read_unaligned(y.cast::<f32>());
                    let ys = y.add(q8_k::QS).cast::<i8>();
                    let dot = |g: usize| {
                        let yv = vld1q_s8_x2(ys.add(32 * g));
                        $dot32v!(q[g], (yv.0, yv.1))
                    };
                    // The eight group sums (pairwise adds of the dots' lanes), times the scales.
                    let (p01, p23) = (vpaddq_s32(dot(0), dot(1)), vpaddq_s32(dot(2), dot(3)));
                    let (p45, p67) = (vpaddq_s32(dot(4), dot(5)), vpaddq_s32(dot(6), dot(7)));
                    let sumv = vmulq_s32(vpaddq_s32(p01, p23), sc[0]);
                    let sumv = vmlaq_s32(sumv, vpaddq_s32(p45, p67), sc[1]);
                    // [sum, mins' sum, ..]: both reduced at once.
                    let sm = vpaddq_s32(sumv, super::k4_min_dot(mins, y));
                    let sm = vcvt_f32_s32(vget_low_s32(vpaddq_s32(sm, sm)));
                    acc[i][j] = vfma_n_f32(acc[i][j], vmul_f32(sm, dm), bd);
                }
            }
        }
        for i in 0..$MR {
            for j in 0..$NR {
                *$c.add(j * $ldc + i) = vpadds_f32(acc[i][j]);
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

/// A Q6_K / Q3_K / Q2_K (`$KIND`) x Q8_K tile kernel body; `$dot16v` gives the products of two
/// 16-byte signed vectors as an `int32x4_t`. The sixteen group dots are folded into four vectors
/// of four group sums (`addp`), times the scales widened to i32 vectors, reduced once per
/// block.
macro_rules! k16_body {
    ($KIND:ident, $MR:ident, $NR:ident, $k:ident, $a:ident, $lda:ident, $b:ident, $ldb:ident, $c:ident, $ldc:ident, $dot16v:ident) => {{
        use crate::kernels::blocks::q8_k;
        let mut acc = [[0f32; $NR]; $MR];
        let bytes = super::k16_block_bytes($KIND);
        for blk in 0..$k / 256 {
            for i in 0..$MR {
                let w = super::groups16::<$KIND>($a.add(i * $lda + blk * bytes));
                let sc = vld1q_s8(w.scales.as_ptr());
                let (sl, sh) = (vmovl_s8(vget_low_s8(sc)), vmovl_high_s8(sc));
                let scv = [
                    vmovl_s16(vget_low_s16(sl)),
                    vmovl_high_s16(sl),
                    vmovl_s16(vget_low_s16(sh)),
                    vmovl_high_s16(sh),
                ];
                for j in 0..$NR {
                    let y = $b.add(j * $ldb + blk * q8_k::BYTES);
                    let bd = std::ptr::read_unaligned(y.cast::<f32>());
                    let ys = y.add(q8_k::QS).cast::<i8>();
                    let dot = |g: usize| $dot16v!(w.q[g], vld1q_s8(ys.add(16 * g)));
                    // Groups 4t..4t + 4: their sums (pairwise adds of the dots' lanes).
                    let sums = |t: usize| {
                        let (a, b) = (
                            vpaddq_s32(dot(4 * t), dot(4 * t + 1)),
                            vpaddq_s32(dot(4 * t + 2), dot(4 * t + 3)),
                        );
                        vpaddq_s32(a, b)
                    };
                    let mut sumv = vmulq_s32(sums(0), scv[0]);
                    for t in 1..4 {
                        sumv = vmlaq_s32(sumv, sums(t), scv[t]);
                    }
                    let sumi = vaddvq_s32(sumv);
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
