//! Code point classes the pre-tokenizers split on, and GPT-2's byte <-> character map.
//!
//! llama.cpp classifies code points with tables generated from Unicode 15.1's UnicodeData.txt;
//! `unicode-properties` 0.1.2 carries the same version's General_Category (pinned in Cargo.toml:
//! a newer Unicode would turn code points that llama.cpp sees as unassigned into letters or
//! symbols, and split differently).

use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};

/// The General_Category group of a code point, as llama.cpp's flags keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// `Cn`: unassigned (still counts as "not a letter, number or space").
    Unassigned,
    /// `L*`
    Letter,
    /// `M*`
    Mark,
    /// `N*`
    Number,
    /// `P*`
    Punctuation,
    /// `S*`
    Symbol,
    /// `Z*`
    Separator,
    /// `Cc`, `Cf`, `Co` (and `Cs`, which a `char` cannot hold)
    Control,
}

/// Class and White_Space of one code point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flags {
    /// General_Category group.
    pub class: Class,
    /// Unicode White_Space (the 25 code points `\s` matches in llama.cpp's splitters).
    pub whitespace: bool,
}

impl Flags {
    /// `\p{L}`
    #[inline]
    pub fn letter(self) -> bool {
        self.class == Class::Letter
    }
    /// `\p{N}`
    #[inline]
    pub fn number(self) -> bool {
        self.class == Class::Number
    }
}

/// The flags of `c`.
#[inline]
pub(crate) fn flags(c: char) -> Flags {
    let class = if c.is_ascii() {
        ascii_class(c as u8)
    } else {
        match c.general_category() {
            G::Unassigned => Class::Unassigned,
            G::Control | G::Format | G::Surrogate | G::PrivateUse => Class::Control,
            G::UppercaseLetter
            | G::LowercaseLetter
            | G::TitlecaseLetter
            | G::ModifierLetter
            | G::OtherLetter => Class::Letter,
            G::NonspacingMark | G::SpacingMark | G::EnclosingMark => Class::Mark,
            G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Number,
            G::SpaceSeparator | G::LineSeparator | G::ParagraphSeparator => Class::Separator,
            G::MathSymbol | G::CurrencySymbol | G::ModifierSymbol | G::OtherSymbol => Class::Symbol,
            G::ConnectorPunctuation
            | G::DashPunctuation
            | G::OpenPunctuation
            | G::ClosePunctuation
            | G::InitialPunctuation
            | G::FinalPunctuation
            | G::OtherPunctuation => Class::Punctuation,
        }
    };
    Flags { class, whitespace: c.is_whitespace() }
}

/// llama.cpp's `unicode_tolower`: the simple lowercase mapping of UnicodeData.txt, for the code
/// points assigned in Unicode 15.1 (std's tables are newer: a letter added since, unassigned for
/// llama.cpp, is left as it is). The full mapping's first code point is the simple mapping (they
/// differ only for U+0130, whose full mapping is "i" + U+0307).
pub(crate) fn lowercase(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    if flags(c).class == Class::Unassigned {
        return c;
    }
    c.to_lowercase().next().unwrap_or(c)
}

/// llama.cpp's `unicode_cpts_normalize_nfd` of one code point: the first code point of its
/// canonical decomposition (the combining marks after it are dropped), for the code points
/// assigned in Unicode 15.1.
pub(crate) fn nfd_first(c: char) -> char {
    if c.is_ascii() || flags(c).class == Class::Unassigned {
        return c;
    }
    let mut first = None;
    unicode_normalization::char::decompose_canonical(c, |d| {
        first.get_or_insert(d);
    });
    first.unwrap_or(c)
}

fn ascii_class(b: u8) -> Class {
    match b {
        b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
        b'0'..=b'9' => Class::Number,
        b' ' => Class::Separator,
        b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~' => Class::Symbol,
        0x21..=0x7e => Class::Punctuation,
        _ => Class::Control,
    }
}

const fn printable(b: u32) -> bool {
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
}

/// GPT-2's byte -> code point map: printable Latin-1 bytes map to themselves, the other 68 to
/// U+0100..U+0143 in byte order.
const BYTE_TO_CP: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut next = 0x100;
    let mut b = 0;
    while b < 256 {
        if printable(b) {
            table[b as usize] = b;
        } else {
            table[b as usize] = next;
            next += 1;
        }
        b += 1;
    }
    table
};

/// The inverse of [`BYTE_TO_CP`] for U+0100..U+0143.
const HIGH_TO_BYTE: [u8; 68] = {
    let mut table = [0u8; 68];
    let mut b = 0;
    while b < 256 {
        if !printable(b) {
            table[(BYTE_TO_CP[b as usize] - 0x100) as usize] = b as u8;
        }
        b += 1;
    }
    table
};

