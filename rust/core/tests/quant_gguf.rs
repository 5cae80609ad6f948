//! GGUF block formats against an independent implementation: the `gguf` package on PyPI
//! (`gguf.quants`, NumPy).
//!
//! `gguf_reference_agrees` writes input rows and Tessera's quantized bytes and dequantized
//! values to a temporary directory and runs `tests/gguf_ref.py` on it with the Python named by
//! `TESSERA_PYTHON` (default `python3`). For every type the script compares:
//!
//! | type | quantize | dequantize |
//! |---|---|---|
//! | F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 | bytes == gguf | values == gguf (bit for bit) |
//! | Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS | gguf has none (compared if a later gguf adds it) | gguf's dequantization of Tessera's bytes == Tessera's values |
//! | Q8_1 (not in gguf) | d and qs == gguf's Q8_0 bytes, s == f16(d * sum(qs)) in NumPy | - |
//! | Q8_K (not in gguf) | bytes == a NumPy model of ggml's `quantize_row_q8_K_ref` | - |
//!
//! Dequantization is also compared on rows of random block bytes (with finite scales), which
//! reach quants, scales and signs that quantization rarely produces.
//!
//! With `TESSERA_GGML_LIB=/path/to/libggml-base.so` the script also compares every type with
//! ggml's own `quantize_row_*_ref` / `dequantize_row_*` through ctypes.
//!
//! The test fails, never skips, when Python, NumPy or gguf is missing:
//! `pip install gguf numpy`.
//!
//! `round_trip_error_bounds` and `q8_structure` need no Python: documented error bounds per type
//! and the structural invariants of Q8_1 and Q8_K.

use half::f16;
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_core::quant::{
    self, as_blocks, blocks_as_bytes_mut, quantize_row_q8_1, quantize_row_q8_k, Block, BlockIQ4NL,
    BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, QK_K,
};
use tessera_core::DType;

/// Values per row: 4 super-blocks, 32 legacy blocks.
const N: usize = 1024;

/// SplitMix64: a small seeded generator, so that the rows are the same on every run.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
    fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// The named input rows, each of `N` values.
fn rows() -> Vec<(String, Vec<f32>)> {
    let mut rng = Rng(0x7e55_e7a0);
    let mut rows: Vec<(String, Vec<f32>)> = Vec::new();
    for seed in 0..6 {
        rows.push((format!("random_normal_{seed}"), rng.normals(N)));
    }
    // Uniform values with a different magnitude per 32 values (1e-3 .. 1e3).
    let mixed = (0..N)
        .map(|i| {
            let scale = 10f64.powf(((i / 32) % 7) as f64 - 3.0) as f32;
            (rng.uniform() as f32 * 2.0 - 1.0) * scale
        })
        .collect();
    rows.push(("mixed_block_scales".into(), mixed));
    rows.push(("all_zero".into(), vec![0.0; N]));
    rows.push(("constant_positive".into(), vec![0.7; N]));
    rows.push(("constant_negative".into(), vec![-3.25; N]));
    let mut outlier: Vec<f32> = rng.normals(N).iter().map(|v| v * 0.1).collect();
    outlier[77] = 1000.0;
    outlier[600] = -250.0;
    rows.push(("one_large_outlier".into(), outlier));
    rows.push(("very_small_1e-30".into(), rng.normals(N).iter().map(|v| v * 1e-30).collect()));
    rows.push(("negative_only".into(), rng.normals(N).iter().map(|v| -v.abs()).collect()));
    rows.push(("positive_only".into(), rng.normals(N).iter().map(|v| v.abs() + 0.25).collect()));
    rows.push(("ramp".into(), (0..N).map(|i| i as f32 / (N - 1) as f32 * 2.0 - 1.0).collect()));
    let mut sparse = vec![0f32; N];
    for i in (0..N).step_by(37) {
        sparse[i] = rng.normal() * 3.0;
    }
    rows.push(("sparse".into(), sparse));
    rows.push(("large_1e4".into(), rng.normals(N).iter().map(|v| v * 1e4).collect()));
    // Varied distributions: per-64 magnitudes from 1e-2 to 1e2, heavy tails, few discrete
    // levels (ties and equal magnitudes), log-uniform with mixed signs, sparse, and offset.
    for k in 0..60 {
        let kind = k % 6;
        let r: Vec<f32> = (0..N)
            .map(|i| {
                let v = rng.normal();
                match kind {
                    0 => v * 10f32.powi((i / 64) as i32 % 5 - 2),
                    1 => v / (rng.uniform() as f32 + 1e-3),
                    2 => ((rng.uniform() * 9.0).floor() as f32 - 4.0) * 0.5,
                    3 => (rng.uniform() as f32).ln() * if i % 3 == 0 { -1.0 } else { 1.0 },
                    4 => {
                        if rng.uniform() < 0.9 {
                            0.0
                        } else {
                            v
                        }
                    }
                    _ => v + 3.0,
                }
            })
            .collect();
        rows.push((format!("stress_{k}"), r));
    }
    rows.push((
        "integers".into(),
        (0..N).map(|_| (rng.uniform() * 33.0).floor() as f32 - 16.0).collect(),
    ));
    rows
}

