//! The JSON dispatcher of docs/native-protocol.md: one entry point that the TurboModule reaches
//! through uniffi (`callJson`) and the Node tests through the C ABI (`tessera_call_json`).
//!
//! Requests are JSON objects with a `method`; responses are `{"ok": result}` or
//! `{"error": {"kind", "message"}}`. Sessions opened with `openSession` live in a process-wide
//! table under a number; a closed session's number answers `Closed` from then on.

use crate::error::{guard_or, TesseraError};
use crate::info::{build_info, cpu_features, devices, BuildInfo, CpuFeatureInfo, DeviceInfo};
use crate::logging::{set_log_level, LogLevel};
use crate::session::{CancelToken, Session, SessionOptions, TensorData, MAX_THREADS};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tessera_core::document::{base64_decode, base64_encode};

type Reply = Result<Value, TesseraError>;

fn bad_request(message: impl Into<String>) -> TesseraError {
    TesseraError::invalid_argument(message)
}

/// Open sessions by number. Numbers are never reused: a number below `next` that is not in
/// `open` belongs to a closed session.
struct Sessions {
    next: u64,
    open: HashMap<u64, Arc<Session>>,
}

fn sessions() -> MutexGuard<'static, Sessions> {
    static SESSIONS: OnceLock<Mutex<Sessions>> = OnceLock::new();
    SESSIONS
        .get_or_init(|| Mutex::new(Sessions { next: 1, open: HashMap::new() }))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Removes every open session from the table (their numbers answer `Closed` from then on) and
/// returns them, for [`crate::lifecycle`] to close.
pub(crate) fn take_open_sessions() -> Vec<Arc<Session>> {
    sessions().open.drain().map(|(_, s)| s).collect()
}

fn session_id(request: &Map<String, Value>) -> Result<u64, TesseraError> {
    let v = request.get("session").ok_or_else(|| bad_request("missing \"session\""))?;
    v.as_u64().ok_or_else(|| bad_request(format!("\"session\" must be a session number, got {v}")))
}

fn lookup(id: u64) -> Result<Arc<Session>, TesseraError> {
    let table = sessions();
    match table.open.get(&id) {
        Some(s) => Ok(s.clone()),
        None if id >= 1 && id < table.next => {
            Err(TesseraError::Closed { message: format!("session {id} is closed") })
        }
        None => Err(bad_request(format!("unknown session {id}"))),
    }
}

fn device_json(d: &DeviceInfo) -> Value {
    json!({
        "backend": d.backend,
        "name": d.name,
        "description": d.description,
        "type": d.device_type.as_str(),
        "memoryFree": d.memory_free,
        "memoryTotal": d.memory_total,
        "caps": {
            "asyncOps": d.caps.async_ops,
            "hostBuffer": d.caps.host_buffer,
            "bufferFromHostPtr": d.caps.buffer_from_host_ptr,
            "events": d.caps.events,
        },
    })
}

fn cpu_features_json(c: &CpuFeatureInfo) -> Value {
    json!({
        "pairs": c.pairs.iter().map(|p| json!({"name": p.name, "value": p.value})).collect::<Vec<_>>(),
        "tiers": c.tiers.iter().map(|t| json!({"dtype": t.dtype, "tier": t.tier})).collect::<Vec<_>>(),
    })
}

fn build_info_json(b: &BuildInfo) -> Value {
    json!({"version": b.version, "target": b.target, "features": b.features, "profile": b.profile})
}

fn tensor_json(t: &TensorData) -> Value {
    json!({"name": t.name, "dtype": t.dtype, "shape": t.shape, "data": base64_encode(&t.data)})
}

fn field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<&'a Value, TesseraError> {
    obj.get(key).ok_or_else(|| bad_request(format!("{what}: missing \"{key}\"")))
}

fn string_field(obj: &Map<String, Value>, key: &str, what: &str) -> Result<String, TesseraError> {
    field(obj, key, what)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| bad_request(format!("{what}: \"{key}\" must be a string")))
}

