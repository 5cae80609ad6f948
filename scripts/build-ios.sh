#!/usr/bin/env bash
# Builds ios/TesseraFFI.xcframework: the Rust library tessera-ffi (staticlib, with the os_log
# sink) for iOS devices, the iOS simulator and macOS, with the C header and module map of the
# uniffi bindings, which it regenerates (with the Kotlin ones) from the library just built
# (scripts/bindgen.sh --library), so the shipped library and bindings come from one build.
# BINDGEN=0 skips the bindings. (Apps can also build from source: ios/build-rust.sh, run by the
# podspec's script phase when there is no XCFramework.)
#
# Needs macOS with Xcode (xcodebuild, lipo) and rustup. Usage:
#   scripts/build-ios.sh            # release
#   PROFILE=debug scripts/build-ios.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROFILE="${PROFILE:-release}"
GENERATED="$ROOT/ios/Generated"
OUT="$ROOT/ios/TesseraFFI.xcframework"
WORK="$ROOT/target/tessera-ios"
LIB="libtessera_ffi.a"

DEVICE_TARGETS=(aarch64-apple-ios)
SIM_TARGETS=(aarch64-apple-ios-sim x86_64-apple-ios)
MAC_TARGETS=(aarch64-apple-darwin x86_64-apple-darwin)

if [ "$(uname -s)" != "Darwin" ]; then
  echo "build-ios.sh needs macOS with Xcode (xcodebuild, lipo)" >&2
  exit 1
fi
for tool in cargo xcodebuild lipo; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

# The same minimum versions as React Native's.
export IPHONEOS_DEPLOYMENT_TARGET="${IPHONEOS_DEPLOYMENT_TARGET:-15.1}"
export MACOSX_DEPLOYMENT_TARGET="${MACOSX_DEPLOYMENT_TARGET:-11.0}"

ALL_TARGETS=("${DEVICE_TARGETS[@]}" "${SIM_TARGETS[@]}" "${MAC_TARGETS[@]}")
if command -v rustup >/dev/null; then
  rustup target add "${ALL_TARGETS[@]}"
fi

profile_args=(--release)
profile_dir=release
if [ "$PROFILE" = "debug" ]; then
  profile_args=()
  profile_dir=debug
elif [ "$PROFILE" != "release" ]; then
  profile_args=(--profile "$PROFILE")
  profile_dir="$PROFILE"
fi

cd "$ROOT"
for target in "${ALL_TARGETS[@]}"; do
  echo "==> cargo build tessera-ffi for $target ($PROFILE)"
  cargo build -p tessera-ffi --lib --target "$target" --features oslog ${profile_args[@]+"${profile_args[@]}"}
done

lib_of() { echo "$ROOT/target/$1/$profile_dir/$LIB"; }

# The bindings from this build.
if [ "${BINDGEN:-1}" = 1 ]; then
  echo "==> bindings from $(lib_of "${DEVICE_TARGETS[0]}")"
  bash "$ROOT/scripts/bindgen.sh" --library "$(lib_of "${DEVICE_TARGETS[0]}")"
fi
shopt -s nullglob
headers=("$GENERATED"/*.h)
modulemaps=("$GENERATED"/*.modulemap)
if [ ${#headers[@]} -eq 0 ] || [ ${#modulemaps[@]} -ne 1 ]; then
  echo "ios/Generated must hold the uniffi C header(s) and one .modulemap (scripts/bindgen.sh)" >&2
  exit 1
fi

rm -rf "$WORK"
mkdir -p "$WORK/ios" "$WORK/ios-simulator" "$WORK/macos" "$WORK/include"

# One library per platform: lipo the simulator and Mac architectures together.
cp "$(lib_of "${DEVICE_TARGETS[0]}")" "$WORK/ios/$LIB"
sim_libs=()
for t in "${SIM_TARGETS[@]}"; do sim_libs+=("$(lib_of "$t")"); done
lipo -create "${sim_libs[@]}" -output "$WORK/ios-simulator/$LIB"
mac_libs=()
for t in "${MAC_TARGETS[@]}"; do mac_libs+=("$(lib_of "$t")"); done
lipo -create "${mac_libs[@]}" -output "$WORK/macos/$LIB"

# Headers: the uniffi C header(s), and the module map under the name clang looks for.
cp "${headers[@]}" "$WORK/include/"
cp "${modulemaps[0]}" "$WORK/include/module.modulemap"

rm -rf "$OUT"
xcodebuild -create-xcframework \
  -library "$WORK/ios/$LIB" -headers "$WORK/include" \
  -library "$WORK/ios-simulator/$LIB" -headers "$WORK/include" \
  -library "$WORK/macos/$LIB" -headers "$WORK/include" \
  -output "$OUT"

echo "==> $OUT"
for slice in "$OUT"/*/; do
  lib="$slice$LIB"
  [ -f "$lib" ] && echo "    $(basename "$slice"): $(lipo -archs "$lib")"
done
