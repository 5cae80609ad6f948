#!/usr/bin/env python3
"""Tests of the synthetic Q4_K_M models (run by scripts/test.sh).

Usage: python scripts/synth/test_synth.py [--tessera PATH] [--keep DIR]

1. The Q4_K_M type rules (q4_k_m.py) against llama.cpp: every tensor of every shape, at its
   real layer count, at 5 layers and at its test_layers (2; 3 for LFM2 and 4 for Qwen 3.5, the
   fewest with an attention layer that Tessera accepts; 4 for SmolLM3, whose fourth layer has
   no RoPE; 10 for Gemma 4 E2B, whose top 5 then share the KV caches of the first 5, sliding
   and full layers alike, with their double-wide MLPs), gets the type that llama.cpp's
   llama_model_quantize picked in a dry run (llama-quantize-q4_k_m.json, recorded by
   record_llama_types.py).
2. The same rules against a real llama-quantize output: the tensors of Gemma 3 270M Q4_K_M
   (TESSERA_GEMMA_GGUF, else target/models/gemma3-270m-q4_k_m.gguf), read with gguf-py.
3. Each shape written with its test_layers (synth_model.py --layers N) reads back right with gguf-py
   (metadata, vocabulary size, tensor names, shapes and types, dequantized samples finite and of
   the intended scale), is written byte for byte the same by a second run, and (with --tessera)
   loads and generates with Tessera (`tessera run`).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import synth_model as sm  # noqa: E402
from q4_k_m import Tensor, q4_k_m_types  # noqa: E402

failures: list[str] = []


def check(ok: bool, what: str, detail: object = "") -> None:
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)


def test_rules_match_llama_cpp() -> None:
    recorded = json.loads((HERE / "llama-quantize-q4_k_m.json").read_text())["types"]
    want_keys = {f"{n}/{layers}" for n, s in sm.SHAPES.items() for layers in {s.n_layer, s.test_layers, 5}}
    check(set(recorded) == want_keys, "the fixture covers every shape at its test layers, 5 and all layers",
          sorted(recorded))
    for key, want in sorted(recorded.items()):
        name, layers = key.split("/")
        s = sm.SHAPES[name]
        ts = sm.tensor_list(s, int(layers))
        got = q4_k_m_types(ts, s.arch, int(layers))
        diff = [f"{t}: {got.get(t)} (llama.cpp {want.get(t)})" for t in sorted(set(got) | set(want))
                if got.get(t) != want.get(t)]
        check(not diff, f"Q4_K_M types of {key} as llama.cpp's dry run ({len(want)} tensors)", diff[:4])


def test_rules_match_gemma_270m() -> None:
    env = os.environ.get("TESSERA_GEMMA_GGUF")
    path = Path(env) if env else sm.REPO / "target" / "models" / "gemma3-270m-q4_k_m.gguf"
    r = gguf.GGUFReader(path)
    n_layer = int(r.fields["gemma3.block_count"].contents())
    ts = [Tensor(t.name, tuple(int(x) for x in t.shape)) for t in r.tensors]
    got = q4_k_m_types(ts, "gemma3", n_layer)
    diff = [f"{t.name}: {got[t.name]} (file {t.tensor_type.name})" for t in r.tensors
            if got[t.name] != t.tensor_type.name]
    check(not diff, f"Q4_K_M types of Gemma 3 270M's {len(ts)} tensors as in the real file", diff[:4])


def test_written_models(tessera: str | None, keep: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(keep or tmp)
        for name, s in sm.SHAPES.items():
            n = s.test_layers
            args = [sys.executable, str(HERE / "synth_model.py"), name, "--layers", str(n), "--force"]
            r = subprocess.run(args + ["--out", str(out), "--check"], capture_output=True, text=True)
            check(r.returncode == 0, f"{name}, {n} layers: written and read back by gguf-py", r.stderr.strip()[-2000:])
            path = out / s.file_name(n)
            if not path.exists():
                continue
            again = out / "again"
            r2 = subprocess.run(args + ["--out", str(again)], capture_output=True, text=True)
            same = r2.returncode == 0 and filecmp.cmp(path, again / s.file_name(n), shallow=False)
            check(same, f"{name}: a second run writes the same bytes")
            (again / s.file_name(n)).unlink(missing_ok=True)
            if tessera:
                r = subprocess.run([tessera, "run", str(path), "-p", "Hello, world", "-n", "4", "-t", "2"],
                                   capture_output=True, text=True, timeout=600)
                check(r.returncode == 0, f"{name}: tessera run loads it and generates", r.stderr.strip()[-2000:])
            path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", help="the tessera CLI, to load and run each written model")
    ap.add_argument("--keep", help="write the models into this folder instead of a temporary one")
    a = ap.parse_args()
    test_rules_match_llama_cpp()
    test_rules_match_gemma_270m()
    test_written_models(a.tessera, a.keep)
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
