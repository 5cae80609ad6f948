#!/usr/bin/env python3
"""(Copied from /work/shared/anchor, the peers' benchmark scripts, with IQ4_XS added to the
type ids.)

ctypes benchmark of upstream ggml's CPU mul_mat (as shipped in llama-cpp-python's libggml*.so).

Original benchmark code; it only *calls* the installed shared libraries.

result = ggml_mul_mat(A, B):  A = weights, ggml shape [K, M] (row-major M x K), type T
                              B = activations, F32 [K, N];  C = [M, N]  (C[n, m] = sum_k A[m, k] * B[n, k])

Paths ("--path"):
  plain   tensors live in a ggml_context; ggml_graph_plan + ggml_graph_compute (the engine behind
          ggml_graph_compute_with_ctx, with one reused work buffer).  This is what the brief asked for.
  ctx     literally ggml_graph_compute_with_ctx(ctx, gf, n_threads) each run (work buffer is carved out
          of the context on every call; context sized with slack).  Should match "plain".
  repack  what llama.cpp actually does for CPU weights: weights are allocated in the CPU backend's
          extra buffer type "CPU_REPACK" (runtime re-layout, e.g. Q4_0 -> 8x8 interleaved, Q4_K -> 8x8) and
          the graph runs through ggml_backend_graph_compute on a CPU backend.  On x86 only Q4_0, Q4_K,
          IQ4_NL, MXFP4 (and Q2_K with AVX512) are repacked; other types fall back to the plain kernels.

Cache residency ("--layers"):
  layers=1          one weight matrix (hot: a 4096x4096 matrix is 9..64 MiB and stays in the big L3)
  layers=L (>1)     L distinct copies of the weight matrix, L mul_mats in one graph (like L layers of
                    a model); time per mul_mat = total/L.  With L*bytes >> L3 this streams from DRAM.
  --cold-bytes X    choose L automatically so that L*weight_bytes >= X  (default off)

Example:
  python bench_ggml_mulmat.py --types F32,F16,Q8_0,Q4_0,Q4_K --ns 1,16,128 --threads 1,2 --path plain
"""
import argparse
import ctypes as C
import glob
import json
import math
import os
import statistics
import sys
import time

import numpy as np

GGML_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
             "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20,
             "IQ4_XS": 23, "BF16": 30}


# --------------------------------------------------------------------------------------------- ctypes
class InitParams(C.Structure):
    _fields_ = [("mem_size", C.c_size_t), ("mem_buffer", C.c_void_p), ("no_alloc", C.c_bool)]


class Tensor(C.Structure):  # mirrors struct ggml_tensor (ggml.h, GGML_MAX_DIMS=4, MAX_SRC=10, MAX_NAME=64)
    _fields_ = [("type", C.c_int), ("buffer", C.c_void_p), ("ne", C.c_int64 * 4), ("nb", C.c_size_t * 4),
                ("op", C.c_int), ("op_params", C.c_int32 * 16), ("flags", C.c_int32),
                ("src", C.c_void_p * 10), ("view_src", C.c_void_p), ("view_offs", C.c_size_t),
                ("data", C.c_void_p), ("name", C.c_char * 64), ("extra", C.c_void_p), ("padding", C.c_char * 8)]


TP = C.POINTER(Tensor)


class CPlan(C.Structure):  # struct ggml_cplan (ggml-cpu.h)
    _fields_ = [("work_size", C.c_size_t), ("work_data", C.c_void_p), ("n_threads", C.c_int),
                ("threadpool", C.c_void_p), ("abort_callback", C.c_void_p),
                ("abort_callback_data", C.c_void_p), ("use_ref", C.c_bool)]


def find_libdir(explicit=None):
    if explicit:
        return explicit
    cands = []
    try:
        import llama_cpp  # noqa: F401  (only to locate the package; loading it is harmless)
        cands.append(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))
    except Exception:
        pass
    for sp in sys.path:
        cands.append(os.path.join(sp, "llama_cpp", "lib"))
    for d in cands:
        if glob.glob(os.path.join(d, "libggml-cpu*.so")):
            return d
    raise SystemExit("could not find llama_cpp/lib/libggml-cpu*.so; pass --libdir")


