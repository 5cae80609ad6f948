#!/usr/bin/env bash
# The npm package as an app gets it (CI):
#  1. `npm pack` (its prepack script builds lib/ and runs scripts/prepack-check.js);
#  2. a fresh app folder installs the tarball, with Jest, React Native and its Babel preset, and
#     @expo/config-plugins from npm (pinned below);
#  3. the installed package has what android/build.gradle and the podspec build from (checked by
#     scripts/prepack-check.js --dir, which also follows every Rust module and include_str!),
#     the R8 keep rules wired through consumerProguardFiles, and cargo loads its workspace with
#     the shipped Cargo.lock (`cargo metadata --locked --offline`) and type-checks tessera-ffi
#     from it (`cargo check --locked --offline`);
#  4. the check refuses copies stripped of the Rust sources, of one module file, or of the
#     generated bindings, and accepts one with prebuilt libraries and no sources;
#  5. the code blocks of the README and docs/js-api.md compile with the Babel config the docs
#     give (tests/pack/compile-docs.js, which also checks that React Native's preset alone
#     refuses `await using`), and an `await using` type-checks with the docs' tsconfig.json;
#     Jest with `preset: 'react-native'` and that Babel config runs tests/pack/*.test.{js,ts}
#     (the mock, the package without the mock, the React hooks with react-test-renderer,
#     `await using`); the example app's screens type-check against the installed package;
#  6. the Expo plugin on sample configs with the real @expo/config-plugins
#     (tests/pack/expo-plugin.test.js).
# Prints "N passed, M failed" for the checks of this script (Jest and the plugin test print their
# own) and exits non-zero on any failure.
#
# Environment: TESSERA_PACK_APP (reuse this app folder and its node_modules between runs),
# CARGO_TARGET_DIR (the cargo check's target folder; default target/ of the repository, so that
# the dependencies built there are reused).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RN_VERSION=0.81.6
REACT_VERSION=19.1.4
JEST_VERSION=29.7.0
EXPO_PLUGINS_VERSION=58.0.13
TYPESCRIPT_VERSION=5.8.3
TYPES_REACT_VERSION=19.1.17
TYPES_JEST_VERSION=29.5.14
RESOURCE_MANAGEMENT_VERSION=7.29.15
PICKER_VERSION=12.0.2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
app="${TESSERA_PACK_APP:-$work/app}"
mkdir -p "$app"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   pack: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL pack: $*"; }

# 1. Pack (prepack: bob build + the check).
cd "$ROOT"
mkdir -p "$work/packed"
npm pack --pack-destination "$work/packed" > "$work/pack.log" 2>&1 || {
  cat "$work/pack.log" >&2
  echo "pack: npm pack failed" >&2
  exit 1
}
tarball="$(ls "$work"/packed/react-native-tessera-*.tgz)"
if grep -q 'prepack-check: ok' "$work/pack.log"; then
  ok "npm pack ran the prepack check: $(grep -c '' <(tar -tzf "$tarball")) files, $(du -h "$tarball" | cut -f1)"
else
  cat "$work/pack.log"
  fail "npm pack did not run the prepack check"
fi

# 2. A fresh app.
cd "$app"
[ -f package.json ] || echo '{"name":"tessera-pack-test-app","version":"1.0.0","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error --no-save \
  "jest@$JEST_VERSION" "react-native@$RN_VERSION" "react@$REACT_VERSION" "@react-native/babel-preset@$RN_VERSION" \
  "react-test-renderer@$REACT_VERSION" "@react-native/typescript-config@$RN_VERSION" "typescript@$TYPESCRIPT_VERSION" \
  "@types/react@$TYPES_REACT_VERSION" "@types/jest@$TYPES_JEST_VERSION" \
  "@babel/plugin-transform-explicit-resource-management@$RESOURCE_MANAGEMENT_VERSION" \
  "@react-native-documents/picker@$PICKER_VERSION" \
  "@expo/config-plugins@$EXPO_PLUGINS_VERSION" "$tarball" > "$work/install.log" 2>&1 || {
  cat "$work/install.log" >&2
  echo "pack: npm install failed" >&2
  exit 1
}
pkg="$app/node_modules/react-native-tessera"
[ -f "$pkg/package.json" ] && ok "the tarball installs into a fresh app" || fail "the tarball did not install"

# 3. What the native builds need.
if node "$ROOT/scripts/prepack-check.js" --dir "$pkg" > "$work/check.txt" 2>&1; then
  ok "the installed package passes the check"
  sed 's/^/       /' "$work/check.txt"
else
  cat "$work/check.txt"
  fail "the installed package fails the check"
fi
if grep -q 'consumerProguardFiles "consumer-rules.pro"' "$pkg/android/build.gradle" \
    && grep -q -- '-keep class com.sun.jna.\*\* { \*; }' "$pkg/android/consumer-rules.pro" \
    && grep -q -- '-keep class com.tessera.\*\* { \*; }' "$pkg/android/consumer-rules.pro"; then
  ok "R8 keep rules for JNA and the bindings ship through consumerProguardFiles"
else
  fail "android/consumer-rules.pro or its consumerProguardFiles line is missing"
fi
if cargo metadata --locked --offline --format-version 1 --manifest-path "$pkg/Cargo.toml" > "$work/metadata.json" 2> "$work/metadata.err"; then
  members="$(node -e 'const m=require(process.argv[1]);console.log(m.workspace_members.length)' "$work/metadata.json")"
  ok "cargo loads the shipped workspace ($members members) with the shipped Cargo.lock"
