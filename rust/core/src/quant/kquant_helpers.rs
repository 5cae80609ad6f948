//! The scale searches behind the k-quant reference quantizers, following `ggml-quants.c`
//! (`nearest_int`, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`,
//! `get_scale_min_k4`) operation for operation in f32, so that the chosen quants and scales are
//! the same as ggml's.

// The loops index several arrays in lock step, exactly as ggml's code that they mirror.
#![allow(clippy::needless_range_loop)]

/// Groups whose largest magnitude is below this are all-zero (ggml's `GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, through ggml's magic-number trick (exact for
/// |fval| <= 4194303; outside that range the result is meaningless but never a panic).
#[inline(always)]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Symmetric quantization of `x` to `L[i] in 0..2*nmax` (meaning `L[i] - nmax`), searching
/// the scale that minimizes the x²-weighted squared error (ggml's `make_qx_quants` with
/// `rmse_type = 1` and no importance weights). Returns the scale.
pub(crate) fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            let w = x[i] * x[i];
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric 3-bit style quantization with iterative refinement of single quants (ggml's
/// `make_q3_quants` with `do_rmse = true`): `L[i] in 0..2*nmax` meaning `L[i] - nmax`.
/// Returns the scale.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = l as i8;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = f32::from(l_out[i]);
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(l_out[i]) {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l in &mut l_out[..n] {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of [`make_qkx2_quants`]'s scale search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Qkx2 {
    /// Largest quant.
    pub nmax: i32,
    /// First offset added to `nmax` in the search.
    pub rmin: f32,
    /// Step of the offset.
    pub rdelta: f32,
    /// Number of steps (the search tries `nstep + 1` offsets).
    pub nstep: i32,
    /// Minimize the weighted absolute error instead of the squared error.
    pub use_mad: bool,
}

/// Asymmetric quantization of `x` to `L[i] in 0..=nmax` with `x ≈ scale * L - the_min`
/// (ggml's `make_qkx2_quants`). `laux` is scratch of the same length. Returns
/// `(scale, the_min)` with `the_min >= 0`.
pub(crate) fn make_qkx2_quants(
    p: Qkx2,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let nmax = p.nmax;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let mut diff = scale * f32::from(l_out[i]) + min - x[i];
        diff = if p.use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0f32;
        let mut sum_l2 = 0f32;
        let mut sum_xl = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let mut diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                diff = if p.use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Reads the 6-bit scale and min of group `j` (0..8) from Q4_K/Q5_K's packed `scales`
/// (ggml's `get_scale_min_k4`).
#[inline(always)]
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Packs eight 6-bit scales and mins into Q4_K/Q5_K's 12 bytes (the inverse of
/// [`get_scale_min_k4`]).
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.4), -2);
        assert_eq!(nearest_int(3.6), 4);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
        // Out of range or NaN: garbage, but no panic.
        let _ = nearest_int(f32::NAN);
        let _ = nearest_int(f32::INFINITY);
        let _ = nearest_int(-1e30);
    }

    #[test]
    fn scale_min_packing_round_trips() {
        let ls = [0, 1, 62, 63, 17, 32, 63, 5];
        let lm = [63, 0, 33, 2, 48, 1, 31, 60];
        let packed = pack_scale_min_k4(&ls, &lm);
        for j in 0..8 {
            assert_eq!(get_scale_min_k4(j, &packed), (ls[j], lm[j]), "group {j}");
        }
    }

    #[test]
    fn qkx2_constant_positive_group_has_zero_min() {
        let x = [2.0f32; 8];
        let w = [1.0f32; 8];
        let mut l = [0u8; 8];
        let mut aux = [0u8; 8];
        let p = Qkx2 { nmax: 15, rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
        let (scale, the_min) = make_qkx2_quants(p, &x, &w, &mut l, &mut aux);
        // min is clamped to 0, so every value maps to 15 and the fitted scale is 2/15.
        assert_eq!(the_min, 0.0);
        assert!(l.iter().all(|&q| q == 15));
        assert!((scale * 15.0 - 2.0).abs() < 1e-6);
    }
}
