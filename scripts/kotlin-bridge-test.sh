#!/usr/bin/env bash
# The Android module's Kotlin on a plain JVM (no Android SDK, no Gradle):
#  1. TesseraModule and TesseraPackage type-check against stand-ins of the React Native API
#     and the codegen spec (tests/kotlin-bridge/stubs), with the real generated uniffi bindings
#     (android/src/main/java/com/tessera/tessera_ffi.kt) when they and JNA are there;
#  2. TesseraBridge's tests with a fake native function (tests/kotlin-bridge/TesseraBridgeTest.kt);
#  3. when target/debug/libtessera_ffi.so (or $TESSERA_FFI_LIB) exists, the bridge over the real
#     Rust core through the generated callJson (tests/kotlin-bridge/TesseraBridgeNativeTest.kt:
#     compute, cancel, logs, and closing the module closes its sessions);
#  4. the bridge over the real bindings with no library to load (JNA pointed at an empty folder):
#     the clear NativeLibrary error (tests/kotlin-bridge/MissingLibraryTest.kt).
# Prints "N passed, M failed" (all parts together) and exits non-zero on a failure.
#
# Needs a JDK (17+: `apt-get install default-jdk-headless`; part 3 also libjna-java) and npm:
# the Kotlin compiler comes from the npm package kotlin-compiler (the JetBrains distribution,
# which ships kotlinx-coroutines too), cached under $TESSERA_KOTLIN_CACHE (default
# ~/.cache/tessera, shared with scripts/kotlin-test.sh).
set -euo pipefail

KOTLIN_VERSION="${KOTLIN_VERSION:-2.4.20}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TESSERA_KOTLIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
KOTLIN_HOME="$CACHE/kotlin-compiler-$KOTLIN_VERSION"
KOTLINC="$KOTLIN_HOME/bin/kotlinc"

command -v java >/dev/null || { echo "java not found: install a JDK (apt-get install default-jdk-headless)" >&2; exit 1; }

if [ ! -f "$KOTLINC" ]; then
  echo "fetching kotlin-compiler@$KOTLIN_VERSION from npm into $KOTLIN_HOME" >&2
  mkdir -p "$CACHE"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "kotlin-compiler@$KOTLIN_VERSION" >/dev/null)
  tar -xzf "$tmp"/kotlin-compiler-*.tgz -C "$tmp"
  rm -rf "$KOTLIN_HOME"
  mv "$tmp/package" "$KOTLIN_HOME"
fi
chmod +x "$KOTLIN_HOME"/bin/* 2>/dev/null || true

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
SRC="$ROOT/android/src/main/java/com/tessera/reactnative"
BINDINGS="$ROOT/android/src/main/java/com/tessera/tessera_ffi.kt"
JNA_JAR="${JNA_JAR:-/usr/share/java/jna.jar}"
COROUTINES_JAR="$KOTLIN_HOME/lib/kotlinx-coroutines-core-jvm.jar"
STDLIB_JAR="$KOTLIN_HOME/lib/kotlin-stdlib.jar"
kotlinc() { "$KOTLINC" -nowarn "$@" 2>&1 | grep -v '^OpenJDK 64-Bit Server VM warning' >&2 || true; }

# 1. Type-check the module and the package (compiled with the native bridge test when the
#    real bindings are there).
lib="${TESSERA_FFI_LIB:-$ROOT/target/debug/libtessera_ffi.so}"
native=0
if [ -f "$BINDINGS" ] && [ -f "$JNA_JAR" ]; then
  uniffi=("$BINDINGS" "$ROOT/tests/kotlin-bridge/TesseraBridgeNativeTest.kt" "$ROOT/tests/kotlin-bridge/MissingLibraryTest.kt")
  what="the real uniffi bindings"
  native=1
else
  uniffi=("$ROOT/tests/kotlin-bridge/stubs/uniffi/UniffiStub.kt")
  what="a stand-in of the uniffi bindings (no bindings or no $JNA_JAR)"
fi
kotlinc -cp "$JNA_JAR:$COROUTINES_JAR" "$SRC/TesseraBridge.kt" "$SRC/TesseraModule.kt" "$SRC/TesseraPackage.kt" "$SRC/ContentDocuments.kt" \
  "$ROOT"/tests/kotlin-bridge/stubs/*.kt "${uniffi[@]}" -d "$OUT/module"
[ -f "$OUT/module/com/tessera/reactnative/TesseraModule.class" ] || { echo "TesseraModule does not compile" >&2; exit 1; }
echo "TesseraModule and TesseraPackage type-check against React Native stand-ins and $what"

status=0
log="$OUT/results.txt"
run() { # run NAME CLASSPATH JAVA-ARGS...: runs a test main, echoing its lines but the count
  local out="$OUT/$1.txt"
  shift
  java "$@" > "$out" 2>&1 || status=1
  grep -v ' passed, [0-9]* failed$' "$out" || true
  grep ' passed, [0-9]* failed$' "$out" >> "$log" || { echo "$out: no result line" >&2; status=1; }
}

# 2. The bridge with a fake native function.
kotlinc "$SRC/TesseraBridge.kt" "$ROOT/tests/kotlin-bridge/TesseraBridgeTest.kt" -include-runtime -d "$OUT/bridge-test.jar"
[ -f "$OUT/bridge-test.jar" ] || { echo "compilation of the bridge tests failed" >&2; exit 1; }
run bridge -cp "$OUT/bridge-test.jar" TesseraBridgeTestKt

# 3. The bridge over the real library.
if [ "$native" = 1 ] && [ -f "$lib" ]; then
  export TESSERA_GEMMA_GGUF="${TESSERA_GEMMA_GGUF:-$ROOT/target/models/gemma3-270m-q4_k_m.gguf}"
  run native -Djna.library.path="$(dirname "$lib")" -cp "$OUT/module:$JNA_JAR:$COROUTINES_JAR:$STDLIB_JAR" \
    TesseraBridgeNativeTestKt
else
  echo "skipped the native bridge tests: need $lib (cargo build -p tessera-ffi), $BINDINGS (scripts/bindgen.sh) and $JNA_JAR (apt-get install libjna-java)"
fi

# 4. The real bindings with no library to load.
if [ "$native" = 1 ]; then
  mkdir -p "$OUT/empty"
  run missing -Djna.library.path="$OUT/empty" -cp "$OUT/module:$JNA_JAR:$COROUTINES_JAR:$STDLIB_JAR" MissingLibraryTestKt
fi

# One closing line for all parts.
awk '{ p += $1; f += $3 } END { print p " passed, " f " failed"; exit (f > 0) }' "$log" || status=1
exit "$status"
