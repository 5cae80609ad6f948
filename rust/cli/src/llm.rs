//! `tessera run MODEL -p TEXT [-n N]` streams a continuation; `tessera bench model MODEL -p PP
//! -n TG -t T,..` measures prompt and generation tokens per second as llama-bench does (random
//! token ids, the KV cache cleared per run, the median of the runs after a warm-up). For
//! instruction counts under an emulator (`scripts/arm-counts.sh model`) it takes `-p 0` / `-n 0`
//! (that test left out), `--no-warmup` and `--count-markers`.
//!
//! `bench model --json FILE` appends one JSON object per thread count with the keys `threads`,
//! `pp_tokens`, `tg_tokens`, `pp_tps`, `tg_tps` (and `pp_runs`, `tg_runs`, `device`, `tier`,
//! `model`), the interface of `shared/anchor/model_compare.py`.

use crate::bench::{Markers, MARK_START, MARK_STOP};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;
use tessera_core::registry::Registry;
use tessera_llm::chat::ChatMessage;
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::sampling::SamplingParams;
use tessera_llm::{
    generate, Context, ContextOptions, DeviceChoice, GenerateOptions, Model, Prompt, Rows,
};

/// Options shared by `run` and `bench model`.
#[derive(Debug)]
struct Common {
    model: String,
    device: DeviceChoice,
    threads: Vec<usize>,
    n_ctx: Option<usize>,
    n_batch: usize,
    /// `-ctk` / `-ctv`: the KV cache's key and value types.
    cache_types: CacheTypes,
}

/// Parses `-ctk` / `--cache-type-k` and `-ctv` / `--cache-type-v` at `args[i]` into `c`;
/// `Ok(false)` when `args[i]` is neither.
fn cache_type_arg(args: &[String], i: &mut usize, c: &mut Common) -> Result<bool, String> {
    let which = match args[*i].as_str() {
        "-ctk" | "--cache-type-k" => &mut c.cache_types.k,
        "-ctv" | "--cache-type-v" => &mut c.cache_types.v,
        _ => return Ok(false),
    };
    *which = CacheTypes::parse(value(args, i, "-ctk / -ctv")?).map_err(|e| e.to_string())?;
    Ok(true)
}

pub(crate) fn value<'a>(args: &'a [String], i: &mut usize, name: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i).map(String::as_str).ok_or_else(|| format!("{name} needs a value"))
}

pub(crate) fn number<T: std::str::FromStr>(s: &str, name: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{name}: {s:?} is not a valid number"))
}

fn thread_list(s: &str) -> Result<Vec<usize>, String> {
    let v: Vec<usize> =
        s.split(',').map(|t| number::<usize>(t.trim(), "-t")).collect::<Result<_, _>>()?;
    if v.is_empty() || v.contains(&0) {
        return Err(format!("-t: {s:?} must list thread counts of at least 1"));
    }
    Ok(v)
}

/// The process's resident memory in MB (Linux and Android; `None` elsewhere).
fn resident_mb() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / 1e6)
}

/// Loads the model, showing progress on stderr.
fn load(reg: &Registry, c: &Common) -> Result<Arc<Model>, String> {
    let t0 = Instant::now();
    let mut last = -1i32;
    let model = Model::load(&c.model, reg, &c.device, &mut |f| {
        let pct = (f * 100.0) as i32;
        if pct / 10 != last / 10 {
            eprint!("\rloading {}: {pct:3}%", c.model);
            last = pct;
        }
        true
    })
    .map_err(|e| format!("{}: {e}", c.model))?;
    let hp = model.hparams();
    eprintln!(
        "\rloaded {} in {:.2} s: {} {} layers, {:.1} M parameters, {:.1} MB of weights on {} \
         ({:.1} MB read in place from the file, {:.1} MB repacked or uploaded)",
        c.model,
        t0.elapsed().as_secs_f64(),
        hp.arch.name(),
        hp.n_layer,
        model.n_params() as f64 / 1e6,
        model.weight_bytes() as f64 / 1e6,
        model.device().name(),
        model.weights().mapped_bytes() as f64 / 1e6,
        model.weights().copied_bytes() as f64 / 1e6,
    );
    if let Some(mb) = resident_mb() {
        eprintln!("resident memory after loading: {mb:.0} MB");
    }
    Ok(Arc::new(model))
}

