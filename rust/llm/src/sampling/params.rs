//! The sampling parameters, their defaults and their validation.
//!
//! JSON names are camelCase (`temperature`, `topK`, `topP`, `minP`, `typicalP`, `repeatPenalty`,
//! `frequencyPenalty`, `presencePenalty`, `penaltyLastN`, `logitBias`, `seed`); a missing field
//! takes its default and an unknown field is an error. `logitBias` is a list of
//! `[tokenId, bias]` pairs where `bias` is a number or `false` (ban the token, as llama.cpp's
//! server accepts; a ban is written back as `false` because JSON has no infinity).

use super::SamplingError;
use serde::{Deserialize, Serialize};

/// How the next token is chosen from a position's logits.
///
/// The stages run in llama.cpp's common order: logit bias, penalties, top-k, typical-p, top-p,
/// min-p, temperature, then a seeded draw. A stage at its "off" value (noted on each field)
/// does nothing. `temperature == 0` is greedy decoding: the argmax of the biased, penalized
/// logits, the lowest token id winning a tie, and the other filters are not consulted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SamplingParams {
    /// Divides the logits before the draw; `0` is greedy. Finite and `>= 0`. Default 0.8.
    pub temperature: f32,
    /// Keeps the `top_k` most likely tokens; `0` (or at least the vocabulary size) is off.
    /// Default 40.
    pub top_k: u32,
    /// Keeps the most likely tokens whose probabilities sum to at least `top_p`; `1` is off.
    /// In `(0, 1]`. Default 0.95.
    pub top_p: f32,
    /// Keeps the tokens at least `min_p` times as likely as the most likely one; `0` is off.
    /// In `[0, 1]`. Default 0.05.
    pub min_p: f32,
    /// Locally typical sampling: keeps the tokens whose surprise is closest to the entropy
    /// until their probabilities exceed `typical_p`; `1` is off. In `(0, 1]`. Default 1.
    pub typical_p: f32,
    /// Divides positive and multiplies negative logits of tokens in the penalty window; `1` is
    /// off. Finite and `> 0`. Default 1.
    pub repeat_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the window; `0` is off. Finite.
    /// Default 0.
    pub frequency_penalty: f32,
    /// Subtracted from the logit of every token present in the window; `0` is off. Finite.
    /// Default 0.
    pub presence_penalty: f32,
    /// How many of the last accepted tokens the penalties look at; `0` is off. Default 64.
    pub penalty_last_n: u32,
    /// `(token id, bias)` pairs added to the logits before anything else; `f32::NEG_INFINITY`
    /// bans a token. Ids must be below the vocabulary size; biases must not be NaN or `+inf`.
    /// Several entries for one token add up.
    #[serde(with = "logit_bias_json")]
    pub logit_bias: Vec<(u32, f32)>,
    /// The seed of the draw; the same seed gives the same tokens for the same logits. `None`
    /// draws a random seed (see [`Sampler::seed`](super::Sampler::seed) for the one used).
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    /// llama.cpp's common defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
    /// typical-p off, penalties off over a window of 64, no bias, a random seed.
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0 and every filter and penalty off.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            typical_p: 1.0,
            seed: Some(0),
            ..SamplingParams::default()
        }
    }

    /// Whether these parameters decode greedily (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks every parameter against its range for a vocabulary of `n_vocab` tokens; the first
    /// one out of range is returned as an error naming it and its value.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SamplingError> {
        if n_vocab == 0 || n_vocab > u32::MAX as usize {
            return Err(SamplingError::VocabSize { n_vocab });
        }
        check("temperature", self.temperature, "a finite number >= 0", |v| {
            v.is_finite() && v >= 0.0
        })?;
        check("topP", self.top_p, "a number in (0, 1]", |v| v > 0.0 && v <= 1.0)?;
        check("minP", self.min_p, "a number in [0, 1]", |v| (0.0..=1.0).contains(&v))?;
        check("typicalP", self.typical_p, "a number in (0, 1]", |v| v > 0.0 && v <= 1.0)?;
        check("repeatPenalty", self.repeat_penalty, "a finite number > 0", |v| {
            v.is_finite() && v > 0.0 && (1.0 / v).is_finite()
        })?;
        check("frequencyPenalty", self.frequency_penalty, "a finite number", f32::is_finite)?;
        check("presencePenalty", self.presence_penalty, "a finite number", f32::is_finite)?;
        for &(token, bias) in &self.logit_bias {
            if token as usize >= n_vocab {
                return Err(SamplingError::LogitBiasToken { token, n_vocab });
            }
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(SamplingError::LogitBiasValue { token, bias });
            }
        }
        Ok(())
    }
}

/// `Ok` when `ok(value)` holds (NaN fails every range), else the error naming the parameter.
fn check(
    name: &'static str,
    value: f32,
    expected: &'static str,
    ok: impl Fn(f32) -> bool,
) -> Result<(), SamplingError> {
    if !value.is_nan() && ok(value) {
        Ok(())
    } else {
        Err(SamplingError::Parameter { name, value: value.to_string(), expected })
    }
}

/// `logitBias` as `[[id, bias], ...]`, a ban (`-inf`) written and read as `false` (also the
/// FFI's reader of the protocol's `logitBias`).
pub mod logit_bias_json {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Bias {
        Value(f32),
        Flag(bool),
    }

    /// Writes `(id, bias)` pairs, a ban as `false`.
    pub fn serialize<S: Serializer>(pairs: &[(u32, f32)], s: S) -> Result<S::Ok, S::Error> {
        let out: Vec<(u32, Bias)> = pairs
            .iter()
            .map(|&(t, b)| {
                (t, if b == f32::NEG_INFINITY { Bias::Flag(false) } else { Bias::Value(b) })
            })
            .collect();
        out.serialize(s)
    }

    /// Reads `[id, bias]` pairs, `false` as a ban (`-inf`); `true` is an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u32, f32)>, D::Error> {
        let raw: Vec<(u32, Bias)> = Vec::deserialize(d)?;
        raw.into_iter()
            .map(|(t, b)| match b {
                Bias::Value(v) => Ok((t, v)),
                Bias::Flag(false) => Ok((t, f32::NEG_INFINITY)),
                Bias::Flag(true) => Err(D::Error::custom(format!(
                    "logitBias for token {t}: `true` is not a bias (use a number, or `false` to ban the token)"
                ))),
            })
            .collect()
    }
}
