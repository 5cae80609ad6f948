//! Tokenizers from a GGUF vocabulary, giving exactly llama.cpp's tokens and pieces:
//! SentencePiece (`tokenizer.ggml.model = llama`: Gemma, Llama 2), byte-level BPE (`gpt2`,
//! with the pre-tokenizer `tokenizer.ggml.pre` names: Llama 3, Qwen 2 and 3, GPT-2, SmolLM,
//! DeepSeek, Falcon...), Gemma 4's BPE over raw UTF-8 (`gemma4`) and WordPiece (`bert`: BERT,
//! BGE, MiniLM). A vocab-only GGUF file (no tensors) is enough: [`Tokenizer::from_gguf`].
//!
//! [`Tokenizer::encode`] is `llama_tokenize(text, add_special, parse_special)`,
//! [`Tokenizer::token_to_piece`] is `llama_token_to_piece` and [`Tokenizer::decode`] is
//! `llama_detokenize(.., remove_special = false, unparse_special = special)`, including the
//! behaviours a reader may not expect (see each). [`StreamDecoder`] turns pieces into text as
//! they are generated.

mod attrs;
mod bpe;
mod pieces;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod table;
mod unicode;
mod vocab;
mod wpm;

pub use stream::StreamDecoder;
pub use vocab::{PreTokenizer, SpaceStrip, Split, TokenType, Vocab, VocabKind};

use attrs::attr;
use pieces::{PieceStyle, Pieces};
use special::{Fragment, Specials};

/// Token text (bytes) -> id.
pub(crate) type TokenMap = table::TextTable;
/// "left right" -> merge rank.
pub(crate) type MergeMap = table::TextTable;

/// What can go wrong reading a vocabulary or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Reading a metadata value failed (wrong type, value out of range).
    #[error(transparent)]
    Gguf(#[from] tessera_gguf::GgufError),
    /// A metadata key the vocabulary needs is missing.
    #[error("vocabulary metadata: {0} is missing")]
    MissingKey(&'static str),
    /// A metadata key holds a value of the wrong type.
    #[error("vocabulary metadata: {key} is {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What the tokenizer needs.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// A per-token array is shorter than the token list.
    #[error("vocabulary metadata: {key} has {len} entries for {n_tokens} tokens")]
    TooShort {
        /// The key.
        key: &'static str,
        /// Its length.
        len: usize,
        /// The number of tokens.
        n_tokens: usize,
    },
    /// The vocabulary's contents are inconsistent.
    #[error("vocabulary metadata: {key}: {reason}")]
    Malformed {
        /// The key concerned.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error(
        "unknown tokenizer model {0:?} in tokenizer.ggml.model (supported: llama, gpt2, gemma4, bert)"
    )]
    UnknownModel(String),
    /// `tokenizer.ggml.pre` names a BPE pre-tokenizer this crate does not implement.
    #[error("unknown BPE pre-tokenizer {0:?} in tokenizer.ggml.pre")]
    UnknownPreTokenizer(String),
    /// A token id past the vocabulary.
    #[error("token id {id} is out of range (the vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
}

/// A tokenizer built from a [`Vocab`]: lookup tables built once, shared by every call
/// (`Send + Sync`; `encode` and `decode` take `&self`).
pub struct Tokenizer {
    /// The vocabulary without its token texts (they are in `tokens`).
    vocab: Vocab,
    attrs: Vec<u8>,
    tokens: TokenMap,
    merges: MergeMap,
    /// SPM and Gemma 4's BPE: the byte-fallback token of each byte; byte-level BPE: the token
    /// of each byte's character.
    byte_tokens: Box<[Option<u32>; 256]>,
    /// The longest token text in bytes (WordPiece's search bound; 0 for the others).
    max_token_len: usize,
    specials: Specials,
    pieces: Pieces,
    eog: Vec<u32>,
    eot: Option<u32>,
    nl: Option<u32>,
}

