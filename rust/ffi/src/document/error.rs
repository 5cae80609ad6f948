//! The errors of graph documents: the core's (a node's op, shapes, types, parameters) and what
//! only a document can get wrong (names, cycles, value counts, base64), each naming the node or
//! tensor concerned.

use tessera_core::Error;

/// An error in a graph document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DocumentError {
    /// An error of the graph the document builds (op, shapes, types, parameters ...).
    #[error(transparent)]
    Core(#[from] Error),
    /// A graph description that refers to tensors in a cycle.
    #[error("the graph has a cycle through {0:?}")]
    Cycle(String),
    /// A name that refers to nothing.
    #[error("{context}: unknown tensor {name:?}")]
    UnknownTensor {
        /// Where the name was used.
        context: String,
        /// The name.
        name: String,
    },
    /// Numbers given for a tensor (`values`) whose count does not fit it.
    #[error("{context}: expected {expected} values, got {actual}")]
    ValueCount {
        /// The tensor.
        context: String,
        /// Expected number of values (the tensor's elements).
        expected: usize,
        /// Given number of values.
        actual: usize,
    },
    /// Text that is not valid base64.
    #[error("invalid base64: {0}")]
    Base64(String),
    /// An error in one node or tensor of the document, naming it.
    #[error("{kind} {name:?}: {error}")]
    InGraph {
        /// "node", "tensor" or "output".
        kind: String,
        /// The node's or tensor's name.
        name: String,
        /// What is wrong.
        error: Box<DocumentError>,
    },
}

impl DocumentError {
    /// A [`Error::InvalidGraph`] with `message`.
    pub(crate) fn invalid(message: impl Into<String>) -> DocumentError {
        DocumentError::Core(Error::InvalidGraph(message.into()))
    }
}

/// Result with [`DocumentError`].
pub type Result<T, E = DocumentError> = std::result::Result<T, E>;
