//! Session files: a conversation saved to disk (its tokens and its cache) and loaded back into a
//! context of the same model, so that an app killed in the middle of a chat resumes it without
//! processing the conversation again.
//!
//! The file (little-endian):
//!
//! ```text
//! magic "TSRSESS\0" | version u32 | flags u32 (0) | payload bytes u64 | xxh3-64 of the payload
//! payload:
//!   model binding: GGUF file size u64, xxh3-64 of the file's header (metadata and tensor table,
//!     the bytes before the tensor data) u64, architecture (u32 length + UTF-8), n_layer,
//!     n_vocab, n_embd_k_gqa, n_embd_v_gqa, n_swa (u32 each)
//!   n_ctx of the saving context u32, n_tokens u32, the tokens (u32 each)
//!   cache types: K's and V's ggml type ids u32 each (F16 1, Q4_0 2, Q8_0 8)
//!   cache kinds u32; per kind: window u32 (0: global), positions held u32, the positions (u32)
//!   per attention layer, in layer order: the K rows then the V rows (of the cache types, as
//!     stored: quantized rows are saved as their blocks) of its kind's positions
//!   recurrent u8 (0/1); if 1: layers u32, bytes per layer u32, the states; checkpoints u32,
//!     each a position u32 and the states at it
//! ```
//!
//! Only the cells in use are written: a 2,000-token conversation of Gemma 3 270M (1 KB per
//! position and layer) is 21.9 MB, its 3 global layers' 2,000 positions and its 15
//! sliding-window layers' ring of 1,024 (`tessera bench session`). Loading checks, in order: the magic, the version, the payload's length (a truncated
//! file), its checksum (a flipped byte), the model binding (a session of another model, or of
//! another file of the same architecture), then that the tokens fit in the loading context and
//! that its KV cache has the session's cache types (a Q8_0 cache's session does not load into an
//! F16 context: [`SessionError::CacheTypes`]); each
//! failure is a [`SessionError`], and the context is then left empty. Every count read from the
//! file is checked against the bytes that are left before anything is sized by it, and the file
//! is not read at all when it is larger than the loading context's whole cache could need.
//!
//! The loading context may have another `n_ctx` (at least the session's tokens) and another
//! `n_batch`: a sliding-window ring smaller than the saved one keeps the newest positions (still
//! at least the window). Recurrent layers' state checkpoints are saved and restored with their
//! state, so prefix reuse after loading goes back as far as it would have before saving.

use crate::context::Context;
use crate::error::{LlmError, Result};
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::recurrent::MAX_CHECKPOINTS;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use tessera_gguf::GgufFile;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// The first bytes of a session file.
pub const MAGIC: [u8; 8] = *b"TSRSESS\0";
/// The format version this build writes and reads.
pub const VERSION: u32 = 2;
/// Magic, version, flags, payload length, checksum.
const HEADER_LEN: usize = 8 + 4 + 4 + 8 + 8;
/// Longest architecture name accepted in a binding.
const MAX_ARCH_NAME: usize = 64;

/// Why a session file could not be saved or loaded.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The file could not be read or written.
    #[error("session file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error of the system.
        source: std::io::Error,
    },
    /// The file does not start with [`MAGIC`].
    #[error("not a Tessera session file (it does not start with \"TSRSESS\")")]
    NotASession,
    /// The file is of a format version this build does not read.
    #[error(
        "session file version {found} is not supported (this build reads version {supported})"
    )]
    Version {
        /// The file's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file is shorter (or longer) than its header says.
    #[error("the session file is truncated: {expected} bytes expected, {found} found")]
    Truncated {
        /// The length the header announces (after the header; the header's own length when
        /// the file is shorter than that).
        expected: u64,
        /// The bytes there are.
        found: u64,
    },
    /// The payload's checksum is not the one in the header.
    #[error("the session file is corrupt: its checksum is {found:016x}, the header says {expected:016x}")]
    Checksum {
        /// The header's.
        expected: u64,
        /// The payload's.
        found: u64,
    },
    /// The session was saved with another model (or another file of it).
    #[error("the session was saved with another model: {0}")]
    OtherModel(String),
    /// The session has more tokens than the loading context holds.
    #[error("the session's {n_tokens} tokens do not fit in the context of {n_ctx}")]
    TooLong {
        /// Tokens in the session.
        n_tokens: usize,
        /// The context's size.
        n_ctx: usize,
    },
    /// The file is larger than any session of this model and context can be.
    #[error("the session file has {size} bytes, more than a session of this context can ({max})")]
    TooLarge {
        /// The file's size.
        size: u64,
        /// The most a session of the loading context needs.
        max: u64,
    },
    /// The session's KV cache types are not the loading context's.
    #[error(
        "the session's KV cache is K {saved_k} / V {saved_v}, the context's K {k} / V {v}: load \
         it into a context with the same cache types"
    )]
    CacheTypes {
        /// The session's key type.
        saved_k: String,
        /// The session's value type.
        saved_v: String,
        /// The loading context's key type.
        k: String,
        /// The loading context's value type.
        v: String,
    },
    /// The payload's content is inconsistent (with a checksum that matches: written by
    /// something else than this runtime).
    #[error("the session file is malformed: {0}")]
    Malformed(String),
}

