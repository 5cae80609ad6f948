#!/usr/bin/env python3
"""The table of a scripts/model-bench.sh run: usage `python summary.py RESULTS_DIR`.

Reads meta.txt, membw-t*.txt, compare-<tier>-<model>.txt (model_compare.py's tables) and
depth-<tier>-<model>.jsonl (depth_compare.py) and prints markdown: every cell with its ratio,
generation as a share of the DRAM bound (weight bytes per token x tokens/s over membw's DRAM
read bandwidth at that thread count), the cells below the bar of issue 34 (prompt 1.5x,
generation 1.25x llama.cpp), and llama.cpp's figures measured again in another tier's pass
with the same build as the noise of the run.
"""

import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "synth"))
import synth_model  # noqa: E402

ROW = re.compile(r"^\| (\d+) \| (pp\d+|tg\d+) t/s \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|")
BAR = {"pp": 1.5, "tg": 1.25}


def main() -> None:
    out = Path(sys.argv[1])
    meta = (out / "meta.txt").read_text().splitlines()
    models = {}
    for line in meta:
        if line.startswith("model: "):
            name, path = line[len("model: "):].split(" ", 1)
            models[name] = Path(path)
    bw = {}
    for f in sorted(out.glob("membw-t*.txt")):
        m = re.search(r"DRAM read \(sum\)\s+median\s+([\d.]+) GB/s", f.read_text())
        if m:
            bw[int(f.stem.split("-t")[1])] = float(m.group(1)) * 1e9
    print("## Tessera against llama.cpp, whole models (scripts/model-bench.sh)\n")
    for line in meta:
        if not line.startswith("model: "):
            print(f"- {line}")
    if bw:
        print("- membw DRAM read (median): " + ", ".join(f"{t} thread(s) {b / 1e9:.1f} GB/s" for t, b in sorted(bw.items())))
    print()
    print("| model | weights/token | tier | threads | test | Tessera t/s | llama.cpp t/s | ratio | Tessera / DRAM bound | llama.cpp / DRAM bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    below, llama_again = [], {}
    native = next((line.split(": ", 1)[1] for line in meta if line.startswith("native tier: ")), "")
    # Which llama.cpp each tier's pass measured (older runs: the native build in every pass).
    peers = {line.split()[3].rstrip(":"): line.split(": ", 1)[1] for line in meta if line.startswith("peer for tier ")}
    order = list(models)

    def key(p: Path) -> tuple:
        _, tier, model = p.stem.split("-", 2)
        return (order.index(model) if model in order else len(order), model, tier != native, tier)

    for f in sorted(out.glob("compare-*.txt"), key=key):
        _, tier, model = f.stem.split("-", 2)
        wb = synth_model.weight_bytes_per_token(models[model]) if model in models else None
        for line in f.read_text().splitlines():
            m = ROW.match(line)
            if not m:
                continue
            th, test, tv, lv, ratio = int(m.group(1)), m.group(2), float(m.group(3)), float(m.group(4)), float(m.group(5))
            llama_again.setdefault((peers.get(tier, ""), model, th, test), []).append(lv)
            share = ["", ""]
            if test.startswith("tg") and wb and th in bw:
                share = [f"{v * wb / bw[th]:.0%}" for v in (tv, lv)]
            size = f"{wb / 2**20:.0f} MiB" if wb else ""
            print(f"| {model} | {size} | {tier} | {th} | {test} | {tv:.1f} | {lv:.1f} | {ratio:.2f} | {share[0]} | {share[1]} |")
            if ratio < BAR[test[:2]]:
                below.append(f"{model} {tier} t={th} {test} {ratio:.2f}")
    depth_rows = []
    for f in sorted(out.glob("depth-*.jsonl"), key=key):
        depth_rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    if depth_rows:
        print("\n| model | tier | threads | test | Tessera t/s | llama.cpp t/s | ratio | runs min-max Tessera / llama.cpp |")
        print("|---|---|---|---|---|---|---|---|")
        for r in depth_rows:
            name = next((n for n, p in models.items() if str(p) == r["model"]), r["model"])
            ratio = r["tessera_tps"] / r["llama_tps"]
            print(f"| {name} | {r['tier']} | {r['threads']} | tg{r['tg_tokens']} @ d{r['depth']} | "
                  f"{r['tessera_tps']:.2f} | {r['llama_tps']:.2f} | {ratio:.2f} | "
                  f"{min(r['tessera_runs']):.2f}-{max(r['tessera_runs']):.2f} / "
                  f"{min(r['llama_runs']):.2f}-{max(r['llama_runs']):.2f} |")
            if ratio < BAR["tg"]:
                below.append(f"{name} {r['tier']} t={r['threads']} tg@d{r['depth']} {ratio:.2f}")
    spreads = [(max(v) - min(v)) / statistics.mean(v) for v in llama_again.values() if len(v) > 1]
    if spreads:
        print(f"\nNoise: llama.cpp measured once per tier pass, where two passes ran the same build: "
              f"{len(spreads)} cells differ between passes by {statistics.median(spreads):.1%} "
              f"(median), {max(spreads):.1%} (largest).")
    print(f"\nBelow the bar (prompt {BAR['pp']}x, generation {BAR['tg']}x): "
          + (", ".join(below) if below else "none"))


if __name__ == "__main__":
    main()
