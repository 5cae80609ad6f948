//! The CPU_REPACK layouts of every tier that has one (AVX-512 VNNI 16 x 4, AVX2 8 x 8, dotprod
//! 4 x 4, i8mm 4 x 8): a Q4_0 / Q8_0 tensor written into a repack buffer under the tier is
//! stored in the tier's layout (checked byte by byte against the layout's definition), reads
//! back as its GGUF bytes, and multiplies within the rounding bound of the exact product
//! ([`common::rounding_bound`]), as the plain weights do under the scalar tier; the
//! buffer remembers the layout when the tier changes; `can_repack` refuses what the kernels
//! cannot read.
//!
//! Under emulation (aarch64 on qemu) set `TESSERA_TEST_SMALL=1` to shrink the shapes.

mod common;

use common::{exact_product, normwise_error, rand_vec, rounding_bound, Exact};
use std::sync::Arc;
use tessera_core::backend::Buffer;
use tessera_core::backend::BufferType;
use tessera_core::quant::{dequantize_to_vec, quantize_to_vec};
use tessera_core::{DType, Layout};
use tessera_cpu::kernels::repack::{
    self, PackLayout, PackedWeights, Packing, RepackBuffer, RepackBufferType,
};
use tessera_cpu::kernels::{self, Tier};
use tessera_cpu::matmul::{MatMul, TensorRef};
use tessera_cpu::team::Crew;

/// The tests force tiers (process-wide): one at a time.
static TIER_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    TIER_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn small() -> bool {
    std::env::var("TESSERA_TEST_SMALL").is_ok_and(|v| !v.is_empty() && v != "0")
        || cfg!(target_arch = "aarch64") && std::env::var("TESSERA_EXPECT_CPU").is_ok()
}

/// The tiers of this CPU that have a repacked layout, with it.
fn packing_tiers() -> Vec<(Tier, PackLayout)> {
    Tier::ALL
        .into_iter()
        .filter(|t| t.is_supported())
        .filter_map(|t| PackLayout::for_tier(t).map(|l| (t, l)))
        .collect()
}

/// Runs the tests' body under `tier`, then back to the start-up tier.
fn under<R>(tier: Tier, f: impl FnOnce() -> R) -> R {
    kernels::force_tier(tier).unwrap();
    let r = f();
    kernels::reset_tier();
    r
}

fn pool(threads: usize) -> Crew {
    Crew::new(threads).unwrap()
}

/// How a repack buffer holds the `len` bytes at `offset`.
fn packing(buf: &Arc<dyn Buffer>, offset: usize, len: usize) -> Packing {
    buf.as_any().downcast_ref::<RepackBuffer>().expect("a CPU_REPACK buffer").packing(offset, len)
}

/// `mul_mat(a, x)` through the driver (`kernel` given, or chosen by the driver for `a`, plain
/// or repacked), `x` F32 `[k, n]`.
fn matmul(
    kernel: Option<&kernels::MatKernel>,
    threads: usize,
    wa: TensorRef,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let (k, m) = (wa.layout.ne[0], wa.layout.ne[1]);
    let bl = Layout::contiguous(DType::F32, &[k, n]).unwrap();
    let dl = Layout::contiguous(DType::F32, &[m, n]).unwrap();
    let mut d = vec![f32::NAN; m * n];
    let p = pool(threads);
    let mm = MatMul::new();
    let (dst, wb) = ((dl, d.as_mut_ptr().cast::<u8>()), TensorRef::plain(bl, x.as_ptr().cast()));
    // SAFETY: `wa` holds its layout's bytes (callers' contract), `x` holds `bl`'s, dst is
    // separate.
    unsafe {
        match kernel {
            Some(kern) => mm.run_with(kern, &p, threads, dst, wa, wb, &|| false),
            None => mm.run(&p, threads, dst, wa, wb, &|| false),
        }
    }
    .unwrap();
    d
}

