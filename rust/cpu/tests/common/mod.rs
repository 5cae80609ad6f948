//! Helpers shared by the CPU op tests: a seeded generator, error measures, typed reads and
//! writes of tensors, and the logical values of strided views.
#![allow(dead_code)]

use half::f16;
use tessera_core::tensor_data::{get_tensor, set_tensor};
use tessera_core::{DType, Graph, TensorId};

/// Result type of the tests.
pub type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// xorshift64*: small, seeded, good enough for test data.
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `n` values in `[-1, 1)` from an xorshift sequence seeded by `seed` (the kernel tests' data).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The little-endian bytes of `x`.
pub fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// An abort poll that never stops.
pub fn never() -> bool {
    false
}

/// Normalized mean squared error `sum (a - b)^2 / sum b^2`.
pub fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length");
    let num: f64 = got.iter().zip(want).map(|(&a, &b)| (f64::from(a) - b).powi(2)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Asserts `nmse(got, want) <= tol`.
pub fn assert_nmse(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert!(got.iter().all(|x| x.is_finite()), "{what}: non-finite result {got:?}");
    let e = nmse(got, want);
    assert!(e <= tol, "{what}: nmse {e:e} > {tol:e}");
}

/// Asserts element-wise closeness to literal expectations.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length of {got:?} vs {want:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_infinite() || w.is_nan() {
            g == w || (g.is_nan() && w.is_nan())
        } else {
            (g - w).abs() <= tol * w.abs().max(1.0)
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w} (all: {got:?})");
    }
}

/// bfloat16 rounding (nearest even), written independently of the code under test.
pub fn bf16_round(x: f32) -> f32 {
    let u = x.to_bits();
    let rounded = (u as u64 + 0x7fff + ((u >> 16) & 1) as u64) as u32 & 0xffff_0000;
    f32::from_bits(rounded)
}

