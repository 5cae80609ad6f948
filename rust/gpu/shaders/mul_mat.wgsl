// MUL_MAT: dst[n, m] = sum_k src0[m, k] * src1[n, k], with src0 (the weights) F32, F16, Q8_0 or
// Q4_0 and src1 (the activations) and dst F32; src0 is broadcast over dims 2 and 3.
//
// Two kernels share the bindings: `mul_mat`, tiled, for many activation rows, and
// `mul_mat_vec` for a few (see below). In `mul_mat` each workgroup of 16 x 16 invocations
// computes a 32 x 32 tile of dst (2 x 2 values per invocation), walking K in steps of 32 = one
// quant block: both operand tiles are decoded to F32 in workgroup memory first. Shapes that are
// not multiples of the tile are padded with zeros. Strided operands are read through their byte
// strides (quantized rows must be dense).

struct Params {
    a: Desc,
    b: Desc,
    d: Desc,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> src1: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

const TILE: u32 = 32u;
const STRIDE: u32 = 33u;

var<workgroup> tile_a: array<f32, 1056>;
var<workgroup> tile_b: array<f32, 1056>;

fn a_f16(b: u32) -> f32 {
    return f16_of(src0[b >> 2u], b);
}

// The four bytes at byte address `b` (any alignment) as a little-endian u32.
fn a_u32(b: u32) -> u32 {
    let w0 = src0[b >> 2u];
    let s = (b & 3u) * 8u;
    if s == 0u {
        return w0;
    }
    return (w0 >> s) | (src0[(b >> 2u) + 1u] << (32u - s));
}

// Values k .. k + 3 of the weight row starting at byte `row` (zero past K). For quantized
// types k is a multiple of 4, so the four values lie in one block.
fn load_a4(row: u32, k: u32) -> vec4<f32> {
    let K = p.a.ne.x;
    var v = vec4<f32>(0.0);
    switch p.a.dtype {
        case 3u: {
            let blk = row + (k / 32u) * 34u;
            let q = a_u32(blk + 2u + k % 32u);
            v = vec4<f32>(
                f32(as_i8(q & 0xffu)),
                f32(as_i8((q >> 8u) & 0xffu)),
                f32(as_i8((q >> 16u) & 0xffu)),
                f32(as_i8(q >> 24u)),
            ) * a_f16(blk);
        }
        case 2u: {
            // Values 0..15 of a block are the low nibbles of its 16 bytes, 16..31 the high ones.
            let blk = row + (k / 32u) * 18u;
            let w = k % 32u;
            let q = a_u32(blk + 2u + w % 16u) >> select(0u, 4u, w >= 16u);
            v = (vec4<f32>(
                f32(q & 0xfu),
                f32((q >> 8u) & 0xfu),
                f32((q >> 16u) & 0xfu),
                f32((q >> 24u) & 0xfu),
            ) - 8.0) * a_f16(blk);
        }
        case 1u: {
            for (var j = 0u; j < 4u; j++) {
                if k + j < K {
                    v[j] = a_f16(row + (k + j) * p.a.nb.x);
                }
            }
        }
        default: {
            for (var j = 0u; j < 4u; j++) {
                if k + j < K {
                    v[j] = bitcast<f32>(src0[(row + (k + j) * p.a.nb.x) >> 2u]);
                }
            }
        }
    }
    return v;
}

fn load_b4(row: u32, k: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if k + j < p.b.ne.x {
            v[j] = bitcast<f32>(src1[(row + (k + j) * p.b.nb.x) >> 2u]);
        }
    }
    return v;
}

@compute @workgroup_size(16, 16)
fn mul_mat(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let K = p.a.ne.x;
    let M = p.a.ne.y;
    let N = p.b.ne.y;
    let m0 = wid.x * TILE;
    let n0 = wid.y * TILE;
    let i12 = wid.z % p.b.ne.z;
    let i13 = wid.z / p.b.ne.z;
    let i02 = i12 / (p.b.ne.z / p.a.ne.z);
    let i03 = i13 / (p.b.ne.w / p.a.ne.w);
    let a_base = p.a.offset + i02 * p.a.nb.z + i03 * p.a.nb.w;
    let b_base = p.b.offset + i12 * p.b.nb.z + i13 * p.b.nb.w;

    // Each invocation loads 4 consecutive values of one row of each tile.
    let lr = li / 8u;
    let lk = (li % 8u) * 4u;
    let am = m0 + lr;
    let bn = n0 + lr;

    var c00 = 0.0;
    var c01 = 0.0;
    var c10 = 0.0;
    var c11 = 0.0;
    for (var k0 = 0u; k0 < K; k0 += TILE) {
        var va = vec4<f32>(0.0);
        if am < M {
            va = load_a4(a_base + am * p.a.nb.y, k0 + lk);
        }
        var vb = vec4<f32>(0.0);
        if bn < N {
            vb = load_b4(b_base + bn * p.b.nb.y, k0 + lk);
        }
        for (var j = 0u; j < 4u; j++) {
            tile_a[lr * STRIDE + lk + j] = va[j];
            tile_b[lr * STRIDE + lk + j] = vb[j];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TILE; kk++) {
            let a0 = tile_a[lid.x * STRIDE + kk];
            let a1 = tile_a[(lid.x + 16u) * STRIDE + kk];
            let b0 = tile_b[lid.y * STRIDE + kk];
            let b1 = tile_b[(lid.y + 16u) * STRIDE + kk];
            c00 = fma(a0, b0, c00);
            c01 = fma(a0, b1, c01);
            c10 = fma(a1, b0, c10);
            c11 = fma(a1, b1, c11);
        }
        workgroupBarrier();
    }

    let d_base = p.d.offset + i12 * p.d.nb.z + i13 * p.d.nb.w;
    let ma = m0 + lid.x;
    let mb = ma + 16u;
    let na = n0 + lid.y;
    let nb = na + 16u;
    if ma < M && na < N {
        dst[(d_base + ma * p.d.nb.x + na * p.d.nb.y) >> 2u] = bitcast<u32>(c00);
    }
    if ma < M && nb < N {
        dst[(d_base + ma * p.d.nb.x + nb * p.d.nb.y) >> 2u] = bitcast<u32>(c01);
    }
    if mb < M && na < N {
        dst[(d_base + mb * p.d.nb.x + na * p.d.nb.y) >> 2u] = bitcast<u32>(c10);
    }
    if mb < M && nb < N {
        dst[(d_base + mb * p.d.nb.x + nb * p.d.nb.y) >> 2u] = bitcast<u32>(c11);
    }
}

