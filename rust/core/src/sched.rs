//! The scheduler (ggml's `ggml_backend_sched`): runs one graph over several backends.
//!
//! Backends are given in priority order, the CPU last. Each node goes to the backend that holds
//! its weights, then assignments spread to neighbouring nodes, and a node whose op a device does
//! not support falls back to the next backend that does. The graph is cut into splits of
//! consecutive nodes on one backend; operands that live where a split's device cannot read them
//! are copied in before the split runs.
//!
//! Weights without memory whose only readers are MUL_MAT nodes (as their first operand) on one
//! backend go to an extra buffer type of that backend's device when one accepts them
//! ([`BufferType::accepts_weight`], e.g. "CPU_REPACK"); see
//! [`Scheduler::set_extra_buffer_types`] and [`Scheduler::use_registry_extra_buffer_types`].

use crate::alloc;
use crate::backend::{
    copy_between, weight_buffer_type, Backend, Buffer, BufferType, BufferUsage, Device, Event,
    GraphPlan, PlanFallback,
};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
use crate::registry::Registry;
use crate::storage::Storage;
use crate::tensor::{Tensor, TensorFlags, TensorId};
use std::collections::HashMap;
use std::sync::Arc;

/// Called after each node is computed with the scheduler's graph and the node; returning
/// `false` stops the computation with [`Error::Aborted`].
pub type EvalCallback = Box<dyn FnMut(&Graph, TensorId) -> bool + Send>;

/// A run of consecutive nodes on one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Index of the backend.
    pub backend: usize,
    /// The nodes, in order (ids of the original graph).
    pub nodes: Vec<TensorId>,
    /// Tensors of the original graph copied to this backend before the split runs.
    pub inputs: Vec<TensorId>,
}

struct Copy {
    from: TensorId,
    to: TensorId,
}

struct Prepared {
    /// One graph per copy set: the same tensors, with the split inputs' copies placed in
    /// memory of their own for each set.
    graphs: Vec<Graph>,
    splits: Vec<Split>,
    copies: Vec<Vec<Copy>>,
    /// The backend each tensor of the scheduler's graph runs on (original ids first).
    assignment: Vec<Option<usize>>,
    /// Per copy set and split, the event recorded when the split last finished with the set.
    done: Vec<Vec<Option<Arc<dyn Event>>>>,
    /// Per copy set and split, the backend's plan of the split on the set's graph
    /// ([`Backend::graph_plan_prepare`]), made once here and computed at every compute; the
    /// set's graph, whose memory the plan may have resolved, lives as long as it in this
    /// struct and does not change.
    plans: Vec<Vec<Option<Box<dyn GraphPlan>>>>,
    /// Dedicated buffers of the copy sets (kept alive here).
    _copy_buffers: Vec<Arc<dyn Buffer>>,
    /// Buffers of extra buffer types holding weights (kept alive here).
    _weight_buffers: Vec<Arc<dyn Buffer>>,
}

/// Runs graphs over several backends.
pub struct Scheduler {
    backends: Vec<Box<dyn Backend>>,
    devices: Vec<Arc<dyn Device>>,
    buffers: Vec<Option<Arc<dyn Buffer>>>,
    /// Per backend, the extra buffer types offered for weights.
    extra: Vec<Vec<Arc<dyn BufferType>>>,
    pins: HashMap<TensorId, usize>,
    eval: Option<EvalCallback>,
    prepared: Option<Prepared>,
    n_copies: usize,
    cur_copy: usize,
    budget: Option<usize>,
}

/// The largest number of copy sets for pipelining.
pub const MAX_COPIES: usize = 4;

impl Scheduler {
    /// A scheduler over `backends` in priority order (put the CPU last, as the fallback).
    pub fn new(backends: Vec<Box<dyn Backend>>) -> Result<Scheduler> {
        if backends.is_empty() {
            return Err(Error::InvalidArgument("the scheduler needs at least one backend".into()));
        }
        let devices: Vec<_> = backends.iter().map(|b| b.device()).collect();
        Ok(Scheduler {
            buffers: vec![None; backends.len()],
            extra: vec![Vec::new(); backends.len()],
            devices,
            backends,
            pins: HashMap::new(),
            eval: None,
            prepared: None,
            n_copies: 1,
            cur_copy: 0,
            budget: None,
        })
    }

