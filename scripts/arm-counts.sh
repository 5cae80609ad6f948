#!/usr/bin/env bash
# ARM speed without a phone: exact guest instruction counts under qemu-user of Tessera's aarch64
# matmul kernels against ggml's, per CPU model (cortex-a53: NEON; cortex-a76: + dotprod; max:
# + i8mm). A benchmark, not a test: nothing asserts a count.
#
# Builds what it needs: the instruction-count plugin (scripts/build-qemu-plugin.sh); the peer,
# ggml's CPU backend from the llama.cpp that llama-cpp-python 0.3.36 vendors (its sdist is
# downloaded from PyPI and checked against a pinned sha256), cross-built with cmake (pip
# wheels in a venv) and gcc-aarch64-linux-gnu at -march=armv8-a, armv8.2-a+dotprod and
# armv8.6-a+dotprod+i8mm, in a scratch folder target/arm-counts/ (nothing of llama.cpp enters
# the repository), with scripts/arm-counts/ggml_matmul.c as its driver; and `tessera bench
# matmul` for aarch64-unknown-linux-gnu (release).
#
# Each engine runs Y = W X (W: M x K weights of the type, X: N x K F32 activations, one thread)
# once as a warm-up and then once between two count markers (see scripts/qemu-plugin/
# insn_count.c): the count is of the multiplication alone (activation conversion, kernels,
# per-call overhead), not of the set-up. Weights: --distinct-rows random rows quantized by each
# engine's own quantizer and repeated to M rows (the quantizers under qemu would take longer
# than the products; the kernels' counts do not depend on the values). Both engines run with
# their repacked (CPU_REPACK) weights where they have them for the type and CPU, and plain.
#
# Usage: scripts/arm-counts.sh [--json FILE] [--types F16,Q8_0,..] [--ns 1,16,128]
#                              [--cpus "cortex-a53 cortex-a76 max"] [--jobs J] [-M 4096] [-K 4096]
#                              [--distinct-rows 32]
# Prints a table: per type, N and CPU model, the instructions per multiply-add of Tessera and of
# ggml (the default path of each: repacked where it repacks), their ratio, the ratio of the
# plain (not repacked) paths, and the share of sdot / smmla / loads in each count. --json FILE
# writes every count (all classes, both paths) as a JSON array.
#
#        scripts/arm-counts.sh model [--model GGUF] [--pp 32,64] [--tg 8,16]
#                              [--cpus "cortex-a53 cortex-a76 max"] [--json FILE]
# The model mode: guest instructions per token of prompt processing and of generation,
# `tessera bench model` against llama-bench (cross-built from the same llama.cpp, its ggml at
# the same -march levels), one thread, default model /work/models/gemma3-270m-q4_k_m.gguf.
# Each engine runs three whole processes per CPU model, with no warm-up and one repetition:
# (pp lo, tg lo), (pp hi, tg lo), (pp lo, tg hi); per prompt token = the difference of the
# first two whole-run counts / (hi - lo), per generated token likewise from the first and the
# third, so loading, set-up and exit cancel on the same footing for both engines (llama-bench
# has no markers). Tessera's marker regions (`--count-markers`) check the differences. One qemu
# at a time (the runs are long and the counts do not depend on the load).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

MODE=matmul
if [ "${1:-}" = model ]; then MODE=model; shift; fi
JSON=""
MODEL=/work/models/gemma3-270m-q4_k_m.gguf
PPS=32,64
TGS=8,16
TYPES="F16,Q8_0,Q4_0,Q5_0,Q4_K,Q5_K,Q6_K"
NS="1,16,128"
CPUS="cortex-a53 cortex-a76 max"
JOBS=$(nproc)
M=4096
K=4096
DISTINCT=32
while [ $# -gt 0 ]; do
    case "$1" in
        --json) JSON=$2; shift 2 ;;
        --types) TYPES=$2; shift 2 ;;
        --ns) NS=$2; shift 2 ;;
        --cpus) CPUS=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        -M) M=$2; shift 2 ;;
        -K) K=$2; shift 2 ;;
        --distinct-rows) DISTINCT=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --pp) PPS=$2; shift 2 ;;
        --tg) TGS=$2; shift 2 ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "arm-counts: unknown option $1" >&2; exit 2 ;;
    esac
