//! The conformance harness, like ggml's test-backend-ops: every op, on a range of types and
//! shapes, computed on each device and compared with the CPU's scalar reference.

use std::fmt::Write as _;
use std::time::Instant;
use tessera_core::alloc::GraphAllocator;
use tessera_core::backend::{BackendParams, Device};
use tessera_core::registry::Registry;
use tessera_core::{quant, tensor_data, DType, Graph, Result, RopeParams, TensorId, UnaryOp};
use tessera_cpu::reference;

/// How closely a device must match the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// Bit-identical output.
    Exact,
    /// Normalized mean squared error at most this.
    Nmse(f64),
}

/// The error allowed for float ops.
pub const NMSE_FLOAT: f64 = 1e-7;
/// The error allowed for matmul and quantized paths.
pub const NMSE_QUANT: f64 = 5e-4;

type Builder = Box<dyn Fn(&mut Graph) -> Result<TensorId>>;

/// One op on one set of types and shapes.
pub struct Case {
    /// Op name as ggml prints it ("MUL_MAT").
    pub op: &'static str,
    /// Types and shapes.
    pub desc: String,
    /// Builds the graph and returns the node to check.
    pub build: Builder,
    /// Allowed difference.
    pub tolerance: Tolerance,
    /// Upper bound (exclusive) of the values of I32 leaves (indices, positions).
    pub int_range: i32,
    /// Floating-point operations of one compute (for `perf`), 0 when memory-bound.
    pub flops: f64,
}

fn case(
    op: &'static str,
    desc: String,
    tolerance: Tolerance,
    build: impl Fn(&mut Graph) -> Result<TensorId> + 'static,
) -> Case {
    Case { op, desc, build: Box::new(build), tolerance, int_range: 1, flops: 0.0 }
}