impl Tokenizer {
    /// The tokenizer of a GGUF file's vocabulary (the token texts are read in place).
    pub fn from_gguf(file: &tessera_gguf::GgufFile) -> Result<Tokenizer, TokenizerError> {
        let (vocab, texts) = Vocab::from_metadata_parts(file)?;
        Tokenizer::build(vocab, texts)
    }

    /// Checks `vocab` and builds the tokenizer's tables.
    pub fn from_vocab(mut vocab: Vocab) -> Result<Tokenizer, TokenizerError> {
        let texts = std::mem::take(&mut vocab.tokens);
        Tokenizer::build(vocab, &texts)
    }

    /// [`Tokenizer::from_vocab`] with the token texts apart (`vocab.tokens` is ignored), so that
    /// a GGUF file's texts are read in place rather than copied first.
    fn build(mut vocab: Vocab, texts: &[String]) -> Result<Tokenizer, TokenizerError> {
        use vocab::keys;
        vocab.tokens = Vec::new();
        let n = texts.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(TokenizerError::Malformed {
                key: keys::TOKENS,
                reason: format!("{n} tokens"),
            });
        }
        if vocab.scores.len() < n {
            return Err(TokenizerError::TooShort {
                key: keys::SCORES,
                len: vocab.scores.len(),
                n_tokens: n,
            });
        }
        if vocab.types.len() < n {
            return Err(TokenizerError::TooShort {
                key: keys::TOKEN_TYPE,
                len: vocab.types.len(),
                n_tokens: n,
            });
        }
        for (name, id) in [
            ("bos", vocab.bos),
            ("eos", vocab.eos),
            ("eot", vocab.eot),
            ("eom", vocab.eom),
            ("unk", vocab.unk),
            ("sep", vocab.sep),
            ("pad", vocab.pad),
            ("mask", vocab.mask),
            ("fim_pre", vocab.fim_pre),
            ("fim_suf", vocab.fim_suf),
            ("fim_mid", vocab.fim_mid),
            ("fim_pad", vocab.fim_pad),
            ("fim_rep", vocab.fim_rep),
            ("fim_sep", vocab.fim_sep),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::Malformed {
                    key: keys::TOKENS,
                    reason: format!("the {name} token {id} is past the {n} tokens"),
                });
            }
        }
        if vocab.add_bos && vocab.bos.is_none() {
            return Err(TokenizerError::Malformed {
                key: keys::ADD_BOS,
                reason: "BOS is to be added but the vocabulary has no BOS token".into(),
            });
        }
        if vocab.add_eos && vocab.eos.is_none() {
            return Err(TokenizerError::Malformed {
                key: keys::ADD_EOS,
                reason: "EOS is to be added but the vocabulary has no EOS token".into(),
            });
        }
        if vocab.kind == VocabKind::Wpm && (vocab.bos.is_none() || vocab.sep.is_none()) {
            return Err(TokenizerError::Malformed {
                key: keys::SEP,
                reason: "a WordPiece vocabulary needs a CLS (BOS) and a SEP token".into(),
            });
        }

        // llama.cpp renames empty tokens, and cannot load a vocabulary with a repeated text
        let too_big = || TokenizerError::Malformed {
            key: keys::TOKENS,
            reason: "token texts exceed 4 GiB".into(),
        };
        let mut tokens = TokenMap::with_capacity(n, texts.iter().map(String::len).sum());
        for (i, t) in texts.iter().enumerate() {
            let renamed;
            let t = if t.is_empty() {
                renamed = format!("[EMPTY_{i}]");
                &renamed
            } else {
                t
            };
            if let Some(first) = tokens.insert(t, i as u32).map_err(|_| too_big())? {
                return Err(TokenizerError::Malformed {
                    key: keys::TOKENS,
                    reason: format!("tokens {first} and {i} are both {t:?}"),
                });
            }
        }

        let attrs::Roles { mut attrs, eog, eot } = attrs::resolve(&vocab, &tokens, n);
        attrs::set_space_strip(vocab.space_strip, &tokens, &mut attrs);

        let specials = Specials::new(
            (0..n)
                .filter(|&i| attrs[i] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
                .map(|i| special::SpecialToken {
                    id: i as u32,
                    text: tokens.text(i).unwrap_or_default().as_bytes(),
                    always: attrs[i] & (attr::CONTROL | attr::UNKNOWN) == 0,
                    lstrip: attrs[i] & attr::LSTRIP != 0,
                    rstrip: attrs[i] & attr::RSTRIP != 0,
                })
                .collect(),
        );

        let mut merges = MergeMap::default();
        if vocab.kind == VocabKind::Bpe {
            merges = MergeMap::with_capacity(
                vocab.merges.len(),
                vocab.merges.iter().map(String::len).sum(),
            );
            let mut joined = Vec::new();
            for (rank, m) in vocab.merges.iter().enumerate() {
                // llama.cpp splits at the first space after the first byte and keeps the first
                // rank of a repeated pair. It takes a line without such a space as the pair
                // ("", "") and a pair of unknown tokens as a merge that never applies: such
                // a list silently tokenizes byte by byte, so it is refused here.
                check_merge(m, rank, &tokens, &mut joined)?;
                merges.insert(m, rank as u32).map_err(|_| too_big())?;
            }
        }

        let mut byte_tokens = Box::new([None; 256]);
        for b in 0..=255u8 {
            let hex = || tokens.get(format!("<0x{b:02X}>").as_bytes());
            byte_tokens[b as usize] = match vocab.kind {
                VocabKind::Spm => hex().or_else(|| tokens.get(std::slice::from_ref(&b))),
                VocabKind::Bpe if !vocab.pre.byte_encode => hex(),
                VocabKind::Bpe => {
                    let mut buf = [0u8; 4];
                    tokens.get(unicode::byte_to_char(b).encode_utf8(&mut buf).as_bytes())
                }
                VocabKind::Wpm => None,
            };
        }
        // as llama.cpp, after renaming empty tokens (only WordPiece uses it)
        let max_token_len = match vocab.kind {
            VocabKind::Wpm => (0..n).map(|i| tokens.text(i).map_or(0, str::len)).max().unwrap_or(0),
            _ => 0,
        };

        let style = match vocab.kind {
            VocabKind::Bpe if vocab.pre.byte_encode => PieceStyle::ByteLevel,
            _ => PieceStyle::Spaces,
        };
        let pieces = Pieces::new(style, &tokens, &attrs).ok_or_else(too_big)?;
        let mut tok = Tokenizer {
            vocab,
            attrs,
            tokens,
            merges,
            byte_tokens,
            max_token_len,
            specials,
            pieces,
            eog,
            eot,
            nl: None,
        };
        tok.nl = match tok.vocab.kind {
            VocabKind::Spm => tok.byte_tokens[b'\n' as usize].or(tok.vocab.pad),
            VocabKind::Bpe => tok.encode("\n", false, false).first().copied().or(tok.vocab.pad),
            VocabKind::Wpm => tok.vocab.pad,
        };
        Ok(tok)
    }

    /// Tokens of `text`, exactly as llama.cpp's `llama_tokenize(text, add_special,
    /// parse_special)`: with `add_special`, BOS first and EOS last where the vocabulary says so
    /// (WordPiece: always CLS, its BOS, first and SEP last); user-defined tokens are always cut out
    /// of the text first, control tokens only with `parse_special`. SentencePiece with
    /// `add_space_prefix` puts a space before the text at the start and after every special token.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let v = &self.vocab;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let (first, last) = match v.kind {
            VocabKind::Wpm => (v.bos, v.sep),
            _ => (v.bos.filter(|_| v.add_bos), v.eos.filter(|_| v.add_eos)),
        };
        if add_special {
            out.extend(first);
        }
        let fragments = self.specials.partition(text.as_bytes(), parse_special);
        match v.kind {
            VocabKind::Spm => {
                let mut prev_special = true;
                let mut buf = String::new();
                for f in fragments {
                    match f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(a, b) => {
                            buf.clear();
                            if v.add_space_prefix && prev_special {
                                buf.push('\u{2581}');
                            }
                            escape_spaces(&text[a..b], &mut buf);
                            spm::tokenize(
                                &buf,
                                &self.tokens,
                                &v.scores,
                                &self.byte_tokens,
                                v.unk,
                                &mut out,
                            );
                            prev_special = false;
                        }
                    }
                }
            }
            VocabKind::Bpe => {
                let mut scratch = bpe::Scratch::default();
                let tables = bpe::Tables {
                    tokens: &self.tokens,
                    merges: &self.merges,
                    byte_tokens: &self.byte_tokens,
                };
                let opts = bpe::Options {
                    ignore_merges: v.pre.ignore_merges,
                    byte_encode: v.pre.byte_encode,
                    whole_newlines: v.pre.split == Split::Newlines,
                };
                let mut buf = String::new();
                for f in fragments {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(a, b) => {
                            let mut fragment = &text[a..b];
                            if v.pre.escape_whitespaces {
                                buf.clear();
                                escape_spaces(fragment, &mut buf);
                                fragment = &buf;
                            }
                            for word in pretokenize::split(v.pre.split, fragment) {
                                bpe::tokenize_word(word, &tables, opts, &mut scratch, &mut out);
                            }
                        }
                    }
                }
            }
            VocabKind::Wpm => {
                let mut buf = Vec::new();
                for f in fragments {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(a, b) => {
                            for word in wpm::words(&text[a..b], v.lowercase, v.strip_accents) {
                                wpm::tokenize_word(
                                    &word,
                                    &self.tokens,
                                    self.max_token_len,
                                    v.unk,
                                    &mut buf,
                                    &mut out,
                                );
                            }
                        }
                    }
                }
            }
        }
        if add_special {
            out.extend(last);
        }
        out
    }

    fn check(&self, id: u32) -> Result<usize, TokenizerError> {
        let i = id as usize;
        if i < self.attrs.len() {
            Ok(i)
        } else {
            Err(TokenizerError::TokenOutOfRange { id, n_vocab: self.attrs.len() })
        }
    }

    fn piece(&self, i: usize, special: bool) -> &[u8] {
        if !special && self.attrs[i] & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return &[];
        }
        self.pieces.get(i)
    }

    /// The bytes of token `id`, as llama.cpp's `llama_token_to_piece(id, lstrip = 0, special)`:
    /// control and unknown tokens are empty unless `special`; SPM pieces have U+2581 as spaces,
    /// byte tokens are their byte, BPE pieces are the bytes GPT-2's characters stand for. A piece
    /// may end inside a UTF-8 character (see [`StreamDecoder`]).
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>, TokenizerError> {
        Ok(self.piece(self.check(id)?, special).to_vec())
    }

    /// The bytes of `ids` as llama.cpp's `llama_detokenize(ids, remove_special = false,
    /// unparse_special = special)`.
    ///
    /// As llama.cpp, with `add_space_prefix` one leading space of the first piece is dropped
    /// (even when the text did not start with one, and not when the first token is a BOS or
    /// other token with an empty piece), and where the pre-tokenizer asks for it
    /// (`clean_spaces`, e.g. Llama 3 but not Qwen 2) spaces before `? ! . ,`, around a lone `'`
    /// and before `'s 'm 're 've` are removed, so decoding does not always give back the text.
    pub fn decode_bytes(&self, ids: &[u32], special: bool) -> Result<Vec<u8>, TokenizerError> {
        let mut text = Vec::with_capacity(ids.len() * 4);
        let mut remove_space = self.vocab.add_space_prefix;
        for &id in ids {
            let mut p = self.piece(self.check(id)?, special);
            if remove_space {
                if let Some(rest) = p.strip_prefix(b" ") {
                    p = rest;
                }
            }
            remove_space = false;
            text.extend_from_slice(p);
        }
        if self.vocab.pre.clean_spaces {
            pieces::clean_spaces(&mut text);
        }
        Ok(text)
    }

    /// [`Tokenizer::decode_bytes`] as text; bytes that are not UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32], special: bool) -> Result<String, TokenizerError> {
        let bytes = self.decode_bytes(ids, special)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The number of tokens.
    pub fn n_vocab(&self) -> usize {
        self.attrs.len()
    }

    /// SentencePiece, BPE or WordPiece.
    pub fn kind(&self) -> VocabKind {
        self.vocab.kind
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Beginning of sequence.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// End of sequence.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// Separator (WordPiece: SEP, which ends `encode(.., add_special = true, ..)`).
    pub fn sep(&self) -> Option<u32> {
        self.vocab.sep
    }

    /// Whether a pair of texts is joined with SEP (`llama_vocab_get_add_sep`: BERT-style models).
    pub fn add_sep(&self) -> bool {
        self.vocab.add_sep
    }

    /// Padding.
    pub fn pad(&self) -> Option<u32> {
        self.vocab.pad
    }

    /// End of turn: from the file, else the first of llama.cpp's end-of-turn texts the
    /// vocabulary has (`<end_of_turn>`, `<|im_end|>`, `<|eot_id|>`...; the lowest id when several).
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// The newline token: SPM's byte token for `\n`, BPE's first token of "\n", WordPiece's padding
    /// token (as llama.cpp).
    pub fn nl(&self) -> Option<u32> {
        self.nl
    }

    /// Whether generation ends at `id`: EOS, EOT, EOM, the FIM padding / repository / file
    /// separator tokens, and every token whose text llama.cpp lists as ending generation
    /// (`<end_of_turn>`, `<|im_end|>`, `<|endoftext|>`, and `</s>`, which in Gemma 3 is an HTML
    /// tag token: llama.cpp stops on it too).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// Every end-of-generation token, ascending.
    pub fn eog_tokens(&self) -> &[u32] {
        &self.eog
    }

    /// The text of token `id` as the vocabulary stores it.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.text(id as usize)
    }

    /// The id of the token whose stored text is `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.tokens.get(text.as_bytes())
    }

    /// Whether `id` is a control token (after llama.cpp's adjustments: end-of-generation texts
    /// are control tokens whatever their type).
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs.get(id as usize).is_some_and(|a| a & attr::CONTROL != 0)
    }
}

