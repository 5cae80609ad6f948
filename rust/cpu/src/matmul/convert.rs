//! Step 1 of the driver: the activations in the kernel's format.

use super::{SharedPtr, TensorRef};
use crate::kernels::MatKernel;
use crate::team::Threads;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tessera_core::quant::dequantize_row;
use tessera_core::{DType, Error, Result};

/// The converted activations: row `(i1, i2, i3)` starts at `ptr + i1*nb[1] + i2*nb[2] +
/// i3*nb[3]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acts {
    pub ptr: *const u8,
    pub nb: [usize; 4],
    pub ne: [usize; 4],
}

// SAFETY: the activations are only read while the driver's parallel section runs, and the
// memory they point to outlives it.
unsafe impl Send for Acts {}
// SAFETY: as for `Send`.
unsafe impl Sync for Acts {}

/// K values per block when packing activation panels.
const PACK_BLOCK: usize = 64;

/// Rows converted per parallel task: the rows of one group of the kernels' interleaved 4-row
/// activation format ([`MatKernel::act_x4`]).
const ROWS_PER_TASK: usize = crate::kernels::ACT_X4_ROWS;

/// Converts `b` to the kernel's activation format in `work` (or reads it in place).
///
/// # Safety
///
/// `b.ptr` must point to `b.layout.nbytes()` readable bytes.
pub(crate) unsafe fn activations(
    kernel: &MatKernel,
    k: usize,
    b: &TensorRef,
    work: &mut Vec<u64>,
    threads: &Threads<'_>,
) -> Result<Acts> {
    let bl = &b.layout;
    if kernel.act == DType::F32
        && bl.dtype == DType::F32
        && bl.nb[0] == 4
        && bl.nb[1].is_multiple_of(4)
    {
        return Ok(Acts { ptr: b.ptr, nb: bl.nb, ne: bl.ne });
    }
    let row = kernel.act_row_size(k)?;
    let rows = bl.ne[1] * bl.ne[2] * bl.ne[3];
    let bytes = row
        .checked_mul(rows)
        .ok_or_else(|| Error::Overflow { what: "activation buffer".into() })?;
    if work.len() * 8 < bytes {
        work.resize(bytes.div_ceil(8), 0);
    }
    let out = SharedPtr(work.as_mut_ptr().cast::<u8>());
    let failed = AtomicBool::new(false);
    let next = AtomicUsize::new(0);
    // A task: up to ROWS_PER_TASK rows of one plane, from a multiple of it (with an
    // interleaved format, a whole group of the plane's rows 4q..4q + 4 or its last rows).
    let per_plane = bl.ne[1].div_ceil(ROWS_PER_TASK);
    let tasks = per_plane * bl.ne[2] * bl.ne[3];
    let x4 = kernel.act_x4 != 0;
    let src = SharedPtr(b.ptr.cast_mut());
    // Row r's source (F32 in place, or gathered into `buf`).
    let source = |r: usize, buf: &mut [f32]| -> *const f32 {
        let (i1, i2, i3) = (r % bl.ne[1], r / bl.ne[1] % bl.ne[2], r / bl.ne[1] / bl.ne[2]);
        let off = i1 * bl.nb[1] + i2 * bl.nb[2] + i3 * bl.nb[3];
        // SAFETY: the source row lies within b's bytes (caller's contract).
        unsafe {
            let srow = src.get().add(off).cast_const();
            if bl.dtype == DType::F32 && bl.nb[0] == 4 && srow.align_offset(4) == 0 {
                srow.cast::<f32>()
            } else {
                gather(bl.dtype, srow, bl.nb[0], buf);
                buf.as_ptr()
            }
        }
    };
    let worker = || {
        let mut tmp = vec![0f32; if x4 { ROWS_PER_TASK * k } else { k }];
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                return;
            }
            let (plane, q) = (t / per_plane, t % per_plane);
            let first = plane * bl.ne[1] + q * ROWS_PER_TASK;
            let n = ROWS_PER_TASK.min(bl.ne[1] - q * ROWS_PER_TASK);
            let ok = if x4 && n == ROWS_PER_TASK {
                // A whole group of the interleaved format.
                let mut xs: [&[f32]; ROWS_PER_TASK] = [&[]; ROWS_PER_TASK];
                for (i, (x, buf)) in xs.iter_mut().zip(tmp.chunks_exact_mut(k)).enumerate() {
                    let p = source(first + i, buf);
                    // SAFETY: `source` gives k readable f32 (b's row or `buf`), unchanged
                    // while `xs` lives.
                    *x = unsafe { std::slice::from_raw_parts(p, k) };
                }
                // SAFETY: rows first..first + 4 of the work buffer (sized above), this task's.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(out.get().add(first * row), ROWS_PER_TASK * row)
                };
                kernel.quantize_act_x4(xs, dst).is_ok()
            } else {
                (first..first + n).all(|r| {
                    let p = source(r, &mut tmp[..k]);
                    // SAFETY: row r of the work buffer has `row` bytes (sized above); rows
                    // written by different threads are disjoint; `source` gives k readable f32.
                    unsafe {
                        let dst = std::slice::from_raw_parts_mut(out.get().add(r * row), row);
                        kernel.quantize_act(std::slice::from_raw_parts(p, k), dst).is_ok()
                    }
                })
            };
            if !ok {
                failed.store(true, Ordering::Relaxed);
            }
        }
    };
    threads.run(tasks, &|_| worker());
    if failed.load(Ordering::Relaxed) {
        return Err(Error::InvalidArgument("mul_mat: activation conversion failed".into()));
    }
    let ne = bl.ne;
    Ok(Acts { ptr: out.0.cast_const(), nb: [0, row, row * ne[1], row * ne[1] * ne[2]], ne })
}

