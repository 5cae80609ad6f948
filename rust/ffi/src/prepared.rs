//! A graph document built and checked once, kept by a session for the next compute of the same
//! document.
//!
//! Apps compute one document many times with new inputs (the TypeScript builder even hands the
//! same JSON string back while the graph is unchanged). A session therefore keeps the graph it
//! computed last, allocated, with its constants uploaded: computing the same document again
//! skips parsing, building, allocation and the upload (and repacking) of the weights, and only
//! writes the inputs. Documents are recognised by their length and their 128-bit XXH3 hash under
//! a seed drawn at random when the session opens (XXH3 reads about 15 GB/s, so recognising a
//! document costs far less than parsing it; a collision takes about 2^64 distinct documents).
//! The document text itself is not kept, nor are the constants' bytes once
//! uploaded: they live in the backends' buffers.

use crate::document::GraphDocument;
use crate::error::{FfiResult, TesseraError};
use crate::files::{ConstantBytes, DocumentFiles};
use crate::session::TensorData;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;
use tessera_core::backend::Device;
use tessera_core::registry::Registry;
use tessera_core::{DType, Error, Graph, TensorId};

/// What identifies a document: its length and a seeded hash of its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    len: usize,
    hash: u128,
}

/// Fingerprints documents under a seed drawn once (per session).
#[derive(Debug)]
pub(crate) struct DocHasher {
    seed: u64,
}

impl Default for DocHasher {
    fn default() -> DocHasher {
        // std's RandomState carries random keys: hashing nothing under them gives a random seed.
        DocHasher { seed: RandomState::new().build_hasher().finish() }
    }
}

impl DocHasher {
    /// The fingerprint of `json`.
    pub(crate) fn fingerprint(&self, json: &str) -> Fingerprint {
        let hash = xxhash_rust::xxh3::xxh3_128_with_seed(json.as_bytes(), self.seed);
        Fingerprint { len: json.len(), hash }
    }
}

/// One input a document declares.
#[derive(Debug)]
struct InputSpec {
    name: String,
    id: TensorId,
    shape: Vec<u64>,
}

/// A built document: its graph, what its inputs must be, and where its outputs are.
#[derive(Debug)]
pub(crate) struct PreparedGraph {
    /// The fingerprint of the document it was built from.
    pub(crate) fingerprint: Fingerprint,
    /// The graph; holds its memory once the scheduler allocated it.
    pub(crate) graph: Graph,
    /// Output names and the (contiguous) tensors to read them from, in document order.
    pub(crate) outputs: Vec<(String, TensorId)>,
    inputs: Vec<InputSpec>,
    constant_names: HashSet<String>,
    /// The model files the document reads (kept mapped while the graph lives).
    files: DocumentFiles,
}

impl std::fmt::Debug for DocumentFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DocumentFiles")
    }
}

/// Constant tensors and their bytes, to write once the graph has memory.
pub(crate) type Constants = Vec<(TensorId, ConstantBytes)>;

