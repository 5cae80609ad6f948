//! The same answer whatever the batch (issue 38): a column of MUL_MAT's result (one token's
//! activations times the weights) is bit for bit the same whether it is computed alone (the
//! GEMV), among a few columns (the register tiles and their edges), among many (the packed GEMM
//! of F32 / F16 / BF16 weights from N = 24 or 48), on 1 or 2 threads. Every weight type with a
//! kernel on every tier this CPU has, plain and repacked in the tier's layout.
//!
//! Under emulation (aarch64 on qemu) set `TESSERA_TEST_SMALL=1` to shrink the shapes.

mod common;

use common::rand_vec;
use tessera_core::quant::quantize_to_vec;
use tessera_core::{DType, Layout};
use tessera_cpu::kernels::repack::{PackLayout, PackedWeights};
use tessera_cpu::kernels::{self, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};
use tessera_cpu::team::Crew;

fn small() -> bool {
    std::env::var("TESSERA_TEST_SMALL").is_ok_and(|v| !v.is_empty() && v != "0")
        || cfg!(target_arch = "aarch64") && std::env::var("TESSERA_EXPECT_CPU").is_ok()
}

/// `mul_mat(a, x)` with `kernel` on `threads` threads, `x` F32 `[k, n]`.
fn matmul(
    kernel: &kernels::MatKernel,
    threads: usize,
    a: TensorRef,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let (k, m) = (a.layout.ne[0], a.layout.ne[1]);
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let mut d = vec![f32::NAN; m * n];
    let crew = Crew::new(threads).unwrap();
    let b = TensorRef::plain(bl, x.as_ptr().cast());
    // SAFETY: `a` holds its layout's bytes (the callers'), `x` holds `bl`'s, dst is separate.
    unsafe {
        MatMul::new().run_with(kernel, &crew, threads, (dl, d.as_mut_ptr().cast()), a, b, &|| false)
    }
    .unwrap();
    d
}

/// Runs every batch size against the columns computed one at a time; returns a failure.
fn check(
    what: &str,
    kernel: &kernels::MatKernel,
    a: TensorRef,
    x: &[f32],
    k: usize,
) -> Option<String> {
    let m = a.layout.ne[1];
    let n_max = x.len() / k;
    // Each column alone, on one thread: the reference bits.
    let alone: Vec<Vec<f32>> =
        (0..n_max).map(|j| matmul(kernel, 1, a, &x[j * k..(j + 1) * k], 1)).collect();
    for n in [1usize, 2, 5, 8, 17, 24, 48, n_max] {
        for threads in [1, 2] {
            let got = matmul(kernel, threads, a, &x[..n * k], n);
            for (j, want) in alone.iter().enumerate().take(n) {
                let col = &got[j * m..(j + 1) * m];
                if let Some(i) = (0..m).find(|&i| col[i].to_bits() != want[i].to_bits()) {
                    return Some(format!(
                        "{what}: N = {n}, {threads} thread(s), column {j}, row {i}: {} vs {} alone",
                        col[i], want[i]
                    ));
                }
            }
        }
    }
    None
}

#[test]
fn a_column_does_not_depend_on_the_batch_or_the_threads() {
    assert!(!tessera_cpu::matmul::float_gemm(), "the packed GEMM is off by default");
    let (m, n_max) = if small() { (32, 50) } else { (64, 67) };
    let mut failures = Vec::new();
    let mut checked = 0;
    for tier in Tier::ALL.into_iter().filter(|t| t.is_supported()) {
        for dtype in DType::ALL {
            let Ok(kernel) = kernels::matmul_kernel_in(tier, dtype) else { continue };
            let k = if dtype.block_size() == 256 { 2 * 256 } else { 9 * 32 };
            let w = rand_vec(k * m, 3);
            let plain = match dtype {
                DType::F32 => w.iter().flat_map(|v| v.to_le_bytes()).collect(),
                _ => quantize_to_vec(dtype, &w).unwrap(),
            };
            let al = Layout::contiguous(dtype, &[k, m]).unwrap();
            let x = rand_vec(k * n_max, 4);
            let what = format!("{tier:?} {dtype}");
            failures.extend(check(&what, &kernel, TensorRef::plain(al, plain.as_ptr()), &x, k));
            checked += 1;
            // Repacked in the tier's layout, where it has kernels for the type.
            let Some(pl) = PackLayout::for_tier(tier) else { continue };
            let Some(packed_kernel) = kernels::repack::kernel_for(pl, dtype) else { continue };
            let Some(packed) = PackedWeights::new_as(pl, &al, &plain) else { continue };
            let what = format!("{tier:?} {dtype} repacked {pl:?}");
            failures.extend(check(&what, &packed_kernel, packed.weights(al), &x, k));
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} kernels checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