    /// Sets the number of copy sets of the split inputs (ggml's `n_copies`, 1 to
    /// [`MAX_COPIES`]). With more than one, successive computes rotate through the sets, each
    /// in memory of its own, so that a device can still be reading the inputs of one compute
    /// while those of the next are copied; where devices support events, a set is reused only
    /// after the event recorded when its split finished. Takes effect at the next
    /// [`Scheduler::alloc_graph`].
    pub fn set_n_copies(&mut self, n: usize) -> Result<()> {
        if n == 0 || n > MAX_COPIES {
            return Err(Error::InvalidArgument(format!(
                "copy sets {n} must be between 1 and {MAX_COPIES}"
            )));
        }
        self.n_copies = n;
        self.prepared = None;
        Ok(())
    }

    /// Sets the memory budget: the most bytes one [`Scheduler::alloc_graph`] may plan over all
    /// backends (compute buffers, weights placed in extra buffer types, copy sets). A graph
    /// whose plan needs more is refused with [`Error::OverBudget`] before anything is
    /// allocated. `None` (the default): no budget beyond what the buffer types can allocate.
    pub fn set_memory_budget(&mut self, budget: Option<usize>) {
        self.budget = budget;
    }

    /// The memory budget (see [`Scheduler::set_memory_budget`]).
    pub fn memory_budget(&self) -> Option<usize> {
        self.budget
    }

    /// Sets the extra buffer types of backend `backend` (ggml's extra buffer types of its
    /// device, e.g. "CPU_REPACK"): at each [`Scheduler::alloc_graph`], a weight without memory
    /// whose only readers are MUL_MAT nodes on that backend, taking it as their first operand,
    /// is placed in a buffer of the first of these types that
    /// [accepts it](BufferType::accepts_weight) and that the device can read; other tensors are
    /// placed as usual.
    pub fn set_extra_buffer_types(
        &mut self,
        backend: usize,
        types: Vec<Arc<dyn BufferType>>,
    ) -> Result<()> {
        let slot = self
            .extra
            .get_mut(backend)
            .ok_or_else(|| Error::InvalidArgument(format!("no backend {backend}")))?;
        *slot = types;
        self.prepared = None;
        Ok(())
    }

    /// Sets the extra buffer types of every backend to those its device's registration in
    /// `registry` offers ([`crate::backend::BackendReg::extra_buffer_types`]).
    pub fn use_registry_extra_buffer_types(&mut self, registry: &Registry) {
        for (b, device) in self.devices.iter().enumerate() {
            self.extra[b] = registry.extra_buffer_types(device.as_ref());
        }
        self.prepared = None;
    }

    /// The weights of `graph` to place in extra buffer types, grouped by type.
    fn extra_placements(
        &self,
        graph: &Graph,
        backend_of: &[Option<usize>],
    ) -> Vec<(Arc<dyn BufferType>, Vec<TensorId>)> {
        if self.extra.iter().all(|e| e.is_empty()) {
            return Vec::new();
        }
        let readers = graph.matmul_weight_readers();
        let mut out: Vec<(Arc<dyn BufferType>, Vec<TensorId>)> = Vec::new();
        for id in graph.ids() {
            let t = graph.tensor(id);
            let i = id.index();
            let eligible = t.flags.weight
                && !t.flags.output
                && !t.flags.input
                && t.is_leaf()
                && t.view_src.is_none()
                && t.storage.is_none();
            let (Some(b), Some(readers)) = (backend_of[i].filter(|_| eligible), &readers[i]) else {
                continue;
            };
            if readers.iter().any(|r| backend_of[r.index()] != Some(b)) {
                continue;
            }
            let Some(bt) = weight_buffer_type(&self.extra[b], self.devices[b].as_ref(), &t.layout)
            else {
                continue;
            };
            match out.iter_mut().find(|(o, _)| Arc::ptr_eq(o, bt)) {
                Some((_, ids)) => ids.push(id),
                None => out.push((bt.clone(), vec![id])),
            }
        }
        out
    }

    /// Where copy set `set` of the last allocated graph keeps its split inputs.
    pub fn copy_storages(&self, set: usize) -> Vec<Storage> {
        let Some(p) = &self.prepared else { return Vec::new() };
        let Some(g) = p.graphs.get(set) else { return Vec::new() };
        p.copies.iter().flatten().filter_map(|c| g.storage_of(c.to)).collect()
    }

