//! The CPU backend's GATED_DELTA_NET (Qwen 3.5's gated delta rule) with an f32 state: the
//! (sequence, value head) pairs split over the backend's threads; per pair, the state copied to
//! its place in the result, then the tokens in runs of [`TOKENS`], each run's keys, queries,
//! values, decays (`exp(g)`) and betas gathered into contiguous rows for the vectorized kernel
//! [`delta_rule`] (which takes the state's columns through the run) and its outputs scattered
//! back.
//!
//! [`gated_delta_net`] returns `None` for misaligned operands or a result overlapping an
//! operand, and the backend falls back to the reference (an f64 state).

use super::conv::{f32_aligned, f32_ptr, overlaps};
use super::fast_ops::split_rows;
use crate::kernels::delta_rule::{delta_rule, DeltaTokens};
use crate::matmul::AbortFn;
use crate::reference::HostTensor;
use crate::team::Threads;
use tessera_core::Result;

/// Tokens gathered per call of the kernel: their keys, queries, values (and decays per key dim)
/// stay in L1 while the kernel takes the state's columns through them.
const TOKENS: usize = 16;

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
        let per_token = TOKENS * s_v;
        let (mut kb, mut qb, mut vb) =
            (vec![0f32; per_token], vec![0f32; per_token], vec![0f32; per_token]);
        let mut decay = vec![0f32; if per_dim { per_token } else { TOKENS }];
        let (mut betas, mut out, mut kd) = (vec![0f32; TOKENS], vec![0f32; per_token], Vec::new());
        for pair in pairs {
            if aborted() {
                return Err(tessera_core::Error::Aborted);
            }
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
            for t0 in (0..n_t).step_by(TOKENS) {
                let n = TOKENS.min(n_t - t0);
                let rows = n * s_v;
                for dt in 0..n {
                    let t = t0 + dt;
                    let row = h + h_v * (t + n_t * s);
                    let at = dt * s_v..(dt + 1) * s_v;
                    // SAFETY: each row of q, k (head hk) and v (head h) of token t, sequence s
                    // has S contiguous values (row stride of one element, checked by the rule);
                    // g ([1 or S, H, n_t, n_s]) and beta ([1, H, n_t, n_s]) are contiguous.
                    unsafe {
                        let src = |p: *mut f32, st: &[usize; 4], head: usize| {
                            std::slice::from_raw_parts(
                                p.add(head * st[1] + t * st[2] + s * st[3]),
                                s_v,
                            )
                        };
                        kb[at.clone()].copy_from_slice(src(kp, &ks, hk));
                        qb[at.clone()].copy_from_slice(src(qp, &qs, hk));
                        vb[at.clone()].copy_from_slice(src(vp, &vs, h));
                        betas[dt] = *bp.add(row);
                        if per_dim {
                            let gr = std::slice::from_raw_parts(gp.add(row * s_v), s_v);
                            for (d, g) in decay[at].iter_mut().zip(gr) {
                                *d = g.exp();
                            }
                        } else {
                            decay[dt] = (*gp.add(row)).exp();
                        }
                    }
                }
                let x = DeltaTokens {
                    k: &kb[..rows],
                    q: &qb[..rows],
                    v: &vb[..rows],
                    decay: &decay[..if per_dim { rows } else { n }],
                    beta: &betas[..n],
                };
                delta_rule(m, s_v, &x, scale, &mut out[..rows], &mut kd)?;
                for (dt, o) in out[..rows].chunks_exact(s_v).enumerate() {
                    // SAFETY: output row (token t, sequence s) holds S * H values; head h's S
                    // of them are written by this chunk alone.
                    let row = unsafe {
                        std::slice::from_raw_parts_mut(
                            dp.add((t0 + dt + n_t * s) * width + h * s_v),
                            s_v,
                        )
                    };
                    row.copy_from_slice(o);
                }
            }
        }
        Ok(())
    };
    Some(split_rows(threads, n_s * h_v, n_t * s_v * s_v * 4, aborted, &run))
}
