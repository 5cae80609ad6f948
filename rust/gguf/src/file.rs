//! [`GgufFile`]: the header, metadata and tensor table of one file, read and checked when it is
//! opened, and the file's bytes (mapped or owned) for reading tensors in place.

use crate::error::{GgufError, Result};
use crate::kv::read_value;
use crate::mapping::FileMemory;
use crate::reader::Cursor;
use crate::tensor::{check_data, read_tensor_info, TensorInfo, MIN_TENSOR_INFO};
use crate::value::{Value, ValueType};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tessera_core::backend::HostMemory;

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: usize = 32;

/// The metadata key that sets the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The smallest encoding of a metadata entry: key length, value type, a one-byte value.
const MIN_KV: usize = 8 + 4 + 1;

/// A GGUF file: header, metadata and tensor table, every field checked when it is opened; the
/// bytes stay in the memory map (or owned memory) and tensors are slices of it.
pub struct GgufFile {
    memory: Arc<FileMemory>,
    version: u32,
    alignment: usize,
    data_offset: usize,
    metadata: Vec<(String, Value)>,
    keys: BTreeMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: BTreeMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_size", &self.file_size())
            .field("mapped", &self.is_mapped())
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Opens and checks the file at `path`, memory-mapped read-only; nothing but the
    /// metadata is copied out of the mapping (the tensor data is not read at all). Only a
    /// regular file is opened: a FIFO, a device, a socket, a directory or a `/proc` file is
    /// [`GgufError::NotRegular`] at once, without blocking.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        GgufFile::parse(FileMemory::map(path.as_ref())?)
    }

    /// Reads and checks a file held in memory (copied once into 64-byte aligned memory).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        GgufFile::parse(FileMemory::owned(&bytes))
    }

    fn parse(memory: FileMemory) -> Result<GgufFile> {
        let bytes = memory.bytes();
        let mut c = Cursor::new(bytes);
        let version = read_header_start(&mut c, bytes)?;
        let tensor_count_at = c.offset();
        let tensor_count = c.u64(|| "tensor count".into())?;
        let kv_count_at = c.offset();
        let kv_count = c.u64(|| "metadata entry count".into())?;
        let n_kv =
            c.check_count(kv_count, MIN_KV, kv_count_at, || "metadata entry count".into())?;

        let mut metadata = Vec::with_capacity(n_kv);
        let mut keys = BTreeMap::new();
        let mut alignment = DEFAULT_ALIGNMENT;
        for i in 0..n_kv {
            let key_at = c.offset();
            let key = c.string(|| format!("key of metadata entry {i}"))?;
            if keys.contains_key(&key) {
                return Err(GgufError::DuplicateKey { key, offset: key_at });
            }
            let type_at = c.offset();
            let code = c.u32(|| format!("value type of {key:?}"))?;
            let vt = ValueType::from_code(code).ok_or_else(|| GgufError::UnknownValueType {
                key: key.clone(),
                code,
                offset: type_at,
            })?;
            let value_at = c.offset();
            let value = read_value(&mut c, vt, &key)?;
            if key == ALIGNMENT_KEY {
                alignment = check_alignment(&value, value_at)?;
            }
            keys.insert(key.clone(), i);
            metadata.push((key, value));
        }

        // The counts of the header are checked only now, against the bytes left after the
        // metadata, which is where the table starts.
        let n_tensors = c.check_count(tensor_count, MIN_TENSOR_INFO, tensor_count_at, || {
            "tensor count".into()
        })?;
        let mut raw = Vec::with_capacity(n_tensors);
        let mut tensor_index = BTreeMap::new();
        for i in 0..n_tensors {
            raw.push(read_tensor_info(&mut c, i, alignment, &mut tensor_index)?);
        }
        let data_offset =
            c.offset().checked_next_multiple_of(alignment).ok_or_else(|| GgufError::Truncated {
                what: "data section".into(),
                offset: c.offset(),
                need: alignment as u64,
                len: bytes.len(),
            })?;
        let data_size = bytes.len().saturating_sub(data_offset);
        let tensors = check_data(raw, data_offset, data_size)?;
        Ok(GgufFile {
            version,
            alignment,
            data_offset,
            metadata,
            keys,
            tensors,
            tensor_index,
            memory: Arc::new(memory),
        })
    }

    /// The GGUF version (2 or 3; for little-endian files they are the same format, version 3
    /// only added big-endian files).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data (`general.alignment`, 32 when absent).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Where the data section starts in the file (the end of the tensor table rounded up to
    /// the alignment). For a file with no tensors it may lie past the end of the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> usize {
        self.memory.bytes().len()
    }

    /// Whether the mapped file still has the size and modification time it had when it was
    /// opened ([`GgufError::Changed`] when not; always `Ok` for bytes held in memory). A file
    /// truncated after it was mapped faults (SIGBUS) where its lost pages are read: the runtime
    /// calls this before every compute and before copying weights out of the mapping (see the
    /// `mapping` module for the window that remains).
    pub fn check_unchanged(&self) -> Result<()> {
        self.memory.check_unchanged()
    }

    /// Whether the bytes are a memory map of the file (from [`GgufFile::open`]).
    pub fn is_mapped(&self) -> bool {
        self.memory.is_mapped()
    }

    /// The metadata entries, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of metadata `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).map(|&i| &self.metadata[i].1)
    }

    /// `general.architecture` (e.g. "gemma3", "llama").
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file's table, a slice of the mapping. An entry whose range
    /// does not lie in this file's data section (one from another file) gives an empty slice.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        self.data_offset
            .checked_add(info.offset)
            .and_then(|start| Some(start..start.checked_add(info.size)?))
            .and_then(|r| self.bytes().get(r))
            .unwrap_or(&[])
    }

    /// The bytes of the tensor called `name`.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.tensor_data(t))
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.memory.bytes()
    }

    /// Drops the pages of tensor `t`'s bytes from the process's resident memory (a mapped file
    /// only): for tensors copied elsewhere (repacked, uploaded) whose mapped bytes will not be
    /// read again soon. A later read maps them again from the file.
    pub fn release_pages(&self, t: &TensorInfo) {
        self.memory.release_pages(self.data_offset() + t.offset, t.size);
    }

    /// The file's bytes as [`HostMemory`] (`read_only()` is true), for a device to wrap as a
    /// buffer and compute from in place; it keeps the mapping alive. Tensor `t` starts at
    /// byte `data_offset() + t.offset` of it.
    pub fn memory(&self) -> Arc<dyn HostMemory> {
        self.memory.clone()
    }
}

