//! Quantized KV caches on the GPU: SET_ROWS quantizing F32 rows into Q8_0 / Q4_0 cache rows,
//! compared byte for byte with the reference (ggml's reference quantizers), and FLASH_ATTN_EXT
//! reading Q8_0 / Q4_0 keys and values (dequantized in the shader), compared with the reference
//! over the same blocks.

use crate::case;
use crate::common::{check, gpu, i32_bytes, run_gpu, run_reference, Rng};
use tessera_core::{DType, Graph};

/// F32 values as bytes.
fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Source rows of `ne0` values: random values of several magnitudes, and blocks built to hit
/// the quantizers' edge cases: an all-zero block, ties of `x * id` at .5 (Q8_0 rounds them away
/// from zero, Q4_0 truncates `x * id + 8.5`), and a block whose largest magnitude appears with
/// both signs (Q4_0 takes the first).
fn rows(rng: &mut Rng, ne0: usize, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = Vec::with_capacity(ne0 * n);
    for r in 0..n {
        let scale = [1.0f32, 1e-3, 40.0][r % 3];
        v.extend((0..ne0).map(|_| rng.uniform(-1.0, 1.0) * scale));
    }
    if ne0 >= 128 {
        // The last row (the one written when indices repeat): block 0 zeros; block 1 with amax
        // 127 (Q8_0: d = 1) and halves; block 2 with max -8 (Q4_0: d = 1) and halves; block 3
        // with +-6 (the first is +6).
        let r = (n - 1) * ne0;
        v[r..r + 32].fill(0.0);
        for j in 0..32 {
            v[r + 32 + j] = if j == 0 { 127.0 } else { j as f32 - 16.5 };
            v[r + 64 + j] = if j == 5 { -8.0 } else { (j % 16) as f32 * 0.5 - 3.5 };
            v[r + 96 + j] = match j {
                3 => 6.0,
                20 => -6.0,
                _ => j as f32 * 0.1 - 1.6,
            };
        }
    }
    v
}

/// SET_ROWS into Q8_0 and Q4_0 caches: the blocks the GPU writes are the reference's, byte for
/// byte (see `shaders/set_rows.wgsl` for when another driver's division may differ), including
/// a repeated index (the later row wins), broadcast indices and rows from a transposed view.
#[test]
fn set_rows_quantizes_cache_rows_as_the_reference() {
    let Some(dev) = gpu() else { return };
    for dtype in [DType::Q8_0, DType::Q4_0] {
        let mut rng = Rng::new(11);
        let many: Vec<i32> = (0..100).map(|i| if i % 3 == 0 { 7 } else { i % 16 }).collect();
        for (ne0, idx) in [(256usize, vec![3, 0, 9, 3, 15]), (32, vec![1, 4]), (160, many)] {
            let mut g = Graph::new();
            let cache = g.input("cache", dtype, &[ne0, 16]).unwrap();
            let src = g.input("rows", DType::F32, &[ne0, idx.len()]).unwrap();
            let ids = g.input("ids", DType::I32, &[idx.len()]).unwrap();
            let c = g.set_rows(cache, src, ids).unwrap();
            let name = format!("set_rows {dtype} [{ne0},16] by {} indices", idx.len());
            let k = case(name.clone(), g, c, 0.0);
            let before = crate::common::random_bytes(&mut rng, dtype, ne0 * 16);
            let inputs = vec![
                (cache, before.clone()),
                (src, f32_bytes(&rows(&mut rng, ne0, idx.len()))),
                (ids, i32_bytes(&idx)),
            ];
            let got = run_gpu(&dev, &k, &inputs).unwrap();
            let want = run_reference(&k, &inputs).unwrap();
            let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            let changed = want.iter().zip(&before).filter(|(a, b)| a != b).count();
            eprintln!("{name}: {diff} of {} bytes differ ({changed} written)", got.len());
            assert!(changed > 0, "{name}: nothing written");
            assert_eq!(diff, 0, "{name}: the GPU's blocks are not the reference's");
        }
        // Indices broadcast over dims 2 and 3, rows from a transposed view.
        let mut g = Graph::new();
        let cache = g.input("cache", dtype, &[64, 6, 4, 2]).unwrap();
        let r0 = g.input("rows", DType::F32, &[3, 64, 4, 2]).unwrap();
        let src = g.permute(r0, [1, 0, 2, 3]).unwrap();
        let ids = g.input("ids", DType::I32, &[3, 2, 1]).unwrap();
        let c = g.set_rows(cache, src, ids).unwrap();
        let k = case(format!("set_rows {dtype} broadcast indices, transposed rows"), g, c, 0.0);
        let inputs = vec![
            (cache, crate::common::random_bytes(&mut rng, dtype, 64 * 6 * 8)),
            (r0, f32_bytes(&rows(&mut rng, 64, 3 * 8))),
            (ids, i32_bytes(&[5, 0, 2, 1, 1, 4])),
        ];
        let got = run_gpu(&dev, &k, &inputs).unwrap();
        assert_eq!(got, run_reference(&k, &inputs).unwrap(), "{dtype}: broadcast indices");
    }
}

