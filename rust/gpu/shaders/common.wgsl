// Shared by every Tessera kernel (prepended to each shader file before compilation, after
// `f16_int.wgsl` or `f16_native.wgsl`, which decode F16).
//
// Every tensor is bound as `array<u32>` and addressed in bytes through a descriptor: shape
// `ne`, byte strides `nb`, the byte offset of element 0 in the binding and a type code. F32 is
// converted to F16 with integer arithmetic (exact, round-to-nearest-even, as ggml and the
// `half` crate), which needs neither the `shader-f16` feature nor `pack2x16float` (which
// Mesa's drivers only offer together with `shader-f16`, and whose rounding WGSL leaves open).
// Blocks of the quantized types, only 2-byte aligned, are read byte by byte from the words that
// hold them (`quant.wgsl`).

struct Desc {
    ne: vec4<u32>,
    nb: vec4<u32>,
    offset: u32,
    dtype: u32,
    pad0: u32,
    pad1: u32,
}

const T_F32: u32 = 0u;
const T_F16: u32 = 1u;
const T_Q4_0: u32 = 2u;
const T_Q8_0: u32 = 3u;
const T_I32: u32 = 4u;
const T_BF16: u32 = 5u;
const T_Q4_1: u32 = 6u;
const T_Q5_0: u32 = 7u;
const T_Q5_1: u32 = 8u;
const T_Q2_K: u32 = 9u;
const T_Q3_K: u32 = 10u;
const T_Q4_K: u32 = 11u;
const T_Q5_K: u32 = 12u;
const T_Q6_K: u32 = 13u;
const T_IQ4_NL: u32 = 14u;
const T_IQ4_XS: u32 = 15u;

const NEG_INF_BITS: u32 = 0xff800000u;

// Byte `b & 3` of word `w`.
fn byte_of(w: u32, b: u32) -> u32 {
    return (w >> ((b & 3u) * 8u)) & 0xffu;
}

// The bits of the f16 nearest to `v` (ties to even, overflow to infinity), as ggml and the
// `half` crate convert.
fn f32_to_f16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let s = (x >> 16u) & 0x8000u;
    let ex = (x >> 23u) & 0xffu;
    let m = x & 0x7fffffu;
    if ex == 0xffu {
        return s | 0x7c00u | select(0u, 0x200u | (m >> 13u), m != 0u);
    }
    let e = i32(ex) - 112;
    if e >= 31 {
        return s | 0x7c00u;
    }
    if e <= 0 {
        if e < -10 {
            return s;
        }
        let mm = m | 0x800000u;
        let shift = u32(14 - e);
        var h = mm >> shift;
        let rem = mm & ((1u << shift) - 1u);
        let half = 1u << (shift - 1u);
        if rem > half || (rem == half && (h & 1u) != 0u) {
            h += 1u;
        }
        return s | h;
    }
    var h = (u32(e) << 10u) | (m >> 13u);
    let rem = m & 0x1fffu;
    if rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u) {
        h += 1u;
    }
    return s | h;
}

// A byte as a signed 8-bit integer.
fn as_i8(x: u32) -> i32 {
    return bitcast<i32>(x << 24u) >> 24u;
}

// The coordinates of the flat index `i` in a tensor of shape `ne` (dim 0 fastest).
fn coords(i: u32, ne: vec4<u32>) -> vec4<u32> {
    let i0 = i % ne.x;
    let r = i / ne.x;
    let i1 = r % ne.y;
    let r2 = r / ne.y;
    return vec4<u32>(i0, i1, r2 % ne.z, r2 / ne.z);
}

// Byte offset of the element at coordinates `c` of a tensor described by `d`.
fn byte_at(d: Desc, c: vec4<u32>) -> u32 {
    return d.offset + c.x * d.nb.x + c.y * d.nb.y + c.z * d.nb.z + c.w * d.nb.w;
}

// The flat index of a workgroup in a 2D dispatch (x fastest).
fn flat_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// tanh through exp, clamped so that it never overflows (and never yields NaN).
fn tanh_safe(x: f32) -> f32 {
    let y = clamp(x, -15.0, 15.0);
    let e = exp(2.0 * y);
    return (e - 1.0) / (e + 1.0);
}