    /// The copy set the next compute uses.
    pub fn current_copy(&self) -> usize {
        self.cur_copy
    }

    /// The backends, in priority order.
    pub fn backends(&self) -> &[Box<dyn Backend>] {
        &self.backends
    }

    /// Mutable access to backend `i` (to set threads or an abort callback).
    pub fn backend_mut(&mut self, i: usize) -> Option<&mut Box<dyn Backend>> {
        self.backends.get_mut(i)
    }

    /// Pins node `id` to backend `backend` for the next graphs (until [`Scheduler::reset`]).
    pub fn pin(&mut self, id: TensorId, backend: usize) -> Result<()> {
        if backend >= self.backends.len() {
            return Err(Error::InvalidArgument(format!("no backend {backend}")));
        }
        self.pins.insert(id, backend);
        Ok(())
    }

    /// Sets or clears the callback run after each node.
    pub fn set_eval_callback(&mut self, callback: Option<EvalCallback>) {
        self.eval = callback;
    }

    /// Removes the callback run after each node and returns it (to put it back after a compute
    /// with another one).
    pub fn take_eval_callback(&mut self) -> Option<EvalCallback> {
        self.eval.take()
    }

    /// Forgets pins and the prepared graph.
    pub fn reset(&mut self) {
        self.pins.clear();
        self.prepared = None;
    }

    /// The splits of the last allocated graph.
    pub fn splits(&self) -> &[Split] {
        self.prepared.as_ref().map(|p| p.splits.as_slice()).unwrap_or(&[])
    }

    /// The nodes of the last allocated graph that its backends' plans compute with reference
    /// code rather than a fast kernel, and why (each node once; see [`PlanFallback`]).
    pub fn reference_fallbacks(&self) -> Vec<PlanFallback> {
        let Some(p) = &self.prepared else { return Vec::new() };
        let Some(plans) = p.plans.first() else { return Vec::new() };
        plans.iter().flatten().flat_map(|plan| plan.fallbacks().iter().cloned()).collect()
    }

    /// The backend each tensor of the last allocated graph was assigned to.
    pub fn assignment(&self, id: TensorId) -> Option<usize> {
        self.prepared.as_ref().and_then(|p| p.assignment.get(id.index()).copied().flatten())
    }

    fn backend_of_buffer(&self, buffer: &dyn Buffer) -> Option<usize> {
        let bt = buffer.buffer_type();
        let owner = self.devices.iter().position(|d| d.name() == bt.device_name());
        owner.or_else(|| self.devices.iter().position(|d| d.supports_buffer_type(bt.as_ref())))
    }

    fn supports(&self, b: usize, graph: &Graph, id: TensorId) -> bool {
        self.devices[b].supports_op(graph, id)
    }

