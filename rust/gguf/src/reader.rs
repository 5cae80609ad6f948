//! A bounds-checked little-endian cursor over the file's bytes that knows its byte offset.
//!
//! Every read checks the bytes left first and fails with [`GgufError::Truncated`]; counts are
//! checked against the bytes left (at the smallest encoding of one item) before anything is
//! allocated from them ([`Cursor::check_count`]). Descriptions of what is read are closures,
//! formatted only when a read fails.

use crate::error::{GgufError, Result};

/// A position in a byte slice.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    /// The current byte offset.
    pub(crate) fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes left after the current offset.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes, or [`GgufError::Truncated`] naming `what`.
    pub(crate) fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => {
                let s = &self.bytes[self.pos..self.pos + n];
                self.pos += n;
                Ok(s)
            }
            _ => Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                need: n,
                len: self.bytes.len(),
            }),
        }
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A little-endian `u32`.
    pub(crate) fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub(crate) fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: a `u64` length and that many bytes of UTF-8.
    pub(crate) fn string(&mut self, what: impl Fn() -> String) -> Result<String> {
        let len = self.u64(|| format!("length of {}", what()))?;
        let start = self.pos;
        let bytes = self.take(len, &what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::BadUtf8 { what: what(), offset: start }),
        }
    }

    /// Checks that the bytes left can hold `count` items of at least `min_size` bytes each
    /// (the count itself was read at `offset`), and returns the count as `usize`. Call this
    /// before allocating anything from a count read from the file.
    pub(crate) fn check_count(
        &self,
        count: u64,
        min_size: usize,
        offset: usize,
        what: impl FnOnce() -> String,
    ) -> Result<usize> {
        let fits = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(min_size))
            .is_some_and(|bytes| bytes <= self.remaining());
        match usize::try_from(count) {
            Ok(n) if fits => Ok(n),
            _ => Err(GgufError::TooLarge {
                what: what(),
                count,
                offset,
                min_size,
                remaining: self.remaining(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_truncation_where_it_happens() {
        let bytes = [1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u32(|| "a".into()).unwrap(), 1);
        assert_eq!(c.u64(|| "b".into()).unwrap(), 2);
        assert_eq!(c.offset(), 12);
        match c.u32(|| "c".into()) {
            Err(GgufError::Truncated { what, offset: 12, need: 4, len: 13 }) => {
                assert_eq!(what, "c")
            }
            other => panic!("{other:?}"),
        }
        // A failed read does not move the cursor.
        assert_eq!(c.offset(), 12);
        assert_eq!(
            c.take(u64::MAX, || "huge".into()).unwrap_err().to_string(),
            "file truncated: huge at byte 12 needs 18446744073709551615 bytes, but the file has 13"
        );
    }

    #[test]
    fn counts_are_checked_against_the_bytes_left() {
        let bytes = [0u8; 100];
        let c = Cursor::new(&bytes);
        assert_eq!(c.check_count(12, 8, 0, || "n".into()).unwrap(), 12);
        assert!(matches!(
            c.check_count(13, 8, 0, || "n".into()),
            Err(GgufError::TooLarge { count: 13, min_size: 8, remaining: 100, .. })
        ));
        assert!(c.check_count(u64::MAX, 1, 0, || "n".into()).is_err());
        assert!(c.check_count(1 << 62, 8, 0, || "n".into()).is_err());
    }

    #[test]
    fn strings_must_be_utf8() {
        let mut bytes = vec![2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe];
        assert!(matches!(
            Cursor::new(&bytes).string(|| "s".into()),
            Err(GgufError::BadUtf8 { offset: 8, .. })
        ));
        bytes[8] = b'o';
        bytes[9] = b'k';
        assert_eq!(Cursor::new(&bytes).string(|| "s".into()).unwrap(), "ok");
    }
}
