//! ROPE for the vectorized path: a table of each position's and pair's cosine and sine (YaRN
//! and frequency factors included, as ggml's `ggml_rope_cache_init`), shared by the ROPEs of a
//! graph that have the same parameters and positions ([`RopeTables`]), then the rotation with
//! [`crate::kernels::ew::rope_normal`] / [`crate::kernels::ew::rope_neox`].
//!
//! The angles are computed in f64 from the closed form `p * freq_base^(-2i / n_dims)`, as the
//! reference does (ggml multiplies in f32), so that large positions lose no accuracy; the
//! rotation itself is f32.

use crate::kernels::ew;
use crate::reference::HostTensor;
use std::sync::{Arc, Mutex};
use tessera_core::op::{ROPE_MODE_NEOX, ROPE_MODE_NORMAL};
use tessera_core::{DType, Result, RopeParams};

/// How many position tables [`RopeTables`] keeps (the ROPEs of one model use one or two sets
/// of parameters; a graph has one set of positions).
const KEPT_TABLES: usize = 4;

/// What a position table depends on: the parameters, the frequency factors and the positions.
#[derive(PartialEq)]
struct TableKey {
    p: RopeParams,
    factors: Vec<f32>,
    positions: Vec<i32>,
}

/// The cosines and sines of every position of a ROPE: `cos[i2 * len..][..len]` for position
/// index `i2`, with `len` = `n_dims / 2` (NEOX) or `n_dims` (each pair's value twice).
struct PositionTable {
    key: TableKey,
    len: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// The position tables of the latest ROPEs, kept by the backend: every layer of a model rotates
/// its queries and keys at the same positions with the same parameters, so the table is
/// computed once per graph (not per op, nor per row) and found again by its contents.
#[derive(Default)]
pub(crate) struct RopeTables {
    kept: Mutex<Vec<Arc<PositionTable>>>,
}

impl RopeTables {
    /// The table for `key`, computed by `make` unless kept.
    fn get(
        &self,
        key: TableKey,
        make: impl FnOnce(TableKey) -> PositionTable,
    ) -> Arc<PositionTable> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = kept.iter().position(|t| t.key == key) {
            let t = kept.remove(i);
            kept.push(Arc::clone(&t));
            return t;
        }
        let t = Arc::new(make(key));
        if kept.len() == KEPT_TABLES {
            kept.remove(0);
        }
        kept.push(Arc::clone(&t));
        t
    }
}

/// One ROPE op, ready to rotate rows.
pub(super) struct RopeCache {
    neox: bool,
    n_dims: usize,
    table: Arc<PositionTable>,
}

impl RopeCache {
    /// The rotation of a ROPE with positions `pos` (I32) and optional frequency factors (F32),
    /// its table taken from `tables` or computed; `None` for other modes or types.
    ///
    /// # Safety
    ///
    /// `pos` and `freq_factors` are valid for reads of their layouts, with at least
    /// `n_dims / 2` factors (as validation checks).
    pub(super) unsafe fn new(
        p: &RopeParams,
        pos: &HostTensor,
        freq_factors: Option<&HostTensor>,
        tables: &RopeTables,
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
        let factors = match freq_factors {
            None => Vec::new(),
            Some(f) => (0..half)
                // SAFETY: (caller) factor i < n_dims / 2 lies within the tensor.
                .map(|i| unsafe { f.ptr.add(i * f.layout.nb[0]).cast::<f32>().read_unaligned() })
                .collect(),
        };
        let positions = (0..pos.layout.ne[0])
            // SAFETY: (caller) the positions tensor holds ne0 I32 values.
            .map(|i| unsafe { pos.ptr.add(i * pos.layout.nb[0]).cast::<i32>().read_unaligned() })
            .collect();
        let key = TableKey { p: *p, factors, positions };
        let table = tables.get(key, position_table);
        Some(RopeCache { neox: p.mode == ROPE_MODE_NEOX, n_dims: p.n_dims, table })
    }

    /// One row: `y = rope(x)` at the position of index `i2`, values past `n_dims` copied.
    pub(super) fn row(&self, x: &[f32], y: &mut [f32], i2: usize) -> Result<()> {
        let (n, t) = (self.n_dims, &self.table);
        let (cos, sin) = (&t.cos[i2 * t.len..][..t.len], &t.sin[i2 * t.len..][..t.len]);
        if self.neox {
            ew::rope_neox(&x[..n], cos, sin, &mut y[..n])?;
        } else {
            ew::rope_normal(&x[..n], cos, sin, &mut y[..n])?;
        }
        y[n..].copy_from_slice(&x[n..]);
        Ok(())
    }
}

/// Computes the table of `key` (YaRN and frequency factors included, as ggml's
/// `ggml_rope_cache_init`), angles in f64.
fn position_table(key: TableKey) -> PositionTable {
    let p = &key.p;
    let (n, neox) = (p.n_dims, p.mode == ROPE_MODE_NEOX);
    let half = n / 2;
    let base = f64::from(p.freq_base);
    let freqs: Vec<f64> = (0..half)
        .map(|i| {
            let ff = key.factors.get(i).map_or(1.0, |&f| f64::from(f));
            base.powf(-2.0 * i as f64 / n as f64) / ff
        })
        .collect();
    let mut mscale = f64::from(p.attn_factor);
    let mut ramp_mix = Vec::new();
    if p.ext_factor != 0.0 {
        let [low, high] = p.yarn_corr_dims();
        ramp_mix = (0..half)
            .map(|i| {
                let y = (i as f64 - f64::from(low)) / f64::from(0.001f32.max(high - low));
                (1.0 - y.clamp(0.0, 1.0)) * f64::from(p.ext_factor)
            })
            .collect();
        mscale *= 1.0 + 0.1 * (1.0 / f64::from(p.freq_scale)).ln();
    }
    let len = if neox { half } else { n };
    let (mut cos, mut sin) =
        (vec![0f32; len * key.positions.len()], vec![0f32; len * key.positions.len()]);
    let freq_scale = f64::from(p.freq_scale);
    for (i2, &position) in key.positions.iter().enumerate() {
        let (c, s) = (&mut cos[i2 * len..][..len], &mut sin[i2 * len..][..len]);
        for (i, &f) in freqs.iter().enumerate() {
            let extrap = f64::from(position) * f;
            let interp = freq_scale * extrap;
            let theta = match ramp_mix.get(i) {
                Some(&mix) => interp * (1.0 - mix) + extrap * mix,
                None => interp,
            };
            let (sn, co) = theta.sin_cos();
            let (co, sn) = ((co * mscale) as f32, (sn * mscale) as f32);
            if neox {
                (c[i], s[i]) = (co, sn);
            } else {
                (c[2 * i], c[2 * i + 1]) = (co, co);
                (s[2 * i], s[2 * i + 1]) = (sn, sn);
            }
        }
    }
    PositionTable { key, len, cos, sin }
}
