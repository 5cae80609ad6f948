//! Events from long calls of the JSON protocol (docs/native-protocol.md): model loading
//! progress and generated tokens, delivered as JSON strings to one process-wide listener while
//! the call that produces them runs (on the caller's thread).
//!
//! The React Native modules register a listener through uniffi ([`set_event_listener`]) and emit
//! each event to JavaScript as a `TesseraEvent`; the C ABI registers a function pointer
//! (`tessera_set_event_callback`). Every event carries the `requestId` of the request that
//! produced it, so that JavaScript routes it to the right promise or iterator.

use serde::Serialize;
use serde_json::Value;
use std::sync::{Arc, RwLock};

/// An event: `{"type": "loadProgress" | "token" | "downloadProgress", "requestId", ...}`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum Event<'a> {
    /// The fraction of a model's weights placed while it loads.
    LoadProgress {
        /// The `requestId` of the `loadModel` request.
        request_id: &'a Value,
        /// From 0 to 1.
        progress: f32,
    },
    /// A generated token: `token`, `text` (the raw text it completes, empty while held
    /// back), `chunks` (the typed pieces of the answer it made certain) and `probs` (with
    /// `nProbs`).
    Token {
        /// The `requestId` of the `generate` request.
        request_id: &'a Value,
        /// The token and what it extends.
        #[serde(flatten)]
        token: &'a crate::generation::GeneratedToken,
    },
    /// Texts embedded so far by an `embed` of several texts.
    EmbedProgress {
        /// The `requestId` of the `embed` request.
        request_id: &'a Value,
        /// Texts embedded.
        done: usize,
        /// Texts to embed.
        total: usize,
    },
    /// Bytes of a model file downloaded so far.
    DownloadProgress {
        /// The `requestId` of the `downloadModel` request.
        request_id: &'a Value,
        /// Bytes received (resumed bytes included).
        received: u64,
        /// The file's size, when the server announced it.
        total: Option<u64>,
    },
}

/// Receives events (JSON objects as text) from long protocol calls.
#[uniffi::export(callback_interface)]
pub trait EventListener: Send + Sync {
    /// One event, e.g. `{"type":"token","requestId":3,"token":818,"text":" the"}`.
    fn on_event(&self, event_json: String);
}

type Sink = Arc<dyn Fn(&str) + Send + Sync>;

fn sink() -> &'static RwLock<Option<Sink>> {
    static SINK: RwLock<Option<Sink>> = RwLock::new(None);
    &SINK
}

/// Sets (or with `None` removes) the process-wide listener of protocol events.
#[uniffi::export]
pub fn set_event_listener(listener: Option<Box<dyn EventListener>>) {
    let f: Option<Sink> = listener.map(|l| {
        let l: Arc<dyn EventListener> = Arc::from(l);
        Arc::new(move |e: &str| l.on_event(e.to_string())) as Sink
    });
    set_sink(f);
}

/// Sets the listener as a Rust closure (the C ABI's function pointer goes through this).
pub(crate) fn set_sink(f: Option<Sink>) {
    *sink().write().unwrap_or_else(|p| p.into_inner()) = f;
}

/// Emits `event` to the listener, if any. A listener that panics loses that event only.
pub(crate) fn emit(event: &Event<'_>) {
    let f = sink().read().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(f) = f {
        let Ok(text) = serde_json::to_string(event) else { return };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&text))).is_err() {
            log::warn!("the event listener panicked; the event was dropped");
        }
    }
}
