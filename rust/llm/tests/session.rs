//! Session files (`Context::save_session` / `load_session`):
//! - a round trip gives bit-identical next-token logits, and the same logits token after token,
//!   on Gemma 3 270M (global and sliding-window caches), on the same model with a window of 32
//!   (the ring wrapped; loaded into a smaller ring too), on tiny-qwen3 and on tiny-lfm2 (recurrent
//!   states and their checkpoints);
//! - a session of another model (another architecture, or the same one with other metadata), a
//!   truncated file, a flipped byte, a wrong magic or version, too many tokens for the context,
//!   and a payload whose checksum matches but whose counts lie: each a typed error, the context
//!   left empty and usable.

mod common;

use common::{context, gemma_path, load, load_bytes, max_diff, patch, tiny_model};
use std::path::PathBuf;
use std::sync::Arc;
use tessera_core::DType;
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::session_file::SessionError;
use tessera_llm::{Context, ContextOptions, LlmError, Model, Rows};

const TEXT: &str = "Once upon a time, in a small village by the sea, there lived an old fisherman \
                    who went out every morning before dawn. His nets were old, his boat was older, \
                    and the gulls that followed him knew every one of his songs.";

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-session-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn last(ctx: &mut Context, tokens: &[u32]) -> Vec<f32> {
    ctx.decode(tokens, Rows::Last).unwrap().last().to_vec()
}

/// `n` tokens of the story, repeated as needed.
fn tokens(model: &Model, n: usize) -> Vec<u32> {
    let tok = model.tokenizer();
    let mut ids = tok.encode(TEXT, true, true);
    let more = tok.encode(TEXT, false, true);
    while ids.len() < n {
        ids.extend_from_slice(&more);
    }
    ids.truncate(n);
    ids
}

