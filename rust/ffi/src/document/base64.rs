//! Standard base64, for the bytes of graph documents' constants and of the protocol's tensors.

use super::DocumentError;

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (with padding) of `bytes`.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional, whitespace not allowed). Errors are
/// [`DocumentError::Base64`], naming the offending character and its position.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, DocumentError> {
    let bad = |why: String| DocumentError::Base64(why);
    let trimmed = text.trim_end_matches('=');
    if text.len() - trimmed.len() > 2 {
        return Err(bad(format!("{} padding characters (at most 2)", text.len() - trimmed.len())));
    }
    if text.len() != trimmed.len() && !text.len().is_multiple_of(4) {
        return Err(bad(format!(
            "{} characters with padding (a multiple of 4 needed)",
            text.len()
        )));
    }
    let mut out = Vec::with_capacity(trimmed.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for (pos, c) in trimmed.bytes().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => {
                // Name the character as written (it may be a byte of a multi-byte one).
                let shown = trimmed.get(pos..).and_then(|t| t.chars().next()).unwrap_or(c as char);
                return Err(bad(format!("unexpected character {shown:?} at position {pos}")));
            }
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return Err(bad(format!("{} characters cannot end a base64 text", trimmed.len())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for n in 0..10 {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64_encode(b"Man"), "TWFu");
        assert_eq!(base64_encode(b"Ma"), "TWE=");
        assert_eq!(
            base64_decode("TW!u").unwrap_err().to_string(),
            "invalid base64: unexpected character '!' at position 2"
        );
        assert_eq!(base64_decode("TWE").unwrap(), b"Ma");
        assert!(base64_decode("TWE==").is_err());
        assert!(base64_decode("TWFuT").is_err());
    }
}
