#!/usr/bin/env bash
# Builds the AVX2 tier's own peer: llama.cpp as it runs on a CPU without AVX-512.
#
# The anchor (ANCHOR, made by the anchor's setup.sh) holds llama-cpp-python 0.3.36 built with
# -march=native: on an AVX-512 machine its CPU backend uses AVX-512, so Tessera's AVX2 tier
# measured against it meets a harder peer than an AVX2 machine's. This script builds llama.cpp
# 0.25.3's CPU backend (libggml-cpu.so, from the same sdist, which scripts/setup.sh fetches into
# target/downloads and checks by sha256) with AVX2 and without AVX-512, copies the anchor's venv
# to OUT and puts that library in place of the native one. `llama_print_system_info()` of the
# result is checked: AVX2 = 1 and no AVX512.
#
# Usage: scripts/model-bench/build-avx2-peer.sh [OUT]   (default: $ANCHOR-avx2)
# Env: ANCHOR (default /tmp/anchor). Needs a C/C++ compiler; cmake and ninja come from PyPI.
# About 3 minutes on 2 cores. Then: ANCHOR_AVX2=OUT scripts/model-bench.sh ... (the AVX2 tier's
# pass then measures llama.cpp from OUT).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
ANCHOR=${ANCHOR:-/tmp/anchor}
OUT=${1:-$ANCHOR-avx2}
SDIST=$ROOT/target/downloads/llama_cpp_python-0.3.36.tar.gz
LPY=$ANCHOR/venv/bin/python
[ -x "$LPY" ] && "$LPY" -c "import llama_cpp" 2>/dev/null || {
    echo "build-avx2-peer: no llama-cpp-python at $LPY: run the anchor's setup.sh (ANCHOR=$ANCHOR)" >&2
    exit 1
}
[ -f "$SDIST" ] || bash scripts/setup.sh all
WORK=$ROOT/target/avx2-peer
mkdir -p "$WORK"
SRC=$WORK/llama_cpp_python-0.3.36/vendor/llama.cpp
[ -d "$SRC/ggml" ] || tar -xzf "$SDIST" -C "$WORK" llama_cpp_python-0.3.36/vendor/llama.cpp
# cmake and ninja in a venv of their own (not in the anchor's, which is copied as it is).
TOOLS=$WORK/tools
[ -x "$TOOLS/bin/cmake" ] || { python3 -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q cmake ninja; }
export PATH=$TOOLS/bin:$PATH
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
    -DGGML_AVX_VNNI=OFF -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >"$WORK/cmake.log"
cmake --build "$WORK/build" --target ggml-cpu -j "$(nproc)" >"$WORK/build.log"
LIB=$(find "$WORK/build" -name 'libggml-cpu.so*' -type f | head -n 1)
[ -n "$LIB" ] || { echo "build-avx2-peer: no libggml-cpu.so in $WORK/build" >&2; exit 1; }
if objdump -d "$LIB" | grep -q '%zmm'; then
    echo "build-avx2-peer: $LIB uses zmm registers (AVX-512)" >&2; exit 1
fi
rm -rf "$OUT"
cp -a "$ANCHOR" "$OUT"
# Every name the venv loads the CPU backend by (llama_cpp/lib and the wheel's lib/).
mapfile -t names < <(find "$OUT/venv" -name 'libggml-cpu.so*')
[ ${#names[@]} -gt 0 ] || { echo "build-avx2-peer: no libggml-cpu.so in $OUT/venv" >&2; exit 1; }
for n in "${names[@]}"; do rm -f "$n" && cp "$LIB" "$n"; done
info=$("$OUT/venv/bin/python" -c "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())")
case "$info" in
    *"AVX2 = 1"*) ;;
    *) echo "build-avx2-peer: the peer does not report AVX2: $info" >&2; exit 1 ;;
esac
case "$info" in
    *"AVX512 = 1"*) echo "build-avx2-peer: the peer still reports AVX512: $info" >&2; exit 1 ;;
esac
echo "build-avx2-peer: $OUT: $info"