/// Saves after `prompt` (decoded in two calls) and checks that a fresh context of `load_opts`
/// that loads the file computes the logits of the next 3 tokens as the saving context does
/// (`tol` 0: bit for bit).
fn round_trip(
    model: &Arc<Model>,
    name: &str,
    prompt: &[u32],
    save_opts: (usize, usize),
    load_opts: (usize, usize),
    tol: f32,
) {
    let path = tmp(&format!("{name}.session"));
    let mut a = context(model, save_opts.0, save_opts.1);
    let half = prompt.len() / 2;
    a.decode(&prompt[..half], Rows::Last).unwrap();
    a.decode(&prompt[half..], Rows::Last).unwrap();
    a.save_session(&path).unwrap();
    let mut b = context(model, load_opts.0, load_opts.1);
    b.decode(&prompt[..3], Rows::Last).unwrap(); // forgotten by the load
    assert_eq!(b.load_session(&path).unwrap(), prompt.len(), "{name}");
    assert_eq!(b.n_past(), prompt.len(), "{name}");
    assert_eq!(b.history(), a.history(), "{name}");
    assert_eq!(b.checkpoints(), a.checkpoints(), "{name}: recurrent checkpoints");
    let mut next = prompt[1];
    for step in 0..3 {
        let (la, lb) = (last(&mut a, &[next]), last(&mut b, &[next]));
        if tol == 0.0 {
            assert!(
                la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name}: step {step}: logits differ by {}",
                max_diff(&la, &lb)
            );
        } else {
            let d = max_diff(&la, &lb);
            assert!(d <= tol, "{name}: step {step}: logits differ by {d}");
        }
        next = common::argmax(&la) as u32;
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn round_trip_gives_identical_logits() {
    let gemma = load(&gemma_path());
    round_trip(&gemma, "gemma3", &tokens(&gemma, 120), (512, 64), (512, 64), 0.0);
    for name in ["tiny-qwen3", "tiny-lfm2"] {
        let model = load(&tiny_model(name));
        round_trip(&model, name, &tokens(&model, 100), (256, 512), (256, 512), 0.0);
        // Another context size and batch (the same cells: the global cache by position).
        round_trip(&model, name, &tokens(&model, 100), (256, 512), (128, 16), 0.0);
    }
}

/// Gemma 3 270M with a sliding window of 32: a ring of 256 cells (window + batch, rounded up to
/// 256) that 300 tokens wrap.
fn gemma_window_32() -> Arc<Model> {
    let mut bytes = std::fs::read(gemma_path()).unwrap();
    let key = b"gemma3.attention.sliding_window";
    let mut from = key.to_vec();
    from.extend_from_slice(&4u32.to_le_bytes()); // GGUF type u32
    from.extend_from_slice(&512u32.to_le_bytes());
    let mut to = key.to_vec();
    to.extend_from_slice(&4u32.to_le_bytes());
    to.extend_from_slice(&32u32.to_le_bytes());
    patch(&mut bytes, &from, &to);
    let model = Arc::new(load_bytes(bytes).unwrap());
    assert_eq!(model.hparams().n_swa, 32);
    model
}

#[test]
fn round_trip_of_a_wrapped_sliding_window_ring() {
    let model = gemma_window_32();
    let prompt = tokens(&model, 300);
    round_trip(&model, "gemma3-swa32", &prompt, (512, 64), (512, 64), 0.0);
    // Saved from a ring of 512 cells (32 + 320 rounded up), loaded into one of 256: the newest
    // 256 positions are kept, more than the window needs. The same keys and values in other
    // cells: the attention sums in another order, so the logits agree to F32 rounding (their
    // spread is about 3; a key lost or misplaced moves them by tenths to units).
    round_trip(&model, "gemma3-swa32-smaller-ring", &prompt, (512, 320), (512, 64), 1e-3);
}

fn expect_err(r: Result<usize, LlmError>, what: &str) -> SessionError {
    match r {
        Err(LlmError::Session(e)) => e,
        other => panic!("{what}: expected a session error, got {other:?}"),
    }
}

/// After a failed load the context is empty and computes what a fresh one does.
fn assert_empty_and_usable(ctx: &mut Context, model: &Arc<Model>, what: &str) {
    assert_eq!(ctx.n_past(), 0, "{what}");
    assert!(ctx.history().is_empty(), "{what}");
    let p = tokens(model, 10);
    let fresh = last(&mut context(model, 256, 512), &p);
    assert_eq!(last(ctx, &p), fresh, "{what}: decoding after the failed load");
}

#[test]
fn bad_session_files_are_typed_errors() {
    let qwen = load(&tiny_model("tiny-qwen3"));
    let path = tmp("qwen.session");
    let mut ctx = context(&qwen, 256, 512);
    ctx.decode(&tokens(&qwen, 60), Rows::Last).unwrap();
    ctx.save_session(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let bad = tmp("bad.session");
    let try_load = |bytes: &[u8], ctx: &mut Context| {
        std::fs::write(&bad, bytes).unwrap();
        ctx.load_session(&bad)
    };
    let mut ctx = context(&qwen, 256, 512);

    // Another architecture.
    let llama = load(&tiny_model("tiny-llama"));
    let mut other = context(&llama, 256, 512);
    let e = expect_err(other.load_session(&path), "tiny-llama");
    assert!(matches!(e, SessionError::OtherModel(ref m) if m.contains("architecture")), "{e}");
    assert_empty_and_usable(&mut other, &llama, "another architecture");

    // The same architecture and shapes, another file (one metadata value changed).
    let mut bytes = std::fs::read(tiny_model("tiny-qwen3")).unwrap();
    patch(&mut bytes, b"general.name", b"general.nbme");
    let edited = Arc::new(load_bytes(bytes).unwrap());
    let mut other = context(&edited, 256, 512);
    let e = expect_err(other.load_session(&path), "an edited model file");
    assert!(matches!(e, SessionError::OtherModel(ref m) if m.contains("header hash")), "{e}");

    // Truncated: by one byte, to half, into the header.
    for len in [good.len() - 1, good.len() / 2, 20] {
        let e = expect_err(try_load(&good[..len], &mut ctx), "truncated");
        assert!(matches!(e, SessionError::Truncated { .. }), "{len} bytes: {e}");
        assert_empty_and_usable(&mut ctx, &qwen, "truncated");
    }
    // A flipped byte of the payload: in the tokens, in the cache's rows, in the last byte.
    for at in [80, good.len() / 2, good.len() - 1] {
        let mut b = good.clone();
        b[at] ^= 0x10;
        let e = expect_err(try_load(&b, &mut ctx), "flipped byte");
        assert!(matches!(e, SessionError::Checksum { .. }), "byte {at}: {e}");
        assert_empty_and_usable(&mut ctx, &qwen, "flipped byte");
    }
    // Not a session; another version.
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(expect_err(try_load(&b, &mut ctx), "magic"), SessionError::NotASession));
    let mut b = good.clone();
    b[8] = 1;
    let e = expect_err(try_load(&b, &mut ctx), "version");
    assert!(matches!(e, SessionError::Version { found: 1, supported: 2 }), "{e}");
    assert!(matches!(expect_err(try_load(b"", &mut ctx), "empty"), SessionError::NotASession));

    // More tokens than the context holds.
    let mut small = context(&qwen, 32, 512);
    let e = expect_err(small.load_session(&path), "a small context");
    assert!(matches!(e, SessionError::TooLong { n_tokens: 60, n_ctx: 32 }), "{e}");
    // A file larger than any session of the context is not read.
    let mut big = good.clone();
    big.resize(8 << 20, 0);
    let e = expect_err(try_load(&big, &mut ctx), "a huge file");
    assert!(matches!(e, SessionError::TooLarge { .. }), "{e}");

    // A payload whose checksum matches but whose counts lie: the positions of the global cache
    // claimed to be 2^32 - 1 (checked against the bytes left, never allocated).
    let header = 32;
    let arch_len = u32::from_le_bytes(good[header + 16..header + 20].try_into().unwrap()) as usize;
    let tokens_at = header + 16 + 4 + arch_len + 5 * 4 + 8;
    let kind_count_at = tokens_at + 60 * 4 + 8 + 4 + 4;
    let mut b = good.clone();
    b[kind_count_at..kind_count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&b[header..]);
    b[24..32].copy_from_slice(&sum.to_le_bytes());
    let e = expect_err(try_load(&b, &mut ctx), "a lying count");
    assert!(matches!(e, SessionError::Malformed(ref m) if m.contains("holds")), "{e}");
    assert_empty_and_usable(&mut ctx, &qwen, "a lying count");

    // The good file still loads.
    assert_eq!(ctx.load_session(&path).unwrap(), 60);
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&bad).unwrap();
}

