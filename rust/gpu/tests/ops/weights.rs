//! MUL_MAT and GET_ROWS with every weight type: the matrix-vector (N <= 8) and tiled kernels
//! on shapes that are not multiples of the tiles, broadcast batches, strided views; GET_ROWS
//! bit for bit equal to `tessera_core::quant::dequantize_row`, and indices out of range
//! reported as errors.

use crate::common::{
    all_gpus, check, gpu, gpu_with_binding_limit, i32_bytes, random_bytes, run_gpu, Case, Rng,
    BLOCK_TYPES,
};
use crate::{case, TOL, TOL_MATMUL};
use std::collections::HashMap;
use tessera_core::backend::Device;
use tessera_core::tensor_data::{get_tensor, set_tensor};
use tessera_core::{quant, DType, Error, Graph};
use tessera_gpu::GpuDevice;

/// Every weight type: the float types, then the GGUF blocks.
fn weight_types() -> Vec<DType> {
    let mut v = vec![DType::F32, DType::F16, DType::BF16];
    v.extend(BLOCK_TYPES);
    v
}

/// (M, N, K) shapes for a weight type of block size `bs`: N <= 8 runs the matrix-vector
/// kernel, larger N the tiled one; M and N cross the 32-wide tile edges.
fn shapes(bs: usize) -> Vec<(usize, usize, usize)> {
    match bs {
        1 => vec![(1, 1, 1), (3, 1, 3), (17, 3, 17), (70, 8, 130), (33, 9, 33), (130, 33, 130)],
        32 => vec![(1, 1, 32), (17, 3, 96), (70, 8, 288), (33, 9, 160), (130, 33, 64), (7, 40, 32)],
        _ => vec![(1, 1, 256), (17, 3, 512), (33, 8, 256), (33, 9, 256), (40, 33, 768)],
    }
}

#[test]
fn mul_mat_every_weight_type_and_odd_shapes() {
    let Some(dev) = gpu() else { return };
    let mut n = 0;
    for dtype in weight_types() {
        for (m, nn, k) in shapes(dtype.block_size()) {
            let mut g = Graph::new();
            let a = g.weight("a", dtype, &[k, m]).unwrap();
            let b = g.input("b", DType::F32, &[k, nn]).unwrap();
            let c = g.mul_mat(a, b).unwrap();
            check(&dev, &case(format!("mul_mat {dtype} M={m} N={nn} K={k}"), g, c, TOL_MATMUL));
            n += 1;
        }
    }
    assert_eq!(n, 3 * 6 + 6 * 6 + 6 * 5);
}

#[test]
fn mul_mat_broadcast_batches() {
    let Some(dev) = gpu() else { return };
    for dtype in weight_types() {
        let k = dtype.block_size().max(64);
        for n in [5, 12] {
            let mut g = Graph::new();
            let a = g.weight("a", dtype, &[k, 9, 2, 1]).unwrap();
            let b = g.input("b", DType::F32, &[k, n, 4, 3]).unwrap();
            let c = g.mul_mat(a, b).unwrap();
            let name = format!("mul_mat {dtype} broadcast [{k},9,2,1] x [{k},{n},4,3]");
            check(&dev, &case(name, g, c, TOL_MATMUL));
        }
    }
}

#[test]
fn mul_mat_strided_operands() {
    let Some(dev) = gpu() else { return };
    // Activations transposed (K along a strided dim) and weights permuted over batches.
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for n in [6, 20] {
            let mut g = Graph::new();
            let a0 = g.weight("a", dtype, &[19, 2, 7]).unwrap();
            let a = g.permute(a0, [0, 2, 1, 3]).unwrap(); // [19, 7, 2]
            let b0 = g.input("b", DType::F32, &[n, 19, 2]).unwrap();
            let b = g.transpose(b0).unwrap(); // [19, n, 2], nb0 = 4 n
            let c = g.mul_mat(a, b).unwrap();
            let name = format!("mul_mat {dtype} permuted weights, transposed activations, N={n}");
            check(&dev, &case(name, g, c, TOL_MATMUL));
        }
    }
    // Block weights: a view of every other row (offsets only 2-byte aligned for most types).
    for dtype in BLOCK_TYPES {
        let k = dtype.block_size().max(64);
        for n in [3, 40] {
            let mut g = Graph::new();
            let a0 = g.weight("a", dtype, &[k, 10]).unwrap();
            let row = dtype.row_size(k).unwrap();
            let a = g.view(a0, &[k, 5], &[2 * row], row).unwrap();
            let b = g.input("b", DType::F32, &[k, n]).unwrap();
            let c = g.mul_mat(a, b).unwrap();
            let name = format!("mul_mat {dtype} strided rows view, N={n}");
            check(&dev, &case(name, g, c, TOL_MATMUL));
        }
    }
}

