//! `Session`: computes graph documents on a chosen device, with the CPU as fallback.
//!
//! A session owns a scheduler over the chosen device's backend and the CPU backend (once, when
//! the chosen device is the CPU). Computes on one session run one at a time; `cancel()` and
//! `close()` may be called from any thread while a compute runs.

use crate::error::{guard, guard_or, FfiResult, TesseraError};
use crate::oneshot;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tessera_core::backend::{AbortCallback, Backend, BackendParams, DeviceType};
use tessera_core::desc::GraphDesc;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_tensor, set_tensor};
use tessera_core::{DType, Error, TensorId};

/// The largest thread count a session accepts (the CPU backend's limit).
pub const MAX_THREADS: u32 = tessera_cpu::backend::MAX_THREADS as u32;

/// How to open a [`Session`].
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct SessionOptions {
    /// A device name from `devices()` (case-insensitive), or "auto" for the best device: a GPU
    /// when there is one, else the CPU.
    #[uniffi(default = "auto")]
    pub device: String,
    /// CPU worker threads, 1 to 512; `None` for the number of performance cores.
    #[uniffi(default = None)]
    pub threads: Option<u32>,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions { device: "auto".into(), threads: None }
    }
}

/// A named tensor's bytes: an input to, or an output of, a compute.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct TensorData {
    /// The tensor's name in the graph document.
    pub name: String,
    /// The type name ("F32", "F16", "I32", "Q8_0" ...).
    pub dtype: String,
    /// The shape, innermost dimension first (ggml's `ne`). Inputs must give exactly the shape
    /// of the document; outputs give the tensor's shape without trailing 1s (at least one
    /// dimension).
    pub shape: Vec<u64>,
    /// The bytes, little-endian, contiguous (GGUF block layout for quantized types).
    pub data: Vec<u8>,
}

/// Cancellation flag of one compute.
#[derive(Debug, Default)]
pub(crate) struct CancelToken(AtomicBool);

impl CancelToken {
    pub(crate) fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct State {
    closed: bool,
    in_flight: usize,
    active: Vec<Arc<CancelToken>>,
}

/// A compute device with its scheduler. Safe to share between threads.
#[derive(uniffi::Object)]
pub struct Session {
    device: String,
    backends: Vec<String>,
    state: Mutex<State>,
    idle: Condvar,
    scheduler: Mutex<Option<Scheduler>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("device", &self.device)
            .field("backends", &self.backends)
            .finish()
    }
}

/// Work registered with a session; unregisters on drop, waking `close()`.
struct Ticket<'a> {
    session: &'a Session,
    token: Arc<CancelToken>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.session.state);
        state.in_flight -= 1;
        state.active.retain(|t| !Arc::ptr_eq(t, &self.token));
        if state.in_flight == 0 {
            self.session.idle.notify_all();
        }
    }
}

/// Locks a mutex, recovering from poisoning (every exported call catches panics, so a panic
/// while a lock was held must not make the session unusable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn check_threads(threads: Option<u32>) -> FfiResult<Option<usize>> {
    match threads {
        None => Ok(None),
        Some(n) if (1..=MAX_THREADS).contains(&n) => Ok(Some(n as usize)),
        Some(n) => Err(TesseraError::invalid_argument(format!(
            "thread count {n} must be between 1 and {MAX_THREADS}"
        ))),
    }
}

fn unknown_device(name: &str) -> TesseraError {
    let known: Vec<String> =
        crate::registry::registry().devices().iter().map(|d| d.name()).collect();
    TesseraError::UnknownDevice {
        message: format!("unknown device {name:?}; available: \"auto\", {}", quoted(&known)),
    }
}

