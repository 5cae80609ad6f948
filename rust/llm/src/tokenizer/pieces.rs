//! Token pieces (llama.cpp's `token_to_piece`, cached for every id at load as llama.cpp does)
//! and the clean-up of decoded text.

use super::attrs::attr;
use super::{unicode, TokenMap};

/// How a normal token's text becomes its bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceStyle {
    /// U+2581 is a space (SentencePiece, WordPiece, Gemma 4's BPE).
    Spaces,
    /// Every character is the byte GPT-2's byte-to-unicode map gives it (byte-level BPE).
    ByteLevel,
}

/// `token_to_piece(id, special = true)` of every id, concatenated.
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Pieces {
    /// The pieces of the tokens `texts` (ids 0..) with attributes `attrs`; `None` past 4 GiB.
    pub(crate) fn new(style: PieceStyle, texts: &TokenMap, attrs: &[u8]) -> Option<Pieces> {
        let mut bytes = Vec::with_capacity(attrs.len() * 4);
        let mut ends = Vec::with_capacity(attrs.len());
        for (id, &a) in attrs.iter().enumerate() {
            piece_into(style, texts.text(id).unwrap_or_default(), a, &mut bytes);
            ends.push(u32::try_from(bytes.len()).ok()?);
        }
        Some(Pieces { bytes, ends })
    }

    /// The piece of `id` (with `special`).
    pub(crate) fn get(&self, id: usize) -> &[u8] {
        let start = if id == 0 { 0 } else { self.ends[id - 1] as usize };
        &self.bytes[start..self.ends[id] as usize]
    }
}

/// The piece (with `special`) of a token of text `text` and attributes `a`, as llama.cpp's
/// `token_to_piece_for_cache` makes it.
fn piece_into(style: PieceStyle, text: &str, a: u8, out: &mut Vec<u8>) {
    if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if a & attr::NORMAL != 0 {
        match style {
            PieceStyle::Spaces => {
                // U+2581 (E2 96 81) is a space
                let mut rest = text.as_bytes();
                while let Some(i) = rest.windows(3).position(|w| w == "\u{2581}".as_bytes()) {
                    out.extend_from_slice(&rest[..i]);
                    out.push(b' ');
                    rest = &rest[i + 3..];
                }
                out.extend_from_slice(rest);
            }
            PieceStyle::ByteLevel => {
                for c in text.chars() {
                    match unicode::char_to_byte(c) {
                        Some(b) => out.push(b),
                        None => {
                            // llama.cpp's llama_decode_text
                            out.extend_from_slice(b"[UNK_BYTE_0x");
                            let mut buf = [0u8; 4];
                            for b in c.encode_utf8(&mut buf).bytes() {
                                out.extend_from_slice(format!("{b:02x}").as_bytes());
                            }
                            out.extend_from_slice(text.as_bytes());
                            out.push(b']');
                        }
                    }
                }
            }
        }
    } else if a & attr::BYTE != 0 {
        out.push(byte_of(text));
    }
}

/// The byte of a byte token `<0xXX>` (llama.cpp reads the two characters after `<0x` as hex,
/// stopping at the first that is not).
fn byte_of(text: &str) -> u8 {
    let digits = text.as_bytes().get(3..).unwrap_or_default();
    let mut v: u32 = 0;
    for &d in digits.iter().take(2) {
        match (d as char).to_digit(16) {
            Some(x) => v = v * 16 + x,
            None => break,
        }
    }
    v as u8
}

/// llama.cpp's `clean_spaces` passes of `detokenize`, byte for byte.
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    // first pass: " ?", " !", " .", " ," lose the space
    let n1 = text.len();
    let mut total = usize::from(n1 > 0);
    for i in 1..n1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
    // second pass: " ' " becomes "'"
    let n2 = text.len();
    let mut total = usize::from(n2 > 0);
    let mut i = 1;
    while i < n2 {
        let x = text[i];
        if x == b'\'' && i + 1 < n2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);
    // third pass: " 's", " 'm", " 're", " 've" lose the space
    let n3 = text.len();
    let mut total = usize::from(n3 > 0);
    for i in 1..n3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n3 {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < n3 {
                let x2 = text[i + 2];
                if matches!(x1, b'r' | b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_token_texts() {
        assert_eq!(byte_of("<0x0A>"), 0x0a);
        assert_eq!(byte_of("<0xFF>"), 0xff);
        assert_eq!(byte_of("<0x"), 0);
    }

    #[test]
    fn clean_spaces_as_llama_cpp() {
        let clean = |s: &str| {
            let mut v = s.as_bytes().to_vec();
            clean_spaces(&mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(clean("Hi , there ! ok ?"), "Hi, there! ok?");
        assert_eq!(
            clean("it 's I 'm we 're they 've I 'd we 'll"),
            "it's I'm we're they've I 'd we 'll"
        );
        assert_eq!(clean("a ' b"), "a'b");
    }
}
