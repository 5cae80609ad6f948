//! ROPE: rotary position embedding, normal and NeoX, with ggml's YaRN scaling (`rope_yarn`,
//! `ggml_rope_yarn_corr_dims`) and optional frequency factors.
//!
//! For row `a[:, i1, i2, i3]` at position `p = pos[i2]` and pair `i` (`0 <= i < n_dims / 2`):
//! `theta_extrap = p * freq_base^(-2 i / n_dims) / freq_factor[i]`,
//! `theta_interp = freq_scale * theta_extrap`; without YaRN (`ext_factor == 0`)
//! `theta = theta_interp`, else `ramp_mix = ramp(i) * ext_factor`,
//! `theta = theta_interp (1 - ramp_mix) + theta_extrap ramp_mix` and the magnitude is scaled by
//! `1 + 0.1 ln(1 / freq_scale)`; everything is multiplied by `attn_factor`. Normal mode rotates
//! the adjacent pair `(x[2i], x[2i+1])`, NeoX the pair `(x[i], x[i + n_dims/2])`; values from
//! `n_dims` on are copied unchanged.
//!
//! Angles and rotations are computed in f64 from the closed form (ggml builds the angles by
//! repeated f32 multiplication); the YaRN correction dims are the core's
//! `RopeParams::yarn_corr_dims` (in f32 exactly as ggml, since they are floored / ceiled).

use super::access::{rows, scratch_f32, Mem, Poller, Scratch};
use tessera_core::op::ROPE_MODE_NEOX;
use tessera_core::{Result, RopeParams};

/// ggml's `rope_yarn_ramp` for pair `i` (`i0 / 2` in ggml): 1 below `low`, 0 above `high`.
fn ramp(low: f32, high: f32, i: usize) -> f64 {
    let y = (i as f64 - f64::from(low)) / f64::from(0.001f32.max(high - low));
    1.0 - y.clamp(0.0, 1.0)
}

/// Cosine and sine (times the magnitude scale) of pair `i` whose unscaled angle is
/// `theta_extrap`.
fn cos_sin(p: &RopeParams, corr: [f32; 2], theta_extrap: f64, i: usize) -> (f64, f64) {
    let freq_scale = f64::from(p.freq_scale);
    let theta_interp = freq_scale * theta_extrap;
    let mut theta = theta_interp;
    let mut mscale = f64::from(p.attn_factor);
    if p.ext_factor != 0.0 {
        let ramp_mix = ramp(corr[0], corr[1], i) * f64::from(p.ext_factor);
        theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

/// ROPE of `a` at positions `pos` (I32 `[ne2]`) with optional frequency factors.
pub(crate) fn rope(
    dst: &Mem,
    a: &Mem,
    pos: &Mem,
    freq_factors: Option<&Mem>,
    p: &RopeParams,
    poll: &mut Poller,
) -> Result<()> {
    let ne = a.ne();
    let half = p.n_dims / 2;
    let neox = p.mode == ROPE_MODE_NEOX;
    let corr = p.yarn_corr_dims();
    // Angle per unit of position of each pair: freq_base^(-2i / n_dims) / freq_factor[i].
    let base = f64::from(p.freq_base);
    let freqs: Vec<f64> = (0..half)
        .map(|i| {
            let ff = freq_factors.map_or(1.0, |f| f64::from(f.get([i, 0, 0, 0])));
            base.powf(-2.0 * i as f64 / p.n_dims as f64) / ff
        })
        .collect();
    let mut s = Scratch::default();
    let mut row = scratch_f32(ne[0])?;
    let mut out = scratch_f32(ne[0])?;
    for r in rows(ne) {
        a.read_row(r, &mut row, &mut s)?;
        out.copy_from_slice(&row);
        let position = f64::from(pos.get_i32([r[1], 0, 0, 0]));
        for (i, &freq) in freqs.iter().enumerate() {
            let (c, sn) = cos_sin(p, corr, position * freq, i);
            let (j0, j1) = if neox { (i, i + half) } else { (2 * i, 2 * i + 1) };
            let (x0, x1) = (f64::from(row[j0]), f64::from(row[j1]));
            out[j0] = (x0 * c - x1 * sn) as f32;
            out[j1] = (x0 * sn + x1 * c) as f32;
        }
        dst.write_row(r, &out, &mut s)?;
        poll.tick(ne[0])?;
    }
    Ok(())
}
