//! The scalar reference reads long rows in spans of 4096 values (bounded scratch, issue 18):
//! rows of several spans plus a partial one must give exactly what the op's definition gives
//! for the whole row, computed here independently (f64 sums, whole-row quantization by
//! `tessera_core::quant`).

use tessera_core::quant::{dequantize_row, quantize_row};
use tessera_core::tensor_data::{get_f32, get_tensor, set_f32, set_tensor};
use tessera_core::{DType, Graph};
use tessera_cpu::buffer::allocate_all;
use tessera_cpu::reference::compute_graph;

/// Two whole spans and a partial third, a multiple of 256 (every block size).
const N: usize = 2 * 4096 + 3 * 256;

fn never() -> bool {
    false
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
}

#[test]
fn reductions_over_long_rows_match_f64_sums() {
    let x = values(N * 2, 1);
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[N, 2]).unwrap();
    let sum = g.sum(a).unwrap();
    let rows = g.sum_rows(a).unwrap();
    let mean = g.mean(a).unwrap();
    let arg = g.argmax(a).unwrap();
    allocate_all(&mut g).unwrap();
    let mut x = x;
    // The largest value of row 0 in the third span, of row 1 in the first.
    x[2 * 4096 + 5] = 7.0;
    x[N + 17] = 9.0;
    set_f32(&g, a, &x).unwrap();
    compute_graph(&g, &never).unwrap();
    let row_sum = |r: usize| x[r * N..(r + 1) * N].iter().map(|&v| f64::from(v)).sum::<f64>();
    let total = row_sum(0) + row_sum(1);
    assert_eq!(get_f32(&g, sum).unwrap(), [total as f32]);
    assert_eq!(get_f32(&g, rows).unwrap(), [row_sum(0) as f32, row_sum(1) as f32]);
    let means = [(row_sum(0) / N as f64) as f32, (row_sum(1) / N as f64) as f32];
    assert_eq!(get_f32(&g, mean).unwrap(), means);
    let idx = get_tensor(&g, arg).unwrap();
    let idx: Vec<i32> =
        idx.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(idx, [2 * 4096 + 5, 17]);
}

#[test]
fn element_wise_ops_over_long_rows_match_the_definition() {
    let (x, y) = (values(N, 2), values(N / 4, 3));
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[N]).unwrap();
    // b broadcast four times along the row: its values repeat across span boundaries.
    let b = g.input("b", DType::F32, &[N / 4]).unwrap();
    let add = g.add(a, b).unwrap();
    let scaled = g.scale_bias(a, 3.0, 0.5).unwrap();
    allocate_all(&mut g).unwrap();
    set_f32(&g, a, &x).unwrap();
    set_f32(&g, b, &y).unwrap();
    compute_graph(&g, &never).unwrap();
    let want: Vec<f32> = (0..N).map(|i| x[i] + y[i % (N / 4)]).collect();
    assert_eq!(get_f32(&g, add).unwrap(), want);
    let want: Vec<f32> = x.iter().map(|&v| v * 3.0 + 0.5).collect();
    assert_eq!(get_f32(&g, scaled).unwrap(), want);
}

/// Conversions to and from block types, span by span, are bit for bit the whole-row
/// quantization (blocks are independent), also when the destination's rows are shorter than
/// the source's (CPY reshapes as it converts).
#[test]
fn conversions_and_row_copies_over_long_rows_match_whole_rows() {
    for dtype in [DType::Q4_K, DType::Q8_0, DType::F16] {
        let x = values(N * 2, 4);
        let mut whole = vec![0u8; dtype.row_size(N * 2).unwrap()];
        quantize_row(dtype, &x, &mut whole).unwrap();
        let mut back = vec![0f32; N * 2];
        dequantize_row(dtype, &whole, &mut back).unwrap();

        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[N, 2]).unwrap();
        let q = g.new_tensor(dtype, &[N * 2]).unwrap();
        let cq = g.cpy(a, q).unwrap();
        let f = g.new_tensor(DType::F32, &[N / 2, 4]).unwrap();
        let cf = g.cpy(cq, f).unwrap();
        let idx = g.input("idx", DType::I32, &[3]).unwrap();
        let table = g.input("table", dtype, &[N, 2]).unwrap();
        let picked = g.get_rows(table, idx).unwrap();
        allocate_all(&mut g).unwrap();
        set_f32(&g, a, &x).unwrap();
        set_tensor(&g, table, &whole).unwrap();
        let picks = [1i32, 0, 1];
        set_tensor(&g, idx, &picks.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>())
            .unwrap();
        compute_graph(&g, &never).unwrap();
        assert_eq!(get_tensor(&g, cq).unwrap(), whole, "{dtype}: F32 -> {dtype}");
        assert_eq!(get_f32(&g, cf).unwrap(), back, "{dtype}: {dtype} -> F32");
        let want: Vec<f32> = picks
            .iter()
            .flat_map(|&r| back[r as usize * N..(r as usize + 1) * N].to_vec())
            .collect();
        assert_eq!(get_f32(&g, picked).unwrap(), want, "{dtype}: GET_ROWS");
    }
}

#[test]
fn set_rows_over_long_rows_writes_whole_rows() {
    let rows = values(N * 2, 5);
    let mut g = Graph::new();
    let cache = g.new_tensor(DType::F16, &[N, 3]).unwrap();
    let src = g.input("src", DType::F32, &[N, 2]).unwrap();
    let idx = g.input("idx", DType::I32, &[2]).unwrap();
    let w = g.set_rows(cache, src, idx).unwrap();
    allocate_all(&mut g).unwrap();
    set_f32(&g, src, &rows).unwrap();
    set_tensor(&g, idx, &[2i32, 0].iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>())
        .unwrap();
    compute_graph(&g, &never).unwrap();
    let got: Vec<f32> = get_tensor(&g, w)
        .unwrap()
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    let half = |v: f32| half::f16::from_f32(v).to_f32();
    for i in 0..N {
        assert_eq!(got[2 * N + i], half(rows[i]), "row 2, value {i}");
        assert_eq!(got[i], half(rows[N + i]), "row 0, value {i}");
        assert_eq!(got[N + i], 0.0, "row 1 untouched, value {i}");
    }
}
