// SOFT_MAX: dst = softmax(src0 * scale + slope * mask) along rows, with an optional F32 or F16
// mask (broadcast over dims 2 and 3, row i1 of the mask for row i1 of src0) and ALiBi slopes
// per head (dim 2) when max_bias > 0, as ggml_soft_max_ext. One workgroup per row.

struct Params {
    a: Desc,
    m: Desc,
    d: Desc,
    has_mask: u32,
    scale: f32,
    max_bias: f32,
    m0: f32,
    m1: f32,
    n_head_log2: u32,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> mask: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 128u;
var<workgroup> red: array<f32, 128>;

fn mask_at(b: u32) -> f32 {
    let w = mask[b >> 2u];
    if p.m.dtype == T_F16 {
        return f16_of(w, b);
    }
    return bitcast<f32>(w);
}

fn reduce_max(v: f32, li: u32) -> f32 {
    red[li] = v;
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

fn reduce_sum(v: f32, li: u32) -> f32 {
    red[li] = v;
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

@compute @workgroup_size(128)
fn soft_max(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let row = flat_group(wid, nwg);
    let ne = p.a.ne;
    if row >= ne.y * ne.z * ne.w {
        return;
    }
    let i1 = row % ne.y;
    let i2 = (row / ne.y) % ne.z;
    let i3 = row / (ne.y * ne.z);

    var slope = 1.0;
    if p.max_bias > 0.0 {
        if i2 < p.n_head_log2 {
            slope = pow(p.m0, f32(i2 + 1u));
        } else {
            slope = pow(p.m1, f32(2u * (i2 - p.n_head_log2) + 1u));
        }
    }
    let a_row = p.a.offset + i1 * p.a.nb.y + i2 * p.a.nb.z + i3 * p.a.nb.w;
    let m_row = p.m.offset + i1 * p.m.nb.y + (i2 % p.m.ne.z) * p.m.nb.z + (i3 % p.m.ne.w) * p.m.nb.w;
    let d_row = p.d.offset + i1 * p.d.nb.y + i2 * p.d.nb.z + i3 * p.d.nb.w;

    var mx = bitcast<f32>(NEG_INF_BITS);
    for (var i0 = li; i0 < ne.x; i0 += WG) {
        var v = bitcast<f32>(src0[(a_row + i0 * p.a.nb.x) >> 2u]) * p.scale;
        if p.has_mask != 0u {
            v += slope * mask_at(m_row + i0 * p.m.nb.x);
        }
        mx = max(mx, v);
    }
    mx = reduce_max(mx, li);

    var sum = 0.0;
    for (var i0 = li; i0 < ne.x; i0 += WG) {
        var v = bitcast<f32>(src0[(a_row + i0 * p.a.nb.x) >> 2u]) * p.scale;
        if p.has_mask != 0u {
            v += slope * mask_at(m_row + i0 * p.m.nb.x);
        }
        let e = exp(v - mx);
        sum += e;
        dst[(d_row + i0 * p.d.nb.x) >> 2u] = bitcast<u32>(e);
    }
    sum = reduce_sum(sum, li);

    let inv = 1.0 / sum;
    for (var i0 = li; i0 < ne.x; i0 += WG) {
        let at = (d_row + i0 * p.d.nb.x) >> 2u;
        dst[at] = bitcast<u32>(bitcast<f32>(dst[at]) * inv);
    }
}
