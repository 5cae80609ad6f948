//! The embedding models against llama.cpp's recorded outputs (tests/fixtures/embed-*.json,
//! recorded by record_embed_models.py with llama-cpp-python 0.3.36, flash attention off, its
//! default): the random-weight tiny-bert (bge's layout: CLS pooling, and mean),
//! tiny-gemma-embedding (EmbeddingGemma's: mean pooling, and last, the dense head) and
//! tiny-bert-rerank (a BERT reranker: rank pooling through the classification head).
//!
//! For every recorded text the tokenizer gives llama.cpp's ids (for the reranker, the pair's
//! input as llama.cpp's server builds it), and then:
//!
//! - the embedding's distance from llama.cpp's (1 - cosine) is within 1.25 times the largest
//!   distance llama.cpp shows between its own embeddings with flash attention off and on (which
//!   rounds queries, keys and values to F16 and sums in F16), and the other pooling of the same
//!   states is farther;
//! - the cosine of each pair of sentences equals llama.cpp's to 1e-4;
//! - each rerank score is llama.cpp's within 1.25 times its own on / off spread, and the
//!   documents rank in its order.
//!
//! Each is checked twice: as Tessera computes, and with ggml's CPU GELU. llama.cpp's CPU backend
//! evaluates GELU (and GeGLU's) through a table indexed by the input rounded to F16, so its
//! activations are rounded to F16 twice where Tessera's are exact; on these models that alone
//! moves pair cosines by up to 7e-5, more than llama.cpp's flash attention on / off does. With
//! every GELU node's output rewritten to ggml's rounding (`ggml_cpu_gelu`, from the eval
//! callback) the rest is the same arithmetic as llama.cpp's (F32 matrices, whose activations
//! are not rounded): the pair cosines then differ from llama.cpp's by 1e-5 at most, and a wrong
//! norm, bias, mask, pooling or head (each moves them by 1e-2 or more) cannot hide in noise.

mod common;

use common::{fixture, ids, registry, tiny_model_of};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_core::sched::EvalCallback;
use tessera_core::tensor_data::{get_tensor_dense, set_tensor};
use tessera_core::{GluOp, Graph, Op, TensorId, UnaryOp};
use tessera_llm::{DeviceChoice, EmbedOptions, Embedder, Model, Pooling};

/// Margin over llama.cpp's own spread.
const MARGIN: f64 = 1.25;

/// The largest difference of a pair's cosine from llama.cpp's.
const PAIR_COSINE_TOL: f64 = 1e-4;

