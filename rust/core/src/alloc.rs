//! The graph allocator (ggml-alloc): places the tensors of a graph in one buffer, reusing the
//! memory of tensors whose last reader has run and computing in place where the op allows.
//!
//! Inputs, outputs, weights and every leaf keep their memory for the whole graph; tensors the
//! caller already placed (those with storage) are left alone.

use crate::backend::{Buffer, BufferType, BufferUsage};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::storage::Storage;
use crate::tensor::TensorId;
use std::sync::Arc;

/// Where each tensor goes: offsets in one buffer of `size` bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocPlan {
    /// Byte offset per tensor index, for the tensors this plan places.
    pub offsets: Vec<Option<usize>>,
    /// Bytes needed (the peak of live memory, with alignment).
    pub size: usize,
    /// Nodes computed in place: (node, the operand whose memory it took).
    pub in_place: Vec<(TensorId, TensorId)>,
    /// Sum of the sizes of every placed tensor, as if nothing were reused.
    pub unshared_size: usize,
}

/// Free regions of a growing arena, best-fit with merging of neighbours. Offsets and sizes
/// saturate at `usize::MAX`: sizes come from requests, and a plan that reaches the limit must
/// be refused as too large (every buffer type and memory budget does), never wrap to a small one.
#[derive(Default)]
struct FreeList {
    blocks: Vec<(usize, usize)>,
    top: usize,
}

impl FreeList {
    fn alloc(&mut self, size: usize) -> usize {
        let best = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, &(_, s))| s >= size)
            .min_by_key(|(_, &(_, s))| s)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let (off, s) = self.blocks[i];
            if s == size {
                self.blocks.remove(i);
            } else {
                self.blocks[i] = (off.saturating_add(size), s - size);
            }
            return off;
        }
        // Grow, reusing a free block that ends at the top.
        if let Some(&(off, s)) = self.blocks.last() {
            if off.saturating_add(s) == self.top {
                self.blocks.pop();
                self.top = off.saturating_add(size);
                return off;
            }
        }
        let off = self.top;
        self.top = self.top.saturating_add(size);
        off
    }

    fn free(&mut self, off: usize, size: usize) {
        let i = self.blocks.partition_point(|&(o, _)| o < off);
        self.blocks.insert(i, (off, size));
        let end = |(o, s): (usize, usize)| o.saturating_add(s);
        if i + 1 < self.blocks.len() && end(self.blocks[i]) == self.blocks[i + 1].0 {
            self.blocks[i].1 = self.blocks[i].1.saturating_add(self.blocks[i + 1].1);
            self.blocks.remove(i + 1);
        }
        if i > 0 && end(self.blocks[i - 1]) == self.blocks[i].0 {
            self.blocks[i - 1].1 = self.blocks[i - 1].1.saturating_add(self.blocks[i].1);
            self.blocks.remove(i);
        }
    }
}

/// What the allocator knows of each tensor's lifetime, indexed by tensor.
struct Lifetimes {
    /// Position in the order of the last node that reads the tensor's memory (through any
    /// views of it).
    last_read: Vec<Option<usize>>,
    /// Whether the memory must live for the whole graph: inputs, outputs, weights and leaves,
    /// and the memory owner (the view root, through any chain of views) of every output that
    /// is a view, since the caller reads the output after the last node ran.
    keep: Vec<bool>,
    /// Whether some view points directly at the tensor.
    viewed: Vec<bool>,
}

impl Lifetimes {
    fn new(graph: &Graph, order: &[TensorId]) -> Lifetimes {
        let n = graph.len();
        let mut last_read = vec![None; n];
        for (pos, &id) in order.iter().enumerate() {
            for &s in &graph.tensor(id).src {
                last_read[graph.view_root(s).0.index()] = Some(pos);
            }
        }
        let mut keep: Vec<bool> = graph
            .ids()
            .map(|id| {
                let t = graph.tensor(id);
                t.flags.input || t.flags.output || t.flags.weight || t.is_leaf()
            })
            .collect();
        let mut viewed = vec![false; n];
        for id in graph.ids() {
            let t = graph.tensor(id);
            if t.flags.output {
                keep[graph.view_root(id).0.index()] = true;
            }
            if let Some(v) = t.view_src {
                viewed[v.index()] = true;
            }
        }
        Lifetimes { last_read, keep, viewed }
    }

    /// Whether the memory of `id` may be freed (or taken over) once the node at `pos` ran.
    fn dies_at(&self, id: TensorId, pos: usize) -> bool {
        self.last_read[id.index()] == Some(pos) && !self.keep[id.index()]
    }
}