/// Reads `out.len()` values of the float type `dtype` with element stride `stride` bytes.
///
/// # Safety
///
/// The strided elements must be readable.
unsafe fn gather(dtype: DType, src: *const u8, stride: usize, out: &mut [f32]) {
    let es = dtype.type_size();
    if stride == es {
        // SAFETY: a dense row of out.len() elements (caller's contract).
        let row = unsafe { std::slice::from_raw_parts(src, es * out.len()) };
        if dequantize_row(dtype, row, out).is_err() {
            out.fill(f32::NAN);
        }
        return;
    }
    let mut tmp = [0u8; 4];
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: element i lies within the source row (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.add(i * stride), tmp.as_mut_ptr(), es) };
        let mut v = [0f32];
        *o = if dequantize_row(dtype, &tmp[..es], &mut v).is_ok() { v[0] } else { f32::NAN };
    }
}

/// Activations packed in panels of `nr` rows for the packed GEMM: plane `p = i2 + i3 * ne[2]`,
/// panel `q` starts at `ptr + (p * per_plane + q) * k * nr` and holds `panel[t * nr + j] =
/// B[q * nr + j][t]` (zero past the plane's rows).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Panels {
    pub ptr: *const f32,
    pub per_plane: usize,
}

// SAFETY: as for `Acts`: only read during the parallel section, outlived by its memory.
unsafe impl Send for Panels {}
// SAFETY: as for `Send`.
unsafe impl Sync for Panels {}

/// Packs the (F32, dense-row) activations `acts` in panels of `nr` rows of `k` values into
/// `work` (see [`Panels`]), one panel per parallel task.
///
/// # Safety
///
/// `acts` must describe readable F32 rows of `k` values with `nb[0] == 4`.
pub(crate) unsafe fn pack_panels(
    acts: &Acts,
    k: usize,
    nr: usize,
    work: &mut Vec<f32>,
    threads: &Threads<'_>,
) -> Result<Panels> {
    let [_, n, ne2, ne3] = acts.ne;
    if nr == 0 || nr > 32 {
        return Err(Error::InvalidArgument(format!("mul_mat: panel width {nr}")));
    }
    let per_plane = n.div_ceil(nr);
    let tasks = per_plane * ne2 * ne3;
    let len = tasks
        .checked_mul(k * nr)
        .ok_or_else(|| Error::Overflow { what: "activation panels".into() })?;
    if work.len() < len {
        work.resize(len, 0.0);
    }
    let out = SharedPtr(work.as_mut_ptr().cast::<u8>());
    let next = AtomicUsize::new(0);
    let worker = || loop {
        let task = next.fetch_add(1, Ordering::Relaxed);
        if task >= tasks {
            return;
        }
        let (q, p) = (task % per_plane, task / per_plane);
        let (i2, i3) = (p % ne2, p / ne2);
        let rows = nr.min(n - q * nr);
        let mut src = [std::ptr::null::<f32>(); 32];
        for (j, s) in src.iter_mut().enumerate().take(rows) {
            let off = (q * nr + j) * acts.nb[1] + i2 * acts.nb[2] + i3 * acts.nb[3];
            // SAFETY: row (q * nr + j, i2, i3) exists (j < rows).
            *s = unsafe { acts.ptr.add(off).cast::<f32>() };
        }
        // SAFETY: panel `task` of `k * nr` f32 lies within `work` (sized above) and is written
        // by this task only; the source rows hold k readable f32 (caller's contract).
        unsafe {
            let dst = out.get().cast::<f32>().add(task * k * nr);
            if rows < nr {
                std::ptr::write_bytes(dst, 0, k * nr);
            }
            // Blocks of K values, so that the strided stores stay in L1.
            let mut t0 = 0;
            while t0 < k {
                let t1 = (t0 + PACK_BLOCK).min(k);
                for (j, s) in src[..rows].iter().enumerate() {
                    for t in t0..t1 {
                        *dst.add(t * nr + j) = s.add(t).read_unaligned();
                    }
                }
                t0 = t1;
            }
        }
    };
    threads.run(tasks, &|_| worker());
    Ok(Panels { ptr: work.as_ptr(), per_plane })
}
