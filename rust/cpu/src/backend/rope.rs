//! ROPE for the vectorized path: per row position, a cache of each pair's cosine and sine
//! (YaRN and frequency factors included, as ggml's `ggml_rope_cache_init`), then the rotation
//! with [`crate::kernels::ew::rope_normal`] / [`crate::kernels::ew::rope_neox`].
//!
//! The angles are computed in f64 from the closed form `p * freq_base^(-2i / n_dims)`, as the
//! reference does (ggml multiplies in f32), so that large positions lose no accuracy; the
//! rotation itself is f32.

use crate::kernels::ew;
use crate::reference::HostTensor;
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::{DType, Result, RopeParams};

/// ggml's `ggml_rope_yarn_corr_dim` (in f32, as ggml).
fn corr_dim(n_dims: usize, n_ctx_orig: usize, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// ggml's `ggml_rope_yarn_corr_dims`.
fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let start = corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base).floor();
    let end = corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base).ceil();
    [start.max(0.0), end.min(p.n_dims as f32 - 1.0)]
}

/// The parameters of one ROPE op and its positions.
pub(super) struct RopeCache {
    p: RopeParams,
    neox: bool,
    /// Angle per unit of position of each pair (frequency factors applied).
    freqs: Vec<f64>,
    /// The YaRN ramp mix of each pair (`ramp(i) * ext_factor`), empty without YaRN.
    ramp_mix: Vec<f64>,
    /// The magnitude scale.
    mscale: f64,
    pos: HostTensor,
}

/// The cos / sin cache of one position, kept by a chunk of rows.
#[derive(Default)]
pub(super) struct RowCache {
    i2: Option<usize>,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeCache {
    /// The cache of a ROPE with positions `pos` (I32) and optional frequency factors (F32);
    /// `None` for other modes or types.
    ///
    /// # Safety
    ///
    /// `pos` and `freq_factors` are valid for reads of their layouts, with at least
    /// `n_dims / 2` factors (as validation checks).
    pub(super) unsafe fn new(
        p: &RopeParams,
        pos: &HostTensor,
        freq_factors: Option<&HostTensor>,
    ) -> Option<RopeCache> {
        if pos.layout.dtype != DType::I32
            || !(p.mode == ROPE_MODE_NORMAL || p.mode == ROPE_MODE_NEOX)
        {
            return None;
        }
        if freq_factors.is_some_and(|f| f.layout.dtype != DType::F32) {
            return None;
        }
        let half = p.n_dims / 2;
        let base = f64::from(p.freq_base);
        let freqs = (0..half)
            .map(|i| {
                let ff = freq_factors.map_or(1.0, |f| {
                    // SAFETY: (caller) factor i < n_dims / 2 lies within the tensor.
                    let v = unsafe { f.ptr.add(i * f.layout.nb[0]).cast::<f32>().read_unaligned() };
                    f64::from(v)
                });
                base.powf(-2.0 * i as f64 / p.n_dims as f64) / ff
            })
            .collect();
        let mut mscale = f64::from(p.attn_factor);
        let mut ramp_mix = Vec::new();
        if p.ext_factor != 0.0 {
            let [low, high] = yarn_corr_dims(p);
            ramp_mix = (0..half)
                .map(|i| {
                    let y = (i as f64 - f64::from(low)) / f64::from(0.001f32.max(high - low));
                    (1.0 - y.clamp(0.0, 1.0)) * f64::from(p.ext_factor)
                })
                .collect();
            mscale *= 1.0 + 0.1 * (1.0 / f64::from(p.freq_scale)).ln();
        }
        Some(RopeCache {
            p: *p,
            neox: p.mode == ROPE_MODE_NEOX,
            freqs,
            ramp_mix,
            mscale,
            pos: *pos,
        })
    }

    /// Fills `c` for position index `i2` unless it already holds it.
    fn fill(&self, i2: usize, c: &mut RowCache) {
        if c.i2 == Some(i2) {
            return;
        }
        // SAFETY: i2 < ne2 of src0, which is the positions' length (checked by validation).
        let position =
            unsafe { self.pos.ptr.add(i2 * self.pos.layout.nb[0]).cast::<i32>().read_unaligned() };
        let position = f64::from(position);
        let n = self.p.n_dims;
        c.cos.resize(if self.neox { n / 2 } else { n }, 0.0);
        c.sin.resize(c.cos.len(), 0.0);
        let freq_scale = f64::from(self.p.freq_scale);
        for (i, &f) in self.freqs.iter().enumerate() {
            let extrap = position * f;
            let interp = freq_scale * extrap;
            let theta = match self.ramp_mix.get(i) {
                Some(&mix) => interp * (1.0 - mix) + extrap * mix,
                None => interp,
            };
            let (s, co) = theta.sin_cos();
            let (co, s) = ((co * self.mscale) as f32, (s * self.mscale) as f32);
            if self.neox {
                (c.cos[i], c.sin[i]) = (co, s);
            } else {
                (c.cos[2 * i], c.cos[2 * i + 1]) = (co, co);
                (c.sin[2 * i], c.sin[2 * i + 1]) = (s, s);
            }
        }
        c.i2 = Some(i2);
    }

    /// One row: `y = rope(x)` at the position of index `i2`, values past `n_dims` copied.
    pub(super) fn row(&self, x: &[f32], y: &mut [f32], i2: usize, c: &mut RowCache) -> Result<()> {
        self.fill(i2, c);
        let n = self.p.n_dims;
        if self.neox {
            ew::rope_neox(&x[..n], &c.cos, &c.sin, &mut y[..n])?;
        } else {
            ew::rope_normal(&x[..n], &c.cos, &c.sin, &mut y[..n])?;
        }
        y[n..].copy_from_slice(&x[n..]);
        Ok(())
    }
}