/// Loads `path` on `device` as `bench model` does (progress on stderr), for other benchmarks.
pub fn load_for_bench(
    reg: &Registry,
    path: &str,
    device: &DeviceChoice,
) -> Result<Arc<Model>, String> {
    let c = Common {
        model: path.to_string(),
        device: device.clone(),
        threads: vec![],
        n_ctx: None,
        n_batch: 512,
        cache_types: CacheTypes::default(),
    };
    load(reg, &c)
}

/// `tessera run MODEL -p TEXT [-n N] [--chat] [--temp T] [--top-k K] [--top-p P] [--seed S]
/// [-t THREADS] [--device D] [-c N_CTX] [-ctk TYPE] [-ctv TYPE]`: greedy by default.
pub fn run(reg: &Registry, args: &[String]) -> Result<(), String> {
    let mut c = Common {
        model: String::new(),
        device: DeviceChoice::Auto,
        threads: vec![],
        n_ctx: None,
        n_batch: 512,
        cache_types: CacheTypes::default(),
    };
    let (mut prompt, mut n, mut chat) = (None, 64usize, false);
    let mut sampling = SamplingParams::greedy();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-p" | "--prompt" => prompt = Some(value(args, &mut i, "-p")?.to_string()),
            "-n" => n = number(value(args, &mut i, "-n")?, "-n")?,
            "--chat" => chat = true,
            "--temp" => sampling.temperature = number(value(args, &mut i, "--temp")?, "--temp")?,
            "--top-k" => sampling.top_k = number(value(args, &mut i, "--top-k")?, "--top-k")?,
            "--top-p" => sampling.top_p = number(value(args, &mut i, "--top-p")?, "--top-p")?,
            "--seed" => sampling.seed = Some(number(value(args, &mut i, "--seed")?, "--seed")?),
            "-t" | "--threads" => c.threads = thread_list(value(args, &mut i, "-t")?)?,
            "--device" => c.device = DeviceChoice::parse(value(args, &mut i, "--device")?),
            "-c" | "--ctx" => c.n_ctx = Some(number(value(args, &mut i, "-c")?, "-c")?),
            _ if cache_type_arg(args, &mut i, &mut c)? => {}
            other if c.model.is_empty() && !other.starts_with('-') => c.model = other.into(),
            other => return Err(format!("run: unknown argument {other:?}")),
        }
        i += 1;
    }
    if c.model.is_empty() {
        return Err("run: which model? (tessera run MODEL.gguf -p TEXT)".into());
    }
    let prompt = prompt.ok_or("run: -p TEXT is required")?;
    let model = load(reg, &c)?;
    let opts = ContextOptions {
        n_ctx: c.n_ctx.unwrap_or(4096).min(model.hparams().n_ctx_train),
        n_batch: c.n_batch,
        threads: c.threads.first().copied(),
        cache_types: c.cache_types,
    };
    let mut ctx = Context::new(model, reg, &opts).map_err(|e| e.to_string())?;
    let p = if chat {
        Prompt::Messages(vec![ChatMessage::new("user", prompt.clone())])
    } else {
        Prompt::Text(prompt.clone())
    };
    let gen_opts = GenerateOptions { sampling, max_tokens: n, ..Default::default() };
    if !chat {
        print!("{prompt}");
    }
    let mut out = std::io::stdout();
    let g = generate(&mut ctx, &p, &gen_opts, &mut |e| {
        let _ = out.write_all(e.text.as_bytes());
        let _ = out.flush();
        true
    })
    .map_err(|e| e.to_string())?;
    println!();
    if let Some(mb) = resident_mb() {
        eprintln!("resident memory after generating: {mb:.0} MB");
    }
    let t = g.timings;
    eprintln!(
        "prompt: {} tokens in {:.0} ms ({:.1} tokens/s); generation: {} tokens in {:.0} ms \
         ({:.1} tokens/s); stopped: {}",
        t.prompt_tokens,
        t.prompt_ms,
        t.prompt_per_second(),
        t.predicted_tokens,
        t.predicted_ms,
        t.predicted_per_second(),
        g.stop_reason.name()
    );
    Ok(())
}

