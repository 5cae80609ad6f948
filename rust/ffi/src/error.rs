//! The one error type of the foreign API, and the panic guard every exported function uses.

use std::panic::{catch_unwind, AssertUnwindSafe};
use tessera_core::Error;

/// Every error the foreign API returns. Each variant carries a human-readable `message` that
/// names the node, tensor, input or device concerned.
///
/// In Kotlin this arrives as `TesseraException.<Variant>` (a `kotlin.Exception` whose
/// `message` is the text); in Swift as `TesseraError.<variant>(message:)`. It is a "flat"
/// uniffi error: the foreign side sees the variant and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
#[uniffi(flat_error)]
pub enum TesseraError {
    /// A graph document that is not valid: bad JSON, unsupported version, duplicate names,
    /// a missing source, a cycle, wrong arity or parameters.
    #[error("{message}")]
    InvalidGraph {
        /// What is wrong, naming the node or tensor.
        message: String,
    },
    /// An op name that Tessera does not know.
    #[error("{message}")]
    UnknownOp {
        /// Names the node and the op.
        message: String,
    },
    /// A tensor type name that Tessera does not know.
    #[error("{message}")]
    UnknownType {
        /// Names the tensor and the type.
        message: String,
    },
    /// Shapes that do not fit: operands of an op, or an input whose shape differs from the
    /// graph's.
    #[error("{message}")]
    ShapeMismatch {
        /// Names the node or input and the shapes.
        message: String,
    },
    /// Data whose byte length does not match its tensor.
    #[error("{message}")]
    DataLength {
        /// Names the tensor or input, with the expected and actual lengths.
        message: String,
    },
    /// A device name that no registered backend provides.
    #[error("{message}")]
    UnknownDevice {
        /// Names the device and lists the known ones.
        message: String,
    },
    /// An argument out of range (thread count, input names or types ...).
    #[error("{message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },
    /// An op or type that no device can run.
    #[error("{message}")]
    Unsupported {
        /// The op, type or feature.
        message: String,
    },
    /// The computation was cancelled with `Session.cancel()` (or its async call was
    /// cancelled).
    #[error("{message}")]
    Cancelled {
        /// Says so.
        message: String,
    },
    /// The computation was aborted by a backend's abort callback for another reason.
    #[error("{message}")]
    Aborted {
        /// Says so.
        message: String,
    },
    /// The session was closed.
    #[error("{message}")]
    Closed {
        /// Says so.
        message: String,
    },
    /// A model file that cannot be used: unreadable or malformed GGUF, an unknown
    /// architecture, a missing or misshapen tensor, an unusable vocabulary.
    #[error("{message}")]
    InvalidModel {
        /// What is wrong, and where.
        message: String,
    },
    /// The tokens do not fit in the model's context.
    #[error("{message}")]
    ContextFull {
        /// How many positions were needed and how many the context holds.
        message: String,
    },
    /// Memory could not be allocated.
    #[error("{message}")]
    OutOfMemory {
        /// The device and size.
        message: String,
    },
    /// A backend failed (driver error, lost device ...).
    #[error("{message}")]
    Backend {
        /// The backend and what happened.
        message: String,
    },
    /// A bug: a caught panic or an inconsistency. The app keeps running.
    #[error("{message}")]
    Internal {
        /// The panic message or the inconsistency.
        message: String,
    },
    /// A download failed on the network: no connection, a cut one, an HTTP error status.
    #[error("{message}")]
    Network {
        /// The URL and what happened.
        message: String,
    },
    /// Files could not be written: not enough free space, a full disk, a folder that cannot
    /// be created.
    #[error("{message}")]
    Storage {
        /// The file or folder and what happened.
        message: String,
    },
}

