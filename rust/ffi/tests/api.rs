//! The foreign API as Kotlin and Swift see it, called from Rust: devices, features, compute
//! with hand-computed numbers, every error kind, cancel, close, async, logging and the C ABI.

use serde_json::{json, Value};
use std::ffi::{CStr, CString};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tessera_ffi::{
    build_info, cpu_features, devices, DeviceType, LogLevel, LogListener, Session, SessionOptions,
    TensorData, TesseraError,
};

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn input(name: &str, shape: &[u64], values: &[f32]) -> TensorData {
    TensorData {
        name: name.into(),
        dtype: "F32".into(),
        shape: shape.to_vec(),
        data: f32_bytes(values),
    }
}

fn cpu_session() -> Arc<Session> {
    Session::new(SessionOptions { device: "CPU".into(), threads: Some(2), ..Default::default() })
        .expect("CPU session")
}

fn assert_close(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() <= tol * e.abs().max(1.0), "{actual:?} vs {expected:?}");
    }
}

/// Asserts the error's variant (by name) and that its message mentions each of `words`.
fn assert_error<T: std::fmt::Debug>(result: Result<T, TesseraError>, kind: &str, words: &[&str]) {
    let e = result.expect_err("expected an error");
    assert_eq!(e.kind(), kind, "wrong kind for {e:?}");
    for w in words {
        assert!(e.message().contains(w), "message {:?} should mention {w:?}", e.message());
    }
}

/// w: 2 rows of 3 (`[3, 2]`), x: 2 columns of 3 (`[3, 2]`), y = w·x (`[2, 2]`), p = softmax(y).
fn matmul_softmax_doc() -> String {
    json!({
        "version": 1,
        "tensors": [
            {"name": "w", "type": "F32", "shape": [3, 2], "values": [1, 2, 3, 0, 1, -1]},
            {"name": "x", "type": "F32", "shape": [3, 2]}
        ],
        "nodes": [
            {"name": "p", "op": "SOFT_MAX", "src": ["y"]},
            {"name": "y", "op": "MUL_MAT", "src": ["w", "x"]}
        ],
        "outputs": ["y", "p"]
    })
    .to_string()
}

fn matmul_softmax_inputs() -> Vec<TensorData> {
    vec![input("x", &[3, 2], &[1.0, 0.0, 1.0, 2.0, 1.0, 0.0])]
}

#[test]
fn devices_lists_the_cpu() {
    let list = devices().unwrap();
    let cpu = list.iter().find(|d| d.device_type == DeviceType::Cpu).expect("a CPU device");
    assert_eq!(cpu.name, "CPU");
    assert_eq!(cpu.backend, "CPU");
    assert!(!cpu.description.is_empty());
    assert!(cpu.memory_total > 0 && cpu.memory_free <= cpu.memory_total, "{cpu:?}");
    assert_eq!(list.last().unwrap().device_type, DeviceType::Cpu, "the CPU comes last");
}

#[test]
fn cpu_features_and_tiers() {
    let info = cpu_features().unwrap();
    if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        assert!(!info.pairs.is_empty());
    }
    assert!(info.pairs.iter().all(|p| !p.name.is_empty() && !p.value.is_empty()));
    assert!(info.tiers.iter().any(|t| t.dtype == "Q4_0"));
    assert!(info.tiers.iter().any(|t| t.dtype == "F32"));
    assert!(info.tiers.iter().all(|t| !t.tier.is_empty()));
}

#[test]
fn build_info_reports_the_build() {
    let b = build_info().unwrap();
    assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
    assert!(b.target.contains('-'), "{}", b.target);
    assert!(b.profile == "debug" || b.profile == "release");
}

