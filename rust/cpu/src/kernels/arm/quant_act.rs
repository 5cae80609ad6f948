//! NEON activation quantizers (Q8_0, Q8_1, Q8_K), bit-identical to `tessera_core`'s reference
//! `quantize_row`: the same f32 operations in the same order, with `fcvtas` (round half away
//! from zero) for the legacy types and `fcvtns` (round half to even, ggml's `nearest_int`) for
//! Q8_K.

use crate::kernels::act_x4;
use crate::kernels::blocks::{q8_0, q8_1, q8_k, F16_BYTES};
use std::arch::aarch64::*;
use tessera_core::DType;

/// The largest magnitude of the `N` vectors in `v`.
#[inline(always)]
fn abs_max<const N: usize>(v: &[float32x4_t; N]) -> f32 {
    // SAFETY: register-only NEON operations (NEON is in every aarch64 target).
    unsafe {
        let mut m = vabsq_f32(v[0]);
        for x in &v[1..] {
            m = vmaxq_f32(m, vabsq_f32(*x));
        }
        vmaxvq_f32(m)
    }
}

/// Quantizes 32 values at `x` as Q8_0 (`d = amax / 127`, round half away from zero): the f32
/// scale, the sum of the quants and the quants (values 0..16, 16..32).
///
/// # Safety
///
/// `x` must point to 32 readable f32.
#[target_feature(enable = "neon")]
unsafe fn q8_regs(x: *const f32) -> (f32, i32, [int8x16_t; 2]) {
    // SAFETY: `x` points to 32 readable f32 (the caller's contract): the loads below.
    unsafe {
        let v: [float32x4_t; 8] = std::array::from_fn(|i| vld1q_f32(x.add(4 * i)));
        let d = abs_max(&v) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let r: [int32x4_t; 8] = std::array::from_fn(|i| vcvtaq_s32_f32(vmulq_n_f32(v[i], id)));
        let mut sum = vaddq_s32(r[0], r[1]);
        for p in 1..4 {
            sum = vaddq_s32(sum, vaddq_s32(r[2 * p], r[2 * p + 1]));
        }
        let q = std::array::from_fn(|h| {
            let r = &r[4 * h..];
            let lo = vcombine_s16(vqmovn_s32(r[0]), vqmovn_s32(r[1]));
            let hi = vcombine_s16(vqmovn_s32(r[2]), vqmovn_s32(r[3]));
            vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi))
        });
        (d, vaddvq_s32(sum), q)
    }
}

/// Quantizes 32 values at `x` as Q8_0 ([`q8_regs`]), writing the quants to `q`; returns the
/// f32 scale and the sum of the quants.
///
/// # Safety
///
/// `x` must point to 32 readable f32 and `q` to 32 writable bytes.
#[target_feature(enable = "neon")]
unsafe fn q8_block(x: *const f32, q: *mut i8) -> (f32, i32) {
    // SAFETY: the caller's contract (32 f32 at `x`, 32 bytes at `q`).
    unsafe {
        let (d, sum, v) = q8_regs(x);
        vst1q_s8(q, v[0]);
        vst1q_s8(q.add(16), v[1]);
        (d, sum)
    }
}