impl TesseraError {
    /// The variant's name ("ShapeMismatch", ...), as the C ABI reports it in `error.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            TesseraError::InvalidGraph { .. } => "InvalidGraph",
            TesseraError::UnknownOp { .. } => "UnknownOp",
            TesseraError::UnknownType { .. } => "UnknownType",
            TesseraError::ShapeMismatch { .. } => "ShapeMismatch",
            TesseraError::DataLength { .. } => "DataLength",
            TesseraError::UnknownDevice { .. } => "UnknownDevice",
            TesseraError::InvalidArgument { .. } => "InvalidArgument",
            TesseraError::Unsupported { .. } => "Unsupported",
            TesseraError::Cancelled { .. } => "Cancelled",
            TesseraError::Aborted { .. } => "Aborted",
            TesseraError::Closed { .. } => "Closed",
            TesseraError::InvalidModel { .. } => "InvalidModel",
            TesseraError::ContextFull { .. } => "ContextFull",
            TesseraError::OutOfMemory { .. } => "OutOfMemory",
            TesseraError::Backend { .. } => "Backend",
            TesseraError::Internal { .. } => "Internal",
            TesseraError::Network { .. } => "Network",
            TesseraError::Storage { .. } => "Storage",
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            TesseraError::InvalidGraph { message }
            | TesseraError::UnknownOp { message }
            | TesseraError::UnknownType { message }
            | TesseraError::ShapeMismatch { message }
            | TesseraError::DataLength { message }
            | TesseraError::UnknownDevice { message }
            | TesseraError::InvalidArgument { message }
            | TesseraError::Unsupported { message }
            | TesseraError::Cancelled { message }
            | TesseraError::Aborted { message }
            | TesseraError::Closed { message }
            | TesseraError::InvalidModel { message }
            | TesseraError::ContextFull { message }
            | TesseraError::OutOfMemory { message }
            | TesseraError::Backend { message }
            | TesseraError::Internal { message }
            | TesseraError::Network { message }
            | TesseraError::Storage { message } => message,
        }
    }

    /// An [`TesseraError::InvalidArgument`].
    pub(crate) fn invalid_argument(message: impl Into<String>) -> TesseraError {
        TesseraError::InvalidArgument { message: message.into() }
    }

    /// An [`TesseraError::Internal`].
    pub(crate) fn internal(message: impl Into<String>) -> TesseraError {
        TesseraError::Internal { message: message.into() }
    }

    /// The [`TesseraError::Cancelled`] error.
    pub(crate) fn cancelled() -> TesseraError {
        TesseraError::Cancelled { message: "computation cancelled".into() }
    }

    /// A [`TesseraError::Closed`] error.
    pub(crate) fn closed() -> TesseraError {
        TesseraError::Closed { message: "the session is closed".into() }
    }
}

/// The variant for a core error (without its context wrapper): the one place deciding the kind
/// of every core error, as the tables of docs/c-api.md and docs/native-protocol.md give them.
fn classify(error: &Error) -> fn(String) -> TesseraError {
    match error {
        Error::UnknownType(_) => |message| TesseraError::UnknownType { message },
        Error::UnknownOp(_) => |message| TesseraError::UnknownOp { message },
        // Operands that do not fit each other, or a view outside its source.
        Error::ShapeMismatch { .. } | Error::ViewOutOfBounds { .. } => {
            |message| TesseraError::ShapeMismatch { message }
        }
        // Mistakes in the document itself: invalid shapes (no, too many, zero or too large
        // dimensions, rows that are not whole blocks), parameters, base64 of constants,
        // structure, and writes into constants.
        Error::InvalidShape { .. }
        | Error::BlockAlignment { .. }
        | Error::InvalidParam { .. }
        | Error::Base64(_)
        | Error::WriteToConstant { .. }
        | Error::Cycle(_)
        | Error::DuplicateName(_)
        | Error::UnknownTensor { .. }
        | Error::InvalidGraph(_) => |message| TesseraError::InvalidGraph { message },
        Error::DataLength { .. } | Error::ValueCount { .. } => {
            |message| TesseraError::DataLength { message }
        }
        // Arguments and data found wrong when used (an index read at compute time, a write
        // into read-only memory).
        Error::InvalidArgument(_) | Error::IndexOutOfRange { .. } | Error::ReadOnly(_) => {
            |message| TesseraError::InvalidArgument { message }
        }
        // An op, type or capability of a device (a CPU kernel tier, `tessera_cpu::CpuError`).
        Error::UnsupportedType { .. } | Error::UnsupportedOp { .. } | Error::Unsupported { .. } => {
            |message| TesseraError::Unsupported { message }
        }
        Error::UnknownDevice(_) => |message| TesseraError::UnknownDevice { message },
        // A size beyond what can be addressed is memory that cannot be had.
        Error::OutOfMemory { .. } | Error::OverBudget { .. } | Error::Overflow { .. } => {
            |message| TesseraError::OutOfMemory { message }
        }
        Error::Aborted => |message| TesseraError::Aborted { message },
        Error::Backend { .. } => |message| TesseraError::Backend { message },
        Error::InGraph { error, .. } => classify(error),
        // Bugs: a tensor id from another graph, an access outside a buffer, compute before
        // allocation, a caught panic, and kinds added later until classified here.
        Error::InvalidTensorId(_)
        | Error::OutOfBounds(_)
        | Error::NotAllocated(_)
        | Error::Panic(_) => |message| TesseraError::Internal { message },
        _ => |message| TesseraError::Internal { message },
    }
}

