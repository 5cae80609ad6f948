// Decoding of the weight types: four consecutive values of a row of `src0` as f32, for every
// type MUL_MAT and GET_ROWS read (F32, F16, BF16 with any element stride; the GGUF blocks
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS in dense rows). Included by
// shaders that bind the weights as `src0: array<u32>`; each defines `exact(x)` (see below).
//
// Each pipeline is specialized for one weight type (`WTYPE`), the functions below taking it as
// their type `t`.
//
// Block layouts are ggml's (`ggml-common.h`, `tessera_core::quant::blocks`); blocks are only
// 2-byte aligned, so their bytes are read from the words that hold them. The values equal
// `tessera_core::quant::dequantize_row` bit for bit: every product that the reference rounds
// before an addition goes through `exact`, which GET_ROWS defines as an operation the compiler
// cannot see through (so that it cannot fuse the product into a multiply-add) and MUL_MAT as
// the identity (its tolerance allows fused products). MUL_MAT's matrix-vector kernel reads the
// scales of a group once and the quants four at a time (`group_scale`, `quants4`).

const BYTE_SHIFTS = vec4<u32>(0u, 8u, 16u, 24u);

// The weight type of the pipeline (a type code of `common.wgsl`): each weight type gets a
// pipeline of its own, so that the decoding below is chosen when the pipeline is compiled, not
// per value.
override WTYPE: u32 = 0u;