/// The bytes of `vals` as `dtype` (block types through `tessera_core::quant::quantize_row`,
/// row by row of `row_len` values).
pub fn to_bytes(dtype: DType, vals: &[f32], row_len: usize) -> Vec<u8> {
    match dtype {
        DType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => vals.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        DType::BF16 => vals
            .iter()
            .flat_map(|&v| ((bf16_round(v).to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        q => {
            let rb = q.row_size(row_len).unwrap();
            let mut out = vec![0u8; vals.len() / row_len * rb];
            for (src, dst) in vals.chunks_exact(row_len).zip(out.chunks_exact_mut(rb)) {
                tessera_core::quant::quantize_row(q, src, dst).unwrap();
            }
            out
        }
    }
}

/// Values from the bytes of `dtype` (block types dequantized row by row of `row_len`).
pub fn from_bytes(dtype: DType, bytes: &[u8], row_len: usize) -> Vec<f32> {
    match dtype {
        DType::F32 => {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
            .collect(),
        DType::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
            .collect(),
        q => {
            let rb = q.row_size(row_len).unwrap();
            let mut out = vec![0f32; bytes.len() / rb * row_len];
            for (src, dst) in bytes.chunks_exact(rb).zip(out.chunks_exact_mut(row_len)) {
                tessera_core::quant::dequantize_row(q, src, dst).unwrap();
            }
            out
        }
    }
}

/// Writes `vals` into the leaf `id` in its type; returns the values actually stored (rounded
/// or quantized and dequantized back).
pub fn set_vals(g: &Graph, id: TensorId, vals: &[f32]) -> Vec<f32> {
    let t = g.tensor(id);
    let (dtype, ne0) = (t.dtype(), t.ne()[0]);
    assert_eq!(vals.len(), t.nelements(), "set_vals length");
    let bytes = to_bytes(dtype, vals, ne0);
    set_tensor(g, id, &bytes).unwrap();
    from_bytes(dtype, &bytes, ne0)
}

/// Writes I32 values into the leaf `id`.
pub fn set_i32(g: &Graph, id: TensorId, vals: &[i32]) {
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    set_tensor(g, id, &bytes).unwrap();
}

/// Reads the contiguous tensor `id` of any type as f32 values.
pub fn get_vals(g: &Graph, id: TensorId) -> Vec<f32> {
    let t = g.tensor(id);
    assert!(t.layout.is_contiguous(), "get_vals needs a contiguous tensor");
    from_bytes(t.dtype(), &get_tensor(g, id).unwrap(), t.ne()[0])
}

/// Row-major (ne0 fastest) linear index.
pub fn lin(ne: [usize; 4], i: [usize; 4]) -> usize {
    i[0] + ne[0] * (i[1] + ne[1] * (i[2] + ne[2] * i[3]))
}

/// Every index of shape `ne` in row-major order.
pub fn indices(ne: [usize; 4]) -> impl Iterator<Item = [usize; 4]> {
    let n = ne.iter().product::<usize>();
    (0..n).map(move |k| {
        [k % ne[0], k / ne[0] % ne[1], k / (ne[0] * ne[1]) % ne[2], k / (ne[0] * ne[1] * ne[2])]
    })
}

/// The logical values (row-major) of `id`, a tensor or a view of a non-quantized leaf whose
/// stored values are `root_vals`, computed from the view's strides and offset alone.
pub fn logical(g: &Graph, id: TensorId, root_vals: &[f32]) -> Vec<f64> {
    let (root, offs) = g.view_root(id);
    let es = g.tensor(root).dtype().type_size();
    let l = g.tensor(id).layout;
    indices(l.ne)
        .map(|i| {
            let byte = offs + (0..4).map(|d| i[d] * l.nb[d]).sum::<usize>();
            assert_eq!(byte % es, 0);
            f64::from(root_vals[byte / es])
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What rounding explains in a matmul kernel
// ---------------------------------------------------------------------------------------------

/// The unit roundoff of f32 (`2^-24`): one f32 operation is off by at most this fraction.
pub const F32_UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0;

/// An exact matmul: the values in f64 and, per output, the magnitude `sum_t |w_t x_t|` that
/// its rounding errors scale with.
pub struct Exact {
    /// `value[j * m + i] = sum_t w[i * k + t] * x[j * k + t]`, exactly (products of two f32
    /// are exact in f64; the sums round at 2^-53, far below any kernel's error).
    pub value: Vec<f64>,
    /// `magnitude[j * m + i] = sum_t |w[i * k + t] * x[j * k + t]|`.
    pub magnitude: Vec<f64>,
}

/// The exact product of `m` weight rows `w` and `n` activation rows `x` of `k` values (as a
/// kernel sees them: weights dequantized, activations quantized to its format and back).
pub fn exact_product(w: &[f32], x: &[f32], k: usize, m: usize, n: usize) -> Exact {
    let mut value = vec![0f64; m * n];
    let mut magnitude = vec![0f64; m * n];
    for j in 0..n {
        for i in 0..m {
            let terms = (0..k).map(|t| f64::from(w[i * k + t]) * f64::from(x[j * k + t]));
            value[j * m + i] = terms.clone().sum();
            magnitude[j * m + i] = terms.map(f64::abs).sum();
        }
    }
    Exact { value, magnitude }
}

/// The largest error of one output, relative to its magnitude: `max |got - value| /
/// magnitude` (an output whose products are all zero must be exactly zero).
pub fn normwise_error(got: &[f32], exact: &Exact) -> f64 {
    assert_eq!(got.len(), exact.value.len(), "length");
    got.iter()
        .zip(exact.value.iter().zip(&exact.magnitude))
        .map(|(&g, (&v, &mag))| {
            let err = (f64::from(g) - v).abs();
            if mag == 0.0 {
                if err == 0.0 {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                err / mag
            }
        })
        .fold(0.0, f64::max)
}

/// The largest [`normwise_error`] that the arithmetic of `kernel` explains for `n` activation
/// rows of `k` values: `steps * spread * u`, with `u` the f32 unit roundoff, `steps` the
/// roundings on the longest chain from the exact products to one output (a sum whose every
/// term and partial sum is rounded at most `steps` times is off by at most about `steps * u`
/// of the sum of the terms' magnitudes), and `spread` how much larger than `sum |w x|` the
/// terms the kernel sums can be.
///
/// Per kernel (`nb` = blocks per row):
/// - the scalar tier dequantizes both rows (exactly: the values the exact product uses) and
///   sums f32 products in 8 lanes: `k / 8` products and additions per lane, the lanes added in
///   f64, one final rounding to f32;
/// - float weights (F32, F16 and BF16 convert to f32 exactly): FMA chains of `k / 8` (AVX) or
///   `k / 4` (NEON) per lane, up to 15 tail values, a horizontal sum of 3 levels; the packed
///   GEMM (x86, from 48 activation rows) accumulates each output over all `k` values, adding
///   each K-block of 512 into C;
/// - Q8_0, Q4_0, Q5_0, IQ4_NL: per block the integer dot is exact (at most 32 * 127 * 127 <
///   2^24, so exact in f32 too) and the scale product of two f16 is exact in f32: one FMA per
///   block on each lane's chain, then the horizontal sum;
/// - Q4_1, Q5_1: the same plus `m * d_b * sum(q_b)` (exact but for the product with `m`),
///   two roundings per block; the two parts `d * q * x` and `m * x` can each be larger than
///   `w * x`: `|d q| <= |w| + |m|` and `|m|` is the block minimum, so for the data of these
///   tests (values within a factor of 2 of the block's extreme) the parts stay within 3 times
///   `sum |w x|`;
/// - k-quants (Q8_K activations, f32 scale): per super-block the integer sums per 16 or 32
///   values are exact below 2^24 and at most one rounding in the conversion above it, the
///   products `d * d_b`, `d * sc` (repacked Q4_K) and the accumulations a handful of roundings:
///   at most 32 on top of one per super-block; Q2_K, Q4_K and Q5_K subtract `dmin * m` parts
///   (spread 3, as for Q4_1); IQ4_XS (exact integer sums per super-block, its group scales
///   included) as Q6_K.
pub fn rounding_bound(kernel: &tessera_cpu::kernels::MatKernel, n: usize, k: usize) -> f64 {
    use tessera_cpu::kernels::Tier;
    let (steps, spread) = if kernel.tier == Tier::Scalar {
        (k.div_ceil(8) + 2, 1.0)
    } else {
        match kernel.weight {
            DType::F32 | DType::F16 | DType::BF16 => {
                if tessera_cpu::matmul::uses_gemm(kernel, n, k) {
                    (k + k / 512 + 4, 1.0)
                } else {
                    (k / 4 + 24, 1.0)
                }
            }
            DType::Q8_0 | DType::Q4_0 | DType::Q5_0 | DType::IQ4_NL => (k / 32 + 16, 1.0),
            DType::Q4_1 | DType::Q5_1 => (2 * (k / 32) + 16, 3.0),
            DType::Q3_K | DType::Q6_K | DType::IQ4_XS => (k / 256 + 32, 1.0),
            DType::Q2_K | DType::Q4_K | DType::Q5_K => (k / 256 + 32, 3.0),
            other => panic!("no matmul kernel reads {other} weights"),
        }
    };
    steps as f64 * spread * F32_UNIT_ROUNDOFF
}