/// Refuses keys of `obj` outside `known` (`what` names the object in the message).
fn known_keys(obj: &Map<String, Value>, what: &str, known: &[&str]) -> Result<(), TesseraError> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(bad_request(format!(
            "{what}: unknown key {key:?} (known: {})",
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        ))),
    }
}

fn parse_input(index: usize, v: &Value) -> Result<TensorData, TesseraError> {
    let what = format!("inputs[{index}]");
    let obj = v.as_object().ok_or_else(|| bad_request(format!("{what} must be an object")))?;
    known_keys(obj, &what, &["name", "dtype", "shape", "data"])?;
    let name = string_field(obj, "name", &what)?;
    let what = format!("input {name:?}");
    let dtype = string_field(obj, "dtype", &what)?;
    let shape = field(obj, "shape", &what)?
        .as_array()
        .ok_or_else(|| bad_request(format!("{what}: \"shape\" must be an array")))?
        .iter()
        .map(|d| {
            d.as_u64().ok_or_else(|| {
                bad_request(format!("{what}: shape entry {d} is not an integer >= 0"))
            })
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let data = base64_decode(&string_field(obj, "data", &what)?).map_err(|e| {
        let why = match e {
            tessera_core::Error::Base64(why) => why,
            e => e.to_string(),
        };
        bad_request(format!("{what}: \"data\" is not valid base64: {why}"))
    })?;
    Ok(TensorData { name, dtype, shape, data })
}

/// The keys of `options` (sessions and one-shot computes).
const OPTION_KEYS: &[&str] = &["device", "threads", "memoryBudget"];

fn parse_options(v: Option<&Value>) -> Result<SessionOptions, TesseraError> {
    let mut options = SessionOptions::default();
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(options) };
    let obj = v.as_object().ok_or_else(|| bad_request("\"options\" must be an object"))?;
    known_keys(obj, "options", OPTION_KEYS)?;
    if let Some(d) = obj.get("device").filter(|d| !d.is_null()) {
        options.device = d
            .as_str()
            .ok_or_else(|| bad_request(format!("options: device {d} must be a string")))?
            .to_string();
    }
    if let Some(t) = obj.get("threads").filter(|t| !t.is_null()) {
        // Out-of-range counts are reported as given (not clamped to 32 bits first).
        let n =
            t.as_u64().filter(|n| (1..=u64::from(MAX_THREADS)).contains(n)).ok_or_else(|| {
                bad_request(format!(
                    "options: thread count {t} must be an integer between 1 and {MAX_THREADS}"
                ))
            })?;
        options.threads = u32::try_from(n).ok();
    }
    if let Some(b) = obj.get("memoryBudget").filter(|b| !b.is_null()) {
        let n = b.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
            bad_request(format!(
                "options: memoryBudget {b} must be a number of bytes >= 1 (or null for the default)"
            ))
        })?;
        options.memory_budget = Some(n);
    }
    Ok(options)
}

fn open_session(request: &Map<String, Value>) -> Reply {
    let session = Arc::new(Session::open(parse_options(request.get("options"))?)?);
    let mut table = sessions();
    let id = table.next;
    table.next += 1;
    table.open.insert(id, session);
    Ok(json!({ "session": id }))
}

fn compute(request: &Map<String, Value>) -> Reply {
    let graph = match field(request, "graph", "compute")? {
        Value::String(s) => s.clone(),
        v @ Value::Object(_) => v.to_string(),
        _ => return Err(bad_request("compute: \"graph\" must be a graph document (an object)")),
    };
    let inputs = match request.get("inputs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| parse_input(i, v))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(bad_request("compute: \"inputs\" must be an array")),
    };
    let options = request.get("options").filter(|o| !o.is_null());
    let outputs = match request.get("session").filter(|s| !s.is_null()) {
        Some(_) if options.is_some() => {
            return Err(bad_request(
                "compute: give either \"session\" (a session opened with its options) or \
                 \"options\" (a one-shot compute), not both",
            ))
        }
        Some(_) => {
            let session = lookup(session_id(request)?)?;
            session.run(Arc::new(CancelToken::default()), &graph, inputs)?
        }
        // A session kept for one-shot computes with these options.
        None => crate::oneshot_sessions::compute(parse_options(options)?, &graph, inputs)?,
    };
    Ok(json!({"outputs": outputs.iter().map(tensor_json).collect::<Vec<_>>()}))
}

