//! Model downloads into the app's models folder (the protocol's `downloadModel`,
//! `cancelDownload`, `listModels`, `deleteModel`, `setModelsDirectory`; docs/native-protocol.md).
//!
//! One implementation for Android, iOS and the Node tests: no byte goes through JavaScript.
//! A download writes `.partial/NAME` beside a note of its URL and SHA-256
//! (`.partial/NAME.json`), resumes it with an HTTP range request when the same download is
//! asked again (and once by itself when a connection is cut after some bytes), hashes what it
//! writes, checks the free space against the announced length first, and renames the file to
//! `NAME` only once its SHA-256 matches: a cancelled, cut or corrupt download never leaves a
//! file under the model's name. Finished downloads keep a note in `.meta/NAME.json`.

use crate::error::TesseraError;
use crate::events::emit;
use crate::requests;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

type Reply = Result<Value, TesseraError>;

/// Bytes read from the connection per step (cancels are checked between steps).
const CHUNK: usize = 256 * 1024;
/// Space left free besides the file itself.
const FREE_SPACE_MARGIN: u64 = 64 * 1024 * 1024;
/// Connection attempts of one download (each later one resumes where the last stopped).
const ATTEMPTS: u32 = 3;

/// The request's `params` object as `T` (an absent one as `{}`), unknown keys refused.
fn params<T: for<'de> Deserialize<'de>>(v: Option<&Value>, what: &str) -> Result<T, TesseraError> {
    let v = v.cloned().unwrap_or_else(|| json!({}));
    tessera_core::document::from_value(v).map_err(|e| bad(format!("{what}: {e}")))
}

fn bad(message: impl Into<String>) -> TesseraError {
    TesseraError::invalid_argument(message)
}

fn network(message: impl Into<String>) -> TesseraError {
    TesseraError::Network { message: message.into() }
}

fn storage(message: impl Into<String>) -> TesseraError {
    TesseraError::Storage { message: message.into() }
}

fn directory() -> &'static RwLock<Option<PathBuf>> {
    static DIR: RwLock<Option<PathBuf>> = RwLock::new(None);
    &DIR
}

/// Sets the folder downloads go to (the React Native modules set the app's files folder; the
/// Node tests a temporary one).
pub(crate) fn set_models_directory(path: &Path) -> Result<(), TesseraError> {
    fs::create_dir_all(path)
        .map_err(|e| storage(format!("cannot create the models folder {}: {e}", path.display())))?;
    *directory().write().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
    Ok(())
}

fn models_directory() -> Result<PathBuf, TesseraError> {
    directory().read().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| {
        bad("no models folder: the native module sets it (setModelsDirectory) when it starts")
    })
}

/// The names being downloaded now (one download per name at a time).
fn active() -> MutexGuard<'static, HashSet<String>> {
    static ACTIVE: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    ACTIVE.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// `name` if it is a plain file name a model may have.
fn check_name(name: &str) -> Result<&str, TesseraError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'));
    if ok {
        Ok(name)
    } else {
        Err(bad(format!(
            "model name {name:?}: use 1 to 200 letters, digits, '.', '-', '_' or '+', not \
             starting with '.'"
        )))
    }
}

/// The file name at the end of `url`'s path, percent-decoded.
fn name_from_url(url: &str) -> Option<String> {
    let path = url.split(['?', '#']).next()?;
    let last = path.rsplit('/').next()?;
    let mut bytes = Vec::with_capacity(last.len());
    let mut it = last.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hi = it.next()?;
            let lo = it.next()?;
            let hex = |c: u8| (c as char).to_digit(16);
            bytes.push((hex(hi)? * 16 + hex(lo)?) as u8);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok().filter(|n| check_name(n).is_ok())
}

