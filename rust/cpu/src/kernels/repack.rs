//! The repacked weight layout ("CPU_REPACK"): rows of Q4_0 / Q8_0 interleaved at upload so that
//! the GEMM kernels load several rows' blocks with one instruction.
//!
//! Not implemented yet: [`repack_for_bench`] returns `None` and [`repack_buffer_type`] `None`,
//! so every weight uses the plain GGUF layout.

use std::sync::Arc;
use tessera_core::backend::BufferType;
use tessera_core::Layout;

/// The repack buffer type of the active tier, `None` when the tier has no repacked kernels.
pub fn repack_buffer_type() -> Option<Arc<dyn BufferType>> {
    None
}

/// The repacked bytes of a weight matrix for benchmarks, `None` when the active tier has no
/// repacked kernels for its type.
pub fn repack_for_bench(layout: &Layout, bytes: &[u8]) -> Option<Vec<u8>> {
    let _ = (layout, bytes);
    None
}