// Byte `b` of src0.
fn s0_byte(b: u32) -> u32 {
    return (src0[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// The four bytes at byte address `b` of src0 (any alignment) as a little-endian u32.
fn s0_u32(b: u32) -> u32 {
    let w0 = src0[b >> 2u];
    let s = (b & 3u) * 8u;
    if s == 0u {
        return w0;
    }
    return (w0 >> s) | (src0[(b >> 2u) + 1u] << (32u - s));
}

// The f16 at byte address `b` (2-byte aligned) of src0, as f32.
fn s0_f16(b: u32) -> f32 {
    return f16_of(src0[b >> 2u], b);
}

// The four bytes of `q` (low byte first).
fn bytes4(q: u32) -> vec4<u32> {
    return (vec4<u32>(q) >> BYTE_SHIFTS) & vec4<u32>(0xffu);
}

// Bits `shift .. shift + width` of each of the four bytes of `q`.
fn bits4(q: u32, shift: u32, mask: u32) -> vec4<u32> {
    return (bytes4(q) >> vec4<u32>(shift)) & vec4<u32>(mask);
}

fn exact4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(exact(v.x), exact(v.y), exact(v.z), exact(v.w));
}

// Q4_K / Q5_K: the 6-bit scale and min of group `j` (0..8) of the 12 bytes at `sc`.
fn scale_min_k4(sc: u32, j: u32) -> vec2<u32> {
    if j < 4u {
        return vec2<u32>(s0_byte(sc + j) & 63u, s0_byte(sc + j + 4u) & 63u);
    }
    let a = s0_byte(sc + j + 4u);
    return vec2<u32>((a & 15u) | ((s0_byte(sc + j - 4u) >> 6u) << 4u), (a >> 4u) | ((s0_byte(sc + j) >> 6u) << 4u));
}

// Q3_K: the signed 6-bit scale (minus 32) of group `j` (0..16) of the 12 bytes at `sc`.
fn scale_q3k(sc: u32, j: u32) -> f32 {
    var lo: u32;
    if j < 8u {
        lo = s0_byte(sc + j) & 15u;
    } else {
        lo = s0_byte(sc + j - 8u) >> 4u;
    }
    let hi = (s0_byte(sc + 8u + j % 4u) >> (2u * (j / 4u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

// The 2-bit quants of values i .. i + 3 (i % 4 == 0) of a Q2_K / Q3_K `qs` at byte `qs`: in
// each 128-value half, byte l holds values l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6.
fn crumbs4(qs: u32, i: u32) -> vec4<u32> {
    let r = i % 128u;
    return bits4(s0_u32(qs + (i / 128u) * 32u + r % 32u), 2u * (r / 32u), 3u);
}

// Whether the scales of type `t` cover 16 values (Q2_K, Q3_K, Q6_K) rather than 32.
fn groups_of_16(t: u32) -> bool {
    return t == 9u || t == 10u || t == 13u;
}

// Every block value is `exact(q * D) - M`, with `q` from `quants4` and (D, M) the scale of its
// group of 16 or 32 values from `group_scale`; the split follows the reference's order of
// operations, so that the values are the same bits.

// (D, M) of the group holding value k (k < K) of the block row at byte `row`, of type `t`.
fn group_scale(row: u32, k: u32, t: u32) -> vec2<f32> {
    switch t {
        case 2u: {
            // Q4_0, 18 bytes: d, then 16 bytes of nibbles (values j and j + 16 in byte j).
            return vec2<f32>(s0_f16(row + (k / 32u) * 18u), 0.0);
        }
        case 6u: {
            // Q4_1, 20 bytes: d, m, nibbles; x = q d + m.
            let blk = row + (k / 32u) * 20u;
            return vec2<f32>(s0_f16(blk), -s0_f16(blk + 2u));
        }
        case 7u: {
            // Q5_0, 22 bytes: d, 4 bytes of fifth bits (bit j for value j), nibbles.
            return vec2<f32>(s0_f16(row + (k / 32u) * 22u), 0.0);
        }
        case 8u: {
            // Q5_1, 24 bytes: d, m, fifth bits, nibbles.
            let blk = row + (k / 32u) * 24u;
            return vec2<f32>(s0_f16(blk), -s0_f16(blk + 2u));
        }
        case 3u: {
            // Q8_0, 34 bytes: d, 32 signed bytes.
            return vec2<f32>(s0_f16(row + (k / 32u) * 34u), 0.0);
        }
        case 9u: {
            // Q2_K, 84 bytes: 16 scale/min bytes, 64 bytes of 2-bit quants, d, dmin.
            let blk = row + (k / 256u) * 84u;
            let sc = s0_byte(blk + (k % 256u) / 16u);
            return vec2<f32>(
                exact(s0_f16(blk + 80u) * f32(sc & 15u)),
                exact(s0_f16(blk + 82u) * f32(sc >> 4u)),
            );
        }
        case 10u: {
            // Q3_K, 110 bytes: 32 bytes of high bits, 64 of 2-bit quants, 12 of 6-bit scales, d.
            let blk = row + (k / 256u) * 110u;
            return vec2<f32>(exact(s0_f16(blk + 108u) * scale_q3k(blk + 96u, (k % 256u) / 16u)), 0.0);
        }
        case 11u, 12u: {
            // Q4_K, 144 bytes / Q5_K, 176 bytes: d, dmin, 12 bytes of 6-bit scales and mins.
            let blk = row + (k / 256u) * select(144u, 176u, t == 12u);
            let sm = scale_min_k4(blk + 4u, (k % 256u) / 32u);
            return vec2<f32>(exact(s0_f16(blk) * f32(sm.x)), exact(s0_f16(blk + 2u) * f32(sm.y)));
        }
        case 14u: {
            // IQ4_NL, 18 bytes: d, then 16 bytes of level indices (as Q4_0's nibbles).
            return vec2<f32>(s0_f16(row + (k / 32u) * 18u), 0.0);
        }
        case 15u: {
            // IQ4_XS, 136 bytes: d, 2 bytes of the scales' high bits, 4 bytes of their low
            // nibbles, 128 bytes of level indices; group j's scale is d (ls - 32).
            let blk = row + (k / 256u) * 136u;
            let j = (k % 256u) / 32u;
            let lo = (s0_byte(blk + 4u + j / 2u) >> (4u * (j % 2u))) & 15u;
            let hi = (s0_byte(blk + 2u + j / 4u) >> (2u * (j % 4u))) & 3u;
            return vec2<f32>(exact(s0_f16(blk) * f32(i32(lo | (hi << 4u)) - 32)), 0.0);
        }
        default: {
            // Q6_K, 210 bytes: 128 bytes of low nibbles, 64 of high 2 bits, 16 signed scales, d.
            let blk = row + (k / 256u) * 210u;
            let i = k % 256u;
            let c = i / 128u;
            let l = i % 32u;
            let quarter = (i % 128u) / 32u;
            let sc = f32(bitcast<i32>(s0_byte(blk + 192u + 8u * c + l / 16u + 2u * quarter) << 24u) >> 24u);
            return vec2<f32>(exact(s0_f16(blk + 208u) * sc), 0.0);
        }
    }
}

// The quants of values k .. k + 3 (k % 4 == 0, the four in one group) of the block row at
// byte `row`, with the offsets the reference subtracts before scaling: one function per type.

fn quants_q4_0(row: u32, k: u32) -> vec4<f32> {
    let w = k % 32u;
    let q = bits4(s0_u32(row + (k / 32u) * 18u + 2u + w % 16u), select(0u, 4u, w >= 16u), 15u);
    return vec4<f32>(q) - 8.0;
}

fn quants_q4_1(row: u32, k: u32) -> vec4<f32> {
    let w = k % 32u;
    return vec4<f32>(bits4(s0_u32(row + (k / 32u) * 20u + 4u + w % 16u), select(0u, 4u, w >= 16u), 15u));
}

// Q5_0 (`one` false: minus 16) and Q5_1: the fifth bits 4 bytes before the nibbles.
fn quants_q5(row: u32, k: u32, one: bool) -> vec4<f32> {
    let blk = row + (k / 32u) * select(22u, 24u, one);
    let qs = blk + select(6u, 8u, one);
    let w = k % 32u;
    let lo = bits4(s0_u32(qs + w % 16u), select(0u, 4u, w >= 16u), 15u);
    let hi = (vec4<u32>(s0_u32(qs - 4u)) >> (vec4<u32>(w) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
    let q = vec4<f32>(lo | (hi << vec4<u32>(4u)));
    return select(q - 16.0, q, one);
}

fn quants_q8_0(row: u32, k: u32) -> vec4<f32> {
    let q = s0_u32(row + (k / 32u) * 34u + 2u + k % 32u);
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q) << (vec4<u32>(24u) - BYTE_SHIFTS)) >> vec4<u32>(24u));
}

fn quants_q2_k(row: u32, k: u32) -> vec4<f32> {
    return vec4<f32>(crumbs4(row + (k / 256u) * 84u + 16u, k % 256u));
}

// A clear high bit (bit i / 32 of hmask[i % 32]) subtracts 4.
fn quants_q3_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row + (k / 256u) * 110u;
    let i = k % 256u;
    let h = bits4(s0_u32(blk + i % 32u), i / 32u, 1u);
    return vec4<f32>(vec4<i32>(crumbs4(blk + 32u, i)) - 4 * (vec4<i32>(1) - vec4<i32>(h)));
}

// Each 64 values: 32 bytes, low nibbles first, then high.
fn quants_q4_k(row: u32, k: u32) -> vec4<f32> {
    let i = k % 256u;
    let l = i % 64u;
    let at = row + (k / 256u) * 144u + 16u + 32u * (i / 64u) + l % 32u;
    return vec4<f32>(bits4(s0_u32(at), select(0u, 4u, l >= 32u), 15u));
}

// Low nibbles as Q4_K; fifth bit 2c or 2c + 1 of qh[l % 32] for value 64c + l.
fn quants_q5_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row + (k / 256u) * 176u;
    let i = k % 256u;
    let c = i / 64u;
    let l = i % 64u;
    let lo = bits4(s0_u32(blk + 48u + 32u * c + l % 32u), select(0u, 4u, l >= 32u), 15u);
    let hi = bits4(s0_u32(blk + 16u + l % 32u), 2u * c + l / 32u, 1u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u)));
}

// Each 128 values take 64 bytes of nibbles and 32 of high bits.
fn quants_q6_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row + (k / 256u) * 210u;
    let i = k % 256u;
    let c = i / 128u;
    let quarter = (i % 128u) / 32u;
    let l = i % 32u;
    let lo = bits4(s0_u32(blk + 64u * c + l + 32u * (quarter & 1u)), 4u * (quarter / 2u), 15u);
    let hi = bits4(s0_u32(blk + 128u + 32u * c + l), 2u * quarter, 3u);
    return vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u))) - 32);
}

