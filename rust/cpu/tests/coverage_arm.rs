//! The aarch64 kernels for Q4_1, Q5_0, Q5_1, Q5_K (NEON and dotprod) and BF16 (NEON) against
//! the exact product on odd shapes within what rounding explains ([`common::rounding_bound`]),
//! on every ARM tier the CPU supports, the scalar tier alongside; their
//! registration; and the NEON activation quantizers (Q8_0, Q8_1, Q8_K) bit-exact against
//! `tessera_core`'s reference on edge cases (zero blocks, exact ties, +/- max ties).
//!
//! Run under qemu with `scripts/qemu-test.sh --test coverage_arm` (cortex-a53: NEON,
//! cortex-a76: dotprod, max: i8mm, which uses the dotprod kernels for these types).
#![cfg(target_arch = "aarch64")]

mod common;

use common::{exact_product, f32_bytes, normwise_error, rand_vec, rounding_bound};
use tessera_core::quant::{dequantize_to_vec, quantize_to_vec};
use tessera_core::{DType, Layout};
use tessera_cpu::kernels::{self, MatKernel, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};

/// The weight types this file covers, with the ARM tiers that have their own kernel.
const COVERED: [(DType, &[Tier]); 5] = [
    (DType::Q4_1, &[Tier::Neon, Tier::Dotprod]),
    (DType::Q5_0, &[Tier::Neon, Tier::Dotprod]),
    (DType::Q5_1, &[Tier::Neon, Tier::Dotprod]),
    (DType::Q5_K, &[Tier::Neon, Tier::Dotprod]),
    (DType::BF16, &[Tier::Neon]),
];

const ARM_TIERS: [Tier; 3] = [Tier::Neon, Tier::Dotprod, Tier::I8mm];

/// The highest tier at or below `tier` with its own kernel for `dtype` (what the kernel lookup
/// must pick).
fn expected_tier(tier: Tier, dtype: DType) -> Tier {
    let own = COVERED.iter().find(|(t, _)| *t == dtype).map(|(_, tiers)| *tiers).unwrap_or(&[]);
    own.iter().copied().filter(|&t| t <= tier).max().unwrap_or(Tier::Scalar)
}

/// Runs `kernel` on weights `a` (`m` rows of `k`) and F32 activations `x` (`n` rows of `k`).
fn run(kernel: &MatKernel, a: &[u8], x: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
    let al = Layout::contiguous(kernel.weight, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let b = f32_bytes(x);
    let mut d = vec![f32::NAN; m * n];
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
                &|| false,
            )
            .unwrap();
    }
    d
}

/// `dtype` at `m x n x k` on every supported ARM tier: the kernel that runs is the tier's own,
/// within the rounding bound of the exact product of the dequantized weights and the
/// activations as quantized to the activation format (as is the scalar tier). Returns the tier
/// that ran and its error as a fraction of its bound, per supported tier.
fn check_shape(dtype: DType, m: usize, n: usize, k: usize) -> Vec<(Tier, f64)> {
    let seed = (m * 31 + n * 7 + k) as u64;
    let w = rand_vec(m * k, seed);
    let a = quantize_to_vec(dtype, &w).unwrap();
    let wdeq = dequantize_to_vec(dtype, &a, m * k).unwrap();
    let x = rand_vec(n * k, 777 + seed);
    let act = kernels::act_type(dtype);
    let xq = dequantize_to_vec(act, &quantize_to_vec(act, &x).unwrap(), n * k).unwrap();
    let exact = exact_product(&wdeq, &xq, k, m, n);
    let within = |kern: &MatKernel, got: &[f32]| {
        let (e, bound) = (normwise_error(got, &exact), rounding_bound(kern, n, k));
        assert!(e <= bound, "{} {dtype} {m}x{n}x{k}: error {e:.3e} > {bound:.3e}", kern.tier);
        e / bound
    };
    let scalar = kernels::matmul_kernel_in(Tier::Scalar, dtype).unwrap();
    within(&scalar, &run(&scalar, &a, &x, k, m, n));
    let mut errors = Vec::new();
    for tier in ARM_TIERS.into_iter().filter(|t| t.is_supported()) {
        let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
        assert_eq!(kern.tier, expected_tier(tier, dtype), "{dtype} kernel under {tier}");
        let before = kernels::tier_use_count(kern.tier);
        let got = run(&kern, &a, &x, k, m, n);
        assert!(kernels::tier_use_count(kern.tier) > before, "{} kernel did not run", kern.tier);
        assert!(got.iter().all(|v| v.is_finite()), "{tier} {dtype} {m}x{n}x{k}: {got:?}");
        errors.push((kern.tier, within(&kern, &got)));
    }
    errors
}

