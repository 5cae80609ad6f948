// MUL_MAT: dst[n, m] = sum_k src0[m, k] * src1[n, k], with src0 (the weights) of any type
// `quant.wgsl` decodes and src1 (the activations) F32, F16 or BF16, dst F32; src0 is broadcast over
// dims 2 and 3 (src1's ne2, ne3 multiples of src0's, as ggml: grouped-query attention).
//
// Two kernels share the bindings: `mul_mat`, tiled, for many activation rows, and
// `mul_mat_vec` for a few (see below). In `mul_mat` each workgroup of 8 x 8 invocations
// computes a 32 x 32 tile of dst (4 x 4 values per invocation), walking K in steps of 32 (one
// legacy block, an eighth of a k-quant super-block): both operand tiles are decoded to F32 in
// workgroup memory first. Shapes that are not multiples of the tile are padded with zeros.
// Every operand is read through its byte strides (views of a KV cache, permuted activations);
// block rows must be dense.

struct Params {
    a: Desc,
    b: Desc,
    d: Desc,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> src1: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

// Products may be fused into multiply-adds here (see `quant.wgsl`).
fn exact(x: f32) -> f32 {
    return x;
}

const TILE: u32 = 32u;
const STRIDE: u32 = 33u;

var<workgroup> tile_a: array<f32, 1056>;
var<workgroup> tile_b: array<f32, 1056>;

// Values k .. k + 3 of the activation row starting at byte `row` (zero past K).
fn load_b4(row: u32, k: u32) -> vec4<f32> {
    let K = p.b.ne.x;
    let nb0 = p.b.nb.x;
    if p.b.dtype == T_F32 && nb0 == 4u && k + 4u <= K {
        let w = (row >> 2u) + k;
        return bitcast<vec4<f32>>(vec4<u32>(src1[w], src1[w + 1u], src1[w + 2u], src1[w + 3u]));
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if k + j < K {
            let b = row + (k + j) * nb0;
            let w = src1[b >> 2u];
            if p.b.dtype == T_F16 {
                v[j] = f16_of(w, b);
            } else if p.b.dtype == T_BF16 {
                v[j] = bitcast<f32>(((w >> ((b & 2u) * 8u)) & 0xffffu) << 16u);
            } else {
                v[j] = bitcast<f32>(w);
            }
        }
    }
    return v;
}

// The byte offsets of the src0 and src1 matrices of batch `z` (flat over src1's dims 2, 3),
// and of the dst matrix.
struct Batch {
    a: u32,
    b: u32,
    d: u32,
}

fn batch(z: u32) -> Batch {
    let i12 = z % p.b.ne.z;
    let i13 = z / p.b.ne.z;
    let i02 = i12 / (p.b.ne.z / p.a.ne.z);
    let i03 = i13 / (p.b.ne.w / p.a.ne.w);
    return Batch(
        p.a.offset + i02 * p.a.nb.z + i03 * p.a.nb.w,
        p.b.offset + i12 * p.b.nb.z + i13 * p.b.nb.w,
        p.d.offset + i12 * p.d.nb.z + i13 * p.d.nb.w,
    );
}

fn store(base: u32, m: u32, n: u32, v: f32) {
    if m < p.a.ne.y && n < p.b.ne.y {
        dst[(base + m * p.d.nb.x + n * p.d.nb.y) >> 2u] = bitcast<u32>(v);
    }
}

@compute @workgroup_size(8, 8)
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
    let bt = batch(wid.z);

