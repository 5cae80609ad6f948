//! The vocabulary as a GGUF file stores it (`tokenizer.ggml.*`), with llama.cpp's defaults.

use tessera_gguf::Array;

use super::TokenizerError;

/// Metadata keys read here.
pub(crate) mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const BOS: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS: &str = "tokenizer.ggml.eos_token_id";
    pub const EOT: &str = "tokenizer.ggml.eot_token_id";
    pub const EOM: &str = "tokenizer.ggml.eom_token_id";
    pub const UNK: &str = "tokenizer.ggml.unknown_token_id";
    // sic: llama.cpp's spelling
    pub const SEP: &str = "tokenizer.ggml.seperator_token_id";
    pub const PAD: &str = "tokenizer.ggml.padding_token_id";
    pub const MASK: &str = "tokenizer.ggml.mask_token_id";
    pub const FIM_PRE: &str = "tokenizer.ggml.fim_pre_token_id";
    pub const FIM_SUF: &str = "tokenizer.ggml.fim_suf_token_id";
    pub const FIM_MID: &str = "tokenizer.ggml.fim_mid_token_id";
    pub const FIM_PAD: &str = "tokenizer.ggml.fim_pad_token_id";
    pub const FIM_REP: &str = "tokenizer.ggml.fim_rep_token_id";
    pub const FIM_SEP: &str = "tokenizer.ggml.fim_sep_token_id";
    pub const PREFIX: &str = "tokenizer.ggml.prefix_token_id";
    pub const SUFFIX: &str = "tokenizer.ggml.suffix_token_id";
    pub const MIDDLE: &str = "tokenizer.ggml.middle_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    pub const ADD_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    pub const ADD_SEP: &str = "tokenizer.ggml.add_sep_token";
    pub const LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
    pub const STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";
    pub const NAME: &str = "general.name";
    pub const ARCH: &str = "general.architecture";
}

/// A token's type, as GGUF's `tokenizer.ggml.token_type` codes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// Code 0 or any code past 6: llama.cpp treats such a token as having no type (its piece is
    /// empty and it is never matched as a special token).
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token (`<unk>`).
    Unknown,
    /// 3: a control token (`<bos>`, `<end_of_turn>`, `<|im_start|>`...), written only with
    /// `special` and matched in text only with `parse_special`.
    Control,
    /// 4: a user-defined token, always matched in the text before the tokenizer runs.
    UserDefined,
    /// 5: an unused slot.
    Unused,
    /// 6: a byte-fallback token (`<0x0A>`).
    Byte,
}