/// Quantizes 256 values at `x` as a Q8_K block at `out` (`d`, quants, 16 `bsums`).
///
/// # Safety
///
/// `x` must point to 256 readable f32 and `out` to one writable Q8_K block.
#[target_feature(enable = "neon")]
unsafe fn q8_k_block(x: *const f32, out: *mut u8) {
    // SAFETY: `x` points to 256 readable f32 and `out` to one writable Q8_K block (the caller's
    // contract): every load and store below is within them.
    unsafe {
        let v: [float32x4_t; 64] = std::array::from_fn(|i| vld1q_f32(x.add(4 * i)));
        let amax = abs_max(&v);
        if amax == 0.0 {
            std::ptr::write_bytes(out, 0, q8_k::BYTES);
            return;
        }
        // The first value of largest magnitude (the reference's strict `>` scan); only a tie
        // between +amax and -amax needs the scan.
        let (mut hi, mut lo) = (v[0], v[0]);
        for x in &v[1..] {
            hi = vmaxq_f32(hi, *x);
            lo = vminq_f32(lo, *x);
        }
        let (hi, lo) = (vmaxvq_f32(hi), vminvq_f32(lo));
        let max = if hi == amax && lo != -amax {
            hi
        } else if lo == -amax && hi != amax {
            lo
        } else {
            // `x` points to 256 readable f32 (see above).
            let xs = std::slice::from_raw_parts(x, 256);
            xs.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax)
        };
        let iscale = -127.0 / max;
        let cap = vdupq_n_s32(127);
        let qs = out.add(q8_k::QS).cast::<i8>();
        let mut bsums = [0i16; 16];
        for (g, s) in bsums.iter_mut().enumerate() {
            let r: [int32x4_t; 4] = std::array::from_fn(|i| {
                vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(v[4 * g + i], iscale)), cap)
            });
            let lo = vcombine_s16(vqmovn_s32(r[0]), vqmovn_s32(r[1]));
            let hi = vcombine_s16(vqmovn_s32(r[2]), vqmovn_s32(r[3]));
            let q = vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi));
            vst1q_s8(qs.add(16 * g), q);
            *s = vaddvq_s16(vpaddlq_s8(q));
        }
        std::ptr::write_unaligned(out.cast::<f32>(), 1.0 / iscale);
        std::ptr::copy_nonoverlapping(bsums.as_ptr().cast::<u8>(), out.add(q8_k::BSUMS), 32);
    }
}

/// Converts an activation row with NEON when a quantizer exists for `act` (Q8_0, Q8_1, Q8_K);
/// `false` otherwise. `dst` holds `act.row_size(src.len())` bytes (checked by the caller).
pub(super) fn quantize_act(act: DType, src: &[f32], dst: &mut [u8]) -> bool {
    match act {
        DType::Q8_0 | DType::Q8_1 => {
            let (bs, qs) =
                if act == DType::Q8_0 { (q8_0::BYTES, q8_0::QS) } else { (q8_1::BYTES, q8_1::QS) };
            for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bs)) {
                // SAFETY: NEON is in every aarch64 target; 32 values in, 32 quant bytes out
                // (the block holds `bs` bytes, the quants from `qs`).
                let (d, sum) =
                    unsafe { q8_block(x.as_ptr(), out.as_mut_ptr().add(qs).cast::<i8>()) };
                out[..F16_BYTES].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
                if act == DType::Q8_1 {
                    let s = half::f16::from_f32(sum as f32 * d);
                    out[q8_1::S..q8_1::S + F16_BYTES].copy_from_slice(&s.to_bits().to_le_bytes());
                }
            }
            true
        }
        DType::Q8_K => {
            for (x, out) in src.chunks_exact(256).zip(dst.chunks_exact_mut(q8_k::BYTES)) {
                // SAFETY: NEON is in every aarch64 target; 256 values in, one Q8_K block out.
                unsafe { q8_k_block(x.as_ptr(), out.as_mut_ptr()) };
            }
            true
        }
        _ => false,
    }
}

/// Quantizes `src` to "Q8_0 with sums" blocks in `dst` (`Q8_1`-sized, see
/// [`crate::kernels::quantize_q8_0_sums`]): the Q8_0 scale and quants, the i16 sum of the
/// quants in place of Q8_1's `s`. `dst` holds `Q8_1.row_size(src.len())` bytes (checked by the
/// caller).
pub(super) fn quantize_q8_0_sums(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(q8_1::BYTES)) {
        // SAFETY: NEON is in every aarch64 target; 32 values in, 32 quant bytes out (the block
        // holds `q8_1::BYTES` bytes, the quants from `q8_1::QS`).
        let (d, sum) = unsafe { q8_block(x.as_ptr(), out.as_mut_ptr().add(q8_1::QS).cast::<i8>()) };
        out[..F16_BYTES].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        out[q8_1::S..q8_1::S + 2].copy_from_slice(&(sum as i16).to_le_bytes());
    }
}

