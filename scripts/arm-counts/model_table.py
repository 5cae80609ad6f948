"""The table of `scripts/arm-counts.sh model` from its run folder.

Each run CPU.ENGINE.RUN (RUN: lo, pphi, tghi; see scripts/arm-counts-model.sh) left RUN.regions
(the plugin's lines: Tessera's marker regions, then "all", the whole process) and RUN.syms (the
whole process per function). Per prompt token = (pphi - lo) / (PP_HI - PP_LO) of the whole-run
counts, per generated token = (tghi - lo) / (TG_HI - TG_LO). Tessera's marker regions (prompt
decode, generation loop) give the same differences directly: the check that the set-up cancels.

Usage: python3 model_table.py RUN_DIR CPU.. [--json FILE] [--top N]
"""

import json
import re
import subprocess
import sys

CLASSES = ["total", "dot", "mmla", "load", "store", "simd", "other"]
ENGINES = ["tessera", "llama"]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def diff(a, b, n):
    """(a - b) / n for every class."""
    return {c: (a[c] - b[c]) / n for c in CLASSES}


def demangle(names):
    """C++ and Rust (legacy) symbols through c++filt, without Rust's hash suffix."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = list(names)
    return {n: re.sub(r"::h[0-9a-f]{16}$", "", d) for n, d in zip(names, out)}


def main():
    args = sys.argv[1:]
    json_out = None
    top = 6
    if "--json" in args:
        i = args.index("--json")
        json_out = args[i + 1]
        del args[i:i + 2]
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    run_dir, cpus = args[0], args[1:]
    sizes = open(f"{run_dir}/sizes").read().split()
    pp_lo, pp_hi, tg_lo, tg_hi = int(sizes[1]), int(sizes[2]), int(sizes[4]), int(sizes[5])
    dpp, dtg = pp_hi - pp_lo, tg_hi - tg_lo

    cells = {}  # (cpu, engine) -> {"pp": counts, "tg": counts, "setup": counts, ...}
    for cpu in cpus:
        for eng in ENGINES:
            runs = {r: read_jsonl(f"{run_dir}/{cpu}.{eng}.{r}.regions") for r in ("lo", "pphi", "tghi")}
            whole = {r: next(x for x in v if x["region"] == "all") for r, v in runs.items()}
            cell = {
                "pp": diff(whole["pphi"], whole["lo"], dpp),
                "tg": diff(whole["tghi"], whole["lo"], dtg),
                "run_lo": whole["lo"],
            }
            if eng == "tessera":
                # Regions: prompt decode, then the generation loop (one repetition).
                reg = {r: [x for x in v if x["region"] != "all"] for r, v in runs.items()}
                for r, v in reg.items():
                    if len(v) != 2:
                        sys.exit(f"arm-counts: {cpu}.{eng}.{r}: {len(v)} marker regions, not 2")
                cell["pp_markers"] = diff(reg["pphi"][0], reg["lo"][0], dpp)
                cell["tg_markers"] = diff(reg["tghi"][1], reg["lo"][1], dtg)
                cell["pp_region_per_token"] = reg["pphi"][0]["total"] / pp_hi
                cell["tg_region_per_token"] = reg["tghi"][1]["total"] / tg_hi
            syms = {r: {s["symbol"]: s for s in read_jsonl(f"{run_dir}/{cpu}.{eng}.{r}.syms")}
                    for r in ("lo", "pphi", "tghi")}
            for phase, hi, n in (("pp", "pphi", dpp), ("tg", "tghi", dtg)):
                zero = {c: 0 for c in CLASSES}
                per = {name: diff(s, syms["lo"].get(name, zero), n)
                       for name, s in syms[hi].items()}
                ranked = sorted(per.items(), key=lambda kv: -kv[1]["total"])
                cell[phase + "_functions"] = [dict(symbol=k, **v) for k, v in ranked[:top * 3]]
            cells[(cpu, eng)] = cell

    def share(c):
        t = c["total"] or 1
        return "{:>4.1f} {:>4.1f} {:>4.1f}".format(100 * c["dot"] / t, 100 * c["mmla"] / t,
                                                   100 * c["load"] / t)

    print(f"Guest instructions per token (M), one thread; prompt: tokens {pp_lo}..{pp_hi}, "
          f"generation: tokens {tg_lo}..{tg_hi}")
    print("T: tessera bench model, G: llama-bench; shares: % sdot, smmla, loads of each count")
    print()
    print(f"{'cpu':<10} {'phase':<5} | {'T':>8} {'G':>8} {'T/G':>5} | T dot mmla ld% | "
          f"G dot mmla ld%")
    for cpu in cpus:
        for phase in ("pp", "tg"):
            t, g = cells[(cpu, "tessera")][phase], cells[(cpu, "llama")][phase]
            print(f"{cpu:<10} {phase:<5} | {t['total'] / 1e6:>8.2f} {g['total'] / 1e6:>8.2f} "
                  f"{t['total'] / g['total']:>5.2f} | {share(t)} | {share(g)}")
    print()
    print("Check (Tessera): per token from its marker regions' differences against the whole "
          "runs' (set-up cancels when equal); whole region / tokens")
    for cpu in cpus:
        c = cells[(cpu, "tessera")]
        for phase in ("pp", "tg"):
            m, w = c[phase + "_markers"]["total"], c[phase]["total"]
            region = c[phase + "_region_per_token"]
            print(f"{cpu:<10} {phase}: markers {m / 1e6:.3f} M, whole runs {w / 1e6:.3f} M "
                  f"({100 * (w - m) / m:+.3f}%); region {region / 1e6:.3f} M")
    print()
    print("Set-up (the lo run's whole count, G instructions): " + ", ".join(
        f"{cpu} T {cells[(cpu, 'tessera')]['run_lo']['total'] / 1e9:.1f} "
        f"G {cells[(cpu, 'llama')]['run_lo']['total'] / 1e9:.1f}" for cpu in cpus))

    names = sorted({f["symbol"] for c in cells.values() for p in ("pp", "tg")
                    for f in c[p + "_functions"]})
    pretty = demangle(names)
    print()
    print(f"Functions per token (top {top}; M instructions, % of the phase, dot mmla ld%)")
    for cpu in cpus:
        for phase in ("pp", "tg"):
            for eng in ENGINES:
                c = cells[(cpu, eng)]
                total = c[phase]["total"]
                print(f"{cpu} {phase} {eng}:")
                for f in c[phase + "_functions"][:top]:
                    print(f"  {f['total'] / 1e6:>8.3f} {100 * f['total'] / total:>5.1f}% "
                          f"{share(f)}  {pretty.get(f['symbol'], f['symbol'])[:110]}")
    if json_out:
        rows = []
        for (cpu, eng), c in cells.items():
            for f in c["pp_functions"] + c["tg_functions"]:
                f["name"] = pretty.get(f["symbol"], f["symbol"])
            rows.append({"cpu": cpu, "engine": eng, "pp_tokens": [pp_lo, pp_hi],
                         "tg_tokens": [tg_lo, tg_hi], **c})
        with open(json_out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
