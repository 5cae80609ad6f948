//! SOFT_MAX (with scale, mask and ALiBi) and DIAG_MASK_INF.

use super::access::{rows, scratch_f32, scratch_f64, Mem, Poller, Scratch};
use tessera_core::Result;

/// ALiBi slope of head `h` of `n_head` heads for `max_bias` (1 when `max_bias == 0`), as ggml:
/// `n_head_log2 = 2^floor(log2(n_head))`, `m0 = 2^(-max_bias / n_head_log2)`,
/// `m1 = 2^(-(max_bias / 2) / n_head_log2)`, and the slope is `m0^(h + 1)` for
/// `h < n_head_log2`, else `m1^(2 (h - n_head_log2) + 1)`.
pub(crate) fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = 1usize << n_head.max(1).ilog2();
    let max_bias = f64::from(max_bias);
    let m0 = 2f64.powf(-max_bias / n_head_log2 as f64);
    let m1 = 2f64.powf(-(max_bias / 2.0) / n_head_log2 as f64);
    if h < n_head_log2 {
        m0.powf((h + 1) as f64)
    } else {
        m1.powf((2 * (h - n_head_log2) + 1) as f64)
    }
}

/// SOFT_MAX along rows of `x * scale + slope * mask`, computed in f64.
///
/// The mask row of `a[:, i1, i2, i3]` is `mask[:, i1, i2 % ne12, i3 % ne13]`; the ALiBi slope
/// uses the head index `i2` of `ne2` heads. A row whose values are all `-inf` (fully masked)
/// gives NaN in every position, exactly as ggml's CPU kernel does (`exp(-inf - -inf)`); it is
/// not an error, since such rows appear in padded batches whose results are never read, but it
/// is logged as a warning, once per op.
pub(crate) fn soft_max(
    dst: &Mem,
    a: &Mem,
    mask: Option<&Mem>,
    scale: f32,
    max_bias: f32,
    p: &mut Poller,
) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    let mut mrow = scratch_f32(if mask.is_some() { ne[0] } else { 0 })?;
    let mut w = scratch_f64(ne[0])?;
    let mut warned = false;
    for r in rows(ne) {
        a.read_row(r, &mut row, &mut s)?;
        let slope = alibi_slope(max_bias, r[1], ne[2]);
        for (wi, &x) in w.iter_mut().zip(&row) {
            *wi = f64::from(x) * f64::from(scale);
        }
        if let Some(m) = mask {
            let nm = m.ne();
            m.read_row([r[0], r[1] % nm[2], r[2] % nm[3]], &mut mrow, &mut s)?;
            for (wi, &mv) in w.iter_mut().zip(&mrow) {
                *wi += slope * f64::from(mv);
            }
        }
        let max = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            if !warned {
                log::warn!(
                    "SOFT_MAX: row {r:?} of {ne:?} is entirely -inf (fully masked): its result is NaN"
                );
                warned = true;
            }
            row.fill(f32::NAN);
        } else {
            let mut sum = 0f64;
            for wi in w.iter_mut() {
                *wi = (*wi - max).exp();
                sum += *wi;
            }
            for (o, &wi) in row.iter_mut().zip(&w) {
                *o = (wi / sum) as f32;
            }
        }
        dst.write_row(r, &row, &mut s)?;
        p.tick(ne[0])?;
    }
    Ok(())
}

/// DIAG_MASK_INF: `dst[i0, i1, ..] = -inf` where `i0 > n_past + i1`, else `a[i0, i1, ..]`.
pub(crate) fn diag_mask_inf(dst: &Mem, a: &Mem, n_past: usize, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    for r in rows(ne) {
        a.read_row(r, &mut row, &mut s)?;
        let first_masked = n_past.saturating_add(r[0]).saturating_add(1);
        for x in row.iter_mut().skip(first_masked) {
            *x = f32::NEG_INFINITY;
        }
        dst.write_row(r, &row, &mut s)?;
        p.tick(ne[0])?;
    }
    Ok(())
}
