//! SET_ROWS (the KV-cache write) and FLASH_ATTN_EXT (fused attention) on the CPU device,
//! against values computed here in f64 from the stored operands, with the views and strides
//! the language-model runtime uses (permuted queries, K/V views of an F16 cache, grouped-query
//! heads, a causal mask, soft cap, ALiBi).

mod common;

use common::{assert_nmse, from_bytes, set_i32, set_vals, Rng};
use half::f16;
use tessera_core::backend::Backend;
use tessera_core::tensor_data::get_tensor_dense;
use tessera_core::{AttnParams, DType, Error, Graph, TensorId};
use tessera_cpu::buffer::allocate_all;
use tessera_cpu::CpuBackend;

fn compute(g: &Graph, threads: usize) -> tessera_core::Result<()> {
    CpuBackend::new(Some(threads))?.graph_compute(g)
}

fn dense(g: &Graph, id: TensorId) -> Vec<f32> {
    let t = g.tensor(id);
    from_bytes(t.dtype(), &get_tensor_dense(g, id).unwrap(), t.ne()[0])
}

#[test]
fn set_rows_writes_the_indexed_rows_and_converts() {
    for dtype in [DType::F32, DType::F16] {
        let mut g = Graph::new();
        let cache = g.new_tensor(dtype, &[16, 10, 2]).unwrap();
        let rows = g.input("rows", DType::F32, &[16, 3, 2]).unwrap();
        let idx = g.input("idx", DType::I32, &[3, 1]).unwrap();
        let w = g.set_rows(cache, rows, idx).unwrap();
        assert_eq!(g.view_root(w).0, cache, "SET_ROWS is a view of its destination");
        g.set_output(w).unwrap();
        allocate_all(&mut g).unwrap();
        let before = set_vals(&g, cache, &Rng::new(1).vec(320, -1.0, 1.0));
        let vals = set_vals(&g, rows, &Rng::new(2).vec(96, -2.0, 2.0));
        set_i32(&g, idx, &[7, 0, 3]);
        compute(&g, 2).unwrap();
        let got = dense(&g, cache);
        let mut want = before.clone();
        for plane in 0..2 {
            for (i, &to) in [7usize, 0, 3].iter().enumerate() {
                for e in 0..16 {
                    let v = vals[(plane * 3 + i) * 16 + e];
                    let stored = if dtype == DType::F16 { f16::from_f32(v).to_f32() } else { v };
                    want[(plane * 10 + to) * 16 + e] = stored;
                }
            }
        }
        assert_eq!(got, want, "{dtype}");
    }
}

/// SET_ROWS into Q8_0 and Q4_0 caches (the quantized KV cache types): each written row holds
/// exactly the bytes of ggml's reference quantizer (tessera-core's, checked byte for byte against
/// the `gguf` package), the other rows keep theirs.
#[test]
fn set_rows_quantizes_into_q8_0_and_q4_0() {
    for dtype in [DType::Q8_0, DType::Q4_0] {
        for threads in [1, 2] {
            let mut g = Graph::new();
            let cache = g.new_tensor(dtype, &[64, 10, 2]).unwrap();
            let rows = g.input("rows", DType::F32, &[64, 3, 2]).unwrap();
            let idx = g.input("idx", DType::I32, &[3, 1]).unwrap();
            let w = g.set_rows(cache, rows, idx).unwrap();
            g.set_output(w).unwrap();
            allocate_all(&mut g).unwrap();
            let rb = dtype.row_size(64).unwrap();
            let before: Vec<u8> = (0..rb * 20).map(|i| (i * 7 % 251) as u8).collect();
            tessera_core::tensor_data::set_tensor(&g, cache, &before).unwrap();
            let vals = set_vals(&g, rows, &Rng::new(3).vec(64 * 6, -2.0, 2.0));
            set_i32(&g, idx, &[7, 0, 3]);
            compute(&g, threads).unwrap();
            let got = get_tensor_dense(&g, cache).unwrap();
            let mut want = before.clone();
            for plane in 0..2 {
                for (i, &to) in [7usize, 0, 3].iter().enumerate() {
                    let src = &vals[(plane * 3 + i) * 64..][..64];
                    let q = tessera_core::quant::quantize_to_vec(dtype, src).unwrap();
                    want[(plane * 10 + to) * rb..][..rb].copy_from_slice(&q);
                }
            }
            assert_eq!(got, want, "{dtype}, {threads} threads");
        }
    }
}

