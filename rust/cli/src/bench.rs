//! `tessera bench matmul`: CPU matmul throughput, timed as the anchor's ggml and candle benches.
//!
//! ```text
//! tessera bench matmul --types T,.. --ns N,.. --threads t,.. -M 4096 -K 4096
//!                      [--cold-bytes B] [--json FILE] [--tier NAME] [--runs R]
//!                      [--repack on|off|both] [--clock wall|cpu] [--count-markers]
//!                      [--distinct-rows R]
//! ```
//!
//! `C[n, m] = sum_k A[m, k] B[n, k]` with `A` random weights of type `T` (quantized with the
//! reference quantizers; placed in the tier's repack layout when the tier has repacked kernels
//! for the type, as llama.cpp does, unless `--repack off`; `--repack both` times the plain and
//! the repacked weights one after the other for each configuration) and `B` F32 activations; the activation conversion is part of the
//! timed work. At least `R` (default 10) timed runs after 3 warm-ups; the median is reported.
//! `--cold-bytes B` cycles through at least `B` bytes of distinct weight matrices so that the
//! weights come from DRAM; the warm-up then reads every copy once (in this VM the first read
//! of freshly written memory ran at 8.6 GB/s against 11.6 GB/s from the second on, and real
//! weights are read token after token). `--json FILE` appends one object per configuration with the keys
//! `type, N, threads, median_s, gflops, weight_gbps` (plus `M, K, cold, tier, repacked`).
//! `--clock cpu` times with the process's CPU time divided by the thread count instead of the
//! wall clock: for comparing compute-bound kernels on a busy machine (not for memory-bound
//! runs, nor for the comparison with the peers).
//!
//! `--count-markers` is for instruction counts under an emulator (`scripts/arm-counts.sh`):
//! each configuration runs one warm-up and then `--runs R` multiplications (default 1, no
//! minimum) between two count markers, `lseek`s of `/dev/null` to [`MARK_START`] and
//! [`MARK_STOP`] (no-ops for the program) that `scripts/qemu-plugin/insn_count.c` takes as the
//! start and the end of a counted region, one region per configuration in the order of the
//! output lines. `--distinct-rows R` quantizes only `R` random weight rows and repeats them
//! to the `M` rows: a fast set-up under an emulator, where quantizing 16 M values takes longer
//! than the multiplications, for counts that do not depend on the values.

use std::io::Write;
use std::time::Instant;
use tessera_core::backend::Buffer;
use tessera_core::{DType, Layout};
use tessera_cpu::buffer::HostBuffer;
use tessera_cpu::kernels;
use tessera_cpu::matmul::{MatMul, TensorRef};
use tessera_cpu::team;

const WARMUPS: usize = 3;

/// `lseek` offset that starts a counted region under `--count-markers` ("TESS" << 32 | 1).
pub const MARK_START: u64 = 0x5445_5353_0000_0001;
/// `lseek` offset that ends a counted region under `--count-markers`.
pub const MARK_STOP: u64 = 0x5445_5353_0000_0002;

/// The count markers: seeks of `/dev/null` that an instruction-count plugin recognizes.
pub(crate) struct Markers(std::fs::File);

impl Markers {
    /// Opens `/dev/null` for the marker seeks.
    pub(crate) fn open() -> Result<Markers, String> {
        std::fs::File::open("/dev/null").map(Markers).map_err(|e| format!("/dev/null: {e}"))
    }

    /// Seeks to `offset` ([`MARK_START`] or [`MARK_STOP`]).
    pub(crate) fn mark(&mut self, offset: u64) -> Result<(), String> {
        use std::io::{Seek, SeekFrom};
        self.0.seek(SeekFrom::Start(offset)).map(|_| ()).map_err(|e| format!("/dev/null: {e}"))
    }
}