#[test]
fn computes_matmul_and_softmax() {
    let s = cpu_session();
    assert_eq!(s.device(), "CPU");
    let out = s.compute(matmul_softmax_doc(), matmul_softmax_inputs()).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].name, "y");
    assert_eq!(out[0].dtype, "F32");
    assert_eq!(out[0].shape, vec![2, 2]);
    // y[n=0] = [1+0+3, 0+0-1], y[n=1] = [2+2+0, 0+1+0]
    assert_close(&f32_values(&out[0].data), &[4.0, -1.0, 4.0, 1.0], 1e-6);
    let (e5, e3) = ((-5.0f32).exp(), (-3.0f32).exp());
    let expected = [1.0 / (1.0 + e5), e5 / (1.0 + e5), 1.0 / (1.0 + e3), e3 / (1.0 + e3)];
    assert_eq!(out[1].name, "p");
    assert_close(&f32_values(&out[1].data), &expected, 1e-5);
    // The session is reusable.
    let again = s.compute(matmul_softmax_doc(), matmul_softmax_inputs()).unwrap();
    assert_eq!(again, out);
}

/// Q8_0 rows whose values are exactly representable: row 0 = (8k - 127) / 16 (scale 1/16),
/// row 1 = (127 - 4k) / 32 (scale 1/32).
fn q8_0_weights() -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0x2C00u16.to_le_bytes()); // f16 1/16
    bytes.extend((0..32).map(|k| (8 * k - 127) as i8 as u8));
    bytes.extend_from_slice(&0x2800u16.to_le_bytes()); // f16 1/32
    bytes.extend((0..32).map(|k| (127 - 4 * k) as i8 as u8));
    bytes
}

#[test]
fn computes_with_a_q8_0_constant() {
    let data = tessera_ffi::document::base64_encode(&q8_0_weights());
    let doc = json!({
        "version": 1,
        "tensors": [
            {"name": "w", "type": "Q8_0", "shape": [32, 2], "data": data},
            {"name": "x", "type": "F32", "shape": [32]}
        ],
        "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["w", "x"]}],
        "outputs": ["y"]
    })
    .to_string();
    // x = 127/128 everywhere (exact in Q8_0 too, with scale 1/128).
    let x = input("x", &[32], &[127.0 / 128.0; 32]);
    let out = cpu_session().compute(doc, vec![x]).unwrap();
    assert_eq!(out[0].shape, vec![2]);
    // Row sums: sum(8k - 127)/16 = -6, sum(127 - 4k)/32 = 65.
    assert_close(&f32_values(&out[0].data), &[-6.0 * 127.0 / 128.0, 65.0 * 127.0 / 128.0], 1e-5);
}

#[test]
fn strided_outputs_come_back_contiguous() {
    let doc = json!({
        "version": 1,
        "tensors": [{"name": "a", "type": "F32", "shape": [3, 2]}],
        "nodes": [{"name": "t", "op": "TRANSPOSE", "src": ["a"]}],
        "outputs": ["t"]
    })
    .to_string();
    let out = cpu_session()
        .compute(doc, vec![input("a", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])])
        .unwrap();
    assert_eq!(out[0].name, "t");
    assert_eq!(out[0].shape, vec![2, 3]);
    assert_eq!(f32_values(&out[0].data), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
}

/// Issue 12 through the API: outputs that are views of an intermediate (`y = 2x`, read only
/// through the view) come back with `y`'s values while later nodes (`c = 5 tanh(x^2)`) need
/// memory.
#[test]
fn output_views_of_intermediates_come_back_with_their_values() {
    let xs: Vec<f32> = (0..32).map(|i| i as f32 * 0.25 - 3.0).collect();
    let views = [
        (json!({"op": "RESHAPE", "src": ["y"], "params": {"shape": [32]}}), (0..32).collect()),
        (
            json!({"op": "VIEW", "src": ["y"], "params": {"shape": [8, 2], "offset": 32}}),
            (8..24).collect::<Vec<usize>>(),
        ),
        (json!({"op": "TRANSPOSE", "src": ["y"]}), (0..32).map(|k| (k % 4) * 8 + k / 4).collect()),
    ];
    for (view, picks) in views {
        let mut v = view.clone();
        v["name"] = json!("v");
        let doc = json!({
            "version": 1,
            "tensors": [{"name": "x", "type": "F32", "shape": [8, 4]}],
            "nodes": [
                {"name": "y", "op": "SCALE", "src": ["x"], "params": {"scale": 2}},
                v,
                {"name": "a", "op": "SQR", "src": ["x"]},
                {"name": "b", "op": "TANH", "src": ["a"]},
                {"name": "c", "op": "SCALE", "src": ["b"], "params": {"scale": 5}}
            ],
            "outputs": ["v", "c"]
        })
        .to_string();
        let out = cpu_session().compute(doc, vec![input("x", &[8, 4], &xs)]).unwrap();
        let want: Vec<f32> = picks.iter().map(|&i| 2.0 * xs[i]).collect();
        assert_eq!(f32_values(&out[0].data), want, "{view}");
    }
}

