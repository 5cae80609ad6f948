//! GET_ROWS (`shaders/get_rows.wgsl`): rows of any weight type (as F32, decoded exactly as the
//! reference dequantizes) or I32 picked by I32 indices; an index out of range is reported into
//! the status buffer (see [`index_error`]). A table larger than one binding (a large
//! vocabulary's embeddings) is read in ranges of rows, one dispatch each: every dispatch
//! copies the rows its range holds, the first one reports indices out of range.

use super::{
    grid_256, max_binding, operand, operand_rows, row_chunks, Checks, Dispatch, Kernel, Params,
};
use crate::context::Context;
use std::sync::Arc;
use tessera_core::{Error, Graph, Result, TensorId};

pub(super) fn plan(
    ctx: &Arc<Context>,
    graph: &Graph,
    id: TensorId,
    checks: &Checks,
) -> Result<Vec<Dispatch>> {
    let t = graph.tensor(id);
    let table = graph.tensor(t.src[0]);
    let rows = table.ne()[1];
    let b = operand(ctx, graph, t.src[1])?;
    let d = operand(ctx, graph, id)?;
    let ne = t.ne();
    let n = ne[0].div_ceil(4) * ne[1] * ne[2] * ne[3];
    let wtype = super::dtype_code(table.dtype()).unwrap_or(0);
    let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment.max(4));
    let mut out = Vec::new();
    for (i, (r0, r1)) in row_chunks(&table.layout, max_binding(ctx), align).into_iter().enumerate()
    {
        let whole = (r0, r1) == (0, rows);
        let a = operand_rows(ctx, graph, t.src[0], (!whole).then_some((r0, r1)))?;
        let mut params = Params::default();
        params
            .desc(&a)
            .desc(&b)
            .desc(&d)
            .u32(n as u32)
            .u32(checks.tag)
            .u32(0)
            .u32(r0 as u32)
            .u32(rows as u32)
            .u32((i == 0) as u32);
        out.push(Dispatch {
            wtype,
            kernel: Kernel::GetRows,
            operands: vec![a, b.clone(), d.clone(), checks.operand()],
            params,
            groups: grid_256(ctx, n)?,
            checks: true,
        });
    }
    Ok(out)
}

/// The error of GET_ROWS node `id` whose kernel reported index `value` at `coords`, as the CPU
/// reports it ([`Error::IndexOutOfRange`]).
pub(crate) fn index_error(graph: &Graph, id: TensorId, value: u32, coords: [u32; 3]) -> Error {
    let t = graph.tensor(id);
    let rows = graph.tensor(t.src[0]).ne()[1];
    Error::IndexOutOfRange {
        op: "GET_ROWS".into(),
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
