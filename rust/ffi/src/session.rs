//! `Session`: computes graph documents on a chosen device, with the CPU as fallback.
//!
//! A session owns a scheduler over the chosen device's backend and the CPU backend (once, when
//! the chosen device is the CPU). Computes on one session run one at a time; `cancel()` and
//! `close()` may be called from any thread while a compute runs (the life cycle of
//! [`crate::gate`]). The graph of the last successful compute stays allocated, weights
//! uploaded, for the next compute of the same document (see [`crate::prepared`]).

use crate::document::DocumentError;
use crate::error::{guard, guard_or, FfiResult, TesseraError};
use crate::gate::{lock, CancelToken, Gate};
use crate::handles::{HandleTable, Names};
use crate::oneshot;
use crate::options::{check_budget, check_threads};
use crate::prepared::{quoted, Constants, DocHasher, PreparedGraph};
use crate::record::uniffi_record_with_defaults;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tessera_core::backend::{AbortCallback, BackendParams, DeviceType};
use tessera_core::registry::DeviceChoice;
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::{get_tensor, set_tensor};
use tessera_core::Error;

pub use crate::options::MAX_THREADS;

uniffi_record_with_defaults! {
    /// How to open a [`Session`].
    #[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Deserialize)]
    #[serde(default, deny_unknown_fields, rename_all = "camelCase")]
    pub struct SessionOptions {
        /// A device name from `devices()` (case-insensitive), or "auto" for the best device: a GPU
        /// when there is one, else the CPU.
        pub device: String = "auto",
        /// CPU worker threads, 1 to 512; `None` for the number of performance cores.
        #[serde(deserialize_with = "crate::options::deserialize_threads")]
        pub threads: Option<u32> = None,
        /// The most bytes one graph may plan on this session's devices (compute buffers, weights,
        /// copies), checked before anything is allocated: a graph that needs more fails with
        /// `OutOfMemory`. `None`: [`DEFAULT_BUDGET_PERCENT`] of the free memory of the session's
        /// devices (the device with the least), taken when a graph is planned.
        #[serde(deserialize_with = "crate::options::deserialize_budget")]
        pub memory_budget: Option<u64> = None,
    }
}

/// The default memory budget of a session, in percent of its devices' free memory.
pub const DEFAULT_BUDGET_PERCENT: u64 = 75;

/// The budget of sessions opened without one, when set (0: none set).
static DEFAULT_BUDGET: AtomicU64 = AtomicU64::new(0);

/// Sets the memory budget of sessions opened without one (and of those already open without
/// one): `Some(bytes)`, or `None` for [`DEFAULT_BUDGET_PERCENT`] of the free memory (the
/// default). For hosts that know their memory limits better than the free memory tells (the
/// protocol fuzz target runs under a memory limit of its own).
pub fn set_default_memory_budget(bytes: Option<u64>) {
    DEFAULT_BUDGET.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// A named tensor's bytes: an input to, or an output of, a compute.
// In the JSON protocol `{name, dtype, shape, data}`, `data` in base64.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record, Serialize, Deserialize)]
#[serde(try_from = "Base64TensorData")]
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
    #[serde(serialize_with = "base64_text")]
    pub data: Vec<u8>,
}

/// A [`TensorData`] as the protocol writes it, `data` in base64.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Base64TensorData {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    data: String,
}

impl TryFrom<Base64TensorData> for TensorData {
    type Error = String;

    fn try_from(t: Base64TensorData) -> Result<TensorData, String> {
        let data = crate::document::base64_decode(&t.data).map_err(|e| {
            let why = match e {
                DocumentError::Base64(why) => why,
                e => e.to_string(),
            };
            format!("input {:?}: \"data\" is not valid base64: {why}", t.name)
        })?;
        Ok(TensorData { name: t.name, dtype: t.dtype, shape: t.shape, data })
    }
}

fn base64_text<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::document::base64_encode(bytes))
}

