//! GET_ROWS and SET_ROWS on dense rows, a row at a time (the embedding lookup and the KV-cache
//! write of every token): rows dequantized or converted in bulk instead of element by element.
//! Indices outside the table are [`Error::IndexOutOfRange`], as in the reference.

use crate::kernels::repack::{unpack_row_as, PackLayout};
use crate::reference::HostTensor;
use half::f16;
use half::slice::HalfFloatSliceExt;
use tessera_core::quant::{dequantize_row, quantize_row};
use tessera_core::{DType, Error, Result};

fn dense(t: &HostTensor) -> bool {
    t.layout.rows_contiguous() && (t.ptr as usize).is_multiple_of(t.layout.dtype.type_size().min(8))
}

fn row_ptr(t: &HostTensor, i1: usize, i2: usize, i3: usize) -> *mut u8 {
    let nb = &t.layout.nb;
    t.ptr.wrapping_add(i1 * nb[1] + i2 * nb[2] + i3 * nb[3])
}

/// The index at `[i0, i1, i2]` of the I32 tensor `idx`, checked against `0..len`.
///
/// # Safety
///
/// `idx` must be valid for reads of its layout.
unsafe fn index(op: &str, idx: &HostTensor, i: [usize; 3], len: usize) -> Result<usize> {
    let nb = &idx.layout.nb;
    let p = idx.ptr.wrapping_add(i[0] * nb[0] + i[1] * nb[1] + i[2] * nb[2]).cast::<i32>();
    // SAFETY: the element lies within idx (caller; i is within its shape).
    let v = unsafe { p.read_unaligned() };
    match usize::try_from(v) {
        Ok(r) if r < len => Ok(r),
        _ => Err(Error::IndexOutOfRange {
            op: op.into(),
            reason: format!(
                "row index {v} (indices[{}, {}, {}]) is outside 0..{len}",
                i[0], i[1], i[2]
            ),
        }),
    }
}

/// Why [`get_rows`] leaves a GET_ROWS to the reference (`None`: it takes it).
pub(super) fn get_rows_refusal(
    dst: &HostTensor,
    srcs: &[HostTensor],
    packed: Option<PackLayout>,
) -> Option<&'static str> {
    let a = &srcs[0];
    if packed.is_some() {
        None
    } else if dst.layout.dtype != DType::F32 {
        Some("GET_ROWS rows: the result is not F32")
    } else if !dense(dst) || !dense(a) {
        Some("GET_ROWS rows: strided or unaligned rows")
    } else if a.layout.dtype == DType::I32 {
        Some("GET_ROWS rows: an I32 table")
    } else {
        None
    }
}

/// GET_ROWS into an F32 destination; `None` when the layouts do not suit it. `packed`: the
/// table is a repacked weight matrix stored in that layout (a tied output's embeddings, read
/// from the copy the output product uses): each row comes out of its group
/// ([`unpack_row_as`]) before it is dequantized.
///
/// # Safety
///
/// As [`crate::reference::compute_op`], with validated operands; a `packed` table is the whole
/// repacked tensor.
pub(super) unsafe fn get_rows(
    dst: HostTensor,
    srcs: &[HostTensor],
    packed: Option<PackLayout>,
) -> Option<Result<()>> {
    let (a, idx) = (srcs[0], srcs[1]);
    if let Some(pl) = packed {
        // SAFETY: caller's contract.
        return Some(unsafe { get_packed_rows(dst, a, idx, pl) });
    }
    if get_rows_refusal(&dst, srcs, packed).is_some() {
        return None;
    }
    let (na, ni) = (a.layout.ne, idx.layout.ne);
    let ne0 = na[0];
    let row_bytes = a.layout.row_bytes();
    let result = (|| {
        for i12 in 0..ni[2] {
            for i11 in 0..ni[1] {
                for i10 in 0..ni[0] {
                    // SAFETY: (i10, i11, i12) is within idx's shape (caller's layouts).
                    let r = unsafe { index("GET_ROWS", &idx, [i10, i11, i12], na[1]) }?;
                    let src = row_ptr(&a, r, i11, i12);
                    // SAFETY: row r of a (dense, row_bytes long) and row i10 of dst (ne0 F32)
                    // lie within their tensors; dst does not overlap a (GET_ROWS never runs in
                    // place).
                    let (s, d) = unsafe {
                        (
                            std::slice::from_raw_parts(src, row_bytes),
                            std::slice::from_raw_parts_mut(
                                row_ptr(&dst, i10, i11, i12).cast::<f32>(),
                                ne0,
                            ),
                        )
                    };
                    dequantize_row(a.layout.dtype, s, d)?;
                }
            }
        }
        Ok(())
    })();
    Some(result)
}