/// Plans the placement of the tensors selected by `select` (non-view tensors without storage
/// are candidates), in the order of `order` (every tensor of the graph in forward order:
/// `graph.ids()` for a plain graph). `align` rounds every tensor's size up.
pub fn plan(
    graph: &Graph,
    order: &[TensorId],
    select: &dyn Fn(TensorId) -> bool,
    alloc_size: &dyn Fn(TensorId) -> usize,
    align: usize,
) -> AllocPlan {
    let n = graph.len();
    let round = |s: usize| s.max(1).div_ceil(align).saturating_mul(align);
    let placed = |id: TensorId| {
        let t = graph.tensor(id);
        t.view_src.is_none() && t.storage.is_none() && select(id)
    };
    let life = Lifetimes::new(graph, order);
    let mut plan = AllocPlan { offsets: vec![None; n], ..Default::default() };
    let mut sizes = vec![0usize; n];
    let mut free = FreeList::default();
    // Leaves first: they live for the whole graph.
    for &id in order {
        if placed(id) && graph.tensor(id).is_leaf() {
            sizes[id.index()] = round(alloc_size(id));
            plan.unshared_size = plan.unshared_size.saturating_add(sizes[id.index()]);
            plan.offsets[id.index()] = Some(free.alloc(sizes[id.index()]));
        }
    }
    for (pos, &id) in order.iter().enumerate() {
        let t = graph.tensor(id);
        if t.is_leaf() {
            continue;
        }
        if placed(id) {
            let size = round(alloc_size(id));
            sizes[id.index()] = size;
            plan.unshared_size = plan.unshared_size.saturating_add(size);
            let donor = in_place_donor(graph, id, pos, &life, &plan.offsets, &sizes, size);
            match donor {
                Some(d) => {
                    plan.offsets[id.index()] = plan.offsets[d.index()];
                    sizes[id.index()] = sizes[d.index()];
                    sizes[d.index()] = 0;
                    plan.in_place.push((id, d));
                }
                None => plan.offsets[id.index()] = Some(free.alloc(size)),
            }
        }
        // Free the owners whose last reader was this node.
        let mut roots: Vec<TensorId> = t.src.iter().map(|&s| graph.view_root(s).0).collect();
        roots.sort();
        roots.dedup();
        for root in roots {
            if life.dies_at(root, pos) && sizes[root.index()] > 0 {
                if let Some(off) = plan.offsets[root.index()] {
                    free.free(off, sizes[root.index()]);
                    sizes[root.index()] = 0;
                }
            }
        }
        // A node nobody reads (and that is not an output) is dead once computed.
        if placed(id) && life.last_read[id.index()].is_none() && !life.keep[id.index()] {
            if let Some(off) = plan.offsets[id.index()] {
                free.free(off, sizes[id.index()]);
                sizes[id.index()] = 0;
            }
        }
    }
    plan.size = free.top;
    plan
}

/// The operand whose memory node `id` (at `pos`) can take over, if any: an element-wise op
/// whose first operand is an unviewed temporary of the same size and layout, read for the last
/// time here and by no other operand of the node.
fn in_place_donor(
    graph: &Graph,
    id: TensorId,
    pos: usize,
    life: &Lifetimes,
    offsets: &[Option<usize>],
    sizes: &[usize],
    size: usize,
) -> Option<TensorId> {
    let t = graph.tensor(id);
    if !t.op.can_run_in_place() {
        return None;
    }
    let d = *t.src.first()?;
    let dt = graph.tensor(d);
    let ok = dt.view_src.is_none()
        && offsets[d.index()].is_some()
        && sizes[d.index()] >= size
        && life.dies_at(d, pos)
        && dt.layout == t.layout
        && dt.layout.is_contiguous()
        && t.src[1..].iter().all(|&s| graph.view_root(s).0 != d)
        && !life.viewed[d.index()];
    ok.then_some(d)
}

/// Allocates graphs in buffers of one buffer type, keeping (and growing) its buffer between
/// graphs like ggml's `ggml_gallocr`.
#[derive(Debug)]
pub struct GraphAllocator {
    buffer_type: Arc<dyn BufferType>,
    buffer: Option<Arc<dyn Buffer>>,
}

impl GraphAllocator {
    /// An allocator placing tensors in buffers of `buffer_type`.
    pub fn new(buffer_type: Arc<dyn BufferType>) -> GraphAllocator {
        GraphAllocator { buffer_type, buffer: None }
    }

    /// The plan for `graph` without allocating anything.
    pub fn plan(&self, graph: &Graph) -> AllocPlan {
        let order: Vec<TensorId> = graph.ids().collect();
        let bt = &self.buffer_type;
        plan(
            graph,
            &order,
            &|_| true,
            &|id| bt.alloc_size(&graph.tensor(id).layout),
            bt.alignment(),
        )
    }