struct Args {
    types: Vec<DType>,
    ns: Vec<usize>,
    threads: Vec<usize>,
    m: usize,
    k: usize,
    cold_bytes: usize,
    json: Option<String>,
    runs: usize,
    /// Repack modes to time: `false` plain, `true` repacked when the tier can.
    repack: Vec<bool>,
    cpu_clock: bool,
    /// `--count-markers`: one warm-up, `runs` multiplications between count markers.
    count_markers: bool,
    /// `--distinct-rows`: random weight rows quantized, repeated to `m` (0: all `m`).
    distinct_rows: usize,
}

fn list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>, String> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| x.trim().parse::<T>().map_err(|_| format!("bad {what}: {x:?}")))
        .collect()
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        types: vec![DType::Q4_0],
        ns: vec![1],
        threads: vec![1],
        m: 4096,
        k: 4096,
        cold_bytes: 0,
        json: None,
        runs: 0,
        repack: vec![true],
        cpu_clock: false,
        count_markers: false,
        distinct_rows: 0,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--types" => a.types = list(&val()?, "type")?,
            "--ns" => a.ns = list(&val()?, "N")?,
            "--threads" => a.threads = list(&val()?, "thread count")?,
            "-M" | "--m" => a.m = val()?.parse().map_err(|_| "bad -M".to_string())?,
            "-K" | "--k" => a.k = val()?.parse().map_err(|_| "bad -K".to_string())?,
            "--cold-bytes" => {
                a.cold_bytes =
                    val()?.parse::<f64>().map_err(|_| "bad --cold-bytes".to_string())? as usize
            }
            "--json" => a.json = Some(val()?),
            "--count-markers" => a.count_markers = true,
            "--distinct-rows" => {
                a.distinct_rows = val()?.parse().map_err(|_| "bad --distinct-rows".to_string())?
            }
            "--runs" => a.runs = val()?.parse().map_err(|_| "bad --runs".to_string())?,
            "--clock" => {
                a.cpu_clock = match val()?.as_str() {
                    "wall" => false,
                    "cpu" => true,
                    other => return Err(format!("bad --clock {other:?} (wall or cpu)")),
                }
            }
            "--repack" => {
                a.repack = match val()?.as_str() {
                    "on" => vec![true],
                    "off" => vec![false],
                    "both" => vec![false, true],
                    other => return Err(format!("bad --repack {other:?} (on, off or both)")),
                }
            }
            "--tier" => {
                kernels::force_tier(kernels::Tier::parse(&val()?).map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if a.m == 0 || a.k == 0 || a.ns.contains(&0) || a.threads.contains(&0) {
        return Err("sizes and thread counts must be positive".into());
    }
    a.runs = if a.count_markers { a.runs.max(1) } else { a.runs.max(10) };
    Ok(a)
}

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// CPU time used by the process so far, in seconds (all threads).
fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Runs `tessera bench <args>`; `args` starts with the benchmark name (`matmul`).
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("matmul") => matmul(&parse(&args[1..])?),
        _ => Err("usage: tessera bench matmul --types T,.. --ns N,.. --threads t,.. -M 4096 \
                  -K 4096 [--cold-bytes B] [--json FILE] [--tier NAME] [--runs R] \
                  [--repack on|off|both] [--clock wall|cpu] [--count-markers] \
                  [--distinct-rows R]"
            .into()),
    }
}

/// One weight matrix: plain GGUF bytes or repacked.
enum WeightCopy {
    /// In a CPU buffer, as an app's weights are.
    Plain(HostBuffer),
    Packed(kernels::repack::PackedWeights),
}

impl WeightCopy {
    /// A CPU buffer holding `bytes`.
    fn plain(bytes: &[u8]) -> Result<WeightCopy, String> {
        let buffer = HostBuffer::new(bytes.len()).map_err(|e| e.to_string())?;
        buffer.write(0, bytes).map_err(|e| e.to_string())?;
        Ok(WeightCopy::Plain(buffer))
    }

    /// The matmul operand of tensor layout `layout`.
    fn operand(&self, layout: Layout) -> TensorRef {
        match self {
            WeightCopy::Plain(b) => {
                TensorRef::plain(layout, b.host_ptr().map_or(std::ptr::null(), |p| p.as_ptr()))
            }
            WeightCopy::Packed(p) => p.weights(layout),
        }
    }