impl TokenType {
    /// The type of GGUF code `code`.
    pub fn from_code(code: i32) -> TokenType {
        match code {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Which algorithm turns text into tokens (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `llama`: SentencePiece, merging the pair whose token has the highest score, with byte
    /// fallback and spaces written as U+2581 (Gemma, Llama 2, Mistral).
    Spm,
    /// `gpt2`: byte-level BPE, merging by rank after a regex pre-tokenizer (Llama 3, Qwen, GPT-2);
    /// also `gemma4`, BPE over raw UTF-8 with spaces written as U+2581 and byte-fallback tokens
    /// (see [`PreTokenizer::byte_encode`]).
    Bpe,
    /// `bert`: WordPiece, the longest token first, after BERT's normalizer (lowercase, accents
    /// stripped, punctuation and CJK characters apart); word-initial tokens start with U+2581.
    Wpm,
}

/// How a BPE pre-tokenizer cuts text into words before merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// llama.cpp's `default`: runs of punctuation, then GPT-2's pattern, then runs of digits,
    /// then groups of three ASCII digits.
    Default,
    /// GPT-2's pattern: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
    Gpt2,
    /// Llama 3's pattern (contractions in any case, a letter run with one leading non-letter,
    /// digits in groups of up to three, punctuation runs with trailing newlines, newline runs).
    Llama3,
    /// Qwen 2's pattern: Llama 3's with digits one by one.
    Qwen2,
    /// StarCoder's: every digit alone, then GPT-2's pattern.
    Digits,
    /// Qwen 3.5's pattern: Qwen 2's with combining marks counted as letters.
    Qwen35,
    /// Falcon's: runs of punctuation and ASCII symbols, then GPT-2's pattern, then groups of
    /// three ASCII digits.
    Falcon,
    /// DeepSeek LLM's: `\r` and `\n` alone, then cased letters, punctuation (with one leading
    /// space each), trailing whitespace, CJK runs and runs of digits apart.
    DeepseekLlm,
    /// DeepSeek Coder's: `\r` and `\n` alone, then letters, punctuation (with one leading space
    /// each), CJK runs and every digit apart.
    DeepseekCoder,
    /// Gemma 4's: runs of newlines and runs of other characters (spaces are U+2581 by then).
    Newlines,
}

/// Special tokens that take the whitespace beside them out of the text (llama.cpp's LSTRIP and
/// RSTRIP attributes, which it sets by model name, pre-tokenizer or architecture, not from the
/// file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpaceStrip {
    /// None do.
    #[default]
    None,
    /// `<mask>` takes the whitespace before it (Jina v2 de / es / code, Nomic BERT MoE, Jina
    /// BERT v3).
    MaskBefore,
    /// `[MASK]` takes the whitespace before it (ModernBERT).
    BracketMaskBefore,
    /// Every special token but `<unk>`, `<s>` and `<|endoftext|>` takes the whitespace after it
    /// (models whose `general.name` says Phi-3).
    Phi3After,
}

impl SpaceStrip {
    /// llama.cpp's rule for a model of `general.name` `name`, pre-tokenizer `pre` and
    /// `general.architecture` `arch`.
    pub fn of(name: &str, pre: &str, arch: &str) -> SpaceStrip {
        let name = name.to_ascii_lowercase();
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"].iter().any(|p| pre.contains(p))
            || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a))
        {
            SpaceStrip::MaskBefore
        } else if name.contains("phi-3") || name.contains("phi3") {
            SpaceStrip::Phi3After
        } else if name.contains("modern-bert") {
            SpaceStrip::BracketMaskBefore
        } else {
            SpaceStrip::None
        }
    }
}

