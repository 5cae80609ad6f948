//! The file's bytes: a read-only memory map of the file, or owned memory (64-byte aligned),
//! and their [`HostMemory`] view for devices that compute from them in place.

use crate::error::{GgufError, Result};
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;
use std::ptr::NonNull;
use tessera_core::backend::HostMemory;

/// Alignment of owned memory, as the CPU device's buffers.
const OWNED_ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; OWNED_ALIGN]);

/// Where a file's bytes live.
enum Storage {
    /// A read-only mapping of the file.
    Mapped(Mmap),
    /// Bytes owned by the reader, in 64-byte chunks so that they start 64-byte aligned.
    Owned { chunks: Vec<Chunk>, len: usize },
}

/// The bytes of one GGUF file, mapped or owned.
pub(crate) struct FileMemory {
    storage: Storage,
}

impl FileMemory {
    /// Maps the file at `path` read-only. An empty file is not mapped (mapping zero bytes
    /// fails on some systems) and reads as zero bytes.
    pub(crate) fn map(path: &Path) -> Result<FileMemory> {
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            return Ok(FileMemory::owned(&[]));
        }
        // SAFETY: the mapping is read-only and lives as long as this value. Its bytes are only
        // read through shared slices. Another process truncating or rewriting the file while it
        // is mapped would change or fault the mapping; model files are not modified while
        // they are in use, as with every memory-mapping model loader (llama.cpp included).
        let map = unsafe { Mmap::map(&file) }
            .map_err(|source| GgufError::Map { path: path.to_path_buf(), source })?;
        Ok(FileMemory { storage: Storage::Mapped(map) })
    }

    /// A 64-byte aligned copy of `bytes`.
    pub(crate) fn owned(bytes: &[u8]) -> FileMemory {
        let mut chunks = vec![Chunk([0; OWNED_ALIGN]); bytes.len().div_ceil(OWNED_ALIGN)];
        for (c, b) in chunks.iter_mut().zip(bytes.chunks(OWNED_ALIGN)) {
            c.0[..b.len()].copy_from_slice(b);
        }
        FileMemory { storage: Storage::Owned { chunks, len: bytes.len() } }
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Mapped(m) => m,
            Storage::Owned { chunks, len } => {
                // SAFETY: `chunks` holds `chunks.len() * 64 >= len` initialized bytes, contiguous
                // (`Chunk` is `repr(C)` with no padding), borrowed for as long as `self`.
                unsafe { std::slice::from_raw_parts(chunks.as_ptr().cast::<u8>(), *len) }
            }
        }
    }

    /// Tells the kernel that `offset..offset + len` of a mapped file will not be read soon:
    /// its pages leave the process's resident memory (they stay in the page cache, and a later
    /// read maps them again from the file). Does nothing for owned bytes or where the platform
    /// has no such advice.
    pub(crate) fn release_pages(&self, offset: usize, len: usize) {
        if let Storage::Mapped(m) = &self.storage {
            let end = offset.saturating_add(len).min(m.len());
            if offset >= end {
                return;
            }
            #[cfg(unix)]
            // SAFETY: the mapping is private and read-only (never written), so discarding its
            // pages loses nothing: the next access reads them from the file again. The range
            // was clamped to the mapping.
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, end - offset)
            };
        }
    }

    /// Whether the bytes are a memory map of a file.
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped(_))
    }
}

// SAFETY: the pointer and length are those of `bytes()`, which stay valid and in place for as
// long as the value lives (a mapping is unmapped, a vector freed, only on drop, and neither is
// ever resized). The memory is read-only (`read_only()` is true, for owned bytes as well, since
// the reader hands out shared slices of them): devices must not write it.
unsafe impl HostMemory for FileMemory {
    fn ptr(&self) -> NonNull<u8> {
        NonNull::new(self.bytes().as_ptr().cast_mut()).unwrap_or(NonNull::dangling())
    }

    fn len(&self) -> usize {
        self.bytes().len()
    }

    fn read_only(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_memory_is_aligned_and_equal() {
        let v: Vec<u8> = (0..200u8).collect();
        let m = FileMemory::owned(&v[1..]);
        assert_eq!(m.bytes(), &v[1..]);
        assert_eq!(m.bytes().as_ptr() as usize % OWNED_ALIGN, 0);
        assert!(m.read_only());
        assert_eq!(HostMemory::len(&m), 199);
        assert_eq!(FileMemory::owned(&[]).bytes(), &[] as &[u8]);
    }
}
