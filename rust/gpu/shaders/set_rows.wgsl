// SET_ROWS (the KV-cache write): row i1 of `rows` (F32 [ne0, n, ne2, ne3], any strides) is
// written, converted to the destination's type (F32; F16 rounded to nearest even; Q8_0 or Q4_0
// blocks of 32 values quantized as ggml's `quantize_row_q8_0_ref` / `quantize_row_q4_0_ref`),
// into row idx[i1, i2 % ne12, i3 % ne13] of the destination (dense rows, any other strides).
// One workgroup of 64 invocations per source row: each invocation writes values i0, i0 + 64,
// ... (F32, F16) or quantizes blocks b, b + 64, ... (Q8_0, Q4_0).
//
// The quantizers follow the reference's order of operations: Q8_0 `d = amax / 127`,
// `id = 1 / d` (0 when d is 0), `q = round_half_away(x * id)`; Q4_0 `d = max / -8` (max the
// first value of largest magnitude, with its sign), `q = min(trunc(x * id + 8.5), 15)`; the
// products go through `exact` so that they are never fused into a multiply-add. With f32
// division and reciprocal correctly rounded (lavapipe, as x86) the blocks are the reference's
// bit for bit; WGSL allows 2.5 ULP for them, which on other drivers may move a value lying on a
// rounding boundary to the next quantum (and rarely the last bit of a scale).
//
// Rows are written in order as on the CPU: when two source rows pick the same destination row
// only the later one is written (the workgroup first looks for a later row with its index,
// which costs n^2 / 2 index reads for n rows in all). An index outside the destination's rows is reported in
// `status` (see `status.wgsl`) and its row skipped: the backend turns the report into an error.
// F16 values and blocks are stored through atomics, since two invocations may write the halves
// of a word.

struct Params {
    src: Desc,
    idx: Desc,
    d: Desc,
    // Number of source rows.
    n: u32,
    tag: u32,
    // Always 0; see `exact`.
    zero: u32,
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

// The product `x` exactly as computed: or-ing a value the compiler cannot know (it is 0) keeps
// the product from being fused into a multiply-add, so results equal the reference bit for bit.
fn exact(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | p.zero);
}

// Stores the 16 bits `h` at byte `b` (2-byte aligned) of the destination: blocks and F16
// values are only 2-byte aligned, so two invocations may write the halves of one word.
fn store16(b: u32, h: u32) {
    let w = b >> 2u;
    if (b & 2u) == 0u {
        atomicAnd(&dst[w], 0xffff0000u);
        atomicOr(&dst[w], h);
    } else {
        atomicAnd(&dst[w], 0x0000ffffu);
        atomicOr(&dst[w], h << 16u);
    }
}

// Source value i0 of the row at byte `at`.
fn src_value(at: u32, i0: u32) -> f32 {
    return bitcast<f32>(rows[(at + i0 * p.src.nb.x) >> 2u]);
}

// Reciprocal of a scale, or 0 for a zero scale (ggml's `d ? 1.0f/d : 0.0f`).
fn inv(d: f32) -> f32 {
    return select(0.0, 1.0 / d, d != 0.0);
}

// `v` rounded to the nearest integer, ties away from zero (C's `roundf`).
fn round_half_away(v: f32) -> i32 {
    let a = abs(v);
    var r = round(a);
    if a - r == 0.5 {
        r += 1.0;
    }
    return select(i32(r), -i32(r), v < 0.0);
}

// Quantizes the 32 source values from `i0` of the row at byte `at` into the Q8_0 block at byte
// `to`: d (f16), then 32 signed bytes.
fn quantize_q8_0(at: u32, i0: u32, to: u32) {
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        amax = max(amax, abs(src_value(at, i0 + j)));
    }
    let d = amax / 127.0;
    let id = inv(d);
    store16(to, f32_to_f16(d));
    for (var j = 0u; j < 32u; j += 2u) {
        let q0 = u32(round_half_away(exact(src_value(at, i0 + j) * id))) & 0xffu;
        let q1 = u32(round_half_away(exact(src_value(at, i0 + j + 1u) * id))) & 0xffu;
        store16(to + 2u + j, q0 | (q1 << 8u));
    }
}

// Quantizes the 32 source values from `i0` of the row at byte `at` into the Q4_0 block at byte
// `to`: d (f16), then 16 bytes, byte j holding values j (low nibble) and j + 16.
fn quantize_q4_0(at: u32, i0: u32, to: u32) {
    var amax = 0.0;
    var vmax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        let v = src_value(at, i0 + j);
        if amax < abs(v) {
            amax = abs(v);
            vmax = v;
        }
    }
    let d = vmax / -8.0;
    let id = inv(d);
    store16(to, f32_to_f16(d));
    for (var j = 0u; j < 16u; j += 2u) {
        var h = 0u;
        for (var t = 0u; t < 2u; t++) {
            let lo = u32(min(i32(exact(src_value(at, i0 + j + t) * id) + 8.5), 15));
            let hi = u32(min(i32(exact(src_value(at, i0 + j + t + 16u) * id) + 8.5), 15));
            h |= (lo | (hi << 4u)) << (8u * t);
        }
        store16(to + 2u + j, h);
    }
}

fn store(b: u32, v: f32) {
    if p.d.dtype == T_F16 {
        store16(b, f32_to_f16(v));
    } else {
        atomicStore(&dst[b >> 2u], bitcast<u32>(v));
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
    if p.d.dtype == T_Q8_0 || p.d.dtype == T_Q4_0 {
        // Blocks of 32 values; nb.x is the block's size (34 or 18 bytes).
        for (var blk = li; blk < p.src.ne.x / 32u; blk += WG) {
            if p.d.dtype == T_Q8_0 {
                quantize_q8_0(src_at, blk * 32u, to + blk * p.d.nb.x);
            } else {
                quantize_q4_0(src_at, blk * 32u, to + blk * p.d.nb.x);
            }
        }
        return;
    }
    for (var i0 = li; i0 < p.src.ne.x; i0 += WG) {
        store(to + i0 * p.d.nb.x, src_value(src_at, i0));
    }
}