fn doc_error(doc: Value) -> Result<Vec<TensorData>, TesseraError> {
    cpu_session().compute(doc.to_string(), vec![])
}

#[test]
fn graph_document_errors_are_typed_and_named() {
    let x = json!({"name": "x", "type": "F32", "shape": [4], "values": [1, 2, 3, 4]});
    assert_error(
        doc_error(
            json!({"version": 1, "tensors": [x], "nodes": [{"name": "y", "op": "FOO", "src": ["x"]}], "outputs": ["y"]}),
        ),
        "UnknownOp",
        &["\"y\"", "FOO"],
    );
    assert_error(
        doc_error(
            json!({"version": 1, "tensors": [{"name": "w", "type": "F99", "shape": [4]}], "outputs": ["w"]}),
        ),
        "UnknownType",
        &["\"w\"", "F99"],
    );
    assert_error(
        doc_error(
            json!({"version": 1, "tensors": [x], "nodes": [{"name": "y", "op": "ADD", "src": ["x", "nope"]}], "outputs": ["y"]}),
        ),
        "InvalidGraph",
        &["\"y\"", "nope"],
    );
    assert_error(
        doc_error(json!({
            "version": 1,
            "tensors": [x, {"name": "m", "type": "F32", "shape": [3, 2], "values": [0, 0, 0, 0, 0, 0]}],
            "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["m", "x"]}],
            "outputs": ["y"]
        })),
        "ShapeMismatch",
        &["\"y\"", "MUL_MAT"],
    );
    assert_error(
        doc_error(
            json!({"version": 1, "tensors": [{"name": "w", "type": "F32", "shape": [4], "data": "AAAAAA=="}], "outputs": ["w"]}),
        ),
        "DataLength",
        &["\"w\"", "16", "4"],
    );
    assert_error(
        doc_error(
            json!({"version": 1, "tensors": [x, {"name": "x", "type": "F32", "shape": [2]}], "outputs": ["x"]}),
        ),
        "InvalidGraph",
        &["duplicate", "\"x\""],
    );
    assert_error(
        doc_error(json!({"version": 3, "tensors": [x], "outputs": ["x"]})),
        "InvalidGraph",
        &["version"],
    );
    assert_error(
        doc_error(json!({
            "version": 1,
            "tensors": [x],
            "nodes": [{"name": "a", "op": "ADD", "src": ["x", "b"]}, {"name": "b", "op": "ADD", "src": ["a", "x"]}],
            "outputs": ["b"]
        })),
        "InvalidGraph",
        &["cycle"],
    );
    assert_error(
        doc_error(json!({"version": 1, "tensors": [x], "outputs": ["missing"]})),
        "InvalidGraph",
        &["missing"],
    );
    assert_error(cpu_session().compute("{not json".into(), vec![]), "InvalidGraph", &["JSON"]);
}