/// Quantizes four activation rows (`rows`, of the same length) straight into one group of the
/// interleaved 4-row "Q8_0 with sums" format ([`act_x4`], `word`-byte chunks: 4 or 8) in `dst`
/// (`4 * Q8_1.row_size(len)` bytes, checked by the caller): per block, the four rows' quants
/// are transposed in registers (4-byte words: a 4 x 4 transpose of 32-bit lanes; 8-byte words:
/// pairs of 64-bit lanes) and stored once.
pub(super) fn quantize_q8_0_sums_x4(word: usize, rows: [&[f32]; act_x4::ROWS], dst: &mut [u8]) {
    let k = rows[0].len();
    debug_assert!(rows.iter().all(|r| r.len() == k) && dst.len() == k / 32 * act_x4::BLOCK);
    for (b, out) in dst.chunks_exact_mut(act_x4::BLOCK).enumerate().take(k / 32) {
        // SAFETY: NEON is in every aarch64 target (a register-only operation).
        let mut q = unsafe { [[vdupq_n_s8(0); 2]; act_x4::ROWS] };
        for (r, x) in rows.iter().enumerate() {
            // SAFETY: NEON is in every aarch64 target; 32 values of row r (b < k / 32).
            let (d, sum, v) = unsafe { q8_regs(x[32 * b..][..32].as_ptr()) };
            q[r] = v;
            let d = half::f16::from_f32(d).to_bits().to_le_bytes();
            out[act_x4::D + F16_BYTES * r..][..F16_BYTES].copy_from_slice(&d);
            // |sum| <= 32 * 127, so 8 * sum fits an i16.
            let s = (-8 * sum as i16).to_le_bytes();
            out[act_x4::NEG8_SUM + 2 * r..][..2].copy_from_slice(&s);
        }
        let qs = &mut out[act_x4::QS..][..128];
        // SAFETY: register-only NEON operations and stores of 16 bytes at offsets below 128 of
        // `qs` (128 bytes).
        unsafe {
            let p = qs.as_mut_ptr().cast::<i8>();
            // Half h (values 16h..16h + 16) of the four rows.
            let halves: [[int8x16_t; act_x4::ROWS]; 2] = std::array::from_fn(|h| q.map(|r| r[h]));
            for (h, [a, b, c, d]) in halves.into_iter().enumerate() {
                if word == 4 {
                    // Chunk 4h + i of the four rows: lanes i of a, b, c, d (32-bit).
                    let (a, b, c, d) = (
                        vreinterpretq_u32_s8(a),
                        vreinterpretq_u32_s8(b),
                        vreinterpretq_u32_s8(c),
                        vreinterpretq_u32_s8(d),
                    );
                    let (t0, t1) = (
                        vreinterpretq_u64_u32(vtrn1q_u32(a, b)),
                        vreinterpretq_u64_u32(vtrn2q_u32(a, b)),
                    );
                    let (t2, t3) = (
                        vreinterpretq_u64_u32(vtrn1q_u32(c, d)),
                        vreinterpretq_u64_u32(vtrn2q_u32(c, d)),
                    );
                    let v = [
                        vtrn1q_u64(t0, t2),
                        vtrn1q_u64(t1, t3),
                        vtrn2q_u64(t0, t2),
                        vtrn2q_u64(t1, t3),
                    ];
                    for (i, v) in v.into_iter().enumerate() {
                        vst1q_s8(p.add(64 * h + 16 * i), vreinterpretq_s8_u64(v));
                    }
                } else {
                    // Chunk 2h + i of rows (0, 1) and (2, 3): lanes i of a, b and c, d (64-bit).
                    let (a, b, c, d) = (
                        vreinterpretq_u64_s8(a),
                        vreinterpretq_u64_s8(b),
                        vreinterpretq_u64_s8(c),
                        vreinterpretq_u64_s8(d),
                    );
                    let v =
                        [vtrn1q_u64(a, b), vtrn1q_u64(c, d), vtrn2q_u64(a, b), vtrn2q_u64(c, d)];
                    for (i, v) in v.into_iter().enumerate() {
                        vst1q_s8(p.add(64 * h + 16 * i), vreinterpretq_s8_u64(v));
                    }
                }
            }
        }
    }
}
