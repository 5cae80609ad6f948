//! SET_ROWS (`shaders/set_rows.wgsl`), the KV-cache write: F32 rows into rows of an F32, F16,
//! Q8_0 or Q4_0 destination (quantized as ggml's reference quantizers) picked by I32 indices;
//! an index out of range is reported into the status buffer (see [`index_error`]).

use super::{grid, operand, Checks, Dispatch, Kernel, Params};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Error, Graph, Result, TensorId};

pub(super) fn plan(
    ctx: &Arc<Context>,
    graph: &Graph,
    id: TensorId,
    checks: &Checks,
) -> Result<Dispatch> {
    let t = graph.tensor(id);
    let rows = operand(ctx, graph, t.src[1])?;
    let idx = operand(ctx, graph, t.src[2])?;
    // The result is a view of the destination operand: same memory and layout.
    let d = operand(ctx, graph, id)?;
    let n = graph.tensor(t.src[1]).layout.nrows();
    let mut params = Params::default();
    params.desc(&rows).desc(&idx).desc(&d).u32(n as u32).u32(checks.tag).u32(0);
    Ok(Dispatch {
        wtype: 0,
        kernel: Kernel::SetRows,
        operands: vec![rows, idx, d, checks.operand()],
        params,
        groups: grid(ctx, n)?,
        checks: true,
    })
}

/// The error of SET_ROWS node `id` whose kernel reported index `value` at `coords`, as the CPU
/// reports it ([`Error::IndexOutOfRange`]).
pub(crate) fn index_error(graph: &Graph, id: TensorId, value: u32, coords: [u32; 3]) -> Error {
    let t = graph.tensor(id);
    let rows = t.ne()[1];
    Error::IndexOutOfRange {
        op: "SET_ROWS".into(),
        reason: format!(
            "row index {} (indices[{}, {}, {}]) is outside 0..{rows} (node {})",
            value as i32,
            coords[0],
            coords[1],
            coords[2],
            t.label(id)
        ),
    }
}