fn quoted(names: &[String]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

fn shape_text(shape: &[u64]) -> String {
    format!("{shape:?}")
}

/// A tensor's shape without trailing 1s (at least one dimension).
fn trimmed_shape(ne: [usize; 4]) -> Vec<u64> {
    let mut n = ne.len();
    while n > 1 && ne[n - 1] == 1 {
        n -= 1;
    }
    ne[..n].iter().map(|&d| d as u64).collect()
}

impl Session {
    /// Opens the backends for `options` (the blocking constructor behind [`Session::new`]).
    pub fn open(options: SessionOptions) -> FfiResult<Session> {
        let threads = check_threads(options.threads)?;
        let registry = crate::registry::registry();
        let params = BackendParams { threads };
        let wanted = options.device.trim();
        let first: Box<dyn Backend> = if wanted.is_empty() || wanted.eq_ignore_ascii_case("auto") {
            registry.init_best(&params)?
        } else {
            if registry.device_by_name(wanted).is_none() {
                return Err(unknown_device(wanted));
            }
            registry.init_by_name(wanted, &params)?
        };
        let device = first.device();
        let mut backends = vec![first];
        if device.device_type() != DeviceType::Cpu {
            match registry.init_by_type(DeviceType::Cpu, &params) {
                Ok(cpu) => backends.push(cpu),
                Err(e) => log::warn!("no CPU fallback for {}: {e}", device.name()),
            }
        }
        let names = backends.iter().map(|b| b.name()).collect();
        let mut scheduler = Scheduler::new(backends)?;
        // Graph constants are weights: those only MUL_MAT reads go to an extra buffer type
        // (e.g. CPU_REPACK) when the device offers one that accepts them.
        scheduler.use_registry_extra_buffer_types(registry);
        log::info!("session on {} ({})", device.name(), device.description());
        Ok(Session {
            device: device.name(),
            backends: names,
            state: Mutex::new(State::default()),
            idle: Condvar::new(),
            scheduler: Mutex::new(Some(scheduler)),
        })
    }

    /// Registers a compute; fails once the session is closed.
    fn enter(&self, token: Arc<CancelToken>) -> FfiResult<Ticket<'_>> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(TesseraError::closed());
        }
        state.in_flight += 1;
        state.active.push(token.clone());
        Ok(Ticket { session: self, token })
    }

    /// Computes `graph_json` with `inputs` under `token` (the body of `compute` and
    /// `compute_async`). Panics are caught.
    pub(crate) fn run(
        &self,
        token: Arc<CancelToken>,
        graph_json: &str,
        inputs: Vec<TensorData>,
    ) -> FfiResult<Vec<TensorData>> {
        guard("Session.compute", || {
            let ticket = self.enter(token)?;
            let result = self.compute_graph(&ticket.token, graph_json, inputs);
            match result {
                Err(_) if ticket.token.is_cancelled() => Err(TesseraError::cancelled()),
                other => other,
            }
        })
    }

    fn compute_graph(
        &self,
        token: &Arc<CancelToken>,
        graph_json: &str,
        inputs: Vec<TensorData>,
    ) -> FfiResult<Vec<TensorData>> {
        let desc = GraphDesc::from_json(graph_json)?;
        let mut built = desc.build()?;
        // Outputs that are strided views are read through a CONT node added here, so that every
        // output comes back contiguous.
        let mut outputs: Vec<(String, TensorId)> = Vec::with_capacity(built.outputs.len());
        for (name, id) in &built.outputs {
            let mut id = *id;
            if !built.graph.get(id)?.layout.is_contiguous() {
                let in_output = |e: Error| Error::InGraph {
                    kind: "output".into(),
                    name: name.clone(),
                    error: Box::new(e),
                };
                id = built.graph.cont(id).map_err(in_output)?;
                built.graph.set_output(id)?;
            }
            outputs.push((name.clone(), id));
        }
        let inputs = match_inputs(&desc, &built.inputs, inputs, &built.graph)?;

        let mut slot = lock(&self.scheduler);
        let scheduler = slot.as_mut().ok_or_else(TesseraError::closed)?;
        if token.is_cancelled() {
            return Err(TesseraError::cancelled());
        }
        let flag = token.clone();
        let abort: AbortCallback = Arc::new(move || flag.is_cancelled());
        for i in 0..scheduler.backends().len() {
            if let Some(b) = scheduler.backend_mut(i) {
                b.set_abort_callback(Some(abort.clone()));
            }
        }
        let result = (|| -> FfiResult<Vec<TensorData>> {
            scheduler.alloc_graph(&mut built.graph)?;
            for (id, bytes) in &built.constants {
                set_tensor(&built.graph, *id, bytes)?;
            }
            for (id, bytes) in &inputs {
                set_tensor(&built.graph, *id, bytes)?;
            }
            scheduler.compute().map_err(|e| match e {
                Error::Aborted if token.is_cancelled() => TesseraError::cancelled(),
                e => e.into(),
            })?;
            outputs
                .iter()
                .map(|(name, id)| {
                    let t = built.graph.get(*id)?;
                    Ok(TensorData {
                        name: name.clone(),
                        dtype: t.dtype().name().to_string(),
                        shape: trimmed_shape(t.ne()),
                        data: get_tensor(&built.graph, *id)?,
                    })
                })
                .collect()
        })();
        for i in 0..scheduler.backends().len() {
            if let Some(b) = scheduler.backend_mut(i) {
                b.set_abort_callback(None);
            }
        }
        result
    }
}

