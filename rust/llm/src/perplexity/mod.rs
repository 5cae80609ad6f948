//! Perplexity and KL divergence of a model over a text, by llama-perplexity's method.
//!
//! The text is tokenized once (with the model's BOS when it adds one) and cut into chunks of
//! `n_ctx` tokens; each chunk is decoded from an empty cache with its first token replaced by
//! BOS, and only the second half of each chunk is scored (every token there has at least
//! `n_ctx / 2` tokens of context): for the positions `first = n_ctx / 2 .. n_ctx - 1`, the
//! negative log-probability of the next token. The perplexity is `exp` of their mean.
//!
//! [`base_file`] writes and reads llama-perplexity's `--kl-divergence-base` file (the scored
//! rows' log-probabilities, 16 bits each), so that a reference run (an F16 model, another
//! engine) and a run under test can be compared token by token: [`kl::KlDivergence`].

pub mod base_file;
pub mod kl;

use crate::context::{Context, Rows};
use crate::error::LlmError;
use crate::model::Model;

/// What can go wrong in a perplexity run.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    /// The model or its context failed.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The text or the options do not allow a run.
    #[error("perplexity: {0}")]
    InvalidArgument(String),
    /// A KL-divergence base file could not be read or written.
    #[error("KL-divergence base file {path}: {reason}")]
    BaseFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The result type of this module.
pub type Result<T> = std::result::Result<T, PerplexityError>;

/// How to cut the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerplexityOptions {
    /// Tokens per chunk (the context each chunk is decoded in).
    pub n_ctx: usize,
    /// At most this many chunks (`None`: as many as the text fills).
    pub max_chunks: Option<usize>,
}

/// One scored position: the logits computed there and the token that follows.
pub struct ScoredRow<'a> {
    /// The logits at the position (the model's vocabulary).
    pub logits: &'a [f32],
    /// The text's next token, the one these logits predict.
    pub next: u32,
}

/// Sums of per-token negative log-likelihoods, and the statistics llama-perplexity prints.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NllSums {
    /// Sum of the negative log-likelihoods.
    pub sum: f64,
    /// Sum of their squares.
    pub sum2: f64,
    /// Tokens scored.
    pub count: usize,
}

impl NllSums {
    /// Adds one token's negative log-likelihood.
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// The mean negative log-likelihood and its standard error.
    pub fn mean_and_error(&self) -> (f64, f64) {
        mean_and_error(self.sum, self.sum2, self.count)
    }

    /// The perplexity and its standard error (`exp` of the mean, the error carried through).
    pub fn perplexity(&self) -> (f64, f64) {
        let (mean, err) = self.mean_and_error();
        let ppl = mean.exp();
        (ppl, ppl * err)
    }
}

/// The mean of `count` values from their sum and sum of squares, and the standard error of that
/// mean (0 for fewer than two values).
pub fn mean_and_error(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count == 0 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let mean = sum / n;
    let var = (sum2 / n - mean * mean).max(0.0);
    let err = if count > 1 { (var / (n - 1.0)).sqrt() } else { 0.0 };
    (mean, err)
}

/// A finished run.
#[derive(Clone, Debug, PartialEq)]
pub struct PerplexityReport {
    /// Tokens of the whole text (with BOS).
    pub n_text_tokens: usize,
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Chunks decoded.
    pub n_chunks: usize,
    /// The scored tokens' sums.
    pub nll: NllSums,
    /// The perplexity over the chunks so far, after each chunk (llama-perplexity's `[1]..[n]`).
    pub running: Vec<f64>,
}

impl PerplexityReport {
    /// The final perplexity and its standard error.
    pub fn perplexity(&self) -> (f64, f64) {
        self.nll.perplexity()
    }
}

/// The text's tokens as llama-perplexity takes them: the model's BOS first when it adds one, no
/// special tokens parsed from the text.
pub fn text_tokens(model: &Model, text: &str) -> Vec<u32> {
    model.tokenizer().encode(text, true, false)
}

