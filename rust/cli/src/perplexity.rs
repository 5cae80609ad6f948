//! `tessera perplexity MODEL -f TEXT [-c 512] [--chunks N] [-t T] [-b B] [--device D]
//! [--kl-divergence-base FILE [--kl-divergence]] [-ctk TYPE] [-ctv TYPE]`: llama-perplexity's
//! method and its
//! KL-divergence comparison (see [`tessera_llm::perplexity`]). With `--kl-divergence-base FILE`
//! alone the run also writes the base file; with `--kl-divergence` too it reads the base (its
//! own tokens and chunks; no text needed) and compares this model's logits with it.
//! `-ctk` / `-ctv` (`--cache-type-k` / `--cache-type-v`: f16, q8_0, q4_0) choose the KV cache's
//! types, as llama-perplexity's: what a quantized cache costs is its KL divergence from an F16
//! base.

use crate::llm::{load_for_bench, number, value};
use std::path::PathBuf;
use tessera_core::registry::Registry;
use tessera_llm::kv_cache::CacheTypes;
use tessera_llm::perplexity::{self, kl::KlSummary, PerplexityOptions, PerplexityReport};
use tessera_llm::{Context, ContextOptions, DeviceChoice};

/// Parsed arguments.
#[derive(Debug, PartialEq)]
struct Args {
    model: String,
    text: Option<PathBuf>,
    n_ctx: usize,
    max_chunks: Option<usize>,
    threads: Option<usize>,
    n_batch: usize,
    device: DeviceChoice,
    base: Option<PathBuf>,
    compare: bool,
    cache_types: CacheTypes,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        model: String::new(),
        text: None,
        n_ctx: 512,
        max_chunks: None,
        threads: None,
        n_batch: 512,
        device: DeviceChoice::Auto,
        base: None,
        compare: false,
        cache_types: CacheTypes::default(),
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-f" | "--file" => a.text = Some(value(args, &mut i, "-f")?.into()),
            "-c" | "--ctx" => a.n_ctx = number(value(args, &mut i, "-c")?, "-c")?,
            "--chunks" => {
                a.max_chunks = Some(number(value(args, &mut i, "--chunks")?, "--chunks")?)
            }
            "-t" | "--threads" => a.threads = Some(number(value(args, &mut i, "-t")?, "-t")?),
            "-b" | "--batch" => a.n_batch = number(value(args, &mut i, "-b")?, "-b")?,
            "--device" => a.device = DeviceChoice::parse(value(args, &mut i, "--device")?),
            "--kl-divergence-base" => {
                a.base = Some(value(args, &mut i, "--kl-divergence-base")?.into())
            }
            "--kl-divergence" => a.compare = true,
            "-ctk" | "--cache-type-k" => {
                let v = value(args, &mut i, "-ctk")?;
                a.cache_types.k = CacheTypes::parse(v).map_err(|e| e.to_string())?;
            }
            "-ctv" | "--cache-type-v" => {
                let v = value(args, &mut i, "-ctv")?;
                a.cache_types.v = CacheTypes::parse(v).map_err(|e| e.to_string())?;
            }
            other if a.model.is_empty() && !other.starts_with('-') => a.model = other.into(),
            other => return Err(format!("perplexity: unknown argument {other:?}")),
        }
        i += 1;
    }
    if a.model.is_empty() {
        return Err("perplexity: which model? (tessera perplexity MODEL.gguf -f TEXT)".into());
    }
    if a.compare && a.base.is_none() {
        return Err("perplexity: --kl-divergence needs --kl-divergence-base FILE".into());
    }
    if !a.compare && a.text.is_none() {
        return Err("perplexity: -f TEXT is required (except with --kl-divergence)".into());
    }
    Ok(a)
}

