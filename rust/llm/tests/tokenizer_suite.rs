//! llama.cpp's own tokenizer test suite, `test-tokenizer-0`, run as llama.cpp's CI runs it: every
//! vocabulary its `tests/CMakeLists.txt` lists (vocab-only GGUF files, no tensors) tokenizes every
//! string of its `.inp` file, with add-special and parse-special off, into exactly the ids of its
//! `.out` file. The files come from the llama-cpp-python 0.3.36 source package on PyPI, unpacked
//! by scripts/setup.sh into `target/llama-tokenizer-suite` (see [`common::llama_suite_dir`]);
//! they are read as they are, split and parsed as `tests/test-tokenizer-0.cpp` does.

mod common;

use std::path::Path;

use tessera_gguf::GgufFile;
use tessera_llm::tokenizer::Tokenizer;

/// The vocabularies `test-tokenizer-0` runs on, from the suite's `tests/CMakeLists.txt` lines
/// `llama_test(test-tokenizer-0 NAME ... ARGS ${PROJECT_SOURCE_DIR}/models/<file>)`.
fn suite_vocabs(dir: &Path) -> Vec<String> {
    let cmake = std::fs::read_to_string(dir.join("tests/CMakeLists.txt")).expect("CMakeLists.txt");
    cmake
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("llama_test(test-tokenizer-0 "))
        .map(|l| {
            let file = l.split("/models/").nth(1).expect("a models/ path");
            file.trim_end_matches(')').trim().to_string()
        })
        .collect()
}

/// The (text, ids) pairs of `<vocab>.inp` / `<vocab>.out`, as `read_tests` in
/// test-tokenizer-0.cpp reads them: inputs separated by "\n__ggml_vocab_test__\n" (a separator at
/// the very end starts no input), one output line per input, ids separated by spaces.
fn read_tests(vocab: &Path) -> Vec<(String, Vec<u32>)> {
    let with = |ext: &str| {
        let mut p = vocab.as_os_str().to_owned();
        p.push(ext);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", Path::new(&p).display()))
    };
    let raw = with(".inp");
    let out = with(".out");
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(SEP) {
            Some(i) => {
                inputs.push(raw[pos..pos + i].to_string());
                pos += i + SEP.len();
            }
            None => {
                inputs.push(raw[pos..].to_string());
                break;
            }
        }
    }
    let outputs: Vec<&str> = out.lines().collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{}: inputs and outputs differ in number",
        vocab.display()
    );
    inputs
        .into_iter()
        .zip(outputs)
        .map(|(text, line)| {
            let ids = line
                .split_ascii_whitespace()
                .map(|t| t.parse().unwrap_or_else(|e| panic!("{line:?}: {e}")))
                .collect();
            (text, ids)
        })
        .collect()
}

#[test]
fn every_vocabulary_of_test_tokenizer_0_gives_llama_cpps_ids() {
    let dir = common::llama_suite_dir();
    let vocabs = suite_vocabs(&dir);
    assert_eq!(vocabs.len(), 15, "test-tokenizer-0 lists {vocabs:?}");
    let mut report = Vec::new();
    let mut failed = Vec::new();
    for name in &vocabs {
        let path = dir.join("models").join(name);
        let tests = read_tests(&path);
        assert!(!tests.is_empty(), "{name}: no tests");
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(file.tensors().is_empty(), "{name} is vocab-only");
        let tok = match Tokenizer::from_gguf(&file) {
            Ok(t) => t,
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut ok = 0;
        for (text, want) in &tests {
            let got = tok.encode(text, false, false);
            if &got == want {
                ok += 1;
            } else {
                failed.push(format!("{name}: {text:?}\n  want {want:?}\n  got  {got:?}"));
            }
        }
        report.push(format!("{name}: {ok} of {}", tests.len()));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
}
