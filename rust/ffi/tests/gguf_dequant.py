#!/usr/bin/env python3
"""Writes tensors of a GGUF file dequantized by the `gguf` package (gguf-py, independent of
Tessera) as raw little-endian float32, for rust/ffi/tests/file_tensors.rs.

usage: gguf_dequant.py MODEL.gguf OUT_DIR TENSOR[:ROW,ROW,...] ...
Writes OUT_DIR/<TENSOR>.f32 (all rows, or the listed rows in order).
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main() -> None:
    path, out = sys.argv[1], Path(sys.argv[2])
    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    for spec in sys.argv[3:]:
        name, _, rows = spec.partition(":")
        t = tensors[name]
        values = dequantize(t.data, t.tensor_type).astype(np.float32)
        values = values.reshape(-1, int(t.shape[0]))
        if rows:
            values = values[[int(r) for r in rows.split(",")]]
        (out / f"{name}.f32").write_bytes(values.astype("<f4").tobytes())


if __name__ == "__main__":
    main()