/// Checks the stored bytes of a tensor against the layout's definition: per group and block,
/// the rows' scales, then word `h` of every row's quants.
fn check_stored(pl: PackLayout, dtype: DType, k: usize, plain: &[u8], stored: &[u8]) {
    // Block bytes, its f16 header fields (d; Q4_1 / Q5_1: m), offset of the fifth bits (Q5_0 /
    // Q5_1), of the quants, their length.
    let (bsize, halves, qh_at, qat, qlen) = match dtype {
        DType::Q4_0 => (18, 1, None, 2, 16),
        DType::Q5_0 => (22, 1, Some(2), 6, 16),
        DType::Q4_1 => (20, 2, None, 4, 16),
        DType::Q5_1 => (24, 2, Some(4), 8, 16),
        DType::IQ4_NL => (18, 1, None, 2, 16),
        _ => (34, 1, None, 2, 32),
    };
    let row = k / 32 * bsize;
    let mut o = 0;
    for g in 0..plain.len() / (row * pl.rows) {
        for b in 0..k / 32 {
            let at = |r: usize, off: usize| (g * pl.rows + r) * row + b * bsize + off;
            for f in 0..halves {
                for r in 0..pl.rows {
                    let p = at(r, 2 * f);
                    assert_eq!(stored[o..o + 2], plain[p..p + 2], "{pl:?} field {f} g{g} b{b}");
                    o += 2;
                }
            }
            if let Some(qh_at) = qh_at {
                // The fifth bits as masks: per half (values 0..16, 16..32) and chunk of quant
                // bytes, one bit per byte of the chunk's vector (row r's word at r * word).
                let masks = &stored[o..o + 4 * pl.rows];
                for r in 0..pl.rows {
                    let qh = plain[at(r, qh_at)..at(r, qh_at + 4)].try_into().unwrap();
                    let qh = u32::from_le_bytes(qh);
                    for t in 0..32 {
                        let (chunk, byte) = (t % 16 / pl.word, t % 16 % pl.word);
                        let bit =
                            ((t / 16 * (16 / pl.word) + chunk) * pl.rows + r) * pl.word + byte;
                        let got = masks[bit / 8] >> (bit % 8) & 1;
                        assert_eq!(u32::from(got), qh >> t & 1, "{pl:?} g{g} b{b} row {r} bit {t}");
                    }
                }
                o += 4 * pl.rows;
            }
            for h in 0..qlen / pl.word {
                for r in 0..pl.rows {
                    let p = at(r, qat + pl.word * h);
                    assert_eq!(stored[o..o + pl.word], plain[p..p + pl.word], "{pl:?} word {h}");
                    o += pl.word;
                }
            }
        }
    }
    assert_eq!(o, plain.len());
}

/// Asserts that `got` (from `kern` on `n` activation rows of `k`) is within the rounding bound
/// of `exact`.
fn assert_within(
    what: &str,
    kern: &kernels::MatKernel,
    n: usize,
    k: usize,
    got: &[f32],
    exact: &Exact,
) {
    let e = normwise_error(got, exact);
    let bound = rounding_bound(kern, n, k);
    assert!(e <= bound, "{what} ({}): error {e:.3e} > rounding bound {bound:.3e}", kern.tier);
}

/// Per tier: write into a CPU_REPACK buffer, read back, multiply (GEMV and GEMM) and compare
/// with the exact product (as the scalar tier on the plain bytes is).
#[test]
fn every_layout_round_trips_and_matches_exact() {
    let _g = lock();
    let tiers = packing_tiers();
    #[cfg(target_arch = "x86_64")]
    assert!(tiers.iter().any(|&(t, _)| t == Tier::Avx2), "x86_64 runners have AVX2");
    let k_big = if small() { 32 * 9 } else { 32 * 33 };
    for (tier, pl) in tiers {
        for dtype in
            [DType::Q4_0, DType::Q8_0, DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::IQ4_NL]
        {
            if repack::kernel_for(pl, dtype).is_none() {
                continue;
            }
            for (m, k) in [(pl.rows, 32), (3 * pl.rows, 7 * 32), (48, k_big)] {
                let x = rand_vec(k * m, (m * 7 + k) as u64);
                let plain = quantize_to_vec(dtype, &x).unwrap();
                let wdeq = dequantize_to_vec(dtype, &plain, k * m).unwrap();
                let al = Layout::contiguous(dtype, &[k, m]).unwrap();
                let buf = RepackBufferType.alloc(64 + plain.len() + 64).unwrap();
                let base = buf.host_ptr().unwrap().as_ptr();
                // SAFETY: the buffer holds 64 + plain.len() bytes and lives until the end.
                let stored = || unsafe { std::slice::from_raw_parts(base.add(64), plain.len()) };
                let wptr = stored().as_ptr();
                under(tier, || {
                    assert!(repack::can_repack(&al), "{tier:?} {dtype} {m}x{k}");
                    buf.init_tensor(&al, 64).unwrap();
                    buf.write(64, &plain).unwrap();
                });
                check_stored(pl, dtype, k, &plain, stored());
                assert_eq!(packing(&buf, 64, plain.len()), Packing::Packed(dtype, pl));
                assert_eq!(packing(&buf, 64 + 20, 40), Packing::Partial, "a view");
                assert_eq!(packing(&buf, 64 + plain.len(), 64), Packing::Plain, "past it");
                let stored_packed = TensorRef::packed(al, wptr, pl);
                let mut back = vec![0u8; plain.len()];
                buf.read(64, &mut back).unwrap();
                assert_eq!(back, plain, "{tier:?} {dtype}: read returns the GGUF bytes");
                let mut part = vec![0u8; 40];
                buf.read(64 + 21, &mut part).unwrap();
                assert_eq!(part, plain[21..61]);

                let scalar = kernels::matmul_kernel_in(Tier::Scalar, dtype).unwrap();
                let packed_kernel = repack::kernel_for(pl, dtype).unwrap();
                for n in [1usize, 3, 17, 64] {
                    let xa = rand_vec(k * n, 100 + n as u64);
                    let xq = dequantize_to_vec(
                        DType::Q8_0,
                        &quantize_to_vec(DType::Q8_0, &xa).unwrap(),
                        k * n,
                    )
                    .unwrap();
                    let exact = exact_product(&wdeq, &xq, k, m, n);
                    let plain_scalar =
                        matmul(Some(&scalar), 1, TensorRef::plain(al, plain.as_ptr()), &xa, n);
                    let what = format!("scalar {dtype} {m}x{n}x{k}");
                    assert_within(&what, &scalar, n, k, &plain_scalar, &exact);
                    for threads in [1, 2] {
                        let before = kernels::tier_use_count(tier);
                        let got = under(tier, || matmul(None, threads, stored_packed, &xa, n));
                        assert!(kernels::tier_use_count(tier) > before, "{tier:?} kernel ran");
                        let what = format!("{tier:?} {dtype} {m}x{n}x{k} t{threads}");
                        assert_within(&what, &packed_kernel, n, k, &got, &exact);
                    }
                    // Under another tier the buffer's layout still picks its own kernel.
                    let got = under(Tier::Scalar, || matmul(None, 1, stored_packed, &xa, n));
                    let what = format!("{tier:?} {dtype} {m}x{n}x{k} read under scalar");
                    assert_within(&what, &packed_kernel, n, k, &got, &exact);
                }
            }
        }
    }
}

