//! Every kernel tier the running CPU supports against the exact product, for every weight type,
//! on odd and bigger shapes, within what the kernel's rounding explains
//! ([`common::rounding_bound`]); activation quantizers bit-exact; the threaded driver equal to
//! the single-threaded one; broadcasting and strided activations.
//!
//! Under emulation (aarch64 on qemu) set `TESSERA_TEST_SMALL=1` to shrink the big shapes.

mod common;

use common::{
    exact_product, f32_bytes, never, nmse, normwise_error, rand_vec, rounding_bound, Exact,
};
use tessera_core::quant::{dequantize_to_vec, quantize_to_vec};
use tessera_core::{DType, Error, Layout};
use tessera_cpu::kernels::{self, MatKernel, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};

const WEIGHT_TYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
];

/// Serializes the tests that depend on the active tier (none of these force one, but keep the
/// element-wise test away from any that might).
static TIER_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn small() -> bool {
    std::env::var("TESSERA_TEST_SMALL").is_ok_and(|v| !v.is_empty() && v != "0")
        || cfg!(target_arch = "aarch64") && std::env::var("TESSERA_EXPECT_CPU").is_ok()
}

fn supported_tiers() -> Vec<Tier> {
    Tier::ALL.into_iter().filter(|t| t.is_supported()).collect()
}

/// A weight matrix of `dtype` (`m` rows of `k`), its bytes and its dequantized values.
fn weights(dtype: DType, k: usize, m: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let x = rand_vec(k * m, seed);
    let bytes = quantize_to_vec(dtype, &x).unwrap();
    let deq = dequantize_to_vec(dtype, &bytes, k * m).unwrap();
    (bytes, deq)
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
}

/// Runs the driver with `kernel` on weights `a` (`[k, m]`) and F32 activations `b` of layout
/// `bl`, returning dst `[m, n, ne2, ne3]`.
fn run(
    kernel: &MatKernel,
    threads: usize,
    a: &[u8],
    al: Layout,
    b: &[u8],
    bl: Layout,
) -> tessera_core::Result<Vec<f32>> {
    let dl = Layout::contiguous(DType::F32, &[al.ne[1], bl.ne[1], bl.ne[2], bl.ne[3]]).unwrap();
    let mut d = vec![0f32; dl.nelements()];
    let mm = MatMul::new();
    let p = pool(threads);
    // SAFETY: every buffer holds its layout's bytes and dst is separate.
    unsafe {
        mm.run_with(
            kernel,
            &p,
            threads,
            (dl, d.as_mut_ptr().cast()),
            TensorRef::plain(al, a.as_ptr()),
            TensorRef::plain(bl, b.as_ptr()),
            &never,
        )?;
    }
    Ok(d)
}

/// The activations as a kernel for `dtype` weights sees them: quantized to its activation
/// format and back (unchanged for float weights).
fn as_kernel_sees(dtype: DType, x: &[f32]) -> Vec<f32> {
    let act = kernels::act_type(dtype);
    dequantize_to_vec(act, &quantize_to_vec(act, x).unwrap(), x.len()).unwrap()
}

/// Asserts that `got` (from `kern` on `n` activation rows of `k`) is within the rounding bound
/// of `exact`; returns the error as a fraction of the bound.
fn assert_within(
    what: &str,
    kern: &MatKernel,
    n: usize,
    k: usize,
    got: &[f32],
    exact: &Exact,
) -> f64 {
    let e = normwise_error(got, exact);
    let bound = rounding_bound(kern, n, k);
    assert!(
        e <= bound,
        "{what} ({} {}): error {e:.3e} > rounding bound {bound:.3e}",
        kern.tier,
        kern.weight
    );
    e / bound
}