impl PreparedGraph {
    /// Parses and builds `json`. Outputs that are strided views are read through a CONT node
    /// added here, so that every output comes back contiguous.
    pub(crate) fn build(
        json: &str,
        fingerprint: Fingerprint,
        device: &Arc<dyn Device>,
        registry: &Registry,
    ) -> FfiResult<(PreparedGraph, Constants)> {
        let doc = GraphDocument::from_json(json)?;
        let files = DocumentFiles::default();
        let mut built = doc.build_with(&files)?;
        let mut constants: Constants =
            built.constants.drain(..).map(|(id, b)| (id, ConstantBytes::Owned(b))).collect();
        constants.extend(crate::files::place(
            &mut built.graph,
            &built.file_tensors,
            &files,
            device,
            registry,
        )?);
        let mut outputs = Vec::with_capacity(built.outputs.len());
        for (name, id) in &built.outputs {
            let mut id = *id;
            if !built.graph.get(id)?.layout.is_contiguous() {
                let in_output = |e: Error| Error::InGraph {
                    kind: "output".into(),
                    name: name.clone(),
                    error: Box::new(e),
                };
                id = built.graph.cont(id).map_err(in_output)?;
                built.graph.set_output(id)?;
            }
            outputs.push((name.clone(), id));
        }
        let shapes: HashMap<&str, &[usize]> = doc
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_deref().unwrap_or(&[])))
            .collect();
        let inputs = built
            .inputs
            .iter()
            .map(|(name, id)| InputSpec {
                name: name.clone(),
                id: *id,
                shape: shapes
                    .get(name.as_str())
                    .map(|s| s.iter().map(|&n| n as u64).collect())
                    .unwrap_or_default(),
            })
            .collect();
        let input_names: HashSet<&str> = built.inputs.iter().map(|(n, _)| n.as_str()).collect();
        let constant_names = doc
            .tensors
            .iter()
            .filter(|t| !input_names.contains(t.name.as_str()))
            .map(|t| t.name.clone())
            .collect();
        let prepared = PreparedGraph {
            fingerprint,
            graph: built.graph,
            outputs,
            inputs,
            constant_names,
            files,
        };
        Ok((prepared, constants))
    }

    /// Whether the model files the graph reads are unchanged since they were mapped (see
    /// [`DocumentFiles::check_unchanged`]).
    pub(crate) fn check_files(&self) -> FfiResult<()> {
        self.files.check_unchanged()
    }

    /// Checks the given inputs against the document's and returns the bytes to write per tensor.
    pub(crate) fn match_inputs(
        &self,
        given: Vec<TensorData>,
    ) -> FfiResult<Vec<(TensorId, Vec<u8>)>> {
        let specs: HashMap<&str, &InputSpec> =
            self.inputs.iter().map(|s| (s.name.as_str(), s)).collect();
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(given.len());
        for input in given {
            let name = input.name.as_str();
            let Some(spec) = specs.get(name) else {
                let why = if self.constant_names.contains(name) {
                    "is a constant, not an input"
                } else {
                    "is not an input of the graph"
                };
                return Err(TesseraError::invalid_argument(format!(
                    "input {name:?} {why}; the graph's inputs are [{}]",
                    quoted(self.inputs.iter().map(|s| s.name.as_str()))
                )));
            };
            if !seen.insert(name.to_string()) {
                return Err(TesseraError::invalid_argument(format!(
                    "input {name:?} is given twice"
                )));
            }
            let t = self.graph.get(spec.id)?;
            let dtype: DType = input.dtype.parse().map_err(|e: Error| {
                TesseraError::UnknownType { message: format!("input {name:?}: {e}") }
            })?;
            if dtype != t.dtype() {
                return Err(TesseraError::invalid_argument(format!(
                    "input {name:?}: type {dtype} does not match the graph's {}",
                    t.dtype()
                )));
            }
            if input.shape != spec.shape {
                return Err(TesseraError::ShapeMismatch {
                    message: format!(
                        "input {name:?}: shape {:?} does not match the graph's {:?}",
                        input.shape, spec.shape
                    ),
                });
            }
            if input.data.len() != t.nbytes() {
                return Err(TesseraError::DataLength {
                    message: format!(
                        "input {name:?}: expected {} bytes ({dtype} {:?}), got {}",
                        t.nbytes(),
                        spec.shape,
                        input.data.len()
                    ),
                });
            }
            out.push((spec.id, input.data));
        }
        let mut missing =
            self.inputs.iter().map(|s| s.name.as_str()).filter(|n| !seen.contains(*n)).peekable();
        if missing.peek().is_some() {
            return Err(TesseraError::invalid_argument(format!(
                "missing input(s) {}",
                quoted(missing)
            )));
        }
        Ok(out)
    }
}

/// `"a", "b"`: names quoted and joined.
pub(crate) fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_tell_documents_apart() {
        let h = DocHasher::default();
        let a = r#"{"version":1,"outputs":["x"]}"#;
        let same = [r#"{"version":1,"#, r#""outputs":["x"]}"#].concat();
        assert_eq!(h.fingerprint(a), h.fingerprint(&same));
        assert_ne!(h.fingerprint(a), h.fingerprint(r#"{"version":1,"outputs":["y"]}"#));
        assert_ne!(h.fingerprint(a), h.fingerprint(&format!("{a} ")));
        // Another session draws other keys, so its fingerprints are its own.
        assert_ne!(h.fingerprint(a).hash, DocHasher::default().fingerprint(a).hash);
    }
}