/// The character of GPT-2's map that stands for `b`.
#[inline]
pub(crate) fn byte_to_char(b: u8) -> char {
    // every entry is below U+0144, a valid scalar value
    char::from_u32(BYTE_TO_CP[b as usize]).unwrap_or('\u{fffd}')
}

/// The byte a character of GPT-2's map stands for, if it is one.
#[inline]
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x100 {
        printable(cp).then_some(cp as u8)
    } else if cp < 0x144 {
        Some(HIGH_TO_BYTE[(cp - 0x100) as usize])
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's code point tables (`src/unicode-data.cpp` of the llama-cpp-python 0.3.36 source
    /// package, which scripts/setup.sh unpacks) against these functions, for every code point:
    /// the General_Category group, White_Space, the simple lowercase mapping and the first code
    /// point of the canonical decomposition.
    #[test]
    fn every_code_point_is_classified_mapped_and_decomposed_as_llama_cpp() {
        let dir = match std::env::var_os("TESSERA_LLAMA_SUITE") {
            Some(d) => std::path::PathBuf::from(d),
            None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/llama-tokenizer-suite"),
        };
        let path = dir.join("src/unicode-data.cpp");
        let src = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup.sh unpacks llama.cpp's test suite there)",
                path.display()
            )
        });
        // the hex numbers of the lines of the table that starts at the line naming `name`
        let table = |name: &str| -> Vec<Vec<u32>> {
            let start = src.find(name).unwrap_or_else(|| panic!("{name} not found"));
            src[start..]
                .lines()
                .skip(1)
                .take_while(|l| !l.starts_with("};"))
                .map(|l| {
                    l.split(|c: char| !c.is_ascii_alphanumeric())
                        .filter_map(|x| x.strip_prefix("0x"))
                        .map(|x| u32::from_str_radix(x, 16).expect("hex"))
                        .collect()
                })
                .collect()
        };
        let ranges = table("unicode_ranges_flags");
        let whitespace: std::collections::HashSet<u32> =
            table("unicode_set_whitespace").into_iter().map(|v| v[0]).collect();
        let lower: std::collections::HashMap<u32, u32> =
            table("unicode_map_lowercase").into_iter().map(|v| (v[0], v[1])).collect();
        let nfd = table("unicode_ranges_nfd");
        assert!(ranges.len() > 1000 && whitespace.len() == 25 && lower.len() > 1000);
        assert!(nfd.len() > 1000);

        let (mut r, mut d) = (0, 0);
        let mut checked = 0;
        for cp in 0..0x110000u32 {
            while ranges[r + 1][0] <= cp {
                r += 1;
            }
            while d + 1 < nfd.len() && nfd[d + 1][0] <= cp {
                d += 1;
            }
            let Some(c) = char::from_u32(cp) else { continue };
            let class = match ranges[r][1] & 0xff {
                0x01 => Class::Unassigned,
                0x02 => Class::Number,
                0x04 => Class::Letter,
                0x08 => Class::Separator,
                0x10 => Class::Mark,
                0x20 => Class::Punctuation,
                0x40 => Class::Symbol,
                0x80 => Class::Control,
                f => panic!("U+{cp:04X}: flags {f:#x}"),
            };
            let want = Flags { class, whitespace: whitespace.contains(&cp) };
            assert_eq!(flags(c), want, "U+{cp:04X}");
            let want_lower = lower.get(&cp).copied().unwrap_or(cp);
            assert_eq!(lowercase(c) as u32, want_lower, "lowercase of U+{cp:04X}");
            let (first, last, to) = (nfd[d][0], nfd[d][1], nfd[d][2]);
            let want_nfd = if first <= cp && cp <= last { to } else { cp };
            assert_eq!(nfd_first(c) as u32, want_nfd, "NFD of U+{cp:04X}");
            checked += 1;
        }
        assert_eq!(checked, 0x110000 - 0x800);
    }

    #[test]
    fn byte_map_round_trips_and_matches_gpt2() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xad), '\u{143}');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b), "byte {b}");
        }
        assert_eq!(char_to_byte('▁'), None);
    }

    #[test]
    fn classes_of_some_code_points() {
        assert_eq!(flags('a').class, Class::Letter);
        assert_eq!(flags('中').class, Class::Letter);
        assert_eq!(flags('\u{301}').class, Class::Mark);
        assert_eq!(flags('٣').class, Class::Number);
        assert_eq!(flags('$').class, Class::Symbol);
        assert_eq!(flags('_').class, Class::Punctuation);
        assert_eq!(flags('😀').class, Class::Symbol);
        assert_eq!(flags('\u{200d}').class, Class::Control);
        // assigned in Unicode 16, so unassigned for llama.cpp's 15.1 tables
        assert_eq!(flags('\u{1c89}').class, Class::Unassigned);
        assert!(
            flags('\u{3000}').whitespace
                && flags('\u{85}').whitespace
                && !flags('\u{200b}').whitespace
        );
    }
}
