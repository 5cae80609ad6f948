/*
 * insn_count: a qemu-user (TCG) plugin that counts the guest instructions an aarch64 program
 * executes, in total and by class, for the whole run and between count markers.
 *
 *   qemu-aarch64 -plugin target/qemu-plugin/libinsn_count.so[,out=FILE][,syms=FILE] PROGRAM ...
 *
 * Classes, from the 32-bit opcode (qemu_plugin_insn_data), so no disassembler is needed:
 *   dot    SDOT / UDOT / USDOT / SUDOT (vector and by element)
 *   mmla   SMMLA / UMMLA / USMMLA
 *   load   every load and atomic read-modify-write (GPR and SIMD&FP registers, LD1..LD4 too)
 *   store  every store (STR, STP, ST1..ST4, STXR, ...)
 *   simd   the other SIMD & floating-point data-processing instructions
 *   other  the rest (integer, branches, system; PRFM counts here)
 * Counts are added per translation block when it starts (an inline add per class, computed once
 * at translation), so they are exact unless a block stops half-way (a fault), which a benchmark
 * does not do.
 *
 * Count markers: a guest `lseek(fd, OFFSET, SEEK_SET)` with OFFSET = 0x5445535300000001
 * ("TESS" << 32 | 1) starts a region, 0x5445535300000002 ends it (on /dev/null both are no-ops
 * for the program). Each ended region is written as one line; everything the guest executed
 * between the two system calls is counted, on every guest thread (the inline adds are not
 * atomic, so runs whose threads compute at the same time are approximate).
 *
 * Per function (option syms=FILE): every instruction is also counted for the function (ELF
 * symbol, qemu_plugin_insn_symbol) that its translation block starts in, over the whole run;
 * FILE gets one JSON object per function at exit, {"symbol":"NAME","total":N,"dot":N,...}
 * ("?" for code without a symbol qemu knows: the shared libraries that the dynamic loader maps).
 *
 * Output, at exit, to FILE (appended) or to stderr, one JSON object per line:
 *   {"region":0,"total":N,"dot":N,"mmla":N,"load":N,"store":N,"simd":N,"other":N}
 *   ...
 *   {"region":"all","total":N,...}   the whole run
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

enum { C_TOTAL, C_DOT, C_MMLA, C_LOAD, C_STORE, C_SIMD, C_OTHER, N_CLASSES };
static const char *const class_names[N_CLASSES] = {
    "total", "dot", "mmla", "load", "store", "simd", "other",
};

/* aarch64 Linux system call number of lseek and the marker offsets. */
#define SYS_LSEEK_AARCH64 62
#define MARK_START UINT64_C(0x5445535300000001)
#define MARK_STOP UINT64_C(0x5445535300000002)

static uint64_t counts[N_CLASSES];
static uint64_t region_start[N_CLASSES];
static bool in_region;
static uint64_t n_regions;
static char *out_lines; /* the region lines so far */
static size_t out_len, out_cap;
static const char *out_path;

/* Per-function counts (syms=FILE): a table keyed by qemu's symbol-name pointer. */
struct sym_counts {
    const char *name;
    uint64_t counts[N_CLASSES];
};
static const char *syms_path;
static struct sym_counts **syms; /* open addressing, power-of-two capacity */
static size_t syms_len, syms_cap;
static struct sym_counts unknown_sym = {.name = "?"};

static size_t sym_slot(struct sym_counts **table, size_t cap, const char *name)
{
    size_t h = (size_t)((uintptr_t)name * UINT64_C(0x9E3779B97F4A7C15) >> 17) & (cap - 1);
    while (table[h] && table[h]->name != name) {
        h = (h + 1) & (cap - 1);
    }
    return h;
}

