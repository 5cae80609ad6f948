//! Paths that are not model files (issue 39, finding 2) and files changed after they were mapped
//! (finding 1): FIFOs, devices, directories and /proc files are refused at once with what they
//! are; a mapped file truncated or written to is reported by `check_unchanged`.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};
use tessera_gguf::{GgufError, GgufFile};

/// A directory of this test's own under the target's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gguf_special_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `GgufFile::open(path)` on another thread: its result, or a failure if it has not returned
/// within 10 s (a blocking open would hang the test otherwise).
fn open_promptly(path: &Path) -> Result<GgufFile, GgufError> {
    let (tx, rx) = mpsc::channel();
    let p = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(GgufFile::open(&p));
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("opening {} blocked for 10 s", path.display()))
}

#[track_caller]
fn expect_not_regular(path: &Path, what: &str) {
    match open_promptly(path) {
        Err(e @ GgufError::NotRegular { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(what), "{text} should say {what:?}");
            assert!(text.contains("not a model file"), "{text}");
        }
        other => panic!("{}: {other:?}", path.display()),
    }
}

/// The smallest valid GGUF file: no metadata, no tensors.
fn empty_gguf() -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b
}

#[test]
#[cfg(unix)]
fn a_fifo_is_refused_without_blocking() {
    let dir = scratch("fifo");
    let fifo = dir.join("model.gguf");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    // No writer: a plain open for reading would wait for one forever.
    expect_not_regular(&fifo, "a FIFO (named pipe)");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg(unix)]
fn devices_and_directories_are_refused_as_what_they_are() {
    expect_not_regular(Path::new("/dev/zero"), "a character device");
    expect_not_regular(Path::new("/dev/null"), "a character device");
    let dir = scratch("dir");
    expect_not_regular(&dir, "a directory");
    // A link to a device is the device.
    let link = dir.join("zero.gguf");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    expect_not_regular(&link, "a character device");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg(any(target_os = "linux", target_os = "android"))]
fn proc_files_are_refused_and_proc_fd_links_to_files_are_not() {
    expect_not_regular(Path::new("/proc/self/status"), "/proc file system (procfs)");
    expect_not_regular(Path::new("/proc/cpuinfo"), "/proc file system (procfs)");
    if Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        expect_not_regular(
            Path::new("/sys/kernel/mm/transparent_hugepage/enabled"),
            "/sys file system (sysfs)",
        );
    }
    // Android's content URIs reach a file on disk as /proc/self/fd/N: that is the file.
    use std::os::fd::AsRawFd;
    let dir = scratch("procfd");
    let path = dir.join("model.gguf");
    std::fs::write(&path, empty_gguf()).unwrap();
    let fd = std::fs::File::open(&path).unwrap();
    let f = GgufFile::open(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    assert!(f.is_mapped());
    assert_eq!(f.bytes(), &empty_gguf()[..]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_truncated_or_written_after_mapping_is_reported() {
    let dir = scratch("changed");
    let path = dir.join("model.gguf");
    let mut bytes = empty_gguf();
    bytes.resize(4096, 0);
    std::fs::write(&path, &bytes).unwrap();

    // Truncated in place (what a download that rewrites the same path does first).
    let f = GgufFile::open(&path).unwrap();
    f.check_unchanged().unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(100).unwrap();
    let e = f.check_unchanged().unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, GgufError::Changed { .. }), "{e:?}");
    assert!(text.contains("changed on disk after it was loaded"), "{text}");
    assert!(text.contains("its size went from 4096 to 100 bytes"), "{text}");
    assert!(text.contains("load it again"), "{text}");
    drop(f);

    // Written in place at the same size: the modification time tells (set explicitly, since
    // the clock of file times can be coarser than the time between two writes).
    std::fs::write(&path, &bytes).unwrap();
    let f = GgufFile::open(&path).unwrap();
    f.check_unchanged().unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() + Duration::from_secs(5)).unwrap();
    let e = f.check_unchanged().unwrap_err();
    assert!(e.to_string().contains("its modification time changed"), "{e}");
    drop(f);

    // Replaced by a rename (how downloads finish): the mapping keeps the old file, unchanged.
    std::fs::write(&path, &bytes).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let other = dir.join("new.gguf");
    std::fs::write(&other, empty_gguf()).unwrap();
    std::fs::rename(&other, &path).unwrap();
    f.check_unchanged().unwrap();
    assert_eq!(f.bytes(), &bytes[..]);

    // Bytes held in memory never change.
    GgufFile::from_bytes(empty_gguf()).unwrap().check_unchanged().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
