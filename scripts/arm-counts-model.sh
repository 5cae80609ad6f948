#!/usr/bin/env bash
# The model mode of scripts/arm-counts.sh (`scripts/arm-counts.sh model`, which builds the
# plugin, ggml at each -march level and Tessera, then runs this): guest instructions per token
# of prompt processing and of generation, `tessera bench model` against llama-bench, one
# thread, under qemu-aarch64 for each CPU model. A benchmark, not a test.
#
# llama-bench: llama, llama-common and llama-bench's own objects are built once in
# target/arm-counts/llama-bench-build (llama.cpp compiles only ggml-cpu with the -march level),
# then linked once per level with that level's ggml libraries (target/arm-counts/ggml-LEVEL,
# built by arm-counts.sh). Nothing of llama.cpp enters the repository.
#
# The runs, one qemu at a time, each a whole process with no warm-up and one repetition
# (Tessera: -r 1 --no-warmup --count-markers --device cpu; llama-bench: -r 1 --no-warmup):
#   lo:   -p PP_LO -n TG_LO      pphi: -p PP_HI -n TG_LO      tghi: -p PP_LO -n TG_HI
# per prompt token = (pphi - lo) / (PP_HI - PP_LO), per generated token = (tghi - lo) /
# (TG_HI - TG_LO), for every class of the plugin: loading, set-up and exit cancel, the same way
# for both engines. The plugin's syms=FILE gives each run's counts per function, differenced the
# same way, for the kernels that dominate.
#
# Environment (from arm-counts.sh): W LL PLUGIN TESSERA SYSROOT MODEL PPS TGS JOBS JSON CPUS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${W:?run through scripts/arm-counts.sh model}"
t_start=${t_start:-$(date +%s)}
phase() { echo "arm-counts: $* ($(($(date +%s) - t_start)) s)" >&2; }
[ -f "$MODEL" ] || { echo "arm-counts: no model at $MODEL (--model GGUF)" >&2; exit 2; }
IFS=, read -r PP_LO PP_HI <<<"$PPS"
IFS=, read -r TG_LO TG_HI <<<"$TGS"
for v in "$PP_LO" "$PP_HI" "$TG_LO" "$TG_HI"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "arm-counts: --pp and --tg take LO,HI token counts" >&2; exit 2; }
done
if [ "$PP_HI" -le "$PP_LO" ] || [ "$TG_HI" -le "$TG_LO" ] || [ "$PP_LO" -lt 1 ] || [ "$TG_LO" -lt 1 ]; then
    echo "arm-counts: --pp LO,HI and --tg LO,HI need 1 <= LO < HI" >&2
    exit 2
fi

declare -A MARCH=([cortex-a53]=armv8-a [cortex-a76]=armv8.2-a+dotprod [max]=armv8.6-a+dotprod+i8mm)

# --- llama-bench, once, then linked per level -----------------------------------------------------
LB=$W/llama-bench-build
if [ ! -f "$LB/build.ninja" ]; then
    PATH=$W/venv/bin:$PATH cmake -S "$LL" -B "$LB" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
        -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
        -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8-a -DGGML_OPENMP=OFF \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >"$LB.configure.log" 2>&1 \
        || { cat "$LB.configure.log"; exit 1; }
fi
PATH=$W/venv/bin:$PATH cmake --build "$LB" --target llama-bench -j "$JOBS" >"$LB.build.log" 2>&1 \
    || { tail -n 40 "$LB.build.log"; exit 1; }
# The link command of llama-bench, with the ggml libraries of each level instead of the build's.
link=$(cd "$LB" && "$W/venv/bin/ninja" -t commands llama-bench | tail -n 1)
case "$link" in
    *ggml/src/libggml-cpu.a*) ;;
    *) echo "arm-counts: llama-bench's link command names no ggml/src/libggml-cpu.a: $link" >&2; exit 1 ;;
esac
for cpu in $CPUS; do
    march=${MARCH[$cpu]:?unknown CPU model $cpu}
    G=$W/ggml-$march/ggml/src
    out=$W/llama-bench-$march
    cmd=${link//ggml\/src\/libggml-cpu.a/$G/libggml-cpu.a}
    cmd=${cmd//ggml\/src\/libggml-base.a/$G/libggml-base.a}
    cmd=${cmd//ggml\/src\/libggml.a/$G/libggml.a}
    cmd=$(sed -E "s#-o [^ ]*llama-bench( |$)#-o $out\1#" <<<"$cmd")
    (cd "$LB" && eval "$cmd")
done
phase "llama-bench linked for: $(for c in $CPUS; do printf '%s ' "${MARCH[$c]}"; done)"

# --- the runs ---------------------------------------------------------------------------------------
R=$W/model-runs
rm -rf "$R"
mkdir -p "$R"
echo "pp $PP_LO $PP_HI tg $TG_LO $TG_HI" >"$R/sizes"
for cpu in $CPUS; do
    march=${MARCH[$cpu]}
    for engine in tessera llama; do
        for run in lo pphi tghi; do
            pp=$PP_LO tg=$TG_LO
            [ "$run" = pphi ] && pp=$PP_HI
            [ "$run" = tghi ] && tg=$TG_HI
            tag=$cpu.$engine.$run
            q=(qemu-aarch64 -cpu "$cpu" -L "$SYSROOT"
                -plugin "$PLUGIN,out=$R/$tag.regions,syms=$R/$tag.syms")
            t0=$(date +%s)
            if [ "$engine" = tessera ]; then
                "${q[@]}" "$TESSERA" bench model "$MODEL" -p "$pp" -n "$tg" -t 1 -r 1 \
                    --no-warmup --count-markers --device cpu >"$R/$tag.out" 2>"$R/$tag.log"
            else
                "${q[@]}" "$W/llama-bench-$march" -m "$MODEL" -p "$pp" -n "$tg" -t 1 -r 1 \
                    --no-warmup -o jsonl >"$R/$tag.out" 2>"$R/$tag.log"
            fi || { echo "arm-counts: $tag FAILED:" >&2; tail -n 30 "$R/$tag.log" >&2; exit 1; }
            phase "$tag (-p $pp -n $tg) $(($(date +%s) - t0)) s"
        done
    done
done

python3 scripts/arm-counts/model_table.py "$R" $CPUS ${JSON:+--json "$JSON"}
phase "total"
