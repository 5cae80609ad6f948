//! The stages of the sampler chain over a candidate list, as llama.cpp's samplers define them
//! (src/llama-sampler.cpp): top-k, typical-p, top-p, min-p, and the softmax draw.
//!
//! Candidates are tokens with a finite logit; a banned token (`-inf`) never becomes one, so a
//! probability is never computed from an infinite logit. "Sorted" means descending logit with
//! the lower id first on a tie; that order is also the tie-break of every stage.

use std::cmp::Ordering;

/// A token still in the running, with its logit and (after a softmax) its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The token id.
    pub id: u32,
    /// Its logit after bias and penalties (before temperature).
    pub logit: f32,
    /// Its probability in the last softmax over the candidates (0 until one ran).
    pub p: f32,
}

/// Descending logit, then ascending id. Logits are never NaN here.
pub(crate) fn by_rank(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.partial_cmp(&a.logit).unwrap_or(Ordering::Equal).then(a.id.cmp(&b.id))
}

/// The candidate list of one sampling step and whether it is in rank order.
#[derive(Debug, Default)]
pub(crate) struct Candidates {
    pub items: Vec<Candidate>,
    pub sorted: bool,
    /// Scratch for typical-p: (sort key, index into `items`).
    scores: Vec<(u64, u32)>,
    /// Scratch for typical-p's reordering.
    reorder: Vec<Candidate>,
}

/// Up to this many unsorted candidates top-p sorts them all; above, it first drops those that
/// cannot be in the nucleus.
const TOP_P_FULL_SORT_MAX: usize = 1024;