    /// Chooses a backend for every tensor.
    fn assign(&self, graph: &Graph) -> Result<Vec<Option<usize>>> {
        let n = graph.len();
        let mut backend_of: Vec<Option<usize>> = vec![None; n];
        // Tensors that already have memory belong to the backend of their buffer.
        for id in graph.ids() {
            let t = graph.tensor(id);
            if t.view_src.is_none() {
                if let Some(s) = &t.storage {
                    backend_of[id.index()] = self.backend_of_buffer(s.buffer.as_ref());
                }
            }
        }
        let nodes = graph.nodes();
        let root_backend = |backend_of: &Vec<Option<usize>>, id: TensorId| {
            backend_of[graph.view_root(id).0.index()]
        };
        // 1. Pins, then nodes that read weights go where the weights are.
        for &id in &nodes {
            if let Some(&b) = self.pins.get(&id) {
                backend_of[id.index()] = Some(b);
                continue;
            }
            let t = graph.tensor(id);
            if t.op.destination_operand().is_some() {
                continue;
            }
            let weight_home = t.src.iter().find_map(|&s| {
                let root = graph.tensor(graph.view_root(s).0);
                if root.flags.weight && root.storage.is_some() {
                    root_backend(&backend_of, s)
                } else {
                    None
                }
            });
            if let Some(b) = weight_home.filter(|&b| self.supports(b, graph, id)) {
                // A device ahead of the weights' home may still want the op (large batches).
                let offload = (0..b).find(|&o| {
                    self.devices[o].offload_op(graph, id) && self.supports(o, graph, id)
                });
                backend_of[id.index()] = Some(offload.unwrap_or(b));
            }
        }
        // 2. Spread forward from operands assigned to a backend ahead of the last one (the
        //    CPU, which takes what is left over anyway), preferring the highest priority.
        let last = self.backends.len() - 1;
        for &id in &nodes {
            if backend_of[id.index()].is_some()
                || graph.tensor(id).op.destination_operand().is_some()
            {
                continue;
            }
            let best = graph
                .tensor(id)
                .src
                .iter()
                .filter_map(|&s| {
                    let r = graph.view_root(s).0;
                    if graph.tensor(r).is_leaf() {
                        None
                    } else {
                        backend_of[r.index()]
                    }
                })
                .filter(|&b| b < last && self.supports(b, graph, id))
                .min();
            backend_of[id.index()] = best;
        }
        // 3. The rest: the first backend that supports the op; copies (CPY, SET_ROWS) go where
        //    their destination lives; a pinned or inherited backend that cannot run it falls
        //    back.
        for &id in &nodes {
            let t = graph.tensor(id);
            if let Some(d) = t.op.destination_operand() {
                let dst = graph.view_root(t.src[d]).0;
                let home = backend_of[dst.index()]
                    .or_else(|| (0..self.backends.len()).find(|&b| self.supports(b, graph, id)));
                backend_of[id.index()] = home;
                if backend_of[dst.index()].is_none() {
                    backend_of[dst.index()] = home;
                }
            }
            let ok = backend_of[id.index()].is_some_and(|b| self.supports(b, graph, id));
            if !ok {
                let fallback = (0..self.backends.len()).find(|&b| self.supports(b, graph, id));
                backend_of[id.index()] = Some(fallback.ok_or_else(|| Error::UnsupportedOp {
                    device: "any backend".into(),
                    op: format!("{} ({})", t.op.name(), t.label(id)),
                })?);
            }
        }
        // Inputs without memory go to their first reader's backend (a node reading them
        // directly or through views); views follow their root.
        let mut first_reader: Vec<Option<TensorId>> = vec![None; n];
        for &node in &nodes {
            for &s in &graph.tensor(node).src {
                first_reader[graph.view_root(s).0.index()].get_or_insert(node);
            }
        }
        for id in graph.ids() {
            let t = graph.tensor(id);
            if t.is_leaf() && backend_of[id.index()].is_none() {
                let reader = first_reader[id.index()];
                backend_of[id.index()] = Some(
                    reader.and_then(|r| backend_of[r.index()]).unwrap_or(self.backends.len() - 1),
                );
            }
        }
        for id in graph.ids() {
            if graph.tensor(id).view_src.is_some() && !graph.tensor(id).op.computes() {
                backend_of[id.index()] = root_backend(&backend_of, id);
            }
        }
        Ok(backend_of)
    }

    /// Whether backend `b` can read tensor `id` (through its root) where it lives.
    fn readable(
        &self,
        graph: &Graph,
        backend_of: &[Option<usize>],
        b: usize,
        id: TensorId,
    ) -> bool {
        let root = graph.view_root(id).0;
        match &graph.tensor(root).storage {
            Some(s) => self.devices[b].supports_buffer_type(s.buffer.buffer_type().as_ref()),
            None => match backend_of[root.index()] {
                Some(home) if home == b => true,
                Some(home) => {
                    let bt = self.backends[home].buffer_type();
                    self.devices[b].supports_buffer_type(bt.as_ref())
                }
                None => false,
            },
        }
    }

