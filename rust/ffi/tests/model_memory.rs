//! Loading and releasing a model many times does not grow resident memory (issue 15): 20 cycles
//! of load, a short generation and close of Gemma 3 270M. Its own test binary, so that no other
//! test's memory is counted.

use tessera_ffi::{GenerateRequest, Model, ModelOptions};

/// Resident memory in bytes (Linux).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    statm.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4096
}

#[test]
fn twenty_load_release_cycles_keep_resident_memory_flat() {
    let path = std::env::var("TESSERA_GEMMA_GGUF")
        .expect("set TESSERA_GEMMA_GGUF to the Gemma 3 270M Q4_K_M file (see scripts/setup.sh)");
    let opts = ModelOptions {
        device: "CPU".into(),
        threads: Some(1),
        n_ctx: Some(256),
        n_batch: 64,
        ..ModelOptions::default()
    };
    let request = GenerateRequest {
        prompt: Some("Hello".into()),
        messages: None,
        max_tokens: 4,
        stop: vec![],
        temperature: 0.0,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        typical_p: 1.0,
        repeat_penalty: 1.0,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        penalty_last_n: 64,
        logit_bias: vec![],
        seed: None,
        ignore_eos: false,
        ..GenerateRequest::default()
    };
    let mut after = Vec::new();
    for _ in 0..20 {
        let m = Model::load(path.clone(), opts.clone(), None).unwrap();
        let loaded = resident();
        let g = m.generate(request.clone(), None).unwrap();
        assert_eq!(g.tokens.len(), 4);
        m.close();
        drop(m);
        after.push((loaded, resident()));
    }
    // The first cycles warm the allocator and the page cache's mapping; compare cycle 3 with 20.
    let growth = after[19].1 as f64 - after[2].1 as f64;
    eprintln!(
        "resident after loading {:.0} MB, after releasing: cycle 3 {:.1} MB, cycle 20 {:.1} MB (growth {:.2} MB)",
        after[19].0 as f64 / 1e6,
        after[2].1 as f64 / 1e6,
        after[19].1 as f64 / 1e6,
        growth / 1e6
    );
    assert!(growth < 4e6, "resident memory grew by {:.1} MB over 17 cycles", growth / 1e6);
    // Releasing gives the model's memory back (a loaded model holds hundreds of MB).
    assert!(after[19].0 > after[19].1 + 100_000_000, "{after:?}");
}
