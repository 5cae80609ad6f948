//! The JSON dispatcher of docs/native-protocol.md: one entry point that the TurboModule reaches
//! through uniffi (`callJson`) and the Node tests through the C ABI (`tessera_call_json`).
//!
//! Requests are JSON objects with a `method` ([`crate::protocol::Request`]); responses are
//! `{"ok": result}` or `{"error": {"kind", "message"}}`. This module holds the methods of
//! devices, sessions, graphs and logging (the model methods are in [`crate::json_model`]).
//! Sessions opened with `openSession` live in a process-wide table under a number; a closed
//! session's number answers `Closed` from then on.

use crate::error::{guard, guard_or, FfiResult, TesseraError};
use crate::gate::{lock, CancelToken};
use crate::handles::{HandleTable, Names};
use crate::info::{build_info, cpu_features, devices, CpuFeatureInfo, DeviceInfo};
use crate::logging::{set_log_level, LogLevel};
use crate::protocol::{from_text, GraphText, Method, Request, Response};
use crate::session::{Session, SessionOptions, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Open sessions by number.
static SESSIONS: Mutex<HandleTable<Arc<Session>>> =
    Mutex::new(HandleTable::new(Names { noun: "session", gone: "is closed", unknown: "session" }));

/// Removes every open session from the table (their numbers answer `Closed` from then on) and
/// returns them, for [`crate::lifecycle`] to close.
pub(crate) fn take_open_sessions() -> Vec<Arc<Session>> {
    lock(&SESSIONS).drain()
}

fn session(id: u64) -> FfiResult<Arc<Session>> {
    lock(&SESSIONS).get(id).cloned()
}

/// `devices`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Devices {}

impl Method for Devices {
    type Reply = Vec<DeviceInfo>;

    fn run(self) -> FfiResult<Vec<DeviceInfo>> {
        devices()
    }
}

/// `cpuFeatures`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CpuFeatures {}

impl Method for CpuFeatures {
    type Reply = CpuFeatureInfo;

    fn run(self) -> FfiResult<CpuFeatureInfo> {
        cpu_features()
    }
}

/// `buildInfo`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BuildInfo {}

impl Method for BuildInfo {
    type Reply = crate::info::BuildInfo;

    fn run(self) -> FfiResult<crate::info::BuildInfo> {
        build_info()
    }
}

/// `openSession`: `{session}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OpenSession {
    #[serde(default)]
    options: Option<SessionOptions>,
}

/// A session's number.
#[derive(Serialize)]
pub(crate) struct Opened {
    session: u64,
}

impl Method for OpenSession {
    type Reply = Opened;

    fn run(self) -> FfiResult<Opened> {
        let session = Arc::new(Session::open(self.options.unwrap_or_default())?);
        Ok(Opened { session: lock(&SESSIONS).insert(session) })
    }
}

/// Outputs of a compute.
#[derive(Serialize)]
pub(crate) struct Outputs {
    outputs: Vec<TensorData>,
}

/// `compute`: on the session `session`, or (without one) on the session kept for one-shot
/// computes with `options`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Compute {
    graph: GraphText,
    #[serde(default)]
    inputs: Option<Vec<TensorData>>,
    #[serde(default)]
    session: Option<u64>,
    #[serde(default)]
    options: Option<SessionOptions>,
}

impl Method for Compute {
    type Reply = Outputs;

    fn run(self) -> FfiResult<Outputs> {
        let (graph, inputs) = (self.graph.0, self.inputs.unwrap_or_default());
        let outputs = match (self.session, self.options) {
            (Some(_), Some(_)) => {
                return Err(TesseraError::invalid_argument(
                    "compute: give either \"session\" (a session opened with its options) or \
                     \"options\" (a one-shot compute), not both",
                ))
            }
            (Some(id), None) => {
                session(id)?.run(Arc::new(CancelToken::default()), &graph, inputs)?
            }
            (None, options) => {
                crate::oneshot_sessions::compute(options.unwrap_or_default(), &graph, inputs)?
            }
        };
        Ok(Outputs { outputs })
    }
}

