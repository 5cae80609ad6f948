//! BPE pre-tokenizers: text -> words, exactly as llama.cpp's `unicode_regex_split` cuts them.
//!
//! llama.cpp runs its patterns through hand-written matchers (GPT-2, Llama 3, Qwen 2) and, for
//! the others, `std::regex` over a "collapsed" copy of the text in which every non-ASCII code
//! point is one byte standing for its class. The matchers below follow the hand-written ones
//! step by step (including where they differ from the regex they name, e.g. a trailing single
//! space is a word of its own) and reproduce the collapsed-class semantics of the simple
//! patterns used by `default` and StarCoder-style pre-tokenizers. Each step refines the words of
//! the previous one, as llama.cpp applies a list of patterns.

use super::unicode::{flags, Class, Flags};
use super::vocab::Split;

/// Code points of a text with their flags and byte offsets.
struct Text<'a> {
    text: &'a str,
    cpts: Vec<char>,
    flags: Vec<Flags>,
    /// Byte offset of each code point, plus the text length at the end.
    offsets: Vec<usize>,
}

impl<'a> Text<'a> {
    fn new(text: &'a str) -> Text<'a> {
        let mut cpts = Vec::with_capacity(text.len());
        let mut offsets = Vec::with_capacity(text.len() + 1);
        for (i, c) in text.char_indices() {
            cpts.push(c);
            offsets.push(i);
        }
        offsets.push(text.len());
        let flags = cpts.iter().map(|&c| flags(c)).collect();
        Text { text, cpts, flags, offsets }
    }
}

/// Cuts `text` into the words a BPE pre-tokenizer of kind `split` makes (slices of `text`).
pub(crate) fn split(split: Split, text: &str) -> Vec<&str> {
    let t = Text::new(text);
    let mut words = vec![t.cpts.len()];
    if t.cpts.is_empty() {
        return Vec::new();
    }
    match split {
        Split::Gpt2 => words = gpt2(&t, &words),
        Split::Llama3 => words = llama3(&t, &words, false),
        Split::Qwen2 => words = llama3(&t, &words, true),
        Split::Digits => {
            words = runs(&t, &words, |t, p, end| {
                usize::from(p < end && is_number_collapsed(t.cpts[p], t.flags[p]))
            });
            words = gpt2(&t, &words);
        }
        Split::Default => {
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_punct_collapsed));
            words = gpt2(&t, &words);
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_number_collapsed));
            words = runs(&t, &words, |t, p, end| {
                if p + 3 <= end && t.cpts[p..p + 3].iter().all(|c| c.is_ascii_digit()) {
                    3
                } else {
                    0
                }
            });
        }
    }
    let mut out = Vec::with_capacity(words.len());
    let mut start = 0;
    for len in words {
        out.push(&t.text[t.offsets[start]..t.offsets[start + len]]);
        start += len;
    }
    out
}

/// `\p{N}` of a collapsed pattern: ASCII digits, or a non-ASCII number that is not whitespace.
fn is_number_collapsed(c: char, f: Flags) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        !f.whitespace && f.class == Class::Number
    }
}

/// `[\p{P}\$\+<=>\^~\|]` of a collapsed pattern: ASCII punctuation (the backtick is a symbol)
/// and `$+<=>^~|`, or a non-ASCII punctuation code point that is not whitespace.
fn is_punct_collapsed(c: char, f: Flags) -> bool {
    if c.is_ascii() {
        matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|') || f.class == Class::Punctuation
    } else {
        !f.whitespace && f.class == Class::Punctuation
    }
}

/// Length of the run of code points in `[p, end)` from `p` that satisfy `pred`.
fn run_len(t: &Text, p: usize, end: usize, pred: impl Fn(char, Flags) -> bool) -> usize {
    t.cpts[p..end].iter().zip(&t.flags[p..end]).take_while(|(&c, &f)| pred(c, f)).count()
}

