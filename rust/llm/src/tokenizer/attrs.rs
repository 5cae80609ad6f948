//! Token attributes and roles as llama.cpp derives them at load (`llama_vocab::impl::load`):
//! the attribute of each token type, the end-of-turn and fill-in-the-middle tokens found by
//! their text when the file names none, the tokens whose text ends generation (which become
//! control tokens whatever their type), and llama.cpp's exceptions to those rules.

use super::{SpaceStrip, TokenMap, TokenType, Vocab};

/// llama.cpp's token attributes (`llama_token_attr`), a bit set.
pub(crate) mod attr {
    pub(crate) const UNKNOWN: u8 = 1 << 1;
    pub(crate) const UNUSED: u8 = 1 << 2;
    pub(crate) const NORMAL: u8 = 1 << 3;
    pub(crate) const CONTROL: u8 = 1 << 4;
    pub(crate) const USER_DEFINED: u8 = 1 << 5;
    pub(crate) const BYTE: u8 = 1 << 6;
    /// Takes the whitespace before it out of the text (llama.cpp's LSTRIP, 1 << 7 there).
    pub(crate) const LSTRIP: u8 = 1 << 0;
    /// Takes the whitespace after it out of the text (llama.cpp's RSTRIP, 1 << 8 there).
    pub(crate) const RSTRIP: u8 = 1 << 7;
}

/// Token texts llama.cpp treats as end of generation (`llama_vocab::impl::load`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// Texts llama.cpp takes as the end-of-turn token when the file names none.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] =
    &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];

/// What [`resolve`] derives.
pub(crate) struct Roles {
    /// The attribute bits of every token.
    pub attrs: Vec<u8>,
    /// The end-of-generation tokens, ascending.
    pub eog: Vec<u32>,
    /// The end-of-turn token.
    pub eot: Option<u32>,
}

/// The attributes and roles of the `n` tokens of `vocab`, whose texts `tokens` maps to ids.
pub(crate) fn resolve(vocab: &Vocab, tokens: &TokenMap, n: usize) -> Roles {
    let mut attrs: Vec<u8> = vocab.types[..n]
        .iter()
        .map(|t| match t {
            TokenType::Undefined => 0,
            TokenType::Normal => attr::NORMAL,
            TokenType::Unknown => attr::UNKNOWN,
            TokenType::Control => attr::CONTROL,
            TokenType::UserDefined => attr::USER_DEFINED,
            TokenType::Unused => attr::UNUSED,
            TokenType::Byte => attr::BYTE,
        })
        .collect();

    // special tokens found by their text when the file does not name them; llama.cpp walks
    // a hash map and takes the first it meets, here the lowest id
    let find = |texts: &[&str]| texts.iter().filter_map(|t| tokens.get(t.as_bytes())).min();
    let mut control = |id: u32| attrs[id as usize] |= attr::CONTROL;
    let eot = vocab.eot.or_else(|| find(EOT_TEXTS));
    let eom = vocab.eom.or_else(|| find(EOM_TEXTS));
    let fim_pad = vocab.fim_pad.or_else(|| find(FIM_PAD_TEXTS));
    let fim_rep = vocab.fim_rep.or_else(|| find(FIM_REP_TEXTS));
    let fim_sep = vocab.fim_sep.or_else(|| find(FIM_SEP_TEXTS));
    for (given, texts) in [
        (vocab.eot, EOT_TEXTS),
        (vocab.eom, EOM_TEXTS),
        (vocab.fim_pad, FIM_PAD_TEXTS),
        (vocab.fim_rep, FIM_REP_TEXTS),
        (vocab.fim_sep, FIM_SEP_TEXTS),
        (vocab.fim_pre, FIM_PRE_TEXTS),
        (vocab.fim_suf, FIM_SUF_TEXTS),
        (vocab.fim_mid, FIM_MID_TEXTS),
    ] {
        if given.is_none() {
            if let Some(id) = find(texts) {
                control(id);
            }
        }
    }
    // tokens whose text ends generation (and become control tokens)
    let mut eog: Vec<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
    for text in EOG_TEXTS {
        if let Some(id) = tokens.get(text.as_bytes()) {
            eog.push(id);
            control(id);
        }
    }
    // gpt-oss: rendered even without `special`
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = tokens.get(text.as_bytes()) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend([vocab.eos, eot, eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    let has = |eog: &[u32], text: &str| {
        tokens.get(text.as_bytes()).is_some_and(|id| eog.binary_search(&id).is_ok())
    };
    if (has(&eog, "<|return|>") && has(&eog, "<|call|>"))
        || (has(&eog, "<|calls|>") && has(&eog, "<|flush|>"))
    {
        if let Some(end) = tokens.get("<|end|>".as_bytes()) {
            eog.retain(|&id| id != end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    if has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>") {
        if let Some(s) = tokens.get("</s>".as_bytes()) {
            eog.retain(|&id| id != s);
            attrs[s as usize] = attr::NORMAL;
        }
    }

    Roles { attrs, eog, eot }
}

/// Sets the LSTRIP / RSTRIP bits of `rule` (after [`resolve`], as llama.cpp sets them last; a
/// token the rule names that the vocabulary lacks is skipped, where llama.cpp fails to load).
pub(crate) fn set_space_strip(rule: SpaceStrip, tokens: &TokenMap, attrs: &mut [u8]) {
    fn set(tokens: &TokenMap, attrs: &mut [u8], text: &str, bit: u8, on: bool) {
        if let Some(id) = tokens.get(text.as_bytes()) {
            let a = &mut attrs[id as usize];
            *a = if on { *a | bit } else { *a & !bit };
        }
    }
    match rule {
        SpaceStrip::None => {}
        SpaceStrip::MaskBefore => set(tokens, attrs, "<mask>", attr::LSTRIP, true),
        SpaceStrip::BracketMaskBefore => set(tokens, attrs, "[MASK]", attr::LSTRIP, true),
        SpaceStrip::Phi3After => {
            for a in attrs.iter_mut() {
                if *a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
                    *a |= attr::RSTRIP;
                }
            }
            set(tokens, attrs, "</s>", attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(tokens, attrs, t, attr::RSTRIP, false);
            }
        }
    }
}