class GGML:
    def __init__(self, libdir):
        mode = C.RTLD_GLOBAL
        self.base = C.CDLL(os.path.join(libdir, "libggml-base.so"), mode=mode)
        self.cpu = C.CDLL(os.path.join(libdir, "libggml-cpu.so"), mode=mode)
        self.ggml = C.CDLL(os.path.join(libdir, "libggml.so"), mode=mode)
        b, c, g = self.base, self.cpu, self.ggml
        vp, sz, i64 = C.c_void_p, C.c_size_t, C.c_int64

        def f(lib, name, res, *args):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, list(args)
            setattr(self, name, fn)

        f(b, "ggml_init", vp, InitParams)
        f(b, "ggml_free", None, vp)
        f(b, "ggml_new_tensor_2d", TP, vp, C.c_int, i64, i64)
        f(b, "ggml_mul_mat", TP, vp, TP, TP)
        f(b, "ggml_new_graph", vp, vp)
        f(b, "ggml_new_graph_custom", vp, vp, sz, C.c_bool)
        f(b, "ggml_graph_overhead_custom", sz, sz, C.c_bool)
        f(b, "ggml_build_forward_expand", None, vp, TP)
        f(b, "ggml_get_data", vp, TP)
        f(b, "ggml_nbytes", sz, TP)
        f(b, "ggml_row_size", sz, C.c_int, i64)
        f(b, "ggml_tensor_overhead", sz)
        f(b, "ggml_graph_overhead", sz)
        f(b, "ggml_quantize_chunk", sz, C.c_int, vp, vp, i64, i64, i64, vp)
        f(b, "ggml_quantize_requires_imatrix", C.c_bool, C.c_int)
        f(b, "ggml_backend_buft_name", C.c_char_p, vp)
        f(b, "ggml_backend_tensor_set", None, TP, vp, sz, sz)
        f(b, "ggml_backend_tensor_get", None, TP, vp, sz, sz)
        f(b, "ggml_backend_buffer_free", None, vp)
        f(b, "ggml_backend_graph_compute", C.c_int, vp, vp)
        f(b, "ggml_backend_free", None, vp)
        f(b, "ggml_backend_alloc_ctx_tensors_from_buft", vp, vp, vp)
        f(b, "ggml_backend_dev_backend_reg", vp, vp)
        f(b, "ggml_backend_reg_get_proc_address", vp, vp, C.c_char_p)
        f(g, "ggml_backend_dev_by_type", vp, C.c_int)
        f(b, "ggml_backend_cpu_buffer_type", vp)
        f(c, "ggml_cpu_init", None)
        f(c, "ggml_graph_plan", CPlan, vp, C.c_int, vp)
        f(c, "ggml_graph_compute", C.c_int, vp, C.POINTER(CPlan))
        f(c, "ggml_graph_compute_with_ctx", C.c_int, vp, vp, C.c_int)
        f(c, "ggml_backend_cpu_init", vp)
        f(c, "ggml_backend_cpu_set_n_threads", None, vp, C.c_int)
        for feat in ("avx2", "avx512", "avx512_vnni", "avx_vnni", "avx512_bf16", "f16c", "fma", "amx_int8"):
            f(c, "ggml_cpu_has_" + feat, C.c_int)
        self.ggml_cpu_init()

    def features(self):
        return {k: getattr(self, "ggml_cpu_has_" + k)() for k in
                ("avx2", "avx512", "avx512_vnni", "avx_vnni", "avx512_bf16", "f16c", "fma", "amx_int8")}

    def repack_buft(self):
        dev = self.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
        reg = self.ggml_backend_dev_backend_reg(dev)
        p = self.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if not p:
            return None
        fn = C.CFUNCTYPE(C.POINTER(C.c_void_p), C.c_void_p)(p)
        arr = fn(dev)
        i = 0
        while arr[i]:
            if self.ggml_backend_buft_name(arr[i]) == b"CPU_REPACK":
                return arr[i]
            i += 1
        return None


