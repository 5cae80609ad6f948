//! `tessera`: info, backend-ops, bench and gguf.

use std::io::Write as _;
use std::process::ExitCode;
use tessera_cli::args::flag;
use tessera_cli::{
    backend_ops, bench, bench_constrained, bench_ew, bench_nodes, bench_session, gguf, info, llm,
    perplexity, registry,
};

const USAGE: &str = "usage: tessera info
       tessera backend-ops test [-o OP]
       tessera backend-ops support
       tessera backend-ops perf [-o OP] [-t THREADS]
       tessera bench matmul --types T,.. --ns N,.. --threads t,.. -M 4096 -K 4096 [--cold-bytes B] [--json FILE]
       tessera bench ew [--threads t,..] [--runs R] [--rows N]
       tessera bench nodes [--nodes 1000] [--width 16] [--threads t,..] [--runs R]
       tessera bench model MODEL.gguf [-p 512] [-n 128] [-d 0] [-t 1,2] [-r 3] [-b 512] [--device D] [--json FILE] [--no-warmup] [--count-markers] [--profile] [-ctk f16|q8_0|q4_0] [-ctv ...]
       tessera bench constrained MODEL.gguf [-n 128] [-t 1,2] [--schema FILE] [--vocab VOCAB.gguf ..]
       tessera bench session MODEL.gguf [-p 2000] [-t 2] [-r 3] [--dir DIR]
       tessera run MODEL.gguf -p TEXT [-n 64] [--chat] [--temp T] [--top-k K] [--top-p P] [--seed S] [-t N] [--device D] [-ctk f16|q8_0|q4_0] [-ctv ...]
       tessera perplexity MODEL.gguf -f TEXT [-c 512] [--chunks N] [-t N] [-b 512] [--device D] [--kl-divergence-base FILE [--kl-divergence]] [-ctk f16|q8_0|q4_0] [-ctv ...]
       tessera gguf FILE [--json] [--full]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tessera: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    if args.first().is_some_and(|a| a == "gguf") {
        print!("{}", gguf::run(&args[1..])?);
        return Ok(ExitCode::SUCCESS);
    }
    // Commands that need no device are answered before the registry opens the GPU.
    match args.first().map(String::as_str) {
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
        Some("info") | Some("backend-ops") | Some("run") | Some("perplexity") | None => {}
        Some("bench")
            if args
                .get(1)
                .is_some_and(|a| a == "model" || a == "constrained" || a == "session") => {}
        Some("bench") if args.get(1).is_some_and(|a| a == "ew") => {
            bench_ew::run(&args[2..])?;
            return Ok(ExitCode::SUCCESS);
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "nodes") => {
            bench_nodes::run(&args[2..])?;
            return Ok(ExitCode::SUCCESS);
        }
        Some("bench") => {
            bench::run(&args[1..])?;
            return Ok(ExitCode::SUCCESS);
        }
        Some(other) => return Err(format!("unknown command {other:?}\n{USAGE}")),
    }
    let reg = registry();
    match args.first().map(String::as_str) {
        Some("info") | None => {
            let (text, ok) = info::info(&reg).map_err(|e| e.to_string())?;
            print!("{text}");
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Some("backend-ops") => {
            let op = flag(args, &["-o", "--op"]);
            match args.get(1).map(String::as_str) {
                Some("test") | None => {
                    let r = backend_ops::test_streaming(&reg, op.as_deref(), &mut |line| {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "{line}");
                        let _ = out.flush();
                    });
                    println!(
                        "{} passed, {} failed, {} not supported",
                        r.passed,
                        r.failed.len(),
                        r.unsupported
                    );
                    Ok(if r.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
                }
                Some("support") => {
                    print!("{}", backend_ops::support(&reg).map_err(|e| e.to_string())?);
                    Ok(ExitCode::SUCCESS)
                }
                Some("perf") => {
                    let threads = flag(args, &["-t", "--threads"])
                        .map(|t| t.parse::<usize>().map_err(|_| format!("bad thread count {t:?}")))
                        .transpose()?;
                    backend_ops::perf(&reg, op.as_deref(), threads, &mut std::io::stdout().lock())
                        .map_err(|e| e.to_string())?;
                    Ok(ExitCode::SUCCESS)
                }
                Some(other) => Err(format!("unknown backend-ops mode {other:?}\n{USAGE}")),
            }
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "model") => {
            llm::bench_model(&reg, &args[2..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "constrained") => {
            bench_constrained::run(&reg, &args[2..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "session") => {
            bench_session::run(&reg, &args[2..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("run") => {
            llm::run(&reg, &args[1..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("perplexity") => {
            perplexity::run(&reg, &args[1..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}
