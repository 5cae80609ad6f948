// RMS_NORM: each row of src0 (F32, any strides) divided by sqrt(mean(x^2) + eps), as
// ggml_rms_norm; NORM (`center`): (x - mean(x)) / sqrt(var(x) + eps) with the population
// variance, as ggml_norm. One workgroup per row.

struct Params {
    a: Desc,
    d: Desc,
    eps: f32,
    center: u32,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 128u;
var<workgroup> red: array<f32, 128>;

@compute @workgroup_size(128)
fn rms_norm(
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
    let a_row = p.a.offset + i1 * p.a.nb.y + i2 * p.a.nb.z + i3 * p.a.nb.w;
    let d_row = p.d.offset + i1 * p.d.nb.y + i2 * p.d.nb.z + i3 * p.d.nb.w;

    var mean = 0.0;
    if p.center != 0u {
        var sum = 0.0;
        for (var i0 = li; i0 < ne.x; i0 += WG) {
            sum += bitcast<f32>(src0[(a_row + i0 * p.a.nb.x) >> 2u]);
        }
        mean = reduce_sum(sum, li) / f32(ne.x);
    }
    var sum2 = 0.0;
    for (var i0 = li; i0 < ne.x; i0 += WG) {
        let x = bitcast<f32>(src0[(a_row + i0 * p.a.nb.x) >> 2u]) - mean;
        sum2 = fma(x, x, sum2);
    }
    let scale = 1.0 / sqrt(reduce_sum(sum2, li) / f32(ne.x) + p.eps);
    for (var i0 = li; i0 < ne.x; i0 += WG) {
        let x = bitcast<f32>(src0[(a_row + i0 * p.a.nb.x) >> 2u]);
        dst[(d_row + i0 * p.d.nb.x) >> 2u] = bitcast<u32>((x - mean) * scale);
    }
}

// The sum of `v` over the workgroup (every invocation gets it).
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