/// Deterministic token ids in `[10, n_vocab - 1)`, as llama_bench.py draws (not the same ids).
fn random_tokens(n: usize, n_vocab: usize) -> Vec<u32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (10 + s % (n_vocab as u64 - 11)) as u32
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The arguments of `bench model`.
#[derive(Debug)]
struct BenchModelArgs {
    common: Common,
    /// Prompt tokens per prompt run (0: no prompt test).
    pp: usize,
    /// Generated tokens per generation run (0: no generation test).
    tg: usize,
    /// Tokens in the cache before each generation run (llama-bench's `-d`).
    depth: usize,
    reps: usize,
    json: Option<String>,
    /// `--no-warmup`: no warm-up decode before the runs.
    no_warmup: bool,
    /// `--count-markers`: each prompt run and each generation run between count markers.
    count_markers: bool,
    /// `--profile`: after the runs, one prompt and one generation run with per-op timers.
    profile: bool,
}

fn bench_model_args(args: &[String]) -> Result<BenchModelArgs, String> {
    let mut a = BenchModelArgs {
        common: Common {
            model: String::new(),
            device: DeviceChoice::Auto,
            threads: vec![],
            n_ctx: None,
            n_batch: 512,
            cache_types: CacheTypes::default(),
        },
        pp: 512,
        tg: 128,
        depth: 0,
        reps: 3,
        json: None,
        no_warmup: false,
        count_markers: false,
        profile: false,
    };
    let c = &mut a.common;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-p" => a.pp = number(value(args, &mut i, "-p")?, "-p")?,
            "-n" => a.tg = number(value(args, &mut i, "-n")?, "-n")?,
            "-d" | "--depth" => a.depth = number(value(args, &mut i, "-d")?, "-d")?,
            "-r" | "--reps" => a.reps = number(value(args, &mut i, "-r")?, "-r")?,
            "-t" | "--threads" => c.threads = thread_list(value(args, &mut i, "-t")?)?,
            "-b" | "--batch" => c.n_batch = number(value(args, &mut i, "-b")?, "-b")?,
            "--device" => c.device = DeviceChoice::parse(value(args, &mut i, "--device")?),
            "--json" => a.json = Some(value(args, &mut i, "--json")?.to_string()),
            "--no-warmup" => a.no_warmup = true,
            "--count-markers" => a.count_markers = true,
            "--profile" => a.profile = true,
            _ if cache_type_arg(args, &mut i, c)? => {}
            other if c.model.is_empty() && !other.starts_with('-') => c.model = other.into(),
            other => return Err(format!("bench model: unknown argument {other:?}")),
        }
        i += 1;
    }
    if c.model.is_empty() {
        return Err("bench model: which model? (tessera bench model MODEL.gguf)".into());
    }
    if a.pp == 0 && a.tg == 0 {
        return Err("bench model: -p and -n are both 0: nothing to measure".into());
    }
    if a.reps == 0 {
        return Err("bench model: -r must be at least 1".into());
    }
    Ok(a)
}

