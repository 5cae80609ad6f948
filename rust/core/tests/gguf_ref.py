#!/usr/bin/env python3
"""Checks Tessera's GGUF block formats against the `gguf` package (and optionally ggml itself).

Usage: gguf_ref.py DIR

DIR is written by rust/core/tests/quant_gguf.rs:
  manifest.json  {"n": values per row, "rows": [row names], "types": [type names],
                  "sizes": {type name: [values per block, bytes per block]}}
  input.f32      the input rows, float32 little-endian, len(rows) * n values
  TYPE.q         Tessera's quantization of every row (row after row)
  TYPE.deq       Tessera's dequantization of TYPE.q, float32
  TYPE.rand.q    (quantized types) rows of random block bytes with finite scales
  TYPE.rand.deq  Tessera's dequantization of TYPE.rand.q

For every type this script compares, wherever `gguf.quants` implements it:
  * quantize:   gguf's bytes == Tessera's bytes, byte for byte;
  * dequantize: gguf's dequantization of Tessera's bytes == Tessera's values, bit for bit.
Where gguf lacks a type it does what it can and says so:
  * Q8_1: d and qs must equal gguf's Q8_0 bytes (ggml quantizes both alike), and
    s must be f16(d_f32 * sum(qs)) computed in NumPy;
  * Q8_K: a NumPy model of ggml's quantize_row_q8_K_ref must give the same bytes.

If the environment variable TESSERA_GGML_LIB names ggml's shared library (libggml-base.so, as
shipped e.g. by the llama-cpp-python package), every type is also compared with ggml's own
quantize_row_*_ref and dequantize_row_* through ctypes.

Prints one "OK TYPE: ..." line per type, and exits non-zero with a message naming the type and
row on the first disagreement. Exits 2 when numpy or gguf is missing.
"""

import ctypes
import json
import os
import sys

try:
    import numpy as np
    from gguf import quants as gq
    from gguf.constants import GGMLQuantizationType as QT, GGML_QUANT_SIZES
except ImportError as e:  # pragma: no cover - environment problem
    sys.stderr.write(
        f"gguf_ref.py: cannot import numpy/gguf ({e}).\n"
        f"Install them for {sys.executable} with:  {sys.executable} -m pip install gguf numpy\n"
        "(or point TESSERA_PYTHON at an interpreter that has them)\n"
    )
    sys.exit(2)


class Mismatch(Exception):
    pass


def fail(msg):
    raise Mismatch(msg)


# (values per block, bytes per block) of every type, from the manifest (that is, from Tessera's
# DType, which follows ggml-common.h). gguf's own GGML_QUANT_SIZES is not used for the layout:
# gguf 0.19 lists Q8_1 as 40 bytes (f32 d and s), while ggml's block_q8_1 has two halves: 36.
SIZES = {}


def sizes(tname):
    return SIZES[tname]


def compare_bytes(tname, what, rows, ref, mine):
    """ref, mine: uint8 arrays of shape (rows, row_bytes)."""
    if ref.shape != mine.shape:
        fail(f"{tname}: {what}: shape {ref.shape} != {mine.shape}")
    bad = np.argwhere(ref != mine)
    if len(bad):
        r, off = bad[0]
        _, tsize = sizes(tname)
        blk = off // tsize
        fail(
            f"{tname}: {what}: {len(bad)} bytes differ; first in row {r} ({rows[r]!r}), "
            f"block {blk}, byte {off - blk * tsize} of the block: reference "
            f"{ref[r, blk * tsize:(blk + 1) * tsize].tobytes().hex()} vs Tessera "
            f"{mine[r, blk * tsize:(blk + 1) * tsize].tobytes().hex()}"
        )


def compare_values(tname, what, rows, ref, mine):
    """Exact comparison of float32 arrays of shape (rows, n): same bits (so -0.0 != 0.0)."""
    ref = np.ascontiguousarray(ref, dtype=np.float32)
    if ref.shape != mine.shape:
        fail(f"{tname}: {what}: shape {ref.shape} != {mine.shape}")
    bad = np.argwhere(ref.view(np.uint32) != mine.view(np.uint32))
    if len(bad):
        r, i = bad[0]
        fail(
            f"{tname}: {what}: {len(bad)} values differ; first in row {r} ({rows[r]!r}) at "
            f"index {i}: reference {ref[r, i]!r} vs Tessera {mine[r, i]!r}"
        )


def gguf_quantize(tname, x):
    """gguf's quantization as (rows, row_bytes) uint8, or None when gguf lacks it."""
    if tname not in QT.__members__:
        return None
    try:
        q = gq.quantize(x, QT[tname])
    except NotImplementedError:
        return None
    return np.ascontiguousarray(q).view(np.uint8).reshape(x.shape[0], -1)


