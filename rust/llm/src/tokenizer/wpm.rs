//! WordPiece (llama.cpp's `llm_tokenizer_wpm_session`, for BERT-style models): BERT's
//! normalizer cuts the text into words, then each word, with U+2581 before it, is covered left to
//! right by the longest tokens that match (byte lengths, as llama.cpp compares bytes); a word that
//! cannot be covered whole is the unknown token.
//!
//! The normalizer, as llama.cpp has it: with `strip_accents`, every code point is replaced by the
//! first code point of its canonical decomposition and combining marks are dropped; whitespace
//! separates words; NUL, U+FFFD and control characters are dropped; with `lowercase`, code points
//! are lowercased (simple mapping); punctuation, ASCII symbols and CJK ideographs are words of
//! their own.

use super::unicode::{flags, lowercase, nfd_first, Class};
use super::TokenMap;

/// The words of `text` after BERT's normalizer.
pub(crate) fn words(text: &str, lowercase_text: bool, strip_accents: bool) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if strip_accents { nfd_first(c) } else { c };
        let f = flags(c);
        if f.whitespace {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{fffd}' || f.class == Class::Control {
            continue;
        }
        if strip_accents && f.class == Class::Mark {
            continue;
        }
        let out = if lowercase_text { lowercase(c) } else { c };
        let alone = f.class == Class::Punctuation
            || ((c as u32) < 0x7f && f.class == Class::Symbol)
            || is_chinese_char(c);
        let last = words.last_mut().expect("never empty");
        if alone {
            if last.is_empty() {
                last.push(out);
            } else {
                words.push(out.to_string());
            }
            words.push(String::new());
        } else {
            last.push(out);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// BERT's CJK ideograph blocks, as Hugging Face's `BertNormalizer` (and llama.cpp after it) lists
/// them, including its start of Extension D/E at U+2B920.
fn is_chinese_char(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// Appends the tokens of one normalized `word` to `out`: the longest tokens (of at most
/// `max_len` bytes) that cover "▁" + `word` from the left, or `unk` when they do not cover it.
pub(crate) fn tokenize_word(
    word: &str,
    tokens: &TokenMap,
    max_len: usize,
    unk: Option<u32>,
    buf: &mut Vec<u8>,
    out: &mut Vec<u32>,
) {
    if word.is_empty() {
        return;
    }
    buf.clear();
    buf.extend_from_slice("\u{2581}".as_bytes());
    buf.extend_from_slice(word.as_bytes());
    let n = buf.len();
    let first = out.len();
    let mut i = 0;
    while i < n {
        let longest = (i + 1..=n.min(i + max_len + 1))
            .rev()
            .find_map(|j| tokens.get(&buf[i..j]).map(|id| (id, j)));
        match longest {
            Some((id, j)) => {
                out.push(id);
                i = j;
            }
            None => {
                out.truncate(first);
                break;
            }
        }
    }
    if out.len() == first {
        // llama.cpp pushes the unknown id even when the vocabulary has none (-1); nothing here
        out.extend(unk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bert_normalizer_words() {
        assert_eq!(
            words("Héllo, WORLD!  naïve\tcafé 中文 $5", true, true),
            ["hello", ",", "world", "!", "naive", "cafe", "中", "文", "$", "5"]
        );
        // without lowercasing and stripping: as written, marks kept
        assert_eq!(words("Héllo e\u{301}", false, false), ["Héllo", "e\u{301}"]);
        // control characters and U+FFFD vanish, whitespace of any kind separates
        assert_eq!(words("a\u{200b}b\u{fffd}c\u{3000}d\0", true, true), ["abc", "d"]);
        assert!(words(" \n\t ", true, true).is_empty());
    }

    #[test]
    fn longest_first_and_unknown_words() {
        let mut t = TokenMap::with_capacity(4, 32);
        for (i, s) in ["▁un", "▁unaff", "able", "aff", "[UNK]"].iter().enumerate() {
            assert_eq!(t.insert(s, i as u32), Ok(None));
        }
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        tokenize_word("unaffable", &t, 8, Some(4), &mut buf, &mut out);
        assert_eq!(out, [1, 2]);
        out.clear();
        // "▁un" + "aff" + "able" would cover it, but the longest first ("▁unaff") leaves "x"
        tokenize_word("unaffx", &t, 8, Some(4), &mut buf, &mut out);
        assert_eq!(out, [4]);
        out.clear();
        tokenize_word("zzz", &t, 8, None, &mut buf, &mut out);
        assert!(out.is_empty());
    }
}
