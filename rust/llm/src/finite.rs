//! NaN and infinities in a model's results: every compute's logits or embeddings are scanned
//! ([`check_finite`]); when one is not finite, the batch is computed again node by node to name
//! the first node whose result held one, and the error is [`LlmError::NonFinite`] (the model's
//! weights are broken: not a request's mistake, not a value to pass on).

use crate::error::{LlmError, Result};
use std::sync::{Arc, Mutex};
use tessera_core::sched::Scheduler;
use tessera_core::tensor_data::get_tensor_dense;
use tessera_core::{DType, Op};

/// Checks `values` (rows of `width`, `output` is `"logits"` or `"embeddings"`), read from the
/// graph allocated on `scheduler` whose inputs are still set: [`LlmError::NonFinite`] naming the
/// first value that is not finite and the node where it first appeared.
pub(crate) fn check_finite(
    scheduler: &mut Scheduler,
    values: &[f32],
    width: usize,
    output: &'static str,
) -> Result<()> {
    let Some(i) = values.iter().position(|v| !v.is_finite()) else { return Ok(()) };
    let width = width.max(1);
    let origin = match locate_non_finite(scheduler) {
        Some(node) => format!("it first appears at {node}"),
        None => "the node where it first appears could not be found".into(),
    };
    Err(LlmError::NonFinite {
        output,
        value: format!("{}", values[i]),
        row: i / width,
        column: i % width,
        origin,
    })
}

/// Computes the graph allocated on `scheduler` (its inputs set) again, node by node, and
/// describes the first node whose F32 result holds a value that is not finite (views, copies
/// into the KV cache and masks, which hold `-inf` by design, are skipped); `None` when no node
/// does. The scheduler's own eval callback is put back afterwards.
fn locate_non_finite(scheduler: &mut Scheduler) -> Option<String> {
    let previous = scheduler.take_eval_callback();
    let found: Arc<Mutex<Option<String>>> = Arc::default();
    let sink = found.clone();
    let mut last_named = String::new();
    scheduler.set_eval_callback(Some(Box::new(move |g, id| {
        let t = g.tensor(id);
        let skipped = t.op.is_view()
            || matches!(t.op, Op::Cpy | Op::SetRows | Op::DiagMaskInf { .. })
            || t.dtype() != DType::F32;
        let bad = !skipped
            && get_tensor_dense(g, id).is_ok_and(|bytes| {
                bytes
                    .chunks_exact(4)
                    .any(|b| !f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
            });
        if bad {
            *sink.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(describe_node(&t.name, t.op.name(), &last_named));
            return false;
        }
        if !t.name.is_empty() {
            last_named.clone_from(&t.name);
        }
        true
    })));
    // The node is found by the callback; the compute's result (aborted at that node) is not
    // needed.
    let _ = scheduler.compute();
    scheduler.set_eval_callback(previous);
    let node = found.lock().unwrap_or_else(|p| p.into_inner()).take();
    node
}

/// `node "attn_norm-0" (MUL) of layer 0`, `node "embd" (GET_ROWS): the token embeddings`, or
/// for an unnamed node `a MUL_MAT node after "Qcur-1" (layer 1)`.
fn describe_node(name: &str, op: &str, last_named: &str) -> String {
    let layer = |n: &str| {
        n.rsplit_once('-')
            .and_then(|(_, il)| il.parse::<usize>().ok())
            .map(|il| format!(" of layer {il}"))
            .unwrap_or_default()
    };
    if name == "embd" {
        format!("node \"embd\" ({op}): the token embeddings")
    } else if !name.is_empty() {
        format!("node {name:?} ({op}){}", layer(name))
    } else if !last_named.is_empty() {
        format!("a {op} node after {last_named:?}{}", layer(last_named))
    } else {
        format!("a {op} node before any named one")
    }
}
