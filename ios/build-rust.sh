#!/usr/bin/env bash
# The pod's script phase when react-native-tessera is built from source (no prebuilt
# ios/TesseraFFI.xcframework in the package): builds the Rust library tessera-ffi (staticlib,
# with the os_log sink) for the platform and architectures Xcode is building, and puts
# libtessera_ffi.a where the app links it from
# ($PODS_CONFIGURATION_BUILD_DIR/react-native-tessera-rust, see react-native-tessera.podspec).
#
# Needs rustup (https://rustup.rs): it adds the iOS targets on the first build. Xcode gives the
# environment: PLATFORM_NAME, ARCHS, CONFIGURATION, IPHONEOS_DEPLOYMENT_TARGET,
# PODS_TARGET_SRCROOT, PODS_CONFIGURATION_BUILD_DIR. Optional: TESSERA_RUST_PROFILE (release, the
# default even for Debug app builds: the kernels need optimization; or debug),
# TESSERA_CARGO_TARGET_DIR (default: target/ in the package).
set -euo pipefail

ROOT="${PODS_TARGET_SRCROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
OUT="${PODS_CONFIGURATION_BUILD_DIR:?run from Xcode (PODS_CONFIGURATION_BUILD_DIR)}/react-native-tessera-rust"
PROFILE="${TESSERA_RUST_PROFILE:-release}"
export CARGO_TARGET_DIR="${TESSERA_CARGO_TARGET_DIR:-$ROOT/target}"
# Xcode's PATH does not have rustup's folder.
export PATH="$HOME/.cargo/bin:$PATH"

command -v cargo >/dev/null || {
  echo "error: react-native-tessera: cargo not found: install Rust with rustup (https://rustup.rs), or ship ios/TesseraFFI.xcframework" >&2
  exit 1
}
[ -f "$ROOT/Cargo.toml" ] || {
  echo "error: react-native-tessera: neither ios/TesseraFFI.xcframework nor the Rust sources (Cargo.toml) are in $ROOT" >&2
  exit 1
}

targets=()
for arch in ${ARCHS:-arm64}; do
  case "${PLATFORM_NAME:-iphoneos}:$arch" in
    iphoneos:arm64) targets+=(aarch64-apple-ios) ;;
    iphonesimulator:arm64) targets+=(aarch64-apple-ios-sim) ;;
    iphonesimulator:x86_64) targets+=(x86_64-apple-ios) ;;
    *) echo "error: react-native-tessera: no Rust target for $PLATFORM_NAME $arch" >&2; exit 1 ;;
  esac
done

profile_args=(--release)
profile_dir=release
if [ "$PROFILE" = debug ]; then
  profile_args=()
  profile_dir=debug
elif [ "$PROFILE" != release ]; then
  profile_args=(--profile "$PROFILE")
  profile_dir="$PROFILE"
fi
# A package install builds exactly the versions of its Cargo.lock.
[ -d "$ROOT/.git" ] || profile_args+=(--locked)

libs=()
for t in "${targets[@]}"; do
  if command -v rustup >/dev/null; then rustup target add "$t" >/dev/null; fi
  echo "react-native-tessera: cargo build tessera-ffi for $t ($PROFILE)"
  (cd "$ROOT" && cargo build -p tessera-ffi --lib --target "$t" --features oslog ${profile_args[@]+"${profile_args[@]}"})
  libs+=("$CARGO_TARGET_DIR/$t/$profile_dir/libtessera_ffi.a")
done

mkdir -p "$OUT"
if [ ${#libs[@]} -eq 1 ]; then
  cp "${libs[0]}" "$OUT/libtessera_ffi.a"
else
  lipo -create "${libs[@]}" -output "$OUT/libtessera_ffi.a"
fi
echo "react-native-tessera: $OUT/libtessera_ffi.a (${targets[*]})"