/// Refines `words` by a pattern searched left to right in each word `[start, end)`:
/// `match_at(t, p, end)` is the length of the match starting at `p` (0 for none); matches and
/// the gaps between them become words (as llama.cpp's `std::regex` fallback splits).
fn runs(t: &Text, words: &[usize], match_at: impl Fn(&Text, usize, usize) -> usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(words.len());
    let mut start = 0;
    for &len in words {
        let end = start + len;
        let mut gap = start;
        let mut p = start;
        while p < end {
            let m = match_at(t, p, end);
            if m == 0 {
                p += 1;
                continue;
            }
            if p > gap {
                out.push(p - gap);
            }
            out.push(m);
            p += m;
            gap = p;
        }
        if end > gap {
            out.push(end - gap);
        }
        start = end;
    }
    out
}

/// Cursor over one word of a splitter: code points and flags outside `[ini, end)` read as none.
struct Span<'t, 'a> {
    t: &'t Text<'a>,
    ini: usize,
    end: usize,
}

impl Span<'_, '_> {
    #[inline]
    fn cpt(&self, p: usize) -> Option<char> {
        (self.ini <= p && p < self.end).then(|| self.t.cpts[p])
    }
    #[inline]
    fn flags(&self, p: usize) -> Option<Flags> {
        (self.ini <= p && p < self.end).then(|| self.t.flags[p])
    }
    #[inline]
    fn is(&self, p: usize, pred: impl Fn(Flags) -> bool) -> bool {
        self.flags(p).is_some_and(pred)
    }
}

fn not_space_letter_number(f: Flags) -> bool {
    !(f.whitespace || f.letter() || f.number())
}

