//! `tessera bench model --profile`: where a decode's time goes, op by op.
//!
//! An eval callback on the context ([`tessera_llm::Context::set_eval_callback`]) runs after each
//! node; the time from one callback to the next is the node's (the first node of a decode also
//! carries the graph's set-up). Nodes are grouped by op, and matrix products and row lookups
//! also by weight type and shape, so that `MUL_MAT Q8_0 640x262144` (an output layer) stands
//! apart from the layers' products. Each node runs on its own here (synchronized after it), so
//! the sum is somewhat above an unprofiled decode.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_core::graph::Graph;
use tessera_core::sched::EvalCallback;
use tessera_core::{Op, TensorId};

/// Time and count per group of nodes, and the clock of the last callback.
#[derive(Default)]
struct Times {
    groups: HashMap<String, (usize, Duration)>,
    last: Option<Instant>,
}

/// The per-op timers of a profiled run: [`OpTimes::callback`] goes on the context,
/// [`OpTimes::start`] before each decode, [`OpTimes::table`] prints what was gathered.
#[derive(Clone, Default)]
pub struct OpTimes(Arc<Mutex<Times>>);

/// The group of node `id`: the op's name, with the weight type and shape for MUL_MAT and
/// GET_ROWS.
pub fn group_of(graph: &Graph, id: TensorId) -> String {
    let t = graph.tensor(id);
    let name = t.op.name();
    match (&t.op, t.src.first()) {
        (Op::MulMat | Op::GetRows, Some(&w)) => {
            let w = graph.tensor(w);
            format!("{name} {} {}x{}", w.dtype().name(), w.ne()[0], w.ne()[1])
        }
        _ => name.to_string(),
    }
}

impl OpTimes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Times> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the clock of a decode (the time until its first node's callback is that node's).
    pub fn start(&self) {
        self.lock().last = Some(Instant::now());
    }

    /// Forgets what was gathered.
    pub fn reset(&self) {
        let mut t = self.lock();
        t.groups.clear();
        t.last = None;
    }

    /// The callback that adds each node's time to its group.
    pub fn callback(&self) -> EvalCallback {
        let me = self.clone();
        Box::new(move |graph: &Graph, id: TensorId| {
            let now = Instant::now();
            let key = group_of(graph, id);
            let mut t = me.lock();
            let spent = t.last.map_or(Duration::ZERO, |l| now - l);
            let e = t.groups.entry(key).or_default();
            e.0 += 1;
            e.1 += spent;
            t.last = Some(Instant::now());
            true
        })
    }

    /// A markdown table of the groups, slowest first: nodes and time per decode (`decodes` of
    /// them were profiled), share of the total; `unit` names a decode ("token", "prompt").
    pub fn table(&self, decodes: usize, unit: &str) -> String {
        let t = self.lock();
        let mut rows: Vec<(&String, &(usize, Duration))> = t.groups.iter().collect();
        rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        let total: Duration = rows.iter().map(|r| r.1 .1).sum();
        let per = decodes.max(1) as f64;
        let mut s =
            format!("| op | nodes per {unit} | us per {unit} | share |\n|---|---|---|---|\n");
        for (key, (n, d)) in rows {
            let us = d.as_secs_f64() * 1e6 / per;
            let share = 100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-12);
            s += &format!("| {key} | {} | {us:.1} | {share:.1} % |\n", *n as f64 / per);
        }
        s += &format!("| all | | {:.1} | 100 % |\n", total.as_secs_f64() * 1e6 / per);
        s
    }
}

/// The reference fallbacks of a graph's plans as a markdown table: op, reason and how many nodes
/// (grouped), or a line saying there are none.
pub fn fallback_table(fallbacks: &[tessera_core::backend::PlanFallback]) -> String {
    if fallbacks.is_empty() {
        return "reference fallbacks: none (every node has a fast kernel)\n".to_string();
    }
    let mut groups: Vec<((&str, &str), usize)> = Vec::new();
    for f in fallbacks {
        let key = (f.op.as_str(), f.reason.as_str());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => groups.push((key, 1)),
        }
    }
    let mut s = format!(
        "reference fallbacks ({} nodes):\n| op | nodes | why |\n|---|---|---|\n",
        fallbacks.len()
    );
    for ((op, why), n) in groups {
        s += &format!("| {op} | {n} | {why} |\n");
    }
    s
}