/// Checks a repacked Q2_K, Q3_K or Q6_K tensor against its plain rows: per group block, the
/// rows' `d` (Q2_K: then their `dmin`), byte `s` of their scale bytes for each `s` (Q2_K, Q6_K:
/// 16, Q3_K: 12), then the quant bytes in words (Q2_K: `qs`; Q3_K: `hmask` then `qs`, one run;
/// Q6_K: per half block its 64 `ql` bytes then its 32 `qh` bytes, each run in words).
fn check_stored_k16(pl: PackLayout, dtype: DType, k: usize, plain: &[u8], stored: &[u8]) {
    // Block bytes, offsets of d, dmin, the scales and the quants, scale bytes, and the quants'
    // runs (offset from the quants' start, length).
    let (bsize, d_at, dmin_at, sc_at, n_sc, q_at, runs): (_, _, _, _, _, _, &[(usize, usize)]) =
        match dtype {
            DType::Q2_K => (84, 80, Some(82), 0, 16, 16, &[(0, 64)]),
            DType::Q3_K => (110, 108, None, 96, 12, 0, &[(0, 96)]),
            _ => (210, 208, None, 192, 16, 0, &[(0, 64), (128, 32), (64, 64), (160, 32)]),
        };
    let row = k / 256 * bsize;
    let mut o = 0;
    for g in 0..plain.len() / (row * pl.rows) {
        for b in 0..k / 256 {
            let at = |r: usize, off: usize| (g * pl.rows + r) * row + b * bsize + off;
            for f in [Some(d_at), dmin_at].into_iter().flatten() {
                for r in 0..pl.rows {
                    let p = at(r, f);
                    assert_eq!(stored[o..o + 2], plain[p..p + 2], "{pl:?} {dtype} f16 g{g} b{b}");
                    o += 2;
                }
            }
            for sc in 0..n_sc {
                for r in 0..pl.rows {
                    assert_eq!(stored[o], plain[at(r, sc_at + sc)], "{pl:?} {dtype} scale {sc}");
                    o += 1;
                }
            }
            if dtype == DType::Q6_K && pl == PackLayout::R8W8 {
                // Whole 6-bit values in planes: per 32 values tau and half h (rows
                // 4h..4h + 4), three 32-byte planes p; byte 8 q + i of plane p holds row
                // 4h + q's value 32 tau + 8 p + i in bits 0..6 and bits 2p, 2p + 1 of its
                // value 32 tau + 24 + i in bits 6, 7.
                let value = |r: usize, t: usize| {
                    // ggml's dequantize_row_q6_K order: value 128 n + 32 j + l.
                    let (n, j, l) = (t / 128, t % 128 / 32, t % 32);
                    let ql = plain[at(r, 64 * n + l + 32 * (j % 2))];
                    let qh = plain[at(r, 128 + 32 * n + l)];
                    let low = if j < 2 { ql & 0xf } else { ql >> 4 };
                    low | (qh >> (2 * j) & 3) << 4
                };
                for tau in 0..8 {
                    for h in 0..2 {
                        for p in 0..3 {
                            for q in 0..4 {
                                for i in 0..8 {
                                    let (r, t) = (4 * h + q, 32 * tau + 8 * p + i);
                                    let top = value(r, 32 * tau + 24 + i) >> (2 * p) & 3;
                                    let want = value(r, t) | top << 6;
                                    assert_eq!(
                                        stored[o], want,
                                        "{pl:?} Q6_K g{g} b{b} row {r} value {t}"
                                    );
                                    o += 1;
                                }
                            }
                        }
                    }
                }
                continue;
            }
            for &(run, len) in runs {
                for h in 0..len / pl.word {
                    for r in 0..pl.rows {
                        let p = at(r, q_at + run + pl.word * h);
                        let what = format!("{pl:?} {dtype} g{g} b{b} run {run} word {h} r{r}");
                        assert_eq!(stored[o..o + pl.word], plain[p..p + pl.word], "{what}");
                        o += pl.word;
                    }
                }
            }
        }
    }
    assert_eq!(o, plain.len());
}

