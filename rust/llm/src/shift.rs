//! Context shift: the graph that moves a KV cache's rows when positions are discarded
//! (llama.cpp's `llama_kv_cache::update` with `build_graph_shift` / `build_rope_shift`).
//!
//! When positions `n_keep .. n_keep + n_discard` are discarded, every later position `p`
//! becomes `p - n_discard`. Position `p` lives in cell `p mod size` of its cache kind
//! ([`crate::kv_cache`]), so a moved position changes cell: per attention layer, the rows of
//! the moved cells are read (GET_ROWS, F16 to F32, exact), their keys rotated by the position
//! delta (ROPE with the layer's own base, scale and frequency factors: a rotation by `p` then
//! by `-n_discard` is the rotation by `p - n_discard`), and written to their new cells
//! (SET_ROWS, F32 to F16: the keys' one rounding, as llama.cpp's in-place F16 rope has). All
//! rows are read before any is written, so moves that overlap are safe. The graph runs
//! through the context's scheduler, on the device that holds the cache. A Q8_0 / Q4_0 cache's
//! rows are read as F32 and quantized again where they are written (as llama.cpp's shift of a
//! quantized cache does).
//!
//! Sliding-window layers shift too (as llama.cpp's SWA cache does): their ring's cells hold
//! positions, the window of the next query then covers the moved positions at the same
//! distances as before. Keys of the kept prefix that the ring had already overwritten stay
//! gone, as in llama.cpp. Layers without RoPE (SmolLM3's every fourth) move their rows
//! unrotated. Recurrent layers cannot shift: their states hold every position processed
//! ([`crate::LlmError::ContextShiftUnsupported`]).

use crate::blocks::{rope_factor_tensor, rope_params};
use crate::error::Result;
use crate::forward::ModelRef;
use crate::kv_cache::{KindMoves, KvCache};
use tessera_core::{DType, Graph, TensorId};

/// A built shift graph and its inputs.
pub(crate) struct ShiftGraph {
    /// The graph.
    pub graph: Graph,
    /// Per cache kind with moves: I32 `[n]` inputs, the cells read, the cells written and the
    /// position deltas.
    pub inputs: Vec<Option<[TensorId; 3]>>,
}

/// Builds the graph that applies `moves` (per cache kind) to every attention layer of `cache`
/// in a context of `n_ctx` positions.
pub(crate) fn build(
    m: &ModelRef<'_>,
    cache: &KvCache,
    n_ctx: usize,
    moves: &[KindMoves],
) -> Result<ShiftGraph> {
    let hp = m.hp;
    let mut g = Graph::new();
    let mut inputs = Vec::with_capacity(moves.len());
    for (kind, mv) in moves.iter().enumerate() {
        let n = mv.src.len();
        if n == 0 {
            inputs.push(None);
            continue;
        }
        let src = g.input(&format!("shift_src{kind}"), DType::I32, &[n])?;
        let dst = g.input(&format!("shift_dst{kind}"), DType::I32, &[n])?;
        let delta = g.input(&format!("shift_delta{kind}"), DType::I32, &[n])?;
        inputs.push(Some([src, dst, delta]));
    }
    let factors = match rope_factor_tensor(m.tensors, hp, n_ctx) {
        Some(t) => {
            let id = g.weight(&t.name, t.info.dtype, t.info.shape())?;
            g.set_storage(id, m.weights.storage(t)?)?;
            Some(id)
        }
        None => None,
    };
    for il in (0..hp.n_layer).filter(|&il| !hp.is_recurrent(il)) {
        let lc = cache.layer(il)?;
        let Some([src, dst, delta]) = inputs[lc.kind] else { continue };
        let n = moves[lc.kind].src.len();
        let (wk, wv) = (hp.n_embd_k_gqa(), hp.n_embd_v_gqa());
        let kc = g.new_tensor(lc.k_layout.dtype, &[wk, lc.k_layout.ne[1]])?;
        g.set_storage(kc, lc.k.clone())?;
        let mut k = g.get_rows(kc, src)?;
        if hp.uses_rope(il) {
            let mut p = rope_params(hp, il);
            // The rows were scaled once when they were first rotated (YaRN's magnitude and
            // `attn_factor`); the shift only turns them, so its scale is 1 in all.
            let yarn =
                if p.ext_factor != 0.0 { 1.0 + 0.1 * (1.0 / p.freq_scale).ln() } else { 1.0 };
            p.attn_factor = 1.0 / yarn;
            let heads = g.reshape(k, &[hp.head_dim_k, hp.n_head_kv, n])?;
            let rotated = g.rope_ext(heads, delta, factors, p)?;
            k = g.reshape(rotated, &[wk, n])?;
        }
        let kw = g.set_rows(kc, k, dst)?;
        g.set_output(kw)?;
        let vc = g.new_tensor(lc.v_layout.dtype, &[wv, lc.v_layout.ne[1]])?;
        g.set_storage(vc, lc.v.clone())?;
        let v = g.get_rows(vc, src)?;
        let vw = g.set_rows(vc, v, dst)?;
        g.set_output(vw)?;
    }
    Ok(ShiftGraph { graph: g, inputs })
}

