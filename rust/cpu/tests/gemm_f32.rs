//! The packed GEMM path of the driver (F32 / F16 / BF16 weights, N >= `GEMM_MIN_N`, x86 tiers)
//! against the exact product within what rounding explains ([`common::rounding_bound`]), with
//! the scalar tier alongside, on odd shapes; threaded equal to single-threaded; broadcast,
//! strided and F16 activations.

mod common;

use common::{exact_product, f32_bytes, never, normwise_error, rand_vec, rounding_bound, Exact};
use tessera_core::quant::{dequantize_to_vec, quantize_to_vec};
use tessera_core::{DType, Layout};
use tessera_cpu::kernels::{self, MatKernel, Tier};
use tessera_cpu::matmul::{gemm_min_n, uses_gemm, MatMul, TensorRef, GEMM_MIN_N};

/// Asserts that `got` (from `kern` on `n` activation rows of `k`) is within the rounding bound
/// of `exact`.
fn assert_within(what: &str, kern: &MatKernel, n: usize, k: usize, got: &[f32], exact: &Exact) {
    let e = normwise_error(got, exact);
    let bound = rounding_bound(kern, n, k);
    assert!(e <= bound, "{what} ({}): error {e:.3e} > rounding bound {bound:.3e}", kern.tier);
}

/// The x86 tiers with a packed GEMM that this CPU supports.
fn gemm_tiers() -> Vec<Tier> {
    [Tier::Avx2, Tier::Avx512Vnni].into_iter().filter(|t| t.is_supported()).collect()
}

/// Runs the driver with `kernel`, weights `a` of layout `al`, activations `b` of layout `bl`.
fn run(kernel: &MatKernel, threads: usize, a: &[u8], al: Layout, b: &[u8], bl: Layout) -> Vec<f32> {
    let dl = Layout::contiguous(DType::F32, &[al.ne[1], bl.ne[1], bl.ne[2], bl.ne[3]]).unwrap();
    let mut d = vec![f32::NAN; dl.nelements()];
    let pool = tessera_cpu::team::Crew::new(threads).unwrap();
    // SAFETY: every buffer holds its layout's bytes and dst is separate.
    unsafe {
        MatMul::new()
            .run_with(
                kernel,
                &pool,
                threads,
                (dl, d.as_mut_ptr().cast()),
                TensorRef::plain(al, a.as_ptr()),
                TensorRef::plain(bl, b.as_ptr()),
                &never,
            )
            .unwrap();
    }
    d
}

fn check(m: usize, n: usize, k: usize) {
    check_type(DType::F32, m, n, k);
}

