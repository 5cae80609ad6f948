#!/usr/bin/env python3
"""(Copied from /work/shared/anchor, the peers' benchmark scripts, with IQ4_NL and Q2_K among
the types ggml repacks on x86; it runs the copy of bench_ggml_mulmat.py beside it.)

Side-by-side matmul benchmark: Tessera against ggml and candle, in one run, as ratios.

Each configuration (type, N, threads, hot or cold) is measured for every engine in turn,
A B C A B C ..., so that drift of this shared machine hits all of them alike. The figure that
counts is the ratio of Tessera's median GFLOPS to the best peer's.

Usage (after `bash setup.sh`, which builds the peers into $ANCHOR, default /tmp/anchor):
  python3 compare.py --tessera path/to/tessera [--types Q4_0,Q8_0] [--ns 1,16,128]
                     [--threads 1,2] [--cold] [--reps 2] [--json out.jsonl]

Tessera is called as:
  tessera bench matmul --types T --ns N --threads t -M 4096 -K 4096 [--cold-bytes B] --json FILE
and must append one JSON object per configuration to FILE with at least the keys
  type, N, threads, median_s, gflops, weight_gbps
measured as bench_ggml_mulmat.py does: C[n,m] = sum_k A[m,k] B[n,k], A the weights of the
type, B F32 activations, activation conversion included in the time, at least 10 timed runs
after 3 warm-ups, median reported; cold = at least B bytes of distinct weight matrices cycled.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ANCHOR = os.environ.get("ANCHOR", "/tmp/anchor")
PY = os.path.join(ANCHOR, "venv", "bin", "python")
CANDLE_CANDIDATES = [
    os.path.join(ANCHOR, "candle_target", "release", "candle_qmatmul_bench"),
    os.path.join(ANCHOR, "candle_bench", "target", "release", "candle_qmatmul_bench"),
    os.path.join(HERE, "candle_bench", "target", "release", "candle_qmatmul_bench"),
]
CANDLE_TYPES = {"F32", "Q8_0", "Q4_0", "Q4_K", "Q6_K"}
# ggml repacks these on x86 (IQ4_NL in its 8 x 8 layout; Q2_K also with AVX-512)
REPACK_TYPES = {"Q4_0", "Q4_K", "IQ4_NL", "Q2_K"}


def run_ggml(t, n, thr, cold_bytes, path):
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as fh:
        cmd = [PY, os.path.join(HERE, "bench_ggml_mulmat.py"), "--path", path, "--types", t,
               "--ns", str(n), "--threads", str(thr), "--no-check", "--json", fh.name]
        if cold_bytes:
            cmd += ["--cold-bytes", str(cold_bytes), "--min-time", "1.5"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(line) for line in fh if line.strip()]
    return rows[-1]["gflops"] if rows else None


def run_candle(t, n, thr, cold_bytes):
    exe = next((c for c in CANDLE_CANDIDATES if os.access(c, os.X_OK)), None)
    if exe is None or t not in CANDLE_TYPES:
        return None
    args = [exe, t, str(n)] + (["4096", "4096", str(cold_bytes)] if cold_bytes else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True,
                         env=dict(os.environ, RAYON_NUM_THREADS=str(thr))).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == t and f[1] == str(n):
            return float(f[5])
    return None


def run_tessera(exe, t, n, thr, cold_bytes):
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as fh:
        cmd = [exe, "bench", "matmul", "--types", t, "--ns", str(n), "--threads", str(thr),
               "-M", "4096", "-K", "4096", "--json", fh.name]
        if cold_bytes:
            cmd += ["--cold-bytes", str(int(cold_bytes))]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in fh if line.strip()]
    return rows[-1]["gflops"] if rows else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True, help="path to the tessera CLI binary")
    ap.add_argument("--types", default="F32,F16,Q8_0,Q4_0,Q4_K")
    ap.add_argument("--ns", default="1,16,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cold", action="store_true", help="weights streamed from RAM (1.5 GB)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", help="append one JSON line per configuration")
    a = ap.parse_args()
    cold = 1.5e9 if a.cold else 0
    print(f"{'type':5} {'N':>4} {'thr':>3} {'tessera':>8} {'ggml':>8} {'ggml-rp':>8} {'candle':>8}"
          f" {'ratio':>6}  (GFLOPS medians; ratio = tessera / best peer; {'cold' if cold else 'hot'})")
    worst = None
    for t in a.types.split(","):
        for n in [int(x) for x in a.ns.split(",")]:
            for thr in [int(x) for x in a.threads.split(",")]:
                res = {"tessera": [], "ggml": [], "ggml-rp": [], "candle": []}
                for _ in range(a.reps):
                    res["tessera"].append(run_tessera(a.tessera, t, n, thr, cold))
                    res["ggml"].append(run_ggml(t, n, thr, cold, "plain"))
                    if t in REPACK_TYPES:
                        res["ggml-rp"].append(run_ggml(t, n, thr, cold, "repack"))
                    res["candle"].append(run_candle(t, n, thr, cold))
                med = {k: (statistics.median([x for x in v if x is not None])
                           if any(x is not None for x in v) else None) for k, v in res.items()}
                peers = [v for k, v in med.items() if k != "tessera" and v]
                ratio = med["tessera"] / max(peers) if med["tessera"] and peers else None
                fmt = lambda v: f"{v:8.1f}" if v else f"{'-':>8}"
                print(f"{t:5} {n:>4} {thr:>3} {fmt(med['tessera'])} {fmt(med['ggml'])}"
                      f" {fmt(med['ggml-rp'])} {fmt(med['candle'])} "
                      f"{(f'{ratio:6.2f}' if ratio else '     -')}", flush=True)
                if ratio is not None:
                    worst = ratio if worst is None else min(worst, ratio)
                if a.json:
                    with open(a.json, "a") as fh:
                        fh.write(json.dumps({"type": t, "N": n, "threads": thr, "cold": bool(cold),
                                             **med, "ratio": ratio}) + "\n")
    print(f"worst ratio: {worst:.2f}" if worst is not None else "worst ratio: n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