fn load_graph(request: &Map<String, Value>) -> Reply {
    let session = lookup(session_id(request)?)?;
    let graph = match field(request, "graph", "loadGraph")? {
        Value::String(s) => s.clone(),
        v @ Value::Object(_) => v.to_string(),
        _ => return Err(bad_request("loadGraph: \"graph\" must be a graph document (an object)")),
    };
    Ok(json!({ "graph": session.load_graph(graph)? }))
}

fn graph_handle(request: &Map<String, Value>, what: &str) -> Result<u64, TesseraError> {
    let v = field(request, "graph", what)?;
    v.as_u64().ok_or_else(|| {
        bad_request(format!("{what}: \"graph\" must be a handle from loadGraph, got {v}"))
    })
}

fn compute_loaded(request: &Map<String, Value>) -> Reply {
    let session = lookup(session_id(request)?)?;
    let handle = graph_handle(request, "computeLoaded")?;
    let inputs = match request.get("inputs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| parse_input(i, v))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(bad_request("computeLoaded: \"inputs\" must be an array")),
    };
    let outputs = session.run_loaded(Arc::new(CancelToken::default()), handle, inputs)?;
    Ok(json!({"outputs": outputs.iter().map(tensor_json).collect::<Vec<_>>()}))
}

fn release_graph(request: &Map<String, Value>) -> Reply {
    let session = lookup(session_id(request)?)?;
    session.release_graph(graph_handle(request, "releaseGraph")?)?;
    Ok(json!({ "released": true }))
}

/// `ggufInfo`: a GGUF file's header, metadata (arrays cut to `arrayItems`, default 16) and
/// tensor table, read from the mapped file (no tensor data is read).
fn gguf_info(request: &Map<String, Value>) -> Reply {
    let path = string_field(request, "path", "ggufInfo")?;
    let items = match request.get("arrayItems") {
        None | Some(Value::Null) => 16,
        Some(v) => {
            v.as_u64().ok_or_else(|| bad_request("ggufInfo: \"arrayItems\" must be an integer"))?
                as usize
        }
    };
    let file = tessera_gguf::GgufFile::open(&path)
        .map_err(|e| TesseraError::InvalidModel { message: e.to_string() })?;
    Ok(tessera_gguf::summary::to_json(&path, &file, items))
}

fn cancel(request: &Map<String, Value>) -> Reply {
    let session = lookup(session_id(request)?)?;
    Ok(json!({ "cancelled": session.cancel_all() > 0 }))
}

fn close_session(request: &Map<String, Value>) -> Reply {
    let id = session_id(request)?;
    let removed = {
        let mut table = sessions();
        if id == 0 || id >= table.next {
            return Err(bad_request(format!("unknown session {id}")));
        }
        table.open.remove(&id)
    };
    // Waits for computes in flight; closing twice is fine.
    if let Some(session) = removed {
        session.close();
    }
    Ok(json!({ "closed": true }))
}

fn parse_level(text: &str) -> Result<LogLevel, TesseraError> {
    Ok(match text.to_ascii_lowercase().as_str() {
        "off" => LogLevel::Off,
        "error" => LogLevel::Error,
        "warn" | "warning" => LogLevel::Warn,
        "info" => LogLevel::Info,
        "debug" => LogLevel::Debug,
        "trace" => LogLevel::Trace,
        _ => {
            return Err(bad_request(format!(
                "log level {text:?} is not one of off, error, warn, info, debug, trace"
            )))
        }
    })
}

