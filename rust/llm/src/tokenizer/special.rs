//! Special tokens in the text (llama.cpp's `tokenizer_st_partition`): before the tokenizer runs,
//! occurrences of control, unknown and user-defined tokens are cut out of the text as tokens of
//! their own. llama.cpp takes the special tokens longest first and, for each, cuts every
//! leftmost non-overlapping occurrence out of the raw text still left. The same is done here,
//! but only for the tokens that can occur in the text (a vocabulary has thousands of special
//! tokens, a text few): the tokens are indexed by their first byte pair (or their byte), the
//! text's pairs pick the candidates, and a candidate is taken when the text has all its pairs. A
//! token that passes this test but does not occur changes nothing, so the result is exactly
//! llama.cpp's. A token with LSTRIP (RSTRIP) also takes the ASCII whitespace before (after) it
//! out of the text.

use memchr::memmem::Finder;

/// A piece of the text: raw text to tokenize, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Byte range of the text.
    Text(usize, usize),
    /// A special token's id.
    Token(u32),
}

/// A special token as [`Specials::new`] takes it.
pub(crate) struct SpecialToken<'a> {
    pub id: u32,
    pub text: &'a [u8],
    /// Matched without `parse_special` (user-defined tokens).
    pub always: bool,
    /// Takes the whitespace before it.
    pub lstrip: bool,
    /// Takes the whitespace after it.
    pub rstrip: bool,
}

struct Special {
    id: u32,
    text: Box<[u8]>,
    always: bool,
    lstrip: bool,
    rstrip: bool,
}

/// The special tokens of a vocabulary, in llama.cpp's order.
pub(crate) struct Specials {
    tokens: Vec<Special>,
    /// (key, index in `tokens`) sorted: a token's key is its first byte pair (see [`key`]).
    index: Vec<(u32, u32)>,
}

/// The keys of `text`'s bytes and byte pairs, ascending, each once.
fn text_keys(text: &[u8]) -> Vec<u32> {
    let all = text.iter().map(|&b| key(&[b])).chain(text.windows(2).map(key));
    if text.len() <= 1024 {
        let mut keys: Vec<u32> = all.collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    } else {
        // a set of the 65536 + 256 keys
        let mut bits = vec![0u64; 0x1_0100_usize.div_ceil(64)];
        for k in all {
            bits[k as usize / 64] |= 1 << (k % 64);
        }
        let mut keys = Vec::new();
        for (w, &word) in bits.iter().enumerate() {
            let mut m = word;
            while m != 0 {
                keys.push(w as u32 * 64 + m.trailing_zeros());
                m &= m - 1;
            }
        }
        keys
    }
}

/// The key of a byte pair, or of a one-byte text.
fn key(text: &[u8]) -> u32 {
    match *text {
        [a] => 0x1_0000 | a as u32,
        [a, b, ..] => (a as u32) << 8 | b as u32,
        [] => u32::MAX,
    }
}

impl Specials {
    /// `specials`: every control, unknown and user-defined token.
    pub(crate) fn new(specials: Vec<SpecialToken>) -> Specials {
        let mut tokens: Vec<Special> = specials
            .into_iter()
            .filter(|s| !s.text.is_empty())
            .map(|s| Special {
                id: s.id,
                text: s.text.into(),
                always: s.always,
                lstrip: s.lstrip,
                rstrip: s.rstrip,
            })
            .collect();
        // llama.cpp sorts by length with std::sort, whose order among equal lengths is
        // unspecified; that order matters only when two such tokens overlap in a text
        tokens.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let mut index: Vec<(u32, u32)> =
            tokens.iter().enumerate().map(|(i, t)| (key(&t.text), i as u32)).collect();
        index.sort_unstable();
        Specials { tokens, index }
    }

    /// Cuts `text` into fragments.
    pub(crate) fn partition(&self, text: &[u8], parse_special: bool) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(0, text.len())];
        if self.tokens.is_empty() {
            return fragments;
        }
        let keys = text_keys(text);
        let mut candidates = Vec::new();
        for &k in &keys {
            let from = self.index.partition_point(|e| e.0 < k);
            for &(ek, i) in &self.index[from..] {
                if ek != k {
                    break;
                }
                let t = &self.tokens[i as usize];
                if (parse_special || t.always)
                    && t.text.len() <= text.len()
                    && t.text.windows(2).all(|w| keys.binary_search(&key(w)).is_ok())
                {
                    candidates.push(i);
                }
            }
        }
        candidates.sort_unstable();
        for i in candidates {
            fragments = cut(&self.tokens[i as usize], text, &fragments);
        }
        fragments
    }
}

