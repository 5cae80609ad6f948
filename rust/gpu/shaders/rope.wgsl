// ROPE: rotary position embedding of src0 (F32 [head_dim, n_head, n_tokens, ne3], any
// strides) at the I32 positions src1 ([n_tokens]), with optional F32 frequency factors, in
// normal mode (adjacent pairs) or NeoX mode (pairs n_dims / 2 apart), as ggml_rope_ext:
// theta_extrap = pos * freq_base^(-2i / n_dims) / factor[i], theta_interp = freq_scale *
// theta_extrap; without YaRN (ext_factor = 0) theta = theta_interp, else it mixes the two by
// ggml's ramp over the correction dims (computed on the host) and the magnitude is scaled by
// `mscale_yarn`; rotated values are scaled by attn_factor. Dims from n_dims on are copied. One
// invocation per pair. Angles are reduced to [-pi, pi] before sin / cos, whose accuracy drivers
// only promise near zero.

struct Params {
    a: Desc,
    pos: Desc,
    ff: Desc,
    d: Desc,
    n: u32,
    n_dims: u32,
    neox: u32,
    has_ff: u32,
    log2_base: f32,
    freq_scale: f32,
    attn_factor: f32,
    ext_factor: f32,
    corr_low: f32,
    corr_high: f32,
    mscale_yarn: f32,
}

const INV_TWO_PI: f32 = 0.15915494309189535;
// 2 pi = TWO_PI_HI + TWO_PI_LO, the first with few enough bits that k * TWO_PI_HI is exact.
const TWO_PI_HI: f32 = 6.28125;
const TWO_PI_LO: f32 = 0.0019353071795864769;

// `t` minus the nearest multiple of 2 pi.
fn reduce_angle(t: f32) -> f32 {
    let k = round(t * INV_TWO_PI);
    return (t - k * TWO_PI_HI) - k * TWO_PI_LO;
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> pos: array<u32>;
@group(0) @binding(2) var<storage, read_write> ff: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

fn ld(b: u32) -> f32 {
    return bitcast<f32>(src0[b >> 2u]);
}

fn st(b: u32, v: f32) {
    dst[b >> 2u] = bitcast<u32>(v);
}

@compute @workgroup_size(256)
fn rope(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = flat_group(wid, nwg) * 256u + li;
    if i >= p.n {
        return;
    }
    let ne = p.a.ne;
    let pairs = (ne.x + 1u) / 2u;
    let ip = i % pairs;
    let c = coords(i / pairs, vec4<u32>(ne.y, ne.z, ne.w, 1u));
    let a_row = p.a.offset + c.x * p.a.nb.y + c.y * p.a.nb.z + c.z * p.a.nb.w;
    let d_row = p.d.offset + c.x * p.d.nb.y + c.y * p.d.nb.z + c.z * p.d.nb.w;

    let half_dims = p.n_dims / 2u;
    if ip >= half_dims {
        // Not rotated: copy the two values (one when ne0 is odd).
        let i0 = 2u * ip;
        st(d_row + i0 * p.d.nb.x, ld(a_row + i0 * p.a.nb.x));
        if i0 + 1u < ne.x {
            st(d_row + (i0 + 1u) * p.d.nb.x, ld(a_row + (i0 + 1u) * p.a.nb.x));
        }
        return;
    }

    let position = f32(bitcast<i32>(pos[(p.pos.offset + c.y * p.pos.nb.x) >> 2u]));
    var theta_extrap = position * exp2(-f32(2u * ip) / f32(p.n_dims) * p.log2_base);
    if p.has_ff != 0u {
        theta_extrap = theta_extrap / bitcast<f32>(ff[(p.ff.offset + ip * p.ff.nb.x) >> 2u]);
    }
    var theta = theta_extrap * p.freq_scale;
    var mscale = p.attn_factor;
    if p.ext_factor != 0.0 {
        let y = (f32(ip) - p.corr_low) / max(0.001, p.corr_high - p.corr_low);
        let ramp_mix = (1.0 - clamp(y, 0.0, 1.0)) * p.ext_factor;
        theta = theta * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
        mscale = mscale * p.mscale_yarn;
    }
    theta = reduce_angle(theta);
    let cs = cos(theta) * mscale;
    let sn = sin(theta) * mscale;

    var j0 = 2u * ip;
    var j1 = 2u * ip + 1u;
    if p.neox != 0u {
        j0 = ip;
        j1 = ip + half_dims;
    }
    let x0 = ld(a_row + j0 * p.a.nb.x);
    let x1 = ld(a_row + j1 * p.a.nb.x);
    st(d_row + j0 * p.d.nb.x, x0 * cs - x1 * sn);
    st(d_row + j1 * p.d.nb.x, x0 * sn + x1 * cs);
}
