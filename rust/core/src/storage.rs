//! Where a tensor's bytes live: a buffer and an offset in it.

use crate::backend::Buffer;
use std::sync::Arc;

/// A tensor's memory: `buffer` from `offset` on.
#[derive(Clone)]
pub struct Storage {
    /// The buffer holding the bytes.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset of the tensor's first element in the buffer.
    pub offset: usize,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({} @ {})", self.buffer.name(), self.offset)
    }
}
