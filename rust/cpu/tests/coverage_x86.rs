//! The x86 SIMD tiers' coverage of ggml's legacy Q4_1 / Q5_0 / Q5_1 weights (their own kernels,
//! each against the exact product on odd shapes within what rounding explains,
//! [`common::rounding_bound`], the scalar tier alongside) and the AVX2 Q8_K activation quantizer
//! (bit-exact with the reference on edge cases).
#![cfg(target_arch = "x86_64")]

mod common;

use common::{exact_product, normwise_error, rounding_bound};

use tessera_core::quant::{dequantize_to_vec, quantize_row, quantize_to_vec};
use tessera_core::{DType, Layout};
use tessera_cpu::kernels::{self, MatKernel, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};

const LEGACY: [DType; 3] = [DType::Q4_1, DType::Q5_0, DType::Q5_1];
const X86_TIERS: [Tier; 2] = [Tier::Avx2, Tier::Avx512Vnni];

/// Uniform values in `[lo, hi)` from a seeded xorshift.
fn rand_vec(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn supported_x86() -> Vec<Tier> {
    X86_TIERS.into_iter().filter(|t| t.is_supported()).collect()
}

fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn never() -> bool {
    false
}

/// `dst[m, n] = A[k, m] x B[k, n]` through the matmul driver with `kernel`, one thread.
fn run(kernel: &MatKernel, a: &[u8], al: Layout, b: &[u8], bl: Layout) -> Vec<f32> {
    let dl = Layout::contiguous(DType::F32, &[al.ne[1], bl.ne[1]]).unwrap();
    let mut d = vec![0f32; dl.nelements()];
    let pool = tessera_cpu::team::Crew::new(1).unwrap();
    // SAFETY: every buffer holds its layout's bytes and dst is separate.
    unsafe {
        MatMul::new()
            .run_with(
                kernel,
                &pool,
                1,
                (dl, d.as_mut_ptr().cast()),
                TensorRef::plain(al, a.as_ptr()),
                TensorRef::plain(bl, b.as_ptr()),
                &never,
            )
            .unwrap();
    }
    d
}

#[test]
fn every_x86_tier_has_legacy_kernels() {
    for tier in X86_TIERS {
        for dtype in LEGACY {
            assert!(kernels::has_matmul_kernel(tier, dtype), "{tier} has no {dtype} kernel");
        }
    }
    for tier in supported_x86() {
        for dtype in LEGACY {
            let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
            assert_eq!(kern.tier, tier, "{dtype} falls back from {tier}");
            assert_eq!(kern.act, kernels::act_type(dtype));
            assert!(kern.mr > 1 && kern.nr > 1, "{tier} {dtype}: a {}x{} tile", kern.mr, kern.nr);
        }
    }
    let active = kernels::active_tier();
    if active >= Tier::Avx2 {
        let by_type = kernels::tiers_by_type();
        for dtype in LEGACY {
            let (_, name) = by_type.iter().find(|(t, _)| *t == dtype.name()).unwrap();
            assert_eq!(*name, active.name(), "tiers_by_type for {dtype}");
        }
    }
}

/// One shape: weights `[k, m]` from values in `[wlo, whi)`, activations `[k, n]` from values in
/// `[xlo, xhi)`; the scalar tier and every x86 tier against the exact f64 product, within their
/// rounding bounds. Returns the largest error as a fraction of its bound.
fn check(
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    (wlo, whi): (f32, f32),
    (xlo, xhi): (f32, f32),
) -> f64 {
    let seed = (m * 131 + n * 17 + k) as u64;
    let w = rand_vec(k * m, seed, wlo, whi);
    let a = quantize_to_vec(dtype, &w).unwrap();
    let wdeq = dequantize_to_vec(dtype, &a, k * m).unwrap();
    let x = rand_vec(k * n, seed + 7, xlo, xhi);
    let act = kernels::act_type(dtype);
    // The exact product sees the activations as the kernels do (quantized).
    let xq = dequantize_to_vec(act, &quantize_to_vec(act, &x).unwrap(), k * n).unwrap();
    let exact = exact_product(&wdeq, &xq, k, m, n);
    let al = Layout::contiguous(dtype, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let b = f32_bytes(&x);
    let mut worst = 0f64;
    let mut kerns = vec![kernels::matmul_kernel_in(Tier::Scalar, dtype).unwrap()];
    for tier in supported_x86() {
        let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
        assert_eq!(kern.tier, tier);
        kerns.push(kern);
    }
    for kern in kerns {
        let got = run(&kern, &a, al, &b, bl);
        let (e, bound) = (normwise_error(&got, &exact), rounding_bound(&kern, n, k));
        assert!(e <= bound, "{} {dtype} {m}x{n}x{k}: error {e:.3e} > {bound:.3e}", kern.tier);
        worst = worst.max(e / bound);
    }
    worst
}

#[test]
fn legacy_kernels_match_exact_on_odd_shapes() {
    for dtype in LEGACY {
        let mut worst = 0f64;
        for k in [32, 96, 4096] {
            for m in [1, 3, 17] {
                for n in [1, 3, 17] {
                    worst = worst.max(check(dtype, m, n, k, (-1.0, 1.0), (-1.0, 1.0)));
                }
            }
        }
        eprintln!("{dtype}: largest error {worst:.3} of the rounding bound");
    }
}

#[test]
fn legacy_kernels_with_offset_data() {
    // Positive-mean weights and activations: the weight minimum `m` times the activation sums
    // carries most of the result (Q4_1 / Q5_1), and Q5_0's zero point meets large sums.
    for dtype in LEGACY {
        for (m, n, k) in [(17, 3, 96), (3, 17, 4096), (1, 1, 32), (17, 17, 288)] {
            check(dtype, m, n, k, (0.75, 1.0), (0.5, 1.5));
            check(dtype, m, n, k, (-2.0, -0.5), (-1.0, 0.25));
        }
    }
}

/// The AVX2 (and up) Q8_K quantizer against the reference, byte for byte.
fn q8_k_exact(x: &[f32], what: &str) {
    let mut want = vec![0u8; DType::Q8_K.row_size(x.len()).unwrap()];
    quantize_row(DType::Q8_K, x, &mut want).unwrap();
    for tier in supported_x86() {
        let mut got = vec![0xa5u8; want.len()];
        kernels::quantize_act(tier, DType::Q8_K, x, &mut got).unwrap();
        assert_eq!(got, want, "{tier} Q8_K {what}");
    }
}

#[test]
fn q8_k_quantizer_is_bit_exact_on_edge_cases() {
    let base = rand_vec(256, 11, -1.0, 1.0);
    q8_k_exact(&[0.0; 256], "zeros");
    q8_k_exact(&[-0.0; 256], "negative zeros");
    let mut one = vec![0f32; 256];
    one[200] = 3.5;
    q8_k_exact(&one, "one positive value");
    one[200] = -1e-3;
    q8_k_exact(&one, "one negative value");
    // max = -127: iscale = 1, so the values k + 0.5 are exact ties (to even).
    let ties: Vec<f32> =
        (0..256).map(|i| if i == 5 { -127.0 } else { (i % 254) as f32 - 126.5 }).collect();
    q8_k_exact(&ties, "ties, negative max");
    // Positive max: d < 0 (ggml's sign rule), ties at x.5 after scaling by -1.
    let pties: Vec<f32> = ties.iter().map(|v| -v).collect();
    q8_k_exact(&pties, "ties, positive max");
    // Equal magnitudes of both signs: the first one sets the sign of d.
    let mut both = base.clone();
    both[9] = 2.0;
    both[3] = -2.0;
    q8_k_exact(&both, "both signs of the max, negative first");
    both[3] = 2.0;
    both[9] = -2.0;
    q8_k_exact(&both, "both signs of the max, positive first");
    // The max in the last lane of the last chunk, and a -max that rounds to +127.
    let mut last = base.clone();
    last[255] = 1.5;
    last[0] = -1.5;
    q8_k_exact(&last, "max last");
    // Tiny (subnormal) and huge magnitudes, and infinities.
    let tiny: Vec<f32> = base.iter().map(|v| v * 1e-40).collect();
    q8_k_exact(&tiny, "subnormals");
    let huge: Vec<f32> = base.iter().map(|v| v * 3e37).collect();
    q8_k_exact(&huge, "huge values");
    let mut inf = base.clone();
    inf[77] = f32::NEG_INFINITY;
    q8_k_exact(&inf, "an infinity");
    // NaNs (the reference's order-dependent max, and NaN payloads as quants).
    for (pos, bits) in
        [(100, 0x7fc0_0000u32), (255, 0x7fc0_0005), (3, 0xffc0_0007), (40, 0x7fc1_2345)]
    {
        let mut nan = base.clone();
        nan[pos] = f32::from_bits(bits);
        q8_k_exact(&nan, &format!("NaN {bits:#x} at {pos}"));
    }
    let mut nan = base.clone();
    nan[7] = f32::NAN;
    nan[8] = f32::INFINITY;
    q8_k_exact(&nan, "NaN and infinity");
    // Several blocks with different scales, one of them all zero.
    let mut multi = rand_vec(1024, 12, -1.0, 1.0);
    multi[256..512].fill(0.0);
    for v in &mut multi[512..768] {
        *v *= 1000.0;
    }
    q8_k_exact(&multi, "four blocks");
    // All quants -127 (d > 0) or 127 (d < 0): the largest group sums.
    q8_k_exact(&[0.75; 512], "constant positive");
    q8_k_exact(&[-0.75; 512], "constant negative");
}