#[cfg(test)]
mod tests {
    //! The shift against independent references: each rotated key against the f64 rotation
    //! of the key it came from; layer 0's keys (which depend on the token and its position
    //! only) against a fresh computation of the kept tokens at their new positions; and the
    //! logits after moving every position up against those of the unmoved cache (attention
    //! sees only position differences).

    use crate::hparams::RopeScaling;
    use crate::{Context, ContextOptions, DeviceChoice, Model, Rows};
    use half::f16;
    use std::path::PathBuf;
    use std::sync::Arc;
    use tessera_core::op::ROPE_MODE_NEOX;
    use tessera_core::registry::Registry;

    fn registry() -> Registry {
        let mut reg = Registry::new();
        reg.register(tessera_cpu::CpuBackendReg::shared());
        reg
    }

    /// Gemma 3 270M (`TESSERA_GEMMA_GGUF`) or a tiny model that the integration tests write
    /// to `target/models`.
    fn model(name: &str) -> Arc<Model> {
        let path = match std::env::var_os("TESSERA_GEMMA_GGUF") {
            Some(p) if name == "gemma3-270m-q4_k_m" => PathBuf::from(p),
            _ => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/models")
                .join(format!("{name}.gguf")),
        };
        assert!(
            path.exists(),
            "{} is missing: set TESSERA_GEMMA_GGUF for Gemma 3 270M; the integration tests \
             (cargo test -p tessera-llm --test shift) write the tiny models there",
            path.display()
        );
        Arc::new(Model::load(&path, &registry(), &DeviceChoice::Auto, &mut |_| true).unwrap())
    }

    fn context(m: &Arc<Model>, n_ctx: usize, n_batch: usize) -> Context {
        let opts = ContextOptions { n_ctx, n_batch, threads: Some(2), ..Default::default() };
        Context::new(m.clone(), &registry(), &opts).unwrap()
    }

    /// `n` tokens of an English text (BOS first).
    fn tokens(m: &Model, n: usize) -> Vec<u32> {
        let text = "The lighthouse keeper climbed the stairs every evening, counting the steps \
                    aloud, while the ships far out at sea waited for the beam to sweep across \
                    the water and show them the rocks near the harbour entrance. ";
        let t = m.tokenizer().encode(&text.repeat(24), true, false);
        assert!(t.len() >= n);
        t[..n].to_vec()
    }

