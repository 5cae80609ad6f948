// SSM_CONV, the short causal convolution (ggml_ssm_conv, LFM2's and Qwen 3.5's):
// dst[i, t, s] = sum_k sx[t + k, i, s] * c[k, i] for channel i, token t and sequence s, with
// sx [d_conv - 1 + n_t, d_inner, n_s] (any strides: LFM2 and Qwen 3.5 feed a transposed view)
// and c [d_conv, d_inner], all F32. One invocation per result element, summing the d_conv
// products in order (f32 multiply-adds; the reference sums in f64).

struct Params {
    sx: Desc,
    c: Desc,
    d: Desc,
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> sx: array<u32>;
@group(0) @binding(1) var<storage, read_write> cw: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn ssm_conv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let e = flat_group(wid, nwg) * 256u + li;
    if e >= p.n {
        return;
    }
    let o = coords(e, p.d.ne);
    let i = o.x;
    let t = o.y;
    let s = o.z;
    var sum = 0.0;
    for (var k = 0u; k < p.c.ne.x; k++) {
        let x = bitcast<f32>(sx[byte_at(p.sx, vec4<u32>(t + k, i, s, 0u)) >> 2u]);
        let w = bitcast<f32>(cw[byte_at(p.c, vec4<u32>(k, i, 0u, 0u)) >> 2u]);
        sum = fma(x, w, sum);
    }
    dst[byte_at(p.d, o) >> 2u] = bitcast<u32>(sum);
}
