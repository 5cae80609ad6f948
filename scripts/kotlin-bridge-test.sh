#!/usr/bin/env bash
# Compiles android/.../TesseraBridge.kt with tests/kotlin-bridge/TesseraBridgeTest.kt on a plain
# JVM and runs the tests (no Android SDK, no Gradle). Prints "N passed, 0 failed".
#
# Needs a JDK (17+: `apt-get install default-jdk-headless`) and npm: the Kotlin compiler comes
# from the npm package kotlin-compiler (the JetBrains distribution), cached under
# $TESSERA_KOTLIN_CACHE (default ~/.cache/tessera).
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

# 1. The module and the package, type-checked against stand-ins of the React Native API, the
#    codegen spec and the uniffi bindings (tests/kotlin-bridge/stubs).
"$KOTLINC" -nowarn "$SRC/TesseraBridge.kt" "$SRC/TesseraModule.kt" "$SRC/TesseraPackage.kt" \
  "$ROOT"/tests/kotlin-bridge/stubs/*.kt -d "$OUT/typecheck" 2>&1 | grep -v '^OpenJDK 64-Bit Server VM warning' >&2 || true
[ -f "$OUT/typecheck/com/tessera/reactnative/TesseraModule.class" ] || { echo "TesseraModule does not compile" >&2; exit 1; }
echo "TesseraModule and TesseraPackage type-check against the API stubs"

# 2. The bridge's tests.
"$KOTLINC" -nowarn \
  "$SRC/TesseraBridge.kt" \
  "$ROOT/tests/kotlin-bridge/TesseraBridgeTest.kt" \
  -include-runtime -d "$OUT/bridge-test.jar" 2>&1 | grep -v '^OpenJDK 64-Bit Server VM warning' >&2 || true
[ -f "$OUT/bridge-test.jar" ] || { echo "compilation failed" >&2; exit 1; }
java -cp "$OUT/bridge-test.jar" TesseraBridgeTestKt
