//! `tessera`: info, backend-ops, bench and gguf.

use std::process::ExitCode;
use tessera_cli::{backend_ops, bench, bench_ew, gguf, info, registry};

const USAGE: &str = "usage: tessera info
       tessera backend-ops test [-o OP]
       tessera backend-ops support
       tessera backend-ops perf [-o OP] [-t THREADS]
       tessera bench matmul --types T,.. --ns N,.. --threads t,.. -M 4096 -K 4096 [--cold-bytes B] [--json FILE]
       tessera bench ew [--threads t,..] [--runs R] [--rows N]
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

fn flag(args: &[String], names: &[&str]) -> Option<String> {
    args.windows(2).find(|w| names.contains(&w[0].as_str())).map(|w| w[1].clone())
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    if args.first().is_some_and(|a| a == "gguf") {
        print!("{}", gguf::run(&args[1..])?);
        return Ok(ExitCode::SUCCESS);
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
                    let r = backend_ops::test(&reg, op.as_deref());
                    for l in &r.lines {
                        println!("{l}");
                    }
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
                    print!(
                        "{}",
                        backend_ops::perf(&reg, op.as_deref(), threads)
                            .map_err(|e| e.to_string())?
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Some(other) => Err(format!("unknown backend-ops mode {other:?}\n{USAGE}")),
            }
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "ew") => {
            bench_ew::run(&args[2..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("bench") => {
            bench::run(&args[1..])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}
