/*
 * ggml_matmul: the peer of `tessera bench matmul --count-markers` for scripts/arm-counts.sh.
 * Computes Y = mul_mat(W, X) with ggml's CPU backend on one thread: W random weights of one
 * type (M rows of K values, quantized with ggml's own quantizer), X random F32 activations
 * (N rows of K), for each N given. Each multiplication is computed once as a warm-up (work
 * buffer, first-touch of the pages), then `--reps` times between the count markers of
 * scripts/qemu-plugin/insn_count.c (a no-op lseek on /dev/null to 0x5445535300000001, then
 * ...02), so that the plugin counts the graph computations alone: the activation conversion,
 * the kernels and ggml's per-graph overhead, not the set-up.
 *
 *   ggml_matmul TYPE [--ns 1,16,128] [-M 4096] [-K 4096] [--reps R] [--repack on|off]
 *               [--distinct-rows D]
 *
 * --repack on puts W in ggml's CPU_REPACK buffer type (the layout llama.cpp uses for Q4_0,
 * Q8_0, Q4_K, Q5_K, Q6_K on dotprod / i8mm CPUs) when ggml supports it for this type on this
 * CPU, else in a plain CPU buffer; each line says which one it used. --distinct-rows D
 * quantizes D random rows and repeats them to the M rows (as `tessera bench matmul
 * --distinct-rows`: quantizing 16 M values under an emulator takes longer than the products,
 * whose instruction counts do not depend on the values). Prints one JSON object
 * per N, in the order of the counted regions:
 *   {"type":"q4_0","N":1,"M":4096,"K":4096,"reps":1,"repacked":true,"max_rel_err":1e-6}
 * max_rel_err compares a few outputs with a double-precision product of the dequantized
 * weights: the check that the peer computed what was asked.
 *
 * Built by scripts/arm-counts.sh against the llama.cpp that llama-cpp-python 0.3.36 vendors
 * (in a scratch folder under target/); nothing of llama.cpp is in this repository.
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#define MARK_START 0x5445535300000001LL
#define MARK_STOP 0x5445535300000002LL

static int marker_fd = -1;

static void mark(long long offset)
{
    if (lseek(marker_fd, (off_t)offset, SEEK_SET) < 0) {
        perror("ggml_matmul: lseek on /dev/null");
        exit(1);
    }
}

static void die(const char *msg)
{
    fprintf(stderr, "ggml_matmul: %s\n", msg);
    exit(2);
}

/* xorshift64 values in [-1, 1). */
static void rand_fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL | 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
    }
}

static enum ggml_type parse_type(const char *name)
{
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *n = ggml_type_name((enum ggml_type)t);
        if (n && strcasecmp(n, name) == 0) {
            return (enum ggml_type)t;
        }
    }
    die("unknown type");
    return GGML_TYPE_COUNT;
}