#[test]
fn set_rows_refuses_indices_out_of_range() {
    for bad in [10, -1] {
        let mut g = Graph::new();
        let cache = g.new_tensor(DType::F16, &[4, 10]).unwrap();
        let rows = g.input("rows", DType::F32, &[4, 2]).unwrap();
        let idx = g.input("idx", DType::I32, &[2]).unwrap();
        let w = g.set_rows(cache, rows, idx).unwrap();
        g.set_output(w).unwrap();
        allocate_all(&mut g).unwrap();
        set_vals(&g, rows, &[1.0; 8]);
        set_i32(&g, idx, &[1, bad]);
        match compute(&g, 1) {
            Err(Error::IndexOutOfRange { op, reason }) => {
                assert_eq!(op, "SET_ROWS");
                assert!(reason.contains(&bad.to_string()), "{reason}")
            }
            other => panic!("index {bad}: expected IndexOutOfRange, got {other:?}"),
        }
    }
}

/// Shapes of one attention case.
struct Case {
    d: usize,
    dv: usize,
    heads: usize,
    kv_heads: usize,
    n_q: usize,
    n_kv: usize,
    params: AttnParams,
    kv_type: DType,
    /// Keys before the first query's position (the rest of the cells are empty, masked);
    /// `None`: the queries are the last `n_q` of the `n_kv` keys.
    past: Option<usize>,
    /// A sliding window: a query sees only the keys less than this many positions back.
    window: Option<usize>,
}

/// Values of the operands as stored (after rounding to their types).
struct Stored {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<f32>,
}

/// The runtime's layout: q from `[D, heads, n_q]` permuted to `[D, n_q, heads]`, k and v
/// views `[D, n_kv, kv_heads]` of caches `[D * kv_heads, n_ctx]`, a causal mask (query `iq` at
/// position `n_kv - n_q + iq` sees keys up to it) with two extra padded rows.
fn attention_graph(c: &Case, rng: &mut Rng) -> (Graph, TensorId, Stored) {
    let n_ctx = c.n_kv + 5;
    let mut g = Graph::new();
    let q_lin = g.input("q", DType::F32, &[c.d, c.heads, c.n_q]).unwrap();
    let q = g.permute(q_lin, [0, 2, 1, 3]).unwrap();
    let kc = g.new_tensor(c.kv_type, &[c.d * c.kv_heads, n_ctx]).unwrap();
    let vc = g.new_tensor(c.kv_type, &[c.dv * c.kv_heads, n_ctx]).unwrap();
    let rs = |n: usize| c.kv_type.row_size(n).unwrap();
    let k = g.view(kc, &[c.d, c.n_kv, c.kv_heads], &[rs(c.d * c.kv_heads), rs(c.d)], 0).unwrap();
    let v = g.view(vc, &[c.dv, c.n_kv, c.kv_heads], &[rs(c.dv * c.kv_heads), rs(c.dv)], 0).unwrap();
    let mask = g.input("mask", DType::F16, &[c.n_kv, c.n_q + 2]).unwrap();
    let out = g.flash_attn_ext(q, k, v, Some(mask), c.params).unwrap();
    g.set_output(out).unwrap();
    allocate_all(&mut g).unwrap();
    let qv = set_vals(&g, q_lin, &rng.vec(c.d * c.heads * c.n_q, -1.0, 1.0));
    let kv = set_vals(&g, kc, &rng.vec(c.d * c.kv_heads * n_ctx, -1.0, 1.0));
    let vv = set_vals(&g, vc, &rng.vec(c.dv * c.kv_heads * n_ctx, -1.0, 1.0));
    let past = c.past.unwrap_or(c.n_kv - c.n_q);
    let mut mv = Vec::new();
    for iq in 0..c.n_q + 2 {
        for j in 0..c.n_kv {
            let in_window = c.window.is_none_or(|w| j + w > past + iq);
            let visible =
                iq < c.n_q && j <= past + iq && in_window && (j % 7 != 3 || j == past + iq);
            mv.push(if visible { 0.0 } else { f32::NEG_INFINITY });
        }
    }
    let mv = set_vals(&g, mask, &mv);
    (g, out, Stored { q: qv, k: kv, v: vv, mask: mv })
}

