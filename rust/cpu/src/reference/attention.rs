//! FLASH_ATTN_EXT: attention of each query row over every key, computed in f64.

use super::access::{scratch_f32, scratch_f64, Mem, Poller, Scratch};
use super::softmax::alibi_slope;
use tessera_core::{AttnParams, Result};

/// `dst[:, h, iq, i3] = sum_j p_j v[:, j, h / g, i3]` with `p = softmax_j(s_j)` and
/// `s_j = cap(scale * q[:, iq, h, i3] . k[:, j, h / g, i3]) + slope_h * mask[j, iq]`, where
/// `g = n_head / n_head_kv` (grouped-query attention), `cap(x) = c tanh(x / c)` when the soft
/// cap `c` is positive, and `slope_h` the ALiBi slope of head `h` (1 without ALiBi).
///
/// A query whose keys are all masked (`-inf`) gets zeros, as ggml's CPU kernel gives (its sum
/// of weights is zero and it multiplies by 0 instead of dividing).
pub(crate) fn flash_attn_ext(
    dst: &Mem,
    q: &Mem,
    k: &Mem,
    v: &Mem,
    mask: Option<&Mem>,
    params: &AttnParams,
    p: &mut Poller,
) -> Result<()> {
    let (nq, nk, nv) = (q.ne(), k.ne(), v.ne());
    let (d, n_kv, dv) = (nq[0], nk[1], nv[0]);
    let n_head = nq[2];
    let group = n_head / nk[2];
    let mut s = Scratch::default();
    let mut qrow = scratch_f32(d)?;
    let mut krow = scratch_f32(d)?;
    let mut vrow = scratch_f32(dv)?;
    let mut mrow = scratch_f32(if mask.is_some() { n_kv } else { 0 })?;
    let mut scores = scratch_f64(n_kv)?;
    let mut acc = scratch_f64(dv)?;
    let mut out = scratch_f32(dv)?;
    let (scale, cap) = (f64::from(params.scale), f64::from(params.softcap));
    for i3 in 0..nq[3] {
        for iq in 0..nq[1] {
            if let Some(m) = mask {
                m.read_row([iq, 0, 0], &mut mrow, &mut s)?;
            }
            for h in 0..n_head {
                let hk = h / group;
                let slope = alibi_slope(params.max_bias, h, n_head);
                q.read_row([iq, h, i3], &mut qrow, &mut s)?;
                for (j, sj) in scores.iter_mut().enumerate() {
                    k.read_row([j, hk, i3], &mut krow, &mut s)?;
                    let dot: f64 =
                        qrow.iter().zip(&krow).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                    let mut x = dot * scale;
                    if cap > 0.0 {
                        x = cap * (x / cap).tanh();
                    }
                    if mask.is_some() {
                        x += slope * f64::from(mrow[j]);
                    }
                    *sj = x;
                }
                p.tick(n_kv * d)?;
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                acc.fill(0.0);
                if max > f64::NEG_INFINITY {
                    let mut sum = 0.0;
                    for (j, &sj) in scores.iter().enumerate() {
                        let w = (sj - max).exp();
                        if w == 0.0 {
                            continue;
                        }
                        sum += w;
                        v.read_row([j, hk, i3], &mut vrow, &mut s)?;
                        for (a, &x) in acc.iter_mut().zip(&vrow) {
                            *a += w * f64::from(x);
                        }
                    }
                    for a in acc.iter_mut() {
                        *a /= sum;
                    }
                }
                p.tick(n_kv * dv)?;
                for (o, &a) in out.iter_mut().zip(&acc) {
                    *o = a as f32;
                }
                dst.write_row([h, iq, i3], &out, &mut s)?;
            }
        }
    }
    Ok(())
}
