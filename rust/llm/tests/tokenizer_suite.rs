//! llama.cpp's own tokenizer test suite, `test-tokenizer-0`, run as llama.cpp's CI runs it: every
//! vocabulary its `tests/CMakeLists.txt` lists (vocab-only GGUF files, no tensors) tokenizes every
//! string of its `.inp` file, with add-special and parse-special off, into exactly the ids of its
//! `.out` file. The files come from the llama-cpp-python 0.3.36 source package on PyPI, unpacked
//! by scripts/setup.sh into `target/llama-tokenizer-suite` (see [`common::llama_suite_dir`]);
//! they are read as they are, split and parsed as `tests/test-tokenizer-0.cpp` does.

mod common;

use std::path::Path;

use serde_json::Value;
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

/// Where the file names no end-of-turn token and several tokens have an end-of-turn text,
/// llama.cpp takes the first its `std::unordered_map` of token texts iterates to (an order of the
/// C++ library: libstdc++ here, libc++ on Android and Apple); Tessera takes the lowest id. On
/// these vocabularies the two differ (vocabulary, llama.cpp's, Tessera's): `<|end|>` against
/// `<|endoftext|>`, `<|im_end|>` against `<|endoftext|>`; both end generation either way, which
/// `check_vocab` checks for every id.
const EOT_BY_HASH_ORDER: [(&str, u32, u32); 2] =
    [("ggml-vocab-phi-3.gguf", 32007, 32000), ("ggml-vocab-qwen35.gguf", 151645, 151643)];

/// Beyond the suite's strings: for the suite's vocabularies whose tokenizer no other fixture
/// covers (WordPiece, Gemma 4, DeepSeek LLM and Coder, Falcon, Qwen 3.5, and Phi-3's special
/// tokens that take the whitespace after them), llama.cpp's ids of 375 texts (the tokenizer
/// corpus and seeded random strings of tricky code points) with add-special and parse-special
/// both off and both on, its decodes of them, its special ids and flags, end-of-generation ids
/// and every token's piece (tests/fixtures/tokenizer-suite.json, recorded by record.py).
#[test]
fn suite_vocabularies_match_llama_cpp_beyond_the_suite() {
    let fx = common::fixture("tokenizer-suite.json");
    let dir = common::llama_suite_dir().join("models");
    let texts: Vec<&str> =
        fx["texts"].as_array().expect("texts").iter().map(|t| t.as_str().expect("text")).collect();
    let vocabs = fx["vocabs"].as_object().expect("vocabs");
    assert_eq!(vocabs.len(), 7);
    for (name, v) in vocabs {
        let path = dir.join(name);
        assert_eq!(
            common::sha256_file(&path),
            v["model_sha256"].as_str().unwrap(),
            "{name}: not the file the fixture was recorded from"
        );
        let tok = Tokenizer::from_gguf(&GgufFile::open(&path).expect("open")).expect(name);
        let mut want_vocab = v["vocab"].clone();
        if let Some(&(_, llama, ours)) = EOT_BY_HASH_ORDER.iter().find(|e| e.0 == name) {
            assert_eq!(want_vocab["eot"], llama, "{name}: llama.cpp's end of turn");
            want_vocab["eot"] = ours.into();
        }
        common::check_vocab(&tok, &want_vocab, name);
        assert_eq!(tok.sep(), v["vocab"]["sep"].as_u64().map(|x| x as u32), "{name}: sep");
        assert_eq!(tok.add_sep(), v["vocab"]["add_sep"].as_bool().unwrap(), "{name}: add_sep");
        let mut failures = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            for (key, decode_key, on) in
                [("ff", "decode_ff", false), ("tt", "decode_tt_special", true)]
            {
                let want = common::ids(&v[key][i]);
                let got = tok.encode(text, on, on);
                if got != want {
                    failures
                        .push(format!("{key} {text:?}\n  llama.cpp {want:?}\n  tessera   {got:?}"));
                }
                // null: the text itself
                let d = &v[decode_key][i];
                let want = if d.is_null() { Value::from(*text) } else { d.clone() };
                let ids = common::ids(&v[key][i]);
                let what = format!("{decode_key} {text:?}");
                common::check_decode(&tok, &ids, on, &want, &what, &mut failures);
            }
        }
        assert!(
            failures.is_empty(),
            "{name}: {} of {} comparisons differ from llama.cpp:\n{}",
            failures.len(),
            texts.len() * 4,
            failures[..failures.len().min(20)].join("\n")
        );
    }
}