/// Every supported tier on one shape, against the exact product of the dequantized weights and
/// the activations as the kernels see them; returns the largest error as a fraction of its
/// bound.
fn check_shape(dtype: DType, m: usize, n: usize, k: usize) -> f64 {
    let (a, wdeq) = weights(dtype, k, m, (m * 31 + n * 7 + k) as u64);
    let x = rand_vec(k * n, 12345 + n as u64);
    let al = Layout::contiguous(dtype, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let b = f32_bytes(&x);
    let exact = exact_product(&wdeq, &as_kernel_sees(dtype, &x), k, m, n);
    let mut worst = 0f64;
    for tier in supported_tiers() {
        let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
        let got = run(&kern, 1, &a, al, &b, bl).unwrap();
        let what = format!("{tier} {dtype} {m}x{n}x{k}");
        worst = worst.max(assert_within(&what, &kern, n, k, &got, &exact));
    }
    worst
}

#[test]
fn every_tier_matches_exact_on_odd_shapes() {
    for dtype in WEIGHT_TYPES {
        let ks: &[usize] = if dtype.block_size() == 256 {
            &[256, 768]
        } else if dtype.is_quantized() {
            &[32, 96, 288]
        } else {
            &[1, 7, 33, 100]
        };
        let mut worst = 0f64;
        for &k in ks {
            for &(m, n) in &[(1, 1), (3, 1), (1, 3), (17, 3), (3, 17), (17, 17)] {
                worst = worst.max(check_shape(dtype, m, n, k));
            }
        }
        eprintln!("{dtype}: largest error {worst:.3} of the rounding bound");
    }
}

#[test]
fn every_tier_matches_exact_on_bigger_shapes() {
    let shapes: &[(usize, usize, usize)] =
        if small() { &[(37, 9, 1024), (9, 21, 512)] } else { &[(300, 17, 4096), (64, 130, 512)] };
    for dtype in WEIGHT_TYPES {
        let worst = shapes.iter().map(|&(m, n, k)| check_shape(dtype, m, n, k)).fold(0.0, f64::max);
        eprintln!("{dtype}: largest error {worst:.3} of the rounding bound");
    }
}

#[test]
fn threaded_driver_equals_single_thread() {
    let (m, n, k) = if small() { (67, 19, 512) } else { (259, 70, 2048) };
    for dtype in [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
    ] {
        let (a, wdeq) = weights(dtype, k, m, 7);
        let x = rand_vec(k * n, 8);
        let al = Layout::contiguous(dtype, &[k, m]).unwrap();
        let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
        let b = f32_bytes(&x);
        for tier in supported_tiers() {
            let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
            let one = run(&kern, 1, &a, al, &b, bl).unwrap();
            for threads in [2, 3, 4] {
                let many = run(&kern, threads, &a, al, &b, bl).unwrap();
                assert_eq!(one, many, "{tier} {dtype} with {threads} threads");
            }
            let gemv = run(
                &kern,
                3,
                &a,
                al,
                &b[..k * 4],
                Layout::contiguous(DType::F32, &[k, 1]).unwrap(),
            )
            .unwrap();
            // GEMV may use other tiles than GEMM (e.g. sdot edges next to smmla tiles): both
            // within the rounding bound of the exact product.
            let exact = exact_product(&wdeq, &as_kernel_sees(dtype, &x[..k]), k, m, 1);
            assert_within(&format!("{tier} {dtype} gemv"), &kern, 1, k, &gemv, &exact);
        }
    }
}

#[test]
fn broadcast_and_strided_activations() {
    let (m, n, k) = (5, 3, 64);
    for dtype in [DType::F32, DType::Q8_0, DType::Q4_0] {
        // A: [k, m, 2, 1]; B: [k, n, 4, 3] (dims 2 and 3 broadcast over A's).
        let (a, wdeq) = weights(dtype, k, m * 2, 99);
        let al = Layout::contiguous(dtype, &[k, m, 2, 1]).unwrap();
        let x = rand_vec(k * n * 12, 5);
        let bl = Layout::contiguous(DType::F32, &[k, n, 4, 3]).unwrap();
        let b = f32_bytes(&x);
        for tier in supported_tiers() {
            let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
            let got = run(&kern, 2, &a, al, &b, bl).unwrap();
            for p in 0..12 {
                let i2 = p % 4;
                let wplane = &wdeq[(i2 / 2) * m * k..][..m * k];
                let xp = as_kernel_sees(dtype, &x[p * n * k..][..n * k]);
                let exact = exact_product(wplane, &xp, k, m, n);
                let what = format!("{tier} {dtype} plane {p}");
                assert_within(&what, &kern, n, k, &got[p * m * n..][..m * n], &exact);
            }
        }
        // Transposed activations: B stored as [n][k] columns, viewed as ne = [k, n] with
        // nb = [4 * n, 4] (not contiguous).
        let xt = rand_vec(k * n, 6);
        let mut bt = vec![0f32; k * n];
        for j in 0..n {
            for t in 0..k {
                bt[t * n + j] = xt[j * k + t];
            }
        }
        let (a2, wdeq2) = weights(dtype, k, m, 98);
        let al2 = Layout::contiguous(dtype, &[k, m]).unwrap();
        let mut btl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
        btl.nb = [4 * n, 4, 4 * n * k, 4 * n * k];
        let exact = exact_product(&wdeq2, &as_kernel_sees(dtype, &xt), k, m, n);
        for tier in supported_tiers() {
            let kern = kernels::matmul_kernel_in(tier, dtype).unwrap();
            let got = run(&kern, 2, &a2, al2, &f32_bytes(&bt), btl).unwrap();
            assert_within(&format!("{tier} {dtype} transposed B"), &kern, n, k, &got, &exact);
        }
    }
}

#[test]
fn f16_activations_are_converted() {
    let (m, n, k) = (6, 2, 64);
    let (a, wdeq) = weights(DType::Q8_0, k, m, 3);
    let x = rand_vec(k * n, 4);
    let b = quantize_to_vec(DType::F16, &x).unwrap();
    // F16 to F32 (exact), then to Q8_0 as for F32 activations.
    let xr = dequantize_to_vec(DType::F16, &b, k * n).unwrap();
    let exact = exact_product(&wdeq, &as_kernel_sees(DType::Q8_0, &xr), k, m, n);
    let kern = kernels::matmul_kernel(DType::Q8_0).unwrap();
    let got = run(
        &kern,
        1,
        &a,
        Layout::contiguous(DType::Q8_0, &[k, m]).unwrap(),
        &b,
        Layout::contiguous(DType::F16, &[k, n]).unwrap(),
    )
    .unwrap();
    assert_within("F16 activations", &kern, n, k, &got, &exact);
}

#[test]
fn activation_quantizers_are_bit_exact() {
    for tier in supported_tiers() {
        for act in [DType::Q8_0, DType::Q8_1, DType::Q8_K] {
            for (len, seed) in [(256usize, 1u64), (512, 2), (4096, 3)] {
                let mut x = rand_vec(len, seed);
                // Exact ties and zeros: a block of zeros, values that scale to .5.
                x[..32].fill(0.0);
                for (i, v) in x[32..64].iter_mut().enumerate() {
                    *v = (i as f32 - 16.0) * 0.5;
                }
                let want = quantize_to_vec(act, &x).unwrap();
                let mut got = vec![0u8; want.len()];
                kernels::quantize_act(tier, act, &x, &mut got).unwrap();
                assert_eq!(got, want, "{tier} {act} len {len}");
            }
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let kern = kernels::matmul_kernel(DType::Q4_0).unwrap();
    let a = vec![0u8; 18 * 2];
    let b = vec![0u8; 4 * 64];
    let al = Layout::contiguous(DType::Q4_0, &[32, 2]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[64, 1]).unwrap();
    // K = 32 against K = 64: the MUL_MAT rule of tessera-core refuses it, naming the op.
    let e = run(&kern, 1, &a, al, &b, bl).unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { op, .. } if op == "MUL_MAT"), "{e:?}");
}

#[test]
fn abort_stops_the_driver() {
    let kern = kernels::matmul_kernel(DType::F32).unwrap();
    let (k, m, n) = (64, 64, 8);
    let a = f32_bytes(&rand_vec(k * m, 1));
    let b = f32_bytes(&rand_vec(k * n, 2));
    let al = Layout::contiguous(DType::F32, &[k, m]).unwrap();
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let mut d = vec![0f32; m * n];
    let p = pool(2);
    let yes = || true;
    // SAFETY: buffers hold their layouts' bytes.
    let r = unsafe {
        MatMul::new().run_with(
            &kern,
            &p,
            2,
            (dl, d.as_mut_ptr().cast()),
            TensorRef::plain(al, a.as_ptr()),
            TensorRef::plain(bl, b.as_ptr()),
            &yes,
        )
    };
    assert!(matches!(r, Err(Error::Aborted)));
}

mod repacked {
    use super::*;
    use tessera_core::backend::BufferType;
    use tessera_cpu::kernels::repack::{self, PackedWeights, RepackBufferType};

    /// The types some tier repacks.
    const REPACKED: [DType; 12] = [
        DType::Q4_0,
        DType::Q8_0,
        DType::Q5_0,
        DType::Q4_1,
        DType::Q5_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
    ];

    #[test]
    fn pack_unpack_round_trip() {
        for dtype in REPACKED {
            for (k, m) in [(256usize, 16usize), (512, 32), (768, 48)] {
                let (a, _) = weights(dtype, k, m, 11);
                let mut p = vec![0u8; a.len()];
                repack::pack(dtype, k, &a, &mut p).unwrap();
                assert_ne!(p, a);
                let mut back = vec![0u8; a.len()];
                repack::unpack(dtype, k, &p, &mut back).unwrap();
                assert_eq!(back, a, "{dtype} {k}x{m}");
            }
        }
        assert!(repack::pack(DType::BF16, 32, &[0u8; 1024], &mut [0u8; 1024]).is_err());
        assert!(repack::pack(DType::Q8_0, 32, &[0u8; 34 * 8], &mut [0u8; 34 * 8]).is_err());
    }

    #[test]
    fn buffer_round_trips_gguf_bytes() {
        let bt = RepackBufferType;
        assert_eq!(bt.name(), "CPU_REPACK");
        let (k, m) = (64, 16);
        let (a, _) = weights(DType::Q4_0, k, m, 12);
        let l = Layout::contiguous(DType::Q4_0, &[k, m]).unwrap();
        let buf = bt.alloc(64 + a.len() + 100).unwrap();
        buf.init_tensor(&l, 64).unwrap();
        buf.write(64, &a).unwrap();
        let mut back = vec![0u8; a.len()];
        buf.read(64, &mut back).unwrap();
        assert_eq!(back, a);
        // A part of the tensor reads back as GGUF bytes too.
        let mut part = vec![0u8; 50];
        buf.read(64 + 30, &mut part).unwrap();
        assert_eq!(&part[..], &a[30..80]);
        if repack::can_repack(&l) {
            // Stored interleaved, and partial writes of a repacked tensor are refused.
            let raw = buf.host_ptr().unwrap();
            // SAFETY: the buffer holds at least 64 + a.len() bytes.
            let stored = unsafe { std::slice::from_raw_parts(raw.as_ptr().add(64), a.len()) };
            assert_ne!(stored, &a[..]);
            assert!(buf.write(64 + 18, &a[..18]).is_err());
        }
        // Plain bytes elsewhere are stored as written.
        buf.write(64 + a.len(), &[7u8; 10]).unwrap();
        let mut seven = [0u8; 10];
        buf.read(64 + a.len(), &mut seven).unwrap();
        assert_eq!(seven, [7u8; 10]);
    }

    #[test]
    fn repacked_gemv_and_gemm_match_reference() {
        let Some(_) = tessera_cpu::kernels::repacked_kernel(DType::Q4_0) else {
            assert!(repack::repack_buffer_type().is_none());
            return;
        };
        assert!(repack::repack_buffer_type().is_some());
        let k_big = if small() { 512 } else { 4096 };
        for dtype in REPACKED {
            if tessera_cpu::kernels::repacked_kernel(dtype).is_none() {
                continue;
            }
            let kq = dtype.block_size();
            // Also 5, 6 and 7 groups of rows: tiles of several groups (the ARM kernels take up
            // to four) with one, two and three groups left over.
            let g = repack::group_rows(repack::PackLayout::active().unwrap(), dtype);
            let shapes = [
                (16usize, kq),
                (48, 3 * kq),
                (64, k_big),
                (5 * g, kq),
                (6 * g, 2 * kq),
                (7 * g, 3 * kq),
            ];
            for &(m, k) in &shapes {
                // With K = 4096, 120 columns of quantized activations (560 KB) span two of the
                // driver's column chunks. N of 4 and more: groups of four activation rows (the
                // ARM kernels' interleaved format), with 0 to 3 rows left over.
                let wide = if k == 4096 { &[120usize][..] } else { &[] };
                for &n in [1usize, 3, 4, 5, 7, 8, 9, 13, 17, 40].iter().chain(wide) {
                    let (a, wdeq) = weights(dtype, k, m, (m + n + k) as u64);
                    let al = Layout::contiguous(dtype, &[k, m]).unwrap();
                    let packed = PackedWeights::new(&al, &a).unwrap();
                    let x = rand_vec(k * n, 3);
                    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
                    let exact = exact_product(&wdeq, &as_kernel_sees(dtype, &x), k, m, n);
                    let kern = kernels::repacked_kernel(dtype).unwrap();
                    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
                    for threads in [1, 2] {
                        let mut d = vec![0f32; m * n];
                        let p = pool(threads);
                        // SAFETY: buffers hold their layouts' bytes.
                        unsafe {
                            MatMul::new()
                                .run(
                                    &p,
                                    threads,
                                    (dl, d.as_mut_ptr().cast()),
                                    packed.weights(al),
                                    TensorRef::plain(bl, x.as_ptr().cast()),
                                    &never,
                                )
                                .unwrap();
                        }
                        let what = format!("repacked {dtype} {m}x{n}x{k} t{threads}");
                        assert_within(&what, &kern, n, k, &d, &exact);
                    }
                }
            }
        }
    }
}

mod elementwise {
    use super::*;
    use tessera_cpu::kernels::ew;

    fn nmse32(got: &[f32], want: &[f32]) -> f64 {
        let w: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        nmse(got, &w)
    }

    #[test]
    fn vector_ops_match_scalar() {
        let _guard = super::TIER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for n in [1usize, 7, 8, 33, 1000, 4096] {
            let mut x = rand_vec(n, n as u64);
            for v in x.iter_mut() {
                *v *= 12.0;
            }
            let b = rand_vec(n, 77);
            let mut want = vec![0f32; n];
            let mut got = vec![0f32; n];
            ew::scalar::silu(&x, &mut want);
            ew::silu(&x, &mut got).unwrap();
            assert!(nmse32(&got, &want) <= 1e-7, "silu {n}");
            ew::scalar::gelu(&x, &mut want);
            ew::gelu(&x, &mut got).unwrap();
            assert!(nmse32(&got, &want) <= 1e-7, "gelu {n}");
            ew::scalar::softmax(&x, &mut want);
            ew::softmax(&x, &mut got).unwrap();
            assert!(nmse32(&got, &want) <= 1e-7, "softmax {n}");
            ew::scalar::rms_norm(&x, 1e-6, &mut want);
            ew::rms_norm(&x, 1e-6, &mut got).unwrap();
            assert!(nmse32(&got, &want) <= 1e-7, "rms_norm {n}");
            ew::scalar::add(&x, &b, &mut want);
            ew::add(&x, &b, &mut got).unwrap();
            assert_eq!(got, want, "add {n}");
            ew::scalar::mul(&x, &b, &mut want);
            ew::mul(&x, &b, &mut got).unwrap();
            assert_eq!(got, want, "mul {n}");
        }
        assert!(ew::silu(&[1.0, 2.0], &mut [0.0]).is_err());
    }
}

#[test]
fn q8_0_with_sums_matches_reference_q8_0() {
    let mut x = rand_vec(4096, 9);
    x[..32].fill(0.0);
    for (i, v) in x[32..64].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) * 0.5;
    }
    let q = quantize_to_vec(DType::Q8_0, &x).unwrap();
    let mut s = vec![0u8; DType::Q8_1.row_size(x.len()).unwrap()];
    kernels::quantize_q8_0_sums(&x, &mut s).unwrap();
    for (a, b) in q.chunks_exact(34).zip(s.chunks_exact(36)) {
        assert_eq!(&a[..2], &b[..2]);
        assert_eq!(&a[2..], &b[4..]);
        let sum: i32 = a[2..].iter().map(|&v| i32::from(v as i8)).sum();
        assert_eq!(i16::from_le_bytes([b[2], b[3]]), sum as i16);
    }
}

