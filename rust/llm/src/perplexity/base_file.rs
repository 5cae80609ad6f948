//! llama-perplexity's `--kl-divergence-base` file, written and read the way its source defines it
//! (tools/perplexity in llama.cpp), so a base computed by either engine serves the other:
//!
//! - `_logits_` (8 bytes), then little-endian: `n_ctx` (u32), `n_vocab` (i32), `n_chunk` (i32);
//! - the text's tokens, `n_chunk * n_ctx` i32;
//! - for every chunk, for each of its `n_ctx - 1 - n_ctx / 2` scored positions, a row of
//!   `2 * ((n_vocab + 1) / 2) + 4` u16: an f32 scale and an f32 minimum log-probability (the first
//!   four u16), then each token's log-probability as `min + scale * q` with `q` a u16 (0 for
//!   log-probabilities more than 16 below the best token's), padded to an even count.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::{first_scored, PerplexityError, Result};

const MAGIC: &[u8; 8] = b"_logits_";
const HEADER_BYTES: u64 = 8 + 4 + 4 + 4;

/// u16 values per scored row: two f32, then the vocabulary padded to an even count.
fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Scored rows per chunk.
fn rows_per_chunk(n_ctx: usize) -> usize {
    n_ctx - 1 - first_scored(n_ctx)
}

fn error(path: &Path, reason: impl Into<String>) -> PerplexityError {
    PerplexityError::BaseFile { path: path.display().to_string(), reason: reason.into() }
}

/// Writes a base file while a run scores its rows.
pub struct BaseFileWriter {
    path: PathBuf,
    out: BufWriter<File>,
    n_vocab: usize,
    row: Vec<u16>,
    rows_left: usize,
}

impl BaseFileWriter {
    /// Creates `path` for a run of `n_chunks` chunks of `n_ctx` tokens over `tokens` (at least
    /// `n_chunks * n_ctx` of them; the rest are not written) with a vocabulary of `n_vocab`.
    pub fn create(
        path: &Path,
        n_ctx: usize,
        n_vocab: usize,
        n_chunks: usize,
        tokens: &[u32],
    ) -> Result<BaseFileWriter> {
        let n_tokens = n_chunks * n_ctx;
        let too_big = |v: usize| i32::try_from(v).is_err();
        if tokens.len() < n_tokens || too_big(n_ctx) || too_big(n_vocab) || too_big(n_chunks) {
            return Err(error(path, "the run does not fit the file's 32-bit fields"));
        }
        let file = File::create(path).map_err(|e| error(path, e.to_string()))?;
        let mut out = BufWriter::new(file);
        let mut header = Vec::with_capacity(HEADER_BYTES as usize + 4 * n_tokens);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&(n_ctx as u32).to_le_bytes());
        header.extend_from_slice(&(n_vocab as i32).to_le_bytes());
        header.extend_from_slice(&(n_chunks as i32).to_le_bytes());
        for &t in &tokens[..n_tokens] {
            header.extend_from_slice(&(t as i32).to_le_bytes());
        }
        out.write_all(&header).map_err(|e| error(path, e.to_string()))?;
        Ok(BaseFileWriter {
            path: path.to_path_buf(),
            out,
            n_vocab,
            row: vec![0; row_len(n_vocab)],
            rows_left: n_chunks * rows_per_chunk(n_ctx),
        })
    }

    /// Appends the next scored row's log-probabilities, from its logits.
    pub fn write_row(&mut self, logits: &[f32]) -> Result<()> {
        if logits.len() != self.n_vocab || self.rows_left == 0 {
            return Err(error(&self.path, "a row the file's header does not announce"));
        }
        encode_row(logits, &mut self.row);
        let bytes: Vec<u8> = self.row.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.out.write_all(&bytes).map_err(|e| error(&self.path, e.to_string()))?;
        self.rows_left -= 1;
        Ok(())
    }

    /// Flushes the file; every announced row must have been written.
    pub fn finish(mut self) -> Result<()> {
        if self.rows_left != 0 {
            return Err(error(
                &self.path,
                format!("{} scored rows were not written", self.rows_left),
            ));
        }
        self.out.flush().map_err(|e| error(&self.path, e.to_string()))
    }
}

/// llama-perplexity's 16-bit log-probabilities of one row of logits into `row`.
fn encode_row(logits: &[f32], row: &mut [u16]) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let min = logits.iter().fold(f32::INFINITY, |m, &v| m.min(v)).max(max - 16.0);
    let sum_exp: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, values) = row.split_at_mut(4);
    let [s0, s1] = split_f32(scale);
    let [m0, m1] = split_f32(min_log_prob);
    head.copy_from_slice(&[s0, s1, m0, m1]);
    values.fill(0);
    if scale != 0.0 {
        let inv_scale = 1.0 / scale;
        for (q, &v) in values.iter_mut().zip(logits) {
            if v > min {
                *q = (inv_scale * (v - min)).round_ties_even().clamp(0.0, 65535.0) as u16;
            }
        }
    }
}

fn split_f32(v: f32) -> [u16; 2] {
    let b = v.to_le_bytes();
    [u16::from_le_bytes([b[0], b[1]]), u16::from_le_bytes([b[2], b[3]])]
}

fn join_f32(lo: u16, hi: u16) -> f32 {
    let (l, h) = (lo.to_le_bytes(), hi.to_le_bytes());
    f32::from_le_bytes([l[0], l[1], h[0], h[1]])
}

/// One scored row of a base file: log-probabilities as `min_log_prob + scale * q`.
pub struct BaseRow<'a> {
    scale: f32,
    min_log_prob: f32,
    q: &'a [u16],
}