/// The chunks a run over `n_tokens` tokens decodes, or why there can be none.
pub fn chunk_count(n_tokens: usize, options: &PerplexityOptions) -> Result<usize> {
    if options.n_ctx < 4 {
        return Err(PerplexityError::InvalidArgument(format!(
            "n_ctx {} is too small: a chunk scores its second half and needs at least 4 tokens",
            options.n_ctx
        )));
    }
    if n_tokens < 2 * options.n_ctx {
        return Err(PerplexityError::InvalidArgument(format!(
            "the text has {n_tokens} tokens; a context of {} needs at least {}",
            options.n_ctx,
            2 * options.n_ctx
        )));
    }
    let max = n_tokens / options.n_ctx;
    match options.max_chunks {
        Some(0) => Err(PerplexityError::InvalidArgument("max_chunks must be at least 1".into())),
        Some(n) => Ok(n.min(max)),
        None => Ok(max),
    }
}

/// The first position of a chunk whose next-token prediction is scored.
pub fn first_scored(n_ctx: usize) -> usize {
    n_ctx / 2
}

/// The negative log-likelihood of `next` under `logits` (a log-softmax in f64).
pub fn token_nll(logits: &[f32], next: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    max + sum.ln() - logits[next as usize] as f64
}

/// Most logits held at once while a chunk's scored half is decoded (rows of the vocabulary):
/// the scored half is decoded in pieces of at most this many values.
const SCORED_VALUES_PER_DECODE: usize = 32 << 20;

