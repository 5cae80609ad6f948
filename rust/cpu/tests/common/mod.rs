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