/// What ties a session to the model file it was saved with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Binding {
    file_size: u64,
    header_hash: u64,
    arch: String,
    dims: [u32; 5],
}

const DIM_NAMES: [&str; 5] = ["n_layer", "n_vocab", "n_embd_k_gqa", "n_embd_v_gqa", "n_swa"];

impl Binding {
    fn of(file: &GgufFile, hp: &HParams) -> Result<Binding> {
        file.check_unchanged()?;
        let bytes = file.bytes();
        let header = &bytes[..file.data_offset().min(bytes.len())];
        let dim = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(Binding {
            file_size: file.file_size() as u64,
            header_hash: xxh3_64(header),
            arch: hp.arch.name().to_string(),
            dims: [
                dim(hp.n_layer),
                dim(hp.n_vocab),
                dim(hp.n_embd_k_gqa()),
                dim(hp.n_embd_v_gqa()),
                dim(hp.n_swa),
            ],
        })
    }

    /// Why `saved` is not this binding (`None` when it is).
    fn mismatch(&self, saved: &Binding) -> Option<String> {
        if saved.arch != self.arch {
            return Some(format!("architecture {:?}, this model is {:?}", saved.arch, self.arch));
        }
        for ((name, s), m) in DIM_NAMES.iter().zip(saved.dims).zip(self.dims) {
            if s != m {
                return Some(format!("{name} {s}, this model has {m}"));
            }
        }
        if saved.file_size != self.file_size || saved.header_hash != self.header_hash {
            return Some(format!(
                "a model file of {} bytes (header hash {:016x}), this one has {} bytes (header \
                 hash {:016x})",
                saved.file_size, saved.header_hash, self.file_size, self.header_hash
            ));
        }
        None
    }
}

/// Writes the payload, hashing it as it goes.
struct PayloadWriter<W: Write> {
    out: W,
    hasher: Xxh3,
    len: u64,
}

impl<W: Write> PayloadWriter<W> {
    fn bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hasher.update(b);
        self.len += b.len() as u64;
        self.out.write_all(b)
    }

    fn u32(&mut self, v: usize) -> std::io::Result<()> {
        let v = u32::try_from(v).map_err(|_| std::io::Error::other("a count over 2^32"))?;
        self.bytes(&v.to_le_bytes())
    }
}