/// Rows of random block bytes (every bit pattern is a valid block) with finite scales, so that
/// the dequantizers are also checked on quants, scales and signs that quantization rarely makes.
const RANDOM_BLOCK_ROWS: usize = 4;

/// A random finite f16 in [-2, 2).
fn rand_f16(rng: &mut Rng) -> f16 {
    f16::from_f32(rng.uniform() as f32 * 4.0 - 2.0)
}

/// `rows * row_size(N)` random bytes of blocks `B`, with `fix` making the scales finite.
fn random_blocks<B: Block>(rng: &mut Rng, rows: usize, fix: impl Fn(&mut B, &mut Rng)) -> Vec<u8> {
    let mut blocks = vec![B::ZERO; rows * N / B::BLOCK_SIZE];
    for b in blocks_as_bytes_mut(&mut blocks) {
        *b = rng.next_u64() as u8;
    }
    for b in &mut blocks {
        fix(b, rng);
    }
    blocks_as_bytes_mut(&mut blocks).to_vec()
}

fn random_block_rows(t: DType, rng: &mut Rng) -> Vec<u8> {
    let r = RANDOM_BLOCK_ROWS;
    match t {
        DType::Q4_0 => random_blocks::<BlockQ4_0>(rng, r, |b, g| b.d = rand_f16(g)),
        DType::Q4_1 => {
            random_blocks::<BlockQ4_1>(rng, r, |b, g| (b.d, b.m) = (rand_f16(g), rand_f16(g)))
        }
        DType::Q5_0 => random_blocks::<BlockQ5_0>(rng, r, |b, g| b.d = rand_f16(g)),
        DType::Q5_1 => {
            random_blocks::<BlockQ5_1>(rng, r, |b, g| (b.d, b.m) = (rand_f16(g), rand_f16(g)))
        }
        DType::Q8_0 => random_blocks::<BlockQ8_0>(rng, r, |b, g| b.d = rand_f16(g)),
        DType::Q8_1 => {
            random_blocks::<BlockQ8_1>(rng, r, |b, g| (b.d, b.s) = (rand_f16(g), rand_f16(g)))
        }
        DType::Q2_K => {
            random_blocks::<BlockQ2K>(rng, r, |b, g| (b.d, b.dmin) = (rand_f16(g), rand_f16(g)))
        }
        DType::Q3_K => random_blocks::<BlockQ3K>(rng, r, |b, g| b.d = rand_f16(g)),
        DType::Q4_K => {
            random_blocks::<BlockQ4K>(rng, r, |b, g| (b.d, b.dmin) = (rand_f16(g), rand_f16(g)))
        }
        DType::Q5_K => {
            random_blocks::<BlockQ5K>(rng, r, |b, g| (b.d, b.dmin) = (rand_f16(g), rand_f16(g)))
        }
        DType::Q6_K => random_blocks::<BlockQ6K>(rng, r, |b, g| b.d = rand_f16(g)),
        DType::Q8_K => random_blocks::<BlockQ8K>(rng, r, |b, g| b.d = rng_f32(g)),
        DType::IQ4_NL => random_blocks::<BlockIQ4NL>(rng, r, |b, g| b.d = rand_f16(g)),
        DType::IQ4_XS => random_blocks::<BlockIQ4XS>(rng, r, |b, g| b.d = rand_f16(g)),
        _ => unimplemented!("{t} is not quantized"),
    }
}

