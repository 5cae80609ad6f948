#!/usr/bin/env bash
# Generates the uniffi bindings of rust/ffi (tessera-ffi) from the built library (uniffi's
# library mode) with the configuration in uniffi.toml:
#   Kotlin -> android/src/main/java/com/tessera/tessera_ffi.kt
#   Swift  -> ios/Generated/ (TesseraBindings.swift, TesseraFFI.h, TesseraFFI.modulemap)
# The generated files are committed.
#
# Usage:
#   scripts/bindgen.sh             # build (debug) and regenerate in place
#   scripts/bindgen.sh --release   # the same from a release build
#   scripts/bindgen.sh --check     # regenerate into a temporary folder and fail if the
#                                  # committed files differ (CI)
#
# Needs only cargo. Builds into $CARGO_TARGET_DIR (default target/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=0
profile=debug
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --release) profile=release ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bindgen.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

cd "$ROOT"
target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
cargo_args=(-p tessera-ffi --features bindgen --lib --bin uniffi-bindgen --quiet)
[ "$profile" = release ] && cargo_args+=(--release)
cargo build "${cargo_args[@]}"

case "$(uname -s)" in
  Darwin) lib="$target_dir/$profile/libtessera_ffi.dylib" ;;
  MINGW* | MSYS* | CYGWIN*) lib="$target_dir/$profile/tessera_ffi.dll" ;;
  *) lib="$target_dir/$profile/libtessera_ffi.so" ;;
esac
bindgen="$target_dir/$profile/uniffi-bindgen"
[ -f "$lib" ] || { echo "bindgen.sh: $lib not found after the build" >&2; exit 1; }

KOTLIN_DIR="android/src/main/java"
KOTLIN_FILE="com/tessera/tessera_ffi.kt"
SWIFT_DIR="ios/Generated"

generate() { # generate KOTLIN_OUT SWIFT_OUT
  mkdir -p "$1" "$2"
  # --no-format: the output must not depend on whether ktlint / swiftformat are installed.
  "$bindgen" generate --no-format --config "$ROOT/uniffi.toml" --language kotlin --out-dir "$1" "$lib"
  "$bindgen" generate --no-format --config "$ROOT/uniffi.toml" --language swift --out-dir "$2" "$lib"
}

if [ "$check" = 1 ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  generate "$tmp/kotlin" "$tmp/swift"
  stale=0
  if ! diff -u "$KOTLIN_DIR/$KOTLIN_FILE" "$tmp/kotlin/$KOTLIN_FILE" > "$tmp/kotlin.diff" 2>&1; then
    stale=1
  fi
  if ! diff -ru "$SWIFT_DIR" "$tmp/swift" > "$tmp/swift.diff" 2>&1; then
    stale=1
  fi
  if [ "$stale" = 1 ]; then
    head -n 60 "$tmp/kotlin.diff" "$tmp/swift.diff" >&2
    echo "bindgen.sh --check: the committed bindings are stale; run scripts/bindgen.sh and commit" >&2
    exit 1
  fi
  echo "bindings are up to date ($KOTLIN_DIR/$KOTLIN_FILE, $SWIFT_DIR/)"
else
  rm -rf "$SWIFT_DIR"
  rm -f "$KOTLIN_DIR/$KOTLIN_FILE"
  generate "$KOTLIN_DIR" "$SWIFT_DIR"
  echo "generated $KOTLIN_DIR/$KOTLIN_FILE and $SWIFT_DIR/: $(cd "$SWIFT_DIR" && ls | tr '\n' ' ')"
fi
