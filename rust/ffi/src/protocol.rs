//! The requests of the JSON protocol (docs/native-protocol.md) as types.
//!
//! A request is a JSON object whose `method` names one variant of [`Request`]; its other keys
//! are that variant's request type, deserialized by serde (camelCase keys, unknown keys refused,
//! a missing optional key taking the default of its type). Each request type is a [`Method`]:
//! it runs and answers with a reply type that serde writes as the response's `ok`. A new method
//! is one request type with its `Method` impl and one line in [`methods!`]'s list.
//!
//! Errors name the method, where in the request the problem is and what it is:
//! `compute: inputs[0]: unknown key "type" (known: name, dtype, shape, data)`.

use crate::document::strict_json;
use crate::error::{FfiResult, TesseraError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// One method of the protocol: its request, run, gives a reply serialized as the response's
/// `ok` value.
pub(crate) trait Method: DeserializeOwned {
    /// What the method answers.
    type Reply: Serialize;

    /// Runs the request.
    fn run(self) -> FfiResult<Self::Reply>;
}

/// A response: `{"ok": reply}` or `{"error": {"kind", "message"}}`.
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Response<'a, T: Serialize> {
    /// The method's reply.
    Ok(&'a T),
    /// What went wrong.
    Error {
        /// The error's kind (`TesseraError`'s variant).
        kind: &'static str,
        /// What went wrong, naming the input, node, tensor or device.
        message: &'a str,
    },
}

impl Response<'_, ()> {
    /// The error response for `e`.
    pub(crate) fn error(e: &TesseraError) -> Response<'_, ()> {
        Response::Error { kind: e.kind(), message: e.message() }
    }
}

/// Runs `method` and writes its response's `ok` form.
fn answer<M: Method>(method: M) -> FfiResult<String> {
    let reply = method.run()?;
    serde_json::to_string(&Response::Ok(&reply))
        .map_err(|e| TesseraError::internal(format!("the reply could not be written: {e}")))
}

