//! Embeddings: the final hidden state (after the output norm) of a text's tokens, pooled into
//! one vector and L2-normalized.

use crate::context::{Context, Rows};
use crate::error::{LlmError, Result};

/// How the tokens' hidden states become one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The average over the tokens.
    Mean,
    /// The last token's.
    Last,
    /// The first token's (BERT's CLS).
    First,
}

impl Pooling {
    /// The pooling the model's metadata names (`{arch}.pooling_type`: 1 mean, 2 cls, 3 last),
    /// mean when it names none.
    pub fn for_model(ctx: &Context) -> Result<Pooling> {
        let model = ctx.model();
        let key = format!("{}.pooling_type", model.hparams().arch.name());
        match model.file().opt_u32(&key)? {
            None | Some(0) | Some(1) => Ok(Pooling::Mean),
            Some(2) => Ok(Pooling::First),
            Some(3) => Ok(Pooling::Last),
            Some(other) => Err(LlmError::BadHyperParameter {
                key,
                reason: format!("pooling type {other} is not supported (1 mean, 2 cls, 3 last)"),
            }),
        }
    }

    /// `"mean"`, `"last"`, `"first"` (or `"cls"`).
    pub fn parse(s: &str) -> Result<Pooling> {
        match s.to_ascii_lowercase().as_str() {
            "mean" => Ok(Pooling::Mean),
            "last" => Ok(Pooling::Last),
            "first" | "cls" => Ok(Pooling::First),
            other => Err(LlmError::InvalidArgument(format!(
                "pooling {other:?} is not one of mean, last, first"
            ))),
        }
    }
}

/// The normalized embedding of `tokens`: the context is cleared before and after (an
/// embedding does not continue a conversation).
pub fn embed(ctx: &mut Context, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>> {
    ctx.clear();
    let out = ctx.hidden_states(tokens, Rows::All);
    ctx.clear();
    let out = out?;
    let n = out.positions.len();
    let width = out.width;
    let mut v = vec![0f64; width];
    match pooling {
        Pooling::Mean => {
            for r in 0..n {
                for (a, &x) in v.iter_mut().zip(out.row(r)) {
                    *a += f64::from(x);
                }
            }
            for a in &mut v {
                *a /= n as f64;
            }
        }
        Pooling::Last | Pooling::First => {
            let r = if pooling == Pooling::Last { n - 1 } else { 0 };
            for (a, &x) in v.iter_mut().zip(out.row(r)) {
                *a = f64::from(x);
            }
        }
    }
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    Ok(v.iter().map(|x| (x * scale) as f32).collect())
}