/// A compute device with its scheduler. Safe to share between threads.
#[derive(uniffi::Object)]
pub struct Session {
    device: String,
    backends: Vec<String>,
    options: SessionOptions,
    gate: Gate,
    engine: Mutex<Option<Engine>>,
    hasher: DocHasher,
    /// How many documents were built (not found as the graph kept from the last compute).
    builds: AtomicUsize,
}

/// The scheduler and the graph it computed last (see [`crate::prepared`]).
struct Engine {
    scheduler: Scheduler,
    last: Option<PreparedGraph>,
    /// Documents loaded with [`Session::load_graph`], each with a scheduler of its own.
    loaded: HandleTable<(PreparedGraph, Scheduler)>,
}

/// How errors name a session's loaded graphs.
const LOADED_GRAPHS: Names = Names { noun: "graph", gone: "was released", unknown: "graph handle" };

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("device", &self.device)
            .field("backends", &self.backends)
            .finish()
    }
}

fn unknown_device(name: &str) -> TesseraError {
    let known: Vec<String> =
        crate::registry::registry().devices().iter().map(|d| d.name()).collect();
    TesseraError::UnknownDevice {
        message: format!(
            "unknown device {name:?}; available: \"auto\", {}",
            quoted(known.iter().map(String::as_str))
        ),
    }
}

/// A tensor's shape without trailing 1s (at least one dimension).
fn trimmed_shape(ne: [usize; 4]) -> Vec<u64> {
    let mut n = ne.len();
    while n > 1 && ne[n - 1] == 1 {
        n -= 1;
    }
    ne[..n].iter().map(|&d| d as u64).collect()
}

/// A scheduler over the backends of `options`: the chosen device, then the CPU as fallback.
fn new_scheduler(options: &SessionOptions) -> FfiResult<Scheduler> {
    let threads = check_threads(options.threads)?;
    let registry = crate::registry::registry();
    let params = BackendParams { threads };
    let choice = DeviceChoice::parse(&options.device);
    let first = registry.init_choice(&choice, &params).map_err(|e| match (e, &choice) {
        (Error::UnknownDevice(_), DeviceChoice::Named(name)) => unknown_device(name),
        (e, _) => e.into(),
    })?;
    let device = first.device();
    let mut backends = vec![first];
    if device.device_type() != DeviceType::Cpu {
        match registry.init_by_type(DeviceType::Cpu, &params) {
            Ok(cpu) => backends.push(cpu),
            Err(e) => log::warn!("no CPU fallback for {}: {e}", device.name()),
        }
    }
    let mut scheduler = Scheduler::new(backends)?;
    // Graph constants are weights: those only MUL_MAT reads go to an extra buffer type
    // (e.g. CPU_REPACK) when the device offers one that accepts them.
    scheduler.use_registry_extra_buffer_types(registry);
    Ok(scheduler)
}

/// Builds `json` for `scheduler`'s device; the constants are written by [`allocate`].
fn build(
    json: &str,
    fingerprint: crate::prepared::Fingerprint,
    scheduler: &Scheduler,
) -> FfiResult<(PreparedGraph, Constants)> {
    let device = scheduler.backends()[0].device();
    PreparedGraph::build(json, fingerprint, &device, crate::registry::registry())
}

/// Allocates a built graph on `scheduler` within `budget` bytes and writes its constants.
fn allocate(
    prepared: &mut PreparedGraph,
    constants: Constants,
    scheduler: &mut Scheduler,
    budget: usize,
) -> FfiResult<()> {
    scheduler.set_memory_budget(Some(budget));
    scheduler.alloc_graph(&mut prepared.graph)?;
    prepared.check_files()?;
    for (id, bytes) in constants {
        set_tensor(&prepared.graph, id, bytes.bytes())?;
    }
    Ok(())
}