    fn len(&self) -> usize {
        match self {
            WeightCopy::Plain(b) => b.size(),
            WeightCopy::Packed(p) => p.bytes().len(),
        }
    }
}

/// Weight matrices for one type: `copies` distinct allocations of the same random matrix.
struct Weights {
    layout: Layout,
    copies: Vec<WeightCopy>,
    repacked: bool,
}

fn make_weights(
    dtype: DType,
    m: usize,
    k: usize,
    cold_bytes: usize,
    repack: bool,
    distinct_rows: usize,
) -> Result<Weights, String> {
    let layout = Layout::contiguous(dtype, &[k, m]).map_err(|e| e.to_string())?;
    let rows = if distinct_rows == 0 { m } else { distinct_rows.min(m) };
    let x = rand_vec(rows * k, 42);
    let band = tessera_core::quant::quantize_to_vec(dtype, &x).map_err(|e| e.to_string())?;
    let bytes = if rows == m {
        band
    } else {
        let row = band.len() / rows;
        (0..m).flat_map(|i| &band[(i % rows) * row..][..row]).copied().collect()
    };
    let n = if cold_bytes > 0 { cold_bytes.div_ceil(bytes.len()).max(2) } else { 1 };
    let packed = if repack { kernels::repack::repack_for_bench(&layout, &bytes) } else { None };
    let copies: Vec<WeightCopy> = match packed {
        Some(p) => (0..n)
            .map(|_| p.try_clone().map(WeightCopy::Packed).ok_or("out of memory".to_string()))
            .collect::<Result<_, _>>()?,
        None => (0..n).map(|_| WeightCopy::plain(&bytes)).collect::<Result<_, _>>()?,
    };
    let repacked = matches!(copies[0], WeightCopy::Packed(_));
    Ok(Weights { layout, copies, repacked })
}

