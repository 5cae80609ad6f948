//! Streaming detokenization: token pieces are bytes, and a multi-byte character may be split
//! across tokens (byte-fallback tokens, byte-level BPE). [`StreamDecoder`] turns the bytes into
//! text as they come, holding an incomplete character until its last byte arrives.

/// Turns a stream of bytes into text, one complete UTF-8 character at a time.
///
/// Bytes that can never be part of valid UTF-8 become U+FFFD as soon as that is certain; a
/// sequence still incomplete at [`StreamDecoder::flush`] becomes one U+FFFD.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    /// The start of an incomplete character (at most 3 bytes).
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// A decoder with nothing pending.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds `bytes` and returns every character they complete (possibly none).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut rest = buf.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // SAFETY-free: `valid` is the prefix from_utf8 checked
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        None => {
                            // an incomplete character at the end: wait for its other bytes
                            self.pending = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether an incomplete character is waiting for more bytes.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ends the stream: what is still pending, as U+FFFD (empty when nothing is).
    pub fn flush(&mut self) -> String {
        let pending = std::mem::take(&mut self.pending);
        String::from_utf8_lossy(&pending).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_a_split_character_until_complete() {
        let mut d = StreamDecoder::new();
        let bytes = "a😀b".as_bytes();
        assert_eq!(d.push(&bytes[..2]), "a");
        assert!(d.has_pending());
        assert_eq!(d.push(&bytes[2..4]), "");
        assert_eq!(d.push(&bytes[4..]), "😀b");
        assert_eq!(d.flush(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut d = StreamDecoder::new();
        assert_eq!(d.push(b"x\xffy"), "x\u{fffd}y");
        assert_eq!(d.push(b"\xe4\xb8"), "");
        assert_eq!(d.push(b"z"), "\u{fffd}z");
        assert_eq!(d.push(b"\xf0\x9f"), "");
        assert_eq!(d.flush(), "\u{fffd}");
    }
}
