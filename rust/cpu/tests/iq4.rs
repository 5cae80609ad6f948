//! IQ4_NL and IQ4_XS weights on every CPU kernel this machine runs: each tier's own kernel on
//! plain rows and IQ4_NL in every repacked layout of a supported tier, against the exact product
//! (f64 over the dequantized blocks and the activations as the kernels quantize them) within
//! what the kernel's rounding explains ([`common::rounding_bound`]); and the same bound broken
//! by one wrong block scale (IQ4_NL's `d` a few units in the last place off, one IQ4_XS group
//! scale off by one), so that the bound is tight enough to catch a kernel that misreads one.
//!
//! Blocks are random bytes with random finite scales (every index, every 6-bit group scale),
//! besides quantized rows. Under emulation (aarch64 on qemu) `TESSERA_TEST_SMALL=1` shrinks the
//! shapes.

mod common;

use common::{exact_product, normwise_error, rand_vec, rounding_bound, Rng};
use half::f16;
use tessera_core::quant::{dequantize_to_vec, quantize_to_vec};
use tessera_core::{DType, Layout};
use tessera_cpu::kernels::repack::{self, PackLayout, PackedWeights};
use tessera_cpu::kernels::{self, MatKernel, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};

const TYPES: [DType; 2] = [DType::IQ4_NL, DType::IQ4_XS];

fn small() -> bool {
    std::env::var("TESSERA_TEST_SMALL").is_ok_and(|v| !v.is_empty() && v != "0")
        || cfg!(target_arch = "aarch64") && std::env::var("TESSERA_EXPECT_CPU").is_ok()
}

/// The SIMD tiers of this architecture (each must have its own IQ4 kernels).
fn simd_tiers() -> Vec<Tier> {
    if cfg!(target_arch = "x86_64") {
        vec![Tier::Avx2, Tier::Avx512Vnni]
    } else if cfg!(target_arch = "aarch64") {
        vec![Tier::Neon, Tier::Dotprod, Tier::I8mm]
    } else {
        Vec::new()
    }
}

/// `m` rows of `k` values of `dtype` as random blocks: random index bytes and group scales,
/// `d` a random f16 of magnitude 0.002 .. 0.05 and either sign.
fn random_blocks(dtype: DType, k: usize, m: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out: Vec<u8> =
        (0..dtype.row_size(k).unwrap() * m).map(|_| rng.below(256) as u8).collect();
    for b in out.chunks_exact_mut(dtype.type_size()) {
        let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
        let d = f16::from_f32(sign * rng.uniform(0.002, 0.05));
        b[..2].copy_from_slice(&d.to_le_bytes());
    }
    out
}

