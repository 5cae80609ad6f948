#!/usr/bin/env bash
# Every test: Rust on x86_64 (with the GPU on lavapipe), the conformance harness, the ARM kernel
# tiers under qemu with three CPU models, the Kotlin bindings and bridge on the JVM, freshness
# of the generated bindings, the Apple and Android targets type-checked, the TypeScript
# package (unit and end-to-end over the real core), the podspec, and the packed npm package in a
# fresh app (scripts/pack-test.sh). Installs what it needs (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh all
export TESSERA_PYTHON="$PWD/target/venv/bin/python"
export TESSERA_GEMMA_GGUF="$PWD/target/models/gemma3-270m-q4_k_m.gguf"

step() { echo; echo "=== $*"; }

step "cargo test (workspace)"
cargo test --workspace --quiet

step "fuzz the GGUF parser: its seed corpus, then 60 s of AFL++ (scripts/fuzz.sh)"
bash scripts/fuzz.sh gguf 60

step "fuzz the JSON protocol through the C ABI (one release build of tessera-ffi without the GPU): its seeds, then 60 s of AFL++"
bash scripts/fuzz.sh protocol 60

step "tessera backend-ops test (every op on every device vs the scalar reference)"
cargo run --quiet -p tessera-cli -- backend-ops test > target/backend-ops.txt 2>/dev/null || {
    cat target/backend-ops.txt; exit 1; }
tail -n 1 target/backend-ops.txt

step "aarch64 under qemu: cortex-a53 (NEON), cortex-a76 (dotprod), max (i8mm)"
bash scripts/qemu-test.sh --quiet

step "Android and Apple targets type-check"
for t in aarch64-linux-android aarch64-apple-ios aarch64-apple-darwin; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t" >/dev/null 2>&1
    cargo check --quiet -p tessera-ffi --target "$t"
    echo "$t: ok"
done

step "generated Kotlin and Swift bindings are fresh (from the cdylib, and from the staticlib as iOS builds them)"
bash scripts/bindgen.sh --check
bash scripts/bindgen.sh --check --library target/debug/libtessera_ffi.a

step "Kotlin on the JVM: bindings over the real library"
bash scripts/kotlin-test.sh

step "Kotlin on the JVM: the React Native bridge class"
bash scripts/kotlin-bridge-test.sh

step "R8 keep rules: the bridge, bindings and JNA minified with and without android/consumer-rules.pro"
bash scripts/minify-test.sh

step "TypeScript: typecheck, unit tests, end-to-end over the Rust core, build"
cargo build --quiet -p tessera-ffi
npm run --silent typecheck
npm test --silent
npm run --silent test:e2e
npm run --silent build
bash -n scripts/build-ios.sh scripts/build-android.sh ios/build-rust.sh scripts/arm-counts.sh \
    scripts/build-qemu-plugin.sh

step "the iOS pod: the podspec evaluated (prebuilt, from source, neither) and its Rust build phase"
ruby tests/podspec/podspec_test.rb
bash tests/podspec/build-rust-test.sh

step "the npm package in a fresh app: pack, install, native build inputs, prepack refusals, Jest (react-native preset), Expo plugin"
bash scripts/pack-test.sh

echo
echo "=== all tests passed"