done

W=$ROOT/target/arm-counts
SYSROOT=/usr/aarch64-linux-gnu
LLAMA_CPP_PYTHON=0.3.36
SDIST=llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
mkdir -p "$W"
t_start=$(date +%s)
phase() { echo "arm-counts: $* ($(($(date +%s) - t_start)) s)" >&2; }

# --- tools ------------------------------------------------------------------------------------
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "arm-counts: apt-get install ${missing[*]}" >&2
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
    || rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1

PLUGIN=$(bash scripts/build-qemu-plugin.sh)
phase "plugin $PLUGIN (self-test passed)"

# --- the peer: ggml from llama-cpp-python's sdist -----------------------------------------------
if [ ! -x "$W/venv/bin/cmake" ] || [ ! -x "$W/venv/bin/ninja" ]; then
    python3 -m venv "$W/venv"
    "$W/venv/bin/pip" install -q cmake ninja
fi
if [ ! -f "$W/$SDIST" ]; then
    # The sdist through PyPI's simple index (JSON, PEP 691): pip download would build its
    # metadata (and cmake from source) first.
    python3 - "$W/$SDIST" "$SDIST_SHA256" <<'EOF'
import hashlib, json, sys, urllib.request
path, pinned = sys.argv[1], sys.argv[2]
name = path.rsplit("/", 1)[1]
req = urllib.request.Request("https://pypi.org/simple/llama-cpp-python/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req, timeout=120))["files"]
entry = next(f for f in files if f["filename"] == name)
data = urllib.request.urlopen(entry["url"], timeout=600).read()
digest = hashlib.sha256(data).hexdigest()
if digest != pinned or digest != entry["hashes"]["sha256"]:
    sys.exit(f"arm-counts: {name}: sha256 {digest}, index says {entry['hashes']['sha256']}, "
             f"pinned {pinned}")
open(path + ".part", "wb").write(data)
import os; os.replace(path + ".part", path)
EOF
fi
echo "$SDIST_SHA256  $W/$SDIST" | sha256sum -c --quiet -
LL=$W/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp
if [ ! -f "$LL/ggml/include/ggml.h" ]; then
    tar -xzf "$W/$SDIST" -C "$W" --exclude="*/vendor/llama.cpp/models" \
        "llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
fi

declare -A MARCH=([cortex-a53]=armv8-a [cortex-a76]=armv8.2-a+dotprod [max]=armv8.6-a+dotprod+i8mm)
for cpu in $CPUS; do
    march=${MARCH[$cpu]:?unknown CPU model $cpu (cortex-a53, cortex-a76, max)}
    B=$W/ggml-$march
    if [ ! -f "$B/build.ninja" ]; then
        # llama.cpp's own defaults (llamafile sgemm on, CPU_REPACK on), static, no OpenMP (one
        # thread runs the same code either way).
        PATH=$W/venv/bin:$PATH cmake -S "$LL" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
            -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
            -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$march" -DGGML_OPENMP=OFF \
            -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF \
            -DLLAMA_CURL=OFF >"$B.configure.log" 2>&1 || { cat "$B.configure.log"; exit 1; }
    fi
    PATH=$W/venv/bin:$PATH cmake --build "$B" --target ggml ggml-cpu ggml-base -j "$JOBS" \
        >"$B.build.log" 2>&1 || { tail -n 40 "$B.build.log"; exit 1; }
    aarch64-linux-gnu-gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -march="$march" \
        -I"$LL/ggml/include" -c scripts/arm-counts/ggml_matmul.c -o "$B/ggml_matmul.o"
    aarch64-linux-gnu-g++ -o "$B/ggml_matmul" "$B/ggml_matmul.o" "$B/ggml/src/libggml.a" \
        "$B/ggml/src/libggml-cpu.a" "$B/ggml/src/libggml-base.a" -lm -lpthread
done
phase "ggml built for: $(for c in $CPUS; do printf '%s ' "${MARCH[$c]}"; done)"

# --- Tessera --------------------------------------------------------------------------------------
# With its symbols (the release profile strips them; the code is the same), so that the plugin's
# syms=FILE can name Tessera's functions.
CARGO_PROFILE_RELEASE_STRIP=none cargo build --quiet --release -p tessera-cli \
    --target aarch64-unknown-linux-gnu
TESSERA=$ROOT/target/aarch64-unknown-linux-gnu/release/tessera
phase "tessera built"

if [ "$MODE" = model ]; then
    # The model runs: scripts/arm-counts-model.sh (llama-bench's build, the runs, the table).
    export W LL PLUGIN TESSERA SYSROOT MODEL PPS TGS JOBS JSON CPUS t_start
    exec bash scripts/arm-counts-model.sh
fi

# --- the runs -------------------------------------------------------------------------------------
R=$W/runs
rm -rf "$R"
mkdir -p "$R"
export R PLUGIN TESSERA W NS M K DISTINCT SYSROOT
export MARCH_cortex_a53=${MARCH[cortex-a53]} MARCH_cortex_a76=${MARCH[cortex-a76]} MARCH_max=${MARCH[max]}
# Whether each engine repacks TYPE on CPU: a 16 x 256 product with --repack on says so in its
# output (then the plain and the repacked weights are counted, else only the plain ones).
probe() {
    local cpu=$1 t=$2 var="MARCH_${1//-/_}" out
    local q=(qemu-aarch64 -cpu "$cpu" -L "$SYSROOT")
    out=$("${q[@]}" "$TESSERA" bench matmul --types "$t" --ns 1 --threads 1 -M 16 -K 256 \
        --repack on --count-markers --json /dev/stdout 2>/dev/null | grep '^{')
    case "$out" in *'"repacked":true'*) echo "$cpu tessera $t both" ;; *) echo "$cpu tessera $t off" ;; esac
    echo "$cpu ggml $t off"
    out=$("${q[@]}" "$W/ggml-${!var}/ggml_matmul" "$t" --ns 1 -M 16 -K 256 --repack on 2>/dev/null)
    case "$out" in *'"repacked":true'*) echo "$cpu ggml $t on" ;; esac
}
export -f probe
jobs_file=$R/jobs.txt
for cpu in $CPUS; do
    for t in ${TYPES//,/ }; do
        echo "$cpu $t"
    done
done | xargs -P "$JOBS" -L 1 bash -c 'probe "$@" >"$R/probe.$1.$2"' _
for cpu in $CPUS; do
    for t in ${TYPES//,/ }; do
        cat "$R/probe.$cpu.$t"
    done
done >"$jobs_file"
run_one() {
    local cpu=$1 engine=$2 t=$3 repack=$4
    local tag="$cpu.$engine.$t.$repack" var="MARCH_${cpu//-/_}"
    local plugin="$PLUGIN,out=$R/$tag.regions"
    local q=(qemu-aarch64 -cpu "$cpu" -L "$SYSROOT" -plugin "$plugin")
    local t0=$(date +%s)
    if [ "$engine" = tessera ]; then
        "${q[@]}" "$TESSERA" bench matmul --types "$t" --ns "$NS" --threads 1 -M "$M" -K "$K" \
            --repack "$repack" --count-markers --distinct-rows "$DISTINCT" \
            --json "$R/$tag.lines" >"$R/$tag.log" 2>&1
    else
        "${q[@]}" "$W/ggml-${!var}/ggml_matmul" "$t" --ns "$NS" -M "$M" -K "$K" \
            --repack "$repack" --distinct-rows "$DISTINCT" >"$R/$tag.lines" 2>"$R/$tag.log"
    fi || { echo "arm-counts: $tag FAILED:"; cat "$R/$tag.log"; return 1; }
    echo "arm-counts: $tag $(($(date +%s) - t0)) s" >&2
}
export -f run_one
phase "running $(wc -l <"$jobs_file") qemu jobs, $JOBS at a time"
xargs -P "$JOBS" -L 1 bash -c 'run_one "$@"' _ <"$jobs_file"
phase "runs done"

python3 scripts/arm-counts/table.py "$R" "$jobs_file" ${JSON:+--json "$JSON"}
phase "total"
