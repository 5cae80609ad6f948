#!/usr/bin/env bash
# ios/build-rust.sh (the pod's script phase when building from source) with stand-ins for
# cargo, rustup and lipo that record their arguments: the Rust targets chosen for each
# platform and architecture set Xcode gives, --locked in a package install, one library per
# platform (lipo for two simulator architectures), and a clear error for a platform it cannot
# build. Prints "N passed, M failed".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/pkg/ios"
cp "$ROOT/ios/build-rust.sh" "$work/pkg/ios/"
: > "$work/pkg/Cargo.toml"
cat > "$work/bin/cargo" <<'SH'
#!/usr/bin/env bash
echo "cargo $*" >> "$LOG"
target=""; profile=debug
while [ $# -gt 0 ]; do
  case "$1" in --target) target="$2"; shift ;; --release) profile=release ;; esac
  shift
done
mkdir -p "$CARGO_TARGET_DIR/$target/$profile"
echo "lib for $target" > "$CARGO_TARGET_DIR/$target/$profile/libtessera_ffi.a"
SH
cat > "$work/bin/rustup" <<'SH'
#!/usr/bin/env bash
echo "rustup $*" >> "$LOG"
SH
cat > "$work/bin/lipo" <<'SH'
#!/usr/bin/env bash
echo "lipo $*" >> "$LOG"
out=""; inputs=()
while [ $# -gt 0 ]; do
  case "$1" in -create) ;; -output) out="$2"; shift ;; *) inputs+=("$1") ;; esac
  shift
done
cat "${inputs[@]}" > "$out"
SH
chmod +x "$work/bin/"*

passed=0
failed=0
run() { # run PLATFORM ARCHS: runs the script, log in $LOG
  export LOG="$work/log.$1.${2// /_}" PODS_TARGET_SRCROOT="$work/pkg" PODS_CONFIGURATION_BUILD_DIR="$work/build/$1"
  rm -f "$LOG"
  PATH="$work/bin:$PATH" HOME="$work/home" PLATFORM_NAME="$1" ARCHS="$2" bash "$work/pkg/ios/build-rust.sh" > "$LOG.out" 2>&1
}
expect() { # expect NAME CONDITION...
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   build-rust.sh: $name"; else failed=$((failed + 1)); echo "FAIL build-rust.sh: $name"; cat "$LOG" "$LOG.out" 2>/dev/null; fi
}

run iphoneos arm64
expect "device: aarch64-apple-ios, release, locked, with os_log" \
  grep -qx "cargo build -p tessera-ffi --lib --target aarch64-apple-ios --features oslog --release --locked" "$LOG"
expect "device: the target is added with rustup" grep -qx "rustup target add aarch64-apple-ios" "$LOG"
expect "device: the library is where the app links it" \
  grep -qx "lib for aarch64-apple-ios" "$work/build/iphoneos/react-native-tessera-rust/libtessera_ffi.a"

run iphonesimulator "arm64 x86_64"
expect "simulator: both architectures built" \
  bash -c "grep -q -- '--target aarch64-apple-ios-sim ' '$LOG' && grep -q -- '--target x86_64-apple-ios ' '$LOG'"
expect "simulator: one library of both (lipo)" \
  bash -c "[ \"\$(cat '$work/build/iphonesimulator/react-native-tessera-rust/libtessera_ffi.a')\" = \"\$(printf 'lib for aarch64-apple-ios-sim\nlib for x86_64-apple-ios')\" ]"

if run macosx arm64; then r=0; else r=$?; fi
expect "an unknown platform fails, naming it" bash -c "[ $r -ne 0 ] && grep -q 'no Rust target for macosx arm64' '$LOG.out'"

mkdir -p "$work/pkg/.git"
run iphoneos arm64
expect "a repository checkout does not pass --locked" bash -c "! grep -q -- '--locked' '$LOG'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