# --------------------------------------------------------------------------------------------- data
_qcache = {}


def make_weights(g, tname, M, K, seed=0):
    """Returns (raw bytes as np.uint8 array, float32 source matrix)."""
    key = (tname, M, K, seed)
    if key in _qcache:
        return _qcache[key]
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((M, K), dtype=np.float32)
    t = GGML_TYPE[tname]
    if tname == "F32":
        raw = src.view(np.uint8).reshape(-1).copy()
    elif tname == "F16":
        raw = src.astype(np.float16).view(np.uint8).reshape(-1).copy()
    else:
        if g.ggml_quantize_requires_imatrix(t):
            raise SystemExit(f"{tname} requires an imatrix")
        nbytes = g.ggml_row_size(t, K) * M
        raw = np.empty(nbytes, dtype=np.uint8)
        got = g.ggml_quantize_chunk(t, src.ctypes.data, raw.ctypes.data, 0, M, K, None)
        assert got == nbytes, (got, nbytes)
    _qcache[key] = (raw, src)
    return raw, src


_dqcache = {}


def reference_check(tname, raw, src, Bm, Cm, M, K):
    """Compare ggml output against numpy using gguf.quants (independent dequantizer) when available."""
    try:
        key = (tname, M, K)
        if tname in ("F32", "F16"):
            Ad = (src if tname == "F32" else src.astype(np.float16).astype(np.float32))
            how = "numpy"
        else:
            how = "gguf.dequantize"
            if key not in _dqcache:
                from gguf import GGMLQuantizationType, quants
                _dqcache[key] = quants.dequantize(raw.reshape(M, -1),
                                                  GGMLQuantizationType[tname]).astype(np.float32)
            Ad = _dqcache[key]
        ref = (Bm @ Ad.T).astype(np.float64)  # (N, M)
        rel = float(np.linalg.norm(Cm - ref) / np.linalg.norm(ref))
        return rel, how
    except ImportError:
        return None, "gguf-missing"


# --------------------------------------------------------------------------------------------- bench
def time_runs(fn, warmup, min_runs, min_time):
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    est = time.perf_counter() - t0
    runs = max(min_runs, min(400, int(math.ceil(min_time / max(est, 1e-6)))))
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def dry_plan_work_size(g, t, K, M, N, layers, nth, graph_size):
    ovh = g.ggml_tensor_overhead()
    ctx = g.ggml_init(InitParams(ovh * (2 * layers + 4) + g.ggml_graph_overhead_custom(graph_size, False) + 4096,
                                 None, True))
    B = g.ggml_new_tensor_2d(ctx, 0, K, N)
    gf = g.ggml_new_graph_custom(ctx, graph_size, False)
    for _ in range(layers):
        g.ggml_build_forward_expand(gf, g.ggml_mul_mat(ctx, g.ggml_new_tensor_2d(ctx, t, K, M), B))
    ws = g.ggml_graph_plan(gf, nth, None).work_size
    g.ggml_free(ctx)
    return ws