/// Reads the payload, every length checked against what is left.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], SessionError> {
        if n > self.bytes.len() {
            return Err(SessionError::Malformed(format!(
                "{what}: {n} bytes announced, {} left",
                self.bytes.len()
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &str) -> std::result::Result<usize, SessionError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self, what: &str) -> std::result::Result<u64, SessionError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// `count` u32 values (the count checked against the bytes left before allocating).
    fn u32s(&mut self, count: usize, what: &str) -> std::result::Result<Vec<usize>, SessionError> {
        let b = self.take(count.saturating_mul(4), what)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
            .collect())
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> LlmError + '_ {
    move |source| SessionError::Io { path: path.display().to_string(), source }.into()
}

fn malformed(why: impl Into<String>) -> LlmError {
    SessionError::Malformed(why.into()).into()
}

/// Saves `ctx`'s conversation (its tokens and cache) to `path` (written to a temporary file
/// beside it, then renamed over it: a crash leaves the old file or the new one).
pub fn save(ctx: &mut Context, path: &Path) -> Result<()> {
    let tmp = path.with_extension("tmp-session");
    let r = write_file(ctx, &tmp);
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return r;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

fn write_file(ctx: &mut Context, path: &Path) -> Result<()> {
    let file = std::fs::File::create(path).map_err(io_err(path))?;
    let mut out = std::io::BufWriter::new(file);
    out.write_all(&[0u8; HEADER_LEN]).map_err(io_err(path))?;
    let mut w = PayloadWriter { out, hasher: Xxh3::new(), len: 0 };
    let binding = Binding::of(ctx.model().file(), ctx.model().hparams())?;
    write_payload(ctx, &binding, &mut w).map_err(io_err(path))??;
    let (checksum, len) = (w.hasher.digest(), w.len);
    let mut out = w.out;
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    header.extend_from_slice(&len.to_le_bytes());
    header.extend_from_slice(&checksum.to_le_bytes());
    out.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    out.write_all(&header).map_err(io_err(path))?;
    let file = out.into_inner().map_err(|e| io_err(path)(e.into_error()))?;
    file.sync_all().map_err(io_err(path))
}

/// The payload (an I/O error outside, the runtime's inside).
fn write_payload<W: Write>(
    ctx: &mut Context,
    binding: &Binding,
    w: &mut PayloadWriter<W>,
) -> std::io::Result<Result<()>> {
    w.bytes(&binding.file_size.to_le_bytes())?;
    w.bytes(&binding.header_hash.to_le_bytes())?;
    w.u32(binding.arch.len())?;
    w.bytes(binding.arch.as_bytes())?;
    for d in binding.dims {
        w.bytes(&d.to_le_bytes())?;
    }
    let n_layer = ctx.model().hparams().n_layer;
    let (history, cache) = ctx.session_parts();
    w.u32(cache.n_ctx())?;
    w.u32(history.len())?;
    for &t in history.iter() {
        w.bytes(&t.to_le_bytes())?;
    }
    let types = cache.types();
    w.bytes(&types.k.ggml_id().to_le_bytes())?;
    w.bytes(&types.v.ggml_id().to_le_bytes())?;
    let held: Vec<Vec<usize>> = (0..cache.n_kinds()).map(|k| cache.held_positions(k)).collect();
    w.u32(held.len())?;
    for (k, positions) in held.iter().enumerate() {
        w.u32(cache.kind_window(k).unwrap_or(0))?;
        w.u32(positions.len())?;
        for &p in positions {
            w.u32(p)?;
        }
    }
    let mut rows = Vec::new();
    for il in 0..n_layer {
        let Some(kind) = cache.layer(il).ok().map(|l| l.kind) else { continue };
        rows.clear();
        if let Err(e) = cache.read_rows(il, &held[kind], &mut rows) {
            return Ok(Err(e));
        }
        w.bytes(&rows)?;
    }
    match cache.recurrent_mut() {
        None => w.bytes(&[0])?,
        Some(r) => {
            w.bytes(&[1])?;
            w.u32(r.n_layers())?;
            w.u32(r.layer_bytes())?;
            match r.packed() {
                Ok(state) => w.bytes(&state)?,
                Err(e) => return Ok(Err(e)),
            }
            let checkpoints = r.packed_checkpoints();
            w.u32(checkpoints.len())?;
            for (pos, state) in checkpoints {
                w.u32(pos)?;
                w.bytes(&state)?;
            }
        }
    }
    Ok(Ok(()))
}

/// The most bytes a session of `cache`'s context can have (every position of every layer, the
/// recurrent states and their checkpoints, and the fixed fields with room to spare).
fn max_file_size(cache: &mut KvCache, n_layer: usize) -> u64 {
    let n_ctx = cache.n_ctx() as u64;
    let mut max = HEADER_LEN as u64 + 4096 + 4 * n_ctx * (1 + cache.n_kinds() as u64);
    for il in 0..n_layer {
        if let Ok((k, v)) = cache.row_bytes(il) {
            max += n_ctx * (k + v) as u64;
        }
    }
    if let Some(r) = cache.recurrent_mut() {
        max += (MAX_CHECKPOINTS as u64 + 1) * (4 + (r.layer_bytes() * r.n_layers()) as u64);
    }
    max
}

/// Loads the session at `path` into `ctx` (what it held is forgotten) and returns the number of
/// tokens loaded; on an error the context is left empty.
pub fn load(ctx: &mut Context, path: &Path) -> Result<usize> {
    ctx.clear();
    let r = load_into(ctx, path);
    if r.is_err() {
        ctx.clear();
    }
    r
}

fn load_into(ctx: &mut Context, path: &Path) -> Result<usize> {
    let model = ctx.model().clone();
    let hp = model.hparams();
    let mut file = std::fs::File::open(path).map_err(io_err(path))?;
    let size = file.metadata().map_err(io_err(path))?.len();
    let (_, cache) = ctx.session_parts();
    let max = max_file_size(cache, hp.n_layer);
    if size > max {
        // Too large to read: a session of another model, or of more tokens than the context
        // holds, says so (from its first bytes, unchecked: either way the file is refused).
        let mut head = vec![0u8; (size as usize).min(HEADER_LEN + 4096)];
        std::io::Read::read_exact(&mut file, &mut head).map_err(io_err(path))?;
        check_magic(&head)?;
        let n_ctx = cache.n_ctx();
        if let Some((saved, n_tokens)) = peek(&head) {
            if let Some(why) = Binding::of(model.file(), hp)?.mismatch(&saved) {
                return Err(SessionError::OtherModel(why).into());
            }
            if n_tokens > n_ctx {
                return Err(SessionError::TooLong { n_tokens, n_ctx }.into());
            }
        }
        return Err(SessionError::TooLarge { size, max }.into());
    }
    let mut bytes = Vec::with_capacity(size as usize);
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io_err(path))?;
    let payload = check_header(&bytes)?;
    let mut r = Reader { bytes: payload };
    let saved = read_binding(&mut r)?;
    if let Some(why) = Binding::of(model.file(), hp)?.mismatch(&saved) {
        return Err(SessionError::OtherModel(why).into());
    }
    let _saved_n_ctx = r.u32("n_ctx")?;
    let n_tokens = r.u32("token count")?;
    let (history, cache) = ctx.session_parts();
    if n_tokens > cache.n_ctx() {
        return Err(SessionError::TooLong { n_tokens, n_ctx: cache.n_ctx() }.into());
    }
    let tokens = r.u32s(n_tokens, "tokens")?;
    if let Some(&t) = tokens.iter().find(|&&t| t >= hp.n_vocab) {
        return Err(malformed(format!("token {t} outside the vocabulary of {}", hp.n_vocab)));
    }
    let types = cache.types();
    let (k_id, v_id) = (r.u32("K cache type")?, r.u32("V cache type")?);
    if (k_id, v_id) != (types.k.ggml_id() as usize, types.v.ggml_id() as usize) {
        let name = |id: usize| {
            u32::try_from(id)
                .ok()
                .and_then(|id| tessera_core::DType::from_ggml_id(id).ok())
                .map_or_else(|| format!("type {id}"), |t| t.to_string())
        };
        return Err(SessionError::CacheTypes {
            saved_k: name(k_id),
            saved_v: name(v_id),
            k: types.k.to_string(),
            v: types.v.to_string(),
        }
        .into());
    }
    let held = read_kinds(&mut r, cache, n_tokens)?;
    // Rows of the positions the loading cache keeps (the newest of a ring that is smaller).
    let kept: Vec<Vec<usize>> = held
        .iter()
        .enumerate()
        .map(|(k, h)| h[h.len().saturating_sub(cache.kind_size(k))..].to_vec())
        .collect();
    for il in 0..hp.n_layer {
        let Some(kind) = cache.layer(il).ok().map(|l| l.kind) else { continue };
        let (k, v) = cache.row_bytes(il)?;
        let saved = &held[kind];
        let skip = saved.len() - kept[kind].len();
        let k_rows = r.take(saved.len() * k, "K rows")?;
        let v_rows = r.take(saved.len() * v, "V rows")?;
        let mut data = Vec::with_capacity(kept[kind].len() * (k + v));
        data.extend_from_slice(&k_rows[skip * k..]);
        data.extend_from_slice(&v_rows[skip * v..]);
        cache.write_rows(il, &kept[kind], &data)?;
    }
    read_recurrent(&mut r, cache, n_tokens)?;
    if !r.bytes.is_empty() {
        return Err(malformed(format!("{} bytes after the end", r.bytes.len())));
    }
    cache.set_held(n_tokens, &kept);
    history.extend(tokens.iter().map(|&t| t as u32));
    Ok(n_tokens)
}

/// The model binding and token count of a file's first bytes (unchecked), when they hold them.
fn peek(head: &[u8]) -> Option<(Binding, usize)> {
    if head.len() < HEADER_LEN || head[..MAGIC.len()] != MAGIC {
        return None;
    }
    let mut r = Reader { bytes: &head[HEADER_LEN..] };
    let binding = read_binding(&mut r).ok()?;
    r.u32("n_ctx").ok()?;
    Some((binding, r.u32("token count").ok()?))
}

/// Whether a file's first bytes are a session's: its magic, and the version when it has one.
fn check_magic(bytes: &[u8]) -> Result<()> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(SessionError::NotASession.into());
    }
    if let Some(v) = bytes.get(MAGIC.len()..MAGIC.len() + 4) {
        let version = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        if version != VERSION {
            return Err(SessionError::Version { found: version, supported: VERSION }.into());
        }
    }
    Ok(())
}

