//! The attention path as llama.cpp builds it over a KV cache: F16 K and V caches read through
//! strided views (rows of the whole cache, heads inside a row, V stored transposed),
//! permuted queries, grouped-query broadcast of the KV heads, a causal F16 mask; the cache
//! writes (CPY of the new keys and values into views of the caches); and a cache placed by
//! the caller in GPU memory that keeps its contents across computes of a scheduler, all in one
//! split.

use crate::common::{check, gpu, i32_bytes, Case};
use crate::{case, TOL, TOL_MATMUL};
use half::f16;
use std::sync::Arc;
use tessera_core::backend::{Backend, BufferType, Device};
use tessera_core::sched::Scheduler;
use tessera_core::storage::Storage;
use tessera_core::tensor_data::{get_f32, set_f32, set_tensor};
use tessera_core::{DType, Graph, TensorId};

/// Shapes of one attention step.
#[derive(Clone, Copy, Debug)]
struct Attn {
    /// Head dim.
    d: usize,
    n_head: usize,
    n_head_kv: usize,
    /// Queries (new tokens).
    n_q: usize,
    /// Cached positions attended to (including the new ones).
    n_kv: usize,
    /// Cache capacity.
    kv_size: usize,
}

/// Causal mask bytes (F16 `[n_kv, n_q]`): query `i` sees positions up to `n_kv - n_q + i`.
fn causal_mask(n_kv: usize, n_q: usize) -> Vec<u8> {
    (0..n_q)
        .flat_map(|i| {
            (0..n_kv).map(move |j| if j > n_kv - n_q + i { f16::NEG_INFINITY } else { f16::ZERO })
        })
        .flat_map(|h| h.to_le_bytes())
        .collect()
}

/// `softmax(K^T q * scale + mask) V` over the first `n_kv` cache positions, K cache
/// `[d * n_head_kv, kv_size]`, V cache transposed `[kv_size, d * n_head_kv]`, queries
/// `[d, n_head, n_q]`; the result `[d * n_head, n_q]`. Returns the graph, the output and the
/// mask.
fn attention(
    g: &mut Graph,
    a: Attn,
    kc: TensorId,
    vc: TensorId,
    q: TensorId,
) -> (TensorId, TensorId) {
    let es = 2; // F16
    let row = a.d * a.n_head_kv * es;
    let k = g.view(kc, &[a.d, a.n_kv, a.n_head_kv], &[row, a.d * es], 0).unwrap();
    let qp = g.permute(q, [0, 2, 1, 3]).unwrap(); // [d, n_q, n_head]
    let kq = g.mul_mat(k, qp).unwrap(); // [n_kv, n_q, n_head]
    let mask = g.input("mask", DType::F16, &[a.n_kv, a.n_q]).unwrap();
    let kq = g.soft_max_ext(kq, Some(mask), 1.0 / (a.d as f32).sqrt(), 0.0).unwrap();
    let vrow = a.kv_size * es;
    let v = g.view(vc, &[a.n_kv, a.d, a.n_head_kv], &[vrow, vrow * a.d], 0).unwrap();
    let kqv = g.mul_mat(v, kq).unwrap(); // [d, n_q, n_head]
    let o = g.permute(kqv, [0, 2, 1, 3]).unwrap(); // [d, n_head, n_q]
    let o = g.cont(o).unwrap();
    (g.reshape(o, &[a.d * a.n_head, a.n_q]).unwrap(), mask)
}

const SHAPES: [Attn; 4] = [
    // Generation (matrix-vector kernels), Gemma 3 270M's heads: 4 query heads share 1 KV head.
    Attn { d: 256, n_head: 4, n_head_kv: 1, n_q: 1, n_kv: 37, kv_size: 48 },
    Attn { d: 64, n_head: 4, n_head_kv: 2, n_q: 1, n_kv: 5, kv_size: 64 },
    // Prompts (tiled kernels).
    Attn { d: 64, n_head: 4, n_head_kv: 2, n_q: 12, n_kv: 40, kv_size: 64 },
    Attn { d: 256, n_head: 4, n_head_kv: 1, n_q: 33, n_kv: 33, kv_size: 40 },
];

