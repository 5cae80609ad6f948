#!/usr/bin/env python3
"""The `gguf` package's view of GGUF files, for rust/gguf/tests/gguf_py.rs.

Usage:
  gguf_reference.py fixtures DIR   writes DIR/align32.gguf and DIR/align128.gguf with gguf's
                                   GGUFWriter, and DIR/manifest.json: what was written
  gguf_reference.py dump FILE OUT  writes OUT: what gguf's GGUFReader reads from FILE

Both JSON files have the form
  {"files": [{"file": name, "alignment": A, "data_offset": D,
              "metadata": [{"key": k, "type": T, "value": V}, ...],
              "tensors": [{"name", "type_id", "ne", "offset", "nbytes", "hex" or "sha256"}]}]}
T is gguf's value type name (UINT8 ... FLOAT64, BOOL, STRING, ARRAY). V is the value: integers
and booleans as JSON numbers and booleans, strings as strings, floats as the integer of their
IEEE bits (so NaN, infinities and -0.0 compare exactly), arrays as
{"element_type": T, "items": [V, ...]} with items encoded the same way (nested arrays nest).
"ne" is the dimensions innermost first; "offset" is relative to the data section; "hex" is the
tensor's bytes (fixtures), "sha256" their hash (dump).

The fixtures hold every metadata value type, arrays of every element type, arrays of arrays
(three levels deep, several inner element types) and one tensor of every type Tessera knows,
with random bytes (the reader does not interpret them). They are read back with GGUFReader as a
check of this script itself. Exits 2 when numpy or gguf is missing.
"""

import hashlib
import json
import math
import struct
import sys
from pathlib import Path

try:
    import numpy as np
    from gguf import GGUFReader, GGUFValueType as VT, GGUFWriter
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as QT
except ImportError as e:  # pragma: no cover - environment problem
    sys.stderr.write(
        f"gguf_reference.py: cannot import numpy/gguf ({e}).\n"
        f"Install them for {sys.executable} with:  {sys.executable} -m pip install gguf numpy\n"
        "(or point TESSERA_PYTHON at an interpreter that has them)\n"
    )
    sys.exit(2)

# (values per block, bytes per block) of every tensor type Tessera knows, from ggml-common.h.
# gguf 0.19's GGML_QUANT_SIZES agrees except for Q8_1 (40 there, f32 d and s; ggml's block_q8_1
# has two halves: 36), so tensors are written with explicit shapes and sizes.
TYPES = {
    "F32": (1, 4), "F16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22),
    "Q5_1": (32, 24), "Q8_0": (32, 34), "Q8_1": (32, 36), "Q2_K": (256, 84), "Q3_K": (256, 110),
    "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_K": (256, 292),
    "IQ4_NL": (32, 18), "IQ4_XS": (256, 136), "I32": (1, 4), "BF16": (1, 2),
}
for _name, _size in TYPES.items():
    if _name != "Q8_1" and tuple(GGML_QUANT_SIZES[QT[_name]]) != _size:
        sys.exit(f"gguf's GGML_QUANT_SIZES[{_name}] = {GGML_QUANT_SIZES[QT[_name]]}, expected {_size}")

FLOAT_FMT = {VT.FLOAT32: ("<f", "<I"), VT.FLOAT64: ("<d", "<Q")}


def float_bits(x, vt):
    f, i = FLOAT_FMT[vt]
    return struct.unpack(i, struct.pack(f, x))[0]


def encode(value, vt, sub=None):
    """The manifest encoding of `value` of type `vt` (arrays: element type `sub`)."""
    if vt == VT.ARRAY:
        if sub is None:
            sub = VT.get_type(value[0])
        return {"element_type": sub.name, "items": [encode(v, sub) for v in value]}
    if vt in FLOAT_FMT:
        return float_bits(value, vt)
    if vt == VT.BOOL:
        return bool(value)
    if vt == VT.STRING:
        return value
    return int(value)


# ---------------------------------------------------------------------------------------------
# fixtures