fn embedder(name: &str) -> (Embedder, Value) {
    let fx_name = format!("embed-{name}.json");
    let fx = fixture(&fx_name);
    let path = tiny_model_of(name, &fx_name);
    let reg = registry();
    let model = Arc::new(Model::load(path, &reg, &DeviceChoice::Auto, &mut |_| true).unwrap());
    let opts = EmbedOptions { n_ctx: 512, threads: Some(2) };
    (Embedder::new(model, &reg, &opts).unwrap(), fx)
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array().expect("numbers").iter().map(|x| x.as_f64().expect("a number")).collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// GELU as ggml's CPU backend evaluates it (`GGML_GELU_FP16`): 0 below -10, `x` above 10, else
/// the tanh approximation in f32 at `x` rounded to F16, rounded to F16.
fn ggml_cpu_gelu(x: f32) -> f32 {
    use half::f16;
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let r = f16::from_f32(x).to_f32();
    let y = 0.5 * r * (1.0 + (0.797_884_6_f32 * r * (1.0 + 0.044_715 * r * r)).tanh());
    f16::from_f32(y).to_f32()
}

fn read_f32(g: &Graph, id: TensorId) -> Vec<f32> {
    let bytes = get_tensor_dense(g, id).expect("a computed node reads back");
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// An eval callback that rewrites the output of every GELU and (two-operand) GeGLU node with
/// [`ggml_cpu_gelu`] of its input, kept when the node that computes the input ran (a GELU may
/// run in place over it).
fn ggml_gelu_callback() -> EvalCallback {
    let mut inputs: HashMap<TensorId, Vec<f32>> = HashMap::new();
    Box::new(move |g, id| {
        let reads_id = |n: &TensorId| {
            let t = g.tensor(*n);
            t.src.contains(&id)
                && matches!(t.op, Op::Unary(UnaryOp::Gelu) | Op::Glu { op: GluOp::Geglu, .. })
        };
        if g.nodes().iter().any(reads_id) {
            inputs.insert(id, read_f32(g, id));
        }
        let t = g.tensor(id);
        let out: Option<Vec<f32>> = match (&t.op, t.src.as_slice()) {
            (Op::Unary(UnaryOp::Gelu), [x]) => {
                Some(inputs[x].iter().map(|&v| ggml_cpu_gelu(v)).collect())
            }
            (Op::Glu { op: GluOp::Geglu, .. }, [a, b]) => Some(
                inputs[a].iter().zip(&inputs[b]).map(|(&x, &y)| ggml_cpu_gelu(x) * y).collect(),
            ),
            (Op::Unary(UnaryOp::Gelu) | Op::Glu { op: GluOp::Geglu, .. }, _) => {
                panic!("a GELU node of an unexpected form")
            }
            _ => None,
        };
        if let Some(out) = out {
            let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
            set_tensor(g, id, &bytes).expect("a GELU output is written");
        }
        true
    })
}

/// Compares the embeddings of every recorded text under each of `poolings` (the model's own
/// first) and the cosines of the recorded pairs, as Tessera computes and with ggml's GELU.
fn check_embeddings(name: &str, poolings: &[(&str, Pooling)]) {
    let (mut e, fx) = embedder(name);
    assert_eq!(e.default_pooling(), poolings[0].1, "{name}: the pooling its metadata names");
    let pairs: Vec<(usize, usize)> = fx["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_u64().unwrap() as usize))
        .collect();
    for ggml_gelu in [false, true] {
        e.set_eval_callback(ggml_gelu.then(ggml_gelu_callback));
        let mode = if ggml_gelu { "ggml's GELU" } else { "exact GELU" };
        for (i, &(pname, pooling)) in poolings.iter().enumerate() {
            let other = poolings[(i + 1) % poolings.len()].1;
            let rec = &fx["pooling"][pname];
            let runs = rec["runs"].as_array().unwrap();
            let floor = runs
                .iter()
                .map(|r| 1.0 - r["cosine_fa_on_off"].as_f64().unwrap())
                .fold(0.0, f64::max);
            let allowed = MARGIN * floor;
            let (mut ours, mut off, mut on) = (Vec::new(), Vec::new(), Vec::new());
            for run in runs {
                let text = run["text"].as_str().unwrap();
                let what = format!("{name} {pname} ({mode}) {text:?}");
                let tokens = e.tokens(text);
                assert_eq!(tokens, ids(&run["ids"]), "{what}: ids");
                let want = f64s(&run["embedding"]);
                let got = e.embed(&tokens, pooling).unwrap();
                let norm = got.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
                assert!((norm - 1.0).abs() < 1e-5, "{what}: norm {norm}");
                let d = 1.0 - cosine(&widen(&got), &want);
                eprintln!("{what}: 1 - cosine {d:.2e} (allowed {allowed:.2e})");
                assert!(d <= allowed, "{what}: 1 - cosine {d} with llama.cpp's, allowed {allowed}");
                let wrong = e.embed(&tokens, other).unwrap();
                let dw = 1.0 - cosine(&widen(&wrong), &want);
                assert!(dw > allowed, "{what}: {other:?} pooling passes too ({dw})");
                ours.push(widen(&got));
                off.push(want);
                on.push(f64s(&run["embedding_fa_on"]));
            }
            // llama.cpp's own spread of the pair cosines, flash attention off vs on.
            let spread = pairs
                .iter()
                .map(|&(a, b)| (cosine(&off[a], &off[b]) - cosine(&on[a], &on[b])).abs())
                .fold(0.0, f64::max);
            let tol = PAIR_COSINE_TOL;
            let want_pairs = f64s(&rec["pair_cosines"]);
            for (&(a, b), want) in pairs.iter().zip(want_pairs) {
                let got = cosine(&ours[a], &ours[b]);
                let d = (got - want).abs();
                eprintln!(
                    "{name} {pname} ({mode}) pair ({a}, {b}): cosine {got:.6}, llama.cpp {want:.6}, \
                     |diff| {d:.2e} (allowed {tol:.1e}; llama.cpp on / off {spread:.2e})"
                );
                assert!(
                    d <= tol,
                    "{name} {pname} ({mode}) pair ({a}, {b}): cosine {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn tiny_bert_embeddings_match_llama_cpp() {
    check_embeddings("tiny-bert", &[("cls", Pooling::First), ("mean", Pooling::Mean)]);
}

#[test]
fn tiny_gemma_embedding_embeddings_match_llama_cpp() {
    check_embeddings("tiny-gemma-embedding", &[("mean", Pooling::Mean), ("last", Pooling::Last)]);
}

#[test]
fn tiny_bert_rerank_scores_match_llama_cpp() {
    let (mut e, fx) = embedder("tiny-bert-rerank");
    assert_eq!(e.default_pooling(), Pooling::Rank);
    let query = fx["query"].as_str().unwrap();
    let docs = fx["documents"].as_array().unwrap();
    let texts: Vec<&str> = docs.iter().map(|d| d["document"].as_str().unwrap()).collect();
    let spread = docs
        .iter()
        .map(|d| (d["score"].as_f64().unwrap() - d["score_fa_on"].as_f64().unwrap()).abs())
        .fold(0.0, f64::max);
    for (d, text) in docs.iter().zip(&texts) {
        assert_eq!(e.rerank_tokens(query, text), ids(&d["ids"]), "{text:?}: the pair's ids");
    }
    for ggml_gelu in [false, true] {
        e.set_eval_callback(ggml_gelu.then(ggml_gelu_callback));
        let mode = if ggml_gelu { "ggml's GELU" } else { "exact GELU" };
        let scores = e.rerank(query, &texts).unwrap();
        for ((d, text), &got) in docs.iter().zip(&texts).zip(&scores) {
            let want = d["score"].as_f64().unwrap();
            let diff = (f64::from(got) - want).abs();
            eprintln!(
                "{text:?} ({mode}): score {got:.5}, llama.cpp {want:.5}, |diff| {diff:.1e} \
                 (llama.cpp on / off {spread:.1e})"
            );
            assert!(diff <= MARGIN * spread, "{text:?} ({mode}): score {got} vs {want}");
        }
        // The ranking, wherever llama.cpp's own spread cannot swap two documents.
        for i in 0..docs.len() {
            for j in 0..docs.len() {
                let (wi, wj) =
                    (docs[i]["score"].as_f64().unwrap(), docs[j]["score"].as_f64().unwrap());
                if wi - wj > 2.0 * MARGIN * spread {
                    assert!(scores[i] > scores[j], "{:?} ranks below {:?}", texts[i], texts[j]);
                }
            }
        }
    }
}

/// Bad input to embedding models gets typed errors.
#[test]
fn embedding_models_refuse_bad_input() {
    use common::{load_bytes, patch};
    use tessera_llm::{Context, ContextOptions, LlmError};
    let (mut e, _) = embedder("tiny-bert");
    let model = e.model().clone();
    let reg = registry();
    let copts =
        ContextOptions { n_ctx: 64, n_batch: 64, threads: Some(1), ..ContextOptions::default() };
    let err = Context::new(model.clone(), &reg, &copts).err().expect("no context for bert");
    assert!(matches!(&err, LlmError::InvalidArgument(m) if m.contains("embedding model")), "{err}");
    assert!(matches!(e.embed(&[], Pooling::Mean), Err(LlmError::EmptyInput(_))));
    let n_vocab = model.hparams().n_vocab as u32;
    assert!(matches!(
        e.embed(&[101, n_vocab], Pooling::Mean),
        Err(LlmError::TokenOutOfRange { id, .. }) if id == n_vocab
    ));
    assert!(matches!(e.embed(&[101, 102], Pooling::Rank), Err(LlmError::InvalidArgument(_))));
    let err = e.rerank("q", &["d"]).unwrap_err();
    assert!(matches!(&err, LlmError::InvalidArgument(m) if m.contains("not a reranker")), "{err}");
    // A text longer than the embedder's n_ctx, and an n_ctx beyond the 512 positions.
    let short = EmbedOptions { n_ctx: 4, threads: Some(1) };
    let mut small = Embedder::new(model.clone(), &reg, &short).unwrap();
    assert!(matches!(
        small.embed(&[101, 7592, 2088, 999, 102], Pooling::First),
        Err(LlmError::ContextFull { needed: 5, n_ctx: 4, .. })
    ));
    for n_ctx in [0, 513] {
        let opts = EmbedOptions { n_ctx, threads: Some(1) };
        assert!(matches!(
            Embedder::new(model.clone(), &reg, &opts),
            Err(LlmError::InvalidArgument(_))
        ));
    }

    // Metadata: a pooling type llama.cpp does not have; no token-type count.
    let bytes = std::fs::read(tiny_model_of("tiny-bert", "embed-tiny-bert.json")).unwrap();
    let mut bad = bytes.clone();
    let key = b"bert.pooling_type";
    let mut from = key.to_vec();
    from.extend_from_slice(&[4, 0, 0, 0, 2, 0, 0, 0]); // UINT32 2 (CLS)
    let mut to = key.to_vec();
    to.extend_from_slice(&[4, 0, 0, 0, 9, 0, 0, 0]);
    patch(&mut bad, &from, &to);
    let err = load_bytes(bad).err().expect("pooling type 9 is refused");
    assert!(
        matches!(&err, LlmError::BadHyperParameter { key, .. } if key == "bert.pooling_type"),
        "{err}"
    );
    let mut bad = bytes;
    patch(&mut bad, b"tokenizer.ggml.token_type_count", b"tokenizer.ggml.token_type_cXunt");
    let err = load_bytes(bad).err().expect("a BERT model without token types is refused");
    assert!(matches!(&err, LlmError::BadHyperParameter { .. }), "{err}");
}
