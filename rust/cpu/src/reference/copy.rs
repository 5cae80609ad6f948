//! Data movement: DUP, CONT and CPY (with type conversion), REPEAT, CONCAT and GET_ROWS.

use super::access::{nrows, row_at, rows, scratch_f32, spans, Mem, Poller, Scratch, DIMS, SPAN};
use tessera_core::{DType, Error, Result};

/// DUP, CONT, CPY: the elements of `src` in row-major order (`ne0` fastest) into the elements of
/// `dst` in the same order. Equal types are copied bit for bit (block by block for quantized
/// types, so a same-type copy of quantized data is lossless); different types go through f32
/// (dequantizing, rounding or quantizing rows as needed). Behaviour is unspecified when `dst`
/// overlaps `src` other than being the very same tensor.
pub(crate) fn copy(dst: &Mem, src: &Mem, p: &mut Poller) -> Result<()> {
    if src.dtype() == dst.dtype() {
        return copy_raw(dst, src, p);
    }
    let (ns, nd) = (src.ne(), dst.ne());
    let mut s = Scratch::default();
    let mut sbuf = scratch_f32(ns[0].min(SPAN))?;
    // The destination's current span: values dbuf[..dlen] go to row dk from value dstart.
    let dspan = nd[0].min(SPAN);
    let mut dbuf = scratch_f32(dspan)?;
    let (mut dk, mut dstart, mut dlen) = (0usize, 0usize, 0usize);
    for r in rows(ns) {
        for span in spans(ns[0]) {
            let part = &mut sbuf[..span.len()];
            src.read_span(r, span.start, part, &mut s)?;
            let mut spos = 0;
            while spos < part.len() {
                let room = dspan.min(nd[0] - dstart) - dlen;
                let n = (part.len() - spos).min(room);
                dbuf[dlen..dlen + n].copy_from_slice(&part[spos..spos + n]);
                spos += n;
                dlen += n;
                if dlen == dspan.min(nd[0] - dstart) {
                    dst.write_span(row_at(nd, dk), dstart, &dbuf[..dlen], &mut s)?;
                    dstart += dlen;
                    dlen = 0;
                    if dstart == nd[0] {
                        dk += 1;
                        dstart = 0;
                    }
                }
            }
        }
        p.tick(ns[0])?;
    }
    Ok(())
}

/// A same-type copy, unit by unit (element, or block for quantized types).
fn copy_raw(dst: &Mem, src: &Mem, p: &mut Poller) -> Result<()> {
    let dtype = src.dtype();
    let bs = dtype.block_size();
    let (ns, nd) = (src.ne(), dst.ne());
    let (us, ud) = (ns[0] / bs, nd[0] / bs);
    let mut unit = vec![0u8; dtype.type_size()];
    let (mut dk, mut dpos) = (0usize, 0usize);
    let mut drow = row_at(nd, 0);
    for r in rows(ns) {
        for u in 0..us {
            src.read_unit([u * bs, r[0], r[1], r[2]], &mut unit);
            dst.write_unit([dpos * bs, drow[0], drow[1], drow[2]], &unit);
            dpos += 1;
            if dpos == ud {
                dpos = 0;
                dk += 1;
                if dk < nrows(nd) {
                    drow = row_at(nd, dk);
                }
            }
        }
        p.tick(ns[0])?;
    }
    Ok(())
}

/// REPEAT: `dst[i] = a[i mod ne(a)]` on each dim, bit for bit.
pub(crate) fn repeat(dst: &Mem, a: &Mem, p: &mut Poller) -> Result<()> {
    let (nd, na) = (dst.ne(), a.ne());
    let mut unit = vec![0u8; a.dtype().type_size()];
    for r in rows(nd) {
        let ra = [r[0] % na[1], r[1] % na[2], r[2] % na[3]];
        for i0 in 0..nd[0] {
            a.read_unit([i0 % na[0], ra[0], ra[1], ra[2]], &mut unit);
            dst.write_unit([i0, r[0], r[1], r[2]], &unit);
        }
        p.tick(nd[0])?;
    }
    Ok(())
}

