// F16 decoding with integer arithmetic, for adapters without `shader-f16` (lavapipe, many
// Android drivers). `f16_native.wgsl` defines the same functions with the hardware's f16 type;
// both give the exact f32 value of every f16 (subnormals, infinities and NaN included).

// The f32 value of the f16 with bits `h` (the low 16 bits).
fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0u {
        let v = f32(m) * 5.9604644775390625e-8;
        return select(v, -v, s != 0u);
    }
    if e == 31u {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// The f16 at byte address `b` (2-byte aligned) of word `w`, as f32.
fn f16_of(w: u32, b: u32) -> f32 {
    return f16_to_f32((w >> ((b & 2u) * 8u)) & 0xffffu);
}

// Both f16 halves of word `w` (low half first), as f32.
fn f16x2_of(w: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32(w & 0xffffu), f16_to_f32(w >> 16u));
}
