// FLASH_ATTN_EXT: for query iq of head h, dst[:, h, iq, i3] = sum_j p_j v[:, j, h / g, i3]
// with p = softmax_j(cap(scale * q[:, iq, h, i3] . k[:, j, h / g, i3]) + slope_h * mask[j, iq]),
// g = n_head / n_head_kv (grouped-query attention), cap(x) = softcap * tanh(x / softcap) when
// softcap > 0, slope_h the ALiBi slope (1 without ALiBi), as ggml_flash_attn_ext. q F32, k and
// v F32, F16, Q8_0 or Q4_0 (dense rows, any other strides: views of a KV cache; the blocks of
// the quantized caches dequantized here, each value `q * d` exactly as the reference's), mask
// F16 or F32.
//
// One workgroup of 64 invocations per (query, head): the query goes to workgroup memory, then
// the keys are walked in blocks of 64 with an online softmax: invocation t scores key j0 + t,
// the block's maximum and sum are reduced in workgroup memory, and every invocation rescales
// and accumulates its share of the output dims (t, t + 64, ...: Dv <= 512) over the block's
// values. A query whose keys are all masked gets zeros, as ggml's CPU kernel (and the
// reference) give.

struct Params {
    q: Desc,
    k: Desc,
    v: Desc,
    m: Desc,
    d: Desc,
    has_mask: u32,
    scale: f32,
    softcap: f32,
    max_bias: f32,
    m0: f32,
    m1: f32,
    n_head_log2: u32,
}

@group(0) @binding(0) var<storage, read_write> q: array<u32>;
@group(0) @binding(1) var<storage, read_write> k: array<u32>;
@group(0) @binding(2) var<storage, read_write> v: array<u32>;
@group(0) @binding(3) var<storage, read_write> mask: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<u32>;
@group(0) @binding(5) var<uniform> p: Params;

const WG: u32 = 64u;
// Most output dims per invocation: Dv <= WG * DV_PER.
const DV_PER: u32 = 8u;
// Below every score: the running maximum starts here, so that blocks of masked (-inf) keys
// rescale by exp(0) = 1 and add nothing, without ever computing -inf - -inf.
const LOWEST: f32 = -3.4028234e38;

var<workgroup> q_row: array<f32, 512>;
var<workgroup> probs: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

// Value i of the key row at byte `row`.
fn load_k(row: u32, i: u32) -> f32 {
    switch p.k.dtype {
        case T_F16: {
            let b = row + i * p.k.nb.x;
            return f16_of(k[b >> 2u], b);
        }
        case T_Q8_0: {
            // 34-byte blocks: d, then 32 signed bytes.
            let blk = row + (i / 32u) * 34u;
            let b = blk + 2u + i % 32u;
            return f32(as_i8(byte_of(k[b >> 2u], b))) * f16_of(k[blk >> 2u], blk);
        }
        case T_Q4_0: {
            // 18-byte blocks: d, then 16 bytes holding values j (low nibble) and j + 16.
            let blk = row + (i / 32u) * 18u;
            let j = i % 32u;
            let b = blk + 2u + j % 16u;
            let q = (byte_of(k[b >> 2u], b) >> (4u * (j / 16u))) & 15u;
            return f32(i32(q) - 8) * f16_of(k[blk >> 2u], blk);
        }
        default: {
            return bitcast<f32>(k[(row + i * p.k.nb.x) >> 2u]);
        }
    }
}

// Value i of the value row at byte `row` (as `load_k`).
fn load_v(row: u32, i: u32) -> f32 {
    switch p.v.dtype {
        case T_F16: {
            let b = row + i * p.v.nb.x;
            return f16_of(v[b >> 2u], b);
        }
        case T_Q8_0: {
            let blk = row + (i / 32u) * 34u;
            let b = blk + 2u + i % 32u;
            return f32(as_i8(byte_of(v[b >> 2u], b))) * f16_of(v[blk >> 2u], blk);
        }
        case T_Q4_0: {
            let blk = row + (i / 32u) * 18u;
            let j = i % 32u;
            let b = blk + 2u + j % 16u;
            let q = (byte_of(v[b >> 2u], b) >> (4u * (j / 16u))) & 15u;
            return f32(i32(q) - 8) * f16_of(v[blk >> 2u], blk);
        }
        default: {
            return bitcast<f32>(v[(row + i * p.v.nb.x) >> 2u]);
        }
    }
}