/* The counters of the function NAME (created on first use; entries never move). */
static struct sym_counts *sym_counts_of(const char *name)
{
    if (!name) {
        return &unknown_sym;
    }
    if (syms_cap == 0 || 2 * (syms_len + 1) > syms_cap) {
        size_t cap = syms_cap ? 2 * syms_cap : 1024;
        struct sym_counts **t = calloc(cap, sizeof *t);
        if (!t) {
            return &unknown_sym;
        }
        for (size_t k = 0; k < syms_cap; k++) {
            if (syms[k]) {
                t[sym_slot(t, cap, syms[k]->name)] = syms[k];
            }
        }
        free(syms);
        syms = t;
        syms_cap = cap;
    }
    size_t h = sym_slot(syms, syms_cap, name);
    if (!syms[h]) {
        struct sym_counts *e = calloc(1, sizeof *e);
        if (!e) {
            return &unknown_sym;
        }
        e->name = name;
        syms[h] = e;
        syms_len++;
    }
    return syms[h];
}

/* Load (1), store (2) or neither (0), for an instruction of the loads-and-stores group. */
static int load_store(uint32_t i)
{
    if ((i & 0x0A000000u) != 0x08000000u) {
        return 0; /* op0 is not x1x0: not a load or store */
    }
    uint32_t b29_28 = (i >> 28) & 3;
    bool l22 = (i >> 22) & 1;
    switch (b29_28) {
    case 0: /* exclusive / ordered, SIMD structures (LD1..LD4 / ST1..ST4): L is bit 22 */
        return l22 ? 1 : 2;
    case 1:
        if (((i >> 24) & 1) == 0) {
            return 1; /* load register (literal) */
        }
        /* LDAPR / STLR (unscaled immediate) and memory tagging: opc bits 23:22 */
        return ((i >> 22) & 3) == 0 ? 2 : 1;
    case 2: /* pairs: L is bit 22 */
        return l22 ? 1 : 2;
    default: { /* registers: opc (23:22) with size (31:30) and V (26) */
        uint32_t opc = (i >> 22) & 3, size = i >> 30, v = (i >> 26) & 1;
        bool atomic = ((i >> 24) & 1) == 0 && ((i >> 21) & 1) == 1 && ((i >> 10) & 3) == 0;
        if (atomic) {
            return 1; /* LDADD, SWP, ...: a read-modify-write, counted as a load */
        }
        if (v) {
            return (opc & 1) ? 1 : 2; /* 00, 10 store (10: 128-bit); 01, 11 load */
        }
        if (opc == 0) {
            return 2;
        }
        if (size == 3 && opc == 2) {
            return 0; /* PRFM */
        }
        return 1;
    }
    }
}

static int classify(uint32_t i)
{
    /* SDOT / UDOT (vector): 0 Q U 01110 10 0 Rm 100101 Rn Rd; USDOT: ... 100111 ... */
    if ((i & 0x9FE0FC00u) == 0x0E809400u || (i & 0xBFE0FC00u) == 0x0E809C00u) {
        return C_DOT;
    }
    /* SDOT / UDOT (by element): 0 Q U 01111 10 L M Rm 1110 H 0 Rn Rd; SUDOT / USDOT (by
     * element): 0 Q 0 01111 0x L M Rm 1111 H 0 Rn Rd */
    if ((i & 0x9FC0F400u) == 0x0F80E000u || (i & 0xBF40F400u) == 0x0F00F000u) {
        return C_DOT;
    }
    /* SMMLA 0x4E80A400, UMMLA 0x6E80A400, USMMLA 0x4E80AC00 (Rm, Rn, Rd free) */
    if ((i & 0xDFE0FC00u) == 0x4E80A400u || (i & 0xFFE0FC00u) == 0x4E80AC00u) {
        return C_MMLA;
    }
    switch (load_store(i)) {
    case 1:
        return C_LOAD;
    case 2:
        return C_STORE;
    default:
        break;
    }
    /* Data processing, SIMD & floating point: op0 bits 28:25 = x111 */
    if (((i >> 25) & 7) == 7) {
        return C_SIMD;
    }
    return C_OTHER;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    uint64_t n[N_CLASSES] = {0};
    size_t insns = qemu_plugin_tb_n_insns(tb);
    for (size_t k = 0; k < insns; k++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, k);
        uint32_t op = 0;
        if (qemu_plugin_insn_size(insn) == 4) {
            memcpy(&op, qemu_plugin_insn_data(insn), 4); /* little-endian guest and host */
        }
        n[classify(op)]++;
        n[C_TOTAL]++;
    }
    struct sym_counts *sym = NULL;
    if (syms_path && insns > 0) {
        sym = sym_counts_of(qemu_plugin_insn_symbol(qemu_plugin_tb_get_insn(tb, 0)));
    }
    for (int c = 0; c < N_CLASSES; c++) {
        if (n[c]) {
            qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &counts[c],
                                                     n[c]);
            if (sym) {
                qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                                         &sym->counts[c], n[c]);
            }
        }
    }
}

