//! The tokenizers against llama.cpp's own outputs (recorded by tests/fixtures/record.py with
//! llama-cpp-python 0.3.36): every string of a 255-string corpus gives the same ids for every
//! (add_special, parse_special), the same detokenized text, the same piece for every token id,
//! the same special and end-of-generation ids; for Gemma 3 (SentencePiece), the tiny models'
//! GPT-2 vocabulary with the llama-bpe, qwen2, gpt-2, default and starcoder pre-tokenizers, and
//! Gemma's vocabulary with add_space_prefix (as Llama 2 has it).

mod common;

use std::sync::OnceLock;

use common::{check_decode, check_vocab, fixture, gemma_path, ids, tiny_model};
use serde_json::Value;
use tessera_gguf::GgufFile;
use tessera_llm::tokenizer::{
    PreTokenizer, StreamDecoder, TokenType, Tokenizer, TokenizerError, Vocab,
};

fn gemma_vocab() -> &'static Vocab {
    static V: OnceLock<Vocab> = OnceLock::new();
    V.get_or_init(|| {
        Vocab::from_gguf(&GgufFile::open(gemma_path()).expect("open Gemma")).expect("Gemma vocab")
    })
}

fn gemma() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        Tokenizer::from_gguf(&GgufFile::open(gemma_path()).expect("open Gemma")).expect("Gemma")
    })
}

fn tiny_vocab(name: &str) -> Vocab {
    Vocab::from_gguf(&GgufFile::open(tiny_model(name)).expect("open tiny model"))
        .expect("tiny vocab")
}

fn tiny(name: &str) -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(tiny_model(name)).expect("open tiny model"))
        .expect("tiny tokenizer")
}

const COMBOS: [(&str, bool, bool); 4] =
    [("FF", false, false), ("FT", false, true), ("TF", true, false), ("TT", true, true)];