#[test]
fn attention_over_strided_kv_cache_views() {
    let Some(dev) = gpu() else { return };
    for a in SHAPES {
        let mut g = Graph::new();
        let kc = g.input("k_cache", DType::F16, &[a.d * a.n_head_kv, a.kv_size]).unwrap();
        let vc = g.input("v_cache", DType::F16, &[a.kv_size, a.d * a.n_head_kv]).unwrap();
        let q = g.input("q", DType::F32, &[a.d, a.n_head, a.n_q]).unwrap();
        let (o, mask) = attention(&mut g, a, kc, vc, q);
        let mut k = case(format!("attention {a:?}"), g, o, TOL_MATMUL);
        k.data.insert(mask, causal_mask(a.n_kv, a.n_q));
        let out = check(&dev, &k);
        assert!(out.nmse < 1e-9, "{a:?}: nmse {}", out.nmse);
    }
}

#[test]
fn kv_cache_writes_into_strided_views() {
    let Some(dev) = gpu() else { return };
    // New keys [d * n_head_kv, n_tokens] into rows p0.. of the K cache, and new values
    // transposed into columns p0.. of the transposed V cache, as llama.cpp's cpy_k / cpy_v.
    for (width, n_tokens, p0, kv_size) in [(64usize, 1usize, 5usize, 16usize), (96, 7, 3, 16)] {
        let mut g = Graph::new();
        let k_cur = g.input("k_cur", DType::F32, &[width, n_tokens]).unwrap();
        let cache = g.input("k_cache", DType::F16, &[width, kv_size]).unwrap();
        let view = g.view(cache, &[width, n_tokens], &[width * 2], p0 * width * 2).unwrap();
        let c = g.cpy(k_cur, view).unwrap();
        check(&dev, &case(format!("cpy k_cur [{width},{n_tokens}] at row {p0}"), g, c, TOL));

        let mut g = Graph::new();
        let v_cur = g.input("v_cur", DType::F32, &[width, n_tokens]).unwrap();
        let vt = g.transpose(v_cur).unwrap(); // [n_tokens, width]
        let cache = g.input("v_cache", DType::F16, &[kv_size, width]).unwrap();
        let view = g.view(cache, &[n_tokens, width], &[kv_size * 2], p0 * 2).unwrap();
        let c = g.cpy(vt, view).unwrap();
        // The whole cache is compared: nothing outside the view may change.
        let mut k = case(format!("cpy v_cur^T [{n_tokens},{width}] at column {p0}"), g, c, TOL);
        k.output = cache;
        check(&dev, &k);
    }
}

/// One step of a tiny decoder's attention that first writes the step's keys and values into
/// the caches at `pos0`, then attends over positions `0 .. pos0 + n_q`: with CPY into views,
/// the V cache transposed and MUL_MAT / SOFT_MAX (`fused == false`), or with SET_ROWS and
/// FLASH_ATTN_EXT (`fused`).
struct Step {
    graph: Graph,
    k_new: TensorId,
    v_new: TensorId,
    q: TensorId,
    mask: TensorId,
    /// The cache rows written (SET_ROWS indices), in the fused form.
    rows: Option<TensorId>,
    out: TensorId,
}

