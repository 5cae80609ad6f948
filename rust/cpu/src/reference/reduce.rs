//! Reductions: SUM, SUM_ROWS, MEAN (accumulated in f64) and ARGMAX.

use super::access::{rows, scratch_f32, spans, Mem, Poller, Scratch, SPAN};
use tessera_core::Result;

/// The f64 sum of row `r` in order, read span by span into `buf` (at least a span long).
fn row_sum(a: &Mem, r: [usize; 3], buf: &mut [f32], s: &mut Scratch) -> Result<f64> {
    let mut acc = 0f64;
    for span in spans(a.ne()[0]) {
        let part = &mut buf[..span.len()];
        a.read_span(r, span.start, part, s)?;
        for &x in part.iter() {
            acc += f64::from(x);
        }
    }
    Ok(acc)
}

/// SUM: the sum of every element, written as the single element of `dst`.
pub(crate) fn sum(dst: &Mem, a: &Mem, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut buf = scratch_f32(ne[0].min(SPAN))?;
    let mut acc = 0f64;
    for r in rows(ne) {
        acc += row_sum(a, r, &mut buf, &mut s)?;
        p.tick(ne[0])?;
    }
    dst.set([0, 0, 0, 0], acc as f32);
    Ok(())
}

/// SUM_ROWS (`mean == false`) or MEAN (`mean == true`) of each row, into `dst[0, i1, i2, i3]`.
pub(crate) fn sum_rows(dst: &Mem, a: &Mem, mean: bool, p: &mut Poller) -> Result<()> {
    let ne = a.ne();
    let mut s = Scratch::default();
    let mut buf = scratch_f32(ne[0].min(SPAN))?;
    for r in rows(ne) {
        let mut acc = row_sum(a, r, &mut buf, &mut s)?;
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
    let mut buf = scratch_f32(ne[0].min(SPAN))?;
    for i1 in 0..ne[1] {
        let mut best = f32::NEG_INFINITY;
        let mut idx = 0usize;
        for span in spans(ne[0]) {
            let part = &mut buf[..span.len()];
            a.read_span([i1, 0, 0], span.start, part, &mut s)?;
            for (i, &x) in part.iter().enumerate() {
                if x >= best {
                    best = x;
                    idx = span.start + i;
                }
            }
        }
        // `ne0 <= 2^31` was checked, so the index fits.
        dst.set_i32([i1, 0, 0, 0], idx as i32);
        p.tick(ne[0])?;
    }
    Ok(())
}
