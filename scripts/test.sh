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

# No colour codes in the logs (vitest, npm, cargo, ...).
export NO_COLOR=1 FORCE_COLOR=0 CARGO_TERM_COLOR=never

# Each step's wall time, printed as a table at the end, also when a step fails.
step_names=() step_secs=() step_start=""
step_end() {
  [ -n "$step_start" ] && step_secs+=("$(( $(date +%s) - step_start ))")
  step_start=""
}
step() { step_end; echo; echo "=== $*"; step_names+=("$*"); step_start=$(date +%s); }
step_table() {
  local rc=$? i total=0
  step_end
  echo
  echo "=== time per step$([ "$rc" = 0 ] || echo " (failed in the last one, exit status $rc)")"
  for i in "${!step_secs[@]}"; do
    printf '%5d s  %s\n' "${step_secs[$i]}" "${step_names[$i]:0:100}"
    total=$(( total + step_secs[i] ))
  done
  printf '%5d s  in all\n' "$total"
}
trap step_table EXIT

# `cargo test` names each suite and its result on one line ("suite: test result: ok. N
# passed; ..."), leaves out the suites with no tests (doc-tests of crates without any), and the
# per-test "ok" lines; failures, panics and warnings pass through whole.
suite_log() {
  awk '
    /^ *(Compiling|Checking|Fresh|Downloaded|Downloading|Blocking|Locking|Adding|Updating) / { next }
    # "Running unittests src/lib.rs (target/debug/deps/tessera_cli-0123abcd)" names the crate;
    # its binaries and integration tests ("Running tests/x.rs (...)") follow it (cargo orders
    # the suites by package: library, binaries, tests).
    /^ *Running unittests / {
      name = $0; sub(/^.*deps\//, "", name); sub(/-[0-9a-f]+\)$/, "", name)
      if ($3 == "src/lib.rs" || (kind != "lib" && kind != "bin")) crate = name
      kind = ($3 == "src/lib.rs") ? "lib" : "bin"
      suite = crate " " $3; next
    }
    /^ *Running / { kind = "test"; suite = crate " " $2; next }
    /^ *Doc-tests / { kind = "doc"; suite = $2 " doc-tests"; next }
    /^running [0-9]+ tests?$/ || /^$/ { next }
    /^test .* \.\.\. ok$/ { next }
    /^test result: / {
      if ($0 ~ / 0 passed; 0 failed; 0 ignored; 0 measured;/) next
      print suite ": " $0; fflush(); next
    }
    { print; fflush() }'
}

step "cargo test (workspace)"
cargo test --workspace 2>&1 | suite_log

step "fuzz the GGUF parser: its seed corpus, then 60 s of AFL++ (scripts/fuzz.sh)"
bash scripts/fuzz.sh gguf 60

step "fuzz the JSON protocol through the C ABI (one release build of tessera-ffi without the GPU): its seeds, then 60 s of AFL++"
bash scripts/fuzz.sh protocol 60

step "fuzz model files through the C ABI (mutated metadata and tensor tables of a small model, loaded, one token and one embedding): its seed, then 60 s of AFL++"
bash scripts/fuzz.sh model 60

step "tessera backend-ops test (every op on every device vs the scalar reference)"
cargo run --quiet -p tessera-cli -- backend-ops test > target/backend-ops.txt 2>&1 || {
    cat target/backend-ops.txt; exit 1; }
tail -n 1 target/backend-ops.txt

step "synthetic Q4_K_M models (scripts/synth): type rules against llama.cpp's, few-layer models of each shape read back by gguf-py and run by tessera"
cargo build --quiet -p tessera-cli
"$TESSERA_PYTHON" scripts/synth/test_synth.py --tessera target/debug/tessera

step "aarch64 under qemu: cortex-a53 (NEON), cortex-a76 (dotprod), max (i8mm)"
bash scripts/qemu-test.sh --quiet

step "Android and Apple targets type-check"
for t in aarch64-linux-android aarch64-apple-ios aarch64-apple-darwin; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t" >/dev/null 2>&1
    # Without `https`: ring needs the target's C compiler (the NDK's, Xcode's), absent here.
    cargo check --quiet -p tessera-ffi --target "$t" --no-default-features --features gpu
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
    scripts/build-qemu-plugin.sh scripts/model-bench.sh

step "the iOS pod: the podspec evaluated (prebuilt, from source, neither) and its Rust build phase"
ruby tests/podspec/podspec_test.rb
bash tests/podspec/build-rust-test.sh

step "the npm package in a fresh app: pack, install, native build inputs, prepack refusals, Jest (react-native preset), Expo plugin"
bash scripts/pack-test.sh

echo
echo "=== all tests passed"