    /// Assigns, splits and allocates `graph`; afterwards the caller sets its inputs and calls
    /// [`Scheduler::compute`]. Every tensor of `graph` gets its storage.
    ///
    /// Everything is planned before anything is allocated: a graph that writes into a weight
    /// ([`Graph::check_constant_writes`]), whose plan a buffer type cannot hold, or that needs
    /// more than the [memory budget](Scheduler::set_memory_budget) fails without allocating.
    pub fn alloc_graph(&mut self, graph: &mut Graph) -> Result<()> {
        graph.check_constant_writes()?;
        let backend_of = self.assign(graph)?;
        let mut g = graph.clone();
        // Weights read only by MUL_MAT go to an extra buffer type that accepts them (placed
        // once the whole plan is known to fit).
        let extra = self.extra_placements(graph, &backend_of);
        let mut in_extra = vec![false; graph.len()];
        for id in extra.iter().flat_map(|(_, ids)| ids) {
            in_extra[id.index()] = true;
        }
        let mut splits: Vec<Split> = Vec::new();
        let mut copies: Vec<Vec<Copy>> = Vec::new();
        let mut order: Vec<TensorId> =
            graph.ids().filter(|&id| graph.tensor(id).is_leaf()).collect();
        let mut assignment = backend_of.clone();
        let mut copy_of: HashMap<(TensorId, usize), TensorId> = HashMap::new();
        // The entries of the current split after its copies: every copy of a split is made
        // before its first node runs, so its memory must be live from the split's start, not
        // from its first reader. `order` gets a split's copies, then these, when it ends.
        let mut body: Vec<TensorId> = Vec::new();
        let flush = |order: &mut Vec<TensorId>, copies: &[Vec<Copy>], body: &mut Vec<TensorId>| {
            if let Some(last) = copies.last() {
                order.extend(last.iter().map(|c| c.to));
            }
            order.append(body);
        };
        for id in graph.ids() {
            let t = graph.tensor(id);
            if t.is_leaf() {
                continue;
            }
            if !t.op.computes() {
                body.push(id);
                continue;
            }
            let b = backend_of[id.index()].unwrap_or(self.backends.len() - 1);
            if splits.last().is_none_or(|s| s.backend != b) {
                flush(&mut order, &copies, &mut body);
                splits.push(Split { backend: b, nodes: Vec::new(), inputs: Vec::new() });
                copies.push(Vec::new());
            }
            let si = splits.len() - 1;
            for (i, &s) in t.src.iter().enumerate() {
                let is_destination = t.op.destination_operand() == Some(i);
                if is_destination || self.readable(graph, &backend_of, b, s) {
                    continue;
                }
                let (root, offs) = graph.view_root(s);
                let key = (root, b);
                let root_copy = match copy_of.get(&key) {
                    Some(&c) => c,
                    None => {
                        let rt = graph.tensor(root);
                        let c = g.push_raw(copy_tensor(rt, root, Op::Dup, None, 0));
                        assignment.push(Some(b));
                        copy_of.insert(key, c);
                        copies[si].push(Copy { from: root, to: c });
                        splits[si].inputs.push(root);
                        c
                    }
                };
                let replacement = if s == root {
                    root_copy
                } else {
                    let st = graph.tensor(s);
                    let v = g.push_raw(copy_tensor(st, root_copy, Op::View, Some(root_copy), offs));
                    assignment.push(Some(b));
                    body.push(v);
                    v
                };
                g.replace_src(id, i, replacement);
            }
            splits[si].nodes.push(id);
            body.push(id);
        }
        flush(&mut order, &copies, &mut body);
        // Plan each backend's share in its own buffer (with several copy sets, the copies are
        // placed separately below).
        let copy_ids: Vec<TensorId> = copies.iter().flatten().map(|c| c.to).collect();
        let pipelined = self.n_copies > 1;
        let mut is_copy = vec![false; g.len()];
        for c in &copy_ids {
            is_copy[c.index()] = true;
        }
        let mut plans = Vec::with_capacity(self.backends.len());
        for b in 0..self.backends.len() {
            let bt = self.backends[b].buffer_type();
            let plan = alloc::plan(
                &g,
                &order,
                &|id| {
                    assignment.get(id.index()).copied().flatten() == Some(b)
                        && !in_extra.get(id.index()).copied().unwrap_or(false)
                        && !(pipelined && is_copy[id.index()])
                },
                &|id| bt.alloc_size(&g.tensor(id).layout),
                bt.alignment(),
            );
            plans.push((!plan.offsets.iter().all(|o| o.is_none())).then_some(plan));
        }
        let copy_sets: Vec<Vec<TensorId>> = (0..self.backends.len())
            .map(|b| {
                let mine = copy_ids.iter().copied().filter(|&c| assignment[c.index()] == Some(b));
                if pipelined {
                    mine.collect()
                } else {
                    Vec::new()
                }
            })
            .collect();
        self.check_budget(&g, &extra, &plans, &copy_sets)?;
        let mut weight_buffers = Vec::new();
        for (bt, ids) in &extra {
            if let Some(buf) = alloc::place_sequentially(&mut g, ids, bt.as_ref())? {
                buf.set_usage(BufferUsage::Weights);
                weight_buffers.push(buf);
            }
        }
        for (b, plan) in plans.iter().enumerate() {
            let Some(plan) = plan else { continue };
            let bt = self.backends[b].buffer_type();
            let reuse = self.buffers[b].as_ref().is_some_and(|buf| buf.size() >= plan.size);
            if !reuse {
                let buf = bt.alloc(plan.size)?;
                buf.set_usage(BufferUsage::Compute);
                self.buffers[b] = Some(buf);
            }
            let buf = self.buffers[b]
                .clone()
                .ok_or(Error::OutOfMemory { device: bt.name(), size: plan.size })?;
            alloc::apply_plan(&mut g, plan, &buf)?;
        }
        let mut graphs = Vec::with_capacity(self.n_copies);
        let mut copy_buffers = Vec::new();
        for _ in 0..self.n_copies {
            let mut gc = g.clone();
            if pipelined {
                for (b, mine) in copy_sets.iter().enumerate() {
                    let bt = self.backends[b].buffer_type();
                    if let Some(buf) = alloc::place_sequentially(&mut gc, mine, bt.as_ref())? {
                        buf.set_usage(BufferUsage::Compute);
                        copy_buffers.push(buf);
                    }
                }
            }
            graphs.push(gc);
        }
        let g = &graphs[0];
        // The caller's graph sees the same memory.
        let ids: Vec<TensorId> = graph.ids().collect();
        for id in ids {
            let t = g.tensor(id);
            if t.view_src.is_none() && graph.tensor(id).storage.is_none() {
                if let Some(s) = &t.storage {
                    graph
                        .set_storage(id, Storage { buffer: s.buffer.clone(), offset: s.offset })?;
                }
            }
        }
        let done = (0..self.n_copies)
            .map(|_| {
                splits
                    .iter()
                    .map(|sp| {
                        let d = &self.devices[sp.backend];
                        let ev = if d.caps().events { d.new_event() } else { None };
                        // Nothing has used the set yet.
                        ev.inspect(|e| e.signal())
                    })
                    .collect()
            })
            .collect();
        // The backends' plans of each split, once per allocated graph (per copy set: the
        // copies' memory differs).
        let mut plans = Vec::with_capacity(graphs.len());
        for gc in &graphs {
            let mut per_split = Vec::with_capacity(splits.len());
            for sp in &splits {
                per_split.push(self.backends[sp.backend].graph_plan_prepare(gc, &sp.nodes)?);
            }
            plans.push(per_split);
        }
        self.cur_copy = 0;
        self.prepared = Some(Prepared {
            plans,
            graphs,
            splits,
            copies,
            assignment,
            done,
            _copy_buffers: copy_buffers,
            _weight_buffers: weight_buffers,
        });
        Ok(())
    }

