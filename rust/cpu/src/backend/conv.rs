//! The CPU backend's SSM_CONV (LFM2's short causal convolution) on F32 operands of any strides:
//! each channel's window convolved with its taps, summed in f32 in tap order (as ggml's CPU
//! kernel); the channels in blocks of [`CHANNELS`] split over the backend's threads, each
//! block's outputs for a run of [`TOKENS`] tokens computed channel by channel (a vectorizable
//! sum over the tokens when the window is contiguous) into a tile, then written token by token
//! (one cache line each, where the result's rows are dense).
//!
//! [`ssm_conv`] returns `None` for other types, misaligned strides or a result overlapping an
//! operand, and the backend falls back to the reference (f64 sums).

use super::fast_ops::split_rows;
use crate::matmul::AbortFn;
use crate::reference::HostTensor;
use crate::team::Threads;
use tessera_core::{DType, Result};

/// Channels per block of [`ssm_conv`]: one 64-byte line of a token's outputs.
const CHANNELS: usize = 16;
/// Tokens per run of [`ssm_conv`]: a block's outputs for them stay in L1 until written.
const TOKENS: usize = 64;
/// Runs shorter than this are summed token by token; fewer tokens than this in all (generation)
/// are computed channel by channel, each output written where it goes.
const FEW: usize = 8;

/// Whether `t` is F32 with every byte stride and its address a multiple of 4.
pub(super) fn f32_aligned(t: &HostTensor) -> bool {
    t.layout.dtype == DType::F32
        && (t.ptr as usize).is_multiple_of(4)
        && t.layout.nb.iter().all(|b| b.is_multiple_of(4))
}

/// `t`'s first element as an F32 pointer.
pub(super) fn f32_ptr(t: &HostTensor) -> *mut f32 {
    t.ptr.cast()
}

/// Whether the bytes `t` spans overlap those of `u`.
pub(super) fn overlaps(t: &HostTensor, u: &HostTensor) -> bool {
    let span = |x: &HostTensor| (x.ptr as usize, x.ptr as usize + x.layout.nbytes());
    let ((a0, a1), (b0, b1)) = (span(t), span(u));
    a0 < b1 && b0 < a1
}

/// Why [`ssm_conv`] leaves an SSM_CONV to the reference (`None`: it takes it).
pub(super) fn ssm_conv_refusal(dst: &HostTensor, srcs: &[HostTensor]) -> Option<&'static str> {
    let (Some(sx), Some(c)) = (srcs.first(), srcs.get(1)) else {
        return Some("SSM_CONV: two operands expected");
    };
    if ![dst, sx, c].into_iter().all(f32_aligned) {
        Some("SSM_CONV: operands not aligned F32")
    } else if overlaps(dst, sx) || overlaps(dst, c) {
        Some("SSM_CONV: the result overlaps an operand")
    } else {
        None
    }
}