/// FLASH_ATTN_EXT over views of Q8_0 / Q4_0 caches `[d * n_head_kv, kv_size]` (K and V of the
/// same or different types, and one quantized beside an F16 one), grouped-query heads, a causal
/// mask: within the F32 tolerance of the reference, which dequantizes the same blocks (every
/// dequantized value `q * d` is exact in f32, so only the sums' order differs).
#[test]
fn flash_attention_reads_quantized_caches() {
    let Some(dev) = gpu() else { return };
    let types = [
        (DType::Q8_0, DType::Q8_0),
        (DType::Q4_0, DType::Q4_0),
        (DType::Q8_0, DType::Q4_0),
        (DType::F16, DType::Q8_0),
        (DType::Q4_0, DType::F16),
    ];
    for (kt, vt) in types {
        for (d, n_head, n_head_kv, n_q, n_kv) in [(64, 4, 2, 3, 70), (256, 4, 1, 1, 37)] {
            let kv_size = n_kv + 5;
            let row = |t: DType, n: usize| n / t.block_size() * t.type_size();
            let mut g = Graph::new();
            let kc = g.input("k_cache", kt, &[d * n_head_kv, kv_size]).unwrap();
            let vc = g.input("v_cache", vt, &[d * n_head_kv, kv_size]).unwrap();
            let k = g
                .view(kc, &[d, n_kv, n_head_kv], &[row(kt, d * n_head_kv), row(kt, d)], 0)
                .unwrap();
            let v = g
                .view(vc, &[d, n_kv, n_head_kv], &[row(vt, d * n_head_kv), row(vt, d)], 0)
                .unwrap();
            let q0 = g.input("q", DType::F32, &[d, n_head, n_q]).unwrap();
            let q = g.permute(q0, [0, 2, 1, 3]).unwrap();
            let mask = g.input("mask", DType::F32, &[n_kv, n_q]).unwrap();
            let p = tessera_core::AttnParams {
                scale: 1.0 / (d as f32).sqrt(),
                max_bias: 0.0,
                softcap: 0.0,
            };
            let o = g.flash_attn_ext(q, k, v, Some(mask), p).unwrap();
            let name = format!("flash_attn_ext k {kt} v {vt} d {d} heads {n_head}/{n_head_kv}");
            let mut c = case(name, g, o, crate::TOL);
            let causal: Vec<f32> = (0..n_q)
                .flat_map(|i| {
                    (0..n_kv).map(move |j| if j > n_kv - n_q + i { f32::NEG_INFINITY } else { 0.0 })
                })
                .collect();
            c.data.insert(mask, f32_bytes(&causal));
            check(&dev, &c);
        }
    }
}