fn matmul(a: &Args) -> Result<(), String> {
    let mut markers = if a.count_markers { Some(Markers::open()?) } else { None };
    println!(
        "{:5} {:>5} {:>3} {:>12} {:>9} {:>8} {:>9}  tier",
        "type", "N", "thr", "median_ms", "GFLOPS", "GB/s", "best_GF"
    );
    for &dtype in &a.types {
        let all = a
            .repack
            .iter()
            .map(|&r| make_weights(dtype, a.m, a.k, a.cold_bytes, r, a.distinct_rows))
            .collect::<Result<Vec<_>, _>>()?;
        for &n in &a.ns {
            let x = rand_vec(n * a.k, 7);
            let bl = Layout::contiguous(DType::F32, &[a.k, n]).map_err(|e| e.to_string())?;
            let dl = Layout::contiguous(DType::F32, &[a.m, n]).map_err(|e| e.to_string())?;
            let mut d = vec![0f32; a.m * n];
            for &threads in &a.threads {
                // Helpers of their own for every weight type's runs, as a model's graph computes
                // have (helpers started per configuration could start on the caller's core and
                // stall its first runs by milliseconds).
                let crew = team::Crew::new(threads).map_err(|e| e.to_string())?;
                for w in &all {
                    let wbytes = w.copies[0].len();
                    let tier = if w.repacked {
                        kernels::repacked_kernel(dtype).map_or("?", |k| k.tier.name())
                    } else {
                        kernels::tier_name(dtype)
                    };
                    // The helpers stay for all the runs, as for the ops of a model's graph.
                    let (mut times, runs) = crew.with_team(threads, |team| {
                        let mm = MatMul::new();
                        let mut next = 0usize;
                        let mut once = |d: &mut [f32]| -> Result<f64, String> {
                            let wcopy = w.copies[next % w.copies.len()].operand(w.layout);
                            next += 1;
                            let (t0, c0) = (Instant::now(), process_cpu_seconds());
                            // SAFETY: every buffer holds its layout's bytes and dst is separate.
                            unsafe {
                                mm.run_on(
                                    team,
                                    (dl, d.as_mut_ptr().cast()),
                                    wcopy,
                                    TensorRef::plain(bl, x.as_ptr().cast()),
                                    &|| false,
                                )
                            }
                            .map_err(|e| e.to_string())?;
                            Ok(if a.cpu_clock {
                                (process_cpu_seconds() - c0) / threads as f64
                            } else {
                                t0.elapsed().as_secs_f64()
                            })
                        };
                        let warmups = if markers.is_some() {
                            1
                        } else if a.cold_bytes > 0 {
                            WARMUPS.max(w.copies.len())
                        } else {
                            WARMUPS
                        };
                        for _ in 0..warmups {
                            once(&mut d)?;
                        }
                        let runs = if markers.is_some() {
                            a.runs
                        } else {
                            a.runs.max(if a.cold_bytes > 0 { w.copies.len() } else { 0 })
                        };
                        if let Some(m) = markers.as_mut() {
                            m.mark(MARK_START)?;
                        }
                        let times =
                            (0..runs).map(|_| once(&mut d)).collect::<Result<Vec<_>, _>>()?;
                        if let Some(m) = markers.as_mut() {
                            m.mark(MARK_STOP)?;
                        }
                        Ok::<_, String>((times, runs))
                    })?;
                    times.sort_by(|p, q| p.total_cmp(q));
                    let med = times[times.len() / 2];
                    let gflops = 2.0 * (a.m * n * a.k) as f64 / med / 1e9;
                    let gbps = wbytes as f64 / med / 1e9;
                    println!(
                        "{:5} {:>5} {:>3} {:>12.3} {:>9.1} {:>8.1} {:>9.1}  {}{}",
                        dtype.name(),
                        n,
                        threads,
                        med * 1e3,
                        gflops,
                        gbps,
                        2.0 * (a.m * n * a.k) as f64 / times[0] / 1e9,
                        tier,
                        if w.repacked { " (repacked)" } else { "" }
                    );
                    if let Some(path) = &a.json {
                        let obj = serde_json::json!({
                            "type": dtype.name(), "N": n, "threads": threads, "M": a.m, "K": a.k,
                            "median_s": med, "gflops": gflops, "weight_gbps": gbps,
                            "cold": a.cold_bytes > 0, "tier": tier, "repacked": w.repacked,
                            "runs": runs,
                        });
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)
                            .map_err(|e| format!("{path}: {e}"))?;
                        writeln!(f, "{obj}").map_err(|e| format!("{path}: {e}"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn count_markers_run_what_is_asked_timing_runs_at_least_ten() {
        assert_eq!(args("--count-markers").runs, 1);
        assert_eq!(args("--count-markers --runs 3").runs, 3);
        assert_eq!(args("--runs 3").runs, 10);
        assert_eq!(args("").runs, 10);
        assert!(!args("").count_markers);
        assert_eq!(args("--distinct-rows 8").distinct_rows, 8);
        assert!(parse(&["--distinct-rows".into(), "x".into()]).is_err());
    }

    #[test]
    fn distinct_rows_repeat_a_band_of_quantized_rows() {
        let (m, k) = (6, 64);
        let bytes = |w: &Weights| match &w.copies[0] {
            WeightCopy::Plain(buf) => {
                let mut out = vec![0u8; buf.size()];
                buf.read(0, &mut out).unwrap();
                out
            }
            WeightCopy::Packed(_) => panic!("plain weights were asked for"),
        };
        let band = make_weights(DType::Q8_0, m, k, 0, false, 2).unwrap();
        let full = make_weights(DType::Q8_0, m, k, 0, false, 0).unwrap();
        let (b, f) = (bytes(&band), bytes(&full));
        let row = DType::Q8_0.row_size(k).unwrap();
        assert_eq!(b.len(), m * row);
        assert_eq!(f.len(), m * row);
        // The first two rows are the full matrix's (same random values), then they repeat.
        assert_eq!(b[..2 * row], f[..2 * row]);
        assert_ne!(b[..row], b[row..2 * row]);
        for i in 2..m {
            assert_eq!(b[i * row..][..row], b[(i % 2) * row..][..row], "row {i}");
        }
        assert_ne!(f[2 * row..3 * row], f[..row]);
    }
}
