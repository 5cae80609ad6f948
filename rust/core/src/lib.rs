//! Tessera core: element types and GGUF block formats, tensor metadata, graphs and ops, the
//! backend traits, the registry, the graph allocator and the scheduler.
//!
//! The model follows ggml's backend layer (`ggml-backend.h`): buffer types allocate buffers,
//! devices offer buffer types and create backends, backend registries group devices, and a
//! backend computes graphs. See `docs/architecture.md`.

pub mod dtype;
pub mod error;
pub mod quant;

pub use dtype::DType;
pub use error::{Error, Result};