    /// The peak number of bytes `graph` needs.
    pub fn measure(&self, graph: &Graph) -> usize {
        self.plan(graph).size
    }

    /// Places every tensor of `graph` that has no memory yet, reusing (or growing) this
    /// allocator's buffer; returns the plan.
    pub fn alloc_graph(&mut self, graph: &mut Graph) -> Result<AllocPlan> {
        graph.check_constant_writes()?;
        let plan = self.plan(graph);
        check_size(self.buffer_type.as_ref(), plan.size)?;
        let reuse = self.buffer.as_ref().is_some_and(|b| b.size() >= plan.size);
        if !reuse {
            let b = self.buffer_type.alloc(plan.size)?;
            b.set_usage(BufferUsage::Compute);
            self.buffer = Some(b);
        }
        let buffer = self
            .buffer
            .clone()
            .ok_or(Error::OutOfMemory { device: self.buffer_type.name(), size: plan.size })?;
        apply_plan(graph, &plan, &buffer)?;
        Ok(plan)
    }

    /// The current buffer, if any graph was allocated.
    pub fn buffer(&self) -> Option<&Arc<dyn Buffer>> {
        self.buffer.as_ref()
    }
}

/// Refuses a buffer of `size` bytes that `buffer_type` cannot hold: above its
/// [`BufferType::max_size`], or a saturated size (`usize::MAX`, a sum that overflowed).
pub fn check_size(buffer_type: &dyn BufferType, size: usize) -> Result<()> {
    if size == usize::MAX || size > buffer_type.max_size() {
        return Err(Error::OutOfMemory { device: buffer_type.name(), size });
    }
    Ok(())
}

/// Gives each of `ids` its own range of one new buffer of `buffer_type` (aligned, no reuse):
/// the simplest correct placement, for tests, tools and the scheduler's copy sets. Returns
/// `None` when `ids` is empty.
pub fn place_sequentially(
    graph: &mut Graph,
    ids: &[TensorId],
    buffer_type: &dyn BufferType,
) -> Result<Option<Arc<dyn Buffer>>> {
    if ids.is_empty() {
        return Ok(None);
    }
    let total = sequential_size(graph, ids, buffer_type);
    check_size(buffer_type, total)?;
    let buffer = buffer_type.alloc(total)?;
    let mut offset = 0usize;
    for &id in ids {
        graph.set_storage(id, Storage { buffer: buffer.clone(), offset })?;
        offset = offset.saturating_add(aligned_size(graph, id, buffer_type));
    }
    Ok(Some(buffer))
}

/// The size of `id` in a buffer of `buffer_type`, rounded up to its alignment (saturating).
fn aligned_size(graph: &Graph, id: TensorId, buffer_type: &dyn BufferType) -> usize {
    let align = buffer_type.alignment().max(1);
    buffer_type.alloc_size(&graph.tensor(id).layout).max(1).div_ceil(align).saturating_mul(align)
}

/// The bytes [`place_sequentially`] allocates for `ids` (saturating at `usize::MAX`, which no
/// buffer type can allocate).
pub fn sequential_size(graph: &Graph, ids: &[TensorId], buffer_type: &dyn BufferType) -> usize {
    ids.iter().fold(0usize, |acc, &id| acc.saturating_add(aligned_size(graph, id, buffer_type)))
}

/// The tensors of `graph` that hold data of their own (not views) and have no memory yet.
pub fn unplaced(graph: &Graph) -> Vec<TensorId> {
    graph
        .ids()
        .filter(|&id| {
            let t = graph.tensor(id);
            t.view_src.is_none() && t.storage.is_none()
        })
        .collect()
}

/// Gives every tensor placed by `plan` its storage in `buffer`.
pub fn apply_plan(graph: &mut Graph, plan: &AllocPlan, buffer: &Arc<dyn Buffer>) -> Result<()> {
    for (i, off) in plan.offsets.iter().enumerate() {
        if let Some(offset) = *off {
            graph.set_storage(TensorId(i), Storage { buffer: buffer.clone(), offset })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_reuses_and_merges() {
        let mut f = FreeList::default();
        let a = f.alloc(64);
        let b = f.alloc(64);
        let c = f.alloc(64);
        assert_eq!((a, b, c, f.top), (0, 64, 128, 192));
        f.free(a, 64);
        f.free(b, 64);
        assert_eq!(f.blocks, vec![(0, 128)]);
        assert_eq!(f.alloc(128), 0);
        f.free(c, 64);
        assert_eq!(f.alloc(128), 128);
        assert_eq!(f.top, 256);
    }
}
