//! The simplest correct placement of a graph in one buffer, for tests and tools.

use std::sync::Arc;
use tessera_core::backend::{Buffer, BufferType};
use tessera_core::{Graph, Result};

/// Gives every tensor of `graph` that holds data (not views) and has no memory yet its own
/// range of one new buffer of `buffer_type`, aligned to the type's alignment, without any
/// reuse. Returns the buffer, or `None` when every tensor already had memory.
pub fn allocate_graph(
    graph: &mut Graph,
    buffer_type: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    let ids = tessera_core::alloc::unplaced(graph);
    tessera_core::alloc::place_sequentially(graph, &ids, buffer_type.as_ref())
}