const FLOAT_TYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Every case of the harness (the `perf` mode uses larger shapes, `big == true`).
pub fn cases(big: bool) -> Vec<Case> {
    let nmse = Tolerance::Nmse(NMSE_FLOAT);
    let mut v = Vec::new();
    let (r, c) = if big { (4096, 512) } else { (35, 7) };
    for t in FLOAT_TYPES {
        let tol = if t == DType::F32 { nmse } else { Tolerance::Nmse(1e-5) };
        for (name, op) in [("ADD", 0), ("SUB", 1), ("MUL", 2), ("DIV", 3)] {
            v.push(case(name, format!("{t} [{r},{c},2,3] op [{r},1,2,1]"), tol, move |g| {
                let a = g.new_tensor(t, &[r, c, 2, 3])?;
                let b = g.new_tensor(DType::F32, &[r, 1, 2, 1])?;
                match op {
                    0 => g.add(a, b),
                    1 => g.sub(a, b),
                    2 => g.mul(a, b),
                    _ => g.div(a, b),
                }
            }));
        }
        for u in UnaryOp::ALL {
            v.push(case(u.name(), format!("{t} [{r},{c}]"), tol, move |g| {
                let a = g.new_tensor(t, &[r, c])?;
                g.unary(a, u)
            }));
        }
        v.push(case("SCALE", format!("{t} [{r},{c}] *0.25+1"), tol, move |g| {
            let a = g.new_tensor(t, &[r, c])?;
            g.scale_bias(a, 0.25, 1.0)
        }));
        v.push(case("SQR", format!("{t} [{r},{c}]"), tol, move |g| {
            let a = g.new_tensor(t, &[r, c])?;
            g.sqr(a)
        }));
        v.push(case("CLAMP", format!("{t} [{r},{c}] [-0.5,0.5]"), tol, move |g| {
            let a = g.new_tensor(t, &[r, c])?;
            g.clamp(a, -0.5, 0.5)
        }));
        v.push(case("CPY", format!("F32 -> {t} [{r},{c}]"), Tolerance::Exact, move |g| {
            let a = g.new_tensor(DType::F32, &[r, c])?;
            let b = g.new_tensor(t, &[r, c])?;
            g.cpy(a, b)
        }));
        v.push(case("CONT", format!("{t} transposed [{r},{c}]"), Tolerance::Exact, move |g| {
            let a = g.new_tensor(t, &[c, r])?;
            let at = g.transpose(a)?;
            g.cont(at)
        }));
    }
    v.push(case("SQRT", format!("F32 [{r},{c}]"), nmse, move |g| {
        let a = g.new_tensor(DType::F32, &[r, c])?;
        let a2 = g.sqr(a)?;
        g.sqrt(a2)
    }));
    for (name, which) in [("SUM", 0), ("SUM_ROWS", 1), ("MEAN", 2), ("ARGMAX", 3)] {
        v.push(case(name, format!("F32 [{r},{c}]"), nmse, move |g| {
            let a = g.new_tensor(DType::F32, &[r, c])?;
            match which {
                0 => g.sum(a),
                1 => g.sum_rows(a),
                2 => g.mean(a),
                _ => g.argmax(a),
            }
        }));
    }
    v.push(case("REPEAT", format!("F32 [{r},1,2] -> [{r},{c},2,2]"), Tolerance::Exact, move |g| {
        let a = g.new_tensor(DType::F32, &[r, 1, 2])?;
        g.repeat_to(a, &[r, c, 2, 2])
    }));
    for dim in 0..4 {
        v.push(case(
            "CONCAT",
            format!("F32 [{r},{c},2,2] dim {dim}"),
            Tolerance::Exact,
            move |g| {
                let a = g.new_tensor(DType::F32, &[r, c, 2, 2])?;
                let b = g.new_tensor(DType::F32, &[r, c, 2, 2])?;
                g.concat(a, b, dim)
            },
        ));
    }
    // 16-bit elements copied bit for bit (an odd ne0, so that values share words).
    v.push(case("CONCAT", format!("F16 [{r},{c}] dim 0 [5,{c}]"), Tolerance::Exact, move |g| {
        let a = g.new_tensor(DType::F16, &[r, c])?;
        let b = g.new_tensor(DType::F16, &[5, c])?;
        g.concat(a, b, 0)
    }));
    // LFM2's short convolution: the d_conv - 1 carried-over values and the batch's tokens of
    // each channel, transposed into rows as its graph feeds them.
    for (d_conv, n_t) in [(3, 1), (3, c), (4, 2)] {
        v.push(case(
            "SSM_CONV",
            format!("F32 [{},{r},2] (transposed) * [{d_conv},{r}]", d_conv - 1 + n_t),
            nmse,
            move |g| {
                let x = g.new_tensor(DType::F32, &[r, d_conv - 1 + n_t, 2])?;
                let w = g.new_tensor(DType::F32, &[d_conv, r])?;
                let sx = g.transpose(x)?;
                g.ssm_conv(sx, w)
            },
        ));
    }
    // Qwen 3.5's gated delta rule: two value heads per key head, q / k / v as views of the
    // convolution's output rows, one decay per head.
    for (n_t, per_dim) in [(1, false), (4, false), (3, true)] {
        let decay_dims = if per_dim { "one decay per key dim" } else { "one decay per head" };
        v.push(case(
            "GATED_DELTA_NET",
            format!("S 16, heads 2/4, {n_t} tokens (views of one [128,{n_t}]), {decay_dims}"),
            nmse,
            move |g| {
                let (s, hk, hv) = (16, 2, 4);
                let x = g.new_tensor(DType::F32, &[2 * s * hk + s * hv, n_t])?;
                let row = g.tensor(x).nb()[1];
                let q = g.view(x, &[s, hk, n_t], &[s * 4, row], 0)?;
                let k = g.view(x, &[s, hk, n_t], &[s * 4, row], s * hk * 4)?;
                let v = g.view(x, &[s, hv, n_t], &[s * 4, row], 2 * s * hk * 4)?;
                let decay = g.new_tensor(DType::F32, &[if per_dim { s } else { 1 }, hv, n_t])?;
                let beta = g.new_tensor(DType::F32, &[1, hv, n_t])?;
                let state = g.new_tensor(DType::F32, &[s, s, hv])?;
                g.gated_delta_net(q, k, v, decay, beta, state)
            },
        ));
    }
    let (m, n, k) = if big { (4096, 16, 4096) } else { (19, 5, 256) };
    for t in DType::ALL {
        if t == DType::I32 || t == DType::Q8_K {
            continue;
        }
        let tol =
            if t == DType::F32 { Tolerance::Nmse(NMSE_FLOAT) } else { Tolerance::Nmse(NMSE_QUANT) };
        let mut mm = case("MUL_MAT", format!("{t} [{k},{m}] x F32 [{k},{n}]"), tol, move |g| {
            let a = g.weight(&format!("w{t}"), t, &[k, m])?;
            let b = g.new_tensor(DType::F32, &[k, n])?;
            g.mul_mat(a, b)
        });
        mm.flops = 2.0 * (m * n * k) as f64;
        v.push(mm);
        let rows = if big { 4096 } else { 11 };
        let mut gr = case(
            "GET_ROWS",
            format!("{t} [{k},{rows}] by 5 indices"),
            Tolerance::Exact,
            move |g| {
                let a = g.new_tensor(t, &[k, rows])?;
                let i = g.new_tensor(DType::I32, &[5])?;
                g.get_rows(a, i)
            },
        );
        gr.int_range = rows as i32;
        v.push(gr);
    }
    v.push(case(
        "MUL_MAT",
        format!("F16 [{k},{m},2] x F32 transposed-permuted [{k},{n},4]"),
        Tolerance::Nmse(NMSE_QUANT),
        move |g| {
            let a = g.new_tensor(DType::F16, &[k, m, 2])?;
            let b = g.new_tensor(DType::F32, &[n, k, 4])?;
            let bt = g.transpose(b)?;
            g.mul_mat(a, bt)
        },
    ));
    for (mask, max_bias) in [(false, 0.0), (true, 0.0), (true, 8.0)] {
        v.push(case(
            "SOFT_MAX",
            format!("F32 [{r},{c},4] mask {mask} max_bias {max_bias}"),
            nmse,
            move |g| {
                let a = g.new_tensor(DType::F32, &[r, c, 4])?;
                let m = if mask { Some(g.new_tensor(DType::F32, &[r, c + 2])?) } else { None };
                g.soft_max_ext(a, m, 0.7, max_bias)
            },
        ));
    }
    v.push(case(
        "DIAG_MASK_INF",
        format!("F32 [{c},{c},2] n_past 1"),
        Tolerance::Exact,
        move |g| {
            let a = g.new_tensor(DType::F32, &[c, c, 2])?;
            g.diag_mask_inf(a, 1)
        },
    ));
    v.push(case("RMS_NORM", format!("F32 [{r},{c},3]"), nmse, move |g| {
        let a = g.new_tensor(DType::F32, &[r, c, 3])?;
        g.rms_norm(a, 1e-6)
    }));
    v.push(case("NORM", format!("F32 [{r},{c},3]"), nmse, move |g| {
        let a = g.new_tensor(DType::F32, &[r, c, 3])?;
        g.norm(a, 1e-5)
    }));
    let (hd, heads, toks) = if big { (128, 32, 64) } else { (16, 3, 5) };
    for mode in [0u32, 2] {
        for ext in [0.0f32, 1.0] {
            let mut rope = case(
                "ROPE",
                format!("F32 [{hd},{heads},{toks}] mode {mode} ext {ext}"),
                nmse,
                move |g| {
                    let a = g.new_tensor(DType::F32, &[hd, heads, toks])?;
                    let p = g.new_tensor(DType::I32, &[toks])?;
                    let params = RopeParams {
                        n_dims: hd - 4,
                        mode,
                        n_ctx_orig: 64,
                        freq_scale: 0.5,
                        ext_factor: ext,
                        ..Default::default()
                    };
                    g.rope_ext(a, p, None, params)
                },
            );
            rope.int_range = 200;
            v.push(rope);
        }
    }
    for (name, gate) in
        [("SWIGLU", tessera_core::GluOp::Swiglu), ("GEGLU", tessera_core::GluOp::Geglu)]
    {
        for swapped in [false, true] {
            v.push(case(name, format!("F32 [{},{c}] swapped {swapped}", 2 * r), nmse, move |g| {
                let a = g.new_tensor(DType::F32, &[2 * r, c])?;
                g.glu(a, gate, swapped)
            }));
        }
        v.push(case(name, format!("F32 [{r},{c}] split"), nmse, move |g| {
            let a = g.new_tensor(DType::F32, &[r, c])?;
            let b = g.new_tensor(DType::F32, &[r, c])?;
            g.glu_split(a, b, gate)
        }));
    }
    // The KV-cache write: one row per index (a random index may repeat; the reference and
    // every device write rows in order, so the last write wins on both).
    for t in [DType::F32, DType::F16] {
        let rows = if big { 4096 } else { 13 };
        let mut sr = case(
            "SET_ROWS",
            format!("F32 [{r},{c}] into {t} [{r},{rows}]"),
            Tolerance::Exact,
            move |g| {
                let a = g.new_tensor(t, &[r, rows])?;
                let b = g.new_tensor(DType::F32, &[r, c])?;
                let i = g.new_tensor(DType::I32, &[c])?;
                g.set_rows(a, b, i)
            },
        );
        sr.int_range = rows as i32;
        v.push(sr);
    }
    // The quantized KV caches' write: rows of whole blocks quantized as ggml's reference
    // quantizer, byte for byte.
    let qr = if big { 4096 } else { 64 };
    for t in [DType::Q8_0, DType::Q4_0] {
        let rows = if big { 4096 } else { 13 };
        let mut sr = case(
            "SET_ROWS",
            format!("F32 [{qr},{c}] into {t} [{qr},{rows}]"),
            Tolerance::Exact,
            move |g| {
                let a = g.new_tensor(t, &[qr, rows])?;
                let b = g.new_tensor(DType::F32, &[qr, c])?;
                let i = g.new_tensor(DType::I32, &[c])?;
                g.set_rows(a, b, i)
            },
        );
        sr.int_range = rows as i32;
        v.push(sr);
    }
    let (d, kv, nq) = if big { (128, 1024, 16) } else { (32, 19, 3) };
    let kv_cases = [
        (4, 2, 0.0f32, DType::F16, DType::F16),
        (2, 2, 10.0, DType::F16, DType::F16),
        // Quantized KV caches (the reference dequantizes the same blocks).
        (4, 2, 0.0, DType::Q8_0, DType::Q8_0),
        (4, 1, 10.0, DType::Q4_0, DType::Q4_0),
        (2, 2, 0.0, DType::Q8_0, DType::Q4_0),
    ];
    for (heads, kv_heads, softcap, kt, vt) in kv_cases {
        let mut fa = case(
            "FLASH_ATTN_EXT",
            format!(
                "q F32 [{d},{nq},{heads}] k {kt}, v {vt} [{d},{kv},{kv_heads}] softcap {softcap}"
            ),
            nmse,
            move |g| {
                let q = g.new_tensor(DType::F32, &[d, nq, heads])?;
                let k = g.new_tensor(kt, &[d, kv, kv_heads])?;
                let vv = g.new_tensor(vt, &[d, kv, kv_heads])?;
                let m = g.new_tensor(DType::F16, &[kv, nq])?;
                let p = tessera_core::AttnParams { scale: 0.2, max_bias: 0.0, softcap };
                g.flash_attn_ext(q, k, vv, Some(m), p)
            },
        );
        fa.flops = 4.0 * (d * kv * nq * heads) as f64;
        v.push(fa);
    }
    v.push(case("DUP", format!("F32 permuted [{r},{c},2]"), Tolerance::Exact, move |g| {
        let a = g.new_tensor(DType::F32, &[r, c, 2])?;
        let p = g.permute(a, [1, 2, 0, 3])?;
        g.dup(p)
    }));
    v
}

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Data for every leaf of `graph`: random floats in [-1, 1) (quantized for block types), or
/// indices in `[0, int_range)`.
fn leaf_data(graph: &Graph, int_range: i32) -> Result<Vec<(TensorId, Vec<u8>)>> {
    let mut out = Vec::new();
    for id in graph.ids() {
        let t = graph.tensor(id);
        if !t.is_leaf() {
            continue;
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((id.index() as u64 + 1) * 0x1234_5678));
        let n = t.nelements();
        let bytes = if t.dtype() == DType::I32 {
            (0..n)
                .flat_map(|_| {
                    let v = ((rng.next_f32() + 1.0) * 0.5 * int_range as f32) as i32;
                    v.clamp(0, int_range - 1).to_le_bytes()
                })
                .collect()
        } else {
            let vals: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
            quant::quantize_to_vec(t.dtype(), &vals)?
        };
        out.push((id, bytes));
    }
    Ok(out)
}