fn check_sha256(sha: &str) -> Result<String, TesseraError> {
    let s = sha.to_ascii_lowercase();
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s)
    } else {
        Err(bad(format!("sha256 must be 64 hex digits (the file's SHA-256), got {sha:?}")))
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a download is of: the note kept beside its partial file.
#[derive(Serialize, Deserialize, PartialEq, Eq, Clone, Debug)]
struct Note {
    url: String,
    sha256: String,
}

/// The paths of one model's files.
struct Files {
    done: PathBuf,
    part: PathBuf,
    part_note: PathBuf,
    meta: PathBuf,
}

impl Files {
    fn of(dir: &Path, name: &str) -> Files {
        Files {
            done: dir.join(name),
            part: dir.join(".partial").join(name),
            part_note: dir.join(".partial").join(format!("{name}.json")),
            meta: dir.join(".meta").join(format!("{name}.json")),
        }
    }
}

fn io_error(what: &str, path: &Path, e: io::Error) -> TesseraError {
    if e.kind() == io::ErrorKind::StorageFull {
        storage(format!("the disk is full ({what} {}): {e}", path.display()))
    } else {
        storage(format!("{what} {}: {e}", path.display()))
    }
}

/// Free bytes for an unprivileged writer in the file system of `dir`.
fn free_space(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DownloadParams {
    url: String,
    sha256: String,
    #[serde(default)]
    name: Option<String>,
}

/// A download's state between attempts: the partial file, its length and the hash of it.
struct Partial {
    file: File,
    len: u64,
    hasher: Sha256,
}

impl Partial {
    /// Opens the partial file of an earlier attempt at the same download (hashing what it
    /// holds), or starts an empty one.
    fn open(files: &Files, note: &Note) -> Result<Partial, TesseraError> {
        let parent = files.part.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(|e| io_error("cannot create", parent, e))?;
        let same = fs::read(&files.part_note)
            .ok()
            .and_then(|t| serde_json::from_slice::<Note>(&t).ok())
            .is_some_and(|n| &n == note);
        if same {
            if let Ok(mut file) = OpenOptions::new().read(true).append(true).open(&files.part) {
                let mut hasher = Sha256::new();
                let len = io::copy(&mut file, &mut hasher)
                    .map_err(|e| io_error("cannot read", &files.part, e))?;
                return Ok(Partial { file, len, hasher });
            }
        }
        let file =
            File::create(&files.part).map_err(|e| io_error("cannot create", &files.part, e))?;
        let text = serde_json::to_vec(note).map_err(|e| TesseraError::internal(e.to_string()))?;
        fs::write(&files.part_note, text)
            .map_err(|e| io_error("cannot write", &files.part_note, e))?;
        Ok(Partial { file, len: 0, hasher: Sha256::new() })
    }

    /// Empties it (the server sent the whole file instead of the range asked for).
    fn restart(&mut self, path: &Path) -> Result<(), TesseraError> {
        self.file.set_len(0).map_err(|e| io_error("cannot truncate", path, e))?;
        self.len = 0;
        self.hasher = Sha256::new();
        Ok(())
    }
}

/// How one attempt ended without an error.
enum Attempt {
    Complete,
    Cancelled,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// Parses `Content-Range: bytes START-END/TOTAL`: (START, TOTAL).
fn content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

/// Reads the rest of the file from the server into `partial`, reporting progress.
fn attempt(
    agent: &ureq::Agent,
    url: &str,
    dir: &Path,
    files: &Files,
    partial: &mut Partial,
    running: &requests::Running,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Attempt, TesseraError> {
    let mut req = agent.get(url);
    if partial.len > 0 {
        req = req.header("Range", format!("bytes={}-", partial.len));
    }
    let mut response = req.call().map_err(|e| network(format!("{url}: {e}")))?;
    let status = response.status().as_u16();
    let header =
        |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let length: Option<u64> = header("content-length").and_then(|v| v.trim().parse().ok());
    let total = match status {
        206 => {
            let (start, total) = header("content-range")
                .and_then(|v| content_range(&v))
                .ok_or_else(|| network(format!("{url}: a 206 answer without a Content-Range")))?;
            if start != partial.len {
                return Err(network(format!(
                    "{url}: asked for bytes from {}, the server sent them from {start}",
                    partial.len
                )));
            }
            total.or(length.map(|l| l + start))
        }
        200 => {
            if partial.len > 0 {
                partial.restart(&files.part)?;
            }
            length
        }
        416 if partial.len > 0 => {
            // Nothing left to send: the partial file holds the whole file (checked by hash).
            return Ok(Attempt::Complete);
        }
        _ => return Err(network(format!("{url}: HTTP {status}"))),
    };
    if let (Some(total), Some(free)) = (total, free_space(dir)) {
        let needed = total.saturating_sub(partial.len);
        if needed.saturating_add(FREE_SPACE_MARGIN) > free {
            return Err(storage(format!(
                "not enough free space for {url}: {needed} more bytes needed (and {} MiB to \
                 spare), {free} free in {}",
                FREE_SPACE_MARGIN >> 20,
                dir.display()
            )));
        }
    }
    progress(partial.len, total);
    let mut body = response.body_mut().as_reader();
    let mut buffer = vec![0u8; CHUNK];
    loop {
        if running.cancelled() {
            return Ok(Attempt::Cancelled);
        }
        let n = match body.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(network(format!(
                    "{url}: the connection failed after {} bytes: {e}",
                    partial.len
                )))
            }
        };
        partial
            .file
            .write_all(&buffer[..n])
            .map_err(|e| io_error("cannot write", &files.part, e))?;
        partial.hasher.update(&buffer[..n]);
        partial.len += n as u64;
        progress(partial.len, total);
    }
    if let Some(total) = total {
        if partial.len != total {
            return Err(network(format!(
                "{url}: the connection ended after {} of {total} bytes",
                partial.len
            )));
        }
    }
    Ok(Attempt::Complete)
}

/// Removes a download's partial file and its note.
fn remove_partial(files: &Files) {
    let _ = fs::remove_file(&files.part);
    let _ = fs::remove_file(&files.part_note);
}

fn download(request: &Map<String, Value>) -> Reply {
    let p: DownloadParams = params(request.get("params"), "downloadModel params")?;
    let sha256 = check_sha256(&p.sha256)?;
    let url = p.url.trim().to_string();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(bad(format!("downloadModel: {url:?} is not an http(s) URL")));
    }
    if url.starts_with("https://") && !cfg!(feature = "https") {
        return Err(bad(format!(
            "downloadModel: {url}: this build of the native library has no TLS (tessera-ffi's \
             https feature is off)"
        )));
    }
    let name = match &p.name {
        Some(n) => check_name(n)?.to_string(),
        None => name_from_url(&url).ok_or_else(|| {
            bad(format!("downloadModel: no file name in {url:?}: give one with the name option"))
        })?,
    };
    let dir = models_directory()?;
    let rid = request.get("requestId").cloned().unwrap_or(Value::Null);
    let running = requests::register(&rid);
    if !active().insert(name.clone()) {
        return Err(bad(format!("downloadModel: {name} is already being downloaded")));
    }
    struct Release(String);
    impl Drop for Release {
        fn drop(&mut self) {
            active().remove(&self.0);
        }
    }
    let _release = Release(name.clone());

    let files = Files::of(&dir, &name);
    if files.done.exists() {
        return Err(bad(format!(
            "downloadModel: {name} is already downloaded ({}): delete it first",
            files.done.display()
        )));
    }
    let note = Note { url: url.clone(), sha256: sha256.clone() };
    let mut partial = Partial::open(&files, &note)?;
    let agent = agent();
    // Progress events at most every 1/200 of the file or 4 MiB, and the last one.
    let mut last_sent: Option<u64> = None;
    let mut progress = |received: u64, total: Option<u64>| {
        let step = total.map_or(4 << 20, |t| (t / 200).clamp(64 << 10, 4 << 20));
        let due = match last_sent {
            None => true,
            Some(at) => received >= at + step || Some(received) == total,
        };
        if due {
            last_sent = Some(received);
            emit(
                &json!({"type": "downloadProgress", "requestId": rid, "received": received, "total": total}),
            );
        }
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let before = partial.len;
        match attempt(&agent, &url, &dir, &files, &mut partial, &running, &mut progress) {
            Ok(Attempt::Complete) => break,
            Ok(Attempt::Cancelled) => {
                return Err(TesseraError::Cancelled {
                    message: format!(
                        "downloadModel: {name} cancelled after {} bytes (asking again resumes it)",
                        partial.len
                    ),
                })
            }
            // A cut connection that had made progress is resumed at once.
            Err(TesseraError::Network { message }) if tries < ATTEMPTS && partial.len > before => {
                log::warn!("{message}; resuming");
            }
            Err(e) => return Err(e),
        }
    }
    partial.file.sync_all().map_err(|e| io_error("cannot sync", &files.part, e))?;
    let got = hex(&std::mem::take(&mut partial.hasher).finalize());
    let size = partial.len;
    drop(partial);
    if got != sha256 {
        remove_partial(&files);
        return Err(TesseraError::InvalidModel {
            message: format!(
                "{url}: the file's SHA-256 is {got}, not the {sha256} asked for; it was deleted"
            ),
        });
    }
    let meta_dir = files.meta.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(meta_dir).map_err(|e| io_error("cannot create", meta_dir, e))?;
    let text = serde_json::to_vec(&note).map_err(|e| TesseraError::internal(e.to_string()))?;
    fs::write(&files.meta, text).map_err(|e| io_error("cannot write", &files.meta, e))?;
    fs::rename(&files.part, &files.done).map_err(|e| io_error("cannot rename", &files.part, e))?;
    let _ = fs::remove_file(&files.part_note);
    Ok(model_json(&name, &files.done, size, Some(&note)))
}

fn model_json(name: &str, path: &Path, size: u64, note: Option<&Note>) -> Value {
    json!({
        "name": name,
        "path": path.to_string_lossy(),
        "size": size,
        "sha256": note.map(|n| n.sha256.clone()),
        "url": note.map(|n| n.url.clone()),
    })
}

fn list() -> Reply {
    let dir = models_directory()?;
    let mut models = Vec::new();
    let entries = fs::read_dir(&dir).map_err(|e| io_error("cannot read", &dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let note = fs::read(Files::of(&dir, &name).meta)
            .ok()
            .and_then(|t| serde_json::from_slice::<Note>(&t).ok());
        models.push(model_json(&name, &entry.path(), meta.len(), note.as_ref()));
    }
    models.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(json!({"directory": dir.to_string_lossy(), "models": models}))
}

fn delete(request: &Map<String, Value>) -> Reply {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct DeleteParams {
        name: String,
    }
    let p: DeleteParams = params(request.get("params"), "deleteModel params")?;
    let name = check_name(&p.name)?;
    let dir = models_directory()?;
    if active().contains(name) {
        return Err(bad(format!("deleteModel: {name} is being downloaded: cancel it first")));
    }
    let files = Files::of(&dir, name);
    let existed = files.done.exists() || files.part.exists();
    for path in [&files.done, &files.part, &files.part_note, &files.meta] {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("cannot delete", path, e)),
        }
    }
    Ok(json!({"deleted": existed}))
}

