//! SentencePiece merging (llama.cpp's `llm_tokenizer_spm_session`): start from the text's
//! UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring token (the leftmost among equal scores), then write each piece as its token
//! or, when it is none, as byte-fallback tokens. A heap keeps it O(n log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::TokenMap;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Higher score first, then the leftmost (llama.cpp's `llm_bigram_spm::comparator`).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Appends the tokens of `text` (spaces already written as U+2581) to `out`.
pub(crate) fn tokenize(
    text: &str,
    tokens: &TokenMap,
    scores: &[f32],
    byte_tokens: &[Option<u32>; 256],
    unk: Option<u32>,
    out: &mut Vec<u32>,
) {
    let bytes = text.as_bytes();
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: Some(i + 1),
        });
    }
    let Some(last) = symbols.last_mut() else { return };
    last.next = None;

    let mut heap = BinaryHeap::with_capacity(symbols.len());
    let try_add = |heap: &mut BinaryHeap<Bigram>,
                   symbols: &[Symbol],
                   left: Option<usize>,
                   right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else { return };
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        if let Some(id) = tokens.get(&bytes[start..start + size]) {
            heap.push(Bigram { score: scores[id as usize], left, right, size });
        }
    };
    for i in 1..symbols.len() {
        try_add(&mut heap, &symbols, Some(i - 1), Some(i));
    }
    while let Some(b) = heap.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        // a merge since the push changed one side: this pair no longer exists
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        symbols[b.left].len += r.len;
        symbols[b.right].len = 0;
        symbols[b.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(b.left);
        }
        try_add(&mut heap, &symbols, l.prev, Some(b.left));
        try_add(&mut heap, &symbols, Some(b.left), r.next);
    }

    let mut i = Some(0);
    while let Some(s) = i {
        let sym = symbols[s];
        let piece = &bytes[sym.start..sym.start + sym.len];
        match tokens.get(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece {
                    // llama.cpp throws when the vocabulary has no token for a byte; the unknown
                    // token (or nothing) stands in here
                    if let Some(id) = byte_tokens[b as usize].or(unk) {
                        out.push(id);
                    }
                }
            }
        }
        i = sym.next;
    }
}
