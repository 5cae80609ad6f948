//! The error type of the GGUF reader: every variant says what is wrong and, where it applies,
//! the byte offset in the file where the offending field starts.

use crate::value::ValueType;
use std::path::PathBuf;
use tessera_core::DType;

/// Result with the reader's [`GgufError`].
pub type Result<T> = std::result::Result<T, GgufError>;

/// Everything that can be wrong with a GGUF file, or with a metadata lookup.
///
/// Offsets are absolute byte positions in the file, of the field that is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// A field, or the bytes a length promises, run past the end of the file.
    #[error("file truncated: {what} at byte {offset} needs {need} bytes, but the file has {len}")]
    Truncated {
        /// The field being read, e.g. "tensor count" or "value of \"general.name\"".
        what: String,
        /// Where the field starts.
        offset: usize,
        /// Bytes it needs from `offset`.
        need: u64,
        /// Size of the file.
        len: usize,
    },
    /// The file does not start with the four bytes "GGUF".
    #[error("not a GGUF file: the first four bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first four bytes (fewer when the file is shorter).
        found: Vec<u8>,
    },
    /// A big-endian GGUF file (its version reads as a large number in little-endian order).
    #[error(
        "big-endian GGUF file (version {version} stored big-endian at byte 4): only \
         little-endian files are supported; convert it with gguf-py's gguf_convert_endian.py"
    )]
    BigEndian {
        /// The version, read big-endian.
        version: u32,
    },
    /// A version other than 2 or 3.
    #[error("unsupported GGUF version {v} at byte 4 ({note})", v = .0, note = version_note(*.0))]
    UnsupportedVersion(u32),
    /// A metadata value type code outside 0..=12.
    #[error("metadata {key:?}: unknown value type {code} at byte {offset} (GGUF knows 0 to 12)")]
    UnknownValueType {
        /// The key whose value (or array element type) it is.
        key: String,
        /// The code read.
        code: u32,
        /// Where the code is.
        offset: usize,
    },
    /// A tensor type id that Tessera's [`DType`] does not know.
    #[error("tensor {tensor:?}: {} at byte {offset}", tensor_type_note(*code))]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The ggml type id read.
        code: u32,
        /// Where the id is.
        offset: usize,
    },
    /// A tensor's dimensions are invalid: none, more than 4, zero, or too large.
    #[error("tensor {tensor:?}: bad dimensions at byte {offset}: {reason}")]
    BadDims {
        /// The tensor.
        tensor: String,
        /// What is wrong, naming the dimensions.
        reason: String,
        /// Where the dimension count is.
        offset: usize,
    },
    /// A quantized tensor whose rows are not a whole number of blocks.
    #[error(
        "tensor {tensor:?} (dimensions at byte {offset}): rows of {ne0} values of {dtype} are \
         not a whole number of blocks of {block}"
    )]
    NotWholeBlocks {
        /// The tensor.
        tensor: String,
        /// Its type.
        dtype: DType,
        /// Its row length (`ne[0]`).
        ne0: usize,
        /// The block size of the type.
        block: usize,
        /// Where the dimension count is.
        offset: usize,
    },
    /// A tensor offset that is not a multiple of the file's alignment.
    #[error(
        "tensor {tensor:?}: data offset {tensor_offset} (field at byte {offset}) is not a \
         multiple of the alignment {alignment}"
    )]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// The offset read, relative to the data section.
        tensor_offset: u64,
        /// The file's alignment.
        alignment: usize,
        /// Where the offset field is.
        offset: usize,
    },
    /// A tensor whose bytes lie (partly) outside the data section.
    #[error(
        "tensor {tensor:?}: {size} bytes at data offset {tensor_offset} (field at byte \
         {offset}) end past the data section of {data_size} bytes (starting at byte {data_offset})"
    )]
    OutOfData {
        /// The tensor.
        tensor: String,
        /// Its offset relative to the data section.
        tensor_offset: u64,
        /// Its size in bytes.
        size: usize,
        /// Where the data section starts in the file.
        data_offset: usize,
        /// Size of the data section (bytes from its start to the end of the file).
        data_size: usize,
        /// Where the offset field is.
        offset: usize,
    },
    /// Two tensors whose bytes overlap.
    #[error(
        "tensors {a:?} (data bytes {}..{}) and {b:?} (data bytes {}..{}) overlap",
        a_range.0, a_range.1, b_range.0, b_range.1
    )]
    Overlap {
        /// The tensor that starts first.
        a: String,
        /// The tensor that starts inside `a`.
        b: String,
        /// Byte range of `a`, relative to the data section.
        a_range: (usize, usize),
        /// Byte range of `b`, relative to the data section.
        b_range: (usize, usize),
    },
    /// A metadata key that occurs twice.
    #[error("metadata key {key:?} at byte {offset} occurs twice")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where its second occurrence starts.
        offset: usize,
    },
    /// A tensor name that occurs twice.
    #[error("tensor name {name:?} at byte {offset} occurs twice")]
    DuplicateTensor {
        /// The name.
        name: String,
        /// Where its second occurrence starts.
        offset: usize,
    },
    /// A count larger than the rest of the file could hold, even at the smallest encoding of
    /// each item (checked before anything is allocated).
    #[error(
        "{what} at byte {offset} is {count}, more than the {remaining} bytes left in the file \
         can hold (at least {min_size} bytes each)"
    )]
    TooLarge {
        /// What is counted, e.g. "tensor count".
        what: String,
        /// The count read.
        count: u64,
        /// Where the count is.
        offset: usize,
        /// The smallest size of one item.
        min_size: usize,
        /// Bytes left after the count.
        remaining: usize,
    },
    /// A string that is not UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    BadUtf8 {
        /// The string, e.g. "name of tensor 3".
        what: String,
        /// Where its bytes start.
        offset: usize,
    },
    /// A boolean stored as a byte other than 0 or 1.
    #[error("metadata {key:?}: boolean byte {value} at byte {offset} is neither 0 nor 1")]
    BadBool {
        /// The key.
        key: String,
        /// The byte read.
        value: u8,
        /// Where it is.
        offset: usize,
    },
    /// Arrays of arrays nested deeper than [`crate::MAX_ARRAY_DEPTH`].
    #[error("metadata {key:?}: arrays nested deeper than {max} levels at byte {offset}")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The largest depth accepted.
        max: usize,
        /// Where the too deeply nested array starts.
        offset: usize,
    },
    /// `general.alignment` that is zero, not a power of two, or does not fit 32 bits.
    #[error("general.alignment at byte {offset} is {value}: it must be a non-zero power of two")]
    BadAlignment {
        /// The value read.
        value: String,
        /// Where the value is.
        offset: usize,
    },
    /// A metadata key that the file does not have.
    #[error("metadata key {0:?} is missing")]
    MissingKey(String),
    /// A metadata value of another type than asked for.
    #[error("metadata {key:?}: expected {expected}, found {found}")]
    TypeMismatch {
        /// The key.
        key: String,
        /// What was asked for, e.g. "an integer that fits u32".
        expected: &'static str,
        /// The type found.
        found: ValueType,
    },
    /// An integer metadata value that does not fit the type asked for.
    #[error("metadata {key:?}: {value} does not fit {expected}")]
    OutOfRange {
        /// The key.
        key: String,
        /// The value, as written in the file.
        value: String,
        /// The type asked for, e.g. "u32".
        expected: &'static str,
    },
    /// The file could not be opened or its size read.
    #[error("cannot open {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The path is not a regular file (a FIFO, a device, a directory, a socket, a file of a
    /// kernel pseudo file system such as `/proc`): refused without reading it.
    #[error("{} is {what}, not a model file: give the path of a regular file", path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is, e.g. "a FIFO (named pipe)".
        what: &'static str,
    },
    /// A mapped file was truncated or written to after it was opened: its bytes can no longer
    /// be trusted (reading past a new end would fault), so nothing more is read from it.
    #[error(
        "model file {} changed on disk after it was loaded: {reason}; load it again",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What changed, e.g. "its size went from 100 to 0 bytes".
        reason: String,
    },
    /// The file could not be memory-mapped.
    #[error("cannot memory-map {}: {source}", path.display())]
    Map {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

fn version_note(v: u32) -> &'static str {
    match v {
        1 => "version 1 used 32-bit counts and lengths and is not supported; re-convert the model",
        0 => "not a valid version",
        _ => "this reader knows versions 2 and 3",
    }
}

/// The message for an unknown tensor type id: the ggml name when ggml has one.
fn tensor_type_note(code: u32) -> String {
    match ggml_type_name(code) {
        Some(name) => format!("ggml type {code} ({name}) is not supported by Tessera"),
        None => format!("unknown ggml type id {code}"),
    }
}

/// Names of the ggml type ids that Tessera's [`DType`] does not have (from ggml's
/// `enum ggml_type`), for error messages.
pub fn ggml_type_name(code: u32) -> Option<&'static str> {
    if let Ok(t) = DType::from_ggml_id(code) {
        return Some(t.name());
    }
    Some(match code {
        4 => "Q4_2 (removed)",
        5 => "Q4_3 (removed)",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        21 => "IQ3_S",
        22 => "IQ2_S",
        24 => "I8",
        25 => "I16",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        31..=33 => "Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (removed)",
        34 => "TQ1_0",
        35 => "TQ2_0",
        36..=38 => "IQ4_NL_4_4 / IQ4_NL_4_8 / IQ4_NL_8_8 (removed)",
        39 => "MXFP4",
        40 => "NVFP4",
        41 => "Q1_0",
        42 => "Q2_0",
        _ => return None,
    })
}