/// A context of Gemma 3 270M's 512 positions with a cache of `k` / `v` types.
fn typed_context(model: &Arc<Model>, k: DType, v: DType) -> Context {
    let cache_types = CacheTypes { k, v };
    let opts = ContextOptions { n_ctx: 512, n_batch: 64, threads: Some(2), cache_types };
    Context::new(model.clone(), &common::registry(), &opts).unwrap()
}

/// Quantized caches are saved as their blocks: a Q8_0 / Q4_0 session loads back bit for bit
/// into a context of the same cache types, and into one of other types is a typed error (the
/// context left empty).
#[test]
fn quantized_cache_sessions_round_trip_or_refuse() {
    let gemma = load(&gemma_path());
    let prompt = tokens(&gemma, 90);
    let path = tmp("gemma-q8-q4.session");
    let mut a = typed_context(&gemma, DType::Q8_0, DType::Q4_0);
    a.decode(&prompt, Rows::Last).unwrap();
    a.save_session(&path).unwrap();
    let mut b = typed_context(&gemma, DType::Q8_0, DType::Q4_0);
    assert_eq!(b.load_session(&path).unwrap(), prompt.len());
    let (la, lb) = (last(&mut a, &[prompt[1]]), last(&mut b, &[prompt[1]]));
    assert!(la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()), "Q8_0/Q4_0 round trip");
    for (k, v) in [(DType::F16, DType::F16), (DType::Q8_0, DType::Q8_0)] {
        let mut c = typed_context(&gemma, k, v);
        let e = expect_err(c.load_session(&path), "other cache types");
        assert!(
            matches!(
                e,
                SessionError::CacheTypes { ref saved_k, ref saved_v, .. }
                    if saved_k == "Q8_0" && saved_v == "Q4_0"
            ),
            "{e}"
        );
        assert_eq!(c.n_past(), 0);
    }
    std::fs::remove_file(&path).unwrap();
}