/// `loadGraph`: `{graph}`, the loaded document's handle.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadGraph {
    session: u64,
    graph: GraphText,
}

/// A loaded document's handle.
#[derive(Serialize)]
pub(crate) struct Loaded {
    graph: u64,
}

impl Method for LoadGraph {
    type Reply = Loaded;

    fn run(self) -> FfiResult<Loaded> {
        Ok(Loaded { graph: session(self.session)?.load_graph(self.graph.0)? })
    }
}

/// `computeLoaded`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ComputeLoaded {
    session: u64,
    graph: u64,
    #[serde(default)]
    inputs: Option<Vec<TensorData>>,
}

impl Method for ComputeLoaded {
    type Reply = Outputs;

    fn run(self) -> FfiResult<Outputs> {
        let token = Arc::new(CancelToken::default());
        let inputs = self.inputs.unwrap_or_default();
        Ok(Outputs { outputs: session(self.session)?.run_loaded(token, self.graph, inputs)? })
    }
}

/// `releaseGraph`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseGraph {
    session: u64,
    graph: u64,
}

/// `{released: true}`.
#[derive(Serialize)]
pub(crate) struct Released {
    pub(crate) released: bool,
}

impl Method for ReleaseGraph {
    type Reply = Released;

    fn run(self) -> FfiResult<Released> {
        session(self.session)?.release_graph(self.graph)?;
        Ok(Released { released: true })
    }
}

/// Array items `ggufInfo` shows when the request does not say.
const GGUF_ARRAY_ITEMS: u64 = 16;

/// `ggufInfo`: a GGUF file's header, metadata (arrays cut to `arrayItems`) and tensor table,
/// read from the mapped file (no tensor data is read).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GgufInfo {
    path: String,
    #[serde(default)]
    array_items: Option<u64>,
}

impl Method for GgufInfo {
    type Reply = Value;

    fn run(self) -> FfiResult<Value> {
        let items = self.array_items.unwrap_or(GGUF_ARRAY_ITEMS);
        let file = tessera_gguf::GgufFile::open(&self.path)
            .map_err(|e| TesseraError::InvalidModel { message: e.to_string() })?;
        Ok(tessera_gguf::summary::to_json(
            &self.path,
            &file,
            usize::try_from(items).unwrap_or(usize::MAX),
        ))
    }
}

/// `cancel`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cancel {
    session: u64,
}

/// `{cancelled}`: whether something was running.
#[derive(Serialize)]
pub(crate) struct Cancelled {
    pub(crate) cancelled: bool,
}

impl Method for Cancel {
    type Reply = Cancelled;

    fn run(self) -> FfiResult<Cancelled> {
        Ok(Cancelled { cancelled: session(self.session)?.cancel_all() > 0 })
    }
}

/// `closeSession`; closing twice is fine.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseSession {
    session: u64,
}

/// `{closed}`: `true`, or how many were closed.
#[derive(Serialize)]
pub(crate) struct Closed<T: Serialize> {
    closed: T,
}

impl Method for CloseSession {
    type Reply = Closed<bool>;

    fn run(self) -> FfiResult<Closed<bool>> {
        let removed = lock(&SESSIONS).remove(self.session)?;
        // Waits for computes in flight.
        if let Some(session) = removed {
            session.close();
        }
        Ok(Closed { closed: true })
    }
}

/// `closeAllSessions`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseAllSessions {}

impl Method for CloseAllSessions {
    type Reply = Closed<u64>;

    fn run(self) -> FfiResult<Closed<u64>> {
        Ok(Closed { closed: crate::lifecycle::close_all() })
    }
}

/// `setLogLevel`: `{}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetLogLevel {
    #[serde(deserialize_with = "from_text")]
    level: LogLevel,
}

/// An empty reply, `{}`.
#[derive(Serialize)]
pub(crate) struct Done {}

impl Method for SetLogLevel {
    type Reply = Done;

    fn run(self) -> FfiResult<Done> {
        set_log_level(self.level);
        Ok(Done {})
    }
}

