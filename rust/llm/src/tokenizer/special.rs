//! Special tokens in the text (llama.cpp's `tokenizer_st_partition`): before the tokenizer runs,
//! occurrences of control, unknown and user-defined tokens are cut out of the text as tokens of
//! their own. llama.cpp takes the special tokens longest first and, for each, cuts every
//! leftmost non-overlapping occurrence out of the raw text still left. The same is done here,
//! but only for the tokens that can occur in the text: those all of whose byte pairs the text
//! has (a vocabulary has thousands of special tokens, a text few). A token that passes this
//! test but does not occur changes nothing, so the result is exactly llama.cpp's. A token with
//! LSTRIP (RSTRIP) also takes the ASCII whitespace before (after) it out of the text.

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
}

/// The byte pairs of a text, as a 65536-bit set.
struct Pairs(Vec<u64>);

impl Pairs {
    fn of(text: &[u8]) -> Pairs {
        let mut bits = vec![0u64; 1024];
        for w in text.windows(2) {
            let i = (w[0] as usize) << 8 | w[1] as usize;
            bits[i / 64] |= 1 << (i % 64);
        }
        Pairs(bits)
    }
    fn has(&self, a: u8, b: u8) -> bool {
        let i = (a as usize) << 8 | b as usize;
        self.0[i / 64] & (1 << (i % 64)) != 0
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
        Specials { tokens }
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
        let pairs = Pairs::of(text);
        let mut bytes = [false; 256];
        for &b in text {
            bytes[b as usize] = true;
        }
        let mut next = Vec::new();
        for t in &self.tokens {
            if !(parse_special || t.always) {
                continue;
            }
            let can_occur = if t.text.len() == 1 {
                bytes[t.text[0] as usize]
            } else {
                t.text.len() <= text.len() && t.text.windows(2).all(|w| pairs.has(w[0], w[1]))
            };
            if !can_occur {
                continue;
            }
            let finder = Finder::new(&t.text);
            next.clear();
            for &f in &fragments {
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
            std::mem::swap(&mut fragments, &mut next);
        }
        fragments
    }
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
}
