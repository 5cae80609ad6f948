#!/usr/bin/env bash
# Runs the generated Kotlin bindings (android/src/main/java/com/tessera/tessera_ffi.kt) against
# the real libtessera_ffi on a plain JVM: tests/kotlin/TesseraTest.kt and ModelTest.kt (Gemma 3
# 270M from $TESSERA_GEMMA_GGUF, default target/models/gemma3-270m-q4_k_m.gguf). Prints
# "N passed, M failed" and exits non-zero on any failure. Idempotent; installs what it needs:
#   - a JDK and JNA from apt (default-jdk-headless, libjna-java: /usr/share/java/jna.jar);
#   - the Kotlin compiler from the npm package kotlin-compiler (JetBrains' distribution, which
#     also ships kotlinx-coroutines-core-jvm.jar, needed by the bindings' suspend functions),
#     cached under $TESSERA_KOTLIN_CACHE (default ~/.cache/tessera, shared with
#     scripts/kotlin-bridge-test.sh).
# Builds tessera-ffi (debug, as the Node end-to-end tests do) into $CARGO_TARGET_DIR (default
# target/); compiled test classes go to target/kotlin-test/.
set -euo pipefail

KOTLIN_VERSION="${KOTLIN_VERSION:-2.4.20}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TESSERA_KOTLIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
KOTLIN_HOME="$CACHE/kotlin-compiler-$KOTLIN_VERSION"
KOTLINC="$KOTLIN_HOME/bin/kotlinc"
JNA_JAR="${JNA_JAR:-/usr/share/java/jna.jar}"
start=$(date +%s)

# 1. JDK and JNA.
if ! command -v java >/dev/null || ! command -v javac >/dev/null || [ ! -f "$JNA_JAR" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "kotlin-test: apt-get install default-jdk-headless libjna-java" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq default-jdk-headless libjna-java >/dev/null
fi
[ -f "$JNA_JAR" ] || { echo "kotlin-test: $JNA_JAR not found (set JNA_JAR)" >&2; exit 1; }

# 2. kotlinc (with kotlinx-coroutines) from npm.
if [ ! -f "$KOTLINC" ]; then
  echo "kotlin-test: fetching kotlin-compiler@$KOTLIN_VERSION from npm into $KOTLIN_HOME" >&2
  mkdir -p "$CACHE"
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "kotlin-compiler@$KOTLIN_VERSION" >/dev/null)
  tar -xzf "$tmp"/kotlin-compiler-*.tgz -C "$tmp"
  rm -rf "$KOTLIN_HOME"
  mv "$tmp/package" "$KOTLIN_HOME"
  rm -rf "$tmp"
fi
chmod +x "$KOTLIN_HOME"/bin/* 2>/dev/null || true
COROUTINES_JAR="$KOTLIN_HOME/lib/kotlinx-coroutines-core-jvm.jar"
STDLIB_JAR="$KOTLIN_HOME/lib/kotlin-stdlib.jar"
for jar in "$COROUTINES_JAR" "$STDLIB_JAR"; do
  [ -f "$jar" ] || { echo "kotlin-test: $jar missing from the Kotlin distribution" >&2; exit 1; }
done

# 3. The library.
cd "$ROOT"
target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
cargo build --quiet -p tessera-ffi --lib
LIB_DIR="$target_dir/debug"
[ -f "$LIB_DIR/libtessera_ffi.so" ] || { echo "kotlin-test: $LIB_DIR/libtessera_ffi.so not found" >&2; exit 1; }

# 4. Compile the bindings and the test (skipped when nothing changed).
OUT="$ROOT/target/kotlin-test"
JAR="$OUT/tessera-test.jar"
SOURCES=("$ROOT/android/src/main/java/com/tessera/tessera_ffi.kt" "$ROOT/tests/kotlin/TesseraTest.kt" "$ROOT/tests/kotlin/ModelTest.kt")
stamp="$(cat "${SOURCES[@]}" | sha256sum | cut -d' ' -f1)-$KOTLIN_VERSION"
mkdir -p "$OUT"
if [ ! -f "$JAR" ] || [ "$(cat "$OUT/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$JAR" "$OUT/stamp"
  echo "kotlin-test: kotlinc (bindings + test)" >&2
  "$KOTLINC" -nowarn -cp "$JNA_JAR:$COROUTINES_JAR" "${SOURCES[@]}" -d "$JAR" 2>&1 \
    | grep -v '^OpenJDK 64-Bit Server VM warning' >&2 || true
  [ -f "$JAR" ] || { echo "kotlin-test: compilation failed" >&2; exit 1; }
  echo "$stamp" > "$OUT/stamp"
fi

# 5. Run.
echo "kotlin-test: running on $(java -version 2>&1 | head -n 1), library $LIB_DIR/libtessera_ffi.so" >&2
status=0
export TESSERA_GEMMA_GGUF="${TESSERA_GEMMA_GGUF:-$ROOT/target/models/gemma3-270m-q4_k_m.gguf}"
java -Djna.library.path="$LIB_DIR" -cp "$JAR:$JNA_JAR:$COROUTINES_JAR:$STDLIB_JAR" TesseraTestKt || status=$?
echo "kotlin-test: $(( $(date +%s) - start )) s" >&2
exit "$status"
