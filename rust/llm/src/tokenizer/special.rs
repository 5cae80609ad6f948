//! Special tokens in the text (llama.cpp's `tokenizer_st_partition`): before the tokenizer runs,
//! occurrences of control, unknown and user-defined tokens are cut out of the text as tokens of
//! their own. llama.cpp takes the special tokens longest first and, for each, cuts every
//! leftmost non-overlapping occurrence from the text that is still left; the same result is
//! computed here from one Aho-Corasick pass over all occurrences: an occurrence is taken when it
//! starts after the previous one taken for its token and touches nothing taken before it (since
//! earlier tokens are at least as long, it is enough to look at its first and last byte).

use aho_corasick::AhoCorasick;

use super::TokenizerError;

/// A piece of the text: raw text to tokenize, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Byte range of the text.
    Text(usize, usize),
    /// A special token's id.
    Token(u32),
}

/// The special tokens of a vocabulary and a matcher over their texts.
pub(crate) struct Specials {
    /// Pattern index -> (token id, text length, matched without `parse_special`); patterns are in
    /// priority order (longest first, then lowest id).
    patterns: Vec<(u32, usize, bool)>,
    matcher: Option<AhoCorasick>,
}

impl Specials {
    /// `specials`: (id, text, user-defined-only) of every control, unknown and user-defined token.
    pub(crate) fn new(mut specials: Vec<(u32, &[u8], bool)>) -> Result<Specials, TokenizerError> {
        // llama.cpp sorts by length with std::sort, whose order among equal lengths is
        // unspecified; that order matters only when two such tokens overlap in a text
        specials.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let patterns =
            specials.iter().map(|&(id, text, always)| (id, text.len(), always)).collect();
        let matcher = if specials.is_empty() {
            None
        } else {
            let texts: Vec<&[u8]> = specials.iter().map(|s| s.1).collect();
            Some(AhoCorasick::new(texts).map_err(|e| TokenizerError::Malformed {
                key: super::vocab::keys::TOKENS,
                reason: format!("special tokens: {e}"),
            })?)
        };
        Ok(Specials { patterns, matcher })
    }

    /// Cuts `text` into fragments.
    pub(crate) fn partition(&self, text: &[u8], parse_special: bool) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let Some(matcher) = &self.matcher else { return vec![Fragment::Text(0, text.len())] };
        // (pattern, start) of every occurrence of a token that may be matched
        let mut found: Vec<(u32, usize)> = matcher
            .find_overlapping_iter(text)
            .filter(|m| parse_special || self.patterns[m.pattern().as_usize()].2)
            .map(|m| (m.pattern().as_u32(), m.start()))
            .collect();
        if found.is_empty() {
            return vec![Fragment::Text(0, text.len())];
        }
        found.sort_unstable();
        let mut covered = vec![false; text.len()];
        let mut taken: Vec<(usize, usize, u32)> = Vec::new();
        let mut i = 0;
        while i < found.len() {
            let pattern = found[i].0;
            let (id, len, _) = self.patterns[pattern as usize];
            let mut last_end = 0;
            while i < found.len() && found[i].0 == pattern {
                let start = found[i].1;
                let end = start + len;
                if start >= last_end && !covered[start] && !covered[end - 1] {
                    covered[start..end].fill(true);
                    taken.push((start, end, id));
                    last_end = end;
                }
                i += 1;
            }
        }
        taken.sort_unstable();
        let mut out = Vec::with_capacity(2 * taken.len() + 1);
        let mut pos = 0;
        for (start, end, id) in taken {
            if start > pos {
                out.push(Fragment::Text(pos, start));
            }
            out.push(Fragment::Token(id));
            pos = end;
        }
        if pos < text.len() {
            out.push(Fragment::Text(pos, text.len()));
        }
        out
    }
}
