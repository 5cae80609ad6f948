//! Model files named by version-2 graph documents: GGUF files opened once per process (mapped,
//! shared by every document that names them while one holds them), their tensors looked up for
//! the document builder, and each file tensor placed for the session's device.
//!
//! On a host device a file tensor is used in place: its storage is the mapping (read-only, never
//! copied). A tensor only MUL_MAT reads as its weights, of a type the device's extra buffer type
//! (the CPU's `CPU_REPACK`) accepts, is instead left to the scheduler, which places it there; its
//! bytes are then copied once from the mapping, tensor by tensor. On other devices (GPUs) file
//! tensors are uploaded once from the mapping.

use crate::document::{DocumentError, FileTensor, FileTensors};
use crate::error::{FfiResult, TesseraError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tessera_core::backend::{weight_buffer_type, Buffer, Device, DeviceType};
use tessera_core::registry::Registry;
use tessera_core::{Error, Graph, Layout, Result, Storage, TensorId};
use tessera_gguf::{GgufFile, TensorInfo};

/// Opens `path`, or returns the mapping some other document holds.
pub(crate) fn open(path: &str) -> Result<Arc<GgufFile>> {
    static OPEN: Mutex<Option<HashMap<String, Weak<GgufFile>>>> = Mutex::new(None);
    let mut table = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let table = table.get_or_insert_with(HashMap::new);
    // A mapping of a file changed since is not shared: the new document maps the file anew.
    if let Some(f) = table.get(path).and_then(Weak::upgrade) {
        if f.check_unchanged().is_ok() {
            return Ok(f);
        }
    }
    let file = Arc::new(
        GgufFile::open(path).map_err(|e| Error::InvalidGraph(format!("model file {path}: {e}")))?,
    );
    table.retain(|_, w| w.strong_count() > 0);
    table.insert(path.to_string(), Arc::downgrade(&file));
    Ok(file)
}

/// The files a document uses, kept open for as long as its graph lives.
#[derive(Default)]
pub(crate) struct DocumentFiles {
    files: Mutex<HashMap<String, Arc<GgufFile>>>,
}

impl DocumentFiles {
    fn file(&self, path: &str) -> Result<Arc<GgufFile>> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = files.get(path) {
            return Ok(f.clone());
        }
        let f = open(path)?;
        files.insert(path.to_string(), f.clone());
        Ok(f)
    }

    fn info(&self, path: &str, tensor: &str) -> Result<(Arc<GgufFile>, TensorInfo), DocumentError> {
        let f = self.file(path)?;
        let info = f.tensor(tensor).cloned().ok_or_else(|| DocumentError::UnknownTensor {
            context: format!("model file {path}"),
            name: tensor.to_string(),
        })?;
        Ok((f, info))
    }
}

impl DocumentFiles {
    /// Whether every file the document maps still has the size and modification time it had
    /// when it was mapped: reading a truncated file's mapping would fault (SIGBUS), so this is
    /// checked before writing constants from the files and before every compute.
    pub(crate) fn check_unchanged(&self) -> FfiResult<()> {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        for f in files.values() {
            f.check_unchanged()
                .map_err(|e| TesseraError::InvalidModel { message: e.to_string() })?;
        }
        Ok(())
    }
}

impl FileTensors for DocumentFiles {
    fn layout(&self, path: &str, tensor: &str) -> Result<Layout, DocumentError> {
        Ok(self.info(path, tensor)?.1.layout())
    }
}

/// Bytes a constant gets once the graph has memory: its own, or a tensor of a mapped file.
pub(crate) enum ConstantBytes {
    /// From the document (`data` or `values`).
    Owned(Vec<u8>),
    /// A tensor of a mapped file, copied (repacked, uploaded) straight from the mapping.
    File(Arc<GgufFile>, TensorInfo),
}

impl ConstantBytes {
    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            ConstantBytes::Owned(b) => b,
            ConstantBytes::File(f, info) => f.tensor_data(info),
        }
    }
}

/// Places the file tensors of a built graph for `device` (see the module doc): sets the storage
/// of those used in place and returns the others' bytes, to write once the graph has memory.
pub(crate) fn place(
    graph: &mut Graph,
    file_tensors: &[FileTensor],
    files: &DocumentFiles,
    device: &Arc<dyn Device>,
    registry: &Registry,
) -> Result<Vec<(TensorId, ConstantBytes)>, DocumentError> {
    let mut copied = Vec::new();
    let host = device.device_type() == DeviceType::Cpu && device.buffer_type().is_host();
    let extra = registry.extra_buffer_types(device.as_ref());
    let matmul_weights = graph.matmul_weight_readers();
    let mut mappings: HashMap<String, Arc<dyn Buffer>> = HashMap::new();
    for ft in file_tensors {
        let (file, info) = files.info(&ft.path, &ft.tensor)?;
        // Copied where the scheduler will repack it (the core's one rule), in place otherwise.
        let repack = matmul_weights[ft.id.index()].is_some()
            && weight_buffer_type(&extra, device.as_ref(), &info.layout()).is_some();
        if host && !repack {
            let buffer = match mappings.get(&ft.path) {
                Some(b) => b.clone(),
                None => {
                    let b = device.buffer_from_host_memory(file.memory(), file.file_size())?;
                    mappings.insert(ft.path.clone(), b.clone());
                    b
                }
            };
            let offset = file.data_offset() + info.offset;
            graph.set_storage(ft.id, Storage { buffer, offset })?;
        } else {
            copied.push((ft.id, ConstantBytes::File(file, info)));
        }
    }
    Ok(copied)
}