/// The keys each method takes besides `method`; `None` for an unknown method. Model methods
/// take `requestId` too (events of the call carry it).
fn method_keys(method: &str) -> Option<&'static [&'static str]> {
    Some(match method {
        "devices" | "cpuFeatures" | "buildInfo" | "closeAllSessions" => &[],
        "openSession" => &["options"],
        "compute" => &["graph", "inputs", "session", "options"],
        "cancel" | "closeSession" => &["session"],
        "loadGraph" | "releaseGraph" => &["session", "graph"],
        "computeLoaded" => &["session", "graph", "inputs"],
        "ggufInfo" => &["path", "arrayItems"],
        "setLogLevel" => &["level"],
        "loadModel" => &["path", "options", "requestId"],
        "modelInfo" | "cancelGeneration" | "releaseModel" => &["model", "requestId"],
        "tokenize" | "detokenize" | "applyChatTemplate" | "generate" | "embed" => {
            &["model", "params", "requestId"]
        }
        _ => return None,
    })
}

fn dispatch(request: &str) -> Reply {
    let value: Value = tessera_core::strict_json::from_str(request)
        .map_err(|e| bad_request(format!("the request is not valid JSON: {e}")))?;
    let obj = value.as_object().ok_or_else(|| bad_request("the request must be a JSON object"))?;
    let method = string_field(obj, "method", "request")?;
    if let Some(keys) = method_keys(&method) {
        let mut known = vec!["method"];
        known.extend_from_slice(keys);
        known_keys(obj, &format!("{method} request"), &known)?;
    }
    match method.as_str() {
        "devices" => Ok(Value::Array(devices()?.iter().map(device_json).collect())),
        "cpuFeatures" => Ok(cpu_features_json(&cpu_features()?)),
        "buildInfo" => Ok(build_info_json(&build_info()?)),
        "openSession" => open_session(obj),
        "compute" => compute(obj),
        "cancel" => cancel(obj),
        "loadGraph" => load_graph(obj),
        "computeLoaded" => compute_loaded(obj),
        "releaseGraph" => release_graph(obj),
        "ggufInfo" => gguf_info(obj),
        "closeSession" => close_session(obj),
        "closeAllSessions" => Ok(json!({ "closed": crate::lifecycle::close_all() })),
        "setLogLevel" => {
            set_log_level(parse_level(&string_field(obj, "level", "setLogLevel")?)?);
            Ok(json!({}))
        }
        other => crate::json_model::dispatch(other, obj)
            .or_else(|| crate::download::dispatch(other, obj))
            .or_else(|| crate::requests::dispatch(other, obj))
            .unwrap_or_else(|| {
                Err(bad_request(format!(
                "unknown method {other:?} (known: devices, cpuFeatures, buildInfo, openSession, \
                 compute, cancel, closeSession, closeAllSessions, setLogLevel, loadGraph, \
                 computeLoaded, releaseGraph, ggufInfo, loadModel, \
                 cancelLoad, modelInfo, tokenize, detokenize, applyChatTemplate, generate, \
                 cancelGeneration, embed, releaseModel, downloadModel, cancelDownload, \
                 listModels, deleteModel, setModelsDirectory)"
            )))
            }),
    }
}

/// The `{"error": ...}` response for `e`.
pub(crate) fn error_response(e: &TesseraError) -> Value {
    json!({"error": {"kind": e.kind(), "message": e.message()}})
}

/// Handles one request and returns the response value; never panics.
pub fn handle(request: &str) -> Value {
    let reply = crate::error::guard("callJson", || dispatch(request));
    match reply {
        Ok(v) => json!({ "ok": v }),
        Err(e) => error_response(&e),
    }
}

/// Runs one request of the native protocol (docs/native-protocol.md) and returns the JSON
/// response: `{"ok": result}` or `{"error": {"kind", "message"}}`. Never throws: errors,
/// panics included, are responses. Blocks during `compute`: call it off the UI thread.
#[uniffi::export]
pub fn call_json(request: String) -> String {
    guard_or(
        "callJson",
        || r#"{"error":{"kind":"Internal","message":"panic in callJson"}}"#.to_string(),
        || handle(&request).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(lookup(id).unwrap().builds(), 1);
        handle(&json!({"method": "closeSession", "session": id}).to_string());
    }
}