#[test]
fn input_errors_name_the_input() {
    let s = cpu_session();
    let run = |inputs: Vec<TensorData>| s.compute(matmul_softmax_doc(), inputs);
    let good = || matmul_softmax_inputs()[0].clone();
    assert_error(run(vec![]), "InvalidArgument", &["missing", "\"x\""]);
    assert_error(
        run(vec![good(), input("z", &[1], &[0.0])]),
        "InvalidArgument",
        &["\"z\"", "\"x\""],
    );
    assert_error(
        run(vec![good(), input("w", &[3, 2], &[0.0; 6])]),
        "InvalidArgument",
        &["\"w\"", "constant"],
    );
    assert_error(run(vec![good(), good()]), "InvalidArgument", &["\"x\"", "twice"]);
    assert_error(
        run(vec![input("x", &[2, 3], &[0.0; 6])]),
        "ShapeMismatch",
        &["\"x\"", "[2, 3]", "[3, 2]"],
    );
    assert_error(run(vec![input("x", &[3, 2, 1], &[0.0; 6])]), "ShapeMismatch", &["\"x\""]);
    assert_error(
        run(vec![TensorData { dtype: "F16".into(), data: vec![0; 12], ..good() }]),
        "InvalidArgument",
        &["\"x\"", "F16", "F32"],
    );
    assert_error(
        run(vec![TensorData { dtype: "F64".into(), ..good() }]),
        "UnknownType",
        &["\"x\"", "F64"],
    );
    assert_error(
        run(vec![TensorData { data: vec![0; 20], ..good() }]),
        "DataLength",
        &["\"x\"", "24", "20"],
    );
    // Still usable after errors.
    assert!(run(vec![good()]).is_ok());
}