    /// Attention layer `il`'s K and V rows of `positions`, as F32.
    fn rows(ctx: &mut Context, il: usize, positions: &[usize]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let cache = ctx.session_parts().1;
        let (kb, vb) = cache.row_bytes(il).unwrap();
        let mut out = Vec::new();
        cache.read_rows(il, positions, &mut out).unwrap();
        let halves = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
        };
        let (k, v) = out.split_at(kb * positions.len());
        (k.chunks(kb).map(halves).collect(), v.chunks(vb).map(halves).collect())
    }

    /// One key row (every KV head) of layer `il` rotated by `delta` positions, in f64, from
    /// the RoPE definition (pairs `(i, i + n/2)` in NeoX mode, `(2i, 2i + 1)` otherwise), with
    /// the magnitude `|x| + |y|` of the pair each value comes from.
    fn rotate(m: &Model, il: usize, row: &[f32], delta: i64) -> Vec<(f64, f64)> {
        let hp = m.hparams();
        assert!(hp.rope_scaling != RopeScaling::Yarn && m.tensors().rope_freqs.is_none());
        let (base, scale) = hp.rope_freqs(il);
        let (n, hd) = (hp.n_rot, hp.head_dim_k);
        let mut out: Vec<(f64, f64)> =
            row.iter().map(|&x| (f64::from(x), f64::from(x).abs())).collect();
        for h in 0..hp.n_head_kv {
            for i in 0..n / 2 {
                let theta = f64::from(scale)
                    * delta as f64
                    * f64::from(base).powf(-2.0 * i as f64 / n as f64);
                let (a, b) = if hp.rope_mode == ROPE_MODE_NEOX {
                    (h * hd + i, h * hd + i + n / 2)
                } else {
                    (h * hd + 2 * i, h * hd + 2 * i + 1)
                };
                let (x, y) = (f64::from(row[a]), f64::from(row[b]));
                let mag = x.abs() + y.abs();
                out[a] = (x * theta.cos() - y * theta.sin(), mag);
                out[b] = (x * theta.sin() + y * theta.cos(), mag);
            }
        }
        out
    }

    /// How far a rotated F16 key is from the f64 rotation, in F16 steps at the reference;
    /// the F32 arithmetic's error (a few F32 roundings of the pair's magnitude, which matter
    /// where the result is much smaller than its pair) is allowed besides. Rounded to the
    /// nearest F16 that is at most half a step (the tests allow 0.6).
    fn steps_off(got: f32, (want, mag): (f64, f64)) -> f64 {
        let step = if want.abs() < 2f64.powi(-14) {
            2f64.powi(-24)
        } else {
            2f64.powi(want.abs().log2().floor() as i32 - 10)
        };
        let off = ((f64::from(got) - want).abs() - 2f64.powi(-21) * mag).max(0.0);
        off / step
    }

    fn attention_layers(m: &Model) -> Vec<usize> {
        (0..m.hparams().n_layer).filter(|&il| !m.hparams().is_recurrent(il)).collect()
    }

    /// Discarding positions 5..17 of 40: the prefix's rows untouched, V rows moved bit for
    /// bit, each moved key the f64 rotation of the old key by -12 rounded to F16
    /// ([`steps_off`]).
    fn check_rows_after_shift(name: &str) {
        let m = model(name);
        let mut ctx = context(&m, 64, 64);
        let t = tokens(&m, 40);
        ctx.decode(&t, Rows::Last).unwrap();
        let all: Vec<usize> = (0..40).collect();
        let before: Vec<_> =
            attention_layers(&m).iter().map(|&il| rows(&mut ctx, il, &all)).collect();
        ctx.shift(5, 12).unwrap();
        assert_eq!(ctx.n_past(), 28);
        assert_eq!(ctx.history(), [&t[..5], &t[17..]].concat().as_slice());
        let kept: Vec<usize> = (0..28).collect();
        let mut worst = 0f64;
        for (li, &il) in attention_layers(&m).iter().enumerate() {
            let (k, v) = rows(&mut ctx, il, &kept);
            let (k0, v0) = &before[li];
            for p in 0..5 {
                assert_eq!(k[p], k0[p], "{name} layer {il}: kept key {p} changed");
                assert_eq!(v[p], v0[p], "{name} layer {il}: kept value {p} changed");
            }
            for p in 5..28 {
                assert_eq!(v[p], v0[p + 12], "{name} layer {il}: value {p} not moved");
                let want = rotate(&m, il, &k0[p + 12], -12);
                for (i, (&got, &w)) in k[p].iter().zip(&want).enumerate() {
                    let d = steps_off(got, w);
                    assert!(
                        d <= 0.6,
                        "{name} layer {il} key {p}[{i}]: {got} vs f64 {w:?} ({d} F16 steps)"
                    );
                    worst = worst.max(d);
                }
            }
        }
        eprintln!("{name}: moved keys within {worst} F16 step(s) of the f64 rotation");
    }

    #[test]
    fn shifted_keys_are_the_f64_rotation_gemma3() {
        check_rows_after_shift("gemma3-270m-q4_k_m");
    }

    #[test]
    fn shifted_keys_are_the_f64_rotation_llama() {
        check_rows_after_shift("tiny-llama");
    }

    /// A sliding-window ring smaller than the context (768 cells of 1024, Gemma 3's window
    /// 512): after 800 positions it holds 32..800, cell `p mod 768`; discarding 4..304 moves
    /// 304..800 to 4..500, across the ring's wrap. Each ring layer then holds exactly those
    /// positions, each moved key the f64 rotation of the old one, each value the old one.
    #[test]
    fn a_sliding_window_ring_shifts_across_its_wrap() {
        let m = model("gemma3-270m-q4_k_m");
        let t = tokens(&m, 800);
        let mut ctx = context(&m, 1024, 256);
        ctx.decode(&t, Rows::Last).unwrap();
        let ring: Vec<usize> =
            attention_layers(&m).into_iter().filter(|&il| m.hparams().is_swa(il)).collect();
        assert!(!ring.is_empty());
        let kind = ctx.session_parts().1.layer(ring[0]).unwrap().kind;
        let (held, size) = {
            let cache = ctx.session_parts().1;
            (cache.held_positions(kind), cache.kind_size(kind))
        };
        assert_eq!((held[0], held.len(), size), (32, 768, 768));
        let before: Vec<_> = ring.iter().map(|&il| rows(&mut ctx, il, &held)).collect();
        ctx.shift(4, 300).unwrap();
        let after = ctx.session_parts().1.held_positions(kind);
        assert_eq!(after, (4..500).collect::<Vec<_>>());
        let mut worst = 0f64;
        for (li, &il) in ring.iter().enumerate() {
            let (k, v) = rows(&mut ctx, il, &after);
            let (k0, v0) = &before[li];
            for (i, &p) in after.iter().enumerate() {
                let old = held.iter().position(|&q| q == p + 300).unwrap();
                assert_eq!(v[i], v0[old], "layer {il}: value at {p}");
                let want = rotate(&m, il, &k0[old], -300);
                for (&got, &w) in k[i].iter().zip(&want) {
                    let d = steps_off(got, w);
                    assert!(d <= 0.6, "layer {il} key at {p}: {got} vs f64 {w:?} ({d} steps)");
                    worst = worst.max(d);
                }
            }
        }
        eprintln!("ring layers: moved keys within {worst} F16 step(s) of the f64 rotation");
        // And decoding goes on from 500.
        let out = ctx.decode(&t[..1], Rows::Last).unwrap();
        assert_eq!(out.positions, vec![500]);
    }

    /// Layer 0's keys and values depend only on each token and its position: after a shift
    /// they equal a fresh computation of the kept tokens at their new positions, within the
    /// second F16 rounding of the shifted keys.
    #[test]
    fn layer_zero_after_shift_equals_a_fresh_computation() {
        let m = model("gemma3-270m-q4_k_m");
        let t = tokens(&m, 48);
        let mut ctx = context(&m, 64, 64);
        ctx.decode(&t, Rows::Last).unwrap();
        ctx.shift(4, 20).unwrap();
        let kept = ctx.history().to_vec();
        let mut fresh = context(&m, 64, 64);
        fresh.decode(&kept, Rows::Last).unwrap();
        let positions: Vec<usize> = (0..kept.len()).collect();
        let (ks, vs) = rows(&mut ctx, 0, &positions);
        let (kf, vf) = rows(&mut fresh, 0, &positions);
        let hd = m.hparams().head_dim_k;
        let (mut worst_k, mut worst_v) = (0f32, 0f32);
        for p in 0..kept.len() {
            // Per head, relative to its largest key: a rotation mixes each pair, so its
            // rounding is relative to the pair's magnitude, not to each (possibly tiny) value.
            for (a, b) in ks[p].chunks(hd).zip(kf[p].chunks(hd)) {
                let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
                let d = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                worst_k = worst_k.max(d / scale);
            }
            worst_v = vs[p].iter().zip(&vf[p]).fold(worst_v, |m, (x, y)| m.max((x - y).abs()));
        }
        eprintln!(
            "layer 0 after a shift vs fresh: keys within {worst_k} of their head's largest \
             (F16 step 2^-10 = {}), values {worst_v}",
            2f32.powi(-10)
        );
        // The shifted key was rounded to F16 twice, the fresh one once: each rounding of a
        // value at most the head's largest is at most 2^-11 of it.
        assert!(worst_k <= 3.0 * 2f32.powi(-11), "keys {worst_k} from a fresh computation");
        assert_eq!(worst_v, 0.0, "values differ from a fresh computation");
    }

    /// Every cached position moved up by 30 (keys rotated by +30) and the next token decoded
    /// at 70: the logits of decoding it at 40 over the unmoved cache, since attention sees
    /// only position differences, within the second F16 rounding of every key.
    #[test]
    fn logits_after_moving_positions_equal_the_unmoved_ones() {
        let m = model("gemma3-270m-q4_k_m");
        let t = tokens(&m, 41);
        let (n, s) = (40usize, 30usize);
        let mut base = context(&m, 128, 64);
        base.decode(&t[..n], Rows::Last).unwrap();
        let want = base.decode(&t[n..], Rows::Last).unwrap();
        let mut moved = context(&m, 128, 64);
        moved.decode(&t[..n], Rows::Last).unwrap();
        let mv = crate::kv_cache::KindMoves {
            src: (0..n as i32).collect(),
            dst: (s as i32..(n + s) as i32).collect(),
            delta: vec![s as i32; n],
        };
        let kinds = moved.session_parts().1.n_kinds();
        moved.run_shift(&vec![mv; kinds]).unwrap();
        let (history, cache) = moved.session_parts();
        cache.set_held(n + s, &vec![(s..n + s).collect::<Vec<_>>(); kinds]);
        history.splice(0..0, vec![0; s]);
        let got = moved.decode(&t[n..], Rows::Last).unwrap();
        assert_eq!(got.positions, vec![n + s]);
        let (a, b) = (want.last(), got.last());
        let mut order: Vec<usize> = (0..a.len()).collect();
        order.sort_by(|&i, &j| a[j].total_cmp(&a[i]));
        let top: Vec<usize> = order[..40].to_vec();
        let diff = top.iter().map(|&i| (a[i] - b[i]).abs()).fold(0f32, f32::max);
        let spread = a[top[0]] - a[top[39]];
        eprintln!("moved by {s}: top-40 logits max abs diff {diff} (top-40 spread {spread})");
        // The same cache turned by +s and back (two more F16 roundings of every key,
        // positions as before): how far that rounding alone moves these logits.
        let mut turned = context(&m, 128, 64);
        turned.decode(&t[..n], Rows::Last).unwrap();
        for d in [s as i32, -(s as i32)] {
            let mv = crate::kv_cache::KindMoves {
                src: (0..n as i32).collect(),
                dst: (0..n as i32).collect(),
                delta: vec![d; n],
            };
            turned.run_shift(&vec![mv; kinds]).unwrap();
        }
        let r = turned.decode(&t[n..], Rows::Last).unwrap();
        let rounding = top.iter().map(|&i| (a[i] - r.last()[i]).abs()).fold(0f32, f32::max);
        eprintln!("turned there and back: {rounding}");
        let argmax = |l: &[f32]| (0..l.len()).fold(0, |m, i| if l[i] > l[m] { i } else { m });
        assert_eq!(argmax(a), argmax(b));
        // One more F16 rounding of every key moves these logits by up to about as much as
        // the two of turning the cache there and back: the tolerance (Gemma 3's logits move
        // by tenths under F16 rounding of its keys; a key rotated by a wrong angle moves them
        // by whole units).
        assert!(diff <= rounding, "top-40 logits {diff} apart (rounding alone: {rounding})");
    }
}
