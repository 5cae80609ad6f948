//! The k-quants: 256-value super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K.
//!
//! Quantization follows ggml's reference functions (`quantize_row_q*_K_ref` in
//! `ggml-quants.c`, without importance weights) operation for operation in f32, so that the bytes
//! are identical; dequantization follows `dequantize_row_q*_K`.
//!
//! Q8_K is the activation type of the k-quant matmuls: its quantizer allocates nothing and its
//! loops vectorize.

// The loops index several arrays in lock step, exactly as ggml's code that they mirror.
#![allow(clippy::needless_range_loop)]

use super::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
use super::kquant_helpers::{
    get_scale_min_k4, make_q3_quants, make_qkx2_quants, make_qx_quants_rmse1, nearest_int,
    pack_scale_min_k4, Qkx2, GROUP_MAX_EPS,
};
use super::legacy::abs_max;
use super::{check_dequantize, check_quantize};
use crate::error::Result;
use half::f16;

/// Packs 256 2-bit values: in each 128-value half, byte `l` holds values `l`, `l + 32`, `l + 64`
/// and `l + 96` at bits 0, 2, 4 and 6 (Q2_K's and Q3_K's `qs`).
#[inline]
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
}

/// The 2 low bits of value `i` of a Q2_K/Q3_K `qs`.
#[inline(always)]
fn unpack_2bit(qs: &[u8; QK_K / 4], i: usize) -> u8 {
    let (half, r) = (i / 128, i % 128);
    (qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3
}

/// Quantizes `src` (a multiple of 256 values) to Q2_K, byte-identical to ggml's
/// `quantize_row_q2_K_ref`.
pub fn quantize_row_q2_k(src: &[f32], dst: &mut [BlockQ2K]) -> Result<()> {
    check_quantize::<BlockQ2K>("quantize_row_q2_k", src, dst.len())?;
    const Q4SCALE: f32 = 15.0;
    const P: Qkx2 = Qkx2 { nmax: 3, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: true };
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut weights = [0f32; 16];
    let mut mins = [0f32; QK_K / 16];
    let mut scales = [0f32; QK_K / 16];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let mut max_scale = 0f32;
        let mut max_min = 0f32;
        for j in 0..QK_K / 16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (scale, min) =
                make_qkx2_quants(P, xs, &weights, &mut l[16 * j..16 * j + 16], &mut laux);
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..QK_K / 16 {
                // ggml stores the int into a uint8_t: modulo 256.
                y.scales[j] = nearest_int(iscale * scales[j]) as u8;
            }
            y.d = f16::from_f32(max_scale / Q4SCALE);
        } else {
            y.scales = [0; QK_K / 16];
            y.d = f16::from_f32(0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..QK_K / 16 {
                let lm = nearest_int(iscale * mins[j]);
                y.scales[j] |= (lm << 4) as u8;
            }
            y.dmin = f16::from_f32(max_min / Q4SCALE);
        } else {
            y.dmin = f16::from_f32(0.0);
        }
        let dall = y.d.to_f32();
        let dmin = y.dmin.to_f32();
        for j in 0..QK_K / 16 {
            let d = dall * f32::from(y.scales[j] & 0x0f);
            if d == 0.0 {
                continue;
            }
            let dm = dmin * f32::from(y.scales[j] >> 4);
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3);
                l[16 * j + ii] = q as u8;
            }
        }
        pack_2bit(&l, &mut y.qs);
    }
    Ok(())
}

/// Dequantizes Q2_K blocks, as ggml's `dequantize_row_q2_K`.
pub fn dequantize_row_q2_k(src: &[BlockQ2K], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ2K>("dequantize_row_q2_k", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let sc = b.scales[g];
            let dl = d * f32::from(sc & 0x0f);
            let ml = min * f32::from(sc >> 4);
            for (k, v) in yg.iter_mut().enumerate() {
                *v = dl * f32::from(unpack_2bit(&b.qs, 16 * g + k)) - ml;
            }
        }
    }
    Ok(())
}

/// The 6-bit scale of group `j` (0..16) of a Q3_K block, minus 32.
#[inline(always)]
fn q3k_scale(scales: &[u8; 12], j: usize) -> i8 {
    let lo = if j < 8 { scales[j] & 0x0f } else { scales[j - 8] >> 4 };
    let hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    (lo | (hi << 4)) as i8 - 32
}