/// Runs the method over the first `n_chunks` chunks of `n_ctx` tokens of `tokens` (from
/// [`text_tokens`]; [`chunk_count`] says how many a text fills) in `ctx`, whose cache is cleared
/// before each chunk. `observe` sees every scored row in order (the KL-divergence base file
/// writer or comparer); `progress` gets each chunk's index and the running perplexity.
pub fn run(
    ctx: &mut Context,
    tokens: &[u32],
    n_ctx: usize,
    n_chunks: usize,
    observe: &mut dyn FnMut(ScoredRow<'_>) -> Result<()>,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<PerplexityReport> {
    if n_ctx < 4 || n_chunks == 0 || tokens.len() < n_chunks.saturating_mul(n_ctx) {
        return Err(PerplexityError::InvalidArgument(format!(
            "{n_chunks} chunks of {n_ctx} tokens do not fit {} tokens",
            tokens.len()
        )));
    }
    if n_ctx > ctx.n_ctx() {
        return Err(PerplexityError::InvalidArgument(format!(
            "chunks of {n_ctx} tokens do not fit the context of {}",
            ctx.n_ctx()
        )));
    }
    let tokenizer = ctx.model().tokenizer();
    let bos = if tokenizer.add_bos() { tokenizer.bos() } else { None };
    let n_vocab = ctx.model().hparams().n_vocab;
    let rows_per_decode = (SCORED_VALUES_PER_DECODE / n_vocab.max(1)).max(1);
    let first = first_scored(n_ctx);
    let mut nll = NllSums::default();
    let mut running = Vec::with_capacity(n_chunks);
    let mut chunk = Vec::with_capacity(n_ctx);
    for c in 0..n_chunks {
        chunk.clear();
        chunk.extend_from_slice(&tokens[c * n_ctx..(c + 1) * n_ctx]);
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        ctx.clear();
        // The unscored first half, then the scored half in pieces whose logits all come back.
        ctx.decode(&chunk[..first], Rows::Last)?;
        let mut pos = first;
        while pos < n_ctx - 1 {
            let end = (pos + rows_per_decode).min(n_ctx - 1);
            let out = ctx.decode(&chunk[pos..end], Rows::All)?;
            for (i, p) in (pos..end).enumerate() {
                // The text's token, not the chunk's (whose first one may be BOS).
                let next = tokens[c * n_ctx + p + 1];
                let logits = out.row(i);
                nll.add(token_nll(logits, next));
                observe(ScoredRow { logits, next })?;
            }
            pos = end;
        }
        let (ppl, _) = nll.perplexity();
        running.push(ppl);
        progress(c, ppl);
    }
    Ok(PerplexityReport { n_text_tokens: tokens.len(), n_ctx, n_chunks, nll, running })
}

/// A perplexity run over `tokens` that also writes the KL-divergence base file `path`.
pub fn run_writing_base(
    ctx: &mut Context,
    tokens: &[u32],
    options: &PerplexityOptions,
    path: &std::path::Path,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<PerplexityReport> {
    let n_chunks = chunk_count(tokens.len(), options)?;
    let n_vocab = ctx.model().hparams().n_vocab;
    let mut writer =
        base_file::BaseFileWriter::create(path, options.n_ctx, n_vocab, n_chunks, tokens)?;
    let report = run(
        ctx,
        tokens,
        options.n_ctx,
        n_chunks,
        &mut |row| writer.write_row(row.logits),
        progress,
    )?;
    writer.finish()?;
    Ok(report)
}

/// The run of `ctx`'s model compared with the base file `path`, over the base's own tokens and
/// chunks (at most `max_chunks` of them).
pub fn run_against_base(
    ctx: &mut Context,
    path: &std::path::Path,
    max_chunks: Option<usize>,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<(PerplexityReport, kl::KlSummary)> {
    let mut base = base_file::BaseFileReader::open(path)?;
    let n_vocab = ctx.model().hparams().n_vocab;
    if base.n_vocab != n_vocab {
        return Err(PerplexityError::BaseFile {
            path: path.display().to_string(),
            reason: format!(
                "its vocabulary has {} tokens, the model's {n_vocab}: a base of another model family",
                base.n_vocab
            ),
        });
    }
    let n_chunks = max_chunks.map_or(base.n_chunks, |m| m.clamp(1, base.n_chunks));
    let tokens = std::mem::take(&mut base.tokens);
    let mut kld = kl::KlDivergence::default();
    let report = run(
        ctx,
        &tokens,
        base.n_ctx,
        n_chunks,
        &mut |row| {
            let b = base.next_row()?;
            kld.add(row.logits, &b, row.next);
            Ok(())
        },
        progress,
    )?;
    Ok((report, kld.summary()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_counts_follow_llama_perplexity() {
        let o = |n_ctx, max_chunks| PerplexityOptions { n_ctx, max_chunks };
        assert_eq!(chunk_count(1043, &o(256, None)).unwrap(), 4);
        assert_eq!(chunk_count(1043, &o(256, Some(2))).unwrap(), 2);
        assert_eq!(chunk_count(1043, &o(256, Some(9))).unwrap(), 4);
        assert!(chunk_count(511, &o(256, None)).is_err());
        assert!(chunk_count(1043, &o(2, None)).is_err());
        assert!(chunk_count(1043, &o(256, Some(0))).is_err());
    }

    #[test]
    fn token_nll_is_a_log_softmax() {
        let logits = [1.0f32, 2.0, 3.0, -1.0];
        let z: f64 = logits.iter().map(|&v| (v as f64).exp()).sum();
        for t in 0..4 {
            let want = -((logits[t] as f64).exp() / z).ln();
            assert!((token_nll(&logits, t as u32) - want).abs() < 1e-12);
        }
    }

    #[test]
    fn mean_and_error_of_known_values() {
        // 1, 2, 3, 4: mean 2.5, sample variance 5/3, standard error sqrt(5/3 / 4).
        let mut s = NllSums::default();
        for v in [1.0, 2.0, 3.0, 4.0] {
            s.add(v);
        }
        let (mean, err) = s.mean_and_error();
        assert!((mean - 2.5).abs() < 1e-12);
        // llama-perplexity's estimator: population variance over (n - 1).
        assert!((err - (1.25f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_and_error(0.0, 0.0, 0), (0.0, 0.0));
    }
}