/// The pre-tokenizer `tokenizer.ggml.pre` names, with the flags llama.cpp ties to that name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreTokenizer {
    /// The name as the file gives it (empty when the key is missing).
    pub name: String,
    /// How text is cut into words (BPE only).
    pub split: Split,
    /// Whether decoding removes the space before `?!.,` and in contractions
    /// (`clean_up_tokenization_spaces`).
    pub clean_spaces: bool,
    /// Whether a word that is itself a token is taken whole, without merging (Llama 3).
    pub ignore_merges: bool,
    /// The default of `add_bos` when the file does not say.
    pub add_bos_default: bool,
    /// Whether this pre-tokenizer has no BOS token unless the file names one (ChatGLM).
    pub no_default_bos: bool,
    /// Whether BOS is added whatever the file says (Gemma 4: llama.cpp overrides a false
    /// `add_bos_token`).
    pub force_add_bos: bool,
    /// Whether spaces are written as U+2581 before tokenizing and decoded back (Gemma 4).
    pub escape_whitespaces: bool,
    /// Whether words are written in GPT-2's byte-to-unicode form before merging (byte-level BPE);
    /// when not (Gemma 4), bytes without a token become byte-fallback tokens `<0xXX>`.
    pub byte_encode: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer of a BPE vocabulary called `name` ("" when the file has none, which
    /// llama.cpp treats as `default`). Only names whose pattern this crate implements exactly are
    /// accepted.
    pub fn bpe(name: &str) -> Result<PreTokenizer, TokenizerError> {
        use Split::*;
        // (split, clean_spaces, ignore_merges, add_bos default, no default BOS)
        let (split, clean, ignore, add_bos, no_bos) = match name {
            "" | "default" => (Default, true, false, false, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => (Llama3, true, true, true, false),
            "dbrx" | "smaug-bpe" => (Llama3, true, false, false, false),
            "chatglm-bpe" => (Llama3, true, false, false, true),
            "glm4" | "glm5" => (Llama3, true, true, false, true),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "a.x-4.0" | "mellum"
            | "mpt" | "olmo" | "jais" | "exaone4" => (Gpt2, true, false, false, false),
            "trillion" | "granite-docling" => (Gpt2, false, false, false, false),
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
                (Digits, true, false, false, false)
            }
            "command-r" | "smollm" => (Digits, false, false, false, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open"
            | "grok-2" => (Qwen2, false, false, false, false),
            "stablelm2" | "megrez" => (Qwen2, true, false, false, false),
            "qwen35" => (Qwen35, false, false, false, false),
            "falcon" => (Falcon, true, false, false, false),
            "deepseek-llm" => (DeepseekLlm, false, false, false, false),
            "deepseek-coder" => (DeepseekCoder, false, false, false, false),
            "gemma4" | "granite-embed-multi-311m" => (Newlines, true, false, false, false),
            _ => return Err(TokenizerError::UnknownPreTokenizer(name.to_string())),
        };
        let spm_style = split == Newlines;
        Ok(PreTokenizer {
            name: name.to_string(),
            split,
            clean_spaces: clean,
            ignore_merges: ignore,
            add_bos_default: add_bos,
            no_default_bos: no_bos,
            force_add_bos: spm_style,
            escape_whitespaces: spm_style,
            byte_encode: !spm_style,
        })
    }

    /// The (unused) pre-tokenizer of a SentencePiece vocabulary: llama.cpp ignores the name.
    pub fn spm(name: &str) -> PreTokenizer {
        PreTokenizer { clean_spaces: false, ..PreTokenizer::unsplit(name) }
    }

    /// The (unused) pre-tokenizer of a WordPiece vocabulary: llama.cpp ignores the name; decoding
    /// cleans up spaces.
    pub fn wpm(name: &str) -> PreTokenizer {
        PreTokenizer { clean_spaces: true, ..PreTokenizer::unsplit(name) }
    }

    fn unsplit(name: &str) -> PreTokenizer {
        PreTokenizer {
            name: name.to_string(),
            split: Split::Default,
            clean_spaces: false,
            ignore_merges: false,
            add_bos_default: true,
            no_default_bos: false,
            force_add_bos: false,
            escape_whitespaces: false,
            byte_encode: false,
        }
    }
}

/// A tokenizer vocabulary: what `tokenizer.ggml.*` holds, with llama.cpp's defaults applied to
/// what the file leaves out. [`super::Tokenizer::from_vocab`] checks it and builds the lookup
/// tables.
#[derive(Clone, Debug)]
pub struct Vocab {
    /// SentencePiece or byte-level BPE.
    pub kind: VocabKind,
    /// `tokenizer.ggml.model` as the file names it.
    pub model: String,
    /// The pre-tokenizer (BPE) and the flags its name implies.
    pub pre: PreTokenizer,
    /// Token texts by id (BPE tokens in GPT-2's byte-to-unicode form, SPM tokens with U+2581 for
    /// spaces).
    pub tokens: Vec<String>,
    /// Merge scores by id (SPM; 0.0 where the file has none).
    pub scores: Vec<f32>,
    /// Token types by id ([`TokenType::Normal`] where the file has none).
    pub types: Vec<TokenType>,
    /// BPE merges in rank order, each "left right".
    pub merges: Vec<String>,
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn, as the file names it (else found by its text when the tokenizer is built).
    pub eot: Option<u32>,
    /// End of message (`<|eom_id|>`), as the file names it.
    pub eom: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
    /// Separator.
    pub sep: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Mask.
    pub mask: Option<u32>,
    /// Fill-in-the-middle prefix, as the file names it (else found by its text).
    pub fim_pre: Option<u32>,
    /// Fill-in-the-middle suffix, as the file names it (else found by its text).
    pub fim_suf: Option<u32>,
    /// Fill-in-the-middle middle, as the file names it (else found by its text).
    pub fim_mid: Option<u32>,
    /// Fill-in-the-middle padding, repository and file separator tokens as the file names them
    /// (else found by their text); llama.cpp counts them as end of generation.
    pub fim_pad: Option<u32>,
    /// See [`Vocab::fim_pad`].
    pub fim_rep: Option<u32>,
    /// See [`Vocab::fim_pad`].
    pub fim_sep: Option<u32>,
    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub add_bos: bool,
    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub add_eos: bool,
    /// Whether SPM text after the start or a special token gets a leading space, and decoding
    /// drops the first piece's leading space.
    pub add_space_prefix: bool,
    /// Whether a pair of texts is joined with SEP (`llama_vocab_get_add_sep`: BERT-style models,
    /// for reranking).
    pub add_sep: bool,
    /// WordPiece: whether text is lowercased first (`tokenizer.ggml.normalizer.lowercase`).
    pub lowercase: bool,
    /// WordPiece: whether accents are stripped first (`tokenizer.ggml.normalizer.strip_accents`,
    /// by default as `lowercase`).
    pub strip_accents: bool,
    /// Which special tokens take the whitespace beside them out of the text.
    pub space_strip: SpaceStrip,
}

/// Metadata values a vocabulary is read from: implemented for [`tessera_gguf::GgufFile`] and,
/// in tests, for other stores.
pub(crate) trait Metadata {
    /// A string value; `Err` when the key holds another type.
    fn string(&self, key: &'static str) -> Result<Option<&str>, TokenizerError>;
    /// An unsigned integer value.
    fn uint(&self, key: &'static str) -> Result<Option<u32>, TokenizerError>;
    /// A boolean value.
    fn boolean(&self, key: &'static str) -> Result<Option<bool>, TokenizerError>;
    /// An array of strings.
    fn strings(&self, key: &'static str) -> Result<Option<&[String]>, TokenizerError>;
    /// An array of numbers as `f32` (from `f32` or `i32` elements, as llama.cpp accepts scores).
    fn numbers(&self, key: &'static str) -> Result<Option<Vec<f32>>, TokenizerError>;
    /// An array of `i32`.
    fn ints(&self, key: &'static str) -> Result<Option<&[i32]>, TokenizerError>;
}

impl Vocab {
    /// Reads the vocabulary of a GGUF file.
    pub fn from_gguf(file: &tessera_gguf::GgufFile) -> Result<Vocab, TokenizerError> {
        Vocab::from_metadata(file)
    }

    /// Reads the vocabulary from `meta`, applying llama.cpp's defaults (`llama_vocab::load`).
    pub(crate) fn from_metadata(meta: &dyn Metadata) -> Result<Vocab, TokenizerError> {
        let (mut vocab, texts) = Vocab::from_metadata_parts(meta)?;
        vocab.tokens = texts.to_vec();
        Ok(vocab)
    }

    /// [`Vocab::from_metadata`] with the token texts left in `meta` (`tokens` is empty).
    pub(crate) fn from_metadata_parts(
        meta: &dyn Metadata,
    ) -> Result<(Vocab, &[String]), TokenizerError> {
        let model =
            meta.string(keys::MODEL)?.ok_or(TokenizerError::MissingKey(keys::MODEL))?.to_string();
        let pre_name = meta.string(keys::PRE)?.unwrap_or("").to_string();
        let (kind, pre) = match model.as_str() {
            "llama" => (VocabKind::Spm, PreTokenizer::spm(&pre_name)),
            "gpt2" => (VocabKind::Bpe, PreTokenizer::bpe(&pre_name)?),
            // llama.cpp takes Gemma 4's pre-tokenizer whatever the file names
            "gemma4" => (VocabKind::Bpe, PreTokenizer::bpe("gemma4")?),
            "bert" => (VocabKind::Wpm, PreTokenizer::wpm(&pre_name)),
            _ => return Err(TokenizerError::UnknownModel(model)),
        };

        let tokens = meta.strings(keys::TOKENS)?.ok_or(TokenizerError::MissingKey(keys::TOKENS))?;
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::Malformed {
                key: keys::TOKENS,
                reason: "the token list is empty".into(),
            });
        }
        let scores = match meta.numbers(keys::SCORES)? {
            None => vec![0.0; n],
            Some(s) if s.len() < n => {
                return Err(TokenizerError::TooShort {
                    key: keys::SCORES,
                    len: s.len(),
                    n_tokens: n,
                })
            }
            Some(mut s) => {
                s.truncate(n);
                s
            }
        };
        let types = match meta.ints(keys::TOKEN_TYPE)? {
            None => vec![TokenType::Normal; n],
            Some(t) if t.len() < n => {
                return Err(TokenizerError::TooShort {
                    key: keys::TOKEN_TYPE,
                    len: t.len(),
                    n_tokens: n,
                })
            }
            Some(t) => {
                // llama.cpp reads any code and treats one outside its enum as a token of no
                // type, whose piece is empty: a vocabulary of such tokens decodes to nothing.
                if let Some(i) = t[..n].iter().position(|c| !(0..=6).contains(c)) {
                    return Err(TokenizerError::Malformed {
                        key: keys::TOKEN_TYPE,
                        reason: format!(
                            "token {i} has type {}; token types are 0 to 6 (undefined, normal, \
                             unknown, control, user-defined, unused, byte)",
                            t[i]
                        ),
                    });
                }
                t[..n].iter().map(|&c| TokenType::from_code(c)).collect()
            }
        };
        let merges = match kind {
            VocabKind::Bpe => meta
                .strings(keys::MERGES)?
                .ok_or(TokenizerError::MissingKey(keys::MERGES))?
                .to_vec(),
            VocabKind::Spm | VocabKind::Wpm => Vec::new(),
        };

        // llama.cpp's default special ids by tokenizer model (bos, eos, unk, sep, pad, mask); a
        // default past the vocabulary is dropped. An id from the file past it is refused
        // (llama.cpp warns and keeps the default, which in another vocabulary is another token:
        // Gemma's default BOS 1 is its <eos>)
        let (mut bos, mut eos, mut unk, sep, pad, mask) = match model.as_str() {
            "llama" => (Some(1), Some(2), Some(0), None, None, None),
            "bert" => (Some(101), None, Some(100), Some(102), Some(0), Some(103)),
            "gpt2" => {
                (if pre.no_default_bos { None } else { Some(11) }, Some(11), None, None, None, None)
            }
            _ => (None, None, None, None, None, None),
        };
        let special =
            |key: &'static str, default: Option<u32>| -> Result<Option<u32>, TokenizerError> {
                let default = default.filter(|&id| (id as usize) < n);
                Ok(match meta.uint(key)? {
                    Some(id) if (id as usize) < n => Some(id),
                    Some(id) => {
                        return Err(TokenizerError::Malformed {
                            key,
                            reason: format!(
                                "token id {id} is past the vocabulary of {n} tokens (ids 0 to {})",
                                n - 1
                            ),
                        })
                    }
                    None => default,
                })
            };
        bos = special(keys::BOS, bos)?;
        eos = special(keys::EOS, eos)?;
        unk = special(keys::UNK, unk)?;
        let eot = special(keys::EOT, None)?;
        let eom = special(keys::EOM, None)?;
        let sep = special(keys::SEP, sep)?;
        let pad = special(keys::PAD, pad)?;
        let mask = special(keys::MASK, mask)?;
        let fim_pad = special(keys::FIM_PAD, None)?;
        let fim_rep = special(keys::FIM_REP, None)?;
        let fim_sep = special(keys::FIM_SEP, None)?;
        // the deprecated keys, read after the new ones, win as in llama.cpp
        let fim_pre = special(keys::PREFIX, special(keys::FIM_PRE, None)?)?;
        let fim_suf = special(keys::SUFFIX, special(keys::FIM_SUF, None)?)?;
        let fim_mid = special(keys::MIDDLE, special(keys::FIM_MID, None)?)?;

        let add_space_prefix = meta.boolean(keys::ADD_PREFIX)?.unwrap_or(kind == VocabKind::Spm);
        let add_bos =
            pre.force_add_bos || meta.boolean(keys::ADD_BOS)?.unwrap_or(pre.add_bos_default);
        let add_eos = meta.boolean(keys::ADD_EOS)?.unwrap_or(false);
        let add_sep = meta.boolean(keys::ADD_SEP)?.unwrap_or(kind == VocabKind::Wpm);
        let lowercase = meta.boolean(keys::LOWERCASE)?.unwrap_or(true);
        let strip_accents = meta.boolean(keys::STRIP_ACCENTS)?.unwrap_or(lowercase);
        let space_strip = SpaceStrip::of(
            meta.string(keys::NAME)?.unwrap_or(""),
            &pre_name,
            meta.string(keys::ARCH)?.unwrap_or(""),
        );

        let vocab = Vocab {
            kind,
            model,
            pre,
            tokens: Vec::new(),
            scores,
            types,
            merges,
            bos,
            eos,
            eot,
            eom,
            unk,
            sep,
            pad,
            mask,
            fim_pre,
            fim_suf,
            fim_mid,
            fim_pad,
            fim_rep,
            fim_sep,
            add_bos,
            add_eos,
            add_space_prefix,
            add_sep,
            lowercase,
            strip_accents,
            space_strip,
        };
        Ok((vocab, tokens))
    }
}

impl Metadata for tessera_gguf::GgufFile {
    fn string(&self, key: &'static str) -> Result<Option<&str>, TokenizerError> {
        Ok(self.opt_str(key)?)
    }
    fn uint(&self, key: &'static str) -> Result<Option<u32>, TokenizerError> {
        Ok(self.opt_u32(key)?)
    }
    fn boolean(&self, key: &'static str) -> Result<Option<bool>, TokenizerError> {
        Ok(self.opt_bool(key)?)
    }
    fn strings(&self, key: &'static str) -> Result<Option<&[String]>, TokenizerError> {
        match self.opt_array(key)? {
            None => Ok(None),
            Some(Array::String(v)) => Ok(Some(v)),
            Some(a) => Err(wrong_array(key, "an array of strings", a)),
        }
    }
    fn numbers(&self, key: &'static str) -> Result<Option<Vec<f32>>, TokenizerError> {
        match self.opt_array(key)? {
            None => Ok(None),
            Some(Array::F32(v)) => Ok(Some(v.clone())),
            Some(Array::I32(v)) => Ok(Some(v.iter().map(|&x| x as f32).collect())),
            Some(a) => Err(wrong_array(key, "an array of f32 or i32", a)),
        }
    }
    fn ints(&self, key: &'static str) -> Result<Option<&[i32]>, TokenizerError> {
        match self.opt_array(key)? {
            None => Ok(None),
            Some(Array::I32(v)) => Ok(Some(v)),
            Some(a) => Err(wrong_array(key, "an array of i32", a)),
        }
    }
}

fn wrong_array(key: &'static str, expected: &'static str, a: &Array) -> TokenizerError {
    TokenizerError::WrongType {
        key,
        expected,
        found: format!("an array of {}", a.element_type().name()),
    }
}