/// The payload of a file whose magic, version, length and checksum are right.
fn check_header(bytes: &[u8]) -> Result<&[u8]> {
    check_magic(bytes)?;
    if bytes.len() < HEADER_LEN {
        let (expected, found) = (HEADER_LEN as u64, bytes.len() as u64);
        return Err(SessionError::Truncated { expected, found }.into());
    }
    let mut h = Reader { bytes: &bytes[MAGIC.len() + 4..HEADER_LEN] };
    let flags = h.u32("flags")?;
    let expected = h.u64("payload length")?;
    let checksum = h.u64("checksum")?;
    let payload = &bytes[HEADER_LEN..];
    let found = payload.len() as u64;
    if found != expected {
        return Err(SessionError::Truncated { expected, found }.into());
    }
    let hash = xxh3_64(payload);
    if hash != checksum {
        return Err(SessionError::Checksum { expected: checksum, found: hash }.into());
    }
    if flags != 0 {
        return Err(malformed(format!("unknown flags {flags:#x}")));
    }
    Ok(payload)
}

fn read_binding(r: &mut Reader<'_>) -> Result<Binding> {
    let file_size = r.u64("model file size")?;
    let header_hash = r.u64("model header hash")?;
    let len = r.u32("architecture length")?;
    if len > MAX_ARCH_NAME {
        return Err(malformed(format!("an architecture name of {len} bytes")));
    }
    let arch = std::str::from_utf8(r.take(len, "architecture")?)
        .map_err(|_| malformed("the architecture name is not UTF-8"))?
        .to_string();
    let mut dims = [0u32; 5];
    for (d, name) in dims.iter_mut().zip(DIM_NAMES) {
        *d = r.u32(name)? as u32;
    }
    Ok(Binding { file_size, header_hash, arch, dims })
}