/// `fragments` with every leftmost non-overlapping occurrence of `t` in their raw text cut out.
fn cut(t: &Special, text: &[u8], fragments: &[Fragment]) -> Vec<Fragment> {
    let finder = Finder::new(&t.text);
    let mut next = Vec::with_capacity(fragments.len() + 2);
    for &f in fragments {
        let Fragment::Text(a, b) = f else {
            next.push(f);
            continue;
        };
        let mut pos = a;
        while let Some(m) = finder.find(&text[pos..b]) {
            let start = pos + m;
            let mut left_end = start;
            if t.lstrip {
                while left_end > pos && is_c_space(text[left_end - 1]) {
                    left_end -= 1;
                }
            }
            if left_end > pos {
                next.push(Fragment::Text(pos, left_end));
            }
            next.push(Fragment::Token(t.id));
            pos = start + t.text.len();
            if t.rstrip {
                while pos < b && is_c_space(text[pos]) {
                    pos += 1;
                }
            }
        }
        if pos < b {
            next.push(Fragment::Text(pos, b));
        }
    }
    next
}

/// C's `isspace` in the "C" locale, which llama.cpp strips with.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(id: u32, text: &[u8], always: bool) -> SpecialToken<'_> {
        SpecialToken { id, text, always, lstrip: false, rstrip: false }
    }

    #[test]
    fn longest_first_then_leftmost() {
        let s =
            Specials::new(vec![tok(1, b"ab", true), tok(2, b"abc", false), tok(3, b"ca", true)]);
        let text = b"xabcab_cab";
        // parse_special: "abc" first (x|abc|ab_cab), then "ab" (x|abc|ab|_c|ab), then "ca": none left
        assert_eq!(
            s.partition(text, true),
            [
                Fragment::Text(0, 1),
                Fragment::Token(2),
                Fragment::Token(1),
                Fragment::Text(6, 8),
                Fragment::Token(1)
            ]
        );
        // without parse_special only the user-defined "ab" and "ca" count; of equal length, "ab"
        // (the lower id) goes first and leaves no "ca"
        assert_eq!(
            s.partition(text, false),
            [
                Fragment::Text(0, 1),
                Fragment::Token(1),
                Fragment::Text(3, 4),
                Fragment::Token(1),
                Fragment::Text(6, 8),
                Fragment::Token(1)
            ]
        );
        assert_eq!(s.partition(b"", true), []);
        assert_eq!(s.partition(b"zz", true), [Fragment::Text(0, 2)]);
    }

    #[test]
    fn stripping_tokens_take_the_ascii_whitespace_beside_them() {
        let s = Specials::new(vec![
            SpecialToken { rstrip: true, ..tok(1, b"<r>", false) },
            SpecialToken { lstrip: true, ..tok(2, b"<l>", false) },
        ]);
        let text = b"a <r> \n\t<r>  b \t<l>c\xc2\xa0<l>";
        assert_eq!(
            s.partition(text, true),
            [
                Fragment::Text(0, 2),
                Fragment::Token(1),
                Fragment::Token(1),
                Fragment::Text(13, 14),
                Fragment::Token(2),
                Fragment::Text(19, 22),
                Fragment::Token(2)
            ]
        );
        // whitespace alone between two stripping tokens vanishes
        assert_eq!(s.partition(b"<r>  ", true), [Fragment::Token(1)]);
        assert_eq!(s.partition(b" <l>", true), [Fragment::Token(2)]);
    }

    /// The candidates the index picks change nothing: the partition is the one of every special
    /// token tried in order (llama.cpp's loop), on random texts short and long (the key set's
    /// two paths).
    #[test]
    fn the_index_gives_the_partition_of_trying_every_token() {
        let texts: [&[u8]; 8] = [b"<a>", b"<ab>", b"a", b"ab", b"b>", b" ", b"<", b"\xc3\xa9"];
        let specials = || {
            texts
                .iter()
                .enumerate()
                .map(|(i, t)| SpecialToken {
                    id: i as u32,
                    text: t,
                    always: i % 3 == 0,
                    lstrip: i == 2,
                    rstrip: i == 1,
                })
                .collect::<Vec<_>>()
        };
        let s = Specials::new(specials());
        let mut state = 12345u64;
        for n in 0..400 {
            let len = if n % 50 == 0 { 3000 } else { n % 23 };
            let mut text = Vec::new();
            while text.len() < len {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let piece = texts[(state >> 33) as usize % texts.len()];
                text.extend_from_slice(if state & 1 == 0 { piece } else { &piece[..1] });
            }
            for parse in [false, true] {
                assert_eq!(
                    s.partition(&text, parse),
                    s.partition_trying_all(&text, parse),
                    "{:?}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    }

    impl Specials {
        /// The partition without the index: every token tried, in order.
        fn partition_trying_all(&self, text: &[u8], parse_special: bool) -> Vec<Fragment> {
            let mut fragments =
                if text.is_empty() { vec![] } else { vec![Fragment::Text(0, text.len())] };
            for t in &self.tokens {
                if parse_special || t.always {
                    fragments = cut(t, text, &fragments);
                }
            }
            fragments
        }
    }
}