def bench_one(g, tname, M, K, N, nth, path, layers, args, repack_buft):
    t = GGML_TYPE[tname]
    raw, src = make_weights(g, tname, M, K)
    wbytes = raw.nbytes
    rng = np.random.default_rng(1)
    Bm = rng.standard_normal((N, K), dtype=np.float32)
    ovh = g.ggml_tensor_overhead()
    graph_size = max(2048, 4 * layers + 16)
    gov = g.ggml_graph_overhead_custom(graph_size, False)
    info = {}
    cleanup = []

    if path in ("plain", "ctx"):
        out_bytes = 4 * M * N
        slack = 0
        if path == "ctx":  # work buffer is re-carved from the context on each call: size it from a dry plan
            ws = dry_plan_work_size(g, t, K, M, N, layers, nth, graph_size)
            slack = (args.warmup + 410) * (ws + ovh + 4096) + (1 << 20)
            info["work_size"] = ws
        mem = layers * (wbytes + out_bytes + 2 * ovh + 256) + 4 * N * K + ovh + gov + (1 << 20) + slack
        ctx = g.ggml_init(InitParams(mem, None, False))
        if not ctx:
            raise SystemExit("ggml_init failed")
        cleanup.append(lambda: g.ggml_free(ctx))
        B = g.ggml_new_tensor_2d(ctx, 0, K, N)
        As, Cs = [], []
        for _ in range(layers):
            A = g.ggml_new_tensor_2d(ctx, t, K, M)
            As.append(A)
            Cs.append(g.ggml_mul_mat(ctx, A, B))
        gf = g.ggml_new_graph_custom(ctx, graph_size, False)
        for Ct in Cs:
            g.ggml_build_forward_expand(gf, Ct)
        for A in As:
            assert g.ggml_nbytes(A) == wbytes
            C.memmove(g.ggml_get_data(A), raw.ctypes.data, wbytes)
        C.memmove(g.ggml_get_data(B), Bm.ctypes.data, Bm.nbytes)
        if path == "plain":
            plan = g.ggml_graph_plan(gf, nth, None)
            work = (C.c_uint8 * max(plan.work_size, 1))()
            plan.work_data = C.cast(work, C.c_void_p)
            info["work_size"] = plan.work_size

            def run():
                st = g.ggml_graph_compute(gf, C.byref(plan))
                if st != 0:
                    raise RuntimeError(f"ggml_graph_compute status {st}")
        else:
            def run():
                st = g.ggml_graph_compute_with_ctx(ctx, gf, nth)
                if st != 0:
                    raise RuntimeError(f"ggml_graph_compute_with_ctx status {st}")

        def read_out():
            return np.ctypeslib.as_array(C.cast(g.ggml_get_data(Cs[0]), C.POINTER(C.c_float)),
                                         shape=(N, M)).copy()
        info["buft"] = "ctx"
    elif path == "repack":
        if repack_buft is None:
            raise SystemExit("no CPU_REPACK buffer type in this build")
        ctx_w = g.ggml_init(InitParams(ovh * (layers + 4), None, True))
        As = [g.ggml_new_tensor_2d(ctx_w, t, K, M) for _ in range(layers)]
        buf_w = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, repack_buft)
        if not buf_w:
            raise SystemExit("alloc in CPU_REPACK failed")
        if not As[0].contents.extra:
            # ggml has no repacked layout for this type on this CPU (llama.cpp would keep it in the plain
            # CPU buffer); CPU_REPACK's set_tensor would dereference a NULL traits pointer -> skip.
            g.ggml_backend_buffer_free(buf_w)
            g.ggml_free(ctx_w)
            return None
        info["buft"] = "CPU_REPACK"
        for A in As:
            g.ggml_backend_tensor_set(A, raw.ctypes.data, 0, wbytes)  # repacks here
        ctx_a = g.ggml_init(InitParams(ovh * (2 * layers + 8) + gov + (1 << 16), None, True))
        B = g.ggml_new_tensor_2d(ctx_a, 0, K, N)
        Cs = [g.ggml_mul_mat(ctx_a, A, B) for A in As]
        gf = g.ggml_new_graph_custom(ctx_a, graph_size, False)
        for Ct in Cs:
            g.ggml_build_forward_expand(gf, Ct)
        buf_a = g.ggml_backend_alloc_ctx_tensors_from_buft(ctx_a, g.ggml_backend_cpu_buffer_type())
        g.ggml_backend_tensor_set(B, Bm.ctypes.data, 0, Bm.nbytes)
        be = g.ggml_backend_cpu_init()
        g.ggml_backend_cpu_set_n_threads(be, nth)
        cleanup += [lambda: g.ggml_backend_free(be), lambda: g.ggml_backend_buffer_free(buf_a),
                    lambda: g.ggml_backend_buffer_free(buf_w), lambda: g.ggml_free(ctx_a),
                    lambda: g.ggml_free(ctx_w)]

        def run():
            st = g.ggml_backend_graph_compute(be, gf)
            if st != 0:
                raise RuntimeError(f"ggml_backend_graph_compute status {st}")

        def read_out():
            out = np.empty((N, M), dtype=np.float32)
            g.ggml_backend_tensor_get(Cs[0], out.ctypes.data, 0, out.nbytes)
            return out
    else:
        raise SystemExit("bad path")

    try:
        ts = time_runs(run, args.warmup, args.min_runs, args.min_time)
        Cm = read_out()
        rel, how = (None, "skipped") if args.no_check else reference_check(tname, raw, src, Bm, Cm, M, K)
    finally:
        for fn in cleanup:
            fn()
    med = statistics.median(ts) / layers
    best = min(ts) / layers
    flops = 2.0 * M * N * K
    res = dict(type=tname, M=M, K=K, N=N, threads=nth, path=path, layers=layers,
               weight_bytes=wbytes, resident_bytes=wbytes * layers, runs=len(ts),
               median_s=med, best_s=best, gflops=flops / med / 1e9, gflops_best=flops / best / 1e9,
               weight_gbps=wbytes / med / 1e9, rel_err=rel, check=how, **info)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir")
    ap.add_argument("--types", default="F32,F16,Q8_0,Q4_0,Q4_K")
    ap.add_argument("--ns", default="1,16,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-M", type=int, default=4096)
    ap.add_argument("-K", type=int, default=4096)
    ap.add_argument("--path", default="plain", help="plain | ctx | repack (comma list allowed)")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--cold-bytes", type=float, default=0,
                    help="if >0, layers = ceil(cold_bytes / weight_bytes) (e.g. 1.5e9 to exceed L3)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-runs", type=int, default=10)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed runs per config")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--json", help="append JSON lines here")
    args = ap.parse_args()

    g = GGML(find_libdir(args.libdir))
    rb = g.repack_buft()
    print(f"# ggml cpu features: {g.features()}  repack_buft={'yes' if rb else 'no'}"
          f"  OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
    hdr = (f"{'path':7} {'type':5} {'N':>4} {'thr':>3} {'layers':>6} {'MiB/layer':>9} {'median_ms':>10} "
           f"{'GFLOPS':>8} {'best':>8} {'wGB/s':>7} {'runs':>4} {'relerr':>8} buft")
    print(hdr, flush=True)
    for path in args.path.split(","):
        for tname in args.types.split(","):
            for N in [int(x) for x in args.ns.split(",")]:
                for nth in [int(x) for x in args.threads.split(",")]:
                    raw, _ = make_weights(g, tname, args.M, args.K)
                    layers = args.layers
                    if args.cold_bytes > 0:
                        layers = max(layers, int(math.ceil(args.cold_bytes / raw.nbytes)))
                    r = bench_one(g, tname, args.M, args.K, N, nth, path, layers, args, rb)
                    if r is None:
                        print(f"{path:7} {tname:5} {N:>4} {nth:>3}  -- no repacked layout for this type here "
                              f"(same kernels as 'plain')", flush=True)
                        continue
                    rel = "n/a" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
                    print(f"{path:7} {tname:5} {N:>4} {nth:>3} {layers:>6} {r['weight_bytes']/2**20:>9.2f} "
                          f"{r['median_s']*1e3:>10.3f} {r['gflops']:>8.1f} {r['gflops_best']:>8.1f} "
                          f"{r['weight_gbps']:>7.1f} {r['runs']:>4} {rel:>8} {r['buft']}", flush=True)
                    if args.json:
                        with open(args.json, "a") as fh:
                            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
