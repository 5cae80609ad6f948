//! The ops of LFM2's and Qwen 3.5's recurrent layers on the GPU against the reference: CONCAT
//! (the convolution state before a batch's inputs), SSM_CONV (the short convolution, fed a
//! transposed view as their graphs do) and GATED_DELTA_NET (the delta rule, with q / k / v as
//! views of one convolution output, a decay per head or per key dim, several sequences).

use crate::common::{check, gpu};
use crate::{case, TOL};
use tessera_core::{DType, Graph};

#[test]
fn concat_matches_the_reference() {
    let Some(dev) = gpu() else { return };
    for dim in 0..4 {
        let mut g = Graph::new();
        let mut nb = [5, 3, 2, 2];
        nb[dim] = 4;
        let a = g.input("a", DType::F32, &[5, 3, 2, 2]).unwrap();
        let b = g.input("b", DType::F32, &nb).unwrap();
        let c = g.concat(a, b, dim).unwrap();
        check(&dev, &case(format!("concat F32 dim {dim}"), g, c, 0.0));
    }
    // LFM2's state join: the carried-over columns and a transposed batch (any strides).
    let mut g = Graph::new();
    let state = g.input("state", DType::F32, &[2, 24]).unwrap();
    let x = g.input("x", DType::F32, &[24, 5]).unwrap();
    let xt = g.transpose(x).unwrap();
    let c = g.concat(state, xt, 0).unwrap();
    check(&dev, &case("concat F32 state + transposed batch", g, c, 0.0));
    // 16-bit elements: odd row lengths, so that values share words across the operands.
    for t in [DType::F16, DType::BF16] {
        let mut g = Graph::new();
        let a = g.input("a", t, &[3, 5]).unwrap();
        let b = g.input("b", t, &[7, 5]).unwrap();
        let c = g.concat(a, b, 0).unwrap();
        // Bit copies: compared byte for byte.
        let k = case(format!("concat {t} dim 0"), g, c, 0.0);
        let mut rng = crate::common::Rng::new(3);
        let inputs = vec![
            (a, crate::common::random_bytes(&mut rng, t, 15)),
            (b, crate::common::random_bytes(&mut rng, t, 35)),
        ];
        let got = crate::common::run_gpu(&dev, &k, &inputs).unwrap();
        let want = crate::common::run_reference(&k, &inputs).unwrap();
        assert_eq!(got, want, "concat {t}");
        eprintln!("concat {t} dim 0: {} bytes as the reference's", got.len());
    }
}

#[test]
fn ssm_conv_matches_the_reference() {
    let Some(dev) = gpu() else { return };
    for (d_conv, n_t, n_s) in [(3, 1, 1), (3, 7, 2), (4, 2, 1), (4, 65, 1)] {
        let d_inner = 40;
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[d_inner, d_conv - 1 + n_t, n_s]).unwrap();
        let w = g.input("w", DType::F32, &[d_conv, d_inner]).unwrap();
        let sx = g.transpose(x).unwrap();
        let c = g.ssm_conv(sx, w).unwrap();
        check(
            &dev,
            &case(format!("ssm_conv d_conv {d_conv}, {n_t} tokens, {n_s} seqs"), g, c, TOL),
        );
    }
}

#[test]
fn gated_delta_net_matches_the_reference() {
    let Some(dev) = gpu() else { return };
    for (s, hk, hv, n_t, n_s, per_dim) in [
        (16, 2, 4, 1, 1, false),
        (16, 2, 4, 5, 1, false),
        (32, 1, 2, 3, 2, true),
        (128, 2, 2, 2, 1, false),
    ] {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[2 * s * hk + s * hv, n_t, n_s]).unwrap();
        let (row, seq) = (g.tensor(x).nb()[1], g.tensor(x).nb()[2]);
        let q = g.view(x, &[s, hk, n_t, n_s], &[s * 4, row, seq], 0).unwrap();
        let k = g.view(x, &[s, hk, n_t, n_s], &[s * 4, row, seq], s * hk * 4).unwrap();
        let v = g.view(x, &[s, hv, n_t, n_s], &[s * 4, row, seq], 2 * s * hk * 4).unwrap();
        let decay = g.input("g", DType::F32, &[if per_dim { s } else { 1 }, hv, n_t, n_s]).unwrap();
        let beta = g.input("beta", DType::F32, &[1, hv, n_t, n_s]).unwrap();
        let state = g.input("state", DType::F32, &[s, s, hv, n_s]).unwrap();
        let o = g.gated_delta_net(q, k, v, decay, beta, state).unwrap();
        let name = format!(
            "gated_delta_net S {s}, heads {hk}/{hv}, {n_t} tokens, {n_s} seqs, per-dim decay \
             {per_dim}"
        );
        check(&dev, &case(name, g, o, TOL));
    }
}
