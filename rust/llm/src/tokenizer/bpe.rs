//! BPE merging (llama.cpp's `llm_tokenizer_bpe_session`): each pre-tokenizer word is written in
//! GPT-2's byte-to-unicode form (byte-level BPE; Gemma 4 merges the raw UTF-8), split into its
//! characters, and the adjacent pair with the lowest merge rank (the leftmost among equal ranks)
//! is merged until no pair has a rank; each piece is then its token or, when it is none, the
//! tokens of its single bytes (byte-level: the one-byte tokens of its text; Gemma 4: the
//! byte-fallback tokens `<0xXX>` of its bytes).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{unicode, MergeMap, TokenMap};

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Scratch buffers reused across the words of one `encode`.
#[derive(Default)]
pub(crate) struct Scratch {
    mapped: String,
    key: Vec<u8>,
    symbols: Vec<Symbol>,
    heap: BinaryHeap<Reverse<(u32, usize, usize, usize)>>,
}

/// What a vocabulary's pre-tokenizer asks of the merging.
#[derive(Clone, Copy)]
pub(crate) struct Options {
    /// A word that is a token is taken whole (Llama 3).
    pub ignore_merges: bool,
    /// Words are written in GPT-2's byte-to-unicode form first (else raw UTF-8, with
    /// byte-fallback tokens).
    pub byte_encode: bool,
    /// A run of newlines that is a token is taken whole (Gemma 4).
    pub whole_newlines: bool,
}

/// The tables a word is merged with.
pub(crate) struct Tables<'a> {
    pub tokens: &'a TokenMap,
    pub merges: &'a MergeMap,
    /// The byte-fallback token of each byte (used without `byte_encode`).
    pub byte_tokens: &'a [Option<u32>; 256],
}

/// Appends the tokens of one pre-tokenizer `word` (raw text) to `out`.
pub(crate) fn tokenize_word(
    word: &str,
    t: &Tables,
    opts: Options,
    scratch: &mut Scratch,
    out: &mut Vec<u32>,
) {
    let Tables { tokens, merges, byte_tokens } = *t;
    let Scratch { mapped, key, symbols, heap } = scratch;
    mapped.clear();
    if opts.byte_encode {
        mapped.extend(word.bytes().map(unicode::byte_to_char));
    } else {
        mapped.push_str(word);
    }
    let text = mapped.as_bytes();
    symbols.clear();
    heap.clear();

    let whole = opts.ignore_merges || (opts.whole_newlines && text.iter().all(|&b| b == b'\n'));
    if whole {
        if let Some(id) = tokens.get(text) {
            out.push(id);
            return;
        }
    }
    for (i, (start, c)) in mapped.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: Some(i + 1),
        });
    }
    let Some(last) = symbols.last_mut() else { return };
    last.next = None;

    let rank = |key: &mut Vec<u8>, symbols: &[Symbol], left: usize, right: usize| -> Option<u32> {
        let (l, r) = (symbols[left], symbols[right]);
        key.clear();
        key.extend_from_slice(&text[l.start..l.start + l.len]);
        key.push(b' ');
        key.extend_from_slice(&text[r.start..r.start + r.len]);
        merges.get(key.as_slice())
    };
    for i in 1..symbols.len() {
        if let Some(r) = rank(key, symbols, i - 1, i) {
            heap.push(Reverse((r, i - 1, i, symbols[i - 1].len + symbols[i].len)));
        }
    }
    while let Some(Reverse((_, left, right, size))) = heap.pop() {
        let (l, r) = (symbols[left], symbols[right]);
        // a merge since the push changed one side: this pair no longer exists
        if l.len == 0 || r.len == 0 || l.len + r.len != size {
            continue;
        }
        symbols[left].len += r.len;
        symbols[right].len = 0;
        symbols[left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(left);
        }
        if let Some(p) = l.prev {
            if let Some(rk) = rank(key, symbols, p, left) {
                heap.push(Reverse((rk, p, left, symbols[p].len + symbols[left].len)));
            }
        }
        if let Some(n) = r.next {
            if let Some(rk) = rank(key, symbols, left, n) {
                heap.push(Reverse((rk, left, n, symbols[left].len + symbols[n].len)));
            }
        }
    }

    let mut i = Some(0);
    while let Some(s) = i {
        let sym = symbols[s];
        let piece = &text[sym.start..sym.start + sym.len];
        match tokens.get(piece) {
            Some(id) => out.push(id),
            // as llama.cpp: the piece's bytes (of the mapped text) that are tokens by themselves
            None if opts.byte_encode => {
                out.extend(piece.iter().filter_map(|b| tokens.get(std::slice::from_ref(b))))
            }
            None => out.extend(piece.iter().filter_map(|&b| byte_tokens[b as usize])),
        }
        i = sym.next;
    }
}