    /// Checks a planned graph before anything is allocated: the total within the memory
    /// budget, each buffer within what its type can hold.
    fn check_budget(
        &self,
        g: &Graph,
        extra: &[(Arc<dyn BufferType>, Vec<TensorId>)],
        plans: &[Option<alloc::AllocPlan>],
        copy_sets: &[Vec<TensorId>],
    ) -> Result<()> {
        // (what, buffer type, bytes of one buffer, buffers)
        let mut parts: Vec<(String, Arc<dyn BufferType>, usize, usize)> = Vec::new();
        for (bt, ids) in extra {
            let size = alloc::sequential_size(g, ids, bt.as_ref());
            parts.push((format!("{} weights", bt.name()), bt.clone(), size, 1));
        }
        for (b, plan) in plans.iter().enumerate() {
            let bt = self.backends[b].buffer_type();
            if let Some(plan) = plan {
                parts.push((format!("{} compute", bt.name()), bt.clone(), plan.size, 1));
            }
            if !copy_sets[b].is_empty() {
                let size = alloc::sequential_size(g, &copy_sets[b], bt.as_ref());
                parts.push((format!("{} copies", bt.name()), bt.clone(), size, self.n_copies));
            }
        }
        let needed =
            parts.iter().fold(0usize, |acc, (_, _, s, n)| acc.saturating_add(s.saturating_mul(*n)));
        if let Some(budget) = self.budget.filter(|&b| needed > b) {
            let detail = parts
                .iter()
                .map(|(what, _, s, n)| match n {
                    1 => format!("{what} {s}"),
                    n => format!("{what} {n} x {s}"),
                })
                .collect::<Vec<_>>();
            return Err(Error::OverBudget { needed, budget, detail: detail.join(", ") });
        }
        for (_, bt, size, _) in &parts {
            alloc::check_size(bt.as_ref(), *size)?;
        }
        Ok(())
    }

