#!/usr/bin/env python3
"""Tessera against llama.cpp generating after DEPTH cached tokens, side by side (A B A B), per
depth and thread count: `tessera bench model MODEL -p 0 -n TG -d DEPTH -t T -r REPS` against
llama_depth.py (llama.cpp, flash attention off and on, its better figure counting).

usage: python3 depth_compare.py --tessera PATH --model MODEL.gguf [--depths 1024,4096]
                                [--threads 1,2] [--tg 128] [--reps 2] [--rounds 1]
                                [--flash both] [--json FILE]
Prints a table (median over rounds of each run's median; the spread is the lowest and highest
single run); with --json appends one object per cell with every run. The Tessera kernel tier
is whatever TESSERA_CPU_TIER selects.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(os.environ.get("ANCHOR", "/tmp/anchor"), "venv", "bin", "python")


def rows_of(cmd):
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as fh:
        r = subprocess.run(cmd + ["--json", fh.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"depth_compare: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        return [json.loads(line) for line in fh if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--depths", default="1024,4096")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--flash", default="both", choices=["both", "on", "off"])
    ap.add_argument("--json")
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    runs = {}  # (depth, threads, engine) -> [run medians], plus "all" single runs
    tier = None
    for _ in range(a.rounds):
        for d in depths:
            for th in threads:
                t = rows_of([a.tessera, "bench", "model", a.model, "-p", "0", "-n", str(a.tg), "-d", str(d),
                             "-t", str(th), "-r", str(a.reps)])[-1]
                tier = t.get("tier", tier)
                lrows = rows_of([PY, os.path.join(HERE, "llama_depth.py"), a.model, "--depth", str(d),
                                 "--threads", str(th), "--tg", str(a.tg), "--reps", str(a.reps),
                                 "--flash", a.flash])
                best = max(lrows, key=lambda r: r["tg_tps"])
                for eng, med, every in (("tessera", t["tg_tps"], t["tg_runs"]),
                                        ("llama.cpp", best["tg_tps"], best["tg_runs"])):
                    cell = runs.setdefault((d, th, eng), {"medians": [], "runs": []})
                    cell["medians"].append(med)
                    cell["runs"] += every
                runs[(d, th, "llama.cpp")].setdefault("flash_attn", []).append(best["flash_attn"])
    print(f"| depth | threads | test | Tessera ({tier}) t/s | llama.cpp t/s | ratio | runs min-max (T / L) |")
    print("|---|---|---|---|---|---|---|")
    for d in depths:
        for th in threads:
            tc, lc = runs[(d, th, "tessera")], runs[(d, th, "llama.cpp")]
            tv, lv = statistics.median(tc["medians"]), statistics.median(lc["medians"])
            print(f"| {d} | {th} | tg{a.tg} @ d{d} | {tv:.2f} | {lv:.2f} | {tv / lv:.2f} | "
                  f"{min(tc['runs']):.2f}-{max(tc['runs']):.2f} / {min(lc['runs']):.2f}-{max(lc['runs']):.2f} |")
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps({"model": a.model, "tier": tier, "depth": d, "threads": th,
                                        "tg_tokens": a.tg, "tessera_tps": tv, "llama_tps": lv,
                                        "tessera_runs": tc["runs"], "llama_runs": lc["runs"],
                                        "llama_flash_attn": lc["flash_attn"]}) + "\n")


if __name__ == "__main__":
    main()
