//! The command line's flags, read one way for every command.

/// The value after the first of `names` in `args` (`--threads 2`), if any.
pub fn flag(args: &[String], names: &[&str]) -> Option<String> {
    args.windows(2).find(|w| names.contains(&w[0].as_str())).map(|w| w[1].clone())
}

/// Flag `name` as a count, `default` without it; a value that is not one names the flag.
pub fn count(args: &[String], name: &str, default: usize) -> Result<usize, String> {
    flag(args, &[name])
        .map_or(Ok(default), |v| v.trim().parse().map_err(|_| format!("bad {name} {v:?}")))
}

/// `--threads` as a comma-separated list of thread counts, `default` without it.
pub fn thread_list(args: &[String], default: &str) -> Result<Vec<usize>, String> {
    flag(args, &["--threads"])
        .unwrap_or_else(|| default.into())
        .split(',')
        .map(|t| t.trim().parse().map_err(|_| format!("bad thread count {t:?}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_counts_and_thread_lists() {
        let a = args("bench nodes --runs 7 -t 3 --threads 1,4");
        assert_eq!(flag(&a, &["-t", "--threads"]).as_deref(), Some("3"));
        assert_eq!(count(&a, "--runs", 200), Ok(7));
        assert_eq!(count(&a, "--nodes", 1000), Ok(1000));
        assert_eq!(thread_list(&a, "1,2"), Ok(vec![1, 4]));
        assert_eq!(thread_list(&args("x"), "1,2"), Ok(vec![1, 2]));
        assert_eq!(count(&args("--runs x"), "--runs", 1), Err("bad --runs \"x\"".into()));
        assert!(thread_list(&args("--threads 1,a"), "1").unwrap_err().contains("\"a\""));
    }
}