def f32(x):
    """x rounded to float32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def metadata_entries():
    """(key, value, type, element type) of every entry the fixtures carry, beyond the
    architecture (which GGUFWriter writes first) and the alignment."""
    ints = {
        VT.UINT8: [0, 1, 127, 255], VT.INT8: [-128, -1, 0, 127],
        VT.UINT16: [0, 65535, 258], VT.INT16: [-32768, 32767, -2],
        VT.UINT32: [0, 2**32 - 1, 0x01020304], VT.INT32: [-(2**31), 2**31 - 1, -5],
        VT.UINT64: [0, 2**64 - 1, 2**40 + 3], VT.INT64: [-(2**63), 2**63 - 1, -(2**40)],
    }
    floats32 = [f32(math.pi), -0.0, math.inf, -math.inf, math.nan, f32(1e-45), f32(3.4e38)]
    floats64 = [math.e, -0.0, math.inf, math.nan, 5e-324, 1.7976931348623157e308]
    strings = ["", "plain", "héllo wörld ∑ 🙂", "a\u0000b", "line\nbreak \"quoted\" \\"]
    out = []
    for vt, vals in ints.items():
        out.append((f"scalar.{vt.name.lower()}", vals[1], vt, None))
        out.append((f"array.{vt.name.lower()}", vals, VT.ARRAY, vt))
    for vt, vals in ((VT.FLOAT32, floats32), (VT.FLOAT64, floats64)):
        for i, v in enumerate(vals):
            out.append((f"scalar.{vt.name.lower()}.{i}", v, vt, None))
        out.append((f"array.{vt.name.lower()}", vals, VT.ARRAY, vt))
    out += [
        ("scalar.bool.true", True, VT.BOOL, None),
        ("scalar.bool.false", False, VT.BOOL, None),
        ("array.bool", [True, False, False, True], VT.ARRAY, VT.BOOL),
    ]
    for i, s in enumerate(strings):
        out.append((f"scalar.string.{i}", s, VT.STRING, None))
    out.append(("array.string", strings, VT.ARRAY, VT.STRING))
    out.append(("array.u8_from_bytes", bytes(range(256)), VT.ARRAY, VT.UINT8))
    out.append(("array.i32_long", list(range(-5000, 5000, 3)), VT.ARRAY, VT.INT32))
    # Arrays of arrays: inner arrays of different lengths and element types, three levels.
    out.append(("nested.int", [[1, 2, 3], [4], [-5, 6]], VT.ARRAY, None))
    out.append(("nested.mixed", [[1, 2], ["x", "yz"], [True], [f32(0.5)]], VT.ARRAY, None))
    out.append(("nested.deep", [[[f32(1.5)], [f32(2.5), f32(-3.5)]], [["a"]]], VT.ARRAY, None))
    return out


def tensor_specs():
    """(name, type, ne innermost first) of every fixture tensor: every type, 1 to 4 dims,
    sizes that are not multiples of the alignment."""
    shapes = [[5], [3, 2], [2, 3, 1], [1, 2, 1, 3]]
    specs = []
    for i, (t, (bs, _)) in enumerate(TYPES.items()):
        ne = list(shapes[i % 4])
        ne[0] *= bs
        specs.append((f"tensor.{i}.{t.lower()}", t, ne))
    specs.append(("tensor.big.f32", "F32", [257, 9]))
    return specs


def nbytes(t, ne):
    bs, ts = TYPES[t]
    n = ne[0] // bs * ts
    for d in ne[1:]:
        n *= d
    return n


def write_fixture(path, alignment, rng):
    w = GGUFWriter(path, "tessera-test")
    if alignment != 32:
        w.add_custom_alignment(alignment)
    entries = metadata_entries()
    for key, value, vt, sub in entries:
        w.add_key_value(key, value, vt, sub_type=sub)
    tensors = []
    for name, t, ne in tensor_specs():
        data = rng.integers(0, 256, size=nbytes(t, ne), dtype=np.uint8)
        # int8 bytes with an explicit element shape (outermost first): GGUFWriter then takes
        # the shape as given and the size from the bytes.
        w.add_tensor(name, data.view(np.int8), raw_shape=list(reversed(ne)), raw_dtype=QT[t])
        tensors.append({"name": name, "type_id": int(QT[t]), "ne": ne,
                        "nbytes": len(data), "hex": data.tobytes().hex()})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    metadata = [{"key": "general.architecture", "type": "STRING", "value": "tessera-test"}]
    if alignment != 32:
        metadata.append({"key": "general.alignment", "type": "UINT32", "value": alignment})
    for key, value, vt, sub in entries:
        metadata.append({"key": key, "type": vt.name, "value": encode(value, vt, sub)})
    # Offsets and the data section from GGUFReader, and a check that it reads what was meant.
    r = read(path)
    if r["alignment"] != alignment:
        sys.exit(f"{path}: GGUFReader reads alignment {r['alignment']}, wrote {alignment}")
    flat = [m for m in metadata if not m["key"].startswith("nested.")]
    got = [m for m in r["metadata"] if not m["key"].startswith("nested.")]
    if json.dumps(got, sort_keys=True) != json.dumps(flat, sort_keys=True):
        sys.exit(f"{path}: GGUFReader reads other metadata than was written")
    for t, rt in zip(tensors, r["tensors"]):
        if (rt["name"], rt["type_id"], rt["ne"]) != (t["name"], t["type_id"], t["ne"]):
            sys.exit(f"{path}: GGUFReader reads tensor {rt} for {t['name']}")
        if rt["sha256"] != hashlib.sha256(bytes.fromhex(t["hex"])).hexdigest() and t["type_id"] != QT.Q8_1:
            sys.exit(f"{path}: GGUFReader reads other bytes of {t['name']}")
        t["offset"] = rt["offset"]
    return {"file": Path(path).name, "alignment": alignment, "data_offset": r["data_offset"],
            "metadata": metadata, "tensors": tensors}


def fixtures(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0x6775_6766)
    files = [write_fixture(str(out / f"align{a}.gguf"), a, rng) for a in (32, 128)]
    (out / "manifest.json").write_text(json.dumps({"files": files}, indent=1))


# ---------------------------------------------------------------------------------------------
# dump

def field_value(f):
    """The manifest encoding of a GGUFReader field (flat arrays only: GGUFReader flattens
    arrays of arrays)."""
    vt = f.types[0]
    if vt != VT.ARRAY:
        if vt in FLOAT_FMT:
            return float_bits(float(f.parts[-1][0]), vt)
        return encode(f.contents(), vt)
    et = VT(int(f.parts[3][0]))
    if et == VT.ARRAY:
        return None  # flattened by GGUFReader: not comparable
    if et == VT.STRING:
        items = f.contents()
    elif not f.data:
        items = []
    else:
        vals = np.concatenate([f.parts[i] for i in f.data])
        if et in FLOAT_FMT:
            items = vals.view(np.uint32 if et == VT.FLOAT32 else np.uint64).tolist()
        else:
            items = [bool(v) for v in vals] if et == VT.BOOL else vals.tolist()
    return {"element_type": et.name, "items": items}


def read(path):
    r = GGUFReader(path)
    metadata = []
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        metadata.append({"key": key, "type": f.types[0].name, "value": field_value(f)})
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name, "type_id": int(t.tensor_type), "ne": [int(d) for d in t.shape],
            "offset": int(t.data_offset) - int(r.data_offset), "nbytes": int(t.n_bytes),
            "sha256": hashlib.sha256(t.data.tobytes()).hexdigest(),
        })
    version = int(r.fields["GGUF.version"].parts[0][0])
    return {"file": Path(path).name, "version": version, "alignment": int(r.alignment),
            "data_offset": int(r.data_offset), "metadata": metadata, "tensors": tensors}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "fixtures":
        fixtures(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "dump":
        Path(sys.argv[3]).write_text(json.dumps({"files": [read(sys.argv[2])]}))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