/// Checks BPE merge `rank`, `m`: two non-empty token texts separated by the first space after
/// the first byte, whose concatenation is a token too (as every merge of a trained vocabulary
/// is: it is how the token was made).
fn check_merge(
    m: &str,
    rank: usize,
    tokens: &TokenMap,
    joined: &mut Vec<u8>,
) -> Result<(), TokenizerError> {
    let bad = |why: String| TokenizerError::Malformed {
        key: vocab::keys::MERGES,
        reason: format!("merge {rank} {m:?} {why}"),
    };
    let split = m.as_bytes().iter().skip(1).position(|&b| b == b' ').map(|p| p + 1);
    let Some(at) = split else {
        return Err(bad("is not two tokens separated by a space".into()));
    };
    let (left, right) = (&m[..at], &m[at + 1..]);
    if right.is_empty() {
        return Err(bad("has nothing after its space".into()));
    }
    for part in [left, right] {
        if tokens.get(part.as_bytes()).is_none() {
            return Err(bad(format!("names {part:?}, which is not a token")));
        }
    }
    joined.clear();
    joined.extend_from_slice(left.as_bytes());
    joined.extend_from_slice(right.as_bytes());
    if tokens.get(joined).is_none() {
        return Err(bad(format!(
            "makes {:?}, which is not a token",
            String::from_utf8_lossy(joined)
        )));
    }
    Ok(())
}

/// Appends `text` to `out` with every space written as U+2581.
fn escape_spaces(text: &str, out: &mut String) {
    for (i, part) in text.split(' ').enumerate() {
        if i > 0 {
            out.push('\u{2581}');
        }
        out.push_str(part);
    }
}
