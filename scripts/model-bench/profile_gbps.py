#!/usr/bin/env python3
"""Adds weight bandwidth to the tables of `tessera bench model --profile`.

usage: tessera bench model MODEL --profile ... | python3 profile_gbps.py [--membw GBPS]

Every `MUL_MAT <type> <K>x<M>` row gets the bytes of its weights per node (ggml's block sizes,
from gguf-py), the weight bytes it streamed per second (bytes x nodes / time), and with
--membw that rate as a share of the DRAM read bandwidth. Other lines pass through.
"""

import argparse
import re
import sys

import gguf

ROW = re.compile(r"^\| MUL_MAT (\w+) (\d+)x(\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) % \|$")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--membw", type=float, help="DRAM read bandwidth, GB/s")
    a = ap.parse_args()
    extra = " weight MB | GB/s |" + (" of membw |" if a.membw else "")
    in_table = False
    for line in sys.stdin:
        line = line.rstrip("\n")
        if line.startswith("| op | nodes per"):
            in_table = True
            print(line + extra)
            continue
        if not line.startswith("|"):
            in_table = False
        if not in_table:
            print(line)
            continue
        if line.startswith("|---|"):
            print(line + "---|---|" + ("---|" if a.membw else ""))
            continue
        m = ROW.match(line)
        if m:
            qtype, k, rows, nodes, us = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4)), float(m.group(5))
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
            mb = k * rows // block * size / 1e6
            gbps = mb * nodes / us * 1e3 if us > 0 else 0.0  # MB per us is 1000 GB/s
            line += f" {mb:.1f} | {gbps:.1f} |" + (f" {gbps / a.membw:.0%} |" if a.membw else "")
        else:
            line += " | |" + (" |" if a.membw else "")
        print(line)

if __name__ == "__main__":
    main()
