//! GATED_DELTA_NET, the gated delta rule of Qwen 3.5's linear attention, as ggml's CPU kernel
//! defines it, with the state and every sum kept in f64 and rounded once when written.

use super::access::{scratch_f64, Mem, Poller};
use tessera_core::Result;

/// GATED_DELTA_NET (see [`tessera_core::Op::GatedDeltaNet`]): per sequence `s` and value head
/// `h` (reading query / key head `h % H_k`), from the state `M = state[.., .., h, s]`, token by
/// token: `M *= exp(g)` (one decay per head, or one per key dim), `d[j] = beta (v[j] - sum_i
/// M[i][j] k[i])`, `M[i][j] += k[i] d[j]`, `o[j] = sum_i M[i][j] q[i] / sqrt(S)`; the outputs
/// go to `dst`'s first `n_t * n_s` rows (`[S, H, n_t, n_s]` in order), the final states after
/// them (`[S, S, H, n_s]`).
pub(crate) fn gated_delta_net(dst: &Mem, srcs: &[Mem], p: &mut Poller) -> Result<()> {
    let (q, k, v, g, beta, state) = (&srcs[0], &srcs[1], &srcs[2], &srcs[3], &srcs[4], &srcs[5]);
    let [s_v, h_v, n_t, n_s] = v.ne();
    let h_k = q.ne()[1];
    let per_dim = g.ne()[0] == s_v;
    let scale = 1.0 / (s_v as f64).sqrt();
    let width = s_v * h_v;
    // dst is [S * H, rows]: element e of row r is at [e, r].
    let put = |flat: usize, x: f64| dst.set([flat % width, flat / width, 0, 0], x as f32);
    let states_at = n_t * n_s * width;
    let mut m = scratch_f64(s_v * s_v)?;
    let mut d = scratch_f64(s_v)?;
    for s in 0..n_s {
        for h in 0..h_v {
            let hk = h % h_k;
            for j in 0..s_v {
                for i in 0..s_v {
                    m[i + j * s_v] = f64::from(state.get([i, j, h, s]));
                }
            }
            for t in 0..n_t {
                for i in 0..s_v {
                    let decay = f64::from(g.get([if per_dim { i } else { 0 }, h, t, s])).exp();
                    for j in 0..s_v {
                        m[i + j * s_v] *= decay;
                    }
                }
                let b = f64::from(beta.get([0, h, t, s]));
                for (j, dj) in d.iter_mut().enumerate() {
                    let mk: f64 =
                        (0..s_v).map(|i| m[i + j * s_v] * f64::from(k.get([i, hk, t, s]))).sum();
                    *dj = b * (f64::from(v.get([j, h, t, s])) - mk);
                }
                for (j, &dj) in d.iter().enumerate() {
                    for i in 0..s_v {
                        m[i + j * s_v] += f64::from(k.get([i, hk, t, s])) * dj;
                    }
                }
                for j in 0..s_v {
                    let o: f64 =
                        (0..s_v).map(|i| m[i + j * s_v] * f64::from(q.get([i, hk, t, s]))).sum();
                    put(j + h * s_v + (t + s * n_t) * width, o * scale);
                }
                p.tick(4 * s_v * s_v)?;
            }
            let base = states_at + (s * h_v + h) * s_v * s_v;
            for (e, &x) in m.iter().enumerate() {
                put(base + e, x);
            }
        }
    }
    Ok(())
}