/// Every case of a tokenizer fixture: ids for every recorded flag combination and the recorded
/// decodes. Returns how many comparisons were made.
fn check_corpus(tok: &Tokenizer, fx: &Value, label: &str) -> usize {
    let mut n = 0;
    let mut failures = Vec::new();
    for case in fx["cases"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        for (key, add_special, parse_special) in COMBOS {
            let Some(want) = case["ids"].get(key) else { continue };
            let want = ids(want);
            let got = tok.encode(text, add_special, parse_special);
            n += 1;
            if got != want {
                failures
                    .push(format!("{key} {text:?}\n   llama.cpp {want:?}\n   tessera   {got:?}"));
            }
        }
        for (key, ids_key, special) in [
            ("decode_ff", "FF", false),
            ("decode_tt", "TT", false),
            ("decode_tt_special", "TT", true),
        ] {
            let Some(want) = case.get(key) else { continue };
            let ids = ids(&case["ids"][ids_key]);
            n += 1;
            check_decode(tok, &ids, special, want, &format!("{key} {text:?}"), &mut failures);
        }
    }
    assert!(
        failures.is_empty(),
        "{label}: {} of {n} comparisons differ from llama.cpp:\n{}",
        failures.len(),
        failures.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    n
}

#[test]
fn gemma_spm_matches_llama_cpp() {
    let fx = fixture("tokenizer-gemma3.json");
    assert_eq!(
        common::sha256_file(&gemma_path()),
        fx["model_sha256"].as_str().unwrap(),
        "not the recorded Gemma file"
    );
    let tok = gemma();
    check_vocab(tok, &fx["vocab"], "gemma3");
    let n = check_corpus(tok, &fx, "gemma3");
    assert!(n >= 250 * 7, "{n}");
}

#[test]
fn gemma_with_space_prefix_matches_llama_cpp() {
    // Llama 2, TinyLlama and Mistral's SentencePiece vocabularies put a space before the text and
    // after every special token: Gemma's vocabulary with the flag on, recorded from llama.cpp
    let mut vocab = gemma_vocab().clone();
    vocab.add_space_prefix = true;
    let tok = Tokenizer::from_vocab(vocab).unwrap();
    check_corpus(&tok, &fixture("tokenizer-gemma3-space-prefix.json"), "gemma3 + add_space_prefix");
    // what llama.cpp does with it: " " goes before the text; decoding drops one leading space,
    // except after BOS (whose piece is empty, and the space then stays)
    assert_eq!(tok.encode("hello", false, false), [tok.token_id("▁hello").unwrap()]);
    assert_eq!(tok.decode(&tok.encode("hello", false, false), false).unwrap(), "hello");
    assert_eq!(tok.decode(&tok.encode("hello", true, false), false).unwrap(), " hello");
    assert_eq!(tok.decode(&tok.encode(" hello", false, false), false).unwrap(), " hello");
}

#[test]
fn tiny_llama_bpe_matches_llama_cpp() {
    let fx = fixture("tokenizer-tiny-llama.json");
    let tok = tiny("tiny-llama");
    check_vocab(&tok, &fx["vocab"], "tiny-llama");
    check_corpus(&tok, &fx, "tiny-llama (llama-bpe)");
}

#[test]
fn tiny_qwen2_bpe_matches_llama_cpp() {
    let fx = fixture("tokenizer-tiny-qwen2.json");
    let tok = tiny("tiny-qwen2");
    check_vocab(&tok, &fx["vocab"], "tiny-qwen2");
    check_corpus(&tok, &fx, "tiny-qwen2 (qwen2)");
}

#[test]
fn other_bpe_pre_tokenizers_match_llama_cpp() {
    for pre in ["gpt-2", "default", "starcoder"] {
        let mut vocab = tiny_vocab("tiny-llama");
        vocab.pre = PreTokenizer::bpe(pre).unwrap();
        let tok = Tokenizer::from_vocab(vocab).unwrap();
        check_corpus(&tok, &fixture(&format!("tokenizer-tiny-llama-{pre}.json")), pre);
    }
}

#[test]
fn model_prompts_and_end_of_generation_match_llama_cpp() {
    // the prompts the model fixtures were recorded with (add_special and parse_special true),
    // which also covers tiny-qwen3's vocabulary (EOS <|im_end|>)
    let tinies: Vec<Tokenizer> = ["tiny-llama", "tiny-qwen2", "tiny-qwen3"].map(tiny).into();
    let models = [
        ("gemma3", gemma()),
        ("tiny-llama", &tinies[0]),
        ("tiny-qwen2", &tinies[1]),
        ("tiny-qwen3", &tinies[2]),
    ];
    for (name, tok) in models {
        let fx = fixture(&format!("model-{name}.json"));
        assert_eq!(tok.eog_tokens(), &ids(&fx["eog"])[..], "{name}: end-of-generation ids");
        for run in fx["runs"].as_array().unwrap() {
            let prompt = run["prompt"].as_str().unwrap();
            assert_eq!(tok.encode(prompt, true, true), ids(&run["ids"]), "{name}: {prompt:?}");
        }
    }
    let q3 = &tinies[2];
    assert_eq!(q3.eos(), q3.token_id("<|im_end|>"));
    assert!(
        q3.is_eog(q3.token_id("<|endoftext|>").unwrap())
            && q3.is_eog(q3.token_id("<|im_end|>").unwrap())
    );
    assert!(!q3.is_eog(q3.token_id("<|im_start|>").unwrap()));
}

#[test]
fn gemma_end_of_generation_includes_end_of_turn_and_the_s_tag() {
    let tok = gemma();
    let id = |t: &str| tok.token_id(t).unwrap_or_else(|| panic!("{t} not in Gemma's vocabulary"));
    assert!(tok.is_eog(id("<eos>")) && tok.is_eog(id("<end_of_turn>")));
    assert_eq!(tok.eot(), Some(id("<end_of_turn>")));
    // llama.cpp lists "</s>" as ending generation; in Gemma 3 it is the strikethrough tag
    assert!(tok.is_eog(id("</s>")));
    assert!(
        !tok.is_eog(id("<start_of_turn>")) && !tok.is_eog(id("<bos>")) && !tok.is_eog(id("<s>"))
    );
    assert_eq!(tok.token_text(id("<end_of_turn>")), Some("<end_of_turn>"));
    assert_eq!(tok.token_text(tok.n_vocab() as u32), None);
}

/// Round trips: decode(encode(s)) is s except where llama.cpp itself changes the text, which is
/// stated here exactly.
#[test]
fn decode_of_encode_round_trips_except_where_llama_cpp_does_not() {
    let corpus: Vec<String> = fixture("tokenizer-gemma3.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    // Gemma (no space prefix): exact, with or without BOS (whose piece is "<bos>" when decoding
    // with `special`) and whatever parse_special, except that a literal U+2581 in the text is
    // SentencePiece's space and comes back as " "
    let g = gemma();
    for s in &corpus {
        let want = s.replace('\u{2581}', " ");
        for (add, parse) in [(false, false), (true, false), (false, true), (true, true)] {
            let back = g.decode(&g.encode(s, add, parse), parse).unwrap();
            let bos = if add && parse { "<bos>" } else { "" };
            assert_eq!(
                back,
                format!("{bos}{want}"),
                "gemma3 {s:?} add_special={add} parse_special={parse}"
            );
        }
    }
    assert!(corpus.iter().any(|s| s.contains('\u{2581}')));
    // Qwen 2's pre-tokenizer does not clean up spaces: exact
    let q = tiny("tiny-qwen2");
    for s in &corpus {
        assert_eq!(q.decode(&q.encode(s, true, true), true).unwrap(), *s, "tiny-qwen2 {s:?}");
    }
    // Llama 3's does (clean_up_tokenization_spaces): " ?", " !", " .", " ," and " 's", " 'm",
    // " 're", " 've" lose their space and " ' " becomes "'"; everything else comes back exact
    let l = tiny("tiny-llama");
    let cleaned = |s: &str| {
        [" ?", " !", " .", " ,", " 's", " 'm", " 're", " 've", " ' "].iter().any(|p| s.contains(p))
    };
    let mut n_cleaned = 0;
    for s in &corpus {
        let back = l.decode(&l.encode(s, false, false), false).unwrap();
        assert_eq!(back != *s, cleaned(s), "tiny-llama {s:?} came back as {back:?}");
        n_cleaned += usize::from(cleaned(s));
    }
    assert!(n_cleaned >= 5, "{n_cleaned}");
    assert_eq!(
        l.decode(&l.encode("Is it ? Yes , it 's .", false, false), false).unwrap(),
        "Is it? Yes, it's."
    );
    // with BOS (llama-bpe adds it): its piece is empty without `special`, "<|endoftext|>" with
    assert_eq!(l.decode(&l.encode("hi", true, false), false).unwrap(), "hi");
    assert_eq!(l.decode(&l.encode("hi", true, false), true).unwrap(), "<|endoftext|>hi");
}

/// Pieces streamed through [`StreamDecoder`]: characters split across tokens come out whole.
#[test]
fn stream_decoder_holds_characters_split_across_tokens() {
    let g = gemma();
    let l = tiny("tiny-llama");
    let texts = [
        "👨‍👩‍👧‍👦 family",
        "🫠🪿 and 🧑‍🤝‍🧑",
        "ᚠᚢᚦᚨᚱᚲ",
        "東京は日本の首都です。",
        "\u{1c89}\u{10fffd}",
        "😀x😀",
    ];
    let mut split_seen = [0usize; 2];
    for (k, tok) in [g, &l].into_iter().enumerate() {
        for text in texts {
            let ids = tok.encode(text, false, false);
            let mut d = StreamDecoder::new();
            let mut out = String::new();
            for &id in &ids {
                let piece = tok.token_to_piece(id, false).unwrap();
                let chunk = d.push(&piece);
                // a piece that is not whole UTF-8 leaves something pending
                if std::str::from_utf8(&piece).is_err() {
                    split_seen[k] += 1;
                }
                assert!(
                    !chunk.contains('\u{fffd}'),
                    "{text:?}: a replacement character in {chunk:?}"
                );
                out.push_str(&chunk);
                // everything emitted so far is a prefix of the text, whole characters only
                assert!(text.starts_with(&out), "{text:?}: emitted {out:?}");
            }
            assert!(!d.has_pending());
            assert_eq!(d.flush(), "");
            assert_eq!(out, text);
        }
    }
    // Gemma's byte-fallback tokens and GPT-2's byte-level tokens both split characters here
    assert!(split_seen[0] > 0 && split_seen[1] > 0, "{split_seen:?}");
}

#[test]
fn token_ids_out_of_range_are_errors() {
    let tok = tiny("tiny-qwen3");
    let n = tok.n_vocab() as u32;
    assert!(tok.token_to_piece(n - 1, true).is_ok());
    let e = tok.token_to_piece(n, true).unwrap_err();
    assert!(
        matches!(e, TokenizerError::TokenOutOfRange { id, n_vocab } if id == n && n_vocab == n as usize),
        "{e}"
    );
    assert!(e.to_string().contains("out of range"), "{e}");
    assert!(matches!(
        tok.decode(&[1, 2, u32::MAX], false),
        Err(TokenizerError::TokenOutOfRange { id: u32::MAX, .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Malformed vocabularies, as GGUF files written here
// ---------------------------------------------------------------------------------------------

enum Kv {
    Str(&'static str),
    U32(u32),
    Bool(bool),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

fn gguf_bytes(kvs: &[(&str, Kv)]) -> Vec<u8> {
    fn s(out: &mut Vec<u8>, v: &str) {
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64 + 1).to_le_bytes());
    s(&mut out, "general.architecture");
    out.extend(8u32.to_le_bytes());
    s(&mut out, "llama");
    for (key, v) in kvs {
        s(&mut out, key);
        match v {
            Kv::Str(v) => {
                out.extend(8u32.to_le_bytes());
                s(&mut out, v);
            }
            Kv::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Kv::Bool(v) => {
                out.extend(7u32.to_le_bytes());
                out.push(u8::from(*v));
            }
            Kv::Strs(v) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                for x in v {
                    s(&mut out, x);
                }
            }
            Kv::F32s(v) => {
                out.extend(9u32.to_le_bytes());
                out.extend(6u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Kv::I32s(v) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
        }
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    out
}

fn vocab_of(kvs: &[(&str, Kv)]) -> Result<Tokenizer, TokenizerError> {
    let file = GgufFile::from_bytes(gguf_bytes(kvs)).expect("a well-formed GGUF");
    Tokenizer::from_gguf(&file)
}

fn spm_tokens() -> Vec<String> {
    let mut t: Vec<String> =
        ["<unk>", "<s>", "</s>", "▁a", "a", "b", "▁"].iter().map(|s| s.to_string()).collect();
    t.extend((0..=255).map(|b| format!("<0x{b:02X}>")));
    t
}

#[test]
fn a_small_spm_vocabulary_from_a_gguf_works() {
    let n = spm_tokens().len();
    let mut types = vec![1; n];
    types[..3].copy_from_slice(&[2, 3, 3]);
    types[7..].iter_mut().for_each(|t| *t = 6);
    let tok = vocab_of(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", Kv::Strs(spm_tokens())),
        ("tokenizer.ggml.scores", Kv::F32s((0..n).map(|i| -(i as f32)).collect())),
        ("tokenizer.ggml.token_type", Kv::I32s(types)),
    ])
    .unwrap();
    // llama.cpp's SPM defaults: BOS 1, EOS 2, add_bos, add_space_prefix; "c" is byte fallback
    assert_eq!(tok.encode("ab c", true, false), [1, 3, 5, 6, 7 + 0x63]);
    assert_eq!(tok.decode(&[1, 3, 5, 6, 7 + 0x63], false).unwrap(), " ab c");
    assert_eq!(tok.decode(&[3, 5, 6, 7 + 0x63], false).unwrap(), "ab c");
    assert_eq!(tok.nl(), Some(7 + 0x0a));
    assert!(tok.is_eog(2) && !tok.is_eog(1));
}

/// Gemma 4's BPE on a vocabulary small enough to see each rule: spaces become U+2581, words are
/// newline runs and the rest, a newline run that is a token is taken whole even without a merge
/// making it, a byte without a token becomes its `<0xXX>` token, BOS is added even where the file
/// says not to, and decoding turns U+2581 back into spaces.
#[test]
fn a_small_gemma4_vocabulary_follows_llama_cpps_rules() {
    let tokens: Vec<String> = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "\n",
        "\n\n\n",
        "\u{2581}a",
        "a",
        "b",
        "\u{2581}",
        "<0x63>",
    ]
    .map(String::from)
    .to_vec();
    let n = tokens.len();
    let mut types = vec![1; n];
    types[..4].copy_from_slice(&[3, 3, 3, 2]);
    types[10] = 6;
    let tok = vocab_of(&[
        ("tokenizer.ggml.model", Kv::Str("gemma4")),
        ("tokenizer.ggml.pre", Kv::Str("ignored-for-gemma4")),
        ("tokenizer.ggml.tokens", Kv::Strs(tokens)),
        ("tokenizer.ggml.token_type", Kv::I32s(types)),
        ("tokenizer.ggml.merges", Kv::Strs(vec!["\u{2581} a".into()])),
        ("tokenizer.ggml.bos_token_id", Kv::U32(2)),
        ("tokenizer.ggml.eos_token_id", Kv::U32(1)),
        ("tokenizer.ggml.add_bos_token", Kv::Bool(false)),
    ])
    .unwrap();
    assert_eq!(tok.encode("b a\n\n\nc", false, false), [8, 6, 5, 10]);
    // four newlines are no token: merged as far as the merges go (none here)
    assert_eq!(tok.encode("\n\n\n\n", false, false), [4, 4, 4, 4]);
    assert!(tok.add_bos());
    assert_eq!(tok.encode("a", true, false), [2, 7]);
    assert_eq!(tok.decode(&[2, 8, 6, 5, 10], false).unwrap(), "b a\n\n\nc");
    assert_eq!(tok.decode(&[2, 8], true).unwrap(), "<bos>b");
    assert_eq!(tok.nl(), Some(4));
}

#[test]
fn malformed_vocabularies_are_typed_errors_naming_the_key() {
    let tokens = || Kv::Strs(spm_tokens());
    let err = |kvs: &[(&str, Kv)]| vocab_of(kvs).err().expect("an error");

    let e =
        err(&[("tokenizer.ggml.model", Kv::Str("wordpiece")), ("tokenizer.ggml.tokens", tokens())]);
    assert!(matches!(&e, TokenizerError::UnknownModel(m) if m == "wordpiece"), "{e}");
    assert!(e.to_string().contains("tokenizer.ggml.model"), "{e}");

    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("gpt2")),
        ("tokenizer.ggml.pre", Kv::Str("tekken")),
        ("tokenizer.ggml.tokens", tokens()),
    ]);
    assert!(matches!(&e, TokenizerError::UnknownPreTokenizer(p) if p == "tekken"), "{e}");
    assert!(
        e.to_string().contains("tekken") && e.to_string().contains("tokenizer.ggml.pre"),
        "{e}"
    );

    let e = err(&[("tokenizer.ggml.tokens", tokens())]);
    assert!(matches!(e, TokenizerError::MissingKey("tokenizer.ggml.model")), "{e}");

    let e = err(&[("tokenizer.ggml.model", Kv::Str("llama"))]);
    assert!(matches!(e, TokenizerError::MissingKey("tokenizer.ggml.tokens")), "{e}");
    assert!(e.to_string().contains("tokenizer.ggml.tokens is missing"), "{e}");

    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", Kv::I32s(vec![1, 2])),
    ]);
    assert!(matches!(e, TokenizerError::WrongType { key: "tokenizer.ggml.tokens", .. }), "{e}");

    let e = err(&[("tokenizer.ggml.model", Kv::U32(3)), ("tokenizer.ggml.tokens", tokens())]);
    assert!(
        matches!(&e, TokenizerError::Gguf(g) if g.to_string().contains("tokenizer.ggml.model")),
        "{e}"
    );

    let e = err(&[("tokenizer.ggml.model", Kv::Str("gpt2")), ("tokenizer.ggml.tokens", tokens())]);
    assert!(matches!(e, TokenizerError::MissingKey("tokenizer.ggml.merges")), "{e}");

    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", tokens()),
        ("tokenizer.ggml.scores", Kv::F32s(vec![0.0; 3])),
    ]);
    assert!(
        matches!(e, TokenizerError::TooShort { key: "tokenizer.ggml.scores", len: 3, .. }),
        "{e}"
    );

    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", tokens()),
        ("tokenizer.ggml.token_type", Kv::I32s(vec![1; 5])),
    ]);
    assert!(
        matches!(e, TokenizerError::TooShort { key: "tokenizer.ggml.token_type", len: 5, .. }),
        "{e}"
    );

    let mut dup = spm_tokens();
    dup[4] = "▁a".into();
    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", Kv::Strs(dup)),
    ]);
    assert!(
        matches!(&e, TokenizerError::Malformed { key: "tokenizer.ggml.tokens", reason } if reason.contains("3 and 4")),
        "{e}"
    );

    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", Kv::Strs(vec![])),
    ]);
    assert!(matches!(e, TokenizerError::Malformed { key: "tokenizer.ggml.tokens", .. }), "{e}");

    // a BPE vocabulary that asks for BOS but has none (the default id 11 is past its 6 tokens)
    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("gpt2")),
        ("tokenizer.ggml.pre", Kv::Str("llama-bpe")),
        (
            "tokenizer.ggml.tokens",
            Kv::Strs(["a", "b", "ab", "c", "d", "e"].map(String::from).to_vec()),
        ),
        ("tokenizer.ggml.merges", Kv::Strs(vec!["a b".into()])),
    ]);
    assert!(
        matches!(e, TokenizerError::Malformed { key: "tokenizer.ggml.add_bos_token", .. }),
        "{e}"
    );

    // an id past the vocabulary in a hand-made Vocab
    let mut v = gemma_vocab().clone();
    v.eot = Some(u32::MAX);
    assert!(matches!(Tokenizer::from_vocab(v), Err(TokenizerError::Malformed { .. })));
    // the same in a file is refused naming the key (llama.cpp warns and keeps its default,
    // another token of this vocabulary)
    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", tokens()),
        ("tokenizer.ggml.bos_token_id", Kv::U32(100_000)),
        ("tokenizer.ggml.add_bos_token", Kv::Bool(true)),
    ]);
    assert!(
        matches!(&e, TokenizerError::Malformed { key: "tokenizer.ggml.bos_token_id", reason }
            if reason.contains("token id 100000 is past the vocabulary")),
        "{e}"
    );
    assert_eq!(TokenType::from_code(4), TokenType::UserDefined);
    // a token type outside GGUF's 0 to 6
    let e = err(&[
        ("tokenizer.ggml.model", Kv::Str("llama")),
        ("tokenizer.ggml.tokens", tokens()),
        (
            "tokenizer.ggml.token_type",
            Kv::I32s((0..263).map(|i| if i == 3 { -1 } else { 1 }).collect()),
        ),
    ]);
    assert!(
        matches!(&e, TokenizerError::Malformed { key: "tokenizer.ggml.token_type", reason }
            if reason.contains("token 3 has type -1")),
        "{e}"
    );
    // merges: two tokens apart by a space, whose join is a token
    let bpe = |merges: &[&str]| {
        err(&[
            ("tokenizer.ggml.model", Kv::Str("gpt2")),
            ("tokenizer.ggml.tokens", Kv::Strs(["a", "b", "ab", "c"].map(String::from).to_vec())),
            ("tokenizer.ggml.merges", Kv::Strs(merges.iter().map(|m| m.to_string()).collect())),
            ("tokenizer.ggml.bos_token_id", Kv::U32(0)),
        ])
    };
    for (merges, why) in [
        (&["ab"][..], "merge 0 \"ab\" is not two tokens separated by a space"),
        (&["a b", ""], "merge 1 \"\" is not two tokens"),
        (&["a "], "merge 0 \"a \" has nothing after its space"),
        (&["a b", "ab x"], "merge 1 \"ab x\" names \"x\", which is not a token"),
        (&["b c"], "merge 0 \"b c\" makes \"bc\", which is not a token"),
    ] {
        let e = bpe(merges);
        assert!(
            matches!(&e, TokenizerError::Malformed { key: "tokenizer.ggml.merges", reason }
                if reason.contains(why)),
            "{e} should say {why}"
        );
    }
}