// Matrix-vector form for few activation rows (N <= MAT_VEC_MAX_N, e.g. token generation): one
// workgroup of 64 invocations per weight row, each invocation walking K (quantized: whole
// blocks) and keeping one sum per activation row, then a tree reduction in workgroup memory.
// The weights are read once, with no tile padding.

const MV_WG: u32 = 64u;
const MV_MAX_N: u32 = 8u;
var<workgroup> mv_red: array<f32, 512>;

@compute @workgroup_size(64)
fn mul_mat_vec(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let K = p.a.ne.x;
    let M = p.a.ne.y;
    let N = p.b.ne.y;
    let m = flat_group(wid, nwg);
    if m >= M {
        return;
    }
    let i12 = wid.z % p.b.ne.z;
    let i13 = wid.z / p.b.ne.z;
    let i02 = i12 / (p.b.ne.z / p.a.ne.z);
    let i03 = i13 / (p.b.ne.w / p.a.ne.w);
    let row = p.a.offset + m * p.a.nb.y + i02 * p.a.nb.z + i03 * p.a.nb.w;
    let b_base = p.b.offset + i12 * p.b.nb.z + i13 * p.b.nb.w;

    var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if p.a.dtype == T_Q8_0 || p.a.dtype == T_Q4_0 {
        // Whole blocks per invocation, their quants read four at a time.
        let q8 = p.a.dtype == T_Q8_0;
        let bsize = select(18u, 34u, q8);
        for (var ib = li; ib < K / 32u; ib += MV_WG) {
            let blk = row + ib * bsize;
            let d = a_f16(blk);
            let k0 = ib * 32u;
            for (var j = 0u; j < select(4u, 8u, q8); j++) {
                let q = a_u32(blk + 2u + 4u * j);
                var lo: vec4<f32>;
                var hi: vec4<f32>;
                if q8 {
                    lo = vec4<f32>(
                        f32(as_i8(q & 0xffu)),
                        f32(as_i8((q >> 8u) & 0xffu)),
                        f32(as_i8((q >> 16u) & 0xffu)),
                        f32(as_i8(q >> 24u)),
                    ) * d;
                } else {
                    lo = (vec4<f32>(
                        f32(q & 0xfu),
                        f32((q >> 8u) & 0xfu),
                        f32((q >> 16u) & 0xfu),
                        f32((q >> 24u) & 0xfu),
                    ) - 8.0) * d;
                    hi = (vec4<f32>(
                        f32((q >> 4u) & 0xfu),
                        f32((q >> 12u) & 0xfu),
                        f32((q >> 20u) & 0xfu),
                        f32(q >> 28u),
                    ) - 8.0) * d;
                }
                for (var n = 0u; n < N; n++) {
                    let bn = b_base + n * p.b.nb.y;
                    if q8 {
                        acc[n] += dot(lo, load_b4(bn, k0 + 4u * j));
                    } else {
                        // Low nibbles are values 4j .. 4j + 3, high nibbles 16 + 4j .. 16 + 4j + 3.
                        acc[n] += dot(lo, load_b4(bn, k0 + 4u * j)) + dot(hi, load_b4(bn, k0 + 16u + 4u * j));
                    }
                }
            }
        }
    } else {
        // Chunks of 4 values; chunk c covers k = 4c .. 4c + 3.
        let chunks = (K + 3u) / 4u;
        for (var c = li; c < chunks; c += MV_WG) {
            let k = c * 4u;
            let w = load_a4(row, k);
            for (var n = 0u; n < N; n++) {
                acc[n] += dot(w, load_b4(b_base + n * p.b.nb.y, k));
            }
        }
    }
    for (var n = 0u; n < MV_MAX_N; n++) {
        mv_red[n * MV_WG + li] = acc[n];
    }
    workgroupBarrier();
    for (var s = MV_WG / 2u; s > 0u; s >>= 1u) {
        if li < s {
            for (var n = 0u; n < MV_MAX_N; n++) {
                mv_red[n * MV_WG + li] += mv_red[n * MV_WG + li + s];
            }
        }
        workgroupBarrier();
    }
    if li < N {
        let d_base = p.d.offset + i12 * p.d.nb.z + i13 * p.d.nb.w;
        dst[(d_base + m * p.d.nb.x + li * p.d.nb.y) >> 2u] = bitcast<u32>(mv_red[li * MV_WG]);
    }
}