/// Quantizes `src` to Q3_K, byte-identical to ggml's `quantize_row_q3_K_ref`.
pub fn quantize_row_q3_k(src: &[f32], dst: &mut [BlockQ3K]) -> Result<()> {
    check_quantize::<BlockQ3K>("quantize_row_q3_k", src, dst.len())?;
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let mut max_scale = 0f32;
        let mut amax = 0f32;
        for j in 0..QK_K / 16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        y.scales = [0; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..QK_K / 16 {
                // ggml stores the int into an int8_t before clamping.
                let lv = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    y.scales[j] = lv & 0x0f;
                } else {
                    y.scales[j - 8] |= (lv & 0x0f) << 4;
                }
                y.scales[j % 4 + 8] |= (lv >> 4) << (2 * (j / 4));
            }
            y.d = f16::from_f32(1.0 / iscale);
        } else {
            y.d = f16::from_f32(0.0);
        }
        let dall = y.d.to_f32();
        for j in 0..QK_K / 16 {
            let d = dall * f32::from(q3k_scale(&y.scales, j));
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }
        // High bit of value j goes to bit j / 32 of hmask[j % 32].
        y.hmask = [0; QK_K / 8];
        let mut low = [0u8; QK_K];
        for j in 0..QK_K {
            let mut q = l[j] as u8;
            if q > 3 {
                y.hmask[j % 32] |= 1 << (j / 32);
                q -= 4;
            }
            low[j] = q;
        }
        pack_2bit(&low, &mut y.qs);
    }
    Ok(())
}

/// Dequantizes Q3_K blocks, as ggml's `dequantize_row_q3_K`.
pub fn dequantize_row_q3_k(src: &[BlockQ3K], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ3K>("dequantize_row_q3_k", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d_all = b.d.to_f32();
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let dl = d_all * f32::from(q3k_scale(&b.scales, g));
            for (k, v) in yg.iter_mut().enumerate() {
                let i = 16 * g + k;
                let low = unpack_2bit(&b.qs, i) as i8;
                let high_clear = b.hmask[i % 32] & (1 << (i / 32)) == 0;
                *v = dl * f32::from(low - if high_clear { 4 } else { 0 });
            }
        }
    }
    Ok(())
}

/// Shared part of Q4_K and Q5_K quantization: per-group asymmetric scale search, 6-bit scales
/// and mins, and the requantized values (`0..=nmax`) in `l`. Returns (packed scales, d, dmin).
fn quantize_k4_scales(
    x: &[f32],
    p: Qkx2,
    l: &mut [u8; QK_K],
    laux: &mut [u8; 32],
) -> ([u8; 12], f16, f16) {
    let mut weights = [0f32; 32];
    let mut mins = [0f32; QK_K / 32];
    let mut scales = [0f32; QK_K / 32];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = make_qkx2_quants(p, xs, &weights, &mut l[32 * j..32 * j + 32], laux);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..QK_K / 32 {
        // ggml stores the int into a uint8_t (modulo 256), then clamps to 63.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    let (df, dminf) = (d.to_f32(), dmin.to_f32());
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let d = df * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = dminf * f32::from(m);
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, p.nmax);
            l[32 * j + ii] = q as u8;
        }
    }
    (packed, d, dmin)
}

/// Quantizes `src` to Q4_K, byte-identical to ggml's `quantize_row_q4_K_ref`.
pub fn quantize_row_q4_k(src: &[f32], dst: &mut [BlockQ4K]) -> Result<()> {
    check_quantize::<BlockQ4K>("quantize_row_q4_k", src, dst.len())?;
    const P: Qkx2 = Qkx2 { nmax: 15, rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 32];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let (scales, d, dmin) = quantize_k4_scales(x, P, &mut l, &mut laux);
        y.scales = scales;
        y.d = d;
        y.dmin = dmin;
        for j in (0..QK_K).step_by(64) {
            for k in 0..32 {
                y.qs[j / 2 + k] = l[j + k] | (l[j + k + 32] << 4);
            }
        }
    }
    Ok(())
}