impl From<Error> for TesseraError {
    fn from(error: Error) -> TesseraError {
        // `InGraph` takes its inner error's kind and keeps the full text, which names the node
        // or tensor.
        classify(&error)(error.to_string())
    }
}

/// Result with [`TesseraError`].
pub type FfiResult<T> = Result<T, TesseraError>;

/// Runs `f`, turning a panic into [`TesseraError::Internal`] so that nothing unwinds into the
/// foreign caller.
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> FfiResult<T>) -> FfiResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let text = tessera_core::registry::panic_message(&payload);
            log::error!("panic in {what}: {text}");
            Err(TesseraError::internal(format!("panic in {what}: {text}")))
        }
    }
}

/// Like [`guard`] for functions that cannot fail otherwise: a panic gives `fallback`.
pub(crate) fn guard_or<T>(what: &str, fallback: impl FnOnce() -> T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(payload) => {
            let text = tessera_core::registry::panic_message(&payload);
            log::error!("panic in {what}: {text}");
            fallback()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_internal_errors() {
        let r: FfiResult<()> = guard("test", || panic!("boom {}", 1));
        let e = r.unwrap_err();
        assert_eq!(e.kind(), "Internal");
        assert!(e.message().contains("boom 1"), "{e}");
        assert_eq!(guard_or("test", || 7, || panic!("boom")), 7);
    }

    #[test]
    fn graph_errors_keep_their_kind_and_name() {
        let inner = Error::UnknownOp("FOO".into());
        let e: TesseraError =
            Error::InGraph { kind: "node".into(), name: "y".into(), error: Box::new(inner) }.into();
        assert_eq!(e.kind(), "UnknownOp");
        assert!(e.message().contains("\"y\"") && e.message().contains("FOO"), "{e}");
        let e: TesseraError = Error::Cycle("a".into()).into();
        assert_eq!(e.kind(), "InvalidGraph");
        let e: TesseraError = Error::OutOfMemory { device: "CPU".into(), size: 9 }.into();
        assert_eq!(e.kind(), "OutOfMemory");
        let e: TesseraError = Error::Panic("x".into()).into();
        assert_eq!(e.kind(), "Internal");
        assert_eq!(e.to_string(), e.message());
    }

    /// The kinds of the docs' tables, one core error of each family at a time.
    #[test]
    fn core_errors_get_the_documented_kinds() {
        let s = || String::from("x");
        let cases: Vec<(Error, &str)> = vec![
            (Error::InvalidShape { shape: vec![0], reason: s() }, "InvalidGraph"),
            (
                Error::BlockAlignment { dtype: tessera_core::DType::Q4_0, n: 3, block: 32 },
                "InvalidGraph",
            ),
            (Error::param("CLAMP", s()), "InvalidGraph"),
            (Error::Base64(s()), "InvalidGraph"),
            (Error::WriteToConstant { op: "CPY".into(), constant: s() }, "InvalidGraph"),
            (Error::ValueCount { context: s(), expected: 3, actual: 2 }, "DataLength"),
            (Error::DataLength { context: s(), expected: 3, actual: 2 }, "DataLength"),
            (Error::shape("ADD", s()), "ShapeMismatch"),
            (Error::ViewOutOfBounds { op: "VIEW".into(), reason: s() }, "ShapeMismatch"),
            (Error::dtype("ROPE", tessera_core::DType::I32, s()), "Unsupported"),
            // The CPU's own error for a kernel tier the processor lacks, as it reaches the FFI.
            (tessera_cpu::CpuError::TierUnsupported(s()).into(), "Unsupported"),
            (Error::IndexOutOfRange { op: "GET_ROWS".into(), reason: s() }, "InvalidArgument"),
            (Error::OverBudget { needed: 2, budget: 1, detail: s() }, "OutOfMemory"),
            (Error::Overflow { what: s() }, "OutOfMemory"),
            (Error::OutOfBounds(s()), "Internal"),
            (Error::NotAllocated(s()), "Internal"),
        ];
        for (e, kind) in cases {
            let wrapped = Error::InGraph {
                kind: "node".into(),
                name: "n".into(),
                error: Box::new(e.clone()),
            };
            assert_eq!(TesseraError::from(e.clone()).kind(), kind, "{e:?}");
            assert_eq!(TesseraError::from(wrapped).kind(), kind, "{e:?} in a node");
        }
    }
}