impl Session {
    /// Cancels every compute in flight; returns how many there were.
    pub fn cancel_all(&self) -> usize {
        guard_or(
            "Session.cancel",
            || 0,
            || {
                let state = lock(&self.state);
                for token in &state.active {
                    token.cancel();
                }
                if !state.active.is_empty() {
                    log::debug!("cancelling {} compute(s) on {}", state.active.len(), self.device);
                }
                state.active.len()
            },
        )
    }
}

/// Checks the given inputs against the document's and returns the bytes to write per tensor.
fn match_inputs(
    desc: &GraphDesc,
    wanted: &[(String, TensorId)],
    given: Vec<TensorData>,
    graph: &tessera_core::Graph,
) -> FfiResult<Vec<(TensorId, Vec<u8>)>> {
    let ids: HashMap<&str, TensorId> = wanted.iter().map(|(n, id)| (n.as_str(), *id)).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(given.len());
    for input in given {
        let name = input.name.as_str();
        let Some(&id) = ids.get(name) else {
            let names: Vec<String> = wanted.iter().map(|(n, _)| n.clone()).collect();
            let is_constant = desc.tensors.iter().any(|t| t.name == name);
            let why = if is_constant {
                "is a constant, not an input"
            } else {
                "is not an input of the graph"
            };
            return Err(TesseraError::invalid_argument(format!(
                "input {name:?} {why}; the graph's inputs are [{}]",
                quoted(&names)
            )));
        };
        if !seen.insert(name.to_string()) {
            return Err(TesseraError::invalid_argument(format!("input {name:?} is given twice")));
        }
        let t = graph.get(id)?;
        let dtype: DType = input.dtype.parse().map_err(|_| TesseraError::UnknownType {
            message: format!("input {name:?}: unknown tensor type {:?}", input.dtype),
        })?;
        if dtype != t.dtype() {
            return Err(TesseraError::invalid_argument(format!(
                "input {name:?}: type {dtype} does not match the graph's {}",
                t.dtype()
            )));
        }
        let doc_shape: Vec<u64> = desc
            .tensors
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.shape.iter().map(|&n| n as u64).collect())
            .unwrap_or_default();
        if input.shape != doc_shape {
            return Err(TesseraError::ShapeMismatch {
                message: format!(
                    "input {name:?}: shape {} does not match the graph's {}",
                    shape_text(&input.shape),
                    shape_text(&doc_shape)
                ),
            });
        }
        if input.data.len() != t.nbytes() {
            return Err(TesseraError::DataLength {
                message: format!(
                    "input {name:?}: expected {} bytes ({dtype} {}), got {}",
                    t.nbytes(),
                    shape_text(&doc_shape),
                    input.data.len()
                ),
            });
        }
        out.push((id, input.data));
    }
    let missing: Vec<String> =
        wanted.iter().filter(|(n, _)| !seen.contains(n)).map(|(n, _)| n.clone()).collect();
    if !missing.is_empty() {
        return Err(TesseraError::invalid_argument(format!(
            "missing input(s) {}",
            quoted(&missing)
        )));
    }
    Ok(out)
}

#[uniffi::export]
impl Session {
    /// Opens a session on `options.device` ("auto": the best device) with the CPU as
    /// fallback for ops the device cannot run.
    ///
    /// Errors: `UnknownDevice`, `InvalidArgument` (thread count), `Backend`.
    #[uniffi::constructor]
    pub fn new(options: SessionOptions) -> FfiResult<Arc<Session>> {
        guard("Session.new", || Session::open(options).map(Arc::new))
    }

    /// The name of the device the session computes on.
    pub fn device(&self) -> String {
        guard_or("Session.device", String::new, || self.device.clone())
    }

    /// The backends of the session's scheduler, in priority order (the chosen device, then the
    /// CPU fallback).
    pub fn backends(&self) -> Vec<String> {
        guard_or("Session.backends", Vec::new, || self.backends.clone())
    }

    /// Computes a graph document (JSON, see docs/graph-format.md) with `inputs` and returns
    /// its outputs in document order. Blocks the calling thread.
    ///
    /// Every input of the document must be given once, with exactly its type and shape and
    /// `data` of exactly its byte size. Outputs come back contiguous.
    pub fn compute(
        &self,
        graph_json: String,
        inputs: Vec<TensorData>,
    ) -> FfiResult<Vec<TensorData>> {
        self.run(Arc::new(CancelToken::default()), &graph_json, inputs)
    }

