//! A string -> id table without one allocation per entry: the texts are concatenated in one
//! buffer and a `hashbrown::HashTable` indexes them (a vocabulary of 262144 tokens builds in
//! milliseconds, where a map of boxed keys spends most of its time in the allocator).

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Texts with a `u32` value each, found by their bytes.
#[derive(Default)]
pub(crate) struct TextTable {
    texts: String,
    /// End of each entry's text in `texts`.
    ends: Vec<u32>,
    values: Vec<u32>,
    /// Entry indices.
    index: HashTable<u32>,
}

impl TextTable {
    /// An empty table with room for `n` entries.
    pub(crate) fn with_capacity(n: usize, text_bytes: usize) -> TextTable {
        TextTable {
            texts: String::with_capacity(text_bytes),
            ends: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
        }
    }

    fn entry_text<'a>(texts: &'a str, ends: &[u32], i: u32) -> &'a [u8] {
        let i = i as usize;
        let start = if i == 0 { 0 } else { ends[i - 1] as usize };
        &texts.as_bytes()[start..ends[i] as usize]
    }

    /// Adds `text` with `value`, or returns the value `text` already has (and adds nothing).
    /// `Err` when the texts would pass 4 GiB.
    pub(crate) fn insert(&mut self, text: &str, value: u32) -> Result<Option<u32>, ()> {
        let hash = FxBuildHasher.hash_one(text.as_bytes());
        let (texts, ends) = (&self.texts, &self.ends);
        if let Some(&i) =
            self.index.find(hash, |&i| Self::entry_text(texts, ends, i) == text.as_bytes())
        {
            return Ok(Some(self.values[i as usize]));
        }
        let end = u32::try_from(self.texts.len() + text.len()).map_err(|_| ())?;
        let i = self.ends.len() as u32;
        self.texts.push_str(text);
        self.ends.push(end);
        self.values.push(value);
        let (texts, ends) = (&self.texts, &self.ends);
        self.index
            .insert_unique(hash, i, |&j| FxBuildHasher.hash_one(Self::entry_text(texts, ends, j)));
        Ok(None)
    }

    /// The value of `text`.
    #[inline]
    pub(crate) fn get(&self, text: &[u8]) -> Option<u32> {
        let hash = FxBuildHasher.hash_one(text);
        self.index
            .find(hash, |&i| Self::entry_text(&self.texts, &self.ends, i) == text)
            .map(|&i| self.values[i as usize])
    }

    /// The text of entry `i` (for a table filled with values 0, 1, 2...: of value `i`).
    pub(crate) fn text(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.texts.get(start..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_texts_and_keeps_the_first_value() {
        let mut t = TextTable::with_capacity(4, 16);
        assert_eq!(t.insert("a", 0), Ok(None));
        assert_eq!(t.insert("▁b", 1), Ok(None));
        assert_eq!(t.insert("a", 2), Ok(Some(0)));
        assert_eq!(t.get(b"a"), Some(0));
        assert_eq!(t.get("▁b".as_bytes()), Some(1));
        assert_eq!(t.get(b"b"), None);
        assert_eq!(t.text(1), Some("▁b"));
    }
}