/// The positions each cache kind held, checked: the global kind holds every position, a
/// sliding-window kind the newest ones, contiguous.
fn read_kinds(r: &mut Reader<'_>, cache: &KvCache, n_tokens: usize) -> Result<Vec<Vec<usize>>> {
    let n_kinds = r.u32("cache kinds")?;
    if n_kinds != cache.n_kinds() {
        return Err(malformed(format!("{n_kinds} cache kinds, the model has {}", cache.n_kinds())));
    }
    let mut held = Vec::with_capacity(n_kinds);
    for k in 0..n_kinds {
        let window = r.u32("window")?;
        if window != cache.kind_window(k).unwrap_or(0) {
            return Err(malformed(format!("cache kind {k} has window {window}")));
        }
        let count = r.u32("positions held")?;
        if count > n_tokens {
            return Err(malformed(format!("cache kind {k} holds {count} of {n_tokens} tokens")));
        }
        let positions = r.u32s(count, "positions")?;
        let first = n_tokens - count;
        let contiguous = positions.iter().enumerate().all(|(i, &p)| p == first + i);
        let enough = match cache.kind_window(k) {
            None => count == n_tokens,
            Some(w) => count >= n_tokens.min(w),
        };
        if !contiguous || !enough {
            return Err(malformed(format!(
                "cache kind {k} holds positions that do not end the {n_tokens} tokens"
            )));
        }
        held.push(positions);
    }
    Ok(held)
}

fn read_recurrent(r: &mut Reader<'_>, cache: &mut KvCache, n_tokens: usize) -> Result<()> {
    let has = r.take(1, "recurrent flag")?[0];
    let state = cache.recurrent_mut();
    match (has, state) {
        (0, None) => Ok(()),
        (1, Some(state)) => {
            let (n, bytes) = (r.u32("recurrent layers")?, r.u32("recurrent state size")?);
            if n != state.n_layers() || bytes != state.layer_bytes() {
                return Err(malformed(format!(
                    "{n} recurrent layers of {bytes} bytes, the model has {} of {}",
                    state.n_layers(),
                    state.layer_bytes()
                )));
            }
            let total = n * bytes;
            let current = r.take(total, "recurrent states")?;
            let count = r.u32("checkpoints")?;
            if count > MAX_CHECKPOINTS {
                return Err(malformed(format!("{count} checkpoints")));
            }
            let mut checkpoints = Vec::with_capacity(count);
            for _ in 0..count {
                let pos = r.u32("checkpoint position")?;
                let after_last = checkpoints.last().is_none_or(|&(p, _)| pos > p);
                if pos == 0 || pos > n_tokens || !after_last {
                    return Err(malformed(format!("a checkpoint at position {pos}")));
                }
                checkpoints.push((pos, r.take(total, "checkpoint")?));
            }
            state.unpack(current, &checkpoints)
        }
        (flag, _) => Err(malformed(format!("recurrent flag {flag} for this model"))),
    }
}