/// The expected result in f64, straight from the definition.
fn expected(c: &Case, s: &Stored) -> Vec<f64> {
    let group = c.heads / c.kv_heads;
    let n_head_log2 = 1usize << c.heads.ilog2();
    let slope = |h: usize| -> f64 {
        let mb = f64::from(c.params.max_bias);
        if mb == 0.0 {
            return 1.0;
        }
        let m0 = 2f64.powf(-mb / n_head_log2 as f64);
        let m1 = 2f64.powf(-mb / 2.0 / n_head_log2 as f64);
        if h < n_head_log2 {
            m0.powi(h as i32 + 1)
        } else {
            m1.powi(2 * (h - n_head_log2) as i32 + 1)
        }
    };
    let mut out = vec![0f64; c.dv * c.heads * c.n_q];
    for iq in 0..c.n_q {
        for h in 0..c.heads {
            let hk = h / group;
            let q = &s.q[(iq * c.heads + h) * c.d..][..c.d];
            let scores: Vec<f64> = (0..c.n_kv)
                .map(|j| {
                    let k = &s.k[(j * c.kv_heads + hk) * c.d..][..c.d];
                    let dot: f64 =
                        q.iter().zip(k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                    let mut x = dot * f64::from(c.params.scale);
                    let cap = f64::from(c.params.softcap);
                    if cap > 0.0 {
                        x = cap * (x / cap).tanh();
                    }
                    x + slope(h) * f64::from(s.mask[iq * c.n_kv + j])
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|&x| (x - max).exp()).collect();
            let sum: f64 = w.iter().sum();
            for e in 0..c.dv {
                let acc: f64 = (0..c.n_kv)
                    .map(|j| w[j] * f64::from(s.v[(j * c.kv_heads + hk) * c.dv + e]))
                    .sum();
                out[(iq * c.heads + h) * c.dv + e] = acc / sum;
            }
        }
    }
    out
}

#[test]
fn flash_attention_matches_its_definition() {
    let base = AttnParams { scale: 0.125, max_bias: 0.0, softcap: 0.0 };
    let cases = [
        Case {
            d: 64,
            dv: 64,
            heads: 4,
            kv_heads: 2,
            n_q: 5,
            n_kv: 37,
            params: base,
            kv_type: DType::F16,
            past: None,
            window: None,
        },
        Case {
            d: 64,
            dv: 64,
            heads: 4,
            kv_heads: 1,
            n_q: 1,
            n_kv: 300,
            params: base,
            kv_type: DType::F16,
            past: None,
            window: None,
        },
        Case {
            d: 32,
            dv: 48,
            heads: 3,
            kv_heads: 3,
            n_q: 9,
            n_kv: 9,
            params: base,
            kv_type: DType::F32,
            past: None,
            window: None,
        },
        Case {
            d: 32,
            dv: 32,
            heads: 6,
            kv_heads: 2,
            n_q: 4,
            n_kv: 20,
            params: AttnParams { scale: 0.3, max_bias: 8.0, softcap: 20.0 },
            kv_type: DType::F16,
            past: None,
            window: None,
        },
        // Enough (query, head) rows per unit for the rows-in-lanes product (8 x 4 and 4 x 4),
        // with ALiBi, a soft cap and a head size that is not a multiple of the lanes.
        Case {
            d: 40,
            dv: 40,
            heads: 8,
            kv_heads: 2,
            n_q: 12,
            n_kv: 150,
            params: AttnParams { scale: 0.3, max_bias: 8.0, softcap: 20.0 },
            kv_type: DType::F16,
            past: None,
            window: None,
        },
        // A prompt at the start of a padded cache: 6 queries, 256 cells, the rest empty.
        Case {
            d: 256,
            dv: 256,
            heads: 4,
            kv_heads: 1,
            n_q: 6,
            n_kv: 256,
            params: AttnParams { scale: 1.0, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::F16,
            past: Some(0),
            window: None,
        },
        // Generation: one query at position 69 of a 256-cell cache (70 keys, split between
        // two threads at key 40, within a block of 64), one at position 300 of a 512-cell
        // cache, and one in a sliding window of 150 (the visible keys start at 151).
        Case {
            d: 64,
            dv: 64,
            heads: 4,
            kv_heads: 1,
            n_q: 1,
            n_kv: 256,
            params: AttnParams { scale: 0.125, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::F16,
            past: Some(69),
            window: None,
        },
        Case {
            d: 256,
            dv: 256,
            heads: 4,
            kv_heads: 1,
            n_q: 1,
            n_kv: 512,
            params: AttnParams { scale: 0.0625, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::F16,
            past: Some(300),
            window: None,
        },
        Case {
            d: 64,
            dv: 64,
            heads: 2,
            kv_heads: 1,
            n_q: 1,
            n_kv: 512,
            params: AttnParams { scale: 0.125, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::F16,
            past: Some(300),
            window: Some(150),
        },
        // Quantized KV caches: Q8_0 and Q4_0 keys and values (dequantized by the kernel; the
        // expected values start from the same dequantized operands), for a prompt with
        // grouped-query heads in lanes, generation split between threads, and Gemma 3's head
        // size 256.
        Case {
            d: 64,
            dv: 64,
            heads: 8,
            kv_heads: 2,
            n_q: 12,
            n_kv: 150,
            params: AttnParams { scale: 0.125, max_bias: 0.0, softcap: 20.0 },
            kv_type: DType::Q8_0,
            past: None,
            window: None,
        },
        Case {
            d: 64,
            dv: 64,
            heads: 8,
            kv_heads: 2,
            n_q: 12,
            n_kv: 150,
            params: AttnParams { scale: 0.125, max_bias: 0.0, softcap: 20.0 },
            kv_type: DType::Q4_0,
            past: None,
            window: None,
        },
        Case {
            d: 256,
            dv: 256,
            heads: 4,
            kv_heads: 1,
            n_q: 1,
            n_kv: 512,
            params: AttnParams { scale: 0.0625, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::Q8_0,
            past: Some(300),
            window: None,
        },
        Case {
            d: 32,
            dv: 32,
            heads: 2,
            kv_heads: 1,
            n_q: 3,
            n_kv: 256,
            params: AttnParams { scale: 0.125, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::Q4_0,
            past: Some(100),
            window: Some(50),
        },
        Case {
            d: 256,
            dv: 256,
            heads: 4,
            kv_heads: 1,
            n_q: 256,
            n_kv: 256,
            params: AttnParams { scale: 1.0, max_bias: 0.0, softcap: 0.0 },
            kv_type: DType::F16,
            past: Some(0),
            window: None,
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        for threads in [1, 2] {
            let mut rng = Rng::new(10 + i as u64);
            let (g, out, stored) = attention_graph(c, &mut rng);
            compute(&g, threads).unwrap();
            let got = dense(&g, out);
            assert_eq!(g.tensor(out).ne(), [c.dv, c.heads, c.n_q, 1]);
            // Both sides accumulate in f64 from the same stored values (the kernels may use
            // f32): only the final rounding and f32 accumulation differ, far below 1e-9.
            assert_nmse(&format!("case {i}, {threads} threads"), &got, &expected(c, &stored), 1e-9);
        }
    }
}

#[test]
fn flash_attention_checks_its_operands() {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[64, 3, 4]).unwrap();
    let k = g.input("k", DType::F16, &[64, 10, 3]).unwrap();
    let v = g.input("v", DType::F16, &[64, 10, 3]).unwrap();
    let e = g.flash_attn_ext(q, k, v, None, AttnParams::default()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "4 heads over 3 KV heads: {e:?}");
    let k2 = g.input("k2", DType::Q4_1, &[64, 10, 2]).unwrap();
    let v2 = g.input("v2", DType::F16, &[64, 10, 2]).unwrap();
    let e = g.flash_attn_ext(q, k2, v2, None, AttnParams::default()).unwrap_err();
    assert!(matches!(e, Error::UnsupportedType { .. }), "Q4_1 keys: {e:?}");
    let k3 = g.input("k3", DType::F16, &[64, 10, 2]).unwrap();
    let m = g.input("m", DType::F16, &[9, 3]).unwrap();
    let e = g.flash_attn_ext(q, k3, v2, Some(m), AttnParams::default()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "mask of 9 keys for 10: {e:?}");
    let p = AttnParams { scale: f32::NAN, ..AttnParams::default() };
    let e = g.flash_attn_ext(q, k3, v2, None, p).unwrap_err();
    assert!(matches!(e, Error::InvalidParam { .. }), "NaN scale: {e:?}");
}

/// FLASH_ATTN_EXT of `n_q` queries (`q`: `[d, heads, n_q]`) against the first `n_kv` cells of
/// F16 caches holding `k` and `v` (`[d * kv_heads, n_kv]`), with `mask` (`n_q` rows of `n_kv`),
/// on `threads` threads.
fn attend(
    (d, heads, kv_heads, n_kv): (usize, usize, usize, usize),
    q: &[f32],
    kv: (&[f32], &[f32]),
    mask: &[f32],
    threads: usize,
) -> Vec<f32> {
    let n_q = q.len() / (d * heads);
    let mut g = Graph::new();
    let q_lin = g.input("q", DType::F32, &[d, heads, n_q]).unwrap();
    let qp = g.permute(q_lin, [0, 2, 1, 3]).unwrap();
    let kc = g.new_tensor(DType::F16, &[d * kv_heads, n_kv]).unwrap();
    let vc = g.new_tensor(DType::F16, &[d * kv_heads, n_kv]).unwrap();
    let k = g.view(kc, &[d, n_kv, kv_heads], &[d * kv_heads * 2, d * 2], 0).unwrap();
    let v = g.view(vc, &[d, n_kv, kv_heads], &[d * kv_heads * 2, d * 2], 0).unwrap();
    let m = g.input("mask", DType::F16, &[n_kv, n_q]).unwrap();
    let params = AttnParams { scale: 0.125, max_bias: 0.0, softcap: 0.0 };
    let out = g.flash_attn_ext(qp, k, v, Some(m), params).unwrap();
    g.set_output(out).unwrap();
    allocate_all(&mut g).unwrap();
    set_vals(&g, q_lin, q);
    set_vals(&g, kc, kv.0);
    set_vals(&g, vc, kv.1);
    set_vals(&g, m, mask);
    compute(&g, threads).unwrap();
    dense(&g, out)
}

/// The same answer whatever the batch (issue 38): a query's attention output is bit for bit
/// the same computed alone (generation: the keys-in-lanes scores, the keys split between two
/// threads), in a chunk of 7 queries or in a prompt of 40 (units of 8 queries, the rows in the
/// lanes), on 1 or 2 threads; with grouped heads, and with a sliding window that hides the
/// first blocks from the later queries only.
#[test]
fn flash_attention_rows_do_not_depend_on_the_batch_or_the_threads() {
    for (d, heads, kv_heads, window) in [(256, 4, 1, None), (64, 8, 2, None), (64, 2, 1, Some(90))]
    {
        let (n_q, past, n_kv) = (40, 230, 320);
        let mut rng = Rng::new(7);
        let q = rng.vec(d * heads * n_q, -1.0, 1.0);
        let k = rng.vec(d * kv_heads * n_kv, -1.0, 1.0);
        let v = rng.vec(d * kv_heads * n_kv, -1.0, 1.0);
        let mask: Vec<f32> = (0..n_q)
            .flat_map(|iq| {
                (0..n_kv).map(move |j| {
                    let seen = j <= past + iq && window.is_none_or(|w: usize| j + w > past + iq);
                    if seen {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        let shape = (d, heads, kv_heads, n_kv);
        let row = d * heads;
        let all = attend(shape, &q, (&k, &v), &mask, 2);
        let what =
            |how: &str, iq: usize| format!("d {d}, {heads}/{kv_heads} heads, {how}, query {iq}");
        for threads in [1, 2] {
            let again = attend(shape, &q, (&k, &v), &mask, threads);
            let how = format!("40 queries, {threads} threads");
            assert_same_bits(&again, &all, &what(&how, 0));
            for iq in [0, 13, 39] {
                let one = attend(
                    shape,
                    &q[iq * row..(iq + 1) * row],
                    (&k, &v),
                    &mask[iq * n_kv..(iq + 1) * n_kv],
                    threads,
                );
                let how = format!("alone, {threads} threads");
                assert_same_bits(&one, &all[iq * row..(iq + 1) * row], &what(&how, iq));
            }
            let (c0, c1) = (13, 20);
            let chunk = attend(
                shape,
                &q[c0 * row..c1 * row],
                (&k, &v),
                &mask[c0 * n_kv..c1 * n_kv],
                threads,
            );
            let how = format!("a chunk of 7, {threads} threads");
            assert_same_bits(&chunk, &all[c0 * row..c1 * row], &what(&how, c0));
        }
    }
}

/// Panics at the first value whose bits differ.
fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!("{what}: value {i}: {} vs {}", got[i], want[i]);
    }
}