/// The k-quants per tier: written into a CPU_REPACK buffer under every tier that repacks them,
/// stored in the tier's layout (checked byte by byte), read back as their GGUF bytes, and
/// multiplied (GEMV, every tile width of the kernels, two threads) within the rounding bound of
/// the exact product of the dequantized weights and the Q8_K activations, under the tier and
/// read under the scalar tier.
#[test]
fn k_quant_layouts_round_trip_and_match_exact() {
    let _g = lock();
    let k_big = if small() { 256 * 3 } else { 256 * 17 };
    let types = [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];
    let mut covered = Vec::new();
    for (tier, pl) in packing_tiers() {
        for dtype in types {
            if repack::kernel_for(pl, dtype).is_none() {
                continue;
            }
            covered.push((tier, dtype));
            let rows = repack::group_rows(pl, dtype);
            for (m, k) in [(rows, 256), (2 * rows, 2 * 256), (3 * rows, 3 * 256), (48, k_big)] {
                let x = rand_vec(k * m, (m * 5 + k) as u64);
                let plain = quantize_to_vec(dtype, &x).unwrap();
                let wdeq = dequantize_to_vec(dtype, &plain, k * m).unwrap();
                let al = Layout::contiguous(dtype, &[k, m]).unwrap();
                let buf = RepackBufferType.alloc(plain.len()).unwrap();
                let base = buf.host_ptr().unwrap().as_ptr();
                under(tier, || {
                    assert!(repack::can_repack(&al), "{tier:?} {dtype} {m}x{k}");
                    buf.init_tensor(&al, 0).unwrap();
                    buf.write(0, &plain).unwrap();
                });
                // SAFETY: the buffer holds plain.len() bytes and lives until the end.
                let stored = unsafe { std::slice::from_raw_parts(base, plain.len()) };
                if matches!(dtype, DType::Q4_K | DType::Q5_K) {
                    check_stored_k4(pl, dtype, k, &plain, stored);
                } else {
                    check_stored_k16(pl, dtype, k, &plain, stored);
                }
                assert_eq!(packing(&buf, 0, plain.len()), Packing::Packed(dtype, pl));
                let mut back = vec![0u8; plain.len()];
                buf.read(0, &mut back).unwrap();
                assert_eq!(back, plain, "{tier:?} {dtype}: read returns the GGUF bytes");
                let packed_kernel = repack::kernel_for(pl, dtype).unwrap();
                let weights = TensorRef::packed(al, base, pl);
                // Every width of a column slice (1..8) and of a tile's last slice, one tile
                // and more (16 columns), 33 past two.
                for n in [1usize, 2, 3, 4, 5, 6, 7, 8, 13, 15, 17, 22, 33, 40] {
                    let xa = rand_vec(k * n, 500 + n as u64);
                    let act = kernels::act_type(dtype);
                    let xq = quantize_to_vec(act, &xa).unwrap();
                    let exact =
                        exact_product(&wdeq, &dequantize_to_vec(act, &xq, k * n).unwrap(), k, m, n);
                    for threads in [1, 2] {
                        let before = kernels::tier_use_count(tier);
                        let got = under(tier, || matmul(None, threads, weights, &xa, n));
                        assert!(kernels::tier_use_count(tier) > before, "{tier:?} kernel ran");
                        let what = format!("{tier:?} {dtype} {m}x{n}x{k} t{threads}");
                        assert_within(&what, &packed_kernel, n, k, &got, &exact);
                    }
                    let got = under(Tier::Scalar, || matmul(None, 1, weights, &xa, n));
                    let what = format!("{tier:?} {dtype} {m}x{n}x{k} read under scalar");
                    assert_within(&what, &packed_kernel, n, k, &got, &exact);
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    for dtype in types {
        assert!(covered.contains(&(Tier::Avx2, dtype)), "AVX2 repacks {dtype}");
    }
}

#[test]
fn can_repack_refuses_other_rows_views_and_types() {
    let _g = lock();
    for tier in Tier::ALL.into_iter().filter(|t| t.is_supported()) {
        under(tier, || {
            let Some(pl) = PackLayout::for_tier(tier) else {
                assert!(repack::repack_buffer_type().is_none(), "{tier:?}");
                assert!(!repack::can_repack(&Layout::contiguous(DType::Q4_0, &[64, 16]).unwrap()));
                return;
            };
            assert!(repack::repack_buffer_type().is_some(), "{tier:?}");
            for dtype in [DType::Q4_0, DType::Q8_0] {
                let ok = Layout::contiguous(dtype, &[96, 2 * pl.rows]).unwrap();
                assert!(repack::can_repack(&ok), "{tier:?} {dtype}");
                let odd = Layout::contiguous(dtype, &[96, pl.rows + 2]).unwrap();
                assert!(!repack::can_repack(&odd), "{tier:?} {dtype}: rows not a multiple");
                let mut view = ok;
                view.nb[1] *= 2;
                view.nb[2] *= 2;
                view.nb[3] *= 2;
                assert!(!repack::can_repack(&view), "{tier:?} {dtype}: strided view");
            }
            let x86 = matches!(tier, Tier::Avx2 | Tier::Avx512Vnni);
            let f16 = |k: usize, m: usize| Layout::contiguous(DType::F16, &[k, m]).unwrap();
            assert_eq!(repack::can_repack(&f16(256, 16)), x86, "{tier:?} F16");
            assert!(!repack::can_repack(&f16(40, 16)), "{tier:?} F16 rows of 40 values");
            assert!(!repack::can_repack(&f16(256, 12)), "{tier:?} F16 12 rows");
            let q5 = Layout::contiguous(DType::Q5_0, &[256, 16]).unwrap();
            assert_eq!(repack::can_repack(&q5), x86, "{tier:?} Q5_0");
            for dtype in [DType::F32, DType::BF16] {
                let l = Layout::contiguous(dtype, &[256, 16]).unwrap();
                assert!(!repack::can_repack(&l), "{tier:?} {dtype}");
            }
            let k4_tiers = [Tier::Avx2, Tier::Avx512Vnni, Tier::Dotprod, Tier::I8mm];
            for dtype in [DType::Q4_K, DType::Q5_K] {
                let l = Layout::contiguous(dtype, &[256, 16]).unwrap();
                assert_eq!(repack::can_repack(&l), k4_tiers.contains(&tier), "{tier:?} {dtype}");
            }
            let q6k = Layout::contiguous(DType::Q6_K, &[256, 16]).unwrap();
            let q6k_tiers = [Tier::Avx2, Tier::Avx512Vnni, Tier::Dotprod, Tier::I8mm];
            assert_eq!(repack::can_repack(&q6k), q6k_tiers.contains(&tier), "{tier:?} Q6_K");
            for dtype in [DType::Q2_K, DType::Q3_K] {
                let l = Layout::contiguous(dtype, &[256, 16]).unwrap();
                assert_eq!(repack::can_repack(&l), x86, "{tier:?} {dtype}");
            }
            for dtype in [DType::Q4_1, DType::Q5_1] {
                let l = Layout::contiguous(dtype, &[256, 16]).unwrap();
                assert_eq!(repack::can_repack(&l), tier == Tier::Avx512Vnni, "{tier:?} {dtype}");
            }
            // IQ4_NL in Q4_0's layout on every tier that has one; IQ4_XS on x86.
            let iq4_nl = Layout::contiguous(DType::IQ4_NL, &[256, 16]).unwrap();
            assert!(repack::can_repack(&iq4_nl), "{tier:?} IQ4_NL");
            let iq4_xs = Layout::contiguous(DType::IQ4_XS, &[256, 16]).unwrap();
            assert_eq!(repack::can_repack(&iq4_xs), x86, "{tier:?} IQ4_XS");
            // A tensor that cannot be repacked is stored as written.
            let odd = Layout::contiguous(DType::Q4_0, &[64, pl.rows + 2]).unwrap();
            let plain = quantize_to_vec(DType::Q4_0, &rand_vec(64 * (pl.rows + 2), 4)).unwrap();
            let buf = RepackBufferType.alloc(plain.len()).unwrap();
            buf.init_tensor(&odd, 0).unwrap();
            buf.write(0, &plain).unwrap();
            let base = buf.host_ptr().unwrap().as_ptr();
            // SAFETY: the buffer holds plain.len() bytes.
            let stored = unsafe { std::slice::from_raw_parts(base, plain.len()) };
            assert_eq!(stored, &plain[..]);
            assert_eq!(packing(&buf, 0, plain.len()), Packing::Plain);
        });
    }
}

#[test]
fn pack_as_round_trips_every_layout() {
    for pl in [PackLayout::R16W4, PackLayout::R8W8, PackLayout::R4W4, PackLayout::R4W8] {
        for dtype in [
            DType::Q4_0,
            DType::Q8_0,
            DType::Q5_0,
            DType::Q4_1,
            DType::Q5_1,
            DType::Q2_K,
            DType::Q3_K,
            DType::IQ4_NL,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::IQ4_XS,
        ] {
            let k = if dtype.block_size() == 256 { 2 * 256 } else { 5 * 32 };
            let m = 3 * pl.rows;
            let plain = quantize_to_vec(dtype, &rand_vec(k * m, 8)).unwrap();
            let mut packed = vec![0u8; plain.len()];
            repack::pack_as(pl, dtype, k, &plain, &mut packed).unwrap();
            if matches!(dtype, DType::Q4_K | DType::Q5_K) {
                check_stored_k4(pl, dtype, k, &plain, &packed);
            } else if matches!(dtype, DType::Q2_K | DType::Q3_K | DType::Q6_K) {
                check_stored_k16(pl, dtype, k, &plain, &packed);
            } else if dtype == DType::IQ4_XS {
                // IQ4_XS's layouts are checked through the kernels (tests/iq4.rs).
                assert_ne!(packed, plain, "{pl:?} {dtype}");
            } else {
                check_stored(pl, dtype, k, &plain, &packed);
            }
            let mut back = vec![0u8; plain.len()];
            repack::unpack_as(pl, dtype, k, &packed, &mut back).unwrap();
            assert_eq!(back, plain, "{pl:?} {dtype}");
            // Each row out of its group alone (GET_ROWS on a repacked table).
            let row = plain.len() / m;
            let mut one = vec![0u8; row];
            for r in 0..m {
                repack::unpack_row_as(pl, dtype, k, &packed, r, &mut one).unwrap();
                assert_eq!(one, plain[r * row..][..row], "{pl:?} {dtype} row {r}");
            }
            assert!(repack::unpack_row_as(pl, dtype, k, &packed, m, &mut one).is_err());
            assert!(repack::unpack_row_as(pl, dtype, k, &packed, 0, &mut one[1..]).is_err());
            // Rows not a multiple of the group are refused.
            let short = &plain[..plain.len() / m * (m - 1)];
            let mut out = vec![0u8; short.len()];
            assert!(repack::pack_as(pl, dtype, k, short, &mut out).is_err(), "{pl:?} {dtype}");
        }
        assert_eq!(pl.tier().and_then(PackLayout::for_tier), Some(pl));
    }
}

/// A tensor repacked under one tier and rewritten under another is stored (and read back) in
/// the new tier's layout; weights repacked outside buffers remember theirs too.
#[test]
fn rewrites_follow_the_active_tier() {
    let _g = lock();
    let tiers = packing_tiers();
    let (k, m) = (64, 16);
    let plain = quantize_to_vec(DType::Q8_0, &rand_vec(k * m, 9)).unwrap();
    let al = Layout::contiguous(DType::Q8_0, &[k, m]).unwrap();
    let buf = RepackBufferType.alloc(plain.len()).unwrap();
    buf.init_tensor(&al, 0).unwrap();
    let base = buf.host_ptr().unwrap().as_ptr();
    for &(tier, pl) in &tiers {
        under(tier, || buf.write(0, &plain)).unwrap();
        assert_eq!(packing(&buf, 0, plain.len()), Packing::Packed(DType::Q8_0, pl));
        let mut back = vec![0u8; plain.len()];
        buf.read(0, &mut back).unwrap();
        assert_eq!(back, plain, "{tier:?}");
        let pw = under(tier, || PackedWeights::new(&al, &plain)).unwrap();
        assert_eq!(pw.layout(), pl);
    }
    // Written under a tier without a layout: plain again.
    under(Tier::Scalar, || buf.write(0, &plain)).unwrap();
    assert_eq!(packing(&buf, 0, plain.len()), Packing::Plain);
    // SAFETY: the buffer holds plain.len() bytes.
    assert_eq!(unsafe { std::slice::from_raw_parts(base, plain.len()) }, &plain[..]);
}

/// Weights with two planes (dims 2 and 3 broadcast as in ggml): each plane's groups stay whole.
#[test]
fn planes_of_repacked_weights_match_exact() {
    let _g = lock();
    for (tier, pl) in packing_tiers() {
        for dtype in
            [DType::Q4_0, DType::Q8_0, DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::IQ4_NL]
        {
            if repack::kernel_for(pl, dtype).is_none() {
                continue;
            }
            let (k, m, n) = (96, 2 * pl.rows, 5);
            let al = Layout::contiguous(dtype, &[k, m, 2]).unwrap();
            let plain = quantize_to_vec(dtype, &rand_vec(k * m * 2, 21)).unwrap();
            let packed = under(tier, || PackedWeights::new(&al, &plain)).unwrap();
            assert_eq!(packed.layout(), pl);
            let x = rand_vec(k * n * 4, 22);
            let bl = Layout::contiguous(DType::F32, &[k, n, 4]).unwrap();
            let dl = Layout::contiguous(DType::F32, &[m, n, 4]).unwrap();
            let wdeq = dequantize_to_vec(dtype, &plain, k * m * 2).unwrap();
            let act = kernels::act_type(dtype);
            let xq = dequantize_to_vec(act, &quantize_to_vec(act, &x).unwrap(), x.len()).unwrap();
            let packed_kernel = repack::kernel_for(pl, dtype).unwrap();
            let run = |wa: TensorRef| {
                let mut d = vec![f32::NAN; m * n * 4];
                let (dst, wb) =
                    ((dl, d.as_mut_ptr().cast::<u8>()), TensorRef::plain(bl, x.as_ptr().cast()));
                let p = pool(2);
                // SAFETY: every operand holds its layout's bytes; dst is separate.
                unsafe { MatMul::new().run(&p, 2, dst, wa, wb, &|| false) }.unwrap();
                d
            };
            let got = run(packed.weights(al));
            for p in 0..4 {
                // Plane p of B reads plane p / 2 of A (dims 2 broadcast).
                let wplane = &wdeq[(p / 2) * m * k..][..m * k];
                let exact = exact_product(wplane, &xq[p * n * k..][..n * k], k, m, n);
                let what = format!("{tier:?} {dtype} plane {p}");
                assert_within(&what, &packed_kernel, n, k, &got[p * m * n..][..m * n], &exact);
            }
        }
    }
}

/// Checks repacked F16 bytes against the definition of [`repack::F16_GROUP`]: per group of 8
/// rows and block of 16 values, the 32 bytes of each row in turn.
/// Checks a repacked Q4_K or Q5_K tensor against its plain rows: per group block, the rows' `d`,
/// their `dmin`, byte `s` of their 12 scale bytes for each `s`, then the quant bytes in words
/// (Q4_K: the 128 nibble bytes; Q5_K: the 32 `qh` bytes then the 128 nibble bytes, one run).
fn check_stored_k4(pl: PackLayout, dtype: DType, k: usize, plain: &[u8], stored: &[u8]) {
    let (bsize, quants) = if dtype == DType::Q5_K { (176, 160) } else { (144, 128) };
    let row = k / 256 * bsize;
    for g in 0..plain.len() / (row * pl.rows) {
        for b in 0..k / 256 {
            let base = g * pl.rows * row + b * bsize * pl.rows;
            for r in 0..pl.rows {
                let p = (g * pl.rows + r) * row + b * bsize;
                let d = base + 2 * r;
                assert_eq!(stored[d..d + 2], plain[p..p + 2], "{pl:?} d g{g} b{b} r{r}");
                let m = base + 2 * pl.rows + 2 * r;
                assert_eq!(stored[m..m + 2], plain[p + 2..p + 4], "{pl:?} dmin g{g} b{b} r{r}");
                for s in 0..12 {
                    let at = base + 4 * pl.rows + s * pl.rows + r;
                    assert_eq!(stored[at], plain[p + 4 + s], "{pl:?} scale {s} g{g} b{b} r{r}");
                }
                for t in 0..quants {
                    let (h, at) = (t / pl.word, t % pl.word);
                    let q = base + 16 * pl.rows + (h * pl.rows + r) * pl.word + at;
                    assert_eq!(stored[q], plain[p + 16 + t], "{pl:?} quant {t} g{g} b{b} r{r}");
                }
            }
        }
    }
}

fn check_stored_f16(k: usize, plain: &[u8], stored: &[u8]) {
    let row = 2 * k;
    let mut o = 0;
    for g in 0..plain.len() / (8 * row) {
        for b in 0..k / 16 {
            for r in 0..8 {
                let p = (g * 8 + r) * row + 32 * b;
                assert_eq!(stored[o..o + 32], plain[p..p + 32], "F16 group {g} block {b} row {r}");
                o += 32;
            }
        }
    }
    assert_eq!(o, plain.len());
}

/// F16 weights on the x86 tiers: stored in 8-row groups of 16-value blocks under every layout
/// (checked byte by byte), read back as written, and multiplied (GEMV, the sub-tiles, the packed
/// GEMM from `F16_GEMM_MIN_N` activation rows, two threads, several planes) within the rounding bound of the exact product, as the scalar tier
/// on the plain bytes is.
#[test]
fn f16_groups_round_trip_and_match_exact() {
    let _g = lock();
    // The packed GEMM is opt-in (it gives up batch-invariant columns): on for this test.
    tessera_cpu::matmul::set_float_gemm(true);
    let tiers: Vec<_> = packing_tiers()
        .into_iter()
        .filter(|&(t, _)| {
            repack::kernel_for(PackLayout::for_tier(t).unwrap(), DType::F16).is_some()
        })
        .collect();
    #[cfg(target_arch = "x86_64")]
    assert!(tiers.iter().any(|&(t, _)| t == Tier::Avx2), "x86_64 runners have AVX2");
    #[cfg(not(target_arch = "x86_64"))]
    assert!(tiers.is_empty(), "F16 is repacked on x86 only");
    let k_big = if small() { 16 * 9 } else { 4096 + 16 };
    let scalar = kernels::matmul_kernel_in(Tier::Scalar, DType::F16).unwrap();
    for (tier, pl) in tiers {
        for (m, k, planes) in [(8, 16, 1), (24, 48, 1), (16, 32, 3), (48, k_big, 1)] {
            let x = rand_vec(k * m * planes, (m * 3 + k) as u64);
            let plain = quantize_to_vec(DType::F16, &x).unwrap();
            let wf = dequantize_to_vec(DType::F16, &plain, k * m * planes).unwrap();
            let al = Layout::contiguous(DType::F16, &[k, m, planes]).unwrap();
            let buf = RepackBufferType.alloc(plain.len()).unwrap();
            let base_ptr = buf.host_ptr().unwrap().as_ptr();
            under(tier, || {
                assert!(repack::can_repack(&al), "{tier:?} F16 {m}x{k}");
                buf.init_tensor(&al, 0).unwrap();
                buf.write(0, &plain).unwrap();
            });
            // SAFETY: the buffer holds plain.len() bytes and lives until the end.
            let stored = unsafe { std::slice::from_raw_parts(base_ptr, plain.len()) };
            check_stored_f16(k, &plain, stored);
            assert_eq!(packing(&buf, 0, plain.len()), Packing::Packed(DType::F16, pl));
            let mut back = vec![0u8; plain.len()];
            buf.read(0, &mut back).unwrap();
            assert_eq!(back, plain, "{tier:?} F16: read returns the plain bytes");
            for n in [1usize, 2, 3, 5, 7, 17, 24, 64, 130] {
                let xa = rand_vec(k * n * planes, 300 + n as u64);
                let bl = Layout::contiguous(DType::F32, &[k, n, planes]).unwrap();
                let dl = Layout::contiguous(DType::F32, &[m, n, planes]).unwrap();
                let run = |kernel: Option<&kernels::MatKernel>, wa: TensorRef, threads: usize| {
                    let mut d = vec![f32::NAN; m * n * planes];
                    let (dst, wb) = (
                        (dl, d.as_mut_ptr().cast::<u8>()),
                        TensorRef::plain(bl, xa.as_ptr().cast()),
                    );
                    let p = pool(threads);
                    let mm = MatMul::new();
                    // SAFETY: every operand holds its layout's bytes; dst is separate.
                    unsafe {
                        match kernel {
                            Some(kern) => mm.run_with(kern, &p, threads, dst, wa, wb, &|| false),
                            None => mm.run(&p, threads, dst, wa, wb, &|| false),
                        }
                    }
                    .unwrap();
                    d
                };
                let packed_kernel = repack::kernel_for(pl, DType::F16).unwrap();
                let gemm = tessera_cpu::matmul::uses_gemm(&packed_kernel, n, k);
                let min_n = tessera_cpu::matmul::F16_GEMM_MIN_N;
                assert_eq!(gemm, n >= min_n, "{tier:?} F16 n {n}");
                let base = run(Some(&scalar), TensorRef::plain(al, plain.as_ptr()), 1);
                let mut runs = Vec::new();
                for threads in [1, 2] {
                    let before = kernels::tier_use_count(tier);
                    let stored = TensorRef::packed(al, base_ptr, pl);
                    runs.push((threads, under(tier, || run(None, stored, threads))));
                    assert!(kernels::tier_use_count(tier) > before, "{tier:?} kernel ran");
                }
                for p in 0..planes {
                    let (wp, xp) = (&wf[p * m * k..][..m * k], &xa[p * n * k..][..n * k]);
                    let exact = exact_product(wp, xp, k, m, n);
                    let plane = |d: &[f32]| d[p * m * n..][..m * n].to_vec();
                    let what = format!("scalar F16 {m}x{n}x{k} plane {p}");
                    assert_within(&what, &scalar, n, k, &plane(&base), &exact);
                    for (threads, got) in &runs {
                        let what = format!("{tier:?} F16 {m}x{n}x{k} plane {p} t{threads}");
                        assert_within(&what, &packed_kernel, n, k, &plane(got), &exact);
                    }
                }
            }
        }
    }
}

#[test]
fn f16_pack_as_round_trips_in_every_layout() {
    for pl in [PackLayout::R16W4, PackLayout::R8W8, PackLayout::R4W4, PackLayout::R4W8] {
        assert_eq!(repack::group_rows(pl, DType::F16), 8);
        let (k, m) = (48, 16);
        let plain = quantize_to_vec(DType::F16, &rand_vec(k * m, 31)).unwrap();
        let mut packed = vec![0u8; plain.len()];
        repack::pack_as(pl, DType::F16, k, &plain, &mut packed).unwrap();
        check_stored_f16(k, &plain, &packed);
        let mut back = vec![0u8; plain.len()];
        repack::unpack_as(pl, DType::F16, k, &packed, &mut back).unwrap();
        assert_eq!(back, plain, "{pl:?}");
        // Rows not a multiple of 8, or of values not whole 16-value blocks, are refused.
        let mut out = vec![0u8; 2 * k * 12];
        assert!(repack::pack_as(pl, DType::F16, k, &plain[..out.len()], &mut out).is_err());
        let mut out = vec![0u8; 2 * 40 * 8];
        let src = quantize_to_vec(DType::F16, &rand_vec(40 * 8, 32)).unwrap();
        assert!(repack::pack_as(pl, DType::F16, 40, &src, &mut out).is_err());
    }
}
