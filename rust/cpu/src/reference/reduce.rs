//! Reductions: SUM, SUM_ROWS, MEAN (accumulated in f64) and ARGMAX.

use super::access::{rows, scratch_f32, Mem, Poller, Scratch};
use tessera_core::Result;

/// SUM: the sum of every element, written as the single element of `dst`.
pub(crate) fn sum(dst: &Mem, a: &Mem, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    let mut acc = 0f64;
    for r in rows(ne) {
        a.read_row(r, &mut row, &mut s)?;
        acc += row.iter().map(|&x| f64::from(x)).sum::<f64>();
        p.tick(ne[0])?;
    }
    dst.set([0, 0, 0, 0], acc as f32);
    Ok(())
}

/// SUM_ROWS (`mean == false`) or MEAN (`mean == true`) of each row, into `dst[0, i1, i2, i3]`.
pub(crate) fn sum_rows(dst: &Mem, a: &Mem, mean: bool, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    for r in rows(ne) {
        a.read_row(r, &mut row, &mut s)?;
        let mut acc = row.iter().map(|&x| f64::from(x)).sum::<f64>();
        if mean {
            acc /= ne[0] as f64;
        }
        dst.set([0, r[0], r[1], r[2]], acc as f32);
        p.tick(ne[0])?;
    }
    Ok(())
}

/// ARGMAX of each row of a matrix, as ggml's `ggml_vec_argmax_f32` on inputs without NaN: the
/// **last** index of the maximum when several elements tie. NaNs are skipped; a row of only NaNs
/// gives 0.
pub(crate) fn argmax(dst: &Mem, a: &Mem, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    for i1 in 0..ne[1] {
        a.read_row([i1, 0, 0], &mut row, &mut s)?;
        let mut best = f32::NEG_INFINITY;
        let mut idx = 0usize;
        for (i, &x) in row.iter().enumerate() {
            if x >= best {
                best = x;
                idx = i;
            }
        }
        // `ne0 <= 2^31` was checked, so the index fits.
        dst.set_i32([i1, 0, 0, 0], idx as i32);
        p.tick(ne[0])?;
    }
    Ok(())
}