#[test]
fn mul_mat_f16_and_bf16_activations() {
    let Some(dev) = gpu() else { return };
    for act in [DType::F16, DType::BF16] {
        for (dtype, k) in [(DType::F16, 40), (DType::Q8_0, 64), (DType::Q4_K, 256)] {
            for n in [3, 20] {
                let mut g = Graph::new();
                let a = g.weight("a", dtype, &[k, 17]).unwrap();
                let b0 = g.input("b", act, &[n, k]).unwrap();
                let b = g.transpose(b0).unwrap();
                let c = g.mul_mat(a, b).unwrap();
                let name = format!("mul_mat {dtype} x {act} transposed activations, N={n}");
                check(&dev, &case(name, g, c, TOL_MATMUL));
            }
        }
    }
}

#[test]
fn get_rows_every_type_matches_the_reference() {
    let Some(dev) = gpu() else { return };
    let mut types = weight_types();
    types.push(DType::I32);
    for dtype in types {
        let ne0 = if dtype.is_quantized() { dtype.block_size() * 2 } else { 13 };
        let mut g = Graph::new();
        let a = g.weight("a", dtype, &[ne0, 10, 2]).unwrap();
        let idx = g.input("idx", DType::I32, &[4, 2]).unwrap();
        let c = g.get_rows(a, idx).unwrap();
        let mut k = case(format!("get_rows {dtype} [{ne0}, 10, 2] by [4, 2]"), g, c, TOL);
        k.data.insert(idx, i32_bytes(&[9, 0, 3, 3, 1, 8, 2, 7]));
        check(&dev, &k);
    }
}

/// The GPU's rows are bit for bit `dequantize_row` of the picked rows, for random blocks with
/// every bit pattern of quants, scales and mins.
#[test]
fn get_rows_equals_dequantize_row_bit_for_bit() {
    let Some(dev) = gpu() else { return };
    get_rows_bit_for_bit_on(&dev);
}

fn get_rows_bit_for_bit_on(dev: &GpuDevice) {
    let mut rng = Rng::new(11);
    for dtype in weight_types() {
        let ne0 = dtype.block_size().max(32) * 3;
        let rows = 7;
        let mut g = Graph::new();
        let a = g.weight("a", dtype, &[ne0, rows]).unwrap();
        let idx = g.input("idx", DType::I32, &[5]).unwrap();
        let c = g.get_rows(a, idx).unwrap();
        let table = random_bytes(&mut rng, dtype, ne0 * rows);
        let picks = [6i32, 0, 3, 3, 5];
        let mut data = HashMap::new();
        data.insert(a, table.clone());
        data.insert(idx, i32_bytes(&picks));
        let k =
            Case { name: format!("get_rows {dtype}"), graph: g, output: c, data, tolerance: 0.0 };
        let inputs: Vec<_> = k.data.iter().map(|(&id, b)| (id, b.clone())).collect();
        let got = run_gpu(dev, &k, &inputs).unwrap();
        let row_size = dtype.row_size(ne0).unwrap();
        let mut differ = 0;
        for (r, &p) in picks.iter().enumerate() {
            let p = p as usize;
            let want =
                quant::dequantize_to_vec(dtype, &table[p * row_size..(p + 1) * row_size], ne0)
                    .unwrap();
            for (i, w) in want.iter().enumerate() {
                let at = (r * ne0 + i) * 4;
                let g = f32::from_le_bytes(got[at..at + 4].try_into().unwrap());
                if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
                    if differ < 3 {
                        eprintln!("{dtype}: row {p} value {i}: GPU {g:e}, dequantize_row {w:e}");
                    }
                    differ += 1;
                }
            }
        }
        assert_eq!(
            differ,
            0,
            "{dtype} (shader-f16 {}): {differ} values differ from dequantize_row",
            dev.uses_shader_f16()
        );
    }
}

#[test]
fn get_rows_index_out_of_range_is_an_error() {
    for dev in all_gpus() {
        index_out_of_range_on(&dev);
    }
}