/* The CPU_REPACK buffer type, or NULL when this build has none. */
static ggml_backend_buffer_type_t repack_buft(ggml_backend_dev_t dev)
{
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_get_extra_bufts_t get = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (!get) {
        return NULL;
    }
    for (ggml_backend_buffer_type_t *b = get(dev); b && *b; b++) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) {
            return *b;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        die("usage: ggml_matmul TYPE [--ns 1,16,128] [-M 4096] [-K 4096] [--reps R] "
            "[--repack on|off] [--distinct-rows D]");
    }
    enum ggml_type type = parse_type(argv[1]);
    int64_t m = 4096, k = 4096;
    int reps = 1, want_repack = 0;
    int64_t distinct = 0;
    int64_t ns[16];
    int n_ns = 0;
    const char *ns_arg = "1,16,128";
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            die("an option needs a value");
        }
        if (strcmp(argv[i], "--ns") == 0) {
            ns_arg = v;
        } else if (strcmp(argv[i], "-M") == 0) {
            m = atoll(v);
        } else if (strcmp(argv[i], "-K") == 0) {
            k = atoll(v);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(v);
        } else if (strcmp(argv[i], "--distinct-rows") == 0) {
            distinct = atoll(v);
        } else if (strcmp(argv[i], "--repack") == 0) {
            want_repack = strcmp(v, "on") == 0;
        } else {
            die("unknown option");
        }
        i++;
    }
    for (const char *p = ns_arg; *p && n_ns < 16;) {
        ns[n_ns++] = strtoll(p, (char **)&p, 10);
        if (*p == ',') {
            p++;
        }
    }
    if (m <= 0 || k <= 0 || reps <= 0 || n_ns == 0 || k % ggml_blck_size(type) != 0) {
        die("bad sizes");
    }
    marker_fd = open("/dev/null", O_RDONLY);
    if (marker_fd < 0) {
        die("cannot open /dev/null");
    }

    ggml_backend_t backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, 1);
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(1);
    struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
    ggml_backend_cpu_set_threadpool(backend, tp);
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0);

    /* The weights, quantized by ggml: `rows` distinct rows, repeated to m. */
    int64_t rows = distinct > 0 && distinct < m ? distinct : m;
    size_t row_bytes = ggml_row_size(type, k);
    float *wf = malloc(sizeof(float) * (size_t)(rows * k));
    uint8_t *wq = malloc(row_bytes * (size_t)m);
    if (!wf || !wq) {
        die("out of memory");
    }
    rand_fill(wf, (size_t)(rows * k), 42);
    ggml_quantize_chunk(type, wf, wq, 0, rows, k, NULL);
    for (int64_t i = rows; i < m; i++) {
        memcpy(wq + (size_t)i * row_bytes, wq + (size_t)(i % rows) * row_bytes, row_bytes);
    }

    struct ggml_init_params wp = {ggml_tensor_overhead() * 4, NULL, true};
    struct ggml_context *wctx = ggml_init(wp);
    struct ggml_tensor *w = ggml_new_tensor_2d(wctx, type, k, m);
    ggml_backend_buffer_type_t rb = want_repack ? repack_buft(dev) : NULL;
    ggml_backend_buffer_t wbuf = NULL;
    int repacked = 0;
    if (rb) {
        /* Whether ggml repacks this type on this CPU: llama.cpp's test, the device's
         * supports_op for a MUL_MAT whose weights are in the CPU_REPACK buffer. */
        wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, rb);
        struct ggml_init_params tp2 = {ggml_tensor_overhead() * 4, NULL, true};
        struct ggml_context *tctx = ggml_init(tp2);
        struct ggml_tensor *x1 = ggml_new_tensor_2d(tctx, GGML_TYPE_F32, k, 1);
        struct ggml_tensor *y1 = ggml_mul_mat(tctx, w, x1);
        repacked = wbuf && ggml_backend_dev_supports_op(dev, y1);
        ggml_free(tctx);
        if (!repacked && wbuf) {
            ggml_backend_buffer_free(wbuf);
            ggml_free(wctx);
            wctx = ggml_init(wp);
            w = ggml_new_tensor_2d(wctx, type, k, m);
            wbuf = NULL;
        }
    }
    if (!wbuf) {
        wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, ggml_backend_cpu_buffer_type());
    }
    if (!wbuf) {
        die("cannot allocate the weights");
    }
    ggml_backend_tensor_set(w, wq, 0, row_bytes * (size_t)m); /* repacks in CPU_REPACK */

    /* Dequantized rows for the check (the first 4). */
    const int check_rows = rows < 4 ? (int)rows : 4;
    float *wd = malloc(sizeof(float) * (size_t)(check_rows * k));
    const struct ggml_type_traits *tt = ggml_get_type_traits(type);
    if (!wd || !tt->to_float) {
        die("no dequantizer");
    }
    tt->to_float(wq, wd, check_rows * k);
    free(wf);

    for (int t = 0; t < n_ns; t++) {
        int64_t n = ns[t];
        size_t meta = ggml_tensor_overhead() * 8 + ggml_graph_overhead();
        struct ggml_init_params ap = {meta, NULL, true};
        struct ggml_context *actx = ggml_init(ap);
        struct ggml_tensor *x = ggml_new_tensor_2d(actx, GGML_TYPE_F32, k, n);
        struct ggml_tensor *y = ggml_mul_mat(actx, w, x);
        struct ggml_cgraph *gf = ggml_new_graph(actx);
        ggml_build_forward_expand(gf, y);
        ggml_backend_buffer_t abuf =
            ggml_backend_alloc_ctx_tensors_from_buft(actx, ggml_backend_cpu_buffer_type());
        if (!abuf) {
            die("cannot allocate the activations");
        }
        float *xf = malloc(sizeof(float) * (size_t)(n * k));
        float *yf = malloc(sizeof(float) * (size_t)(n * m));
        if (!xf || !yf) {
            die("out of memory");
        }
        rand_fill(xf, (size_t)(n * k), 7);
        ggml_backend_tensor_set(x, xf, 0, sizeof(float) * (size_t)(n * k));

        if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
            die("compute failed");
        }
        mark(MARK_START);
        for (int r = 0; r < reps; r++) {
            ggml_backend_graph_compute(backend, gf);
        }
        mark(MARK_STOP);

        ggml_backend_tensor_get(y, yf, 0, sizeof(float) * (size_t)(n * m));
        double err = 0;
        int64_t cols[2] = {0, n - 1};
        for (int c = 0; c < 2; c++) {
            for (int i = 0; i < check_rows; i++) {
                double ref = 0, mag = 0;
                for (int64_t j = 0; j < k; j++) {
                    double p = (double)wd[i * k + j] * xf[cols[c] * k + j];
                    ref += p;
                    mag += fabs(p);
                }
                double e = fabs(yf[cols[c] * m + i] - ref) / (mag > 0 ? mag : 1);
                err = e > err ? e : err;
            }
        }
        printf("{\"type\":\"%s\",\"N\":%lld,\"M\":%lld,\"K\":%lld,\"reps\":%d,\"repacked\":%s,"
               "\"max_rel_err\":%.3g}\n",
               ggml_type_name(type), (long long)n, (long long)m, (long long)k, reps,
               repacked ? "true" : "false", err);
        fflush(stdout);
        free(xf);
        free(yf);
        ggml_backend_buffer_free(abuf);
        ggml_free(actx);
    }
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    ggml_backend_free(backend);
    ggml_threadpool_free(tp);
    free(wq);
    free(wd);
    return 0;
}