def gguf_dequantize(tname, q):
    if tname not in QT.__members__:
        return None
    try:
        return gq.dequantize(q, QT[tname])
    except NotImplementedError:
        return None


def q8_1_check(rows, x, mine):
    """Q8_1 = Q8_0's d and qs, plus s = f16(d_f32 * sum(qs))."""
    ref8 = gguf_quantize("Q8_0", x)
    nb = x.shape[1] // 32
    m = mine.reshape(x.shape[0], nb, 36)
    r = ref8.reshape(x.shape[0], nb, 34)
    d_qs_mine = np.concatenate([m[:, :, 0:2], m[:, :, 4:36]], axis=-1).reshape(x.shape[0], -1)
    compare_bytes("Q8_1", "d and qs vs gguf's Q8_0", rows, r.reshape(x.shape[0], -1), d_qs_mine)
    blocks = x.reshape(x.shape[0], nb, 32).astype(np.float32)
    d32 = np.abs(blocks).max(axis=-1) / np.float32(127)
    qsum = m[:, :, 4:36].copy().view(np.int8).astype(np.int32).sum(axis=-1)
    s_ref = (qsum.astype(np.float32) * d32).astype(np.float16)
    s_mine = m[:, :, 2:4].copy().view(np.float16).reshape(x.shape[0], nb)
    bad = np.argwhere(s_ref.view(np.uint16) != s_mine.view(np.uint16))
    if len(bad):
        rr, b = bad[0]
        fail(f"Q8_1: s differs in row {rr} ({rows[rr]!r}) block {b}: {s_ref[rr, b]} vs {s_mine[rr, b]}")


def q8_k_model(x):
    """NumPy model of ggml's quantize_row_q8_K_ref; (rows, nb*292) uint8."""
    rows, n = x.shape
    nb = n // 256
    blocks = x.reshape(rows * nb, 256).astype(np.float32)
    out = np.zeros((rows * nb, 292), dtype=np.uint8)
    for i, b in enumerate(blocks):
        a = np.abs(b)
        amax = a.max()
        if amax == 0:
            continue  # d, qs and bsums stay zero (Tessera zeroes bsums too)
        mx = b[int(np.argmax(a))]  # first index of the largest magnitude
        iscale = np.float32(-127.0) / mx
        # nearest_int rounds half to even, as np.rint does; the product is rounded to f32 first.
        q = np.minimum(np.rint((iscale * b).astype(np.float32)), 127).astype(np.int8)
        bsums = q.astype(np.int16).reshape(16, 16).sum(axis=-1).astype(np.int16)
        d = (np.float32(1.0) / iscale).astype(np.float32)
        out[i, 0:4] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        out[i, 4:260] = q.view(np.uint8)
        out[i, 260:292] = bsums.view(np.uint8)
    return out.reshape(rows, nb * 292)


def ggml_lib():
    path = os.environ.get("TESSERA_GGML_LIB")
    if not path:
        return None
    lib = ctypes.CDLL(path)
    return lib