/// Output `id` of `graph` as f32 values.
fn read_f32(graph: &Graph, id: TensorId) -> Result<Vec<f32>> {
    let t = graph.tensor(id);
    let bytes = tensor_data::get_tensor(graph, id)?;
    if t.dtype() == DType::I32 {
        return Ok(bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
            .collect());
    }
    quant::dequantize_to_vec(t.dtype(), &bytes, t.nelements())
}

/// Normalized mean squared error of `a` against the reference `b` (infinities must match).
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        if x.is_infinite() || y.is_infinite() {
            if x != y {
                return f64::INFINITY;
            }
            continue;
        }
        if x.is_nan() != y.is_nan() {
            return f64::INFINITY;
        }
        if x.is_nan() {
            continue;
        }
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    num / den
}

/// The result of one case on one device.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Matches the reference; the error found.
    Pass(f64),
    /// Does not match; the error found or what went wrong.
    Fail(String),
    /// The device does not support the case.
    NotSupported,
}

fn supported(device: &dyn Device, graph: &Graph) -> bool {
    graph.nodes().iter().all(|&n| device.supports_op(graph, n))
}

/// Builds the case's graph, fills its leaves and allocates it on `device`.
fn prepare(case: &Case, device: &dyn Device) -> Result<(Graph, TensorId, GraphAllocator)> {
    let mut g = Graph::new();
    let out = (case.build)(&mut g)?;
    g.set_output(out)?;
    let mut alloc = GraphAllocator::new(device.buffer_type());
    alloc.alloc_graph(&mut g)?;
    for (id, bytes) in leaf_data(&g, case.int_range)? {
        tensor_data::set_tensor(&g, id, &bytes)?;
    }
    Ok((g, out, alloc))
}

