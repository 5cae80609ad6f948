#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) generating after DEPTH cached tokens, as llama-bench's -d does:
the cache is cleared, DEPTH + 1 tokens are decoded (untimed, in batches of 512), then TG tokens
are generated one at a time and timed. The same sequence as `tessera bench model -p 0 -n TG
-d DEPTH` (random token ids; the context holds DEPTH + TG + 1 tokens at least).

usage: $ANCHOR/venv/bin/python llama_depth.py MODEL.gguf --depth D [--threads 1,2] [--tg 128]
                                 [--reps 2] [--flash both|on|off] [--json FILE]
Prints (and appends to FILE) one JSON object per (flash_attn, threads): tg_tps (median) and
every run.
"""

import argparse
import json
import statistics
import time

import numpy as np
from llama_cpp import Llama


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--depth", type=int, required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--flash", default="both", choices=["both", "on", "off"])
    ap.add_argument("--json")
    a = ap.parse_args()
    flashes = {"both": (False, True), "on": (True,), "off": (False,)}[a.flash]
    for flash in flashes:
        for th in [int(x) for x in a.threads.split(",")]:
            llm = Llama(model_path=a.model, n_ctx=max(2048, a.depth + a.tg + 8), n_threads=th,
                        n_threads_batch=th, n_batch=512, n_ubatch=512, flash_attn=flash,
                        verbose=False, seed=0)
            rng = np.random.default_rng(0)
            toks = [int(t) for t in rng.integers(10, llm.n_vocab() - 1, size=a.depth + a.tg + 1)]
            llm.reset()
            llm.eval(toks[:64])  # warm-up
            runs = []
            for _ in range(a.reps):
                llm.reset()
                llm.eval(toks[: a.depth + 1])
                t = time.perf_counter()
                for i in range(a.tg):
                    llm.eval([toks[a.depth + 1 + i]])
                runs.append(a.tg / (time.perf_counter() - t))
            r = dict(engine="llama.cpp", flash_attn=flash, threads=th, depth=a.depth,
                     tg_tokens=a.tg, tg_tps=statistics.median(runs), tg_runs=runs)
            print(json.dumps(r), flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
            del llm


if __name__ == "__main__":
    main()
