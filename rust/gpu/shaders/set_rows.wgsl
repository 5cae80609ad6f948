// SET_ROWS (the KV-cache write): row i1 of `rows` (F32 [ne0, n, ne2, ne3], any strides) is
// written, converted to the destination's type (F32 or F16, rounded to nearest even), into row
// idx[i1, i2 % ne12, i3 % ne13] of the destination (dense rows, any other strides). One
// workgroup of 64 invocations per source row.
//
// Rows are written in order as on the CPU: when two source rows pick the same destination row
// only the later one is written (the workgroup first looks for a later row with its index,
// which costs n^2 / 2 index reads for n rows in all). An index outside the destination's rows is reported in
// `status` (see `status.wgsl`) and its row skipped: the backend turns the report into an error.
// F16 values are stored through atomics, since two invocations may write the halves of a word.

struct Params {
    src: Desc,
    idx: Desc,
    d: Desc,
    // Number of source rows.
    n: u32,
    tag: u32,
}

@group(0) @binding(0) var<storage, read_write> rows: array<u32>;
@group(0) @binding(1) var<storage, read_write> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> status: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> p: Params;

// The destination row index of source row `i1` of plane (i2, i3).
fn index_of(i1: u32, i2: u32, i3: u32) -> i32 {
    let b = p.idx.offset + i1 * p.idx.nb.x + (i2 % p.idx.ne.y) * p.idx.nb.y + (i3 % p.idx.ne.z) * p.idx.nb.z;
    return bitcast<i32>(idx[b >> 2u]);
}

fn store(b: u32, v: f32) {
    let w = b >> 2u;
    if p.d.dtype == T_F16 {
        let h = f32_to_f16(v);
        if (b & 2u) == 0u {
            atomicAnd(&dst[w], 0xffff0000u);
            atomicOr(&dst[w], h);
        } else {
            atomicAnd(&dst[w], 0x0000ffffu);
            atomicOr(&dst[w], h << 16u);
        }
    } else {
        atomicStore(&dst[w], bitcast<u32>(v));
    }
}

const WG: u32 = 64u;
var<workgroup> superseded: atomic<u32>;

@compute @workgroup_size(64)
fn set_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let gr = flat_group(wid, nwg);
    if gr >= p.n {
        return;
    }
    let c = coords(gr, vec4<u32>(p.src.ne.y, p.src.ne.z, p.src.ne.w, 1u));
    let r = index_of(c.x, c.y, c.z);
    let bad = r < 0 || u32(r) >= p.d.ne.y;
    if bad && li == 0u {
        report(p.tag, bitcast<u32>(r), c.x, c.y % p.idx.ne.y, c.z % p.idx.ne.z);
    }
    // A later source row of this plane writes the same destination row: it wins.
    if !bad {
        for (var j = c.x + 1u + li; j < p.src.ne.y; j += WG) {
            if index_of(j, c.y, c.z) == r {
                atomicStore(&superseded, 1u);
            }
        }
    }
    workgroupBarrier();
    if bad || atomicLoad(&superseded) != 0u {
        return;
    }
    let src_at = p.src.offset + c.x * p.src.nb.y + c.y * p.src.nb.z + c.z * p.src.nb.w;
    let to = p.d.offset + u32(r) * p.d.nb.y + c.y * p.d.nb.z + c.z * p.d.nb.w;
    for (var i0 = li; i0 < p.src.ne.x; i0 += WG) {
        store(to + i0 * p.d.nb.x, bitcast<f32>(rows[(src_at + i0 * p.src.nb.x) >> 2u]));
    }
}
