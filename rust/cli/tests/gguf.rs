//! `tessera gguf`: text and JSON reports of a small hand-written file.

use tessera_cli::gguf;

fn string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// GGUF v3: `general.architecture` = "t", `n` = u32 7, `eps` = f32 1e-6, `ids` = 100 i32s,
/// `nested` = [[1u8], ["s"]]; one Q8_0 tensor "w" of [64, 2] at offset 0.
fn small_file() -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&5u64.to_le_bytes());
    string(&mut b, "general.architecture");
    b.extend_from_slice(&8u32.to_le_bytes());
    string(&mut b, "t");
    string(&mut b, "n");
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(&7u32.to_le_bytes());
    string(&mut b, "eps");
    b.extend_from_slice(&6u32.to_le_bytes());
    b.extend_from_slice(&1e-6f32.to_le_bytes());
    string(&mut b, "ids");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&5u32.to_le_bytes());
    b.extend_from_slice(&100u64.to_le_bytes());
    for i in 0..100i32 {
        b.extend_from_slice(&(i * 3).to_le_bytes());
    }
    string(&mut b, "nested");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&2u64.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(1);
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    string(&mut b, "s");
    string(&mut b, "w");
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&64u64.to_le_bytes());
    b.extend_from_slice(&2u64.to_le_bytes());
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.resize(b.len().next_multiple_of(32), 0);
    b.extend(std::iter::repeat_n(0x11, 4 * 34));
    b
}

/// Writes the small file under a name of its own per call (tests run in parallel threads).
fn write_small() -> (std::path::PathBuf, String) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("cli_gguf_{}_{n}.gguf", std::process::id()));
    std::fs::write(&path, small_file()).unwrap();
    let s = path.to_str().unwrap().to_string();
    (path, s)
}

#[test]
fn text_report_lists_metadata_and_tensors() {
    let (path, p) = write_small();
    let out = gguf::run(std::slice::from_ref(&p)).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(out.starts_with(&format!("{p}: GGUF version 3\n")), "{out}");
    let line = |start: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("general.architecture"), "general.architecture STRING \"t\"");
    assert_eq!(line("n "), "n UINT32 7");
    assert_eq!(line("eps"), "eps FLOAT32 1e-6");
    assert_eq!(line("ids"), "ids ARRAY[100] of INT32 [0, 3, 6, 9, 12, 15, 18, 21], ...");
    assert_eq!(line("nested"), "nested ARRAY[2] of ARRAY [[1], [\"s\"]]");
    assert_eq!(line("w "), "w Q8_0 [64, 2] 136 0");
    assert_eq!(line("1 tensors"), "1 tensors, 136 bytes");
}

#[test]
fn json_report_has_the_documented_keys() {
    let (path, p) = write_small();
    let out = gguf::run(&[p.clone(), "--json".into()]).unwrap();
    let full = gguf::run(&["--json".into(), "--full".into(), p.clone()]).unwrap();
    let _ = std::fs::remove_file(&path);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["file"], p.as_str());
    assert_eq!(j["version"], 3);
    assert_eq!(j["alignment"], 32);
    assert_eq!(j["file_size"].as_u64().unwrap() as usize, small_file().len());
    assert_eq!(j["data_offset"].as_u64().unwrap() as usize, small_file().len() - 136);
    let m = j["metadata"].as_array().unwrap();
    let keys: Vec<&str> = m.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["general.architecture", "n", "eps", "ids", "nested"]);
    assert_eq!(m[1]["type"], "UINT32");
    assert_eq!(m[1]["value"], 7);
    assert_eq!(m[2]["value"].as_f64().unwrap(), f64::from(1e-6f32));
    assert_eq!((m[3]["element_type"].as_str(), m[3]["len"].as_u64()), (Some("INT32"), Some(100)));
    assert_eq!(m[3]["value"].as_array().unwrap().len(), gguf::JSON_ARRAY_ITEMS);
    assert_eq!(m[3]["value"][10], 30);
    assert_eq!(m[3]["truncated"], true);
    assert_eq!(m[4]["value"], serde_json::json!([[1], ["s"]]));
    assert_eq!(m[4]["truncated"], false);
    let t = &j["tensors"][0];
    assert_eq!(
        t,
        &serde_json::json!({"name": "w", "type": "Q8_0", "shape": [64, 2], "bytes": 136, "offset": 0})
    );
    let jf: serde_json::Value = serde_json::from_str(&full).unwrap();
    assert_eq!(jf["metadata"][3]["value"].as_array().unwrap().len(), 100);
    assert_eq!(jf["metadata"][3]["truncated"], false);
}

#[test]
fn errors_name_the_problem() {
    assert!(gguf::run(&[]).unwrap_err().contains("usage"));
    assert!(gguf::run(&["--bogus".into()]).unwrap_err().contains("--bogus"));
    let e = gguf::run(&["/nonexistent/x.gguf".into()]).unwrap_err();
    assert!(e.contains("cannot open /nonexistent/x.gguf"), "{e}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("cli_gguf_bad_{}.gguf", std::process::id()));
    let mut b = small_file();
    b.truncate(30);
    std::fs::write(&path, b).unwrap();
    let e = gguf::run(&[path.to_str().unwrap().into()]).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains("metadata entry count at byte 16"), "{e}");
}

/// A FIFO blocked `tessera gguf` (and `tessera run`) in `open` forever (issue 39): it is refused
/// at once, as are devices, saying what the path is.
#[test]
#[cfg(unix)]
fn paths_that_are_not_files_are_refused_at_once() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_gguf_fifo_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.gguf");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (tx, rx) = std::sync::mpsc::channel();
    let arg = fifo.to_string_lossy().into_owned();
    std::thread::spawn(move || {
        let _ = tx.send(gguf::run(&[arg]));
    });
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("tessera gguf of a FIFO answers within 10 s")
        .unwrap_err();
    assert!(e.contains("is a FIFO (named pipe), not a model file"), "{e}");
    let e = gguf::run(&["/dev/zero".into()]).unwrap_err();
    assert!(e.contains("/dev/zero is a character device"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