/// Dequantizes Q4_K blocks, as ggml's `dequantize_row_q4_K`.
pub fn dequantize_row_q4_k(src: &[BlockQ4K], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ4K>("dequantize_row_q4_k", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (c, yc) in y.chunks_exact_mut(64).enumerate() {
            let (sc1, m1) = get_scale_min_k4(2 * c, &b.scales);
            let (sc2, m2) = get_scale_min_k4(2 * c + 1, &b.scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let q = &b.qs[32 * c..32 * c + 32];
            let (lo, hi) = yc.split_at_mut(32);
            for ((&q, y1), y2) in q.iter().zip(lo).zip(hi) {
                *y1 = d1 * f32::from(q & 0x0f) - m1;
                *y2 = d2 * f32::from(q >> 4) - m2;
            }
        }
    }
    Ok(())
}

/// Quantizes `src` to Q5_K, byte-identical to ggml's `quantize_row_q5_K_ref`.
pub fn quantize_row_q5_k(src: &[f32], dst: &mut [BlockQ5K]) -> Result<()> {
    check_quantize::<BlockQ5K>("quantize_row_q5_k", src, dst.len())?;
    const P: Qkx2 = Qkx2 { nmax: 31, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: false };
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 32];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let (scales, d, dmin) = quantize_k4_scales(x, P, &mut l, &mut laux);
        y.scales = scales;
        y.d = d;
        y.dmin = dmin;
        y.qh = [0; QK_K / 8];
        for (c, n) in (0..QK_K).step_by(64).enumerate() {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    y.qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    y.qh[j] |= m2;
                }
                y.qs[n / 2 + j] = l1 | (l2 << 4);
            }
        }
    }
    Ok(())
}