/// Writes `inputs`, computes and reads the outputs of an allocated graph.
fn compute_prepared(
    scheduler: &mut Scheduler,
    prepared: &PreparedGraph,
    inputs: &[(tessera_core::TensorId, Vec<u8>)],
    token: &Arc<CancelToken>,
) -> FfiResult<Vec<TensorData>> {
    let flag = token.clone();
    let abort: AbortCallback = Arc::new(move || flag.is_cancelled());
    set_abort_callback(scheduler, Some(abort));
    let result = (|| -> FfiResult<Vec<TensorData>> {
        for (id, bytes) in inputs {
            set_tensor(&prepared.graph, *id, bytes)?;
        }
        prepared.check_files()?;
        scheduler.compute().map_err(|e| match e {
            Error::Aborted if token.is_cancelled() => TesseraError::cancelled(),
            e => e.into(),
        })?;
        let graph = &prepared.graph;
        prepared
            .outputs
            .iter()
            .map(|(name, id)| {
                let t = graph.get(*id)?;
                Ok(TensorData {
                    name: name.clone(),
                    dtype: t.dtype().name().to_string(),
                    shape: trimmed_shape(t.ne()),
                    data: get_tensor(graph, *id)?,
                })
            })
            .collect()
    })();
    set_abort_callback(scheduler, None);
    result
}

impl Session {
    /// Opens the backends for `options` (the blocking constructor behind [`Session::new`]).
    pub fn open(options: SessionOptions) -> FfiResult<Session> {
        check_budget(options.memory_budget)?;
        let scheduler = new_scheduler(&options)?;
        let device = scheduler.backends()[0].device();
        let names = scheduler.backends().iter().map(|b| b.name()).collect();
        log::info!("session on {} ({})", device.name(), device.description());
        Ok(Session {
            device: device.name(),
            backends: names,
            options,
            gate: Gate::new("the session is closed", format!("compute on {}", device.name())),
            engine: Mutex::new(Some(Engine {
                scheduler,
                last: None,
                loaded: HandleTable::new(LOADED_GRAPHS),
            })),
            hasher: DocHasher::default(),
            builds: AtomicUsize::new(0),
        })
    }

