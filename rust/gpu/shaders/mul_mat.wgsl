// MUL_MAT: dst[n, m] = sum_k src0[m, k] * src1[n, k], with src0 (the weights) F32, F16, Q8_0 or
// Q4_0 and src1 (the activations) and dst F32; src0 is broadcast over dims 2 and 3.
//
// Each workgroup of 16 x 16 invocations computes a 32 x 32 tile of dst (2 x 2 values per
// invocation), walking K in steps of 32 = one quant block: both operand tiles are decoded to
// F32 in workgroup memory first. Shapes that are not multiples of the tile are padded with
// zeros. Strided operands are read through their byte strides (quantized rows must be dense).

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

fn a_byte(b: u32) -> u32 {
    return byte_of(src0[b >> 2u], b);
}

fn a_f16(b: u32) -> f32 {
    return f16_of(src0[b >> 2u], b);
}

// Values k .. k + 3 of the weight row starting at byte `row` (zero past K). For quantized
// types k is a multiple of 4, so the four values lie in one block.
fn load_a4(row: u32, k: u32) -> vec4<f32> {
    let K = p.a.ne.x;
    var v = vec4<f32>(0.0);
    switch p.a.dtype {
        case 3u: {
            let blk = row + (k / 32u) * 34u;
            let d = a_f16(blk);
            let q = blk + 2u + (k % 32u);
            for (var j = 0u; j < 4u; j++) {
                v[j] = d * f32(as_i8(a_byte(q + j)));
            }
        }
        case 2u: {
            let blk = row + (k / 32u) * 18u;
            let d = a_f16(blk);
            let w = k % 32u;
            for (var j = 0u; j < 4u; j++) {
                let wj = w + j;
                var q: u32;
                if wj < 16u {
                    q = a_byte(blk + 2u + wj) & 0xfu;
                } else {
                    q = a_byte(blk + 2u + wj - 16u) >> 4u;
                }
                v[j] = d * (f32(q) - 8.0);
            }
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