/// GET_ROWS of the 2-D table `a` repacked in `pl` into an F32 destination with dense rows.
///
/// # Safety
///
/// As [`get_rows`].
unsafe fn get_packed_rows(
    dst: HostTensor,
    a: HostTensor,
    idx: HostTensor,
    pl: PackLayout,
) -> Result<()> {
    let (na, ni) = (a.layout.ne, idx.layout.ne);
    if dst.layout.dtype != DType::F32 || !dense(&dst) || na[2] != 1 || na[3] != 1 {
        return Err(Error::Backend {
            backend: crate::buffer::CPU_NAME.into(),
            message: format!(
                "GET_ROWS of a repacked table reads a 2-D table into F32 rows, not {:?} into {}",
                na, dst.layout.dtype
            ),
        });
    }
    let dtype = a.layout.dtype;
    let row_bytes = a.layout.row_bytes();
    // SAFETY: a is the whole repacked tensor, nbytes long (caller's contract).
    let table = unsafe { std::slice::from_raw_parts(a.ptr.cast_const(), a.layout.nbytes()) };
    let mut plain = vec![0u8; row_bytes];
    for i12 in 0..ni[2] {
        for i11 in 0..ni[1] {
            for i10 in 0..ni[0] {
                // SAFETY: (i10, i11, i12) is within idx's shape (caller's layouts).
                let r = unsafe { index("GET_ROWS", &idx, [i10, i11, i12], na[1]) }?;
                unpack_row_as(pl, dtype, na[0], table, r, &mut plain)?;
                // SAFETY: row i10 of dst (ne0 F32) lies within it and does not overlap a.
                let d = unsafe {
                    std::slice::from_raw_parts_mut(
                        row_ptr(&dst, i10, i11, i12).cast::<f32>(),
                        na[0],
                    )
                };
                dequantize_row(dtype, &plain, d)?;
            }
        }
    }
    Ok(())
}

/// Why [`set_rows`] leaves a SET_ROWS to the reference (`None`: it takes it).
pub(super) fn set_rows_refusal(dst: &HostTensor, srcs: &[HostTensor]) -> Option<&'static str> {
    let b = &srcs[1];
    let dt = dst.layout.dtype;
    let quantized = matches!(dt, DType::Q8_0 | DType::Q4_0);
    // Block rows are written through byte slices: any alignment will do.
    let dst_ok = if quantized { dst.layout.rows_contiguous() } else { dense(dst) };
    if !(matches!(dt, DType::F32 | DType::F16) || quantized) {
        Some("SET_ROWS rows: a destination type other than F32, F16, Q8_0, Q4_0")
    } else if !dst_ok || !dense(b) {
        Some("SET_ROWS rows: strided or unaligned rows")
    } else if b.layout.dtype != DType::F32 {
        Some("SET_ROWS rows: source rows not F32")
    } else {
        None
    }
}

/// SET_ROWS from F32 rows into an F32, F16, Q8_0 or Q4_0 destination (the KV cache types;
/// block types quantized as ggml's `quantize_row_*_ref`); `None` when the layouts do not suit
/// it.
///
/// # Safety
///
/// As [`crate::reference::compute_op`], with validated operands; `dst` is the destination's
/// memory.
pub(super) unsafe fn set_rows(dst: HostTensor, srcs: &[HostTensor]) -> Option<Result<()>> {
    let (b, idx) = (srcs[1], srcs[2]);
    let dt = dst.layout.dtype;
    if set_rows_refusal(&dst, srcs).is_some() {
        return None;
    }
    let quantized = matches!(dt, DType::Q8_0 | DType::Q4_0);
    let row_bytes = dst.layout.row_bytes();
    let (nd, nb, ni) = (dst.layout.ne, b.layout.ne, idx.layout.ne);
    let ne0 = nb[0];
    let result = (|| {
        for i3 in 0..nb[3] {
            for i2 in 0..nb[2] {
                for i1 in 0..nb[1] {
                    // SAFETY: the index position is within idx's shape (broadcast by modulo).
                    let r =
                        unsafe { index("SET_ROWS", &idx, [i1, i2 % ni[1], i3 % ni[2]], nd[1]) }?;
                    // SAFETY: row (i1, i2, i3) of b has ne0 F32 values; row r of dst has ne0
                    // elements of dt; they do not overlap (rows come from another tensor).
                    unsafe {
                        let src =
                            std::slice::from_raw_parts(row_ptr(&b, i1, i2, i3).cast::<f32>(), ne0);
                        let to = row_ptr(&dst, r, i2, i3);
                        if quantized {
                            let bytes = std::slice::from_raw_parts_mut(to, row_bytes);
                            quantize_row(dt, src, bytes)?;
                        } else if dt == DType::F16 {
                            std::slice::from_raw_parts_mut(to.cast::<f16>(), ne0)
                                .convert_from_f32_slice(src);
                        } else {
                            std::slice::from_raw_parts_mut(to.cast::<f32>(), ne0)
                                .copy_from_slice(src);
                        }
                    }
                }
            }
        }
        Ok(())
    })();
    Some(result)
}
