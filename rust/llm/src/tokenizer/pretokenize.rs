//! BPE pre-tokenizers: text -> words, exactly as llama.cpp's `unicode_regex_split` cuts them.
//!
//! llama.cpp runs its patterns through hand-written matchers (GPT-2, Llama 3, Qwen 2, Qwen 3.5,
//! newline runs) and, for the others, `std::regex`: over a "collapsed" copy of the text in which
//! every non-ASCII code point is one byte standing for its class when the pattern names a class
//! (`\p{L}`...), else over the code points with non-ASCII whitespace read as a vertical tab. The
//! matchers below follow the hand-written ones step by step (including where they differ from the
//! regex they name, e.g. a trailing single space is a word of its own) and reproduce what
//! `std::regex` finds for the simple patterns of `default`, StarCoder, Falcon and DeepSeek (`\s`
//! is then the 6 ASCII spaces and, standing in for the others, every Unicode White_Space code
//! point). Each step refines the words of the previous one, as llama.cpp applies a list of
//! patterns.

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
    let ascii_triples = |t: &Text, p: usize, end: usize| {
        if p + 3 <= end && t.cpts[p..p + 3].iter().all(|c| c.is_ascii_digit()) {
            3
        } else {
            0
        }
    };
    match split {
        Split::Gpt2 => words = gpt2(&t, &words),
        Split::Llama3 => words = llama3(&t, &words, Llama3Style::Llama3),
        Split::Qwen2 => words = llama3(&t, &words, Llama3Style::Qwen2),
        Split::Qwen35 => words = llama3(&t, &words, Llama3Style::Qwen35),
        Split::Digits => {
            words = runs(&t, &words, |t, p, end| {
                usize::from(p < end && is_number_collapsed(t.cpts[p], t.flags[p]))
            });
            words = gpt2(&t, &words);
        }
        Split::Default => {
            // [\p{P}\$\+<=>\^~\|]+, GPT-2, \p{N}+, [0-9][0-9][0-9]
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_punct_collapsed));
            words = gpt2(&t, &words);
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_number_collapsed));
            words = runs(&t, &words, ascii_triples);
        }
        Split::Falcon => {
            // [\p{P}\$\+<=>\^~\|`]+, GPT-2, [0-9][0-9][0-9]
            words = runs(&t, &words, |t, p, end| {
                run_len(t, p, end, |c, f| is_punct_only_collapsed(c, f) || is_symbol_ascii(c))
            });
            words = gpt2(&t, &words);
            words = runs(&t, &words, ascii_triples);
        }
        Split::DeepseekLlm => {
            // [\r\n], \s?[<cased letters>]+, \s?[!-/:-~！-／：-～‘-‟　-。]+, \s+$, [一-龥ࠀ-一가-퟿]+,
            // \p{N}+
            words = runs(&t, &words, |t, p, _| usize::from(matches!(t.cpts[p], '\r' | '\n')));
            words = runs(&t, &words, |t, p, end| space_then_run(t, p, end, is_cased_letter));
            words = runs(&t, &words, |t, p, end| space_then_run(t, p, end, is_deepseek_punct));
            words = trailing_space(&t, &words);
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_deepseek_cjk));
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_number_collapsed));
        }
        Split::DeepseekCoder => {
            // [\r\n], \s?\p{L}+, \s?\p{P}+, [一-龥ࠀ-一가-퟿]+, \p{N}
            words = runs(&t, &words, |t, p, _| usize::from(matches!(t.cpts[p], '\r' | '\n')));
            words = runs(&t, &words, |t, p, end| space_then_run(t, p, end, is_letter_collapsed));
            words =
                runs(&t, &words, |t, p, end| space_then_run(t, p, end, is_punct_only_collapsed));
            words = runs(&t, &words, |t, p, end| run_len(t, p, end, is_deepseek_cjk));
            words =
                runs(&t, &words, |t, p, _| usize::from(is_number_collapsed(t.cpts[p], t.flags[p])));
        }
        Split::Newlines => {
            // [^\n]+|[\n]+
            words = runs(&t, &words, |t, p, end| {
                let nl = t.cpts[p] == '\n';
                t.cpts[p..end].iter().take_while(|&&c| (c == '\n') == nl).count()
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

/// `\p{P}` of a collapsed pattern: llama.cpp's ASCII punctuation (`!-#%-*,-/:;?@[-]_{}`), or a
/// non-ASCII punctuation code point that is not whitespace.
fn is_punct_only_collapsed(c: char, f: Flags) -> bool {
    (c.is_ascii() || !f.whitespace) && f.class == Class::Punctuation
}

/// `[\p{P}\$\+<=>\^~\|]` of a collapsed pattern (`default`'s; the backtick is not in it).
fn is_punct_collapsed(c: char, f: Flags) -> bool {
    is_punct_only_collapsed(c, f) || (is_symbol_ascii(c) && c != '`')
}

/// `\p{L}` of a collapsed pattern: ASCII letters, or a non-ASCII letter that is not whitespace.
fn is_letter_collapsed(c: char, f: Flags) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else {
        !f.whitespace && f.class == Class::Letter
    }
}

/// The ASCII symbols `$+<=>^`|~` (llama.cpp's `\p{S}` below 128).
fn is_symbol_ascii(c: char) -> bool {
    matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '`' | '|' | '~')
}

/// `\s` of llama.cpp's `std::regex` patterns: the ASCII spaces `\t \n \v \f \r` and ' ', and
/// every other White_Space code point, which llama.cpp rewrites as `\v` before matching.
fn is_space(f: Flags) -> bool {
    f.whitespace
}

/// Whether `c` is in `ranges` (sorted, inclusive, disjoint); non-ASCII whitespace never is (the
/// matcher sees it as `\v`).
fn in_ranges(c: char, f: Flags, ranges: &[(u32, u32)]) -> bool {
    let cp = c as u32;
    if cp > 0x7f && f.whitespace {
        return false;
    }
    let i = ranges.partition_point(|&(_, hi)| hi < cp);
    ranges.get(i).is_some_and(|&(lo, _)| lo <= cp)
}

/// The letters DeepSeek LLM's pattern `\s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+` lists (its tokenizer.json spells
/// out the cased letters), as ranges.
const DEEPSEEK_CASED: &[(u32, u32)] = &[
    (0x41, 0x5A),
    (0x61, 0x7A),
    (0xB5, 0xB5),
    (0xC0, 0xD6),
    (0xD8, 0xF6),
    (0xF8, 0x1BA),
    (0x1BC, 0x1BF),
    (0x1C4, 0x293),
    (0x295, 0x2AF),
    (0x370, 0x373),
    (0x376, 0x377),
    (0x37B, 0x37D),
    (0x37F, 0x37F),
    (0x386, 0x386),
    (0x388, 0x38A),
    (0x38C, 0x38C),
    (0x38E, 0x3A1),
    (0x3A3, 0x3F5),
    (0x3F7, 0x481),
    (0x48A, 0x52F),
    (0x531, 0x556),
    (0x10A0, 0x10C5),
    (0x13A0, 0x13F5),
    (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57),
    (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC),
    (0x2102, 0x2102),
    (0x2107, 0x2107),
    (0x210A, 0x2113),
    (0x2115, 0x2115),
    (0x2119, 0x211D),
    (0x2124, 0x2124),
    (0x2126, 0x2126),
    (0x2128, 0x2128),
    (0x212A, 0x212D),
    (0x212F, 0x2134),
    (0x2139, 0x2139),
    (0x213C, 0x213F),
    (0x2145, 0x2149),
    (0x214E, 0x214E),
    (0x2183, 0x2184),
    (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF3),
    (0xA640, 0xA66D),
    (0xA680, 0xA69B),
    (0xA722, 0xA76F),
    (0xA771, 0xA787),
    (0xA78B, 0xA78E),
    (0xAB70, 0xABBF),
    (0xFB00, 0xFB06),
    (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A),
    (0x10400, 0x1044F),
    (0x104B0, 0x104D3),
    (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
];

fn is_cased_letter(c: char, f: Flags) -> bool {
    in_ranges(c, f, DEEPSEEK_CASED)
}

/// DeepSeek LLM's `[!-/:-~！-／：-～‘-‟　-。]` (U+3000 is whitespace, so never in it).
fn is_deepseek_punct(c: char, f: Flags) -> bool {
    const R: &[(u32, u32)] = &[
        (0x21, 0x2F),
        (0x3A, 0x7E),
        (0x2018, 0x201F),
        (0x3000, 0x3002),
        (0xFF01, 0xFF0F),
        (0xFF1A, 0xFF5E),
    ];
    in_ranges(c, f, R)
}

/// DeepSeek's `[一-龥ࠀ-一가-퟿]`: U+0800..U+9FA5 and U+AC00..U+D7FF (not whitespace).
fn is_deepseek_cjk(c: char, f: Flags) -> bool {
    in_ranges(c, f, &[(0x800, 0x9FA5), (0xAC00, 0xD7FF)])
}

/// A match of `\s?X+` at `p` (X given by `class`): its length, 0 for none.
fn space_then_run(t: &Text, p: usize, end: usize, class: impl Fn(char, Flags) -> bool) -> usize {
    let from = if is_space(t.flags[p]) && p + 1 < end && class(t.cpts[p + 1], t.flags[p + 1]) {
        p + 1
    } else {
        p
    };
    let n = run_len(t, from, end, class);
    if n == 0 {
        0
    } else {
        from - p + n
    }
}

/// Refines `words` by `\s+$`: the whitespace a word ends with becomes a word of its own.
fn trailing_space(t: &Text, words: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(words.len());
    let mut start = 0;
    for &len in words {
        let end = start + len;
        let n = t.flags[start..end].iter().rev().take_while(|f| is_space(**f)).count();
        if n > 0 && n < len {
            out.push(len - n);
        }
        out.push(if n > 0 { n } else { len });
        start = end;
    }
    out
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

/// The variants of Llama 3's pattern.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Llama3Style {
    /// Digits in groups of up to three.
    Llama3,
    /// Qwen 2: `\p{N}` instead of `\p{N}{1,3}`.
    Qwen2,
    /// Qwen 3.5: Qwen 2's with marks as letters (`[\p{L}\p{M}]+`, `[^\s\p{L}\p{M}\p{N}]+`).
    Qwen35,
}

/// Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, or a variant of it.
fn llama3(t: &Text, words: &[usize], style: Llama3Style) -> Vec<usize> {
    let single_digits = style != Llama3Style::Llama3;
    let marks = style == Llama3Style::Qwen35;
    // \p{L}, or [\p{L}\p{M}] for Qwen 3.5
    let wordy = move |f: Flags| f.letter() || (marks && f.class == Class::Mark);
    let other = move |f: Flags| !(f.whitespace || wordy(f) || f.number());
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
            if !(cpt == '\r' || cpt == '\n' || f.number()) && (wordy(f) || s.is(pos + 1, wordy)) {
                let mut p = pos + 1;
                while s.is(p, wordy) {
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
            if f2.is_none_or(other) {
                let mut p = pos + usize::from(cpt == ' ');
                while s.is(p, other) {
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