fn rng_f32(rng: &mut Rng) -> f32 {
    rng.uniform() as f32 * 4.0 - 2.0
}

/// Every type the script checks: the quantized ones and the plain floats.
fn types() -> Vec<DType> {
    let mut t = vec![DType::F32, DType::F16, DType::BF16];
    t.extend(DType::QUANTIZED);
    t
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn python() -> String {
    std::env::var("TESSERA_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

#[test]
fn gguf_reference_agrees() {
    let rows = rows();
    let dir = work_dir("quant_gguf");
    let input: Vec<f32> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    std::fs::write(dir.join("input.f32"), f32_bytes(&input)).unwrap();
    let types = types();
    for &t in &types {
        let mut q = Vec::new();
        let mut deq = Vec::new();
        for (name, x) in &rows {
            let bytes = quant::quantize_to_vec(t, x).unwrap_or_else(|e| panic!("{t} {name}: {e}"));
            let y = quant::dequantize_to_vec(t, &bytes, N).unwrap();
            q.extend_from_slice(&bytes);
            deq.extend_from_slice(&f32_bytes(&y));
        }
        std::fs::write(dir.join(format!("{t}.q")), q).unwrap();
        std::fs::write(dir.join(format!("{t}.deq")), deq).unwrap();
        if t.is_quantized() {
            let mut rng = Rng(0xb10c + u64::from(t.ggml_id()));
            let q = random_block_rows(t, &mut rng);
            let y = quant::dequantize_to_vec(t, &q, RANDOM_BLOCK_ROWS * N).unwrap();
            std::fs::write(dir.join(format!("{t}.rand.q")), q).unwrap();
            std::fs::write(dir.join(format!("{t}.rand.deq")), f32_bytes(&y)).unwrap();
        }
    }
    let names: Vec<String> = rows.iter().map(|(n, _)| format!("{n:?}")).collect();
    let tnames: Vec<String> = types.iter().map(|t| format!("{:?}", t.name())).collect();
    let sizes: Vec<String> = types
        .iter()
        .map(|t| format!("{:?}: [{}, {}]", t.name(), t.block_size(), t.type_size()))
        .collect();
    let manifest = format!(
        "{{\"n\": {N}, \"rows\": [{}], \"types\": [{}], \"sizes\": {{{}}}}}",
        names.join(", "),
        tnames.join(", "),
        sizes.join(", ")
    );
    std::fs::write(dir.join("manifest.json"), manifest).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("gguf_ref.py");
    let py = python();
    let out = Command::new(&py).arg(&script).arg(&dir).output().unwrap_or_else(|e| {
        panic!(
            "cannot run Python interpreter {py:?} ({e}). This test compares the block formats \
             with the `gguf` package and needs Python 3 with NumPy and gguf: install them with \
             `pip install gguf numpy`, or set TESSERA_PYTHON to an interpreter that has them."
        )
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    if !out.status.success() {
        let hint = if out.status.code() == Some(2) {
            "\nNumPy or gguf is missing: install them with `pip install gguf numpy` \
             (or set TESSERA_PYTHON to an interpreter that has them)."
        } else {
            ""
        };
        panic!("gguf_ref.py failed ({}):\n{stdout}\n{stderr}{hint}", out.status);
    }
    for t in &types {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("OK {t}: "))),
            "gguf_ref.py did not report {t}:\n{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Largest |x| of each block of `bs` values.
fn block_amax(x: &[f32], bs: usize) -> Vec<f32> {
    x.chunks(bs).map(|b| b.iter().fold(0f32, |m, v| m.max(v.abs()))).collect()
}

/// Documented round-trip bounds: for each block, max |x - dequantize(quantize(x))| must be at most
/// `rel * amax + abs`, with `amax` the block's largest magnitude.
///
/// * Q8_0, Q8_1: `d = amax / 127` and `|x - q d| <= d / 2`; storing `d` as f16 adds at most
///   `127 |d - f16(d)|`, i.e. `amax / 2048` for normal f16 and `127 * 2^-25` when `d`
///   underflows f16's normal range: `rel = 1/254 + 1/2048 (+ f32 rounding) = 0.0045`,
///   `abs = 4e-6`.
/// * Q8_K: `d` is f32: `rel = 1/254 * (1 + 1e-5)`, `abs = 0`.
/// * Q4_0: `d = max / -8` and the value opposite to `max` may clamp from 16 to 15, so the error
///   is at most `|d| = amax / 8`, plus f16 rounding of `d` on up to 8 steps:
///   `rel = 1/8 + 8/2048`, `abs = 8 * 2^-25`.
/// * Q5_0: likewise with 16 levels: `rel = 1/16 + 16/2048`, `abs = 16 * 2^-25`.
#[test]
fn round_trip_error_bounds() {
    let bounds: [(DType, f32, f32); 5] = [
        (DType::Q8_0, 0.0045, 4e-6),
        (DType::Q8_1, 0.0045, 4e-6),
        (DType::Q8_K, 1.0 / 254.0 * (1.0 + 1e-5), 0.0),
        (DType::Q4_0, 1.0 / 8.0 + 8.0 / 2048.0, 8.0 * 2f32.powi(-25)),
        (DType::Q5_0, 1.0 / 16.0 + 16.0 / 2048.0, 16.0 * 2f32.powi(-25)),
    ];
    for (name, x) in rows() {
        for &(t, rel, abs) in &bounds {
            let q = quant::quantize_to_vec(t, &x).unwrap();
            let y = quant::dequantize_to_vec(t, &q, N).unwrap();
            let bs = t.block_size();
            for (b, amax) in block_amax(&x, bs).into_iter().enumerate() {
                let err = x[b * bs..(b + 1) * bs]
                    .iter()
                    .zip(&y[b * bs..(b + 1) * bs])
                    .fold(0f32, |m, (a, c)| m.max((a - c).abs()));
                assert!(
                    err <= rel * amax + abs,
                    "{t} row {name} block {b}: max error {err} > {rel} * {amax} + {abs}"
                );
            }
        }
    }
}

/// Regression guard on quality: relative RMS error `rms(x - y) / rms(x)` of each type on the
/// random normal rows must stay within about 25% above what the reference quantizers reach
/// (measured: Q4_0 0.085, Q4_1 0.078, Q5_0 0.042, Q5_1 0.037, Q8_0/Q8_1 0.0054, Q2_K 0.29,
/// Q3_K 0.15, Q4_K 0.071, Q5_K 0.036, Q6_K 0.018, Q8_K 0.0068, IQ4_NL 0.078, IQ4_XS 0.076;
/// these are ggml's own numbers, since the bytes match ggml's). The byte-exact comparisons are
/// what tie the results to ggml.
#[test]
fn relative_rms_error_on_normal_data() {
    let bounds: [(DType, f64); 14] = [
        (DType::Q4_0, 0.107),
        (DType::Q4_1, 0.098),
        (DType::Q5_0, 0.053),
        (DType::Q5_1, 0.047),
        (DType::Q8_0, 0.0067),
        (DType::Q8_1, 0.0067),
        (DType::Q2_K, 0.36),
        (DType::Q3_K, 0.19),
        (DType::Q4_K, 0.089),
        (DType::Q5_K, 0.045),
        (DType::Q6_K, 0.022),
        (DType::Q8_K, 0.0085),
        (DType::IQ4_NL, 0.098),
        (DType::IQ4_XS, 0.095),
    ];
    let rows = rows();
    for &(t, bound) in &bounds {
        let (mut se, mut ss) = (0f64, 0f64);
        for (_, x) in rows.iter().filter(|(n, _)| n.starts_with("random_normal")) {
            let q = quant::quantize_to_vec(t, x).unwrap();
            let y = quant::dequantize_to_vec(t, &q, N).unwrap();
            for (a, b) in x.iter().zip(&y) {
                se += f64::from(a - b).powi(2);
                ss += f64::from(*a).powi(2);
            }
        }
        let rel = (se / ss).sqrt();
        println!("{t}: relative RMS error {rel:.5} (bound {bound})");
        assert!(rel <= bound, "{t}: relative RMS error {rel} > {bound}");
    }
}

/// Q8_1: `d = f16(amax / 127)` and `s = f16(d_f32 * sum(qs))`; Q8_K: `bsums` are the sums of
/// the 16-value groups and `d = 1 / (-127 / max)`.
#[test]
fn q8_structure() {
    for (name, x) in rows() {
        let mut b1 =
            vec![BlockQ8_1 { d: half::f16::ZERO, s: half::f16::ZERO, qs: [0; 32] }; N / 32];
        quantize_row_q8_1(&x, &mut b1).unwrap();
        for (i, (b, xs)) in b1.iter().zip(x.chunks(32)).enumerate() {
            let amax = xs.iter().fold(0f32, |m, v| if m > v.abs() { m } else { v.abs() });
            let d32 = amax / 127.0;
            let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
            assert_eq!(b.d.to_bits(), half::f16::from_f32(d32).to_bits(), "Q8_1 d, {name} {i}");
            assert_eq!(
                b.s.to_bits(),
                half::f16::from_f32(sum as f32 * d32).to_bits(),
                "Q8_1 s, {name} block {i}"
            );
        }

        let mut bytes = vec![0u8; DType::Q8_K.row_size(N).unwrap() + 4];
        // Find a 4-byte aligned start inside the buffer for the typed view.
        let off = (4 - bytes.as_ptr() as usize % 4) % 4;
        let view = &mut bytes[off..off + DType::Q8_K.row_size(N).unwrap()];
        quant::quantize_row(DType::Q8_K, &x, view).unwrap();
        let blocks: &[BlockQ8K] = as_blocks(view).unwrap();
        let mut direct = vec![blocks[0]; N / QK_K];
        quantize_row_q8_k(&x, &mut direct).unwrap();
        assert_eq!(blocks, &direct[..], "{name}");
        for (i, (b, xs)) in blocks.iter().zip(x.chunks(QK_K)).enumerate() {
            for (g, &s) in b.bsums.iter().enumerate() {
                let sum: i32 = b.qs[16 * g..16 * g + 16].iter().map(|&q| i32::from(q)).sum();
                assert_eq!(i32::from(s), sum, "Q8_K bsums, {name} block {i} group {g}");
            }
            let max = xs.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let d = if max == 0.0 { 0.0 } else { 1.0 / (-127.0 / max) };
            assert_eq!(b.d.to_bits(), d.to_bits(), "Q8_K d, {name} block {i}");
            assert!(b.qs.iter().all(|&q| q >= -127), "Q8_K qs in -127..=127, {name} block {i}");
        }
    }
}