impl BaseRow<'_> {
    /// The log-probability of token `i`.
    pub fn log_prob(&self, i: usize) -> f32 {
        self.scale * self.q[i] as f32 + self.min_log_prob
    }

    /// Tokens in the row.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether the row is empty (never, for a file that was read).
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// A base file opened for a comparison run: its header and tokens, then its rows in order.
pub struct BaseFileReader {
    path: PathBuf,
    input: BufReader<File>,
    /// Tokens per chunk of the base run.
    pub n_ctx: usize,
    /// The base model's vocabulary size.
    pub n_vocab: usize,
    /// Chunks of the base run.
    pub n_chunks: usize,
    /// The text's tokens the base run scored (`n_chunks * n_ctx`).
    pub tokens: Vec<u32>,
    raw: Vec<u8>,
    row: Vec<u16>,
    rows_left: usize,
}

impl BaseFileReader {
    /// Opens `path`, checking its header against its length before reading anything it sizes.
    pub fn open(path: &Path) -> Result<BaseFileReader> {
        let file = File::open(path).map_err(|e| error(path, e.to_string()))?;
        let len = file.metadata().map_err(|e| error(path, e.to_string()))?.len();
        let mut input = BufReader::new(file);
        let mut header = [0u8; HEADER_BYTES as usize];
        input
            .read_exact(&mut header)
            .map_err(|_| error(path, format!("{len} bytes is shorter than the header")))?;
        if &header[..8] != MAGIC {
            return Err(error(path, "not a log-probability file (no `_logits_` magic)"));
        }
        let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().unwrap());
        let (n_ctx, n_vocab, n_chunks) = (word(8), word(12) as i32, word(16) as i32);
        if n_ctx < 4 || n_vocab < 1 || n_chunks < 1 {
            return Err(error(
                path,
                format!("header n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunks} is invalid"),
            ));
        }
        let (n_ctx, n_vocab, n_chunks) = (n_ctx as usize, n_vocab as usize, n_chunks as usize);
        let rows = n_chunks as u64 * rows_per_chunk(n_ctx) as u64;
        let expected = (n_chunks as u64 * n_ctx as u64)
            .checked_mul(4)
            .and_then(|t| rows.checked_mul(row_len(n_vocab) as u64 * 2)?.checked_add(t))
            .and_then(|b| b.checked_add(HEADER_BYTES));
        if expected != Some(len) {
            return Err(error(
                path,
                format!(
                    "its header (n_ctx {n_ctx}, n_vocab {n_vocab}, {n_chunks} chunks) announces \
                     {} bytes; the file has {len}",
                    expected.map_or("more than 2^64".to_string(), |e| e.to_string())
                ),
            ));
        }
        // The length matched, so the tokens are in the file.
        let mut raw = vec![0u8; n_chunks * n_ctx * 4];
        input.read_exact(&mut raw).map_err(|e| error(path, e.to_string()))?;
        let mut tokens = Vec::with_capacity(n_chunks * n_ctx);
        for (i, b) in raw.chunks_exact(4).enumerate() {
            let t = i32::from_le_bytes(b.try_into().unwrap());
            if t < 0 || t as usize >= n_vocab {
                return Err(error(
                    path,
                    format!("token {i} is {t}, outside its vocabulary of {n_vocab}"),
                ));
            }
            tokens.push(t as u32);
        }
        Ok(BaseFileReader {
            path: path.to_path_buf(),
            input,
            n_ctx,
            n_vocab,
            n_chunks,
            tokens,
            raw: vec![0; row_len(n_vocab) * 2],
            row: vec![0; row_len(n_vocab)],
            rows_left: rows as usize,
        })
    }

    /// The next scored row.
    pub fn next_row(&mut self) -> Result<BaseRow<'_>> {
        if self.rows_left == 0 {
            return Err(error(&self.path, "the run asks for more rows than the file holds"));
        }
        self.input.read_exact(&mut self.raw).map_err(|e| error(&self.path, e.to_string()))?;
        for (v, b) in self.row.iter_mut().zip(self.raw.chunks_exact(2)) {
            *v = u16::from_le_bytes([b[0], b[1]]);
        }
        self.rows_left -= 1;
        Ok(BaseRow {
            scale: join_f32(self.row[0], self.row[1]),
            min_log_prob: join_f32(self.row[2], self.row[3]),
            q: &self.row[4..4 + self.n_vocab],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_within_the_16_bit_step() {
        let logits: Vec<f32> = (0..1001).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.3).collect();
        let mut row = vec![0u16; row_len(logits.len())];
        encode_row(&logits, &mut row);
        let base = BaseRow {
            scale: join_f32(row[0], row[1]),
            min_log_prob: join_f32(row[2], row[3]),
            q: &row[4..4 + logits.len()],
        };
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = max + logits.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
        for (i, &v) in logits.iter().enumerate() {
            let want = v as f64 - lse;
            let got = base.log_prob(i) as f64;
            if want > max - lse - 16.0 {
                // Half a step of 16 / 65535, plus f32 rounding.
                assert!((got - want).abs() < 1.3e-4, "{i}: {got} vs {want}");
            } else {
                // Below the cut every value reads as the cut itself.
                assert!((got - (max - lse - 16.0)).abs() < 1e-4, "{i}: {got}");
            }
        }
    }

    #[test]
    fn row_length_pads_the_vocabulary_to_even() {
        assert_eq!(row_len(4), 8);
        assert_eq!(row_len(5), 10);
        assert_eq!(rows_per_chunk(256), 127);
    }
}