fn step(a: Attn, pos0: usize, caches: (&Storage, &Storage), fused: bool) -> Step {
    let mut g = Graph::new();
    let width = a.d * a.n_head_kv;
    let kc = g.new_tensor(DType::F16, &[width, a.kv_size]).unwrap();
    let vshape = if fused { [width, a.kv_size] } else { [a.kv_size, width] };
    let vc = g.new_tensor(DType::F16, &vshape).unwrap();
    g.set_storage(kc, caches.0.clone()).unwrap();
    g.set_storage(vc, caches.1.clone()).unwrap();
    let k_new = g.input("k_new", DType::F32, &[width, a.n_q]).unwrap();
    let v_new = g.input("v_new", DType::F32, &[width, a.n_q]).unwrap();
    let q = g.input("q", DType::F32, &[a.d, a.n_head, a.n_q]).unwrap();
    let n_kv = pos0 + a.n_q;
    // The attention reads the caches after the writes (nodes run in the order they were
    // added, as in ggml's graphs).
    let (rows, out, mask) = if fused {
        let rows = g.input("rows", DType::I32, &[a.n_q]).unwrap();
        g.set_rows(kc, k_new, rows).unwrap();
        g.set_rows(vc, v_new, rows).unwrap();
        let es = 2;
        let k = g.view(kc, &[a.d, n_kv, a.n_head_kv], &[width * es, a.d * es], 0).unwrap();
        let v = g.view(vc, &[a.d, n_kv, a.n_head_kv], &[width * es, a.d * es], 0).unwrap();
        let qp = g.permute(q, [0, 2, 1, 3]).unwrap();
        let mask = g.input("mask", DType::F16, &[n_kv, a.n_q]).unwrap();
        let p = tessera_core::AttnParams { scale: 1.0 / (a.d as f32).sqrt(), ..Default::default() };
        let o = g.flash_attn_ext(qp, k, v, Some(mask), p).unwrap(); // [d, n_head, n_q]
        (Some(rows), g.reshape(o, &[a.d * a.n_head, a.n_q]).unwrap(), mask)
    } else {
        let kview = g.view(kc, &[width, a.n_q], &[width * 2], pos0 * width * 2).unwrap();
        g.cpy(k_new, kview).unwrap();
        let vt = g.transpose(v_new).unwrap();
        let vview = g.view(vc, &[a.n_q, width], &[a.kv_size * 2], pos0 * 2).unwrap();
        g.cpy(vt, vview).unwrap();
        let (out, mask) = attention(&mut g, Attn { n_kv, ..a }, kc, vc, q);
        (None, out, mask)
    };
    g.set_output(out).unwrap();
    Step { graph: g, k_new, v_new, q, mask, rows, out }
}

/// Sets the inputs of step `s`.
fn feed(s: &Step, kn: &[f32], vn: &[f32], qv: &[f32], mask: &[u8], pos0: usize, n_q: usize) {
    set_f32(&s.graph, s.k_new, kn).unwrap();
    set_f32(&s.graph, s.v_new, vn).unwrap();
    set_f32(&s.graph, s.q, qv).unwrap();
    set_tensor(&s.graph, s.mask, mask).unwrap();
    if let Some(r) = s.rows {
        let rows: Vec<i32> = (pos0..pos0 + n_q).map(|p| p as i32).collect();
        set_tensor(&s.graph, r, &i32_bytes(&rows)).unwrap();
    }
}

#[test]
fn a_kv_cache_in_gpu_memory_persists_across_computes_in_one_split() {
    kv_cache_persists(false);
}

#[test]
fn a_kv_cache_written_by_set_rows_and_read_by_flash_attention_persists_in_one_split() {
    kv_cache_persists(true);
}