// The 16 levels of IQ4_NL and IQ4_XS (ggml's `kvalues_iq4nl`) as signed bytes, four per word
// (level i in byte i % 4 of word i / 4).
const IQ4_LEVELS = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);

// The levels of the four indices `q`.
fn iq4_levels(q: vec4<u32>) -> vec4<f32> {
    var v: vec4<f32>;
    for (var j = 0u; j < 4u; j++) {
        v[j] = f32(as_i8(byte_of(IQ4_LEVELS[q[j] / 4u], q[j])));
    }
    return v;
}

// IQ4_NL (blocks of 18 bytes, indices after d) and IQ4_XS (136 bytes, indices after 8 bytes of
// header): each 32 values take 16 bytes, value j in the low nibble of byte j, j + 16 in the high.
fn quants_iq4(row: u32, k: u32, xs: bool) -> vec4<f32> {
    var at: u32;
    if xs {
        at = row + (k / 256u) * 136u + 8u + ((k % 256u) / 32u) * 16u;
    } else {
        at = row + (k / 32u) * 18u + 2u;
    }
    let w = k % 32u;
    return iq4_levels(bits4(s0_u32(at + w % 16u), select(0u, 4u, w >= 16u), 15u));
}

// The quants of values k .. k + 3 of type `t`.
fn quants4(row: u32, k: u32, t: u32) -> vec4<f32> {
    switch t {
        case 2u: { return quants_q4_0(row, k); }
        case 6u: { return quants_q4_1(row, k); }
        case 7u: { return quants_q5(row, k, false); }
        case 8u: { return quants_q5(row, k, true); }
        case 3u: { return quants_q8_0(row, k); }
        case 9u: { return quants_q2_k(row, k); }
        case 10u: { return quants_q3_k(row, k); }
        case 11u: { return quants_q4_k(row, k); }
        case 12u: { return quants_q5_k(row, k); }
        case 14u: { return quants_iq4(row, k, false); }
        case 15u: { return quants_iq4(row, k, true); }
        default: { return quants_q6_k(row, k); }
    }
}

// Whether `t` is a block type (decoded by `group_scale` and `quants4`).
fn is_blocks(t: u32) -> bool {
    return t == 2u || t == 3u || t >= 6u;
}

// Values k .. k + 3 of the row of `src0` that starts at byte `row`, of type `t`. For F32, F16
// and BF16 the values are `nb0` bytes apart and those at or past `K` are 0; for block types
// k is a multiple of 4 (the four values lie in one group) and below K.
fn dequant4(row: u32, k: u32, t: u32, nb0: u32, K: u32) -> vec4<f32> {
    if is_blocks(t) {
        let s = group_scale(row, k, t);
        return exact4(quants4(row, k, t) * s.x) - s.y;
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if k + j < K {
            let b = row + (k + j) * nb0;
            let w = src0[b >> 2u];
            if t == 1u {
                v[j] = f16_of(w, b);
            } else if t == 5u {
                v[j] = bitcast<f32>(((w >> ((b & 2u) * 8u)) & 0xffffu) << 16u);
            } else {
                v[j] = bitcast<f32>(w);
            }
        }
    }
    return v;
}