fn index_out_of_range_on(dev: &GpuDevice) {
    let mut backend = dev.init_backend(&Default::default()).unwrap();
    // issue 18's example (a table of one row, index 1), then -1, a k-quant and an I32 table.
    for (dtype, ne0, rows, bad) in [
        (DType::F32, 1, 1, 1),
        (DType::F32, 1, 1, -1),
        (DType::Q4_K, 256, 3, 3),
        (DType::I32, 5, 2, 7),
    ] {
        let mut g = Graph::new();
        let a = g.weight("table", dtype, &[ne0, rows]).unwrap();
        let idx = g.input("idx", DType::I32, &[3]).unwrap();
        let c = g.get_rows(a, idx).unwrap();
        let bt = dev.buffer_type();
        let _buf = tessera_gpu::allocate_graph(&mut g, &bt).unwrap();
        let mut rng = Rng::new(3);
        let table = random_bytes(&mut rng, dtype, ne0 * rows);
        set_tensor(&g, a, &table).unwrap();
        set_tensor(&g, idx, &i32_bytes(&[0, bad, 0])).unwrap();
        match backend.graph_compute(&g) {
            Err(Error::IndexOutOfRange { reason: msg, .. }) => {
                eprintln!("{dtype} index {bad}: {msg}");
                assert!(msg.contains(&format!("row index {bad} ")), "{msg}");
                assert!(msg.contains(&format!("outside 0..{rows}")), "{msg}");
                assert!(msg.contains("indices[1, 0, 0]"), "{msg}");
            }
            other => panic!("{dtype} index {bad}: expected IndexOutOfRange, got {other:?}"),
        }
        // The same backend with good indices computes the right rows (the report is cleared).
        let last = rows as i32 - 1;
        set_tensor(&g, idx, &i32_bytes(&[0, last, 0])).unwrap();
        backend.graph_compute(&g).unwrap();
        let got = get_tensor(&g, c).unwrap();
        let row_bytes = if dtype == DType::I32 { 4 * ne0 } else { dtype.row_size(ne0).unwrap() };
        let want_row = |r: usize| -> Vec<u8> {
            let raw = &table[r * row_bytes..(r + 1) * row_bytes];
            if dtype == DType::I32 {
                raw.to_vec()
            } else {
                let v = quant::dequantize_to_vec(dtype, raw, ne0).unwrap();
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
        };
        let want: Vec<u8> = [0, last as usize, 0].iter().flat_map(|&r| want_row(r)).collect();
        assert_eq!(got, want, "{dtype}: rows after a failed compute");
    }
}

/// Weights and embedding tables larger than one binding (a large vocabulary's output matrix
/// on a device binding 128 MiB) are read in ranges of rows: here with bindings of 16 KiB.
#[test]
fn weights_larger_than_a_binding_are_read_in_ranges_of_rows() {
    let Some(dev) = gpu_with_binding_limit(16384) else { return };
    for (dtype, k) in [(DType::Q6_K, 256), (DType::F32, 33)] {
        let rows = 300; // Q6_K: 62 KiB, 4 ranges; F32: 39 KiB, 3 ranges.
        for n in [1, 9] {
            let mut g = Graph::new();
            let a = g.weight("a", dtype, &[k, rows]).unwrap();
            let b = g.input("b", DType::F32, &[k, n]).unwrap();
            let c = g.mul_mat(a, b).unwrap();
            let t = g.tensor(a).nbytes();
            assert!(t > 16384, "{dtype}: {t} bytes fit one binding");
            check(
                &dev,
                &case(
                    format!("mul_mat {dtype} [{k},{rows}] N={n}, 16 KiB bindings"),
                    g,
                    c,
                    TOL_MATMUL,
                ),
            );
        }
        let mut g = Graph::new();
        let a = g.weight("a", dtype, &[k, rows]).unwrap();
        let idx = g.input("idx", DType::I32, &[6]).unwrap();
        let c = g.get_rows(a, idx).unwrap();
        let mut kc = case(format!("get_rows {dtype} [{k},{rows}], 16 KiB bindings"), g, c, 0.0);
        kc.data.insert(idx, i32_bytes(&[299, 0, 150, 61, 62, 298]));
        check(&dev, &kc);
    }
    // An index out of range is still reported once, by the first range.
    let mut g = Graph::new();
    let a = g.weight("a", DType::F32, &[33, 300]).unwrap();
    let idx = g.input("idx", DType::I32, &[2]).unwrap();
    let c = g.get_rows(a, idx).unwrap();
    let mut kc = case("get_rows F32 out of range, 16 KiB bindings", g, c, 0.0);
    kc.data.insert(idx, i32_bytes(&[5, 300]));
    let inputs: Vec<_> = {
        let mut rng = Rng::new(1);
        vec![(a, random_bytes(&mut rng, DType::F32, 33 * 300)), (idx, i32_bytes(&[5, 300]))]
    };
    match run_gpu(&dev, &kc, &inputs) {
        Err(Error::IndexOutOfRange { reason: msg, .. }) => {
            assert!(msg.contains("row index 300 "), "{msg}")
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
}