/// Checks the magic and reads the version (accepting 2 and 3).
fn read_header_start(c: &mut Cursor<'_>, bytes: &[u8]) -> Result<u32> {
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    if !MAGIC.starts_with(head) {
        return Err(GgufError::BadMagic { found: head.to_vec() });
    }
    // A file shorter than the magic that starts like it is truncated.
    c.array::<4>(|| "magic".into())?;
    let version = c.u32(|| "version".into())?;
    if version != 0 && version & 0xffff == 0 {
        return Err(GgufError::BigEndian { version: version.swap_bytes() });
    }
    match version {
        2 | 3 => Ok(version),
        v => Err(GgufError::UnsupportedVersion(v)),
    }
}

/// `general.alignment`: an integer that is a non-zero power of two and fits 32 bits.
fn check_alignment(value: &Value, offset: usize) -> Result<usize> {
    let bad = || GgufError::BadAlignment { value: format!("{value:?}"), offset };
    if !value.value_type().is_integer() {
        return Err(GgufError::TypeMismatch {
            key: ALIGNMENT_KEY.into(),
            expected: "an integer (UINT32)",
            found: value.value_type(),
        });
    }
    match value.as_int::<u32>() {
        Some(a) if a.is_power_of_two() => usize::try_from(a).map_err(|_| bad()),
        _ => Err(bad()),
    }
}