/// Declares [`Request`], one variant per method named as its request type, and its dispatch.
macro_rules! methods {
    ($($(#[$doc:meta])* $method:ident,)*) => {
        /// A request: the method (the variant's name in camelCase) and its fields.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub(crate) enum Request {
            $($(#[$doc])* $method($method),)*
        }

        impl Request {
            /// Runs the request; the `ok` response as JSON text.
            pub(crate) fn run(self) -> FfiResult<String> {
                match self {
                    $(Request::$method(m) => answer(m),)*
                }
            }
        }
    };
}

use crate::download::{DeleteModel, DownloadModel, ListModels, SetModelsDirectory};
use crate::json_api::{
    BuildInfo, Cancel, CloseAllSessions, CloseSession, Compute, ComputeLoaded, CpuFeatures,
    Devices, GgufInfo, LoadGraph, OpenSession, ReleaseGraph, SetLogLevel,
};
use crate::json_model::{
    ApplyChatTemplate, CancelGeneration, Detokenize, Embed, Generate, LoadModel, ModelInfo,
    ReleaseModel, Rerank, Tokenize,
};
use crate::model_session::{LoadSession, SaveSession};
use crate::requests::{CancelDownload, CancelLoad};

methods! {
    /// `devices`: the devices of the default registry.
    Devices,
    /// `cpuFeatures`: the CPU's features and kernel tiers.
    CpuFeatures,
    /// `buildInfo`: how the library was built.
    BuildInfo,
    /// `openSession`: a session kept under a number.
    OpenSession,
    /// `compute`: a graph document computed on a session or a one-shot one.
    Compute,
    /// `cancel`: cancels a session's computes.
    Cancel,
    /// `loadGraph`: a document built once on a session.
    LoadGraph,
    /// `computeLoaded`: a loaded document computed with new inputs.
    ComputeLoaded,
    /// `releaseGraph`: frees a loaded document.
    ReleaseGraph,
    /// `ggufInfo`: a GGUF file's header, metadata and tensor table.
    GgufInfo,
    /// `closeSession`: closes a session.
    CloseSession,
    /// `closeAllSessions`: closes every session and model.
    CloseAllSessions,
    /// `setLogLevel`: the log level.
    SetLogLevel,
    /// `loadModel`: a language model kept under a number.
    LoadModel,
    /// `cancelLoad`: stops a `loadModel` by its `requestId`.
    CancelLoad,
    /// `modelInfo`: what a loaded model is.
    ModelInfo,
    /// `tokenize`: a text's tokens.
    Tokenize,
    /// `detokenize`: tokens' text.
    Detokenize,
    /// `applyChatTemplate`: a conversation rendered as a prompt.
    ApplyChatTemplate,
    /// `generate`: a streamed generation.
    Generate,
    /// `cancelGeneration`: stops the generation running on a model.
    CancelGeneration,
    /// `embed`: pooled embeddings.
    Embed,
    /// `rerank`: documents scored against a query by a reranker model.
    Rerank,
    /// `releaseModel`: frees a model.
    ReleaseModel,
    /// `saveSession`: a model's conversation saved to a session file.
    SaveSession,
    /// `loadSession`: a session file loaded as a model's conversation.
    LoadSession,
    /// `downloadModel`: a model file into the models folder.
    DownloadModel,
    /// `cancelDownload`: stops a `downloadModel` by its `requestId`.
    CancelDownload,
    /// `listModels`: the model files of the models folder.
    ListModels,
    /// `deleteModel`: removes a model file.
    DeleteModel,
    /// `setModelsDirectory`: the folder downloads go to.
    SetModelsDirectory,
}

fn bad(message: impl Into<String>) -> TesseraError {
    TesseraError::invalid_argument(message)
}

impl Request {
    /// Parses a request: strict JSON (a key given twice is an error), an object whose `method`
    /// names a method, and that method's fields.
    pub(crate) fn parse(text: &str) -> FfiResult<Request> {
        let value = strict_json::from_str(text)
            .map_err(|e| bad(format!("the request is not valid JSON: {e}")))?;
        let Value::Object(mut fields) = value else {
            return Err(bad("the request must be a JSON object"));
        };
        let method = match fields.remove("method") {
            Some(Value::String(m)) => m,
            Some(_) => return Err(bad("request: \"method\" must be a string")),
            None => return Err(bad("request: missing \"method\"")),
        };
        // The method's fields as the variant's content: `{"compute": {...}}`.
        let tagged = Value::Object(Map::from_iter([(method.clone(), Value::Object(fields))]));
        // The path without its first segment (the method).
        strict_json::from_value(tagged, 1).map_err(|mut e| {
            e.message = reworded(&e.message);
            // The variant of the request itself is the method (a nested enum's is a value).
            if e.path.is_empty() {
                e.message = e.message.replacen("unknown value", "unknown method", 1);
            }
            bad(format!("{method}: {e}"))
        })
    }
}

/// serde's messages about keys in the protocol's words: `unknown key "k" (known: a, b)` for
/// "unknown field `k`, expected `a` or `b`", `unknown value "v" (known: ...)` for an unknown
/// variant, `missing "k"` for "missing field `k`"; other messages as they are.
fn reworded(message: &str) -> String {
    let quoted = |text: &str| -> Vec<String> {
        text.split('`').skip(1).step_by(2).map(str::to_string).collect()
    };
    for (serde, ours) in
        [("unknown field `", "unknown key"), ("unknown variant `", "unknown value")]
    {
        if let Some(rest) = message.strip_prefix(serde) {
            if let Some((name, expected)) = rest.split_once('`') {
                let known = quoted(expected);
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                return format!("{ours} {name:?} (known: {known})");
            }
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some(name) = rest.strip_suffix('`') {
            return format!("missing {name:?}");
        }
    }
    message.to_string()
}

/// A graph document given in a request: an object, or (as the typed API takes it) its text.
#[derive(Debug)]
pub(crate) struct GraphText(pub(crate) String);

impl<'de> Deserialize<'de> for GraphText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GraphText, D::Error> {
        match Value::deserialize(d)? {
            Value::String(text) => Ok(GraphText(text)),
            document @ Value::Object(_) => Ok(GraphText(document.to_string())),
            _ => Err(serde::de::Error::custom("must be a graph document (an object)")),
        }
    }
}

/// A value read as text through `FromStr` (e.g. a log level).
pub(crate) fn from_text<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(request: &str) -> String {
        match Request::parse(request) {
            Ok(_) => panic!("{request} parsed"),
            Err(e) => {
                assert_eq!(e.kind(), "InvalidArgument");
                e.message().to_string()
            }
        }
    }

    /// Unknown keys, methods and missing keys are named with where they are.
    #[test]
    fn errors_name_the_method_the_place_and_the_key() {
        assert_eq!(
            error(r#"{"method":"devices","verbose":true}"#),
            r#"devices: unknown key "verbose" (known: none)"#
        );
        assert_eq!(
            error(r#"{"method":"closeSession","session":1,"all":true}"#),
            r#"closeSession: unknown key "all" (known: session)"#
        );
        let e = error(r#"{"method":"nope"}"#);
        assert!(
            e.starts_with(r#"nope: unknown method "nope" (known: devices, cpuFeatures, "#),
            "{e}"
        );
        assert!(e.ends_with("deleteModel, setModelsDirectory)"), "{e}");
        assert_eq!(error(r#"{"method":"cancel"}"#), r#"cancel: missing "session""#);
        assert_eq!(error(r#"{"session":1}"#), r#"request: missing "method""#);
        assert_eq!(error(r#"{"method":7}"#), r#"request: "method" must be a string"#);
        assert_eq!(error("[1]"), "the request must be a JSON object");
        let e = error(
            r#"{"method":"compute","graph":{},"inputs":[{"name":"a","dtype":"F32","shape":[1],"data":"","type":1}]}"#,
        );
        assert_eq!(
            e,
            r#"compute: inputs[0]: unknown key "type" (known: name, dtype, shape, data)"#
        );
        let e = error(
            r#"{"method":"compute","graph":{},"inputs":[{"name":"a","dtype":"F32","shape":[-1],"data":""}]}"#,
        );
        assert!(e.starts_with("compute: inputs[0].shape[0]: invalid value: integer `-1`"), "{e}");
        let e = error(r#"{"method":"openSession","options":{"threads":0}}"#);
        assert!(e.starts_with("openSession: options.threads: "), "{e}");
        let e = error(r#"{"method":"compute","graph":3}"#);
        assert_eq!(e, "compute: graph: must be a graph document (an object)");
        let e = error(r#"{"method":"setLogLevel","level":"loud"}"#);
        assert!(e.starts_with("setLogLevel: level: log level \"loud\" is not one of"), "{e}");
    }

    #[test]
    fn serde_messages_are_reworded() {
        assert_eq!(reworded("unknown field `x`, expected `a`"), r#"unknown key "x" (known: a)"#);
        assert_eq!(
            reworded("unknown field `x`, expected `a` or `b`"),
            r#"unknown key "x" (known: a, b)"#
        );
        assert_eq!(
            reworded("unknown variant `x`, expected one of `a`, `b`, `c`"),
            r#"unknown value "x" (known: a, b, c)"#
        );
        assert_eq!(
            reworded("unknown field `x`, there are no fields"),
            r#"unknown key "x" (known: none)"#
        );
        assert_eq!(reworded("missing field `text`"), r#"missing "text""#);
        assert_eq!(
            reworded("invalid type: null, expected u64"),
            "invalid type: null, expected u64"
        );
    }
}