/// SSM_CONV: `dst[i, t, s] = sum_k sx[t + k, i, s] * c[k, i]` (`sx` `[d_conv - 1 + n_t, d_inner,
/// n_s]`, `c` `[d_conv, d_inner]`, `dst` `[d_inner, n_t, n_s]`), or `None` when the operands do
/// not suit this kernel.
///
/// # Safety
///
/// As [`crate::reference::compute_op`]: every pointer is valid for its layout's bytes during the
/// call, the shape rule validated the operands, and nobody else writes that memory meanwhile.
pub(super) unsafe fn ssm_conv(
    dst: HostTensor,
    srcs: &[HostTensor],
    threads: &Threads<'_>,
    aborted: AbortFn<'_>,
) -> Option<Result<()>> {
    if ssm_conv_refusal(&dst, srcs).is_some() {
        return None;
    }
    let (&sx, &c) = (srcs.first()?, srcs.get(1)?);
    let [d_inner, n_t, n_s, _] = dst.layout.ne;
    let d_conv = c.layout.ne[0];
    // Strides in f32 elements.
    let el = |nb: &[usize; 4]| nb.map(|b| b / 4);
    let (xs, cs, ds) = (el(&sx.layout.nb), el(&c.layout.nb), el(&dst.layout.nb));
    if n_t < FEW {
        // Generation: channel by channel, each output written where it goes.
        let run = |channels: std::ops::Range<usize>| -> Result<()> {
            let (xp, cp, dp) = (f32_ptr(&sx), f32_ptr(&c), f32_ptr(&dst));
            for i in channels {
                for s in 0..n_s {
                    // SAFETY: channel i of sequence s lies within sx (i < d_inner, s < n_s).
                    let window = unsafe { xp.add(i * xs[1] + s * xs[2]) };
                    for t in 0..n_t {
                        let mut sum = 0f32;
                        for k in 0..d_conv {
                            // SAFETY: t + k < d_conv - 1 + n_t, sx's first dimension; k <
                            // d_conv and i < d_inner, within c's shape.
                            sum += unsafe {
                                *window.add((t + k) * xs[0]) * *cp.add(k * cs[0] + i * cs[1])
                            };
                        }
                        // SAFETY: [i, t, s] lies within dst; this chunk alone writes channel
                        // i, and dst overlaps no operand (checked above).
                        unsafe { *dp.add(i * ds[0] + t * ds[1] + s * ds[2]) = sum };
                    }
                }
            }
            Ok(())
        };
        return Some(split_rows(threads, d_inner, n_t * n_s * d_conv, aborted, &run));
    }
    let blocks = d_inner.div_ceil(CHANNELS);
    let run = |bs: std::ops::Range<usize>| -> Result<()> {
        // Through the whole tensors (`HostTensor` is `Sync`, a raw pointer alone is not).
        let (xp, cp, dp) = (f32_ptr(&sx), f32_ptr(&c), f32_ptr(&dst));
        let w = d_conv - 1 + n_t;
        let mut taps = vec![0f32; d_conv];
        let mut window = vec![0f32; if xs[0] == 1 { 0 } else { w }];
        // Outputs of the block's channels for a run of tokens: channel-major.
        let mut tile = vec![0f32; CHANNELS * TOKENS];
        for b in bs {
            let channels = b * CHANNELS..((b + 1) * CHANNELS).min(d_inner);
            for s in 0..n_s {
                for t0 in (0..n_t).step_by(TOKENS) {
                    let tn = TOKENS.min(n_t - t0);
                    for (ci, i) in channels.clone().enumerate() {
                        for (k, tap) in taps.iter_mut().enumerate() {
                            // SAFETY: k < d_conv and i < d_inner, within c's shape.
                            *tap = unsafe { *cp.add(k * cs[0] + i * cs[1]) };
                        }
                        // SAFETY: channel i of sequence s lies within sx (i < d_inner, s < n_s),
                        // its window of `w` values `xs[0]` apart.
                        let at = unsafe { xp.add(i * xs[1] + s * xs[2]) };
                        let win: &[f32] = if xs[0] == 1 {
                            // SAFETY: as above, contiguous.
                            unsafe { std::slice::from_raw_parts(at, w) }
                        } else {
                            for (j, x) in window.iter_mut().enumerate() {
                                // SAFETY: as above, j < w.
                                *x = unsafe { *at.add(j * xs[0]) };
                            }
                            &window
                        };
                        // Summed in tap order (the same sums either way): a run of tokens at
                        // a time (vectorized over them), or token by token for a few (where a
                        // vector loop's setup would cost more than the sums: generation).
                        let out = &mut tile[ci * TOKENS..ci * TOKENS + tn];
                        if tn < FEW {
                            for (dt, o) in out.iter_mut().enumerate() {
                                let x = &win[t0 + dt..t0 + dt + d_conv];
                                *o = x.iter().zip(&taps).fold(0.0, |sum, (x, tap)| sum + x * tap);
                            }
                        } else {
                            out.fill(0.0);
                            for (k, &tap) in taps.iter().enumerate() {
                                for (o, &x) in out.iter_mut().zip(&win[t0 + k..t0 + k + tn]) {
                                    *o += x * tap;
                                }
                            }
                        }
                    }
                    for dt in 0..tn {
                        for (ci, i) in channels.clone().enumerate() {
                            // SAFETY: [i, t0 + dt, s] lies within dst; this chunk alone writes
                            // channel i, and dst overlaps no operand (checked above).
                            unsafe {
                                *dp.add(i * ds[0] + (t0 + dt) * ds[1] + s * ds[2]) =
                                    tile[ci * TOKENS + dt];
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    };
    Some(split_rows(threads, blocks, CHANNELS * n_t * n_s * d_conv, aborted, &run))
}