/// `tessera bench model MODEL [-p PP] [-n TG] [-d DEPTH] [-t T,..] [-r REPS] [-b BATCH]
/// [--device D] [--json FILE] [--no-warmup] [--count-markers] [--profile]`.
///
/// `-p 0` or `-n 0` leaves that test out (as llama-bench does); `-d` decodes that many tokens
/// (untimed) before each generation run, which then attends to them (llama-bench's `-d`).
/// `--no-warmup` skips the warm-up decode; `--count-markers` puts each timed prompt decode and
/// each timed generation loop between the count markers of `bench matmul --count-markers` (for
/// `scripts/arm-counts.sh`).
/// `--profile` then decodes the prompt once more and generates `-n` tokens with per-op timers
/// ([`crate::profile`]) and prints where the time went, per thread count.
pub fn bench_model(reg: &Registry, args: &[String]) -> Result<(), String> {
    let BenchModelArgs {
        common: mut c,
        pp,
        tg,
        depth,
        reps,
        json,
        no_warmup,
        count_markers,
        profile,
    } = bench_model_args(args)?;
    if c.threads.is_empty() {
        c.threads = vec![tessera_cpu::device::default_threads()];
    }
    let mut markers = if count_markers { Some(Markers::open()?) } else { None };
    let mut mark = |offset| markers.as_mut().map_or(Ok(()), |m| m.mark(offset));
    let model = load(reg, &c)?;
    let hp = model.hparams();
    let tier = tessera_cpu::kernels::active_tier().name();
    // A generation run decodes tokens 0..=depth, then generates from tokens depth + 1..=depth +
    // tg: a prefix of the same sequence as the prompt's.
    let toks = random_tokens(pp.max(depth + tg + 1), hp.n_vocab);
    let n_ctx = (pp.max(depth + tg + 1) + 8).max(2048).min(hp.n_ctx_train);
    println!("| model | size | params | device | tier | threads | test | t/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for &threads in &c.threads {
        let opts = ContextOptions {
            n_ctx,
            n_batch: c.n_batch,
            threads: Some(threads),
            cache_types: c.cache_types,
        };
        let mut ctx = Context::new(model.clone(), reg, &opts).map_err(|e| e.to_string())?;
        let err = |e: tessera_llm::LlmError| e.to_string();
        if !no_warmup {
            ctx.decode(&toks[..pp.clamp(1, 64)], Rows::Last).map_err(err)?;
        }
        let (mut pp_runs, mut tg_runs) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            if pp > 0 {
                ctx.clear();
                mark(MARK_START)?;
                let t = Instant::now();
                ctx.decode(&toks[..pp], Rows::Last).map_err(err)?;
                pp_runs.push(pp as f64 / t.elapsed().as_secs_f64());
                mark(MARK_STOP)?;
            }
            if tg > 0 {
                ctx.clear();
                // One output for the run, as a generation loop keeps it.
                let mut out = ctx.decode(&toks[..depth + 1], Rows::Last).map_err(err)?;
                mark(MARK_START)?;
                let t = Instant::now();
                for k in 0..tg {
                    ctx.decode_into(&[toks[depth + k + 1]], Rows::Last, &mut out).map_err(err)?;
                }
                tg_runs.push(tg as f64 / t.elapsed().as_secs_f64());
                mark(MARK_STOP)?;
            }
            eprint!(".");
        }
        eprintln!();
        let pp_tps = (pp > 0).then(|| median(&mut pp_runs.clone()));
        let tg_tps = (tg > 0).then(|| median(&mut tg_runs.clone()));
        let size = format!("{:.1} MiB", model.weight_bytes() as f64 / (1 << 20) as f64);
        let params = format!("{:.1} M", model.n_params() as f64 / 1e6);
        let dev = model.device().name();
        let tg_name = if depth > 0 { format!("tg{tg} @ d{depth}") } else { format!("tg{tg}") };
        for (test, tps) in [(format!("pp{pp}"), pp_tps), (tg_name, tg_tps)] {
            if let Some(tps) = tps {
                println!(
                    "| {} | {size} | {params} | {dev} | {tier} | {threads} | {test} | {tps:.1} |",
                    hp.arch.name()
                );
            }
        }
        if profile {
            profile_decodes(&mut ctx, &toks, pp, tg, threads)?;
        }
        if let Some(path) = &json {
            let row = serde_json::json!({
                "engine": "tessera", "model": c.model, "device": dev, "tier": tier,
                "threads": threads, "pp_tokens": pp, "tg_tokens": tg, "depth": depth,
                "pp_tps": pp_tps, "tg_tps": tg_tps, "pp_runs": pp_runs, "tg_runs": tg_runs,
                "weight_bytes": model.weight_bytes(),
            });
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("{path}: {e}"))?;
            writeln!(f, "{row}").map_err(|e| format!("{path}: {e}"))?;
        }
    }
    Ok(())
}

