//! Session files of a model's conversation ([`tessera_llm::session_file`]): `Model.saveSession`
//! / `Model.loadSession` through uniffi, and the JSON protocol's `saveSession` / `loadSession`.
//!
//! Errors: a session of another model, a truncated or corrupt file, or one that is not a
//! session file is `InvalidArgument` (its message says which); a session longer than the
//! context is `ContextFull`; a file that cannot be read or written is `Storage`. After a failed
//! load the conversation is empty (the next generation starts afresh).

use crate::error::{guard, FfiResult, TesseraError};
use crate::json_model::{model, ModelCall};
use crate::model::Model;
use crate::protocol::Method;
use serde::{Deserialize, Serialize};
use tessera_llm::session_file::SessionError;

/// The foreign kind of a session file's error.
pub(crate) fn session_error(e: &SessionError, message: String) -> TesseraError {
    match e {
        SessionError::Io { .. } => TesseraError::Storage { message },
        SessionError::TooLong { .. } => TesseraError::ContextFull { message },
        _ => TesseraError::InvalidArgument { message },
    }
}

#[uniffi::export]
impl Model {
    /// Saves the conversation of `sequence` (its tokens and cache) to a session file at `path`
    /// and returns its number of tokens; `loadSession` of the same model file resumes it, on
    /// any sequence.
    #[uniffi::method(default(sequence = 0))]
    pub fn save_session(&self, path: String, sequence: u32) -> FfiResult<u32> {
        guard("Model.saveSession", || {
            self.with_context(sequence, |ctx| {
                ctx.save_session(&path)?;
                Ok(ctx.n_past() as u32)
            })
        })
    }

    /// Loads the session file at `path` (saved with this model file) in place of the
    /// conversation of `sequence` and returns its number of tokens: a generation on that
    /// sequence whose prompt continues it processes only what is new.
    #[uniffi::method(default(sequence = 0))]
    pub fn load_session(&self, path: String, sequence: u32) -> FfiResult<u32> {
        guard("Model.loadSession", || {
            self.with_context(sequence, |ctx| Ok(ctx.load_session(&path)? as u32))
        })
    }
}

/// `saveSession`: `{tokens}`, the number of tokens saved.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct SaveSession(ModelCall<SessionPath>);

/// `loadSession`: `{tokens}`, the number of tokens loaded.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct LoadSession(ModelCall<SessionPath>);

/// The parameters of `saveSession` and `loadSession`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionPath {
    path: String,
    /// The sequence (default 0).
    #[serde(default)]
    sequence: u32,
}

/// The number of tokens of a session.
#[derive(Serialize)]
pub(crate) struct SessionTokens {
    tokens: u32,
}

impl Method for SaveSession {
    type Reply = SessionTokens;

    fn run(self) -> FfiResult<SessionTokens> {
        let (id, p) = self.0.into_parts();
        Ok(SessionTokens { tokens: model(id)?.save_session(p.path, p.sequence)? })
    }
}

impl Method for LoadSession {
    type Reply = SessionTokens;

    fn run(self) -> FfiResult<SessionTokens> {
        let (id, p) = self.0.into_parts();
        Ok(SessionTokens { tokens: model(id)?.load_session(p.path, p.sequence)? })
    }
}