else
  cat "$work/metadata.err"
  fail "cargo metadata --locked on the installed package"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
if (cd "$pkg" && cargo check --quiet --locked --offline -p tessera-ffi --lib) > "$work/cargo-check.log" 2>&1; then
  ok "cargo check of tessera-ffi from the installed package's sources"
else
  tail -n 30 "$work/cargo-check.log"
  fail "cargo check of tessera-ffi from the installed package"
fi

# 4. Stripped copies are refused; prebuilt libraries without sources are accepted.
refused() { # refused NAME DIR PATTERN: the check fails on DIR and says PATTERN
  if node "$ROOT/scripts/prepack-check.js" --dir "$2" > "$work/refused.txt" 2>&1; then
    fail "$1: the check accepted it"
  elif grep -q -- "$3" "$work/refused.txt"; then
    ok "$1: refused ($(grep -o -- "$3" "$work/refused.txt" | head -n 1))"
  else
    cat "$work/refused.txt"
    fail "$1: refused without saying $3"
  fi
}
copy() { rm -rf "$work/copy"; cp -R "$pkg" "$work/copy"; echo "$work/copy"; }
c="$(copy)"; rm -rf "$c/rust" "$c/Cargo.toml" "$c/Cargo.lock"
refused "without the Rust sources" "$c" 'android: no native library: no prebuilt .*the Rust sources are absent'
c="$(copy)"; rm -f "$c/rust/cpu/src/kernels/mod.rs"
refused "without one module file" "$c" 'missing: rust/cpu/src/kernels.rs or rust/cpu/src/kernels/mod.rs'
c="$(copy)"; rm -f "$c/rust/gpu/shaders/mul_mat.wgsl"
refused "without a shader named in include_str!" "$c" 'rust/gpu/shaders/mul_mat.wgsl'
c="$(copy)"; rm -f "$c/Cargo.lock"
refused "without Cargo.lock" "$c" 'missing: Cargo.lock'
c="$(copy)"; rm -f "$c/android/src/main/java/com/tessera/tessera_ffi.kt"
refused "without the Kotlin bindings" "$c" 'missing: android/src/main/java/com/tessera/tessera_ffi.kt'
c="$(copy)"; rm -rf "$c/rust" "$c/Cargo.toml" "$c/Cargo.lock"
for abi in arm64-v8a x86_64; do mkdir -p "$c/android/src/main/jniLibs/$abi" && : > "$c/android/src/main/jniLibs/$abi/libtessera_ffi.so"; done
for slice in ios-arm64 ios-arm64_x86_64-simulator; do mkdir -p "$c/ios/TesseraFFI.xcframework/$slice" && : > "$c/ios/TesseraFFI.xcframework/$slice/libtessera_ffi.a"; done
: > "$c/ios/TesseraFFI.xcframework/Info.plist"
if node "$ROOT/scripts/prepack-check.js" --dir "$c" > "$work/prebuilt.txt" 2>&1 && grep -q 'android: prebuilt' "$work/prebuilt.txt" && grep -q 'ios: prebuilt' "$work/prebuilt.txt"; then
  ok "prebuilt jniLibs and XCFramework without the sources are accepted"
else
  cat "$work/prebuilt.txt"
  fail "prebuilt libraries without the sources"
fi
rm -f "$c/ios/TesseraFFI.xcframework/ios-arm64_x86_64-simulator/libtessera_ffi.a"
refused "prebuilt XCFramework without a simulator slice, no sources" "$c" 'ios: no native library: no prebuilt ios/TesseraFFI.xcframework with device and simulator slices'

# 5. The docs' code blocks, compiled with the docs' babel.config.js (which it writes, with the
# docs' tsconfig.json); an `await using` type-checked with that tsconfig; then Jest with React
# Native's preset and that Babel config.
status=0
rm -rf "$app/__tests__"
mkdir -p "$app/__tests__"
cp "$ROOT"/tests/pack/*.test.js "$ROOT"/tests/pack/*.test.ts "$app/__tests__/"
rm -f "$app/__tests__/expo-plugin.test.js"
cp "$ROOT/tests/pack/compile-docs.js" "$app/"
(cd "$app" && node compile-docs.js "$ROOT") || status=1
typechecks() { # typechecks WHAT TSCONFIG-JSON: tsc --noEmit in the app with that config
  echo "$2" > "$app/tsconfig.check.json"
  if (cd "$app" && npx --no-install tsc --noEmit -p tsconfig.check.json 2>&1) > "$work/tsc.log"; then
    ok "$1 type-checks"
  else
    cat "$work/tsc.log"
    fail "$1 does not type-check"
  fi
}
typechecks "await using, with the docs' tsconfig.json," '{ "extends": "./tsconfig.json", "include": ["__tests__/using.test.ts"] }'
# The example app's screens, against the installed package and React Native's types.
rm -rf "$app/example" && mkdir -p "$app/example" && cp "$ROOT"/example/*.tsx "$app/example/"
typechecks "the example app" '{ "extends": "./tsconfig.json", "compilerOptions": { "types": [] }, "include": ["example/*.tsx"] }'
echo "module.exports = { preset: 'react-native', testMatch: ['**/__tests__/**/*.test.{js,ts}'] };" > "$app/jest.config.js"
(cd "$app" && npx --no-install jest --ci 2>&1) || status=1

# 6. The Expo plugin with the real @expo/config-plugins.
cp "$ROOT/tests/pack/expo-plugin.test.js" "$app/"
(cd "$app" && node expo-plugin.test.js) || status=1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$status" -eq 0 ]