/// Runs `tessera perplexity`, printing the running perplexity per chunk and the final figures.
pub fn run(reg: &Registry, args: &[String]) -> Result<(), String> {
    let a = parse(args)?;
    let model = load_for_bench(reg, &a.model, &a.device)?;
    let n_ctx = if a.compare {
        perplexity::base_file::BaseFileReader::open(
            a.base.as_deref().unwrap_or_else(|| unreachable!()),
        )
        .map_err(|e| e.to_string())?
        .n_ctx
    } else {
        a.n_ctx
    };
    let opts = ContextOptions {
        n_ctx,
        n_batch: a.n_batch,
        threads: a.threads,
        cache_types: a.cache_types,
    };
    let mut ctx = Context::new(model.clone(), reg, &opts).map_err(|e| e.to_string())?;
    let mut progress = |c: usize, ppl: f64| eprintln!("[{}] {ppl:.4}", c + 1);
    let t0 = std::time::Instant::now();
    let report = match (&a.base, a.compare) {
        (Some(base), true) => {
            let (report, kl) =
                perplexity::run_against_base(&mut ctx, base, a.max_chunks, &mut progress)
                    .map_err(|e| e.to_string())?;
            print_kl(&kl);
            report
        }
        (base, _) => {
            let path = a.text.as_ref().unwrap_or_else(|| unreachable!());
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("perplexity: {}: {e}", path.display()))?;
            let tokens = perplexity::text_tokens(&model, &text);
            let popts = PerplexityOptions { n_ctx, max_chunks: a.max_chunks };
            let r = match base {
                Some(base) => {
                    perplexity::run_writing_base(&mut ctx, &tokens, &popts, base, &mut progress)
                }
                None => {
                    let n_chunks =
                        perplexity::chunk_count(tokens.len(), &popts).map_err(|e| e.to_string())?;
                    perplexity::run(
                        &mut ctx,
                        &tokens,
                        n_ctx,
                        n_chunks,
                        &mut |_| Ok(()),
                        &mut progress,
                    )
                }
            };
            r.map_err(|e| e.to_string())?
        }
    };
    print_report(&report, t0.elapsed().as_secs_f64());
    Ok(())
}

fn print_report(r: &PerplexityReport, seconds: f64) {
    let (ppl, err) = r.perplexity();
    println!(
        "{} chunks of {} tokens ({} scored) in {seconds:.1} s",
        r.n_chunks, r.n_ctx, r.nll.count
    );
    println!("Final estimate: PPL = {ppl:.4} +/- {err:.5}");
}

fn print_kl(k: &KlSummary) {
    println!("Mean PPL(Q)               : {:10.6} ± {:10.6}", k.ppl.0, k.ppl.1);
    println!("Mean PPL(base)            : {:10.6} ± {:10.6}", k.ppl_base.0, k.ppl_base.1);
    println!("Mean ln(PPL(Q)/PPL(base)) : {:10.6} ± {:10.6}", k.ln_ppl_ratio.0, k.ln_ppl_ratio.1);
    println!("Mean    KLD: {:10.6} ± {:10.6}", k.kld_mean.0, k.kld_mean.1);
    println!("Median  KLD: {:10.6}", k.kld_median);
    println!("99.0%   KLD: {:10.6}", k.kld_p99);
    println!("Maximum KLD: {:10.6}", k.kld_max);
    println!("RMS Δp    : {:6.3} %", 100.0 * k.p_diff_rms);
    println!("Maximum Δp: {:6.3} %", 100.0 * k.p_diff_max);
    println!("Same top p: {:6.3} % of {} tokens", 100.0 * k.same_top, k.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn perplexity_arguments() {
        let a = args("m.gguf -f t.txt -c 256 --chunks 3 -t 2").unwrap();
        assert_eq!((a.n_ctx, a.max_chunks, a.threads), (256, Some(3), Some(2)));
        assert!(!a.compare && a.base.is_none());
        let a = args("m.gguf --kl-divergence-base b.bin --kl-divergence").unwrap();
        assert!(a.compare && a.text.is_none());
        assert!(args("m.gguf").is_err(), "no text");
        assert!(args("m.gguf -f t.txt --kl-divergence").is_err(), "no base");
        assert!(args("-f t.txt").is_err(), "no model");
        assert!(args("m.gguf -f t.txt -c x").is_err());
    }
}
