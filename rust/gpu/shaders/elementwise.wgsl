// Element-wise kernels: binary ops with ggml broadcasting (ADD, SUB, MUL, DIV) and the gated
// linear units (SWIGLU, GEGLU: act(src0) * src1, the host pointing both descriptors into the
// halves of one row for the one-operand form), unary ops and activations (SCALE, SQR, SQRT,
// CLAMP, SILU, GELU, RELU, TANH) and copies with conversion (CPY, CONT, DUP; I32 copied bit
// for bit). Operands and result are F32 or F16 with any strides; one invocation per result
// element. The result is written through atomics so that two invocations can write the two
// f16 halves of one word.

struct Params {
    a: Desc,
    b: Desc,
    d: Desc,
    op: u32,
    n: u32,
    p0: f32,
    p1: f32,
}

@group(0) @binding(0) var<storage, read_write> src0: array<u32>;
@group(0) @binding(1) var<storage, read_write> src1: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> p: Params;

const OP_ADD: u32 = 0u;
const OP_SUB: u32 = 1u;
const OP_MUL: u32 = 2u;
const OP_DIV: u32 = 3u;
const OP_SWIGLU: u32 = 4u;
const OP_GEGLU: u32 = 5u;

const OP_COPY: u32 = 0u;
const OP_SCALE: u32 = 1u;
const OP_SQR: u32 = 2u;
const OP_SQRT: u32 = 3u;
const OP_CLAMP: u32 = 4u;
const OP_SILU: u32 = 5u;
const OP_GELU: u32 = 6u;
const OP_RELU: u32 = 7u;
const OP_TANH: u32 = 8u;

fn load0(b: u32, t: u32) -> f32 {
    let w = src0[b >> 2u];
    if t == T_F16 {
        return f16_of(w, b);
    }
    return bitcast<f32>(w);
}

// The raw 32-bit word of an I32 element of src0.
fn load0_raw(b: u32) -> u32 {
    return src0[b >> 2u];
}

fn load1(b: u32, t: u32) -> f32 {
    let w = src1[b >> 2u];
    if t == T_F16 {
        return f16_of(w, b);
    }
    return bitcast<f32>(w);
}

fn store(b: u32, t: u32, v: f32) {
    let w = b >> 2u;
    if t == T_F16 {
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

fn unary_op(op: u32, x: f32) -> f32 {
    switch op {
        case 1u: { return x * p.p0 + p.p1; }
        case 2u: { return x * x; }
        case 3u: { return sqrt(x); }
        case 4u: { return clamp(x, p.p0, p.p1); }
        case 5u: { return x / (1.0 + exp(-x)); }
        case 6u: {
            // The tanh approximation, as ggml_gelu.
            let c = 0.7978845608028654;
            return 0.5 * x * (1.0 + tanh_safe(c * x * (1.0 + 0.044715 * x * x)));
        }
        case 7u: { return max(x, 0.0); }
        case 8u: { return tanh_safe(x); }
        case 9u: { return 1.0 / (1.0 + exp(-x)); }
        // ggml_softplus: x itself above 20.
        case 10u: { if (x > 20.0) { return x; } return log(1.0 + exp(x)); }
        default: { return x; }
    }
}

@compute @workgroup_size(256)
fn binary(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = flat_group(wid, nwg) * 256u + li;
    if i >= p.n {
        return;
    }
    let c = coords(i, p.d.ne);
    let x = load0(byte_at(p.a, c), p.a.dtype);
    let y = load1(byte_at(p.b, c % p.b.ne), p.b.dtype);
    var r: f32;
    switch p.op {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        case 3u: { r = x / y; }
        case 4u: { r = unary_op(OP_SILU, x) * y; }
        default: { r = unary_op(OP_GELU, x) * y; }
    }
    store(byte_at(p.d, c), p.d.dtype, r);
}

// Unary ops and copies: result element `i` (in the result's order) comes from source element
// `i` in the source's order, so that CPY between different shapes of equal size works as in
// ggml.
@compute @workgroup_size(256)
fn unary(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = flat_group(wid, nwg) * 256u + li;
    if i >= p.n {
        return;
    }
    let src_at = byte_at(p.a, coords(i, p.a.ne));
    let to = byte_at(p.d, coords(i, p.d.ne));
    if p.a.dtype == T_I32 {
        atomicStore(&dst[to >> 2u], load0_raw(src_at));
        return;
    }
    store(to, p.d.dtype, unary_op(p.op, load0(src_at, p.a.dtype)));
}