    /// [`Session::compute`] on a thread of its own; the caller's thread (or coroutine /
    /// task) is not blocked. Dropping the future before it completes (a cancelled Kotlin
    /// coroutine) cancels the compute; Swift tasks await it to the end, so use `cancel()`.
    pub async fn compute_async(
        self: Arc<Self>,
        graph_json: String,
        inputs: Vec<TensorData>,
    ) -> FfiResult<Vec<TensorData>> {
        let token = Arc::new(CancelToken::default());
        let (tx, rx) = oneshot::channel();
        let session = self.clone();
        let worker_token = token.clone();
        let spawned = std::thread::Builder::new().name("tessera-compute".into()).spawn(move || {
            tx.send(session.run(worker_token, &graph_json, inputs));
        });
        if let Err(e) = spawned {
            return Err(TesseraError::internal(format!("could not start a compute thread: {e}")));
        }
        // If the awaiting side goes away (a cancelled coroutine or task), cancel the work.
        let cancel_on_drop = CancelOnDrop(Some(token));
        let result = rx.await;
        cancel_on_drop.disarm();
        result.unwrap_or_else(|| {
            Err(TesseraError::internal("the compute thread ended without a result"))
        })
    }

    /// Cancels every compute of this session that is running or waiting: each returns the
    /// `Cancelled` error soon after. Computes started later are not affected. Does nothing
    /// when none is running.
    pub fn cancel(&self) {
        self.cancel_all();
    }

    /// Closes the session: waits for the computes in flight to finish, then frees the
    /// session's memory; every later call returns the `Closed` error. Closing twice is fine.
    ///
    /// (In Kotlin this method is named `closeSession()`, since `close()` there is
    /// `AutoCloseable.close`, which releases the object itself.)
    pub fn close(&self) {
        guard_or(
            "Session.close",
            || (),
            || {
                let mut state = lock(&self.state);
                state.closed = true;
                while state.in_flight > 0 {
                    state = self.idle.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                drop(state);
                lock(&self.scheduler).take();
            },
        )
    }

    /// Whether [`Session::close`] was called.
    pub fn is_closed(&self) -> bool {
        guard_or("Session.is_closed", || true, || lock(&self.state).closed)
    }
}

/// Cancels a compute when the future awaiting it is dropped before it finished.
struct CancelOnDrop(Option<Arc<CancelToken>>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            log::debug!("async compute dropped before it finished: cancelling it");
            token.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::DType;

    /// Q4_0 and F16 graph constants read only by MUL_MAT (placed in CPU_REPACK where the
    /// kernel tier has repacked kernels for them) compute as their stored values, compute after
    /// compute.
    #[test]
    fn constants_read_by_mul_mat_compute_their_values() {
        let (k, m, n) = (64usize, 32usize, 3usize);
        let w: Vec<f64> = (0..k * m).map(|i| (i * 7919 % 113) as f64 / 56.0 - 1.0).collect();
        let x: Vec<f32> = (0..k * n).map(|i| (i * 31 % 17) as f32 / 8.0 - 1.0).collect();
        // Q4_0: the kernels quantize the activations to Q8_0; F16 takes them as F32.
        for (dtype, tol) in [(DType::Q4_0, 5e-4), (DType::F16, 1e-10)] {
            let doc = serde_json::json!({
                "version": 1,
                "tensors": [
                    {"name": "w", "type": dtype.name(), "shape": [k, m], "values": w},
                    {"name": "x", "type": "F32", "shape": [k, n]}
                ],
                "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["w", "x"]}],
                "outputs": ["y"]
            })
            .to_string();
            let wq = tessera_core::desc::values_to_bytes(dtype, &w).unwrap();
            let mut wd = vec![0f32; k * m];
            tessera_core::quant::dequantize_row(dtype, &wq, &mut wd).unwrap();
            let want: Vec<f64> = (0..n * m)
                .map(|o| {
                    let (j, i) = (o / m, o % m);
                    (0..k).map(|l| f64::from(wd[i * k + l]) * f64::from(x[j * k + l])).sum()
                })
                .collect();
            let session =
                Session::open(SessionOptions { device: "CPU".into(), threads: Some(2) }).unwrap();
            let inputs = vec![TensorData {
                name: "x".into(),
                dtype: "F32".into(),
                shape: vec![k as u64, n as u64],
                data: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            }];
            for _ in 0..2 {
                let out = session.compute(doc.clone(), inputs.clone()).unwrap();
                let got: Vec<f32> = out[0]
                    .data
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                assert_eq!(got.len(), want.len());
                let num: f64 =
                    got.iter().zip(&want).map(|(&g, &w)| (f64::from(g) - w).powi(2)).sum();
                let den: f64 = want.iter().map(|w| w * w).sum();
                assert!(num <= tol * den, "{dtype}: nmse {:e}", num / den);
            }
        }
    }
}
