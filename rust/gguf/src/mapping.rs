//! The file's bytes: a read-only memory map of the file, or owned memory (64-byte aligned),
//! and their [`HostMemory`] view for devices that compute from them in place.
//!
//! # Which files are opened
//!
//! Only regular files are mapped, and finding out never blocks: the path is `stat`ed first
//! (following links) and anything else (a FIFO, a character or block device such as
//! `/dev/zero`, a socket, a directory) is refused with [`GgufError::NotRegular`] naming what
//! it is, without opening it (opening a FIFO for reading blocks until a writer comes; opening a
//! device can have effects). The regular file is then opened with `O_NONBLOCK | O_NOCTTY` and
//! `fstat`ed again, so a path swapped for a FIFO in between is refused too, without blocking.
//! Files of the kernel's pseudo file systems (`/proc`, `/sys`), regular files whose size says
//! nothing about their contents, are refused on Linux and Android by `fstatfs`; a
//! `/proc/self/fd/N` link to a file on disk (Android's content URIs) opens that file and is
//! accepted.
//!
//! # A file changed after it was mapped
//!
//! The mapping is shared with the file: if another process truncates the file, reading the
//! pages past its new end raises SIGBUS, which kills the process (a `MAP_PRIVATE` mapping does
//! not help: Linux drops its untouched pages on truncation as well, and no portable lock keeps
//! another process from truncating a file). Rust cannot turn that fault into an error soundly (a
//! SIGBUS handler would have to jump out of arbitrary kernel code). So the size and modification
//! time of the open file (`fstat` of the descriptor kept open, a few hundred nanoseconds) are
//! recorded when it is opened, and [`FileMemory::check_unchanged`] compares them before each use:
//! the model runtime calls it before every compute and before copying weights, so a file
//! rewritten or truncated in place is answered with [`GgufError::Changed`] instead of a crash.
//! What remains is the window between that check and the end of the compute (milliseconds): a
//! truncation inside it still faults. A file replaced by renaming another over its path (how
//! downloads finish, Tessera's own included) is not a change: the mapping keeps the old file's
//! bytes, which stay valid until it is unmapped.

use crate::error::{GgufError, Result};
use memmap2::Mmap;
use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::SystemTime;
use tessera_core::backend::HostMemory;

/// Alignment of owned memory, as the CPU device's buffers.
const OWNED_ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; OWNED_ALIGN]);

/// What a file was when it was mapped: compared with `fstat` of its descriptor before each use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        Stamp { len: meta.len(), modified: meta.modified().ok() }
    }
}

/// A mapped file, its descriptor (kept open for `fstat`) and what it was when mapped.
struct MappedFile {
    map: Mmap,
    file: File,
    path: PathBuf,
    stamp: Stamp,
}

/// Where a file's bytes live.
enum Storage {
    /// A read-only mapping of the file.
    Mapped(MappedFile),
    /// Bytes owned by the reader, in 64-byte chunks so that they start 64-byte aligned.
    Owned { chunks: Vec<Chunk>, len: usize },
}

/// The bytes of one GGUF file, mapped or owned.
pub(crate) struct FileMemory {
    storage: Storage,
}

/// What a path that is not a regular file is, for [`GgufError::NotRegular`]; `None` for a
/// regular file.
fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// Opens `path` for reading without blocking: `O_NONBLOCK` (a FIFO swapped in after the `stat`
/// does not wait for a writer; no effect on regular files) and `O_NOCTTY`.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    options.open(path)
}

/// The kernel pseudo file system `file` lives on (`/proc`, `/sys`), if any.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pseudo_file_system(file: &File) -> Option<&'static str> {
    use std::os::fd::AsRawFd;
    const PROC_SUPER_MAGIC: u64 = 0x9fa0;
    const SYSFS_MAGIC: u64 = 0x6265_6572;
    const DEBUGFS_MAGIC: u64 = 0x6462_6720;
    // SAFETY: `statfs` is plain old data, zeroes are a valid value of it; `fstatfs` writes it
    // through the pointer, which is valid for the call, for a descriptor this `File` owns.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    // `f_type` is signed on some targets and unsigned on others; the magic numbers are
    // positive and fit 32 bits.
    #[allow(clippy::unnecessary_cast)]
    let magic = (st.f_type as u64) & 0xffff_ffff;
    match magic {
        PROC_SUPER_MAGIC => Some("a file of the kernel's /proc file system (procfs)"),
        SYSFS_MAGIC => Some("a file of the kernel's /sys file system (sysfs)"),
        DEBUGFS_MAGIC => Some("a file of the kernel's debugfs"),
        _ => None,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn pseudo_file_system(_file: &File) -> Option<&'static str> {
    None
}

impl FileMemory {
    /// Maps the regular file at `path` read-only (see the module doc for what is refused, and
    /// how). An empty file is not mapped (mapping zero bytes fails on some systems) and reads
    /// as zero bytes.
    pub(crate) fn map(path: &Path) -> Result<FileMemory> {
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let not_regular_error =
            |what: &'static str| GgufError::NotRegular { path: path.to_path_buf(), what };
        // `stat` first: nothing that is not a regular file is opened.
        let meta = std::fs::metadata(path).map_err(io)?;
        if let Some(what) = not_regular(&meta) {
            return Err(not_regular_error(what));
        }
        let file = open_nonblocking(path).map_err(io)?;
        // `fstat` of what was opened: the path may have changed since the `stat`.
        let meta = file.metadata().map_err(io)?;
        if let Some(what) = not_regular(&meta).or_else(|| pseudo_file_system(&file)) {
            return Err(not_regular_error(what));
        }
        let stamp = Stamp::of(&meta);
        if stamp.len == 0 {
            return Ok(FileMemory::owned(&[]));
        }
        // SAFETY: the mapping is read-only and lives as long as this value; its bytes are only
        // read through shared slices. Another process truncating or rewriting the file while it
        // is mapped changes or faults the mapping: `check_unchanged` (called before every
        // compute) detects it, leaving the window the module doc describes.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|source| GgufError::Map { path: path.to_path_buf(), source })?;
        Ok(FileMemory {
            storage: Storage::Mapped(MappedFile { map, file, path: path.to_path_buf(), stamp }),
        })
    }

    /// Whether the mapped file still has the size and modification time it had when it was
    /// mapped (`fstat` of its descriptor); [`GgufError::Changed`] when not. Owned bytes never
    /// change.
    pub(crate) fn check_unchanged(&self) -> Result<()> {
        let Storage::Mapped(m) = &self.storage else { return Ok(()) };
        let changed = |reason: String| GgufError::Changed { path: m.path.clone(), reason };
        let now = m
            .file
            .metadata()
            .map_err(|e| changed(format!("it can no longer be examined ({e})")))?;
        let now = Stamp::of(&now);
        if now.len != m.stamp.len {
            return Err(changed(format!(
                "its size went from {} to {} bytes",
                m.stamp.len, now.len
            )));
        }
        if now.modified != m.stamp.modified {
            return Err(changed("it was written to (its modification time changed)".into()));
        }
        Ok(())
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
            Storage::Mapped(m) => &m.map,
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
        if let Storage::Mapped(MappedFile { map: m, .. }) = &self.storage {
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
