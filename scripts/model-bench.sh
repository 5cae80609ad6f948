#!/usr/bin/env bash
# Tessera against llama.cpp on whole models of the sizes apps ship (a benchmark, not a test):
# Gemma 3 270M Q4_K_M and the synthetic Q4_K_M models of real shapes (scripts/synth/:
# Llama 3.2 1B, Qwen2.5 1.5B, Gemma 3 1B, LFM2 350M, Qwen3.5 0.8B; on request the larger
# SmolLM3 3B, Phi-4-mini and Gemma 4 E2B), generated if missing.
#
#  1. model_compare.py (the anchor's: Tessera and llama.cpp alternating, A B A B) on each model,
#     pp512 and tg128 at 1 and 2 threads, once per Tessera kernel tier: the tier the CPU has,
#     and the AVX2 tier forced (TESSERA_CPU_TIER=avx2) where the CPU has AVX-512. llama.cpp is
#     the anchor's native build, except in the forced AVX2 tier's pass when ANCHOR_AVX2 holds an
#     AVX2-only llama.cpp (scripts/model-bench/build-avx2-peer.sh): then each tier meets
#     llama.cpp as it runs on a CPU of that tier. Passes with the same build show the run-to-run
#     noise.
#  2. Generation after 1024 and 4096 cached tokens (`bench model -d`) against llama.cpp doing
#     the same (scripts/model-bench/depth_compare.py), on the --depth-models.
#  3. membw (the anchor's STREAM-like probe) at each thread count, for generation as a fraction
#     of the DRAM bound (weight bytes per token / read bandwidth).
# Then prints one table of everything (scripts/model-bench/summary.py), with the CPU and tiers.
#
# Usage: scripts/model-bench.sh [--models LIST] [--threads 1,2] [--pp 512] [--tg 128]
#            [--rounds 2] [--depths 1024,4096|none] [--depth-models LIST] [--tiers LIST]
#            [--out DIR] [--summary-only] [--high-priority]
#   --models        gemma3-270m,llama-3.2-1b,qwen2.5-1.5b,gemma-3-1b,lfm2-350m,qwen3.5-0.8b
#                   (default: these six; the synthetic ones are synth_model.py's shape names),
#                   and on request smollm3-3b,phi-4-mini,gemma-4-e2b (1.9-3.4 GB files, each
#                   written once in about a minute; their cells take several minutes per
#                   tier, so they stay out of the default run)
#   --depth-models  default llama-3.2-1b,gemma3-270m
#   --tiers         Tessera tiers (TESSERA_CPU_TIER), default: the best the CPU has, plus avx2
#                   where that is avx512_vnni
#   --out           results folder (default target/model-bench/<date-time>)
#   --high-priority run in a session of its own whose scheduling autogroup has nice -20 (root
#                   only): where the kernel groups tasks by session (sched_autogroup_enabled),
#                   other sessions' nice does not yield to a benchmark; a loaded machine gets
#                   near-quiet figures this way (both engines alike)
# Env: ANCHOR (default /tmp/anchor: venv/ with llama-cpp-python 0.3.36, membw; made by the
#      anchor's setup.sh), ANCHOR_AVX2 (default $ANCHOR-avx2, used where it exists: the anchor
#      with an AVX2-only llama.cpp, made by scripts/model-bench/build-avx2-peer.sh),
#      ANCHOR_SCRIPTS (the folder holding model_compare.py and llama_bench.py, default
#      /work/shared/anchor).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
MODELS=gemma3-270m,llama-3.2-1b,qwen2.5-1.5b,gemma-3-1b,lfm2-350m,qwen3.5-0.8b
DEPTH_MODELS=llama-3.2-1b,gemma3-270m
THREADS=1,2 PP=512 TG=128 ROUNDS=2 DEPTHS=1024,4096 TIERS="" OUT="" SUMMARY_ONLY=0 HIGH=0
ARGS=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --models) MODELS=$2; shift 2 ;;
        --depth-models) DEPTH_MODELS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --pp) PP=$2; shift 2 ;;
        --tg) TG=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --depths) DEPTHS=$2; shift 2 ;;
        --tiers) TIERS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --summary-only) SUMMARY_ONLY=1; shift ;;
        --high-priority) HIGH=1; shift ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "model-bench: unknown option $1" >&2; exit 2 ;;
    esac
done
if [ "$HIGH" = 1 ] && [ -z "${MODEL_BENCH_SESSION:-}" ]; then
    exec env MODEL_BENCH_SESSION=1 setsid -w bash "$ROOT/scripts/model-bench.sh" "${ARGS[@]}"
fi
if [ -n "${MODEL_BENCH_SESSION:-}" ]; then
    echo -20 >/proc/self/autogroup || { echo "model-bench: cannot set the autogroup's nice (root only)" >&2; exit 1; }