def ggml_check(lib, tname, rows, x, mine_q, mine_deq, rand):
    """Compares with ggml's own reference quantizer and dequantizer through ctypes."""
    if tname in ("F32", "F16", "BF16"):
        return "not a ggml row function"
    # Q4_0 -> q4_0, Q4_K -> q4_K, IQ4_NL -> iq4_nl, as ggml names its functions
    lower = tname.lower() if tname.startswith("IQ") else "q" + tname[1:]
    qf = getattr(lib, f"quantize_row_{lower}_ref")
    qf.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    qf.restype = None
    n = x.shape[1]
    ref = np.zeros_like(mine_q)  # zeroed, so that unwritten Q8_K bsums compare as zero
    for r in range(x.shape[0]):
        xr = np.ascontiguousarray(x[r], dtype=np.float32)
        out = np.zeros(mine_q.shape[1], dtype=np.uint8)
        qf(xr.ctypes.data, out.ctypes.data, n)
        ref[r] = out
    if tname == "IQ4_NL":
        # ggml leaves the indices of an all-zero block (d = 0) unwritten (stale or
        # uninitialized memory); Tessera writes zeros. Compare d there, everything elsewhere.
        blocks = ref.reshape(x.shape[0], -1, 18)
        zero = (blocks[:, :, 0] == 0) & (blocks[:, :, 1] == 0)
        blocks[zero, 2:] = mine_q.reshape(x.shape[0], -1, 18)[zero, 2:]
    compare_bytes(tname, "quantize vs ggml", rows, ref, mine_q)
    done = "quantize bytes"
    try:
        df = getattr(lib, f"dequantize_row_{lower}")
    except AttributeError:
        return done + " (ggml has no dequantize)"
    df.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    df.restype = None
    deq = np.zeros_like(mine_deq)
    for r in range(x.shape[0]):
        qr = np.ascontiguousarray(mine_q[r])
        out = np.zeros(n, dtype=np.float32)
        df(qr.ctypes.data, out.ctypes.data, n)
        deq[r] = out
    compare_values(tname, "dequantize vs ggml", rows, deq, mine_deq)
    done += " and dequantize values"
    if rand is not None:
        rq, rdeq, rrows = rand
        deq = np.zeros_like(rdeq)
        for r in range(rq.shape[0]):
            qr = np.ascontiguousarray(rq[r])
            out = np.zeros(n, dtype=np.float32)
            df(qr.ctypes.data, out.ctypes.data, n)
            deq[r] = out
        compare_values(tname, "dequantize random blocks vs ggml", rrows, deq, rdeq)
        done += " (also of random blocks)"
    return done


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 64
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        man = json.load(f)
    n, rows, types = man["n"], man["rows"], man["types"]
    SIZES.update({t: tuple(v) for t, v in man["sizes"].items()})
    x = np.fromfile(os.path.join(d, "input.f32"), dtype="<f4").reshape(len(rows), n)
    lib = ggml_lib()
    try:
        from importlib.metadata import version

        gguf_version = version("gguf")
    except Exception:  # pragma: no cover - metadata missing
        gguf_version = "?"
    print(f"gguf {gguf_version} numpy {np.__version__}"
          f" python {sys.version.split()[0]}; {len(rows)} rows of {n} values")
    try:
        for tname in types:
            mine_q = np.fromfile(os.path.join(d, f"{tname}.q"), dtype=np.uint8).reshape(len(rows), -1)
            mine_deq = np.fromfile(os.path.join(d, f"{tname}.deq"), dtype="<f4").reshape(len(rows), n)
            bsize, tsize = sizes(tname)
            if mine_q.shape[1] != n // bsize * tsize:
                fail(f"{tname}: row size {mine_q.shape[1]} != {n // bsize * tsize}")
            notes = []
            if tname in QT.__members__ and QT[tname] in GGML_QUANT_SIZES:
                gsizes = tuple(GGML_QUANT_SIZES[QT[tname]])
                if gsizes != (bsize, tsize):
                    notes.append(f"gguf's GGML_QUANT_SIZES says {gsizes}, ggml's layout is "
                                 f"{(bsize, tsize)}")
            ref_q = gguf_quantize(tname, x)
            if ref_q is not None:
                compare_bytes(tname, "quantize vs gguf", rows, ref_q, mine_q)
                notes.append("quantize bytes == gguf")
            elif tname == "Q8_1":
                q8_1_check(rows, x, mine_q)
                notes.append("d, qs == gguf Q8_0 and s == f16(d*sum(qs)) (gguf has no Q8_1)")
            elif tname == "Q8_K":
                compare_bytes(tname, "quantize vs NumPy model", rows, q8_k_model(x), mine_q)
                notes.append("quantize bytes == NumPy model of ggml (gguf has no Q8_K)")
            else:
                notes.append("gguf has no quantize")
            ref_deq = gguf_dequantize(tname, mine_q)
            if ref_deq is not None:
                compare_values(tname, "dequantize vs gguf", rows, ref_deq.reshape(len(rows), n), mine_deq)
                notes.append("dequantize values == gguf")
            else:
                notes.append("gguf has no dequantize")
            rand = None
            rand_q_path = os.path.join(d, f"{tname}.rand.q")
            if os.path.exists(rand_q_path):
                rq = np.fromfile(rand_q_path, dtype=np.uint8)
                rdeq = np.fromfile(os.path.join(d, f"{tname}.rand.deq"), dtype="<f4")
                n_rand = rdeq.size // n
                rq, rdeq = rq.reshape(n_rand, -1), rdeq.reshape(n_rand, n)
                rrows = [f"random blocks {i}" for i in range(n_rand)]
                rand = (rq, rdeq, rrows)
                ref = gguf_dequantize(tname, rq)
                if ref is not None:
                    compare_values(tname, "dequantize random blocks vs gguf", rrows,
                                   ref.reshape(n_rand, n), rdeq)
                    notes.append("dequantize of random blocks == gguf")
            if lib is not None:
                notes.append("ggml: " + ggml_check(lib, tname, rows, x, mine_q, mine_deq, rand))
            print(f"OK {tname}: " + "; ".join(notes))
    except Mismatch as e:
        print(f"MISMATCH {e}")
        sys.stderr.write(f"MISMATCH {e}\n")
        return 1
    if lib is None:
        print("note: ggml itself not compared (set TESSERA_GGML_LIB to libggml-base.so to do so)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
