//! `tessera bench session MODEL [-p 2000] [-t 2] [-r 3] [--dir DIR]`: resuming a conversation
//! of `-p` tokens from a session file against processing it again, each until the logits of
//! the next token are there: "reprocess" decodes the conversation (batches of 512) and one more
//! token; "resume" loads the session file saved after the conversation and decodes that token.
//! Prints the best of `-r` runs of each (alternating), their ratio, the save time and the file's
//! size, with the CPU and kernel tier.

use crate::llm::load_for_bench;
use std::time::Instant;
use tessera_core::registry::Registry;
use tessera_llm::{Context, ContextOptions, DeviceChoice, Rows};

struct Args {
    model: String,
    tokens: usize,
    threads: usize,
    runs: usize,
    dir: std::path::PathBuf,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a =
        Args { model: String::new(), tokens: 2000, threads: 2, runs: 3, dir: std::env::temp_dir() };
    let mut i = 0;
    let num = |v: Option<&String>, name: &str| -> Result<usize, String> {
        v.and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number"))
    };
    while i < args.len() {
        match args[i].as_str() {
            "-p" => a.tokens = num(args.get(i + 1), "-p")?,
            "-t" => a.threads = num(args.get(i + 1), "-t")?,
            "-r" => a.runs = num(args.get(i + 1), "-r")?.max(1),
            "--dir" => a.dir = args.get(i + 1).ok_or("--dir needs a folder")?.into(),
            m if a.model.is_empty() && !m.starts_with('-') => {
                a.model = m.to_string();
                i += 1;
                continue;
            }
            other => return Err(format!("bench session: unknown argument {other:?}")),
        }
        i += 2;
    }
    if a.model.is_empty() || a.tokens < 2 {
        return Err("usage: tessera bench session MODEL.gguf [-p 2000] [-t 2] [-r 3]".into());
    }
    Ok(a)
}

/// Runs the benchmark (see the module doc).
pub fn run(reg: &Registry, args: &[String]) -> Result<(), String> {
    let a = parse_args(args)?;
    let err = |e: tessera_llm::LlmError| e.to_string();
    let model = load_for_bench(reg, &a.model, &DeviceChoice::Auto)?;
    let tok = model.tokenizer();
    let text = "A long conversation about the sea, the boats, the fish and the weather. ";
    let mut ids = tok.encode(text, true, true);
    let more = tok.encode(text, false, true);
    while ids.len() < a.tokens {
        ids.extend_from_slice(&more);
    }
    ids.truncate(a.tokens);
    let next = more[0];
    let n_ctx = (a.tokens + 16).div_ceil(256) * 256;
    let opts = ContextOptions {
        n_ctx,
        n_batch: 512,
        threads: Some(a.threads),
        ..ContextOptions::default()
    };
    let mut ctx = Context::new(model.clone(), reg, &opts).map_err(err)?;
    let path = a.dir.join(format!("tessera-bench-{}.session", std::process::id()));
    // Warm-up (graphs built, weights paged in), then the session saved.
    ctx.decode(&ids, Rows::Last).map_err(err)?;
    let t = Instant::now();
    ctx.save_session(&path).map_err(err)?;
    let save_ms = t.elapsed().as_secs_f64() * 1e3;
    let size = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
    let (mut reprocess, mut resume) = (f64::MAX, f64::MAX);
    let mut logits = (Vec::new(), Vec::new());
    for _ in 0..a.runs {
        ctx.clear();
        let t = Instant::now();
        ctx.decode(&ids, Rows::Last).map_err(err)?;
        logits.0 = ctx.decode(&[next], Rows::Last).map_err(err)?.values;
        reprocess = reprocess.min(t.elapsed().as_secs_f64());
        ctx.clear();
        let t = Instant::now();
        ctx.load_session(&path).map_err(err)?;
        logits.1 = ctx.decode(&[next], Rows::Last).map_err(err)?.values;
        resume = resume.min(t.elapsed().as_secs_f64());
    }
    let _ = std::fs::remove_file(&path);
    if logits.0 != logits.1 {
        return Err("the resumed session's logits differ from the reprocessed ones".into());
    }
    println!("| cpu | tier | threads | tokens | reprocess ms | resume ms | speed-up | save ms | file MB |");
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1}x | {save_ms:.1} | {:.1} |",
        tessera_cpu::features::cpu_description(),
        tessera_cpu::kernels::active_tier().name(),
        a.threads,
        a.tokens,
        reprocess * 1e3,
        resume * 1e3,
        reprocess / resume,
        size as f64 / 1e6
    );
    Ok(())
}
