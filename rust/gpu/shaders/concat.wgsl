// CONCAT: dst = src0 and src1 joined along dim `dim` (ggml_concat): result element c comes from
// src0[c] when c[dim] < src0's ne[dim], else from src1[c - src0's ne[dim] along dim]. F32, F16
// or BF16 (all three of one type, copied bit for bit), any strides; one invocation per result
// element, written through atomics so that two invocations can write the halves of one word.

struct Params {
    a: Desc,
    b: Desc,
    d: Desc,
    n: u32,
    dim: u32,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> src1: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn concat(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = flat_group(wid, nwg) * 256u + li;
    if i >= p.n {
        return;
    }
    var c = coords(i, p.d.ne);
    let to = byte_at(p.d, c);
    var w: u32;
    var at: u32;
    if c[p.dim] < p.a.ne[p.dim] {
        at = byte_at(p.a, c);
        w = src0[at >> 2u];
    } else {
        c[p.dim] -= p.a.ne[p.dim];
        at = byte_at(p.b, c);
        w = src1[at >> 2u];
    }
    if p.d.dtype == T_F32 {
        atomicStore(&dst[to >> 2u], w);
        return;
    }
    // 16-bit elements: the half of the word at `at`, into the half of the word at `to`.
    let h = (w >> ((at & 2u) * 8u)) & 0xffffu;
    if (to & 2u) == 0u {
        atomicAnd(&dst[to >> 2u], 0xffff0000u);
        atomicOr(&dst[to >> 2u], h);
    } else {
        atomicAnd(&dst[to >> 2u], 0x0000ffffu);
        atomicOr(&dst[to >> 2u], h << 16u);
    }
}