/// The interleaved 4-row activation format of the ARM repacked kernels: quantizing four rows
/// straight into it gives the bytes of the rows quantized one by one, then interleaved.
#[test]
fn act_x4_quantizer_matches_rows_then_interleave() {
    let tiers = [Tier::Dotprod, Tier::I8mm];
    for kern in tiers.iter().flat_map(|&t| [DType::Q4_0, DType::Q8_0].map(|d| (t, d))) {
        let Some(kern) = kernels::repacked_kernel_in(kern.0, kern.1) else { continue };
        if kern.act_x4 == 0 {
            continue;
        }
        let k = 96;
        let mut x = rand_vec(4 * k, 21);
        x[k..k + 32].fill(0.0);
        let rows: [&[f32]; 4] = std::array::from_fn(|r| &x[r * k..(r + 1) * k]);
        let row = kern.act_row_size(k).unwrap();
        let mut plain = vec![0u8; 4 * row];
        for (r, o) in rows.iter().zip(plain.chunks_exact_mut(row)) {
            kern.quantize_act(r, o).unwrap();
        }
        let mut want = vec![0u8; 4 * row];
        kern.interleave_act_x4(k, &plain, &mut want).unwrap();
        let mut got = vec![0u8; 4 * row];
        kern.quantize_act_x4(rows, &mut got).unwrap();
        assert_eq!(got, want, "{:?} {}", kern.tier, kern.weight);
        assert!(kern.quantize_act_x4(rows, &mut got[1..]).is_err());
    }
}