fi
ANCHOR=${ANCHOR:-/tmp/anchor}
ANCHOR_SCRIPTS=${ANCHOR_SCRIPTS:-/work/shared/anchor}
ANCHOR_AVX2=${ANCHOR_AVX2:-$ANCHOR-avx2}
OUT=${OUT:-target/model-bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
PY=target/venv/bin/python
LPY=$ANCHOR/venv/bin/python
TESSERA=$ROOT/target/release/tessera

summary() { "$PY" scripts/model-bench/summary.py "$OUT"; }
if [ "$SUMMARY_ONLY" = 1 ]; then summary; exit 0; fi

[ -x "$LPY" ] && "$LPY" -c "import llama_cpp" 2>/dev/null || {
    echo "model-bench: no llama-cpp-python at $LPY: run the anchor's setup.sh (ANCHOR=$ANCHOR)" >&2; exit 1; }
[ -f "$ANCHOR_SCRIPTS/model_compare.py" ] || {
    echo "model-bench: no model_compare.py in $ANCHOR_SCRIPTS (set ANCHOR_SCRIPTS)" >&2; exit 1; }
bash scripts/setup.sh demo
cargo build --release --quiet -p tessera-cli

# The models: the real Gemma 3 270M (scripts/setup.sh) and the synthetic ones (generated once).
model_path() {
    case "$1" in
        gemma3-270m) echo "$ROOT/target/models/gemma3-270m-q4_k_m.gguf" ;;
        *) "$PY" scripts/synth/synth_model.py "$1" --list | cut -f2 ;;
    esac
}
IFS=, read -r -a models <<<"$MODELS"
for m in "${models[@]}"; do
    [ "$m" = gemma3-270m ] || "$PY" scripts/synth/synth_model.py "$m" >/dev/null
    [ -f "$(model_path "$m")" ] || { echo "model-bench: no model $m" >&2; exit 1; }
done

# The CPU and the tiers.
# The native tier: the best that `tessera info` lists among the tiers per weight type.
tiers_line=$("$TESSERA" info | grep "kernel tier per weight type" || true)
native=unknown
for t in avx512_vnni avx2 i8mm dotprod neon scalar; do
    case "$tiers_line" in *"=$t"*) native=$t; break ;; esac
done
if [ -z "$TIERS" ]; then
    TIERS=$native
    [ "$native" = avx512_vnni ] && TIERS=$native,avx2
fi
# llama.cpp for a tier's pass: the AVX2-only build for the forced AVX2 tier where there is one.
peer_for() {
    if [ "$1" = avx2 ] && [ "$native" != avx2 ] && [ -x "$ANCHOR_AVX2/venv/bin/python" ]; then
        echo "$ANCHOR_AVX2"
    else
        echo "$ANCHOR"
    fi
}
IFS=, read -r -a tiers <<<"$TIERS"
{
    cpuinfo() { sed -n "s/^$1[[:space:]]*: //p" /proc/cpuinfo | head -n 1; }
    echo "cpu: $(cpuinfo 'model name') (family $(cpuinfo 'cpu family') model $(cpuinfo model)), $(nproc) CPUs"
    echo "native tier: $native"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- rust || echo ' (modified)')"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); scheduling: nice $(nice), autogroup $(cat /proc/self/autogroup 2>/dev/null || echo none)"
    for t in "${tiers[@]}"; do
        p=$(peer_for "$t")
        kind="native build"; [ "$p" = "$ANCHOR" ] || kind="AVX2-only build"
        echo "peer for tier $t: llama.cpp, $kind ($p)"
    done
    for m in "${models[@]}"; do echo "model: $m $(model_path "$m")"; done
} >"$OUT/meta.txt"
cat "$OUT/meta.txt"

# DRAM read bandwidth per thread count.
if [ -x "$ANCHOR/membw" ]; then
    for t in ${THREADS//,/ }; do
        OMP_NUM_THREADS=$t OMP_PROC_BIND=close "$ANCHOR/membw" 1024 16 >"$OUT/membw-t$t.txt"
        grep "DRAM read" "$OUT/membw-t$t.txt" | sed "s/^/membw t=$t: /"
    done
fi

IFS=, read -r -a depth_models <<<"$DEPTH_MODELS"
for tier in "${tiers[@]}"; do
    for m in "${models[@]}"; do
        echo "== $m, tier $tier: pp$PP / tg$TG, threads $THREADS, $ROUNDS rounds ($(date +%T), load $(cut -d" " -f1 /proc/loadavg))"
        TESSERA_CPU_TIER=$tier ANCHOR=$(peer_for "$tier") python3 "$ANCHOR_SCRIPTS/model_compare.py" --tessera "$TESSERA" \
            --model "$(model_path "$m")" --threads "$THREADS" --pp "$PP" --tg "$TG" --rounds "$ROUNDS" \
            | tee "$OUT/compare-$tier-$m.txt"
    done
done
if [ "$DEPTHS" != none ]; then
    for tier in "${tiers[@]}"; do
        for m in "${depth_models[@]}"; do
            echo "== $m, tier $tier: tg$TG after $DEPTHS cached tokens ($(date +%T), load $(cut -d" " -f1 /proc/loadavg))"
            TESSERA_CPU_TIER=$tier ANCHOR=$(peer_for "$tier") python3 scripts/model-bench/depth_compare.py --tessera "$TESSERA" \
                --model "$(model_path "$m")" --depths "$DEPTHS" --threads "$THREADS" --tg "$TG" \
                --json "$OUT/depth-$tier-$m.jsonl" | tee "$OUT/depth-$tier-$m.txt"
        done
    done
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
summary | tee "$OUT/summary.md"
