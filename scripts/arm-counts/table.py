"""The table of scripts/arm-counts.sh from its run folder.

Each job `CPU ENGINE TYPE REPACK` left `TAG.lines` (one JSON object per multiplication, from
`tessera bench matmul --json` or ggml_matmul) and `TAG.regions` (the plugin's counted regions,
the same order, then the whole run). Instructions per multiply-add = region total / (M K N runs).

Usage: python3 table.py RUN_DIR JOBS_FILE [--json FILE]
"""

import json
import sys

CLASSES = ["total", "dot", "mmla", "load", "store", "simd", "other"]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    run_dir, jobs_file = sys.argv[1], sys.argv[2]
    json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    cells = {}  # (type, N, cpu) -> {engine: {"plain": counts, "repacked": counts}}
    cpus, types, ns = [], [], []
    for job in open(jobs_file).read().split("\n"):
        if not job.strip():
            continue
        cpu, engine, dtype, repack = job.split()
        tag = f"{run_dir}/{cpu}.{engine}.{dtype}.{repack}"
        lines = read_jsonl(tag + ".lines")
        regions = [r for r in read_jsonl(tag + ".regions") if r["region"] != "all"]
        if len(lines) != len(regions):
            sys.exit(f"arm-counts: {tag}: {len(lines)} results but {len(regions)} regions")
        for line, reg in zip(lines, regions):
            n = line["N"]
            runs = line.get("runs", line.get("reps", 1))
            macs = line["M"] * line["K"] * n * runs
            if line.get("max_rel_err", 0) > 1e-2:
                print(f"arm-counts: WARNING {tag} N={n}: ggml's result is off "
                      f"(max relative error {line['max_rel_err']})", file=sys.stderr)
            path = "repacked" if line["repacked"] else "plain"
            key = (dtype.upper(), n, cpu)
            per = {c: reg[c] / runs for c in CLASSES}
            per["per_mac"] = reg["total"] / macs
            per["macs"] = macs / runs
            cells.setdefault(key, {}).setdefault(engine, {})[path] = per
            for lst, v in ((cpus, cpu), (types, dtype.upper()), (ns, n)):
                if v not in lst:
                    lst.append(v)

    def default(eng):
        return eng.get("repacked") or eng.get("plain")

    def share(c):
        return "{:>4.1f} {:>4.1f} {:>4.1f}".format(
            100 * c["dot"] / c["total"], 100 * c["mmla"] / c["total"], 100 * c["load"] / c["total"])

    def per_mac(eng, path):
        return "{:>7.4f}".format(eng[path]["per_mac"]) if path in eng else "{:>7}".format("-")

    head = ("{:5} {:>4} {:10} | {:>7} {:>7} | {:>7} {:>7} | {:>5} {:>5} | {:>14} | {:>14}"
            .format("type", "N", "cpu", "T plain", "T repck", "G plain", "G repck", "ratio",
                    "plain", "T dot mmla ld%", "G dot mmla ld%"))
    print(head)
    print("-" * len(head))
    rows = []
    for dtype in types:
        for n in ns:
            for cpu in cpus:
                c = cells.get((dtype, n, cpu))
                if not c or "tessera" not in c or "ggml" not in c:
                    continue
                t, g = default(c["tessera"]), default(c["ggml"])
                ratio = t["per_mac"] / g["per_mac"]
                tp, gp = c["tessera"].get("plain"), c["ggml"].get("plain")
                plain = tp["per_mac"] / gp["per_mac"] if tp and gp else float("nan")
                print("{:5} {:>4} {:10} | {} {} | {} {} | {:>5.2f} {:>5.2f} | {} | {}".format(
                    dtype, n, cpu, per_mac(c["tessera"], "plain"),
                    per_mac(c["tessera"], "repacked"), per_mac(c["ggml"], "plain"),
                    per_mac(c["ggml"], "repacked"), ratio, plain, share(t), share(g)))
                rows.append({"type": dtype, "N": n, "cpu": cpu, "ratio": ratio,
                             "plain_ratio": plain, "tessera": c["tessera"], "ggml": c["ggml"]})
    print("\ninstructions per multiply-add (M K N), T: Tessera, G: ggml, plain and repacked "
          "(CPU_REPACK) weights, '-' where the engine does not repack this type on this CPU; "
          "ratio: T / G on the default paths (repacked where it repacks); plain: T / G on plain "
          "weights; shares (default paths): % of the instructions that are sdot/udot, "
          "smmla/ummla, loads")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