/// The weights of one case: random blocks, or quantized values (uniform in `[lo, hi)`).
fn weights(dtype: DType, k: usize, m: usize, seed: u64, values: Option<(f32, f32)>) -> Vec<u8> {
    match values {
        None => random_blocks(dtype, k, m, seed),
        Some((lo, hi)) => {
            let x: Vec<f32> =
                rand_vec(k * m, seed).iter().map(|v| lo + (hi - lo) * (v + 1.0) / 2.0).collect();
            quantize_to_vec(dtype, &x).unwrap()
        }
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
}

/// `mul_mat(a, x)` through the driver: with `kernel` on plain rows, or with the kernel of the
/// layout that repacked weights record.
fn matmul(kernel: Option<&MatKernel>, wa: TensorRef, x: &[f32], n: usize) -> Vec<f32> {
    let (k, m) = (wa.layout.ne[0], wa.layout.ne[1]);
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let mut d = vec![f32::NAN; m * n];
    let p = pool(2);
    let (dst, wb) = ((dl, d.as_mut_ptr().cast::<u8>()), TensorRef::plain(bl, x.as_ptr().cast()));
    // SAFETY: `wa` holds its layout's bytes (the callers' weights), `x` holds `bl`'s, dst is
    // separate.
    unsafe {
        match kernel {
            Some(kern) => MatMul::new().run_with(kern, &p, 2, dst, wa, wb, &|| false),
            None => MatMul::new().run(&p, 2, dst, wa, wb, &|| false),
        }
    }
    .unwrap();
    d
}

/// Every kernel that reads `dtype` on this machine, run on the weight bytes `a` (`[k, m]`) and
/// the activations `x` (`[k, n]`): each supported tier's on plain rows, then (IQ4_NL, rows a
/// multiple of the group) each supported tier's repacked layout. Returns (name, kernel,
/// result).
fn every_kernel(
    dtype: DType,
    a: &[u8],
    m: usize,
    n: usize,
    x: &[f32],
) -> Vec<(String, MatKernel, Vec<f32>)> {
    let k = x.len() / n;
    let al = Layout::contiguous(dtype, &[k, m]).unwrap();
    let mut out = Vec::new();
    for tier in Tier::ALL.into_iter().filter(|t| t.is_supported()) {
        let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
        let got = matmul(Some(&kern), TensorRef::plain(al, a.as_ptr()), x, n);
        out.push((format!("{tier} plain"), kern, got));
        let Some(pl) = PackLayout::for_tier(tier) else { continue };
        let Some(kern) = repack::kernel_for(pl, dtype) else { continue };
        if !repack::can_repack_as(pl, &al) {
            continue;
        }
        let packed = PackedWeights::new_as(pl, &al, a).unwrap();
        let got = matmul(None, packed.weights(al), x, n);
        out.push((format!("{tier} repacked {pl:?}"), kern, got));
    }
    out
}

/// The shapes (m, n, k) of the checks: tiles with edges, GEMV and GEMM, several row groups.
fn shapes(dtype: DType) -> Vec<(usize, usize, usize)> {
    let ks: &[usize] = match (dtype.block_size(), small()) {
        (256, false) => &[256, 768, 2048],
        (256, true) => &[256, 512],
        (_, false) => &[32, 96, 288, 2048],
        (_, true) => &[32, 96, 288],
    };
    let mut v = Vec::new();
    for &k in ks {
        for (m, n) in [(48, 1), (17, 1), (48, 3), (48, 4), (16, 8), (17, 9), (48, 17)] {
            v.push((m, n, k));
        }
    }
    v
}

#[test]
fn every_simd_tier_has_its_own_iq4_kernels() {
    let tiers = simd_tiers();
    assert!(!tiers.is_empty());
    for tier in tiers {
        for dtype in TYPES {
            assert!(kernels::has_matmul_kernel(tier, dtype), "{tier} has no {dtype} kernel");
        }
        if tier.is_supported() {
            let pl = PackLayout::for_tier(tier);
            let kern = pl.and_then(|pl| repack::kernel_for(pl, DType::IQ4_NL));
            assert_eq!(kern.is_some(), pl.is_some(), "{tier}: IQ4_NL repacked in its layout");
        }
    }
}

#[test]
fn every_kernel_matches_exact() {
    for dtype in TYPES {
        let mut worst = 0f64;
        for (case, (m, n, k)) in shapes(dtype).into_iter().enumerate() {
            let seed = (m * 131 + n * 17 + k) as u64;
            // Random blocks, and quantized rows of offset or centred values.
            let values = [None, Some((0.5, 1.5)), Some((-1.0, 1.0))][case % 3];
            let a = weights(dtype, k, m, seed, values);
            let wdeq = dequantize_to_vec(dtype, &a, k * m).unwrap();
            let x = rand_vec(k * n, seed + 1);
            let act = kernels::act_type(dtype);
            let xq = dequantize_to_vec(act, &quantize_to_vec(act, &x).unwrap(), k * n).unwrap();
            let exact = exact_product(&wdeq, &xq, k, m, n);
            for (what, kern, got) in every_kernel(dtype, &a, m, n, &x) {
                let (e, bound) = (normwise_error(&got, &exact), rounding_bound(&kern, n, k));
                assert!(e <= bound, "{what} {dtype} {m}x{n}x{k}: error {e:.3e} > {bound:.3e}");
                worst = worst.max(e / bound);
            }
        }
        eprintln!("{dtype}: largest error {worst:.3} of the rounding bound");
    }
}

/// One wrong block scale in the weights a kernel reads (the exact product keeps the right
/// one) takes every kernel past its bound: IQ4_NL's `d` of one block off by 4 units in the
/// last place of its f16 (0.2-0.4 %), one IQ4_XS group scale off by one.
#[test]
fn one_wrong_block_scale_breaks_the_bound() {
    for dtype in TYPES {
        let (m, n, k) = (48, 8, 4 * dtype.block_size().max(64));
        let a = weights(dtype, k, m, 77, None);
        let wdeq = dequantize_to_vec(dtype, &a, k * m).unwrap();
        let x = rand_vec(k * n, 78);
        let act = kernels::act_type(dtype);
        let xq = dequantize_to_vec(act, &quantize_to_vec(act, &x).unwrap(), k * n).unwrap();
        let exact = exact_product(&wdeq, &xq, k, m, n);
        // Row 21's block 1.
        let at = 21 * dtype.row_size(k).unwrap() + dtype.type_size();
        let mut bad = a.clone();
        if dtype == DType::IQ4_NL {
            let d = u16::from_le_bytes([bad[at], bad[at + 1]]) + 4;
            bad[at..at + 2].copy_from_slice(&d.to_le_bytes());
        } else {
            // Group 3's low nibble (byte 4 + 3 / 2, high half), wrapping within the nibble.
            let b = bad[at + 5];
            bad[at + 5] = (b & 0x0f) | (((b >> 4) ^ 1) << 4);
        }
        let runs = every_kernel(dtype, &bad, m, n, &x);
        assert!(runs.len() >= 2, "{dtype}: the scalar tier and at least one other");
        for (what, kern, got) in runs {
            let (e, bound) = (normwise_error(&got, &exact), rounding_bound(&kern, n, k));
            assert!(
                e > 4.0 * bound,
                "{what} {dtype}: a wrong scale gives {e:.3e}, bound {bound:.3e}"
            );
        }
    }
}