fn kv_cache_persists(fused: bool) {
    let Some(dev) = gpu() else { return };
    let a = Attn { d: 64, n_head: 4, n_head_kv: 1, n_q: 3, n_kv: 0, kv_size: 16 };
    let width = a.d * a.n_head_kv;
    let cache_bytes = width * a.kv_size * 2;
    // The caller's caches: one GPU buffer, zeroed, holding both.
    let bt: Arc<dyn BufferType> = dev.buffer_type();
    let buf = bt.alloc(2 * cache_bytes + 256).unwrap();
    buf.clear(0).unwrap();
    let ks = Storage { buffer: buf.clone(), offset: 0 };
    let vs = Storage { buffer: buf.clone(), offset: cache_bytes.div_ceil(256) * 256 };
    let backends: Vec<Box<dyn Backend>> = vec![
        dev.init_backend(&Default::default()).unwrap(),
        Box::new(tessera_cpu::CpuBackend::new(Some(1)).unwrap()),
    ];
    let mut sched = Scheduler::new(backends).unwrap();
    let mut rng = crate::common::Rng::new(9);
    let mut rand = |n: usize| (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect::<Vec<f32>>();
    // The reference: the CPU's scalar reference with caches of its own, fed the same steps.
    let cpu_buf = tessera_cpu::buffer::CpuBufferType.alloc(2 * cache_bytes + 256).unwrap();
    cpu_buf.clear(0).unwrap();
    let cks = Storage { buffer: cpu_buf.clone(), offset: 0 };
    let cvs = Storage { buffer: cpu_buf.clone(), offset: vs.offset };
    for (i, pos0) in [0usize, 3, 6].into_iter().enumerate() {
        let (kn, vn, qv) = (rand(width * a.n_q), rand(width * a.n_q), rand(a.d * a.n_head * a.n_q));
        let mask = causal_mask(pos0 + a.n_q, a.n_q);
        let mut s = step(a, pos0, (&ks, &vs), fused);
        // The inputs in GPU memory of their own too: the scheduler would place inputs that
        // only views read (v_new, q) in CPU memory, and its copies of them overlap (see
        // `split_inputs_read_through_views_keep_their_own_memory` in tests/sched.rs).
        let ids: Vec<TensorId> =
            [s.k_new, s.v_new, s.q, s.mask].into_iter().chain(s.rows).collect();
        let _inputs = tessera_core::alloc::place_sequentially(&mut s.graph, &ids, bt.as_ref());
        sched.alloc_graph(&mut s.graph).unwrap();
        feed(&s, &kn, &vn, &qv, &mask, pos0, a.n_q);
        sched.compute().unwrap();
        assert_eq!(sched.splits().len(), 1, "step {i}: {:?}", sched.splits());
        assert_eq!(sched.splits()[0].backend, 0, "step {i} ran on the CPU");
        let got = get_f32(&s.graph, s.out).unwrap();

        let mut r = step(a, pos0, (&cks, &cvs), fused);
        let _b = tessera_cpu::buffer::allocate_all(&mut r.graph).unwrap();
        feed(&r, &kn, &vn, &qv, &mask, pos0, a.n_q);
        tessera_cpu::reference::compute_graph(&r.graph, &|| false).unwrap();
        let want = get_f32(&r.graph, r.out).unwrap();
        let nmse = crate::common::nmse(
            &got.iter().map(|&x| x as f64).collect::<Vec<_>>(),
            &want.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        );
        eprintln!("kv cache (fused {fused}) step {i} at {pos0}: nmse {nmse:.3e}");
        assert!(nmse < 1e-9, "step {i}: nmse {nmse}");
    }
    // The K cache holds every step's keys: positions 0 .. 9 written, the rest still zero.
    let mut kbytes = vec![0u8; cache_bytes];
    buf.read(0, &mut kbytes).unwrap();
    let written = kbytes[..9 * width * 2].iter().filter(|&&b| b != 0).count();
    assert!(written > 9 * width, "the K cache lost its earlier steps");
    assert!(kbytes[9 * width * 2..].iter().all(|&b| b == 0), "the K cache was written past 9");
}

#[test]
fn set_rows_writes_cache_rows() {
    let Some(dev) = gpu() else { return };
    for dtype in [DType::F32, DType::F16] {
        // Plain: 5 new rows into a cache of 16, a repeated index (the later row wins).
        // Many rows to one destination row: on a device running workgroups concurrently, only
        // the kernel's own ordering makes the last one win.
        let many: Vec<i32> = (0..200).map(|i| if i % 3 == 0 { 7 } else { i % 16 }).collect();
        for (ne0, idx) in
            [(64usize, vec![3, 0, 9, 3, 15]), (7, vec![1]), (256, vec![2, 2, 2]), (256, many)]
        {
            let mut g = Graph::new();
            let cache = g.input("cache", dtype, &[ne0, 16]).unwrap();
            let rows = g.input("rows", DType::F32, &[ne0, idx.len()]).unwrap();
            let ids = g.input("ids", DType::I32, &[idx.len()]).unwrap();
            let c = g.set_rows(cache, rows, ids).unwrap();
            let at =
                if idx.len() > 8 { format!("{} indices", idx.len()) } else { format!("{idx:?}") };
            let mut k = case(format!("set_rows {dtype} [{ne0},16] at {at}"), g, c, 0.0);
            k.data.insert(ids, i32_bytes(&idx));
            check(&dev, &k);
        }
        // Indices broadcast over dims 2 and 3; rows from a transposed view; a strided
        // destination view (every other row of a larger cache).
        let mut g = Graph::new();
        let big = g.input("cache", dtype, &[8, 12, 4, 2]).unwrap();
        let es = dtype.type_size();
        let cache =
            g.view(big, &[8, 6, 4, 2], &[2 * 8 * es, 12 * 8 * es, 48 * 8 * es], 8 * es).unwrap();
        let r0 = g.input("rows", DType::F32, &[3, 8, 4, 2]).unwrap();
        let rows = g.permute(r0, [1, 0, 2, 3]).unwrap(); // [8, 3, 4, 2]
        let ids = g.input("ids", DType::I32, &[3, 2, 1]).unwrap();
        let c = g.set_rows(cache, rows, ids).unwrap();
        let mut k = case(format!("set_rows {dtype} broadcast indices, strided views"), g, c, 0.0);
        k.data.insert(ids, i32_bytes(&[5, 0, 2, 1, 1, 4]));
        k.output = big;
        check(&dev, &k);
    }
}

#[test]
fn set_rows_index_out_of_range_is_an_error() {
    let Some(dev) = gpu() else { return };
    for bad in [16, -2] {
        let mut g = Graph::new();
        let cache = g.input("cache", DType::F16, &[32, 16]).unwrap();
        let rows = g.input("rows", DType::F32, &[32, 3]).unwrap();
        let ids = g.input("ids", DType::I32, &[3]).unwrap();
        let c = g.set_rows(cache, rows, ids).unwrap();
        let k = case("set_rows bad index", g, c, 0.0);
        let mut rng = crate::common::Rng::new(2);
        let inputs = vec![
            (cache, crate::common::random_bytes(&mut rng, DType::F16, 32 * 16)),
            (rows, crate::common::random_bytes(&mut rng, DType::F32, 32 * 3)),
            (ids, i32_bytes(&[4, 7, bad])),
        ];
        match crate::common::run_gpu(&dev, &k, &inputs) {
            Err(tessera_core::Error::IndexOutOfRange { reason: msg, .. }) => {
                eprintln!("{msg}");
                assert!(msg.contains(&format!("row index {bad} ")), "{msg}");
                assert!(msg.contains("indices[2, 0, 0]") && msg.contains("outside 0..16"), "{msg}");
            }
            other => panic!("index {bad}: expected IndexOutOfRange, got {other:?}"),
        }
    }
}

/// Shapes of a FLASH_ATTN_EXT case.
#[derive(Clone, Copy, Debug)]
struct Fa {
    d: usize,
    dv: usize,
    n_head: usize,
    n_head_kv: usize,
    n_q: usize,
    n_kv: usize,
    kv: DType,
    mask: Option<DType>,
    softcap: f32,
    max_bias: f32,
}

const FA: Fa = Fa {
    d: 256,
    dv: 256,
    n_head: 4,
    n_head_kv: 1,
    n_q: 1,
    n_kv: 37,
    kv: DType::F16,
    mask: Some(DType::F16),
    softcap: 0.0,
    max_bias: 0.0,
};

/// FLASH_ATTN_EXT over K and V views of caches `[d * n_head_kv, kv_size]` (rows of the whole
/// cache, heads inside a row) and queries `[d, n_head, n_q]` permuted to `[d, n_q, n_head]`.
fn flash_case(f: Fa) -> Case {
    let kv_size = f.n_kv + 5;
    let mut g = Graph::new();
    let es = f.kv.type_size();
    let kc = g.input("k_cache", f.kv, &[f.d * f.n_head_kv, kv_size]).unwrap();
    let vc = g.input("v_cache", f.kv, &[f.dv * f.n_head_kv, kv_size]).unwrap();
    let k =
        g.view(kc, &[f.d, f.n_kv, f.n_head_kv], &[f.d * f.n_head_kv * es, f.d * es], 0).unwrap();
    let v =
        g.view(vc, &[f.dv, f.n_kv, f.n_head_kv], &[f.dv * f.n_head_kv * es, f.dv * es], 0).unwrap();
    let q0 = g.input("q", DType::F32, &[f.d, f.n_head, f.n_q]).unwrap();
    let q = g.permute(q0, [0, 2, 1, 3]).unwrap();
    let mask = f.mask.map(|t| g.input("mask", t, &[f.n_kv, f.n_q + 2]).unwrap());
    let p = tessera_core::AttnParams {
        scale: 1.0 / (f.d as f32).sqrt(),
        max_bias: f.max_bias,
        softcap: f.softcap,
    };
    let o = g.flash_attn_ext(q, k, v, mask, p).unwrap();
    let mut c = case(format!("flash_attn_ext {f:?}"), g, o, TOL);
    if let (Some(m), Some(t)) = (mask, f.mask) {
        // Causal over the last n_q positions; the two padding rows fully masked.
        let vals: Vec<f32> = (0..f.n_q + 2)
            .flat_map(|i| {
                (0..f.n_kv).map(move |j| {
                    if i >= f.n_q || j > f.n_kv - f.n_q + i {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        let bytes = match t {
            DType::F16 => vals.iter().flat_map(|&x| f16::from_f32(x).to_le_bytes()).collect(),
            _ => vals.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        };
        c.data.insert(m, bytes);
    }
    c
}

#[test]
fn flash_attention_matches_the_reference() {
    let Some(dev) = gpu() else { return };
    let cases = [
        FA,
        Fa { n_q: 7, n_kv: 70, ..FA },
        Fa { n_q: 3, n_kv: 200, n_head: 8, n_head_kv: 2, d: 64, dv: 64, ..FA },
        Fa { d: 64, dv: 32, n_head: 2, n_head_kv: 2, n_q: 5, n_kv: 64, ..FA },
        Fa { kv: DType::F32, mask: Some(DType::F32), n_q: 2, n_kv: 65, ..FA },
        Fa { mask: None, n_q: 2, n_kv: 19, d: 128, dv: 128, ..FA },
        Fa { softcap: 50.0, n_q: 4, n_kv: 40, ..FA },
        Fa { max_bias: 8.0, n_head: 6, n_head_kv: 3, d: 32, dv: 32, n_q: 3, n_kv: 30, ..FA },
        Fa { d: 512, dv: 512, n_kv: 9, ..FA },
    ];
    for f in cases {
        check(&dev, &flash_case(f));
    }
}

#[test]
fn flash_attention_of_fully_masked_queries_is_zero() {
    let Some(dev) = gpu() else { return };
    let f = Fa { n_q: 2, n_kv: 100, ..FA };
    let mut c = flash_case(f);
    let m = c.graph.by_name("mask").unwrap();
    // Query 0 sees nothing, query 1 everything.
    let vals: Vec<f16> = (0..(f.n_q + 2) * f.n_kv)
        .map(|i| if i < f.n_kv { f16::NEG_INFINITY } else { f16::ZERO })
        .collect();
    c.data.insert(m, vals.iter().flat_map(|h| h.to_le_bytes()).collect());
    let inputs: Vec<_> = {
        let mut rng = crate::common::Rng::new(4);
        c.graph
            .ids()
            .filter(|&id| c.graph.tensor(id).is_leaf())
            .map(|id| {
                let t = c.graph.tensor(id);
                let b = c.data.get(&id).cloned().unwrap_or_else(|| {
                    crate::common::random_bytes(&mut rng, t.dtype(), t.nelements())
                });
                (id, b)
            })
            .collect()
    };
    let got = crate::common::run_gpu(&dev, &c, &inputs).unwrap();
    let vals = crate::common::values(DType::F32, &got);
    let per_query = f.dv * f.n_head;
    assert!(vals[..per_query].iter().all(|&x| x == 0.0), "masked query: not zeros");
    assert!(vals[per_query..].iter().any(|&x| x != 0.0), "visible query: all zeros");
    check(&dev, &c);
}