/* One line of the syms=FILE output (the name JSON-escaped). */
static void write_sym(FILE *f, const struct sym_counts *e)
{
    if (e->counts[C_TOTAL] == 0) {
        return;
    }
    fputs("{\"symbol\":\"", f);
    for (const char *p = e->name; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
        } else if (ch < 0x20 || ch > 0x7e) {
            fprintf(f, "\\u%04x", ch);
        } else {
            fputc(ch, f);
        }
    }
    fputc('"', f);
    for (int c = 0; c < N_CLASSES; c++) {
        fprintf(f, ",\"%s\":%" PRIu64, class_names[c], e->counts[c]);
    }
    fputs("}\n", f);
}

static void append_line(const char *region, const uint64_t *v)
{
    char line[512];
    int len = snprintf(line, sizeof line, "{\"region\":%s", region);
    for (int c = 0; c < N_CLASSES; c++) {
        len += snprintf(line + len, sizeof line - (size_t)len, ",\"%s\":%" PRIu64,
                        class_names[c], v[c]);
    }
    len += snprintf(line + len, sizeof line - (size_t)len, "}\n");
    if (out_len + (size_t)len + 1 > out_cap) {
        size_t cap = out_cap ? out_cap * 2 : 4096;
        while (cap < out_len + (size_t)len + 1) {
            cap *= 2;
        }
        char *p = realloc(out_lines, cap);
        if (!p) {
            return; /* out of memory: the line is lost, the run goes on */
        }
        out_lines = p;
        out_cap = cap;
    }
    memcpy(out_lines + out_len, line, (size_t)len + 1);
    out_len += (size_t)len;
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8)
{
    if (num != SYS_LSEEK_AARCH64) {
        return;
    }
    if (a2 == MARK_START) {
        memcpy(region_start, counts, sizeof counts);
        in_region = true;
    } else if (a2 == MARK_STOP && in_region) {
        uint64_t d[N_CLASSES];
        for (int c = 0; c < N_CLASSES; c++) {
            d[c] = counts[c] - region_start[c];
        }
        char name[32];
        snprintf(name, sizeof name, "%" PRIu64, n_regions++);
        append_line(name, d);
        in_region = false;
    }
}

static void at_exit(qemu_plugin_id_t id, void *p)
{
    append_line("\"all\"", counts);
    FILE *f = out_path ? fopen(out_path, "a") : stderr;
    if (!f) {
        fprintf(stderr, "insn_count: cannot open %s\n", out_path);
        f = stderr;
    }
    if (out_lines) {
        fputs(out_lines, f);
    }
    if (f != stderr) {
        fclose(f);
    }
    if (syms_path) {
        FILE *g = fopen(syms_path, "w");
        if (!g) {
            fprintf(stderr, "insn_count: cannot open %s\n", syms_path);
            return;
        }
        for (size_t k = 0; k < syms_cap; k++) {
            if (syms[k]) {
                write_sym(g, syms[k]);
            }
        }
        write_sym(g, &unknown_sym);
        fclose(g);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv)
{
    if (strcmp(info->target_name, "aarch64") != 0) {
        fprintf(stderr, "insn_count: aarch64 guests only, not %s\n", info->target_name);
        return -1;
    }
    for (int k = 0; k < argc; k++) {
        if (strncmp(argv[k], "out=", 4) == 0) {
            out_path = argv[k] + 4;
        } else if (strncmp(argv[k], "syms=", 5) == 0) {
            syms_path = argv[k] + 5;
        } else {
            fprintf(stderr, "insn_count: unknown argument %s (out=FILE, syms=FILE)\n", argv[k]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
