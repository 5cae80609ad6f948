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
