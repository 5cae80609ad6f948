//! `tessera bench model --profile` on Gemma 3 270M: the per-op tables count the nodes that the
//! architecture has per token (an independent count: 18 layers, each with six RMS norms, Q / K /
//! V / output projections and a gated FFN; one output norm and one output layer), and their
//! times add up to the decode call's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The model: `TESSERA_GEMMA_GGUF`, else target/models/gemma3-270m-q4_k_m.gguf.
fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_GEMMA_GGUF").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/gemma3-270m-q4_k_m.gguf")
}

/// The row of `op` in the table that follows `heading`: (nodes per decode, us per decode).
fn row(out: &str, heading: &str, op: &str) -> (f64, f64) {
    let table = out.split(heading).nth(1).unwrap_or_else(|| panic!("no {heading:?} in:\n{out}"));
    let line = table
        .lines()
        .take_while(|l| !l.starts_with("decode call"))
        .find(|l| l.starts_with(&format!("| {op} |")))
        .unwrap_or_else(|| panic!("no row {op:?} under {heading:?} in:\n{out}"));
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    let nodes = cells[2].parse().unwrap_or(0.0);
    (nodes, cells[3].parse().unwrap())
}

/// The MUL_MAT nodes per decode with weights of `shape` (any type) in the table after `heading`.
fn mul_mats(out: &str, heading: &str, shape: &str) -> f64 {
    let table = out.split(heading).nth(1).unwrap();
    table
        .lines()
        .take_while(|l| !l.starts_with("decode call"))
        .filter(|l| {
            l.starts_with("| MUL_MAT ") && l.split('|').nth(1).unwrap().trim().ends_with(shape)
        })
        .map(|l| l.split('|').nth(2).unwrap().trim().parse::<f64>().unwrap())
        .sum()
}

/// The `decode call: X us per ...` line after `heading`.
fn wall(out: &str, heading: &str) -> f64 {
    let rest = out.split(heading).nth(1).unwrap();
    let line = rest.lines().find(|l| l.starts_with("decode call: ")).unwrap();
    line["decode call: ".len()..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn gemma_3_profile_counts_the_architectures_nodes() {
    let path = gemma_path();
    assert!(path.is_file(), "the test model {} is missing (see rust/gguf/tests)", path.display());
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["bench", "model", path.to_str().unwrap(), "-p", "16", "-n", "3", "-r", "1"])
        .args(["-t", "2", "--no-warmup", "--profile", "--device", "cpu"])
        .output()
        .expect("tessera runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for heading in ["profile, pp16, 2 thread(s):", "profile, tg3, 2 thread(s):"] {
        // 18 layers x (attention norm, Q norm, K norm, post-attention norm, FFN norm,
        // post-FFN norm) + the output norm.
        assert_eq!(row(&text, heading, "RMS_NORM").0, 109.0, "{heading}");
        assert_eq!(row(&text, heading, "FLASH_ATTN_EXT").0, 18.0, "{heading}");
        // The products by shape (K x M of the weights), whatever their types: Q (640 -> 4
        // heads of 256), K and V (640 -> 256), the attention output (1024 -> 640), the FFN's gate
        // and up (640 -> 2048) and down (2048 -> 640), and the output layer (tied to the
        // 262144-token embedding) once per decode.
        for (shape, nodes) in [
            ("640x1024", 18.0),
            ("640x256", 36.0),
            ("1024x640", 18.0),
            ("640x2048", 36.0),
            ("2048x640", 18.0),
            ("640x262144", 1.0),
        ] {
            assert_eq!(mul_mats(&text, heading, shape), nodes, "{heading} {shape}");
        }
        // The node times add up to the decode call (the logits read and the inputs are outside
        // the nodes, a small part of a decode).
        let (_, all) = row(&text, heading, "all");
        let call = wall(&text, heading);
        assert!(all <= call && all > 0.5 * call, "{heading}: nodes {all} us, call {call} us");
    }
}
