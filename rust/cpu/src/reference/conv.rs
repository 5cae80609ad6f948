//! SSM_CONV, the short causal convolution of state-space and LFM2 models.

use super::access::{Mem, Poller};
use tessera_core::Result;

/// SSM_CONV: `dst[i, t, s] = sum_k sx[t + k, i, s] * c[k, i]` for every channel `i`, token `t`
/// and sequence `s`, summed in f64 and rounded once (`sx` `[d_conv - 1 + n_t, d_inner, n_s]`,
/// `c` `[d_conv, d_inner]`, as the shape rule checked).
pub(crate) fn ssm_conv(dst: &Mem, sx: &Mem, c: &Mem, p: &mut Poller) -> Result<()> {
    let nd = dst.ne();
    let d_conv = c.ne()[0];
    for s in 0..nd[2] {
        for t in 0..nd[1] {
            for i in 0..nd[0] {
                let sum: f64 = (0..d_conv)
                    .map(|k| f64::from(sx.get([t + k, i, s, 0])) * f64::from(c.get([k, i, 0, 0])))
                    .sum();
                dst.set([i, t, s, 0], sum as f32);
            }
            p.tick(nd[0] * d_conv)?;
        }
    }
    Ok(())
}
