//! GGUF files: header, metadata, tensor table and data section, read in place from a
//! memory-mapped file with every field checked.
//!
//! ```no_run
//! let f = tessera_gguf::GgufFile::open("model.gguf")?;
//! let layers = f.get_u32("gemma3.block_count")?;
//! let t = f.tensor("token_embd.weight").expect("no embeddings");
//! let bytes: &[u8] = f.tensor_data(t); // a slice of the mapping, not a copy
//! # let _ = (layers, bytes);
//! # Ok::<(), tessera_gguf::GgufError>(())
//! ```
//!
//! # Format
//!
//! A GGUF file is, little-endian: the magic `GGUF`, a `u32` version, a `u64` tensor count, a
//! `u64` metadata entry count; the metadata entries (a string key, a `u32` value type, the
//! value); the tensor table (a string name, a `u32` dimension count, that many `u64`
//! dimensions innermost first, a `u32` ggml type id, a `u64` offset relative to the data
//! section); padding to the alignment (`general.alignment`, default 32); the data section.
//! Strings are a `u64` length and UTF-8 bytes; arrays a `u32` element type, a `u64` count and
//! the elements (arrays of arrays nest, each inner array with its own element type).
//!
//! Versions 2 and 3 are read. They differ in nothing for little-endian files: version 3 only
//! allowed files to be written big-endian. Version 1 (32-bit counts and lengths) is refused
//! with [`GgufError::UnsupportedVersion`], big-endian files with [`GgufError::BigEndian`].
//!
//! # Checks
//!
//! Every count is checked against the bytes left in the file at the smallest encoding of one
//! item before anything is allocated from it; arrays nest at most [`MAX_ARRAY_DEPTH`] deep;
//! every offset and size is computed with checked arithmetic. Keys and tensor names must be
//! unique; tensors need 1 to 4 non-zero dimensions, a type that [`tessera_core::DType`] knows,
//! rows of whole blocks, an offset that is a multiple of the alignment, bytes inside the data
//! section and not overlapping another tensor's. Booleans must be 0 or 1, strings UTF-8.
//! Anything else is a [`GgufError`] naming what and the byte offset where; no input panics.
//!
//! Only regular files are opened (others are refused without blocking), and a mapped file
//! truncated or written to afterwards is reported by [`GgufFile::check_unchanged`] (reading the
//! mapping of a truncated file would fault): see the `mapping` module.
#![warn(missing_docs)]

mod error;
mod file;
mod getters;
mod kv;
mod mapping;
mod reader;
pub mod summary;
mod tensor;
mod value;

pub use error::{ggml_type_name, GgufError, Result};
pub use file::{GgufFile, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
pub use kv::MAX_ARRAY_DEPTH;
pub use tensor::TensorInfo;
pub use value::{Array, Value, ValueType};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_can_be_shared_between_threads() {
        fn check<T: Send + Sync>() {}
        check::<GgufFile>();
    }
}