/// Llama 3's pre-tokenizer takes a word that is a token whole, without merging (llama.cpp's
/// `ignore_merges`); GPT-2's merges it. A vocabulary where the two differ: "abc" is a token, but
/// the merges only make "bc" (with GPT-2's own vocabulary they never differ, every token being
/// what its merges make).
#[test]
fn llama3_takes_words_that_are_tokens_whole() {
    let tokens: Vec<String> = ["a", "b", "c", "bc", "abc"].map(String::from).to_vec();
    let n = tokens.len();
    let vocab = |pre: &str| Vocab {
        kind: tessera_llm::tokenizer::VocabKind::Bpe,
        model: "gpt2".into(),
        pre: PreTokenizer::bpe(pre).unwrap(),
        tokens: tokens.clone(),
        scores: vec![0.0; n],
        types: vec![TokenType::Normal; n],
        merges: vec!["b c".into()],
        bos: None,
        eos: None,
        eot: None,
        eom: None,
        unk: None,
        sep: None,
        pad: None,
        mask: None,
        fim_pre: None,
        fim_suf: None,
        fim_mid: None,
        fim_pad: None,
        fim_rep: None,
        fim_sep: None,
        add_bos: false,
        add_eos: false,
        add_space_prefix: false,
        add_sep: false,
        lowercase: false,
        strip_accents: false,
        space_strip: Default::default(),
    };
    let llama3 = Tokenizer::from_vocab(vocab("llama-bpe")).unwrap();
    let gpt2 = Tokenizer::from_vocab(vocab("gpt-2")).unwrap();
    assert_eq!(llama3.encode("abc", false, false), [4]);
    assert_eq!(gpt2.encode("abc", false, false), [0, 3]);
    assert_eq!(llama3.encode("abcb", false, false), [0, 3, 1]);
}

#[test]
fn a_tokenizer_is_shared_across_threads() {
    fn shareable<T: Send + Sync>(_: &T) {}
    let tok = gemma();
    shareable(tok);
    let want = tok.encode("<start_of_turn>user\nhi<end_of_turn>", true, true);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| tok.encode("<start_of_turn>user\nhi<end_of_turn>", true, true)))
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), want);
        }
    });
    assert_eq!(want[..2], [tok.bos().unwrap(), tok.token_id("<start_of_turn>").unwrap()]);
}
