// GET_ROWS: dst[i0, i10, i11, i12] = src0[i0, idx[i10, i11, i12], i11, i12], with src0 F32,
// F16, Q8_0, Q4_0 (decoded to F32) or I32 (copied), the indices I32. One invocation per result
// element. An index outside src0's rows gives 0.

struct Params {
    a: Desc,
    b: Desc,
    d: Desc,
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

fn a_byte(b: u32) -> u32 {
    return byte_of(src0[b >> 2u], b);
}

fn a_f16(b: u32) -> f32 {
    return f16_of(src0[b >> 2u], b);
}

@compute @workgroup_size(256)
fn get_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = flat_group(wid, nwg) * 256u + li;
    if i >= p.n {
        return;
    }
    let c = coords(i, p.d.ne);
    let r = bitcast<i32>(idx[(p.b.offset + c.y * p.b.nb.x + c.z * p.b.nb.y + c.w * p.b.nb.z) >> 2u]);
    let out = (p.d.offset + c.x * p.d.nb.x + c.y * p.d.nb.y + c.z * p.d.nb.z + c.w * p.d.nb.w) >> 2u;
    if r < 0 || u32(r) >= p.a.ne.y {
        dst[out] = 0u;
        return;
    }
    let row = p.a.offset + u32(r) * p.a.nb.y + c.z * p.a.nb.z + c.w * p.a.nb.w;
    var v: f32;
    switch p.a.dtype {
        case 4u: {
            dst[out] = src0[(row + c.x * p.a.nb.x) >> 2u];
            return;
        }
        case 3u: {
            let blk = row + (c.x / 32u) * 34u;
            v = a_f16(blk) * f32(as_i8(a_byte(blk + 2u + c.x % 32u)));
        }
        case 2u: {
            let blk = row + (c.x / 32u) * 18u;
            let w = c.x % 32u;
            var q: u32;
            if w < 16u {
                q = a_byte(blk + 2u + w) & 0xfu;
            } else {
                q = a_byte(blk + 2u + w - 16u) >> 4u;
            }
            v = a_f16(blk) * (f32(q) - 8.0);
        }
        case 1u: {
            v = a_f16(row + c.x * p.a.nb.x);
        }
        default: {
            v = bitcast<f32>(src0[(row + c.x * p.a.nb.x) >> 2u]);
        }
    }
    dst[out] = bitcast<u32>(v);
}