/// Handles `method` if it is a download method; `None` otherwise.
pub(crate) fn dispatch(method: &str, request: &Map<String, Value>) -> Option<Reply> {
    let keys: &[&str] = match method {
        "downloadModel" => &["method", "params", "requestId"],
        "listModels" => &["method"],
        "deleteModel" | "setModelsDirectory" => &["method", "params"],
        _ => return None,
    };
    if let Some(k) = request.keys().find(|k| !keys.contains(&k.as_str())) {
        return Some(Err(bad(format!(
            "{method} request: unknown key {k:?} (known: {})",
            keys.join(", ")
        ))));
    }
    Some(match method {
        "downloadModel" => download(request),
        "listModels" => list(),
        "deleteModel" => delete(request),
        _ => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct DirParams {
                path: String,
            }
            params::<DirParams>(request.get("params"), "setModelsDirectory params").and_then(|p| {
                set_models_directory(Path::new(&p.path)).map(|()| json!({"path": p.path}))
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_urls_are_plain_file_names() {
        assert_eq!(
            name_from_url("https://h.example/x/gemma-3-270m-Q4_K_M.gguf?download=true").as_deref(),
            Some("gemma-3-270m-Q4_K_M.gguf")
        );
        assert_eq!(name_from_url("https://h.example/a%20b.gguf"), None);
        assert_eq!(name_from_url("https://h.example/m%2Bx.gguf").as_deref(), Some("m+x.gguf"));
        assert_eq!(name_from_url("https://h.example/"), None);
        assert_eq!(name_from_url("https://h.example/..%2Fetc"), None);
        assert!(check_name(".hidden").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name("..").is_err());
    }

    #[test]
    fn content_ranges_parse() {
        assert_eq!(content_range("bytes 100-199/200"), Some((100, Some(200))));
        assert_eq!(content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(content_range("items 1-2/3"), None);
    }

    #[test]
    fn a_full_disk_while_writing_is_a_storage_error() {
        let e =
            io_error("cannot write", Path::new("/m"), io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!(e.kind(), "Storage");
        assert!(e.message().contains("the disk is full"), "{}", e.message());
    }

    #[test]
    fn sha256_must_be_64_hex_digits() {
        assert!(check_sha256(&"A".repeat(64)).is_ok());
        assert!(check_sha256("abc").is_err());
        assert!(check_sha256(&"g".repeat(64)).is_err());
    }
}
