//! RMS_NORM and NORM along rows, computed in f64.

use super::access::{rows, scratch_f32, Mem, Poller, Scratch};
use tessera_core::Result;

/// RMS_NORM (`rms == true`): `x / sqrt(mean(x^2) + eps)`; NORM (`rms == false`):
/// `(x - mean(x)) / sqrt(var(x) + eps)` with the population variance, as ggml.
pub(crate) fn norm(dst: &Mem, a: &Mem, eps: f32, rms: bool, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let n = ne[0] as f64;
    let eps = f64::from(eps);
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    for r in rows(ne) {
        a.read_row(r, &mut row, &mut s)?;
        let mean = if rms { 0.0 } else { row.iter().map(|&x| f64::from(x)).sum::<f64>() / n };
        let var = row.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for x in row.iter_mut() {
            *x = ((f64::from(*x) - mean) * inv) as f32;
        }
        dst.write_row(r, &row, &mut s)?;
        p.tick(ne[0])?;
    }
    Ok(())
}