/// Dequantizes Q5_K blocks, as ggml's `dequantize_row_q5_K`.
pub fn dequantize_row_q5_k(src: &[BlockQ5K], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ5K>("dequantize_row_q5_k", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (c, yc) in y.chunks_exact_mut(64).enumerate() {
            let (sc1, m1) = get_scale_min_k4(2 * c, &b.scales);
            let (sc2, m2) = get_scale_min_k4(2 * c + 1, &b.scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let ql = &b.qs[32 * c..32 * c + 32];
            for l in 0..32 {
                let h1 = if b.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if b.qh[l] & u2 != 0 { 16 } else { 0 };
                yc[l] = d1 * f32::from((ql[l] & 0x0f) + h1) - m1;
                yc[l + 32] = d2 * f32::from((ql[l] >> 4) + h2) - m2;
            }
        }
    }
    Ok(())
}

/// Quantizes `src` to Q6_K, byte-identical to ggml's `quantize_row_q6_K_ref`.
pub fn quantize_row_q6_k(src: &[f32], dst: &mut [BlockQ6K]) -> Result<()> {
    use super::blocks::Block;
    check_quantize::<BlockQ6K>("quantize_row_q6_k", src, dst.len())?;
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let mut max_scale = 0f32;
        let mut max_abs_scale = 0f32;
        for ib in 0..QK_K / 16 {
            let scale =
                make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *y = BlockQ6K::ZERO;
            continue;
        }
        let iscale = -128.0 / max_scale;
        y.d = f16::from_f32(1.0 / iscale);
        for ib in 0..QK_K / 16 {
            // ggml stores the int into an int8_t.
            y.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        let dall = y.d.to_f32();
        for j in 0..QK_K / 16 {
            let d = dall * f32::from(y.scales[j]);
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        for (c, j) in (0..QK_K).step_by(128).enumerate() {
            let ql = &mut y.ql[64 * c..64 * c + 64];
            let qh = &mut y.qh[32 * c..32 * c + 32];
            for k in 0..32 {
                let q =
                    [l[j + k] as u8, l[j + k + 32] as u8, l[j + k + 64] as u8, l[j + k + 96] as u8];
                ql[k] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
                ql[k + 32] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
                qh[k] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
    Ok(())
}

/// Dequantizes Q6_K blocks, as ggml's `dequantize_row_q6_K`.
pub fn dequantize_row_q6_k(src: &[BlockQ6K], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ6K>("dequantize_row_q6_k", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (c, yc) in y.chunks_exact_mut(128).enumerate() {
            let ql = &b.ql[64 * c..64 * c + 64];
            let qh = &b.qh[32 * c..32 * c + 32];
            let sc = &b.scales[8 * c..8 * c + 8];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                yc[l] = d * f32::from(sc[is]) * f32::from(q1);
                yc[l + 32] = d * f32::from(sc[is + 2]) * f32::from(q2);
                yc[l + 64] = d * f32::from(sc[is + 4]) * f32::from(q3);
                yc[l + 96] = d * f32::from(sc[is + 6]) * f32::from(q4);
            }
        }
    }
    Ok(())
}

/// Quantizes `src` to Q8_K, identical to ggml's `quantize_row_q8_K_ref`: `d = max / -127` (`max`
/// being the value of largest magnitude), `qs = min(127, nearest_int(x / d))`, and `bsums` the
/// sums of each 16 quants. An all-zero block gets zero `d`, `qs` and `bsums` (ggml leaves its
/// `bsums` unwritten there).
///
/// This is the activation quantizer for the k-quant weights: no allocation, vectorizable.
pub fn quantize_row_q8_k(src: &[f32], dst: &mut [BlockQ8K]) -> Result<()> {
    check_quantize::<BlockQ8K>("quantize_row_q8_k", src, dst.len())?;
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let amax = abs_max(x);
        if amax == 0.0 {
            y.d = 0.0;
            y.qs = [0; QK_K];
            y.bsums = [0; QK_K / 16];
            continue;
        }
        // The first value of largest magnitude, as ggml's strict `ax > amax` scan finds it.
        let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, g) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = g.iter().map(|&q| i16::from(q)).sum();
        }
        y.d = 1.0 / iscale;
    }
    Ok(())
}

/// Dequantizes Q8_K blocks, as ggml's `dequantize_row_q8_K` (`d * q`).
pub fn dequantize_row_q8_k(src: &[BlockQ8K], dst: &mut [f32]) -> Result<()> {
    check_dequantize::<BlockQ8K>("dequantize_row_q8_k", src.len(), dst)?;
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = b.d * f32::from(q);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::quant::blocks::Block;

    /// Hand-computed Q8_K block: the largest magnitude is -127, so d = 1 and q = round(x).
    #[test]
    fn q8_k_known_answer() {
        let mut x = [0f32; QK_K];
        for (j, v) in x.iter_mut().enumerate() {
            *v = (j % 7) as f32 - 3.0;
        }
        x[5] = -127.0;
        x[6] = 2.5; // ties to even: 2
        x[7] = -3.5; // ties to even: -4
        let mut b = [BlockQ8K::ZERO];
        quantize_row_q8_k(&x, &mut b).unwrap();
        assert_eq!(b[0].d, 1.0);
        assert_eq!(&b[0].qs[..8], &[-3, -2, -1, 0, 1, -127, 2, -4]);
        for g in 0..16 {
            let s: i32 = b[0].qs[16 * g..16 * g + 16].iter().map(|&q| i32::from(q)).sum();
            assert_eq!(i32::from(b[0].bsums[g]), s);
        }
        // Positive max: d = 127 / -127 = -1, so every quant flips sign.
        let y: Vec<f32> = x.iter().map(|v| -v).collect();
        let mut c = [BlockQ8K::ZERO];
        quantize_row_q8_k(&y, &mut c).unwrap();
        assert_eq!(c[0].d, -1.0);
        assert_eq!(&c[0].qs[..8], &[-3, -2, -1, 0, 1, -127, 2, -4]);
    }

    /// Hand-computed Q6_K block: value j is -(32 - j % 32) / 2, so groups alternate between
    /// -16 .. -8.5 and -8 .. -0.5 in steps of 0.5.
    #[test]
    fn q6_k_known_answer() {
        let mut x = [0f32; QK_K];
        for (j, v) in x.iter_mut().enumerate() {
            *v = -((32 - j % 32) as f32) * 0.5;
        }
        let mut b = [BlockQ6K::ZERO];
        quantize_row_q6_k(&x, &mut b).unwrap();
        // make_qx_quants: even groups (max -16) get l = 2x exactly, scale 0.5; odd groups
        // (max -8) get l = 4x, scale 0.25. Largest scale 0.5: iscale = -128 / 0.5 = -256, so
        // d = -1/256 and the group scales are -128 and -64.
        assert_eq!(b[0].d.to_f32(), -1.0 / 256.0);
        for (g, &s) in b[0].scales.iter().enumerate() {
            assert_eq!(s, if g % 2 == 0 { -128 } else { -64 }, "group {g}");
        }
        // Quant of value j (0..32): 2x + 32 = j in even groups, 4x + 32 = 2j - 32 in odd ones.
        assert_eq!(b[0].ql[0] & 0x0f, 0);
        assert_eq!(b[0].qh[0] & 3, 0);
        assert_eq!(b[0].ql[15] & 0x0f, 15);
        assert_eq!(b[0].ql[31] & 0x0f, 30 & 0x0f);
        assert_eq!(b[0].qh[31] & 3, 30 >> 4);
        let mut y = [0f32; QK_K];
        dequantize_row_q6_k(&b, &mut y).unwrap();
        assert_eq!(y, x);
    }

    /// Hand-made Q4_K block decoded by hand: scale and min of group g are g + 1 and 2g,
    /// d = 0.5, dmin = 0.25, quant of value i is i % 16.
    #[test]
    fn q4_k_dequantize_known_answer() {
        let ls: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
        let lm: [u8; 8] = [0, 2, 4, 6, 8, 10, 12, 14];
        let mut b = BlockQ4K::ZERO;
        b.d = f16::from_f32(0.5);
        b.dmin = f16::from_f32(0.25);
        b.scales = pack_scale_min_k4(&ls, &lm);
        for c in 0..4 {
            for k in 0..32 {
                let (v1, v2) = ((64 * c + k) % 16, (64 * c + 32 + k) % 16);
                b.qs[32 * c + k] = v1 as u8 | ((v2 as u8) << 4);
            }
        }
        let mut y = [0f32; QK_K];
        dequantize_row_q4_k(&[b], &mut y).unwrap();
        for (i, &v) in y.iter().enumerate() {
            let g = i / 32;
            let expect = 0.5 * (g + 1) as f32 * (i % 16) as f32 - 0.25 * (2 * g) as f32;
            assert_eq!(v, expect, "value {i}");
        }
        // Requantizing those values is exact, too.
        let mut q = [BlockQ4K::ZERO];
        quantize_row_q4_k(&y, &mut q).unwrap();
        let mut z = [0f32; QK_K];
        dequantize_row_q4_k(&q, &mut z).unwrap();
        let err = y.iter().zip(&z).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err <= 0.5 * 8.0 / 2.0 + 1e-3, "max error {err}");
    }

    #[test]
    fn zero_input_gives_zero_output() {
        let x = [0f32; 2 * QK_K];
        let mut y = [1f32; 2 * QK_K];
        let mut b2 = [BlockQ2K::ZERO; 2];
        quantize_row_q2_k(&x, &mut b2).unwrap();
        dequantize_row_q2_k(&b2, &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
        let mut b3 = [BlockQ3K::ZERO; 2];
        quantize_row_q3_k(&x, &mut b3).unwrap();
        dequantize_row_q3_k(&b3, &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
        let mut b6 = [BlockQ6K { d: f16::ONE, ..BlockQ6K::ZERO }; 2];
        quantize_row_q6_k(&x, &mut b6).unwrap();
        assert_eq!(b6, [BlockQ6K::ZERO; 2]);
        let mut b8 = [BlockQ8K { d: 1.0, qs: [1; QK_K], bsums: [16; 16] }; 2];
        quantize_row_q8_k(&x, &mut b8).unwrap();
        assert_eq!(b8, [BlockQ8K::ZERO; 2]);
    }

    #[test]
    fn bad_lengths_are_errors() {
        let x = [0f32; 300];
        let mut b = [BlockQ4K::ZERO; 2];
        assert!(matches!(quantize_row_q4_k(&x, &mut b), Err(Error::BlockAlignment { .. })));
        assert!(matches!(quantize_row_q4_k(&x[..256], &mut b), Err(Error::DataLength { .. })));
        let mut y = [0f32; 256];
        assert!(matches!(dequantize_row_q4_k(&b, &mut y), Err(Error::DataLength { .. })));
        assert!(matches!(
            dequantize_row_q8_k(&[], &mut y[..100]),
            Err(Error::BlockAlignment { .. })
        ));
    }
}
