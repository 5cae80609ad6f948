#!/usr/bin/env bash
# Every test: Rust (x86_64), the conformance harness, the ARM tiers under qemu with three CPU
# models, the Kotlin bindings on the JVM, the TypeScript package, and the generated bindings'
# freshness. Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh all
export TESSERA_PYTHON="$PWD/target/venv/bin/python"

step() { echo; echo "=== $*"; }

step "cargo test (workspace)"
cargo test --workspace --quiet

step "tessera backend-ops test"
cargo run --quiet --release -p tessera-cli -- backend-ops test > target/backend-ops.txt || {
    cat target/backend-ops.txt; exit 1; }
tail -n 1 target/backend-ops.txt

step "aarch64 under qemu: cortex-a53, cortex-a76, max"
bash scripts/qemu-test.sh --quiet

for extra in scripts/bindgen.sh scripts/kotlin-test.sh scripts/kotlin-bridge-test.sh; do
    if [ -x "$extra" ] || [ -f "$extra" ]; then
        case "$extra" in
            *bindgen.sh) step "generated bindings are fresh"; bash "$extra" --check ;;
            *) step "$extra"; bash "$extra" ;;
        esac
    fi
done

if [ -f package.json ]; then
    step "TypeScript: typecheck, unit and end-to-end tests, build, package contents"
    npm run --silent typecheck
    npm test --silent
    cargo build --quiet -p tessera-ffi 2>/dev/null && npm run --silent test:e2e
    npm run --silent build
fi
echo
echo "=== all tests passed"
