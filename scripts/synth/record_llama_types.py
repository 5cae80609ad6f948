#!/usr/bin/env python3
"""Records the tensor types llama.cpp's own `llama-quantize ... Q4_K_M` picks for each synthetic
shape, into scripts/synth/llama-quantize-q4_k_m.json (the fixture test_synth.py checks the
rules of q4_k_m.py against).

Usage (an interpreter with llama-cpp-python 0.3.36 and gguf, e.g. the anchor's):
    /tmp/anchor/venv/bin/python scripts/synth/record_llama_types.py [--sdist TARBALL]

For each shape (at its real layer count, at 5 layers and at its test_layers) it writes a sparse F16 twin
(synth_model.py --twin: the header, then a hole as long as the data) and runs llama.cpp's
llama_model_quantize with ftype MOSTLY_Q4_K_M and dry_run on it, which decides every tensor's
type as a real quantization does and logs it without quantizing; its log (on standard error)
is parsed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synth_model as sm  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "llama-quantize-q4_k_m.json"
LINE = re.compile(r"\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\w+), size =[^\n(]*(?:\((\w+)\))?")



def captured_stderr(call):
    """call()'s result and what it (llama.cpp's logger included) wrote to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            result = call()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return result, f.read().decode(errors="replace")


def dry_run(path: Path) -> dict[str, str]:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.dry_run = True
    params.nthread = 1
    rc, text = captured_stderr(lambda: llama_cpp.llama_model_quantize(
        str(path).encode(), str(path.with_suffix(".out")).encode(), ctypes.byref(params)))
    if rc != 0:
        sys.exit(f"record: llama_model_quantize failed ({rc}) on {path}:\n{text[-3000:]}")
    types = {}
    for m in LINE.finditer(text):
        name, cur, new = m.groups()
        types[name] = (new or cur).upper()
    if not types:
        sys.exit(f"record: no tensor lines in llama.cpp's log:\n{text[-3000:]}")
    return types


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist")
    ap.add_argument("--gemma-vocab")
    args = ap.parse_args()
    llama_cpp.llama_backend_init()
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, s in sm.SHAPES.items():
            tok = sm.shape_tokenizer(s, args)
            for layers in sorted({s.n_layer, s.test_layers, 5}):
                path = Path(tmp) / f"{name}-{layers}.gguf"
                sm.write_twin(s, path, layers, tok)
                types = dry_run(path)
                path.unlink()
                out[f"{name}/{layers}"] = types
                counts: dict[str, int] = {}
                for t in types.values():
                    counts[t] = counts.get(t, 0) + 1
                print(f"{name}, {layers} layers: {len(types)} tensors {counts}", file=sys.stderr)
    doc = {
        "source": "llama-cpp-python 0.3.36, llama_model_quantize(ftype MOSTLY_Q4_K_M, dry_run) on "
                  "sparse F16 twins of the synthetic shapes (scripts/synth/record_llama_types.py)",
        "types": out,
    }
    FIXTURE.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"record: wrote {FIXTURE}", file=sys.stderr)


if __name__ == "__main__":
    main()