/// The text of the `{"error": ...}` response for `e`.
pub(crate) fn error_text(e: &TesseraError) -> String {
    serde_json::to_string(&Response::error(e)).unwrap_or_else(|_| {
        r#"{"error":{"kind":"Internal","message":"the error could not be written"}}"#.to_string()
    })
}

/// Handles one request and returns the response's JSON text; never panics.
pub(crate) fn respond(request: &str) -> String {
    match guard("callJson", || Request::parse(request)?.run()) {
        Ok(text) => text,
        Err(e) => error_text(&e),
    }
}

/// Handles one request and returns the response value (for Rust hosts and tests); never
/// panics.
pub fn handle(request: &str) -> Value {
    serde_json::from_str(&respond(request)).unwrap_or_else(|e| {
        let e = TesseraError::internal(format!("the response is not JSON: {e}"));
        serde_json::json!({"error": {"kind": e.kind(), "message": e.message()}})
    })
}

/// Runs one request of the native protocol (docs/native-protocol.md) and returns the JSON
/// response: `{"ok": result}` or `{"error": {"kind", "message"}}`. Never throws: errors,
/// panics included, are responses. Blocks during `compute`: call it off the UI thread.
#[uniffi::export]
pub fn call_json(request: String) -> String {
    guard_or(
        "callJson",
        || r#"{"error":{"kind":"Internal","message":"panic in callJson"}}"#.to_string(),
        || respond(&request),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{base64_decode, base64_encode};
    use serde_json::json;

    /// Through the protocol (as the React Native module calls it), a session computing the same
    /// graph object again reuses the graph it built, with the new inputs.
    #[test]
    fn a_session_reuses_the_graph_of_its_last_compute() {
        let opened = handle(r#"{"method":"openSession","options":{"device":"CPU","threads":1}}"#);
        let id = opened["ok"]["session"].as_u64().expect("a session id");
        let graph = json!({
            "version": 1,
            "tensors": [
                {"name": "w", "type": "F32", "shape": [2, 2], "values": [1, 2, 3, 4]},
                {"name": "x", "type": "F32", "shape": [2]}
            ],
            "nodes": [{"name": "y", "op": "MUL_MAT", "src": ["w", "x"]}],
            "outputs": ["y"]
        });
        for (x, want) in [([1f32, 0.], [1f32, 3.]), ([0., 1.], [2., 4.]), ([1., -1.], [-1., -1.])] {
            let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let request = json!({
                "method": "compute",
                "session": id,
                "graph": graph,
                "inputs": [{"name": "x", "dtype": "F32", "shape": [2], "data": base64_encode(&data)}]
            });
            let reply = handle(&request.to_string());
            let out = reply["ok"]["outputs"][0]["data"].as_str().expect("an output");
            let got: Vec<f32> = base64_decode(out)
                .unwrap()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(got, want, "x = {x:?}");
        }
        assert_eq!(session(id).unwrap().builds(), 1);
        handle(&json!({"method": "closeSession", "session": id}).to_string());
    }

    /// Replies are written as the protocol's camelCase objects.
    #[test]
    fn replies_are_the_documented_objects() {
        let devices = handle(r#"{"method":"devices"}"#);
        let cpu = devices["ok"].as_array().unwrap().iter().find(|d| d["type"] == "cpu").unwrap();
        let keys: Vec<&str> = cpu.as_object().unwrap().keys().map(String::as_str).collect();
        for key in ["backend", "name", "description", "type", "memoryFree", "memoryTotal", "caps"] {
            assert!(keys.contains(&key), "{cpu}");
        }
        assert!(cpu["caps"]["bufferFromHostPtr"].is_boolean(), "{cpu}");
        assert_eq!(handle(r#"{"method":"setLogLevel","level":"INFO"}"#), json!({"ok": {}}));
        assert_eq!(
            handle(r#"{"method":"closeSession","session":0}"#)["error"],
            json!({"kind": "InvalidArgument", "message": "unknown session 0"})
        );
    }
}