/// Weights of `dtype` (F32, F16 or BF16), `m` rows of `k`, against the f64 product of the
/// dequantized weights and against the scalar tier.
fn check_type(dtype: DType, m: usize, n: usize, k: usize) {
    if gemm_tiers().is_empty() {
        return; // Nothing to compare (e.g. aarch64 under emulation): spare the big products.
    }
    let w0 = rand_vec(k * m, (m * 31 + n * 7 + k) as u64);
    let a = quantize_to_vec(dtype, &w0).unwrap();
    let w = dequantize_to_vec(dtype, &a, k * m).unwrap();
    let x = rand_vec(k * n, 1000 + n as u64);
    let b = f32_bytes(&x);
    let al = Layout::contiguous(dtype, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let exact = exact_product(&w, &x, k, m, n);
    let scalar = kernels::matmul_kernel_in(Tier::Scalar, dtype).unwrap();
    assert!(!uses_gemm(&scalar, n, k));
    let base = run(&scalar, 1, &a, al, &b, bl);
    assert_within(&format!("scalar {dtype} {m}x{n}x{k}"), &scalar, n, k, &base, &exact);
    for tier in gemm_tiers() {
        let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
        assert_eq!(kern.tier, tier);
        assert_eq!(uses_gemm(&kern, n, k), n >= gemm_min_n(dtype), "{tier} {dtype} n {n}");
        let got = run(&kern, 1, &a, al, &b, bl);
        assert_within(&format!("{tier} {dtype} {m}x{n}x{k}"), &kern, n, k, &got, &exact);
    }
}

#[test]
fn gemm_matches_exact_and_scalar_on_odd_shapes() {
    // The packed GEMM is opt-in (it gives up batch-invariant columns): on for these tests.
    tessera_cpu::matmul::set_float_gemm(true);
    for k in [1, 7, 300, 4096] {
        for m in [1, 3, 17, 33, 130] {
            for n in [1, 3, 17, 33, GEMM_MIN_N, 77, 130] {
                check(m, n, k);
            }
        }
    }
}

#[test]
fn bf16_and_f16_weights_use_the_gemm() {
    // The packed GEMM is opt-in (it gives up batch-invariant columns): on for these tests.
    tessera_cpu::matmul::set_float_gemm(true);
    for dtype in [DType::BF16, DType::F16] {
        for k in [1, 7, 300] {
            for m in [3, 33, 130] {
                for n in [17, gemm_min_n(dtype), GEMM_MIN_N, 130] {
                    check_type(dtype, m, n, k);
                }
            }
        }
        check_type(dtype, 70, 77, 4096);
    }
}

#[test]
fn gemm_with_several_row_and_column_chunks() {
    // The packed GEMM is opt-in (it gives up batch-invariant columns): on for these tests.
    tessera_cpu::matmul::set_float_gemm(true);
    // More rows than one chunk takes, more columns than one chunk spans, K-blocks with a tail.
    check(1100, 40, 520);
    check(70, 300, 300);
    check(47, 613, 33);
}

#[test]
fn gemm_threaded_equals_single_thread() {
    // The packed GEMM is opt-in (it gives up batch-invariant columns): on for these tests.
    tessera_cpu::matmul::set_float_gemm(true);
    let (m, n, k) = (259, 70, 2048);
    let w = f32_bytes(&rand_vec(k * m, 7));
    let x = f32_bytes(&rand_vec(k * n, 8));
    let al = Layout::contiguous(DType::F32, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    for tier in gemm_tiers() {
        let kern = kernels::matmul_kernel_in(tier, DType::F32).unwrap();
        assert!(uses_gemm(&kern, n, k));
        let one = run(&kern, 1, &w, al, &x, bl);
        assert!(one.iter().all(|v| v.is_finite()));
        for threads in [2, 3, 4] {
            let many = run(&kern, threads, &w, al, &x, bl);
            assert_eq!(one, many, "{tier} with {threads} threads");
        }
    }
}

#[test]
fn gemm_broadcast_strided_and_f16_activations() {
    // The packed GEMM is opt-in (it gives up batch-invariant columns): on for these tests.
    tessera_cpu::matmul::set_float_gemm(true);
    let (m, n, k) = (37, 70, 96);
    // A: [k, m, 2, 1]; B: [k, n, 4, 3] (dims 2 and 3 broadcast over A's).
    let w = rand_vec(k * m * 2, 99);
    let a = f32_bytes(&w);
    let al = Layout::contiguous(DType::F32, &[k, m, 2, 1]).unwrap();
    let x = rand_vec(k * n * 12, 5);
    let bl = Layout::contiguous(DType::F32, &[k, n, 4, 3]).unwrap();
    let b = f32_bytes(&x);
    // Transposed activations: stored as [n][k] columns, viewed as ne = [k, n] with
    // nb = [4 * n, 4].
    let xt = rand_vec(k * n, 6);
    let mut bt = vec![0f32; k * n];
    for j in 0..n {
        for t in 0..k {
            bt[t * n + j] = xt[j * k + t];
        }
    }
    let mut btl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    btl.nb = [4 * n, 4, 4 * n * k, 4 * n * k];
    let al1 = Layout::contiguous(DType::F32, &[k, m]).unwrap();
    let want_t = exact_product(&w[..m * k], &xt, k, m, n);
    // F16 activations (converted to f32 exactly).
    let h = quantize_to_vec(DType::F16, &xt).unwrap();
    let hl = Layout::contiguous(DType::F16, &[k, n]).unwrap();
    let xh = dequantize_to_vec(DType::F16, &h, k * n).unwrap();
    let want_h = exact_product(&w[..m * k], &xh, k, m, n);
    for tier in gemm_tiers() {
        let kern = kernels::matmul_kernel_in(tier, DType::F32).unwrap();
        assert!(uses_gemm(&kern, n, k));
        let got = run(&kern, 2, &a, al, &b, bl);
        for p in 0..12 {
            let wplane = &w[(p % 4 / 2) * m * k..][..m * k];
            let want = exact_product(wplane, &x[p * n * k..][..n * k], k, m, n);
            let what = format!("{tier} plane {p}");
            assert_within(&what, &kern, n, k, &got[p * m * n..][..m * n], &want);
        }
        let got = run(&kern, 2, &a[..m * k * 4], al1, &f32_bytes(&bt), btl);
        assert_within(&format!("{tier} transposed B"), &kern, n, k, &got, &want_t);
        let got = run(&kern, 2, &a[..m * k * 4], al1, &h, hl);
        assert_within(&format!("{tier} F16 B"), &kern, n, k, &got, &want_h);
    }
}