#[test]
fn supports_reports_what_the_driver_handles() {
    let a = Layout::contiguous(DType::Q4_0, &[64, 8]).unwrap();
    let b = Layout::contiguous(DType::F32, &[64, 3]).unwrap();
    let d = Layout::contiguous(DType::F32, &[8, 3]).unwrap();
    assert!(tessera_cpu::matmul::supports(&d, &a, &b));
    let d16 = Layout::contiguous(DType::F16, &[8, 3]).unwrap();
    assert!(!tessera_cpu::matmul::supports(&d16, &a, &b));
    let bad = Layout::contiguous(DType::F32, &[32, 3]).unwrap();
    assert!(!tessera_cpu::matmul::supports(&d, &a, &bad));
    let bq = Layout::contiguous(DType::Q8_0, &[64, 3]).unwrap();
    assert!(!tessera_cpu::matmul::supports(&d, &a, &bq));
}

/// A MUL_MAT of a view of repacked weights (half their rows) is refused: the buffer holding
/// them says the view's bytes are only part of a repacked tensor, which no kernel reads; the
/// whole tensor computes.
#[test]
fn views_of_repacked_weights_are_refused() {
    use tessera_core::backend::Backend;
    use tessera_core::tensor_data::{get_f32, set_f32, set_tensor};
    use tessera_core::Graph;
    use tessera_cpu::kernels::repack::{Packing, RepackBuffer};
    let Some(bt) = tessera_cpu::kernels::repack::repack_buffer_type() else {
        return; // No repacked kernels on this CPU: nothing is ever repacked.
    };
    let (k, m) = (64, 32);
    let (a, wdeq) = weights(DType::Q8_0, k, m, 5);
    let mut g = Graph::new();
    let w = g.weight("w", DType::Q8_0, &[k, m]).unwrap();
    let half_bytes = DType::Q8_0.row_size(k).unwrap() * m / 2;
    let half = g.view(w, &[k, m / 2], &[half_bytes / (m / 2)], half_bytes).unwrap();
    let x = g.input("x", DType::F32, &[k, 1]).unwrap();
    let whole = g.mul_mat(w, x).unwrap();
    let part = g.mul_mat(half, x).unwrap();
    tessera_core::alloc::place_sequentially(&mut g, &[w], bt.as_ref()).unwrap();
    tessera_cpu::buffer::allocate_all(&mut g).unwrap();
    set_tensor(&g, w, &a).unwrap();
    let xv = rand_vec(k, 1);
    set_f32(&g, x, &xv).unwrap();
    let storage = g.storage_of(w).unwrap();
    let rb = storage.buffer.as_any().downcast_ref::<RepackBuffer>().unwrap();
    assert!(matches!(rb.packing(storage.offset, a.len()), Packing::Packed(DType::Q8_0, _)));
    assert_eq!(rb.packing(storage.offset + half_bytes, half_bytes), Packing::Partial);
    let mut cpu = tessera_cpu::CpuBackend::new(Some(1)).unwrap();
    cpu.compute_nodes(&g, &[whole]).unwrap();
    let exact = exact_product(&wdeq, &as_kernel_sees(DType::Q8_0, &xv), k, m, 1);
    let kern = kernels::repacked_kernel(DType::Q8_0).unwrap();
    assert_within("whole repacked weights", &kern, 1, k, &get_f32(&g, whole).unwrap(), &exact);
    let err = cpu.compute_nodes(&g, &[part]).expect_err("a view of repacked weights");
    assert!(err.to_string().contains("repacked weight"), "{err}");
}
