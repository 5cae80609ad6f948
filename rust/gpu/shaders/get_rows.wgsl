// GET_ROWS: dst[i0, i10, i11, i12] = src0[i0, idx[i10, i11, i12], i11, i12], with src0 of any
// type `quant.wgsl` decodes (to F32, bit for bit as the reference dequantizes) or I32 (copied),
// the indices I32, any strides. One invocation per four consecutive result values of a row.
//
// An index outside src0's rows is reported in `status` (see `status.wgsl`) and its row of the
// result is left unwritten: the backend turns the report into an error naming the index. A
// table larger than one binding is read in ranges of rows, one dispatch each: the binding of
// src0 then holds rows `row0 .. row0 + a.ne.y` of `rows`, and only the first dispatch reports.

struct Params {
    a: Desc,
    b: Desc,
    d: Desc,
    // Number of 4-value groups of the result.
    n: u32,
    // Which node of the compute this is, for the status report.
    tag: u32,
    // Always 0; see `exact`.
    zero: u32,
    // The first table row in the binding, the rows of the whole table, whether to report.
    row0: u32,
    rows: u32,
    reports: u32,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read_write> status: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> p: Params;

// The product `x` exactly as computed: or-ing a value the compiler cannot know (it is 0) keeps
// the product from being fused into a multiply-add, so results equal the reference bit for bit.
fn exact(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | p.zero);
}

@compute @workgroup_size(256)
fn get_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let gi = flat_group(wid, nwg) * 256u + li;
    if gi >= p.n {
        return;
    }
    let ne0 = p.d.ne.x;
    let groups = (ne0 + 3u) / 4u;
    let c = coords(gi / groups, vec4<u32>(p.d.ne.y, p.d.ne.z, p.d.ne.w, 1u));
    let i0 = (gi % groups) * 4u;
    let r = bitcast<i32>(idx[(p.b.offset + c.x * p.b.nb.x + c.y * p.b.nb.y + c.z * p.b.nb.z) >> 2u]);
    if r < 0 || u32(r) >= p.rows {
        if i0 == 0u && p.reports != 0u {
            report(p.tag, bitcast<u32>(r), c.x, c.y, c.z);
        }
        return;
    }
    if u32(r) < p.row0 || u32(r) - p.row0 >= p.a.ne.y {
        return;
    }
    let row = p.a.offset + (u32(r) - p.row0) * p.a.nb.y + c.y * p.a.nb.z + c.z * p.a.nb.w;
    let out = p.d.offset + c.x * p.d.nb.y + c.y * p.d.nb.z + c.z * p.d.nb.w;
    let n = min(4u, ne0 - i0);
    if WTYPE == T_I32 {
        for (var j = 0u; j < n; j++) {
            dst[(out + (i0 + j) * p.d.nb.x) >> 2u] = src0[(row + (i0 + j) * p.a.nb.x) >> 2u];
        }
        return;
    }
    let v = dequant4(row, i0, WTYPE, p.a.nb.x, ne0);
    for (var j = 0u; j < n; j++) {
        dst[(out + (i0 + j) * p.d.nb.x) >> 2u] = bitcast<u32>(v[j]);
    }
}