fn load_mask(b: u32) -> f32 {
    let w = mask[b >> 2u];
    if p.m.dtype == T_F16 {
        return f16_of(w, b);
    }
    return bitcast<f32>(w);
}

fn reduce_max(x: f32, li: u32) -> f32 {
    red[li] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if li < s {
            red[li] = max(red[li], red[li + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(x: f32, li: u32) -> f32 {
    red[li] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if li < s {
            red[li] = red[li] + red[li + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn flash_attn(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let n_head = p.q.ne.z;
    let n_q = p.q.ne.y;
    let flat = flat_group(wid, nwg);
    if flat >= n_head * n_q * p.q.ne.w {
        return;
    }
    let h = flat % n_head;
    let iq = (flat / n_head) % n_q;
    let i3 = flat / (n_head * n_q);
    let hk = h / (n_head / p.k.ne.z);
    let D = p.q.ne.x;
    let Dv = p.v.ne.x;
    let n_kv = p.k.ne.y;

    let q_at = p.q.offset + iq * p.q.nb.y + h * p.q.nb.z + i3 * p.q.nb.w;
    for (var i = li; i < D; i += WG) {
        q_row[i] = bitcast<f32>(q[(q_at + i * p.q.nb.x) >> 2u]);
    }
    workgroupBarrier();

    var slope = 1.0;
    if p.max_bias > 0.0 {
        if h < p.n_head_log2 {
            slope = pow(p.m0, f32(h + 1u));
        } else {
            slope = pow(p.m1, f32(2u * (h - p.n_head_log2) + 1u));
        }
    }
    let k_base = p.k.offset + hk * p.k.nb.z + i3 * p.k.nb.w;
    let v_base = p.v.offset + hk * p.v.nb.z + i3 * p.v.nb.w;
    let m_row = p.m.offset + iq * p.m.nb.y;

    var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    var run_max = LOWEST;
    var run_sum = 0.0;
    for (var j0 = 0u; j0 < n_kv; j0 += WG) {
        // The score of key j0 + li.
        let j = j0 + li;
        var s = bitcast<f32>(NEG_INF_BITS);
        if j < n_kv {
            let k_row = k_base + j * p.k.nb.y;
            var dot = 0.0;
            for (var i = 0u; i < D; i++) {
                dot = fma(q_row[i], load_k(k_row, i), dot);
            }
            s = dot * p.scale;
            if p.softcap > 0.0 {
                s = p.softcap * tanh_safe(s / p.softcap);
            }
            if p.has_mask != 0u {
                s += slope * load_mask(m_row + j * p.m.nb.x);
            }
        }
        let new_max = max(run_max, reduce_max(s, li));
        let w = exp(s - new_max);
        probs[li] = w;
        let block_sum = reduce_sum(w, li);
        let correction = exp(run_max - new_max);
        run_sum = run_sum * correction + block_sum;
        run_max = new_max;
        let n = min(WG, n_kv - j0);
        for (var c = 0u; c < DV_PER; c++) {
            let dv = li + c * WG;
            if dv < Dv {
                var a = acc[c] * correction;
                for (var jj = 0u; jj < n; jj++) {
                    let pj = probs[jj];
                    if pj != 0.0 {
                        a = fma(pj, load_v(v_base + (j0 + jj) * p.v.nb.y, dv), a);
                    }
                }
                acc[c] = a;
            }
        }
        workgroupBarrier();
    }

    let d_at = p.d.offset + h * p.d.nb.y + iq * p.d.nb.z + i3 * p.d.nb.w;
    var inv = 0.0;
    if run_sum > 0.0 {
        inv = 1.0 / run_sum;
    }
    for (var c = 0u; c < DV_PER; c++) {
        let dv = li + c * WG;
        if dv < Dv {
            dst[(d_at + dv * p.d.nb.x) >> 2u] = bitcast<u32>(acc[c] * inv);
        }
    }
}