/// The reference result of a case.
fn reference_result(case: &Case) -> Result<Vec<f32>> {
    let cpu = tessera_cpu::CpuDevice;
    let (g, out, _alloc) = prepare(case, &cpu)?;
    reference::compute_graph(&g, &|| false)?;
    read_f32(&g, out)
}

/// Runs `case` on `device` and compares with the reference.
pub fn run_case(case: &Case, device: &dyn Device) -> Outcome {
    let run = || -> Result<Outcome> {
        let (g, out, _alloc) = prepare(case, device)?;
        if !supported(device, &g) {
            return Ok(Outcome::NotSupported);
        }
        let mut backend = device.init_backend(&BackendParams::default())?;
        backend.graph_compute(&g)?;
        backend.synchronize()?;
        let got = read_f32(&g, out)?;
        let want = reference_result(case)?;
        let ok = match case.tolerance {
            Tolerance::Exact => got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
            Tolerance::Nmse(max) => nmse(&got, &want) <= max,
        };
        let err = nmse(&got, &want);
        Ok(if ok && got.len() == want.len() {
            Outcome::Pass(err)
        } else {
            Outcome::Fail(format!("nmse {err:.3e}"))
        })
    };
    match run() {
        Ok(o) => o,
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// Summary of a `test` run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Cases that matched.
    pub passed: usize,
    /// Cases that did not, with their descriptions.
    pub failed: Vec<String>,
    /// Cases a device does not support.
    pub unsupported: usize,
    /// One line per case.
    pub lines: Vec<String>,
}

fn matches_filter(case: &Case, filter: Option<&str>) -> bool {
    filter.is_none_or(|f| case.op.eq_ignore_ascii_case(f))
}

/// `backend-ops test`: every case on every device of `registry` (optionally one op).
pub fn test(registry: &Registry, op: Option<&str>) -> Report {
    test_streaming(registry, op, &mut |_| {})
}

/// [`test`], handing each result line to `on_line` as soon as its case has run.
pub fn test_streaming(
    registry: &Registry,
    op: Option<&str>,
    on_line: &mut dyn FnMut(&str),
) -> Report {
    let mut report = Report::default();
    for device in registry.devices() {
        for c in cases(false).iter().filter(|c| matches_filter(c, op)) {
            let outcome = run_case(c, device.as_ref());
            let line = format!("{:8} {:14} {:60} {:?}", device.name(), c.op, c.desc, outcome);
            match outcome {
                Outcome::Pass(_) => report.passed += 1,
                Outcome::Fail(_) => report.failed.push(line.clone()),
                Outcome::NotSupported => report.unsupported += 1,
            }
            on_line(&line);
            report.lines.push(line);
        }
    }
    report
}

/// `backend-ops support`: which ops each device supports, as a table, each device's ending
/// with its total ("N of M cases supported"), and one total line per device at the end.
pub fn support(registry: &Registry) -> Result<String> {
    let mut out = String::new();
    let mut totals = Vec::new();
    for device in registry.devices() {
        let _ = writeln!(out, "{} ({}):", device.name(), device.description());
        let all = cases(false);
        let mut supported = 0;
        for c in &all {
            let mut g = Graph::new();
            let id = (c.build)(&mut g)?;
            let yes = device.supports_op(&g, id);
            supported += yes as usize;
            let _ = writeln!(out, "  {:14} {:60} {}", c.op, c.desc, if yes { "yes" } else { "no" });
        }
        let total = format!("{}: {supported} of {} cases supported", device.name(), all.len());
        let _ = writeln!(out, "  {total}");
        totals.push(total);
    }
    let _ = writeln!(out, "\ntotals:");
    for t in totals {
        let _ = writeln!(out, "  {t}");
    }
    Ok(out)
}

/// `backend-ops perf`: time of each large case on each device, as GFLOPS or GB/s, written to
/// `out` line by line (and flushed) as each case is measured; each device starts with a line
/// naming it and how many cases it will measure.
pub fn perf(
    registry: &Registry,
    op: Option<&str>,
    threads: Option<usize>,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let runs = 5;
    for device in registry.devices() {
        let mut backend = device.init_backend(&BackendParams { threads })?;
        let chosen: Vec<_> = cases(true).into_iter().filter(|c| matches_filter(c, op)).collect();
        let _ = writeln!(
            out,
            "{}: {} case(s), {runs} timed runs each after one warm-up ({})",
            device.name(),
            chosen.len(),
            device.description()
        );
        let _ = out.flush();
        for c in &chosen {
            let (g, _out, _alloc) = prepare(c, device.as_ref())?;
            if !supported(device.as_ref(), &g) {
                let _ =
                    writeln!(out, "{:8} {:14} {:60} not supported", device.name(), c.op, c.desc);
                let _ = out.flush();
                continue;
            }
            backend.graph_compute(&g)?;
            let start = Instant::now();
            for _ in 0..runs {
                backend.graph_compute(&g)?;
            }
            backend.synchronize()?;
            let secs = start.elapsed().as_secs_f64() / runs as f64;
            let bytes: usize =
                g.ids().map(|id| g.tensor(id)).filter(|t| !t.is_view()).map(|t| t.nbytes()).sum();
            let rate = if c.flops > 0.0 {
                format!("{:8.1} GFLOPS", c.flops / secs / 1e9)
            } else {
                format!("{:8.2} GB/s", bytes as f64 / secs / 1e9)
            };
            let _ = writeln!(
                out,
                "{:8} {:14} {:60} {:9.3} ms {rate}",
                device.name(),
                c.op,
                c.desc,
                secs * 1e3
            );
            let _ = out.flush();
        }
    }
    Ok(())
}
