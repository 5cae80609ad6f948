//! A run compared with a base file, token by token: the statistics llama-perplexity's
//! `--kl-divergence` prints (perplexities of both, their ratio, KL divergence, the change of the
//! right token's probability, how often both put the same token on top).

use super::base_file::BaseRow;
use super::{mean_and_error, NllSums};

/// Running sums over the compared rows.
#[derive(Clone, Debug, Default)]
pub struct KlDivergence {
    /// The run under test's negative log-likelihoods.
    pub nll: NllSums,
    /// The base's.
    pub nll_base: NllSums,
    /// Sum of the products of the two, for their covariance.
    sum_nll_nll_base: f64,
    /// Each row's KL divergence of the run from the base.
    kld: Vec<f64>,
    /// Each row's change of the right token's probability (run minus base).
    p_diff: Vec<f64>,
    /// Rows where both put the same token on top.
    same_top: usize,
}

/// What [`KlDivergence::summary`] reports.
#[derive(Clone, Debug, PartialEq)]
pub struct KlSummary {
    /// Rows compared.
    pub count: usize,
    /// The run's perplexity and its standard error.
    pub ppl: (f64, f64),
    /// The base's.
    pub ppl_base: (f64, f64),
    /// `ln(PPL / PPL(base))` and its standard error (from the two runs' covariance).
    pub ln_ppl_ratio: (f64, f64),
    /// Mean KL divergence and its standard error.
    pub kld_mean: (f64, f64),
    /// Median, 99th percentile and maximum KL divergence.
    pub kld_median: f64,
    /// The 99th percentile.
    pub kld_p99: f64,
    /// The largest.
    pub kld_max: f64,
    /// Root mean square of the right token's probability change.
    pub p_diff_rms: f64,
    /// The largest absolute change.
    pub p_diff_max: f64,
    /// Fraction of rows whose top token is the base's.
    pub same_top: f64,
}

impl KlDivergence {
    /// Compares one row: the run's `logits` against the base's log-probabilities, `next` being
    /// the text's token they predict. Base log-probabilities at the file's cut (16 below the
    /// top) count as zero probability, as llama-perplexity counts them.
    pub fn add(&mut self, logits: &[f32], base: &BaseRow<'_>, next: u32) {
        let (imax, max) =
            logits.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv {
                    (i, v)
                } else {
                    (bi, bv)
                }
            });
        let max = max as f64;
        let log_z = max + logits.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
        let nll = log_z - logits[next as usize] as f64;
        let nll_base = -(base.log_prob(next as usize) as f64);
        self.nll.add(nll);
        self.nll_base.add(nll_base);
        self.sum_nll_nll_base += nll * nll_base;
        let mut kld = 0.0;
        let mut imax_base = 0;
        let mut best_base = f32::NEG_INFINITY;
        for (i, &v) in logits.iter().enumerate() {
            let lp_base = base.log_prob(i);
            if lp_base > best_base {
                best_base = lp_base;
                imax_base = i;
            }
            if lp_base > -16.0 {
                let lp_base = lp_base as f64;
                kld += lp_base.exp() * (lp_base - (v as f64 - log_z));
            }
        }
        self.kld.push(kld);
        self.p_diff.push((-nll).exp() - (-nll_base).exp());
        if imax == imax_base {
            self.same_top += 1;
        }
    }

    /// The statistics so far.
    pub fn summary(&self) -> KlSummary {
        let count = self.kld.len();
        let (lp, lp_err) = self.nll.mean_and_error();
        let (lb, lb_err) = self.nll_base.mean_and_error();
        let cov = if count > 1 {
            let n = count as f64;
            (self.sum_nll_nll_base / n - (self.nll.sum / n) * (self.nll_base.sum / n)) / (n - 1.0)
        } else {
            0.0
        };
        let ratio_err = (lp_err * lp_err + lb_err * lb_err - 2.0 * cov).max(0.0).sqrt();
        let mut sorted = self.kld.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |f: f64| sorted.get(((count as f64 - 1.0) * f).round() as usize).copied();
        let sum: f64 = self.kld.iter().sum();
        let sum2: f64 = self.kld.iter().map(|v| v * v).sum();
        let p2: f64 = self.p_diff.iter().map(|v| v * v).sum();
        KlSummary {
            count,
            ppl: self.nll.perplexity(),
            ppl_base: self.nll_base.perplexity(),
            ln_ppl_ratio: (lp - lb, ratio_err),
            kld_mean: mean_and_error(sum, sum2, count),
            kld_median: at(0.5).unwrap_or(0.0),
            kld_p99: at(0.99).unwrap_or(0.0),
            kld_max: sorted.last().copied().unwrap_or(0.0),
            p_diff_rms: if count > 0 { (p2 / count as f64).sqrt() } else { 0.0 },
            p_diff_max: self.p_diff.iter().fold(0.0, |m, v| m.max(v.abs())),
            same_top: if count > 0 { self.same_top as f64 / count as f64 } else { 0.0 },
        }
    }
}
