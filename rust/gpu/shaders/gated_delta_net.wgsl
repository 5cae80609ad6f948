// GATED_DELTA_NET, the gated delta rule of Qwen 3.5's linear attention (ggml_gated_delta_net,
// one state snapshot): per sequence s and value head h (reading query / key head h % H_k), from
// the state M = state[.., .., h, s] (M[i][j] at [i, j]), token by token:
//   M *= exp(g)                      (one decay per head, or one per key dim i)
//   d[j] = beta (v[j] - sum_i M[i][j] k[i])
//   M[i][j] += k[i] d[j]
//   o[j] = sum_i M[i][j] q[i] / sqrt(S)
// The outputs go to dst's first n_t * n_s rows ([S, H, n_t, n_s] in order), the final states
// after them ([S, S, H, n_s]); dst is F32 [S * H, n_t * n_s + S * n_s], dense.
//
// Every step touches column j of M only through d[j] and o[j]: one invocation per (j, h, s)
// carries its column through the tokens, in place in dst's state rows (first copied from
// `state`), so that any S fits without workgroup memory. Sums in f32 in the reference's order
// (i ascending; the reference sums in f64).

struct Params {
    q: Desc,
    k: Desc,
    v: Desc,
    g: Desc,
    beta: Desc,
    state: Desc,
    d: Desc,
    // Invocations: S * H * n_s.
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> q: array<u32>;
@group(0) @binding(1) var<storage, read_write> k: array<u32>;
@group(0) @binding(2) var<storage, read_write> v: array<u32>;
@group(0) @binding(3) var<storage, read_write> g: array<u32>;
@group(0) @binding(4) var<storage, read_write> beta: array<u32>;
@group(0) @binding(5) var<storage, read_write> state: array<u32>;
@group(0) @binding(6) var<storage, read_write> dst: array<u32>;
@group(0) @binding(7) var<uniform> p: Params;

fn at_q(i: u32, h: u32, t: u32, s: u32) -> f32 {
    return bitcast<f32>(q[byte_at(p.q, vec4<u32>(i, h, t, s)) >> 2u]);
}

fn at_k(i: u32, h: u32, t: u32, s: u32) -> f32 {
    return bitcast<f32>(k[byte_at(p.k, vec4<u32>(i, h, t, s)) >> 2u]);
}

// Word index in dst of flat F32 element `e` (dst is dense: rows of S * H values).
fn dst_word(e: u32) -> u32 {
    let w = p.d.ne.x;
    return (p.d.offset + (e % w) * p.d.nb.x + (e / w) * p.d.nb.y) >> 2u;
}

@compute @workgroup_size(64)
fn gated_delta_net(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let e = flat_group(wid, nwg) * 64u + li;
    if e >= p.n {
        return;
    }
    let S = p.v.ne.x;
    let H = p.v.ne.y;
    let n_t = p.v.ne.z;
    let j = e % S;
    let h = (e / S) % H;
    let s = e / (S * H);
    let hk = h % p.q.ne.y;
    let per_dim = p.g.ne.x == S;
    let scale = 1.0 / sqrt(f32(S));
    let width = S * H;
    // Column j of M: dst elements col + i.
    let col = n_t * p.v.ne.w * width + (s * H + h) * S * S + j * S;
    for (var i = 0u; i < S; i++) {
        dst[dst_word(col + i)] = state[byte_at(p.state, vec4<u32>(i, j, h, s)) >> 2u];
    }
    for (var t = 0u; t < n_t; t++) {
        let b = bitcast<f32>(beta[byte_at(p.beta, vec4<u32>(0u, h, t, s)) >> 2u]);
        let g0 = bitcast<f32>(g[byte_at(p.g, vec4<u32>(0u, h, t, s)) >> 2u]);
        var mk = 0.0;
        for (var i = 0u; i < S; i++) {
            var decay = exp(g0);
            if per_dim {
                decay = exp(bitcast<f32>(g[byte_at(p.g, vec4<u32>(i, h, t, s)) >> 2u]));
            }
            let w = dst_word(col + i);
            let m = bitcast<f32>(dst[w]) * decay;
            dst[w] = bitcast<u32>(m);
            mk = fma(m, at_k(i, hk, t, s), mk);
        }
        let vj = bitcast<f32>(v[byte_at(p.v, vec4<u32>(j, h, t, s)) >> 2u]);
        let dj = b * (vj - mk);
        var o = 0.0;
        for (var i = 0u; i < S; i++) {
            let w = dst_word(col + i);
            let m = fma(at_k(i, hk, t, s), dj, bitcast<f32>(dst[w]));
            dst[w] = bitcast<u32>(m);
            o = fma(m, at_q(i, hk, t, s), o);
        }
        dst[dst_word(j + h * S + (t + s * n_t) * width)] = bitcast<u32>(o * scale);
    }
}
