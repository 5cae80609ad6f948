#!/usr/bin/env python3
"""Adds weight bandwidth (generation) and arithmetic rate (prompt) to the tables of
`tessera bench model --profile`.

usage: tessera bench model MODEL --profile ... | python3 profile_gbps.py [--membw GBPS]

In a generation table ("profile, tgN"), every `MUL_MAT <type> <K>x<M>` row gets the bytes of its
weights per node (ggml's block sizes, from gguf-py), the weight bytes it streamed per second
(bytes x nodes / time) and, with --membw, that rate as a share of the DRAM read bandwidth. In a
prompt table ("profile, ppN") it gets GOPS instead: 2 K M N operations per node over the time
(N the prompt's tokens; the output projection computes only the last row there, so its figure
is N times too high). Other lines pass through.
"""

import argparse
import re
import sys

import gguf

ROW = re.compile(r"^\| MUL_MAT (\w+) (\d+)x(\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) % \|$")
TITLE = re.compile(r"^profile, (pp|tg)(\d+),")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--membw", type=float, help="DRAM read bandwidth, GB/s")
    a = ap.parse_args()
    phase, n_tokens, in_table = None, 0, False
    for line in sys.stdin:
        line = line.rstrip("\n")
        m = TITLE.match(line)
        if m:
            phase, n_tokens = m.group(1), int(m.group(2))
        cols = [" weight MB |", " GB/s |"] + ([" of membw |"] if a.membw else []) if phase == "tg" else [" GOPS |"]
        if line.startswith("| op | nodes per"):
            in_table = True
            print(line + "".join(cols))
            continue
        if not line.startswith("|"):
            in_table = False
        if not in_table:
            print(line)
            continue
        if line.startswith("|---|"):
            print(line + "---|" * len(cols))
            continue
        m = ROW.match(line)
        if not m:
            print(line + " |" * len(cols))
            continue
        qtype, k, rows, nodes, us = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4)), float(m.group(5))
        if phase == "tg":
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
            mb = k * rows // block * size / 1e6
            gbps = mb * nodes / us * 1e3 if us > 0 else 0.0  # MB per us is 1000 GB/s
            line += f" {mb:.1f} | {gbps:.1f} |" + (f" {gbps / a.membw:.0%} |" if a.membw else "")
        else:
            gops = 2 * k * rows * n_tokens * nodes / us / 1e3 if us > 0 else 0.0
            line += f" {gops:.0f} |"
        print(line)


if __name__ == "__main__":
    main()