/// The contraction at `pos` (`'s 't 'm 'd` or `'re 've 'll`), if any: its length. With
/// `any_case`, the letters match in either case (llama.cpp lowercases with Unicode's simple
/// mapping; only ASCII letters map to these letters).
fn contraction(s: &Span, pos: usize, any_case: bool) -> usize {
    if s.cpt(pos) != Some('\'') || pos + 1 >= s.end {
        return 0;
    }
    let low = |c: Option<char>| c.map(|c| if any_case { c.to_ascii_lowercase() } else { c });
    let next = low(s.cpt(pos + 1));
    if matches!(next, Some('s' | 't' | 'm' | 'd')) {
        return 2;
    }
    if pos + 2 < s.end {
        let next2 = low(s.cpt(pos + 2));
        if matches!(
            (next, next2),
            (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
        ) {
            return 3;
        }
    }
    0
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
fn gpt2(t: &Text, words: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(words.len());
    let mut start = 0;
    for &len in words {
        let s = Span { t, ini: start, end: start + len };
        let mut pos = s.ini;
        let mut push = |to: usize, pos: &mut usize| {
            if to > *pos {
                out.push(to - *pos);
            }
            *pos = to;
        };
        while pos < s.end {
            let cpt = t.cpts[pos];
            let c = contraction(&s, pos, false);
            if c > 0 {
                push(pos + c, &mut pos);
                continue;
            }
            let space = usize::from(cpt == ' ');
            let f2 = if cpt == ' ' { s.flags(pos + 1) } else { Some(t.flags[pos]) };
            if f2.is_some_and(|f| f.letter()) {
                let mut p = pos + space;
                while s.is(p, Flags::letter) {
                    p += 1;
                }
                push(p, &mut pos);
                continue;
            }
            if f2.is_some_and(|f| f.number()) {
                let mut p = pos + space;
                while s.is(p, Flags::number) {
                    p += 1;
                }
                push(p, &mut pos);
                continue;
            }
            if f2.is_some_and(not_space_letter_number) {
                let mut p = pos + space;
                while s.is(p, not_space_letter_number) {
                    p += 1;
                }
                push(p, &mut pos);
                continue;
            }
            let mut n_ws = 0;
            while s.is(pos + n_ws, |f| f.whitespace) {
                n_ws += 1;
            }
            if n_ws > 1 && s.cpt(pos + n_ws).is_some() {
                push(pos + n_ws - 1, &mut pos);
                continue;
            }
            if n_ws > 0 {
                push(pos + n_ws, &mut pos);
                continue;
            }
            push(pos + 1, &mut pos);
        }
        start = s.end;
    }
    out
}

/// Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`; with `single_digits` (Qwen 2) `\p{N}`
/// instead of `\p{N}{1,3}`.
fn llama3(t: &Text, words: &[usize], single_digits: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(words.len());
    let mut start = 0;
    for &len in words {
        let s = Span { t, ini: start, end: start + len };
        let mut pos = s.ini;
        let mut push = |to: usize, pos: &mut usize| {
            if to > *pos {
                out.push(to - *pos);
            }
            *pos = to;
        };
        while pos < s.end {
            let cpt = t.cpts[pos];
            let f = t.flags[pos];
            let c = contraction(&s, pos, true);
            if c > 0 {
                push(pos + c, &mut pos);
                continue;
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(cpt == '\r' || cpt == '\n' || f.number())
                && (f.letter() || s.is(pos + 1, Flags::letter))
            {
                let mut p = pos + 1;
                while s.is(p, Flags::letter) {
                    p += 1;
                }
                push(p, &mut pos);
                continue;
            }
            if f.number() {
                if single_digits {
                    push(pos + 1, &mut pos);
                } else {
                    // \p{N}{1,3}: a run of numbers in groups of three
                    let mut p = pos;
                    while s.is(p, Flags::number) {
                        p += 1;
                        if p - pos >= 3 {
                            push(p, &mut pos);
                        }
                    }
                    push(p, &mut pos);
                }
                continue;
            }
            // ' ?[^\s\p{L}\p{N}]+[\r\n]*': the space's successor decides; a space at the end of
            // the word (no successor) is taken alone here
            let f2 = if cpt == ' ' { s.flags(pos + 1) } else { Some(f) };
            if f2.is_none_or(not_space_letter_number) {
                let mut p = pos + usize::from(cpt == ' ');
                while s.is(p, not_space_letter_number) {
                    p += 1;
                }
                while matches!(s.cpt(p), Some('\r' | '\n')) {
                    p += 1;
                }
                push(p, &mut pos);
                continue;
            }
            let mut n_ws = 0;
            let mut last_newline_end = None;
            while s.is(pos + n_ws, |f| f.whitespace) {
                if matches!(t.cpts[pos + n_ws], '\r' | '\n') {
                    last_newline_end = Some(pos + n_ws + 1);
                }
                n_ws += 1;
            }
            // \s*[\r\n]+
            if let Some(end) = last_newline_end {
                push(end, &mut pos);
                continue;
            }
            // \s+(?!\S)
            if n_ws > 1 && s.cpt(pos + n_ws).is_some() {
                push(pos + n_ws - 1, &mut pos);
                continue;
            }
            if n_ws > 0 {
                push(pos + n_ws, &mut pos);
                continue;
            }
            push(pos + 1, &mut pos);
        }
        start = s.end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(split: Split, text: &str) -> Vec<&str> {
        super::split(split, text)
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words(Split::Gpt2, "Hello world's  end!!\n 123"),
            ["Hello", " world", "'s", " ", " end", "!!", "\n", " 123"]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three_and_keeps_newlines_after_punctuation() {
        assert_eq!(
            words(Split::Llama3, "1234567 x.\n\nY'LL"),
            ["123", "456", "7", " x", ".\n\n", "Y", "'LL"]
        );
        assert_eq!(words(Split::Qwen2, "2024"), ["2", "0", "2", "4"]);
        // a space at the very end is a word of its own
        assert_eq!(words(Split::Llama3, "a  "), ["a", "  "]);
        assert_eq!(words(Split::Llama3, "a \n b"), ["a", " \n", " b"]);
    }

    #[test]
    fn default_splits_punctuation_then_digits_in_threes() {
        assert_eq!(words(Split::Default, "a+b=12345"), ["a", "+", "b", "=", "123", "45"]);
    }
}
