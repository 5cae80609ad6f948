//! The scalar tier: portable kernels for every weight type, the reference the SIMD tiers are
//! tested against.
//!
//! A tile dequantizes its weight rows and activation rows once with `tessera_core`'s reference
//! dequantizers (which match ggml's) and takes f32 dot products (eight partial sums, added in
//! f64), so its only error is that of the activation quantization and f32 rounding.
//! [`vec_dot`] is the block-by-block f64 version, for tests.

use super::{Operands, TileFn};
use tessera_core::quant::dequantize_row;
use tessera_core::DType;

/// Values dequantized per step for plain (F32 / F16 / BF16) rows.
const PLAIN_STEP: usize = 64;

/// `dot(weight row, activation row)` of `k` values, `wt` the weight type and `act` its
/// activation format.
///
/// # Safety
///
/// `a` must point to `wt.row_size(k)` readable bytes and `b` to `act.row_size(k)`, and `k` must
/// be a multiple of both types' block sizes.
pub unsafe fn vec_dot(wt: DType, act: DType, k: usize, a: *const u8, b: *const u8) -> f32 {
    let step = if wt.is_quantized() { wt.block_size() } else { PLAIN_STEP };
    let (wa, wb) = (wt.row_size(step).unwrap_or(0), act.row_size(step).unwrap_or(0));
    let (Ok(ra), Ok(rb)) = (wt.row_size(k), act.row_size(k)) else { return f32::NAN };
    // SAFETY: the caller guarantees the row lengths.
    let (wrow, brow) =
        unsafe { (std::slice::from_raw_parts(a, ra), std::slice::from_raw_parts(b, rb)) };
    let mut x = [0f32; 256];
    let mut y = [0f32; 256];
    let mut sum = 0f64;
    let mut done = 0;
    while done < k {
        let n = step.min(k - done);
        let (ia, ib) = (done / step * wa, done / step * wb);
        let (na, nb) = (wt.row_size(n).unwrap_or(0), act.row_size(n).unwrap_or(0));
        if dequantize_row(wt, &wrow[ia..ia + na], &mut x[..n]).is_err()
            || dequantize_row(act, &brow[ib..ib + nb], &mut y[..n]).is_err()
        {
            return f32::NAN;
        }
        sum += x[..n].iter().zip(&y[..n]).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum::<f64>();
        done += n;
    }
    sum as f32
}

thread_local! {
    /// Dequantized weight and activation rows of the current tile.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// f32 dot product with eight independent partial sums (vectorizable), summed in f64.
fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut xc = x.chunks_exact(8);
    let mut yc = y.chunks_exact(8);
    for (p, q) in (&mut xc).zip(&mut yc) {
        for l in 0..8 {
            lanes[l] += p[l] * q[l];
        }
    }
    let mut s: f64 = lanes.iter().map(|&v| f64::from(v)).sum();
    for (p, q) in xc.remainder().iter().zip(yc.remainder()) {
        s += f64::from(*p) * f64::from(*q);
    }
    s as f32
}

/// The generic tile: dequantizes the tile's `mr` weight rows and `nr` activation rows once
/// (with the reference dequantizers) and takes f32 dot products, so that every weight type
/// works on every tier at a usable speed.
///
/// # Safety
///
/// As [`TileFn`], with `wt` / `act` the weight and activation types.
unsafe fn generic_tile(wt: DType, act: DType, o: Operands, mr: usize, nr: usize) {
    let Operands { k, a, lda, b, ldb, c, ldc } = o;
    let (Ok(ra), Ok(rb)) = (wt.row_size(k), act.row_size(k)) else { return };
    SCRATCH.with(|cell| {
        let mut guard = cell.borrow_mut();
        let (w, x) = &mut *guard;
        w.resize(mr * k, 0.0);
        x.resize(nr * k, 0.0);
        for i in 0..mr {
            // SAFETY: row i of the tile holds `ra` bytes (caller's contract).
            let row = unsafe { std::slice::from_raw_parts(a.add(i * lda), ra) };
            if dequantize_row(wt, row, &mut w[i * k..(i + 1) * k]).is_err() {
                w[i * k..(i + 1) * k].fill(f32::NAN);
            }
        }
        for j in 0..nr {
            // SAFETY: activation row j holds `rb` bytes (caller's contract).
            let row = unsafe { std::slice::from_raw_parts(b.add(j * ldb), rb) };
            if dequantize_row(act, row, &mut x[j * k..(j + 1) * k]).is_err() {
                x[j * k..(j + 1) * k].fill(f32::NAN);
            }
        }
        for j in 0..nr {
            for i in 0..mr {
                let v = dot_f32(&w[i * k..(i + 1) * k], &x[j * k..(j + 1) * k]);
                // SAFETY: the C tile is writable (caller's contract).
                unsafe { *c.add(j * ldc + i) = v };
            }
        }
    });
}

macro_rules! scalar_tile {
    ($name:ident, $wt:expr, $act:expr) => {
        /// Scalar tile kernel (see [`TileFn`]).
        ///
        /// # Safety
        ///
        /// As [`TileFn`].
        unsafe fn $name(o: Operands, mr: usize, nr: usize) {
            // SAFETY: forwarded caller contract.
            unsafe { generic_tile($wt, $act, o, mr, nr) }
        }
    };
}

scalar_tile!(tile_f32, DType::F32, DType::F32);
scalar_tile!(tile_f16, DType::F16, DType::F32);
scalar_tile!(tile_bf16, DType::BF16, DType::F32);
scalar_tile!(tile_q4_0, DType::Q4_0, DType::Q8_0);
scalar_tile!(tile_q4_1, DType::Q4_1, DType::Q8_1);
scalar_tile!(tile_q5_0, DType::Q5_0, DType::Q8_0);
scalar_tile!(tile_q5_1, DType::Q5_1, DType::Q8_1);
scalar_tile!(tile_q8_0, DType::Q8_0, DType::Q8_0);
scalar_tile!(tile_q2_k, DType::Q2_K, DType::Q8_K);
scalar_tile!(tile_q3_k, DType::Q3_K, DType::Q8_K);
scalar_tile!(tile_q4_k, DType::Q4_K, DType::Q8_K);
scalar_tile!(tile_q5_k, DType::Q5_K, DType::Q8_K);
scalar_tile!(tile_q6_k, DType::Q6_K, DType::Q8_K);
scalar_tile!(tile_iq4_nl, DType::IQ4_NL, DType::Q8_0);
scalar_tile!(tile_iq4_xs, DType::IQ4_XS, DType::Q8_K);

/// The scalar tile kernel for weights of `wt`, with its tile size (rows, columns).
pub(super) fn tile(wt: DType) -> Option<(TileFn, usize, usize)> {
    let f: TileFn = match wt {
        DType::F32 => tile_f32,
        DType::F16 => tile_f16,
        DType::BF16 => tile_bf16,
        DType::Q4_0 => tile_q4_0,
        DType::Q4_1 => tile_q4_1,
        DType::Q5_0 => tile_q5_0,
        DType::Q5_1 => tile_q5_1,
        DType::Q8_0 => tile_q8_0,
        DType::Q2_K => tile_q2_k,
        DType::Q3_K => tile_q3_k,
        DType::Q4_K => tile_q4_k,
        DType::Q5_K => tile_q5_k,
        DType::Q6_K => tile_q6_k,
        DType::IQ4_NL => tile_iq4_nl,
        DType::IQ4_XS => tile_iq4_xs,
        DType::I32 | DType::Q8_1 | DType::Q8_K => return None,
    };
    Some((f, 4, 4))
}
