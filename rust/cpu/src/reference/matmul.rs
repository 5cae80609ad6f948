//! MUL_MAT: `dst[m, n, i2, i3] = sum_k a[k, m, i2 / r2, i3 / r3] * b[k, n, i2, i3]` with
//! `r2 = ne12 / ne02`, `r3 = ne13 / ne03` (ggml's broadcast of the weights over dims 2 and 3).
//!
//! Each weight row is dequantized (or widened) to f32 once per batch, the activations of a batch
//! are gathered into a dense f32 matrix (so any strides, transposed or permuted, work), and every
//! dot product is accumulated in f64 (exact products of f32 values, rounded once at the end).

use super::access::{scratch_f32, Mem, Poller, Scratch};
use tessera_core::{Error, Result};

/// Computes `dst = a^T b` per batch (see the module doc).
pub(crate) fn mul_mat(dst: &Mem, a: &Mem, b: &Mem, p: &mut Poller) -> Result<()> {
    let (na, nb) = (a.ne(), b.ne());
    let (k, m, n) = (na[0], na[1], nb[1]);
    let (r2, r3) = (nb[2] / na[2], nb[3] / na[3]);
    let nk = n
        .checked_mul(k)
        .ok_or_else(|| Error::Overflow { what: format!("MUL_MAT activations of {n} x {k}") })?;
    let mut s = Scratch::default();
    let mut bt = scratch_f32(nk)?;
    let mut arow = scratch_f32(k)?;
    for i13 in 0..nb[3] {
        for i12 in 0..nb[2] {
            for (i11, brow) in bt.chunks_exact_mut(k).enumerate() {
                b.read_row([i11, i12, i13], brow, &mut s)?;
                p.tick(k)?;
            }
            let (i02, i03) = (i12 / r2, i13 / r3);
            for i01 in 0..m {
                a.read_row([i01, i02, i03], &mut arow, &mut s)?;
                for (i11, brow) in bt.chunks_exact(k).enumerate() {
                    let acc: f64 =
                        arow.iter().zip(brow).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
                    dst.set([i01, i11, i12, i13], acc as f32);
                    p.tick(k)?;
                }
            }
        }
    }
    Ok(())
}
