//! The CPU backend's GATED_DELTA_NET (Qwen 3.5's gated delta rule) in f32, as ggml's CPU
//! kernel computes it (the state scaled by the decay, then each value dim's delta from one dot
//! product with the key, the rank-one update, the output from one dot product with the query),
//! the (sequence, value head) pairs split over the backend's threads.
//!
//! [`gated_delta_net`] returns `None` for misaligned operands or a result overlapping an
//! operand, and the backend falls back to the reference (an f64 state).

use super::conv::{f32_aligned, f32_ptr, overlaps};
use super::fast_ops::split_rows;
use crate::matmul::AbortFn;
use crate::reference::HostTensor;
use crate::team::Threads;
use tessera_core::Result;

/// Why [`gated_delta_net`] leaves a GATED_DELTA_NET to the reference (`None`: it takes it).
pub(super) fn gated_delta_net_refusal(
    dst: &HostTensor,
    srcs: &[HostTensor],
) -> Option<&'static str> {
    if srcs.len() != 6 {
        Some("GATED_DELTA_NET: six operands expected")
    } else if !srcs.iter().chain([dst]).all(f32_aligned) {
        Some("GATED_DELTA_NET: operands not aligned F32")
    } else if srcs.iter().any(|s| overlaps(dst, s)) {
        Some("GATED_DELTA_NET: the result overlaps an operand")
    } else if !dst.layout.is_contiguous() {
        Some("GATED_DELTA_NET: a strided result")
    } else {
        None
    }
}

/// GATED_DELTA_NET (see [`tessera_core::Op::GatedDeltaNet`]), or `None` when the operands do
/// not suit this kernel.
///
/// # Safety
///
/// As [`crate::reference::compute_op`]: every pointer is valid for its layout's bytes during the
/// call, the shape rule validated the operands (row strides of q, k, v of one element; g, beta
/// and the state contiguous), and nobody else writes that memory meanwhile.
pub(super) unsafe fn gated_delta_net(
    dst: HostTensor,
    srcs: &[HostTensor],
    threads: &Threads<'_>,
    aborted: AbortFn<'_>,
) -> Option<Result<()>> {
    if gated_delta_net_refusal(&dst, srcs).is_some() {
        return None;
    }
    let ops: [HostTensor; 6] = srcs.try_into().ok()?;
    let [q, k, v, g, beta, state] = ops;
    let [s_v, h_v, n_t, n_s] = v.layout.ne;
    let h_k = q.layout.ne[1];
    let per_dim = g.layout.ne[0] == s_v;
    let scale = 1.0 / (s_v as f32).sqrt();
    let el = |t: &HostTensor| t.layout.nb.map(|b| b / 4);
    let (qs, ks, vs) = (el(&q), el(&k), el(&v));
    let width = s_v * h_v;
    let states_at = n_t * n_s * width;
    let run = |pairs: std::ops::Range<usize>| -> Result<()> {
        // Through the whole tensors (`HostTensor` is `Sync`, a raw pointer alone is not).
        let (qp, kp, vp) = (f32_ptr(&q), f32_ptr(&k), f32_ptr(&v));
        let (gp, bp, sp) = (f32_ptr(&g), f32_ptr(&beta), f32_ptr(&state));
        let dp = f32_ptr(&dst);
        let mut decay = vec![0f32; s_v];
        let mut delta = vec![0f32; s_v];
        for pair in pairs {
            let (s, h) = (pair / h_v, pair % h_v);
            let hk = h % h_k;
            // The state of (s, h), worked on in place in dst's state rows: element i + j * S
            // is M[i][j] (column j of M contiguous).
            // SAFETY: dst is contiguous with S * S * H * n_s state values after the outputs;
            // this chunk alone writes pair (s, h)'s S * S of them, and dst overlaps no operand.
            let m = unsafe {
                std::slice::from_raw_parts_mut(dp.add(states_at + pair * s_v * s_v), s_v * s_v)
            };
            // SAFETY: the state operand is contiguous [S, S, H, n_s]; pair (s, h) starts at
            // (s * H + h) * S * S.
            m.copy_from_slice(unsafe {
                std::slice::from_raw_parts(sp.add(pair * s_v * s_v), s_v * s_v)
            });
            for t in 0..n_t {
                let row = h + h_v * (t + n_t * s);
                // SAFETY: each row of q, k (head hk) and v (head h) of token t, sequence s has
                // S contiguous values (row stride of one element, checked by the rule).
                let (qr, kr, vr) = unsafe {
                    (
                        std::slice::from_raw_parts(qp.add(hk * qs[1] + t * qs[2] + s * qs[3]), s_v),
                        std::slice::from_raw_parts(kp.add(hk * ks[1] + t * ks[2] + s * ks[3]), s_v),
                        std::slice::from_raw_parts(vp.add(h * vs[1] + t * vs[2] + s * vs[3]), s_v),
                    )
                };
                // SAFETY: g ([1 or S, H, n_t, n_s]) and beta ([1, H, n_t, n_s]) are contiguous.
                let b = unsafe { *bp.add(row) };
                if per_dim {
                    for (i, d) in decay.iter_mut().enumerate() {
                        // SAFETY: as above, S decays per row.
                        *d = unsafe { *gp.add(row * s_v + i) }.exp();
                    }
                    for col in m.chunks_exact_mut(s_v) {
                        col.iter_mut().zip(&decay).for_each(|(x, d)| *x *= d);
                    }
                } else {
                    // SAFETY: as above, one decay per row.
                    let d = unsafe { *gp.add(row) }.exp();
                    m.iter_mut().for_each(|x| *x *= d);
                }
                for (j, col) in m.chunks_exact(s_v).enumerate() {
                    let mk: f32 = col.iter().zip(kr).map(|(a, b)| a * b).sum();
                    delta[j] = (vr[j] - mk) * b;
                }
                // SAFETY: output row (token t, sequence s) holds S * H values; head h's S of
                // them are written by this chunk alone.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(dp.add((t + n_t * s) * width + h * s_v), s_v)
                };
                for ((col, &dj), o) in m.chunks_exact_mut(s_v).zip(&delta).zip(out.iter_mut()) {
                    col.iter_mut().zip(kr).for_each(|(x, &ki)| *x += ki * dj);
                    *o = col.iter().zip(qr).map(|(a, b)| a * b).sum::<f32>() * scale;
                }
            }
        }
        Ok(())
    };
    Some(split_rows(threads, n_s * h_v, n_t * s_v * s_v * 4, aborted, &run))
}