impl Candidates {
    /// Every token with a finite logit, in id order.
    pub fn fill_all(&mut self, logits: &[f32]) {
        self.items.clear();
        self.items.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| **l > f32::NEG_INFINITY)
                .map(|(i, &logit)| Candidate { id: i as u32, logit, p: 0.0 }),
        );
        self.sorted = false;
    }

    /// The `k` best tokens with a finite logit (fewer if fewer are finite), in rank order, in
    /// one pass over `logits` that keeps at most `2k` entries: when the buffer is full it keeps
    /// the best `k` and from then on skips every logit not above the `k`-th best, so almost
    /// every element costs one comparison.
    pub fn fill_top_k(&mut self, logits: &[f32], k: usize) {
        debug_assert!(k > 0);
        let items = &mut self.items;
        items.clear();
        let cap = (2 * k).max(k + 64);
        let mut threshold = f32::NEG_INFINITY;
        const CHUNK: usize = 16;
        let mut base = 0usize;
        for chunk in logits.chunks(CHUNK) {
            // Most chunks hold nothing above the threshold: test them in one vectorizable step.
            if chunk.iter().fold(false, |any, &x| any | (x > threshold)) {
                for (j, &x) in chunk.iter().enumerate() {
                    // Equal to the threshold loses: every kept token has a lower id.
                    if x > threshold {
                        items.push(Candidate { id: (base + j) as u32, logit: x, p: 0.0 });
                        if items.len() == cap {
                            items.select_nth_unstable_by(k - 1, by_rank);
                            items.truncate(k);
                            threshold = items[k - 1].logit;
                        }
                    }
                }
            }
            base += chunk.len();
        }
        if items.len() > k {
            items.select_nth_unstable_by(k - 1, by_rank);
            items.truncate(k);
        }
        items.sort_unstable_by(by_rank);
        self.sorted = true;
    }

    /// Puts the candidates in rank order.
    pub fn sort(&mut self) {
        if !self.sorted {
            self.items.sort_unstable_by(by_rank);
            self.sorted = true;
        }
    }

    /// Sets every candidate's `p` to its softmax probability over the candidates.
    pub fn softmax(&mut self) {
        softmax_with_temperature(&mut self.items, 1.0);
    }

    /// Top-p (nucleus): keeps the best candidates whose probabilities (over the current
    /// candidates) first sum to at least `p`; the result is in rank order.
    pub fn top_p(&mut self, p: f32) {
        if p >= 1.0 || self.items.is_empty() {
            return;
        }
        let target = f64::from(p);
        if !self.sorted && self.items.len() > TOP_P_FULL_SORT_MAX {
            self.drop_outside_nucleus(target);
        } else {
            self.softmax();
        }
        self.sort();
        let mut cum = 0.0f64;
        let mut keep = self.items.len();
        for (i, c) in self.items.iter().enumerate() {
            cum += f64::from(c.p);
            if cum >= target {
                keep = i + 1;
                break;
            }
        }
        self.items.truncate(keep);
    }

    /// Before top-p sorts a long list: sets the probabilities (a softmax over all candidates)
    /// and drops the candidates that cannot be in the nucleus, without sorting. Candidates fall
    /// into buckets by how far their logit is below the best (1/16 wide, 16 deep, everything
    /// deeper in a last bucket); the buckets from the top whose mass first reaches `p` hold the
    /// nucleus, and one more is kept so that rounding can never cut it short.
    fn drop_outside_nucleus(&mut self, p: f64) {
        const PER_UNIT: f32 = 16.0;
        const LAST: usize = 256;
        let max = self.items.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let bucket = |logit: f32| (((max - logit) * PER_UNIT) as usize).min(LAST);
        let mut mass = [0.0f64; LAST + 1];
        let mut total = 0.0f64;
        for c in self.items.iter_mut() {
            c.p = (c.logit - max).exp();
            mass[bucket(c.logit)] += f64::from(c.p);
            total += f64::from(c.p);
        }
        let mut cum = 0.0f64;
        let mut last = LAST;
        for (b, m) in mass.iter().enumerate() {
            cum += m;
            if cum >= p * total {
                last = (b + 1).min(LAST);
                break;
            }
        }
        if last < LAST {
            self.items.retain(|c| bucket(c.logit) <= last);
        }
        normalize(&mut self.items, total);
    }

    /// Min-p: keeps the candidates whose probability is at least `p` times the largest, i.e.
    /// whose logit is at least the largest plus `ln p`.
    pub fn min_p(&mut self, p: f32) {
        if p <= 0.0 || self.items.is_empty() {
            return;
        }
        let max = if self.sorted {
            self.items[0].logit
        } else {
            self.items.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
        };
        let min_logit = max + p.ln();
        if self.sorted {
            let keep =
                self.items.iter().position(|c| c.logit < min_logit).unwrap_or(self.items.len());
            self.items.truncate(keep.max(1));
        } else {
            self.items.retain(|c| c.logit >= min_logit);
        }
    }

    /// Locally typical sampling (Meister et al.): ranks the candidates by how far their
    /// surprise `-ln p` is from the entropy and keeps them in that order until their
    /// probabilities sum to more than `p`. The result is in that order, not rank order; equal
    /// distances keep the lower id first.
    pub fn typical(&mut self, p: f32) {
        if p >= 1.0 || self.items.is_empty() {
            return;
        }
        self.softmax();
        let entropy: f64 = self
            .items
            .iter()
            .filter(|c| c.p > 0.0)
            .map(|c| {
                let p = f64::from(c.p);
                -p * p.ln()
            })
            .sum();
        // Sort keys: the distance's bits (monotonic for non-negative floats), then the id.
        self.scores.clear();
        self.scores.extend(self.items.iter().enumerate().map(|(i, c)| {
            let surprise = if c.p > 0.0 { -f64::from(c.p).ln() } else { f64::INFINITY };
            let distance = (surprise - entropy).abs() as f32;
            ((u64::from(distance.to_bits()) << 32) | u64::from(c.id), i as u32)
        }));
        self.scores.sort_unstable_by_key(|&(key, _)| key);
        let target = f64::from(p);
        let mut cum = 0.0f64;
        let mut keep = self.scores.len();
        for (i, &(_, idx)) in self.scores.iter().enumerate() {
            cum += f64::from(self.items[idx as usize].p);
            if cum > target {
                keep = i + 1;
                break;
            }
        }
        self.reorder.clear();
        self.reorder.extend(self.scores[..keep].iter().map(|&(_, idx)| self.items[idx as usize]));
        std::mem::swap(&mut self.items, &mut self.reorder);
        self.sorted = false;
    }

    /// Draws one candidate with probability `softmax(logit / temperature)`, given `u`, a
    /// uniform number in `[0, 1)`, and sets every candidate's `p` to that distribution. Returns
    /// the drawn token. The list must not be empty and `temperature` must be `> 0`.
    pub fn draw(&mut self, temperature: f32, u: f64) -> u32 {
        let sum = exp_weights(&mut self.items, temperature);
        let target = u * sum;
        let mut cum = 0.0f64;
        let mut chosen = None;
        let mut last_nonzero = 0;
        for (i, c) in self.items.iter().enumerate() {
            if c.p > 0.0 {
                last_nonzero = i;
            }
            cum += f64::from(c.p);
            if cum > target {
                chosen = Some(i);
                break;
            }
        }
        normalize(&mut self.items, sum);
        // Rounding could leave the running sum a hair below the target at the very end.
        self.items[chosen.unwrap_or(last_nonzero)].id
    }
}

/// Sets every `p` to `softmax(logit / temperature)` over `items`.
fn softmax_with_temperature(items: &mut [Candidate], temperature: f32) {
    let sum = exp_weights(items, temperature);
    normalize(items, sum);
}

/// Sets `p = exp((logit - max) / temperature)` (so a tiny temperature cannot overflow) and
/// returns the sum of these weights, at least 1 (the maximum's weight).
fn exp_weights(items: &mut [Candidate], temperature: f32) -> f64 {
    let max = items.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
    let mut sum = 0.0f64;
    for c in items.iter_mut() {
        c.p = ((c.logit - max) / temperature).exp();
        sum += f64::from(c.p);
    }
    sum
}

fn normalize(items: &mut [Candidate], sum: f64) {
    for c in items.iter_mut() {
        c.p = (f64::from(c.p) / sum) as f32;
    }
}
