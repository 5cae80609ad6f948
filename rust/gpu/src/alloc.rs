//! The simplest correct placement of a graph in one buffer, for tests and tools.

use std::sync::Arc;
use tessera_core::backend::{Buffer, BufferType};
use tessera_core::{Graph, Result, Storage};

/// Gives every tensor of `graph` that holds data (not views) and has no memory yet its own
/// range of one new buffer of `buffer_type`, aligned to the type's alignment, without any
/// reuse. Returns the buffer, or `None` when every tensor already had memory.
pub fn allocate_graph(
    graph: &mut Graph,
    buffer_type: &Arc<dyn BufferType>,
) -> Result<Option<Arc<dyn Buffer>>> {
    let align = buffer_type.alignment().max(1);
    let pad = |n: usize| n.div_ceil(align) * align;
    let ids: Vec<_> = graph
        .ids()
        .filter(|&id| {
            let t = graph.tensor(id);
            t.view_src.is_none() && t.storage.is_none()
        })
        .collect();
    if ids.is_empty() {
        return Ok(None);
    }
    let total = ids.iter().map(|&id| pad(graph.tensor(id).nbytes())).sum::<usize>();
    let buffer = buffer_type.alloc(total)?;
    let mut offset = 0;
    for id in ids {
        let n = graph.tensor(id).nbytes();
        graph.set_storage(id, Storage { buffer: buffer.clone(), offset })?;
        offset += pad(n);
    }
    Ok(Some(buffer))
}
