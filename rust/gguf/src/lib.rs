//! GGUF files: header, metadata, tensor table and data section, read in place from a
//! memory-mapped file with every field checked.
#![warn(missing_docs)]