/// Every shape for `dtype` (M, N in 1, 3, 17; K in `ks`); prints the worst NMSE per tier.
fn check_type(dtype: DType, ks: &[usize]) {
    assert!(Tier::Neon.is_supported(), "every aarch64 CPU has NEON");
    let mut worst: Vec<(Tier, f64)> = Vec::new();
    for &k in ks {
        for m in [1, 3, 17] {
            for n in [1, 3, 17] {
                for (tier, e) in check_shape(dtype, m, n, k) {
                    match worst.iter_mut().find(|w| w.0 == tier) {
                        Some(w) => w.1 = w.1.max(e),
                        None => worst.push((tier, e)),
                    }
                }
            }
        }
    }
    for (tier, e) in worst {
        eprintln!("{dtype} {tier}: largest error {e:.3} of the rounding bound");
    }
}

#[test]
fn q4_1_matches_exact_on_odd_shapes() {
    check_type(DType::Q4_1, &[32, 96, 512]);
}

#[test]
fn q5_0_matches_exact_on_odd_shapes() {
    check_type(DType::Q5_0, &[32, 96, 512]);
}

#[test]
fn q5_1_matches_exact_on_odd_shapes() {
    check_type(DType::Q5_1, &[32, 96, 512]);
}

#[test]
fn q5_k_matches_exact_on_odd_shapes() {
    check_type(DType::Q5_K, &[256, 768]);
}

#[test]
fn bf16_matches_exact_on_odd_shapes() {
    // Odd lengths exercise the scalar tail of the 4-wide loop.
    check_type(DType::BF16, &[1, 7, 33, 100, 512]);
}

/// Weights whose blocks sit entirely above zero (all fifth bits set, large minimums) or below
/// it (none set), so the high-bit and minimum paths are exercised at their extremes.
#[test]
fn one_sided_weights_match_exact() {
    let (m, n, k) = (5, 3, 512);
    for dtype in [DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q5_K] {
        for shift in [3.0f32, -3.0] {
            let w: Vec<f32> = rand_vec(m * k, 5).iter().map(|v| v + shift).collect();
            let a = quantize_to_vec(dtype, &w).unwrap();
            let wdeq = dequantize_to_vec(dtype, &a, m * k).unwrap();
            let x = rand_vec(n * k, 6);
            let act = kernels::act_type(dtype);
            let xq = dequantize_to_vec(act, &quantize_to_vec(act, &x).unwrap(), n * k).unwrap();
            let exact = exact_product(&wdeq, &xq, k, m, n);
            for tier in ARM_TIERS.into_iter().filter(|t| t.is_supported()) {
                let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
                let got = run(&kern, &a, &x, k, m, n);
                let (e, bound) = (normwise_error(&got, &exact), rounding_bound(&kern, n, k));
                assert!(
                    e <= bound,
                    "{} {dtype} shift {shift}: error {e:.3e} > {bound:.3e}",
                    kern.tier
                );
            }
        }
    }
}

#[test]
fn kernels_are_registered_and_reported() {
    for (dtype, tiers) in COVERED {
        for tier in ARM_TIERS {
            assert_eq!(
                kernels::has_matmul_kernel(tier, dtype),
                tiers.contains(&tier),
                "{tier} kernel for {dtype}"
            );
        }
    }
    let active = kernels::active_tier();
    let reported = kernels::tiers_by_type();
    for (dtype, _) in COVERED {
        let want = expected_tier(active, dtype).name();
        let got = reported.iter().find(|(t, _)| *t == dtype.name()).map(|(_, tier)| *tier);
        assert_eq!(got, Some(want), "tiers_by_type for {dtype} under {active}");
        assert_ne!(want, "scalar");
    }
}

/// The NEON quantizers equal the reference byte for byte, on random rows and on edge cases.
#[test]
fn neon_activation_quantizers_are_bit_exact() {
    let mut rows: Vec<Vec<f32>> = (0..4).map(|s| rand_vec(1024, 40 + s)).collect();
    // Zero blocks, ties at .5 after scaling, +max and -max in one block (either first),
    // large and tiny magnitudes, negative zeros.
    let mut edge = rand_vec(1024, 9);
    edge[..32].fill(0.0);
    for (i, v) in edge[32..64].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) * 0.5;
    }
    edge[256..512].fill(-0.0);
    edge[512 + 3] = -2.0;
    edge[512 + 200] = 2.0;
    edge[768 + 10] = 2.0;
    edge[768 + 100] = -2.0;
    rows.push(edge);
    rows.push(rand_vec(512, 11).iter().map(|v| v * 1e4).collect());
    rows.push(rand_vec(512, 12).iter().map(|v| v * 1e-6).collect());
    // Half-integer ramps with a max of -127 (Q8_K scale 1): every Q8_K quant an exact tie.
    let mut ramp: Vec<f32> = (0..512).map(|i| ((i % 256) as f32 - 128.0) * 0.5).collect();
    ramp[0] = -127.0;
    ramp[256] = -127.0;
    rows.push(ramp);
    for (r, x) in rows.iter().enumerate() {
        for act in [DType::Q8_0, DType::Q8_1, DType::Q8_K] {
            let want = quantize_to_vec(act, x).unwrap();
            let mut got = vec![0xa5u8; want.len()];
            kernels::quantize_act(Tier::Neon, act, x, &mut got).unwrap();
            assert_eq!(got, want, "row {r} {act}");
        }
    }
}