/// `bench model --profile`: one prompt decode of `pp` tokens and `tg` single-token decodes of
/// `toks` with per-op timers on `ctx`, each printed as a table.
fn profile_decodes(
    ctx: &mut Context,
    toks: &[u32],
    pp: usize,
    tg: usize,
    threads: usize,
) -> Result<(), String> {
    let err = |e: tessera_llm::LlmError| e.to_string();
    let times = crate::profile::OpTimes::default();
    ctx.set_eval_callback(Some(times.callback()));
    let result = (|| {
        if pp > 0 {
            ctx.clear();
            times.start();
            let t = Instant::now();
            ctx.decode(&toks[..pp], Rows::Last).map_err(err)?;
            let wall = t.elapsed().as_secs_f64() * 1e6;
            println!("\nprofile, pp{pp}, {threads} thread(s):\n{}", times.table(1, "prompt"));
            println!("decode call: {wall:.1} us per prompt");
            print!("{}", crate::profile::fallback_table(&ctx.reference_fallbacks()));
        }
        if tg > 0 {
            ctx.clear();
            let mut out = ctx.decode(&toks[..1], Rows::Last).map_err(err)?;
            times.reset();
            let t = Instant::now();
            for k in 0..tg {
                times.start();
                ctx.decode_into(&[toks[k + 1]], Rows::Last, &mut out).map_err(err)?;
            }
            let wall = t.elapsed().as_secs_f64() * 1e6 / tg as f64;
            println!("\nprofile, tg{tg}, {threads} thread(s):\n{}", times.table(tg, "token"));
            println!("decode call: {wall:.1} us per token");
            print!("{}", crate::profile::fallback_table(&ctx.reference_fallbacks()));
        }
        Ok(())
    })();
    ctx.set_eval_callback(None);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<BenchModelArgs, String> {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        bench_model_args(&v)
    }

    #[test]
    fn bench_model_defaults_are_llama_benchs() {
        let a = args("m.gguf").unwrap();
        assert_eq!((a.pp, a.tg, a.depth, a.reps), (512, 128, 0, 3));
        assert!(!a.no_warmup && !a.count_markers);
        assert_eq!(a.common.model, "m.gguf");
    }

    #[test]
    fn bench_model_takes_the_counting_flags_and_one_empty_test() {
        let a = args("m.gguf -p 0 -n 16 -r 1 --no-warmup --count-markers").unwrap();
        assert_eq!((a.pp, a.tg, a.reps), (0, 16, 1));
        assert!(a.no_warmup && a.count_markers && !a.profile);
        assert!(args("m.gguf --profile").unwrap().profile);
        let a = args("-p 64 -n 0 m.gguf").unwrap();
        assert_eq!((a.pp, a.tg), (64, 0));
        assert_eq!(args("m.gguf -d 1024").unwrap().depth, 1024);
        assert!(args("m.gguf -d x").is_err());
    }

    #[test]
    fn bench_model_refuses_nothing_to_measure() {
        assert!(args("m.gguf -p 0 -n 0").unwrap_err().contains("both 0"));
        assert!(args("m.gguf -r 0").unwrap_err().contains("-r"));
        assert!(args("-p 8").unwrap_err().contains("which model"));
        assert!(args("m.gguf --warmup").unwrap_err().contains("--warmup"));
    }

    #[test]
    fn generation_tokens_are_a_prefix_of_the_prompts() {
        let long = random_tokens(64, 262144);
        assert_eq!(random_tokens(17, 262144), long[..17]);
        assert!(long.iter().all(|&t| (10..262143).contains(&t)));
    }
}
