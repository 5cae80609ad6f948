#!/usr/bin/env bash
# Builds libtessera_ffi.so for Android with cargo and the NDK, into
# android/src/main/jniLibs/<abi>/ (the prebuilt libraries the npm package ships; the Gradle
# build of a repository checkout builds its own, see android/build.gradle), checks that every
# LOAD segment is aligned for 16 KB pages, and regenerates the Kotlin and Swift bindings from
# the library just built (scripts/bindgen.sh --library), so the shipped library and bindings
# come from one build. BINDGEN=0 skips the bindings.
#
# Needs rustup (or the Rust targets installed) and the NDK (r27 or newer recommended):
#   ANDROID_NDK_HOME=/path/to/ndk scripts/build-android.sh
# or ANDROID_HOME / ANDROID_SDK_ROOT with an NDK under $ANDROID_HOME/ndk/<version>.
# Environment: ABIS (default "arm64-v8a x86_64"), PROFILE (release), API (24, the minSdk),
# OUT (default android/src/main/jniLibs).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ABIS="${ABIS:-arm64-v8a x86_64}"
PROFILE="${PROFILE:-release}"
API="${API:-24}"
OUT="${OUT:-$ROOT/android/src/main/jniLibs}"

ndk="${ANDROID_NDK_HOME:-${ANDROID_NDK_ROOT:-}}"
if [ -z "$ndk" ]; then
  sdk="${ANDROID_HOME:-${ANDROID_SDK_ROOT:-}}"
  if [ -n "$sdk" ] && [ -d "$sdk/ndk" ]; then
    ndk="$(ls -d "$sdk"/ndk/*/ 2>/dev/null | sort -V | tail -1)"
    ndk="${ndk%/}"
  fi
fi
if [ -z "$ndk" ] || [ ! -d "$ndk" ]; then
  echo "Android NDK not found: set ANDROID_NDK_HOME (or ANDROID_HOME with an NDK installed)" >&2
  exit 1
fi

case "$(uname -s)" in
  Darwin) host=darwin-x86_64 ;;
  Linux) host=linux-x86_64 ;;
  MINGW* | MSYS* | CYGWIN*) host=windows-x86_64 ;;
  *) echo "unsupported host $(uname -s)" >&2; exit 1 ;;
esac
toolchain="$ndk/toolchains/llvm/prebuilt/$host/bin"
[ -d "$toolchain" ] || { echo "no NDK toolchain at $toolchain" >&2; exit 1; }

triple_of() {
  case "$1" in
    arm64-v8a) echo aarch64-linux-android ;;
    x86_64) echo x86_64-linux-android ;;
    armeabi-v7a) echo armv7-linux-androideabi ;;
    x86) echo i686-linux-android ;;
    *) echo "unknown ABI $1" >&2; return 1 ;;
  esac
}

profile_args=(--release)
profile_dir=release
if [ "$PROFILE" = "debug" ]; then
  profile_args=()
  profile_dir=debug
elif [ "$PROFILE" != "release" ]; then
  profile_args=(--profile "$PROFILE")
  profile_dir="$PROFILE"
fi

# 16 KB page alignment (required on Android 15+ devices with 16 KB pages).
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=-Wl,-z,max-page-size=16384"

cd "$ROOT"
built=()
for abi in $ABIS; do
  triple="$(triple_of "$abi")"
  clang_triple="$triple"
  [ "$triple" = armv7-linux-androideabi ] && clang_triple=armv7a-linux-androideabi
  clang="$toolchain/${clang_triple}${API}-clang"
  upper="$(echo "$triple" | tr 'a-z-' 'A-Z_')"
  lower="$(echo "$triple" | tr '-' '_')"
  if command -v rustup >/dev/null; then rustup target add "$triple" >/dev/null; fi
  echo "==> cargo build tessera-ffi for $abi ($triple, API $API, $PROFILE)"
  env "CARGO_TARGET_${upper}_LINKER=$clang" "CC_${lower}=$clang" "CXX_${lower}=${clang}++" \
    "AR_${lower}=$toolchain/llvm-ar" \
    cargo build -p tessera-ffi --lib --target "$triple" ${profile_args[@]+"${profile_args[@]}"}
  mkdir -p "$OUT/$abi"
  cp "target/$triple/$profile_dir/libtessera_ffi.so" "$OUT/$abi/"
  # Every LOAD segment must be aligned to 2**14 or more.
  for align in $("$toolchain/llvm-readelf" -lW "$OUT/$abi/libtessera_ffi.so" | awk '$1 == "LOAD" { print $NF }'); do
    if (( align < 16384 )); then
      echo "$abi: a LOAD segment is aligned to $align, not 16 KB" >&2
      exit 1
    fi
  done
  echo "    $OUT/$abi/libtessera_ffi.so ($(du -h "$OUT/$abi/libtessera_ffi.so" | cut -f1), 16 KB aligned)"
  # The staticlib of the same build: uniffi reads its metadata from the symbol table, which
  # the release profile strips from the .so.
  built+=("target/$triple/$profile_dir/libtessera_ffi.a")
done

# The bindings from this build (every ABI carries the same uniffi metadata).
if [ "${BINDGEN:-1}" = 1 ]; then
  echo "==> bindings from ${built[0]}"
  bash "$ROOT/scripts/bindgen.sh" --library "${built[0]}"
fi
