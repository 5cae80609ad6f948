//! Tessera core: element types and GGUF block formats, tensor metadata, graphs and ops, the
//! backend traits, the registry, the graph allocator and the scheduler.
//!
//! The model follows ggml's backend layer (`ggml-backend.h`): buffer types allocate buffers,
//! devices offer buffer types and create backends, backend registries group devices, and a
//! backend computes graphs. See `docs/architecture.md`.
#![warn(missing_docs)]

pub mod alloc;
pub mod backend;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod op;
pub mod quant;
pub mod registry;
pub mod sched;
pub mod shape_rules;
pub mod storage;
pub mod tensor;
pub mod tensor_data;

pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::Graph;
pub use op::{AttnParams, GluOp, Op, RopeParams, UnaryOp};
pub use storage::Storage;
pub use tensor::{Layout, Tensor, TensorFlags, TensorId};
