//! Operand checks done before computing: the op's rule in tessera-core
//! ([`tessera_core::shape_rules::output_layout`]: operand count, types, shapes and parameters,
//! the same rule the graph builder applies), then that the destination has the result's type
//! and shape, with rows the reference can write.
//!
//! They make [`super::compute_op`] return typed errors instead of reading outside a tensor when
//! handed layouts that do not fit the op.

use tessera_core::shape_rules::{fmt_ne, output_layout};
use tessera_core::{Error, Layout, Op, Result};

/// Checks that `dst` and `srcs` fit `op` (see the module doc). View ops and leaves compute
/// nothing and are not checked.
pub(crate) fn validate(op: &Op, dst: &Layout, srcs: &[&Layout]) -> Result<()> {
    if !op.computes() {
        return Ok(());
    }
    let name = op.name();
    let Some(want) = output_layout(op, srcs)? else { return Ok(()) };
    if dst.dtype != want.dtype {
        return Err(Error::dtype(name, dst.dtype, format!("destination must be {}", want.dtype)));
    }
    if dst.ne != want.ne {
        return Err(Error::shape(
            name,
            format!("destination {} should be {}", fmt_ne(&dst.ne), fmt_ne(&want.ne)),
        ));
    }
    if dst.dtype.is_quantized() && !dst.rows_contiguous() {
        return Err(Error::shape(name, "a quantized destination must have dense rows"));
    }
    if matches!(op, Op::SetRows) && !dst.rows_contiguous() {
        return Err(Error::shape(name, "the destination must have dense rows"));
    }
    Ok(())
}