    /// Computes the graph last given to [`Scheduler::alloc_graph`]: for each split, copies its
    /// inputs in and runs its nodes.
    pub fn compute(&mut self) -> Result<()> {
        let prepared = self
            .prepared
            .take()
            .ok_or_else(|| Error::InvalidArgument("compute called before alloc_graph".into()))?;
        let set = self.cur_copy % prepared.graphs.len();
        let result = self.run(&prepared, set);
        self.cur_copy = (set + 1) % prepared.graphs.len();
        self.prepared = Some(prepared);
        result
    }

    /// Allocates and computes `graph` in one call (inputs must be set beforehand by the
    /// caller through memory it placed itself, or be constants).
    pub fn graph_compute(&mut self, graph: &mut Graph) -> Result<()> {
        self.alloc_graph(graph)?;
        self.compute()
    }

    fn run(&mut self, p: &Prepared, set: usize) -> Result<()> {
        let graph = &p.graphs[set];
        let mut last_backend: Option<usize> = None;
        for (si, (split, copies)) in p.splits.iter().zip(&p.copies).enumerate() {
            // The set's inputs of this split may be overwritten once the split's last run
            // on this set has finished.
            if let Some(ev) = &p.done[set][si] {
                self.backends[split.backend].event_wait(ev.as_ref())?;
            }
            // The previous split's results must be complete before they are copied here.
            if let Some(prev) = last_backend {
                match &p.done[set][si - 1] {
                    Some(ev) => ev.synchronize()?,
                    None => self.backends[prev].synchronize()?,
                }
            }
            for c in copies {
                let from = graph
                    .storage_of(c.from)
                    .ok_or_else(|| Error::NotAllocated(graph.tensor(c.from).label(c.from)))?;
                let to = graph
                    .storage_of(c.to)
                    .ok_or_else(|| Error::NotAllocated(graph.tensor(c.to).label(c.to)))?;
                let len = graph.tensor(c.from).nbytes();
                copy_between(
                    from.buffer.as_ref(),
                    from.offset,
                    to.buffer.as_ref(),
                    to.offset,
                    len,
                )?;
            }
            let backend = &mut self.backends[split.backend];
            let plan = p.plans[set][si].as_deref();
            match (self.eval.as_mut(), plan) {
                (None, Some(plan)) => backend.graph_plan_compute(graph, plan)?,
                (None, None) => backend.compute_nodes(graph, &split.nodes)?,
                (Some(eval), Some(plan)) => {
                    for (i, &n) in plan.nodes().iter().enumerate() {
                        backend.graph_plan_compute_range(graph, plan, i..i + 1)?;
                        backend.synchronize()?;
                        if !eval(graph, n) {
                            return Err(Error::Aborted);
                        }
                    }
                }
                (Some(eval), None) => {
                    for &n in &split.nodes {
                        backend.compute_nodes(graph, &[n])?;
                        backend.synchronize()?;
                        if !eval(graph, n) {
                            return Err(Error::Aborted);
                        }
                    }
                }
            }
            if let Some(ev) = &p.done[set][si] {
                ev.reset();
                backend.event_record(ev.as_ref())?;
            }
            last_backend = Some(split.backend);
        }
        if let Some(b) = last_backend {
            self.backends[b].synchronize()?;
        }
        Ok(())
    }
}

/// The scheduler's copy of `from` (a root copied to another backend, `op` DUP reading the
/// original so that its lifetime covers the transfer) or a view of such a copy.
fn copy_tensor(
    from: &Tensor,
    src: TensorId,
    op: Op,
    view_src: Option<TensorId>,
    view_offs: usize,
) -> Tensor {
    Tensor {
        layout: from.layout,
        name: format!("{}#copy", from.name),
        flags: TensorFlags::default(),
        op,
        src: vec![src],
        view_src,
        view_offs,
        storage: None,
    }
}
