// F16 decoding with the hardware's conversion (`unpack2x16float`), compiled on adapters that
// offer `shader-f16` (Mesa's Vulkan drivers expose the conversion only together with it): the
// same functions as `f16_int.wgsl`, one instruction instead of about fifteen integer
// operations. Converting f16 to f32 is exact, so both variants give identical results.

// The f32 value of the f16 with bits `h` (the low 16 bits).
fn f16_to_f32(h: u32) -> f32 {
    return unpack2x16float(h).x;
}

// The f16 at byte address `b` (2-byte aligned) of word `w`, as f32.
fn f16_of(w: u32, b: u32) -> f32 {
    let v = unpack2x16float(w);
    return v[(b >> 1u) & 1u];
}

// Both f16 halves of word `w` (low half first), as f32.
fn f16x2_of(w: u32) -> vec2<f32> {
    return unpack2x16float(w);
}