#[test]
fn options_are_checked() {
    assert_error(
        Session::new(SessionOptions {
            device: "CPU".into(),
            threads: Some(0),
            ..Default::default()
        }),
        "InvalidArgument",
        &["0"],
    );
    assert_error(
        Session::new(SessionOptions {
            device: "CPU".into(),
            threads: Some(100_000),
            ..Default::default()
        }),
        "InvalidArgument",
        &["100000"],
    );
    assert_error(
        Session::new(SessionOptions { device: "TPU9".into(), threads: None, ..Default::default() }),
        "UnknownDevice",
        &["TPU9", "CPU"],
    );
    let auto = Session::new(SessionOptions::default()).unwrap();
    assert!(!auto.device().is_empty());
    let lower = Session::new(SessionOptions {
        device: "cpu".into(),
        threads: Some(1),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(lower.device(), "CPU");
    assert_eq!(lower.backends(), vec!["CPU".to_string()]);
}

/// A chain of `n` 512×512 F32 matmuls: long enough to cancel in the middle.
fn long_chain(n: usize) -> (String, Vec<TensorData>) {
    let d = 512u64;
    let mut nodes = Vec::new();
    let mut prev = "x".to_string();
    for i in 0..n {
        let name = format!("y{i}");
        nodes.push(json!({"name": name, "op": "MUL_MAT", "src": ["w", prev]}));
        prev = name;
    }
    let doc = json!({
        "version": 1,
        "tensors": [
            {"name": "w", "type": "F32", "shape": [d, d]},
            {"name": "x", "type": "F32", "shape": [d, d]}
        ],
        "nodes": nodes,
        "outputs": [prev]
    })
    .to_string();
    let values = vec![0.001f32; (d * d) as usize];
    (doc, vec![input("w", &[d, d], &values), input("x", &[d, d], &values)])
}

/// Polls until `s` has `n` computes in flight (running or registered), then returns; panics
/// after 60 s (the computes were never started).
fn wait_in_flight(s: &Session, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.computes_in_flight() < n {
        assert!(Instant::now() < deadline, "{n} computes never got in flight");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Cancels the computes of `s` as soon as one is in flight (`cancel_all` says how many it
/// reached); panics after 60 s.
fn cancel_once_running(s: &Session) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.cancel_all() == 0 {
        assert!(Instant::now() < deadline, "the compute never got in flight");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn cancel_stops_a_long_compute() {
    let s = cpu_session();
    // 200 chained 512^3 matmuls: far longer than the cancel takes to arrive.
    let (doc, inputs) = long_chain(200);
    let worker = {
        let s = s.clone();
        std::thread::spawn(move || s.compute(doc, inputs))
    };
    cancel_once_running(&s);
    let result = worker.join().unwrap();
    assert_error(result, "Cancelled", &["cancel"]);
    assert_eq!(s.computes_in_flight(), 0);
    // A later compute is not affected: its values are right.
    let out = s.compute(matmul_softmax_doc(), matmul_softmax_inputs()).unwrap();
    assert_close(&f32_values(&out[0].data), &[4.0, -1.0, 4.0, 1.0], 1e-6);
    // Cancel with nothing running reaches nothing and does not touch the next compute.
    assert_eq!(s.cancel_all(), 0);
    let out = s.compute(matmul_softmax_doc(), matmul_softmax_inputs()).unwrap();
    assert_close(&f32_values(&out[0].data), &[4.0, -1.0, 4.0, 1.0], 1e-6);
}

#[test]
fn close_waits_for_work_in_flight_then_rejects_calls() {
    let s = cpu_session();
    // Two computes in flight: one running, the other registered and waiting for it.
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let s = s.clone();
            let (doc, inputs) = long_chain(8);
            std::thread::spawn(move || s.compute(doc, inputs))
        })
        .collect();
    wait_in_flight(&s, 2);
    s.close();
    assert!(s.is_closed());
    // close returned only once both were done, and both ran to the end.
    assert_eq!(s.computes_in_flight(), 0);
    for w in workers {
        let out = w.join().unwrap().expect("a compute in flight when close was called");
        assert_eq!(out.len(), 1);
        // Every element of y0 is 512 * 0.001^2, and each step multiplies by 512 * 0.001.
        let want = 512f64.powi(8) * 1e-27;
        let values = f32_values(&out[0].data);
        assert_eq!(values.len(), 512 * 512);
        for v in values {
            assert!((f64::from(v) - want).abs() <= 1e-5 * want, "{v} vs {want}");
        }
    }
    assert_error(s.compute(matmul_softmax_doc(), matmul_softmax_inputs()), "Closed", &["closed"]);
    s.close();
    s.cancel();
    assert_error(
        block_on(s.clone().compute_async(matmul_softmax_doc(), matmul_softmax_inputs())),
        "Closed",
        &[],
    );
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor, as the foreign side's would be.
fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn compute_async_runs_on_another_thread() {
    let s = cpu_session();
    let out =
        block_on(s.clone().compute_async(matmul_softmax_doc(), matmul_softmax_inputs())).unwrap();
    assert_close(&f32_values(&out[0].data), &[4.0, -1.0, 4.0, 1.0], 1e-6);
    assert_error(block_on(s.clone().compute_async("{}".into(), vec![])), "InvalidGraph", &[]);
}

#[test]
fn cancel_reaches_an_async_compute_and_dropping_it_cancels() {
    let s = cpu_session();
    let (doc, inputs) = long_chain(200);
    let canceller = {
        let s = s.clone();
        std::thread::spawn(move || cancel_once_running(&s))
    };
    assert_error(block_on(s.clone().compute_async(doc, inputs)), "Cancelled", &[]);
    canceller.join().unwrap();

    // Dropping a started future cancels its compute. The chain would run for hours (20000
    // matmuls of 512^3), so the compute leaving the session proves that it was cancelled.
    let (doc, inputs) = long_chain(20_000);
    {
        let fut = s.clone().compute_async(doc, inputs);
        let mut fut = Box::pin(fut);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        wait_in_flight(&s, 1);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while s.computes_in_flight() > 0 {
        assert!(Instant::now() < deadline, "the dropped future's compute was not cancelled");
        std::thread::sleep(Duration::from_millis(5));
    }
    s.close();
    assert!(s.is_closed());
}

#[derive(Default)]
struct Collect(Mutex<Vec<(LogLevel, String, String)>>);

struct Listener(Arc<Collect>);

impl LogListener for Listener {
    fn on_log(&self, level: LogLevel, target: String, message: String) {
        self.0 .0.lock().unwrap().push((level, target, message));
    }
}

#[test]
fn log_listener_receives_records() {
    let seen = Arc::new(Collect::default());
    tessera_ffi::set_log_listener(Some(Box::new(Listener(seen.clone()))));
    tessera_ffi::set_log_level(LogLevel::Debug);
    assert_eq!(tessera_ffi::log_level(), LogLevel::Debug);
    log::info!(target: "tessera_test", "hello {}", 42);
    log::trace!(target: "tessera_test", "too verbose");
    tessera_ffi::set_log_listener(None);
    log::warn!(target: "tessera_test", "after removal");
    tessera_ffi::set_log_level(LogLevel::Info);
    let seen = seen.0.lock().unwrap();
    let ours: Vec<_> = seen.iter().filter(|(_, t, _)| t == "tessera_test").collect();
    assert_eq!(ours.len(), 1, "{seen:?}");
    assert_eq!(ours[0].0, LogLevel::Info);
    assert_eq!(ours[0].2, "hello 42");
}

fn call(request: &str) -> Value {
    let c = CString::new(request).unwrap();
    // SAFETY: a valid NUL-terminated string; the response is freed once below.
    unsafe {
        let response = tessera_ffi::c_api::tessera_call_json(c.as_ptr());
        assert!(!response.is_null());
        let text = CStr::from_ptr(response).to_str().unwrap().to_string();
        tessera_ffi::c_api::tessera_free_string(response);
        serde_json::from_str(&text).unwrap()
    }
}

#[test]
fn c_abi_round_trip() {
    let devices = call(r#"{"method":"devices"}"#);
    let list = devices["ok"].as_array().unwrap();
    let cpu = list.iter().find(|d| d["type"] == "cpu").unwrap();
    assert_eq!(cpu["name"], "CPU");
    assert!(cpu["memoryTotal"].as_u64().unwrap() > 0);
    assert!(cpu["caps"]["bufferFromHostPtr"].is_boolean());

    let features = call(r#"{"method":"cpuFeatures"}"#);
    assert!(features["ok"]["pairs"].is_array());
    assert!(features["ok"]["tiers"].as_array().unwrap().iter().any(|t| t["dtype"] == "Q8_0"));

    let build = call(r#"{"method":"buildInfo"}"#);
    assert_eq!(build["ok"]["version"], env!("CARGO_PKG_VERSION"));

    let x = tessera_ffi::document::base64_encode(&f32_bytes(&[1.0, 0.0, 1.0, 2.0, 1.0, 0.0]));
    let graph: Value = serde_json::from_str(&matmul_softmax_doc()).unwrap();
    let request = json!({
        "method": "compute",
        "graph": graph,
        "inputs": [{"name": "x", "dtype": "F32", "shape": [3, 2], "data": x}],
        "options": {"device": "auto", "threads": 2}
    });
    let response = call(&request.to_string());
    let outputs = response["ok"]["outputs"].as_array().unwrap_or_else(|| panic!("{response}"));
    assert_eq!(outputs[0]["name"], "y");
    assert_eq!(outputs[0]["shape"], json!([2, 2]));
    let y = tessera_ffi::document::base64_decode(outputs[0]["data"].as_str().unwrap()).unwrap();
    assert_close(&f32_values(&y), &[4.0, -1.0, 4.0, 1.0], 1e-6);

    let mut bad = request.clone();
    bad["inputs"][0]["shape"] = json!([2, 3]);
    let e = call(&bad.to_string());
    assert_eq!(e["error"]["kind"], "ShapeMismatch");
    assert!(e["error"]["message"].as_str().unwrap().contains("\"x\""));

    let mut bad = request.clone();
    bad["options"]["threads"] = json!(0);
    assert_eq!(call(&bad.to_string())["error"]["kind"], "InvalidArgument");

    assert_eq!(call(r#"{"method":"nope"}"#)["error"]["kind"], "InvalidArgument");
    assert_eq!(call("not json")["error"]["kind"], "InvalidArgument");
    assert_eq!(
        call(r#"{"method":"compute","graph":{"version":1,"outputs":[]}}"#)["error"]["kind"],
        "InvalidGraph"
    );

    // SAFETY: NULL is allowed; the response is freed once.
    let null = unsafe {
        let r = tessera_ffi::c_api::tessera_call_json(std::ptr::null());
        let text = CStr::from_ptr(r).to_str().unwrap().to_string();
        tessera_ffi::c_api::tessera_free_string(r);
        text
    };
    assert!(null.contains("InvalidArgument") && null.contains("NULL"), "{null}");
    let invalid = [0xffu8, 0xfe, 0];
    // SAFETY: a NUL-terminated byte string; the response is freed once.
    let text = unsafe {
        let r = tessera_ffi::c_api::tessera_call_json(invalid.as_ptr().cast());
        let text = CStr::from_ptr(r).to_str().unwrap().to_string();
        tessera_ffi::c_api::tessera_free_string(r);
        text
    };
    assert!(text.contains("UTF-8"), "{text}");
    // SAFETY: freeing NULL is a no-op.
    unsafe { tessera_ffi::c_api::tessera_free_string(std::ptr::null_mut()) };
}

#[test]
fn json_protocol_sessions_cancel_and_close() {
    let open = tessera_ffi::call_json(
        r#"{"method":"openSession","options":{"device":"CPU","threads":null}}"#.into(),
    );
    let open: Value = serde_json::from_str(&open).unwrap();
    let id = open["ok"]["session"].as_u64().unwrap_or_else(|| panic!("{open}"));

    // A long compute on the session, cancelled from another thread through the protocol.
    let (doc, inputs) = long_chain(200);
    let inputs: Vec<Value> = inputs
        .iter()
        .map(|t| {
            json!({"name": t.name, "dtype": t.dtype, "shape": t.shape,
                   "data": tessera_ffi::document::base64_encode(&t.data)})
        })
        .collect();
    let graph: Value = serde_json::from_str(&doc).unwrap();
    let request =
        json!({"method": "compute", "session": id, "graph": graph, "inputs": inputs}).to_string();
    let worker = std::thread::spawn(move || tessera_ffi::call_json(request));
    let deadline = Instant::now() + Duration::from_secs(30);
    // Cancel once the compute is running (cancel says whether one was).
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let r: Value = serde_json::from_str(&tessera_ffi::call_json(
            json!({"method": "cancel", "session": id}).to_string(),
        ))
        .unwrap();
        if r["ok"]["cancelled"] == json!(true) || Instant::now() > deadline {
            break;
        }
    }
    let response: Value = serde_json::from_str(&worker.join().unwrap()).unwrap();
    assert_eq!(response["error"]["kind"], "Cancelled", "{response}");

    // The session still computes, then closes; afterwards its number answers Closed.
    let x = tessera_ffi::document::base64_encode(&f32_bytes(&[1.0, 0.0, 1.0, 2.0, 1.0, 0.0]));
    let graph: Value = serde_json::from_str(&matmul_softmax_doc()).unwrap();
    let compute = json!({"method": "compute", "session": id, "graph": graph,
                         "inputs": [{"name": "x", "dtype": "F32", "shape": [3, 2], "data": x}]})
    .to_string();
    let ok: Value = serde_json::from_str(&tessera_ffi::call_json(compute.clone())).unwrap();
    assert_eq!(ok["ok"]["outputs"][1]["name"], "p", "{ok}");
    let closed: Value = serde_json::from_str(&tessera_ffi::call_json(
        json!({"method": "closeSession", "session": id}).to_string(),
    ))
    .unwrap();
    assert_eq!(closed["ok"]["closed"], true);
    let after: Value = serde_json::from_str(&tessera_ffi::call_json(compute)).unwrap();
    assert_eq!(after["error"]["kind"], "Closed", "{after}");
    let again: Value = serde_json::from_str(&tessera_ffi::call_json(
        json!({"method": "closeSession", "session": id}).to_string(),
    ))
    .unwrap();
    assert_eq!(again["ok"]["closed"], true);
    let unknown: Value = serde_json::from_str(&tessera_ffi::call_json(
        json!({"method": "cancel", "session": 999_999}).to_string(),
    ))
    .unwrap();
    assert_eq!(unknown["error"]["kind"], "InvalidArgument");

    let level: Value = serde_json::from_str(&tessera_ffi::call_json(
        r#"{"method":"setLogLevel","level":"info"}"#.into(),
    ))
    .unwrap();
    assert_eq!(level, json!({"ok": {}}));
    let bad: Value = serde_json::from_str(&tessera_ffi::call_json(
        r#"{"method":"setLogLevel","level":"loud"}"#.into(),
    ))
    .unwrap();
    assert_eq!(bad["error"]["kind"], "InvalidArgument");
}