    /// The session's engine, `Closed` once the session is closed.
    fn engine<'a>(&self, slot: &'a mut Option<Engine>) -> FfiResult<&'a mut Engine> {
        slot.as_mut().ok_or_else(|| self.gate.closed_error())
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
            let _pass = self.gate.enter(Some(token.clone()))?;
            match self.compute_graph(&token, graph_json, inputs) {
                Err(_) if token.is_cancelled() => Err(TesseraError::cancelled()),
                other => other,
            }
        })
    }

    /// The body of [`Session::compute_loaded`] under `token`.
    pub(crate) fn run_loaded(
        &self,
        token: Arc<CancelToken>,
        handle: u64,
        inputs: Vec<TensorData>,
    ) -> FfiResult<Vec<TensorData>> {
        guard("Session.computeLoaded", || {
            let _pass = self.gate.enter(Some(token.clone()))?;
            let mut slot = lock(&self.engine);
            let (prepared, scheduler) = self.engine(&mut slot)?.loaded.get_mut(handle)?;
            let inputs = prepared.match_inputs(inputs)?;
            match compute_prepared(scheduler, prepared, &inputs, &token) {
                Err(_) if token.is_cancelled() => Err(TesseraError::cancelled()),
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
        let fingerprint = self.hasher.fingerprint(graph_json);
        let mut slot = lock(&self.engine);
        let engine = self.engine(&mut slot)?;
        if token.is_cancelled() {
            return Err(TesseraError::cancelled());
        }
        // The graph kept from the last compute is taken out while this one runs and put back
        // only if it succeeds: a graph whose compute failed is built afresh next time.
        let kept = engine.last.take().filter(|p| p.fingerprint == fingerprint);
        let (mut prepared, constants) = match kept {
            Some(prepared) => (prepared, None),
            None => {
                let (prepared, constants) = build(graph_json, fingerprint, &engine.scheduler)?;
                self.builds.fetch_add(1, Ordering::Relaxed);
                (prepared, Some(constants))
            }
        };
        let inputs = match prepared.match_inputs(inputs) {
            Ok(inputs) => inputs,
            Err(e) => {
                // Wrong inputs leave an allocated graph usable.
                if constants.is_none() {
                    engine.last = Some(prepared);
                }
                return Err(e);
            }
        };
        if let Some(constants) = constants {
            let budget = self.budget_now(&engine.scheduler);
            allocate(&mut prepared, constants, &mut engine.scheduler, budget)?;
        }
        let result = compute_prepared(&mut engine.scheduler, &prepared, &inputs, token);
        if result.is_ok() {
            engine.last = Some(prepared);
        }
        result
    }

    /// The memory budget for the graph planned now: the one given, else the one of
    /// [`set_default_memory_budget`], else [`DEFAULT_BUDGET_PERCENT`] of the least free memory
    /// among the session's devices.
    fn budget_now(&self, scheduler: &Scheduler) -> usize {
        let fixed = Some(DEFAULT_BUDGET.load(Ordering::Relaxed)).filter(|&b| b > 0);
        let bytes = self.options.memory_budget.or(fixed).unwrap_or_else(|| {
            let free = scheduler.backends().iter().map(|b| b.device().memory().free).min();
            free.unwrap_or(0) / 100 * DEFAULT_BUDGET_PERCENT
        });
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// How many graph documents this session has built: computing the document of the last
    /// successful compute again does not build it.
    #[cfg(test)]
    pub(crate) fn builds(&self) -> usize {
        self.builds.load(Ordering::Relaxed)
    }
}

fn set_abort_callback(scheduler: &mut Scheduler, callback: Option<AbortCallback>) {
    for i in 0..scheduler.backends().len() {
        if let Some(b) = scheduler.backend_mut(i) {
            b.set_abort_callback(callback.clone());
        }
    }
}

impl Session {
    /// How many computes of this session are in flight: running, or registered and waiting for
    /// the one running to finish ([`Session::close`] waits for them).
    pub fn computes_in_flight(&self) -> usize {
        guard_or("Session.computes_in_flight", || 0, || self.gate.in_flight())
    }

    /// Cancels every compute in flight; returns how many there were.
    pub fn cancel_all(&self) -> usize {
        guard_or(
            "Session.cancel",
            || 0,
            || {
                let n = self.gate.cancel_all();
                if n > 0 {
                    log::debug!("cancelling {n} compute(s) on {}", self.device);
                }
                n
            },
        )
    }
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

    /// Loads a graph document once (checked, built, allocated on a scheduler of its own,
    /// constants and file tensors placed) and returns its handle for
    /// [`Session::compute_loaded`]: computes then send only the inputs. Its memory stays until
    /// [`Session::release_graph`] or `close()`.
    pub fn load_graph(&self, graph_json: String) -> FfiResult<u64> {
        guard("Session.loadGraph", || {
            let _pass = self.gate.enter(None)?;
            let mut scheduler = new_scheduler(&self.options)?;
            let fingerprint = self.hasher.fingerprint(&graph_json);
            let (mut prepared, constants) = build(&graph_json, fingerprint, &scheduler)?;
            let budget = self.budget_now(&scheduler);
            allocate(&mut prepared, constants, &mut scheduler, budget)?;
            let mut slot = lock(&self.engine);
            Ok(self.engine(&mut slot)?.loaded.insert((prepared, scheduler)))
        })
    }

    /// Computes the document loaded as `handle` with `inputs` (as [`Session::compute`]).
    pub fn compute_loaded(
        &self,
        handle: u64,
        inputs: Vec<TensorData>,
    ) -> FfiResult<Vec<TensorData>> {
        self.run_loaded(Arc::new(CancelToken::default()), handle, inputs)
    }

    /// Frees the document loaded as `handle`; releasing it twice is fine, an unknown handle is
    /// an error.
    pub fn release_graph(&self, handle: u64) -> FfiResult<()> {
        guard("Session.releaseGraph", || {
            let mut slot = lock(&self.engine);
            self.engine(&mut slot)?.loaded.remove(handle)?;
            Ok(())
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
                if self.gate.close(|| ()) {
                    lock(&self.engine).take();
                }
            },
        )
    }

    /// Whether [`Session::close`] was called.
    pub fn is_closed(&self) -> bool {
        guard_or("Session.is_closed", || true, || self.gate.is_closed())
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

    /// A file tensor that the CPU computes in place has its data inside the file's mapping (no
    /// copy); one the CPU repacks (only MUL_MAT reads it, and the tier interleaves its type)
    /// lives in a repack buffer instead.
    #[test]
    fn file_tensors_on_the_cpu_are_read_in_place_from_the_mapping() {
        let Ok(path) = std::env::var("TESSERA_GEMMA_GGUF") else {
            panic!("set TESSERA_GEMMA_GGUF to the Gemma 3 270M Q4_K_M file (see scripts/setup.sh)")
        };
        let doc = serde_json::json!({
            "version": 2,
            "files": [{"name": "m", "path": path}],
            "tensors": [
                {"name": "up", "file": "m", "tensor": "blk.0.ffn_up.weight"},
                {"name": "embd", "file": "m", "tensor": "token_embd.weight"},
                {"name": "x", "type": "F32", "shape": [640, 1]},
                {"name": "ids", "type": "I32", "shape": [1]}
            ],
            "nodes": [
                {"name": "y", "op": "MUL_MAT", "src": ["up", "x"]},
                {"name": "r", "op": "GET_ROWS", "src": ["embd", "ids"]}
            ],
            "outputs": ["y", "r"]
        });
        let session = Session::open(SessionOptions {
            device: "CPU".into(),
            threads: Some(1),
            memory_budget: None,
        })
        .unwrap();
        let handle = session.load_graph(doc.to_string()).unwrap();
        let file = crate::files::open(&path).unwrap();
        let map = file.bytes().as_ptr_range();
        let slot = lock(&session.engine);
        let (prepared, _) = slot.as_ref().unwrap().loaded.get(handle).unwrap();
        let g = &prepared.graph;
        let addr = |name: &str| {
            let id = g.by_name(name).unwrap();
            let s = g.storage_of(id).unwrap();
            (s.buffer.host_ptr().unwrap().as_ptr() as usize + s.offset, s.buffer.name())
        };
        // GET_ROWS reads the embeddings: in place, inside the mapping, at the tensor's bytes.
        let (embd, _) = addr("embd");
        let info = file.tensor("token_embd.weight").unwrap();
        assert_eq!(embd, file.tensor_data(info).as_ptr() as usize);
        assert!((map.start as usize..map.end as usize).contains(&embd));
        // Q5_0 weights read only by MUL_MAT: repacked once where the tier has a layout for them
        // (the x86 tiers), read in place otherwise.
        let (up, buffer) = addr("up");
        let in_map = (map.start as usize..map.end as usize).contains(&up);
        if tessera_cpu::kernels::repacked_kernel(DType::Q5_0).is_some() {
            assert!(!in_map, "a repacked tensor is a copy");
            assert_eq!(buffer, tessera_cpu::kernels::repack::REPACK_NAME);
        } else {
            assert!(in_map);
            assert_eq!(
                up,
                file.tensor_data(file.tensor("blk.0.ffn_up.weight").unwrap()).as_ptr() as usize
            );
        }
    }
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
            let wq = crate::document::values_to_bytes(dtype, &w).unwrap();
            let mut wd = vec![0f32; k * m];
            tessera_core::quant::dequantize_row(dtype, &wq, &mut wd).unwrap();
            let want: Vec<f64> = (0..n * m)
                .map(|o| {
                    let (j, i) = (o / m, o % m);
                    (0..k).map(|l| f64::from(wd[i * k + l]) * f64::from(x[j * k + l])).sum()
                })
                .collect();
            let session = Session::open(SessionOptions {
                device: "CPU".into(),
                threads: Some(2),
                ..Default::default()
            })
            .unwrap();
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

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    fn nmse(got: &[f32], want: &[f64]) -> f64 {
        assert_eq!(got.len(), want.len());
        let num: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).powi(2)).sum();
        num / want.iter().map(|w| w * w).sum::<f64>()
    }

    /// The graph of the last compute is kept: computing its document again with new inputs
    /// gives the new results without building it again (weights in CPU_REPACK and a constant
    /// in the compute buffer, read by ADD, keep their values); wrong inputs do not discard it;
    /// another document replaces it.
    #[test]
    fn the_last_document_is_kept_for_the_next_compute() {
        let (k, m, n) = (64usize, 32usize, 2usize);
        let w: Vec<f64> = (0..k * m).map(|i| (i * 37 % 101) as f64 / 50.0 - 1.0).collect();
        let bias: Vec<f64> = (0..m).map(|i| i as f64 / 4.0 - 3.0).collect();
        let doc = |scale: f64| {
            serde_json::json!({
                "version": 1,
                "tensors": [
                    {"name": "w", "type": "Q8_0", "shape": [k, m], "values": w},
                    {"name": "b", "type": "F32", "shape": [m],
                     "values": bias.iter().map(|v| v * scale).collect::<Vec<_>>()},
                    {"name": "x", "type": "F32", "shape": [k, n]}
                ],
                "nodes": [
                    {"name": "wx", "op": "MUL_MAT", "src": ["w", "x"]},
                    {"name": "y", "op": "ADD", "src": ["wx", "b"]}
                ],
                "outputs": ["y"]
            })
            .to_string()
        };
        let wq = crate::document::values_to_bytes(DType::Q8_0, &w).unwrap();
        let mut wd = vec![0f32; k * m];
        tessera_core::quant::dequantize_row(DType::Q8_0, &wq, &mut wd).unwrap();
        let want = |x: &[f32], scale: f64| -> Vec<f64> {
            (0..n * m)
                .map(|o| {
                    let (j, i) = (o / m, o % m);
                    let dot: f64 =
                        (0..k).map(|l| f64::from(wd[i * k + l]) * f64::from(x[j * k + l])).sum();
                    dot + bias[i] * scale
                })
                .collect()
        };
        let input = |x: &[f32]| {
            vec![TensorData {
                name: "x".into(),
                dtype: "F32".into(),
                shape: vec![k as u64, n as u64],
                data: f32_bytes(x),
            }]
        };
        let session = Session::open(SessionOptions {
            device: "CPU".into(),
            threads: Some(2),
            ..Default::default()
        })
        .unwrap();
        let (doc1, doc2) = (doc(1.0), doc(-2.0));
        let xs: Vec<Vec<f32>> = (1..=3)
            .map(|s| (0..k * n).map(|i| ((i * s * 13) % 29) as f32 / 7.0 - 2.0).collect())
            .collect();
        let compute = |doc: &str, x: &[f32]| {
            let out = session.compute(doc.to_string(), input(x)).unwrap();
            f32s(&out[0].data)
        };
        for (i, x) in xs.iter().enumerate() {
            let e = nmse(&compute(&doc1, x), &want(x, 1.0));
            assert!(e <= 1e-4, "compute {i}: nmse {e:e}");
            assert_eq!(session.builds(), 1, "compute {i} rebuilt the document");
        }
        let mut bad = input(&xs[0]);
        bad[0].shape = vec![k as u64, 3];
        let err = session.compute(doc1.clone(), bad).unwrap_err();
        assert!(matches!(err, TesseraError::ShapeMismatch { .. }), "{err:?}");
        assert!(nmse(&compute(&doc1, &xs[1]), &want(&xs[1], 1.0)) <= 1e-4);
        assert_eq!(session.builds(), 1, "wrong inputs discarded the graph");
        assert!(nmse(&compute(&doc2, &xs[2]), &want(&xs[2], -2.0)) <= 1e-4);
        assert_eq!(session.builds(), 2);
        assert!(nmse(&compute(&doc1, &xs[2]), &want(&xs[2], 1.0)) <= 1e-4);
        assert_eq!(session.builds(), 3);
    }
}
