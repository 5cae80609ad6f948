//! The error type of the engine's core, which every crate's backend traits return. Errors
//! about layers above it (a CPU kernel tier, an FFI session's state) are those crates' own
//! types (`tessera_cpu::CpuError`, the FFI's `TesseraError`), converted where they meet.

use crate::dtype::DType;

/// Result with Tessera's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Tessera, as a typed value with a message that names the
/// op, tensor or device concerned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A type name or id that Tessera does not know (the text says which, and the canonical
    /// name when only the case differs).
    #[error("unknown tensor type {0}")]
    UnknownType(String),
    /// An op name that Tessera does not know.
    #[error("unknown op {0:?}")]
    UnknownOp(String),
    /// A row length that is not a multiple of its type's block size.
    #[error("{n} values of {dtype} are not a whole number of blocks of {block}")]
    BlockAlignment {
        /// The type.
        dtype: DType,
        /// The number of values.
        n: usize,
        /// The block size of the type.
        block: usize,
    },
    /// A size computation overflowed.
    #[error("size overflow: {what}")]
    Overflow {
        /// What was being sized.
        what: String,
    },
    /// A shape that is invalid in itself (zero or too large a dimension, too many dimensions).
    #[error("invalid shape {shape:?}: {reason}")]
    InvalidShape {
        /// The shape as given.
        shape: Vec<usize>,
        /// Why it is invalid.
        reason: String,
    },
    /// An op whose operands do not fit together.
    #[error("{op}: {reason}")]
    ShapeMismatch {
        /// The op, e.g. "MUL_MAT".
        op: String,
        /// What does not fit, naming the shapes.
        reason: String,
    },
    /// An op that does not accept a type.
    #[error("{op}: type {dtype} is not supported ({reason})")]
    UnsupportedType {
        /// The op.
        op: String,
        /// The offending type.
        dtype: DType,
        /// Which operand and what is accepted.
        reason: String,
    },
    /// A view that reaches outside its source.
    #[error("{op}: view out of bounds: {reason}")]
    ViewOutOfBounds {
        /// The view op.
        op: String,
        /// The offending extent.
        reason: String,
    },
    /// A tensor id that does not belong to the graph.
    #[error("tensor id {0} does not exist in this graph")]
    InvalidTensorId(usize),
    /// A name used for two tensors.
    #[error("duplicate tensor name {0:?}")]
    DuplicateName(String),
    /// Data whose length does not fit the tensor.
    #[error("{context}: expected {expected} bytes, got {actual}")]
    DataLength {
        /// The tensor or call.
        context: String,
        /// Expected byte count.
        expected: usize,
        /// Given byte count.
        actual: usize,
    },
    /// A read or write outside a buffer or tensor.
    #[error("out of bounds: {0}")]
    OutOfBounds(String),
    /// An index read from a tensor at compute time (GET_ROWS, SET_ROWS) outside its range: a
    /// mistake in the caller's data, not a bug.
    #[error("{op}: {reason}")]
    IndexOutOfRange {
        /// The op.
        op: String,
        /// The index, where it was read and the allowed range.
        reason: String,
    },
    /// A write into memory that must not be written (a read-only mapped file).
    #[error("read-only memory: {0}")]
    ReadOnly(String),
    /// A tensor used in compute without memory.
    #[error("tensor {0:?} has no data: allocate the graph first")]
    NotAllocated(String),
    /// An invalid graph (a graph document's structure, an op whose layout is its own) or parameter.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
    /// A parameter out of range (thread count, option value ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A device name that no registered backend provides.
    #[error("unknown device {0:?}")]
    UnknownDevice(String),
    /// An op that no device can compute, or that a device was asked to run but cannot.
    #[error("{device}: op {op} is not supported")]
    UnsupportedOp {
        /// The device.
        device: String,
        /// The op and its types.
        op: String,
    },
    /// Memory could not be allocated.
    #[error("out of memory: could not allocate {size} bytes on {device}")]
    OutOfMemory {
        /// The device or buffer type.
        device: String,
        /// The requested size.
        size: usize,
    },
    /// The abort callback asked compute to stop.
    #[error("computation aborted")]
    Aborted,
    /// A backend failed (driver error, lost device ...).
    #[error("backend {backend}: {message}")]
    Backend {
        /// The backend.
        backend: String,
        /// What happened.
        message: String,
    },
    /// Something a device cannot do on this machine, as the device's own crate names it (a CPU
    /// kernel tier the processor lacks, ...).
    #[error("{device} does not support {what}")]
    Unsupported {
        /// The device.
        device: String,
        /// What it lacks.
        what: String,
    },
    /// An error in one node or tensor of a graph, naming it.
    #[error("{kind} {name:?}: {error}")]
    InGraph {
        /// "node", "tensor" or "output".
        kind: String,
        /// The node's or tensor's name.
        name: String,
        /// What is wrong.
        error: Box<Error>,
    },
    /// An op parameter out of range or of the wrong kind (CLAMP's `min` above `max`, ROPE's
    /// `n_dims`, a document node's `params` ...): a mistake in the graph, not in its data.
    #[error("{op}: {reason}")]
    InvalidParam {
        /// The op.
        op: String,
        /// Which parameter, the value given and what is accepted.
        reason: String,
    },
    /// An op that would write into a constant (a weight, or a document's constant): the kept
    /// graph would compute with the overwritten value next time, so such graphs are refused.
    #[error("{op} writes into {constant:?}, a constant (weights and constants are read-only: make it an input, or copy into a tensor of its own)")]
    WriteToConstant {
        /// The writing op.
        op: String,
        /// The constant's name.
        constant: String,
    },
    /// A graph whose planned memory exceeds the memory budget it was given.
    #[error(
        "the graph needs {}{needed} bytes ({detail}), more than the memory budget of {budget} bytes",
        if *needed == usize::MAX { "more than " } else { "" }
    )]
    OverBudget {
        /// Bytes the graph's plan needs in total.
        needed: usize,
        /// The budget.
        budget: usize,
        /// Where the bytes go (per device).
        detail: String,
    },
}

impl Error {
    /// A [`Error::ShapeMismatch`] for `op` with `reason`.
    pub fn shape(op: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::ShapeMismatch { op: op.into(), reason: reason.into() }
    }

    /// An [`Error::InvalidParam`] for `op` with `reason`.
    pub fn param(op: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidParam { op: op.into(), reason: reason.into() }
    }

    /// An [`Error::UnsupportedType`] for `op`.
    pub fn dtype(op: impl Into<String>, dtype: DType, reason: impl Into<String>) -> Error {
        Error::UnsupportedType { op: op.into(), dtype, reason: reason.into() }
    }
}