/// CONCAT along `dim`: `a` first, then `b`, bit for bit.
pub(crate) fn concat(dst: &Mem, a: &Mem, b: &Mem, dim: usize, p: &mut Poller) -> Result<()> {
    let nd = dst.ne();
    let na = a.ne();
    let mut unit = vec![0u8; a.dtype().type_size()];
    for r in rows(nd) {
        for i0 in 0..nd[0] {
            let mut i: [usize; DIMS] = [i0, r[0], r[1], r[2]];
            let out = i;
            if i[dim] < na[dim] {
                a.read_unit(i, &mut unit);
            } else {
                i[dim] -= na[dim];
                b.read_unit(i, &mut unit);
            }
            dst.write_unit(out, &unit);
        }
        p.tick(nd[0])?;
    }
    Ok(())
}

/// GET_ROWS: `dst[:, i10, i11, i12] = a[:, b[i10, i11, i12], i11, i12]`, as f32 (dequantized,
/// then rounded to `dst`'s float type), or bit for bit for I32. An index outside `0..ne01` is an
/// [`Error::IndexOutOfRange`] naming it.
pub(crate) fn get_rows(dst: &Mem, a: &Mem, b: &Mem, p: &mut Poller) -> Result<()> {
    let (na, nb) = (a.ne(), b.ne());
    let mut s = Scratch::default();
    let raw = a.dtype() == DType::I32;
    let mut row = scratch_f32(if raw { 0 } else { na[0].min(SPAN) })?;
    let mut unit = [0u8; 4];
    for r in rows(nb) {
        let (i11, i12) = (r[0], r[1]);
        for i10 in 0..nb[0] {
            let idx = b.get_i32([i10, i11, i12, 0]);
            let src_row = match usize::try_from(idx) {
                Ok(i) if i < na[1] => i,
                _ => {
                    return Err(Error::IndexOutOfRange {
                        op: "GET_ROWS".into(),
                        reason: format!(
                            "row index {idx} (indices[{i10}, {i11}, {i12}]) is outside 0..{}",
                            na[1]
                        ),
                    })
                }
            };
            if raw {
                for i0 in 0..na[0] {
                    a.read_unit([i0, src_row, i11, i12], &mut unit);
                    dst.write_unit([i0, i10, i11, i12], &unit);
                }
            } else {
                for span in spans(na[0]) {
                    let part = &mut row[..span.len()];
                    a.read_span([src_row, i11, i12], span.start, part, &mut s)?;
                    dst.write_span([i10, i11, i12], span.start, part, &mut s)?;
                }
            }
            p.tick(na[0])?;
        }
    }
    Ok(())
}

/// SET_ROWS: `dst[:, c[i1, i2 % nc1, i3 % nc2], i2, i3] = b[:, i1, i2, i3]`, converted to
/// `dst`'s float type. `dst` is the destination tensor's memory (SET_ROWS's result is a view of
/// it). An index outside `0..ne1` of the destination is an [`Error::IndexOutOfRange`] naming it;
/// rows before it may already have been written.
pub(crate) fn set_rows(dst: &Mem, b: &Mem, c: &Mem, p: &mut Poller) -> Result<()> {
    let (nd, nb, nc) = (dst.ne(), b.ne(), c.ne());
    let mut s = Scratch::default();
    let mut row = scratch_f32(nb[0].min(SPAN))?;
    for r in rows(nb) {
        let (i1, i2, i3) = (r[0], r[1], r[2]);
        let idx = c.get_i32([i1, i2 % nc[1], i3 % nc[2], 0]);
        let to = match usize::try_from(idx) {
            Ok(i) if i < nd[1] => i,
            _ => {
                return Err(Error::IndexOutOfRange {
                    op: "SET_ROWS".into(),
                    reason: format!(
                        "row index {idx} (indices[{i1}, {}, {}]) is outside 0..{}",
                        i2 % nc[1],
                        i3 % nc[2],
                        nd[1]
                    ),
                })
            }
        };
        for span in spans(nb[0]) {
            let part = &mut row[..span.len()];
            b.read_span(r, span.start, part, &mut s)?;
            dst.write_span([to, i2, i3], span.start, part, &mut s)?;
        }
        p.tick(nb[0])?;
    }
    Ok(())
}