    // Invocation (x, y) computes rows x, x + 8, x + 16, x + 24 and columns y, y + 8, ... of the
    // tile.
    var c: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < K; k0 += TILE) {
        // Each invocation loads 4 groups of 4 consecutive values of each operand tile.
        for (var r = 0u; r < 4u; r++) {
            let at = li + 64u * r;
            let lr = at / 8u;
            let lk = (at % 8u) * 4u;
            var va = vec4<f32>(0.0);
            if m0 + lr < M && k0 + lk < K {
                va = dequant4(bt.a + (m0 + lr) * p.a.nb.y, k0 + lk, WTYPE, p.a.nb.x, K);
            }
            var vb = vec4<f32>(0.0);
            if n0 + lr < N {
                vb = load_b4(bt.b + (n0 + lr) * p.b.nb.y, k0 + lk);
            }
            for (var j = 0u; j < 4u; j++) {
                tile_a[lr * STRIDE + lk + j] = va[j];
                tile_b[lr * STRIDE + lk + j] = vb[j];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TILE; kk++) {
            let a = vec4<f32>(
                tile_a[lid.x * STRIDE + kk],
                tile_a[(lid.x + 8u) * STRIDE + kk],
                tile_a[(lid.x + 16u) * STRIDE + kk],
                tile_a[(lid.x + 24u) * STRIDE + kk],
            );
            for (var j = 0u; j < 4u; j++) {
                c[j] = fma(a, vec4<f32>(tile_b[(lid.y + 8u * j) * STRIDE + kk]), c[j]);
            }
        }
        workgroupBarrier();
    }

    for (var j = 0u; j < 4u; j++) {
        for (var i = 0u; i < 4u; i++) {
            store(bt.d, m0 + lid.x + 8u * i, n0 + lid.y + 8u * j, c[j][i]);
        }
    }
}

// Matrix-vector form for few activation rows (N <= MV_MAX_N, e.g. token generation): each
// workgroup of 64 invocations computes 8 weight rows, a team of 8 invocations per row. Lane i
// of a team decodes the 32-value chunks i, i + 8, ... of a block row (neighbours read
// neighbouring blocks; each chunk's scales once, its quants with one choice of type), or the
// groups of 4 values i, i + 8, ... of a float row, keeping one sum per activation row; the
// teams then reduce in workgroup memory (3 barriers for 8 rows). The weights are read once,
// with no tile padding.

const MV_WG: u32 = 64u;
const MV_TEAM: u32 = 8u;
const MV_ROWS: u32 = 8u;
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
    let team = li / MV_TEAM;
    let lane = li % MV_TEAM;
    let m = flat_group(wid, nwg) * MV_ROWS + team;
    let bt = batch(wid.z);
    let row = bt.a + m * p.a.nb.y;
    let t = WTYPE;

    var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if m < M {
        if is_blocks(t) {
            // Chunks of 32 values (one or two scale groups): the scales read once, the quants
            // four at a time; sum((q d - m) x) = d sum(q x) - m sum(x).
            let g16 = groups_of_16(t);
            for (var c = lane; c < K / 32u; c += MV_TEAM) {
                let k0 = c * 32u;
                let sa = group_scale(row, k0, t);
                var sb = sa;
                if g16 {
                    sb = group_scale(row, k0 + 16u, t);
                }
                for (var j = 0u; j < 8u; j++) {
                    let k = k0 + 4u * j;
                    let q = quants4(row, k, t);
                    let s = select(sa, sb, j >= 4u);
                    for (var n = 0u; n < N; n++) {
                        let x = load_b4(bt.b + n * p.b.nb.y, k);
                        acc[n] += s.x * dot(q, x) - s.y * (x.x + x.y + x.z + x.w);
                    }
                }
            }
        } else {
            for (var g = lane; g < (K + 3u) / 4u; g += MV_TEAM) {
                let k = g * 4u;
                let w = dequant4(row, k, t, p.a.nb.x, K);
                for (var n = 0u; n < N; n++) {
                    acc[n] += dot(w, load_b4(bt.b + n * p.b.nb.y, k));
                }
            }
        }
    }
    for (var n = 0u; n < N; n++) {
        mv_red[n * MV_WG + li] = acc[n];
    }
    workgroupBarrier();
    for (var s = MV_TEAM / 2u; s > 0u; s >>= 1u) {
        if lane < s {
            for (var n = 0u; n < N; n++) {
                mv_red[n * MV_WG + li] += mv_red[n * MV_WG + li + s];
            }
        }
        workgroupBarrier();
    }
    if m < M && lane < N {
        store(bt.d, m, lane, mv_red[lane * MV_WG + team * MV_TEAM]);
    }
}
