#!/usr/bin/env bash
# Fuzzes one target with AFL++ through afl.rs (stable Rust) for SECONDS, starting from its
# committed seed corpus, and fails if AFL finds a crash or a hang.
#
# Usage: scripts/fuzz.sh [TARGET] [SECONDS]   (default: gguf 60)
#
# A target is a binary src/bin/TARGET.rs of a fuzz crate rust/*/fuzz (its own workspace, so the
# main build never needs afl); its seeds are in that crate's seeds/TARGET/, and an AFL++
# dictionary in dict/TARGET.dict when the crate has one. Targets: gguf (the GGUF parser),
# protocol (the JSON protocol through the C ABI, rust/ffi/fuzz), model (model files through the C
# ABI: a small model's metadata and tensor table mutated, rust/ffi/fuzz). Needs cargo-afl
# (scripts/setup.sh installs it). Findings are kept in target/fuzz/TARGET/default/{crashes,hangs};
# replay one with `target/afl/release/TARGET < FILE`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${1:-gguf}
seconds=${2:-60}

crate=""
for d in rust/*/fuzz; do
    if [ -f "$d/src/bin/$target.rs" ]; then crate=$d; fi
done
if [ -z "$crate" ]; then
    echo "fuzz.sh: no fuzz target $target (looked for rust/*/fuzz/src/bin/$target.rs)" >&2
    exit 2
fi
seeds="$crate/seeds/$target"
if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
    echo "fuzz.sh: no seeds in $seeds" >&2
    exit 2
fi
if ! cargo afl --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-afl is missing: run scripts/setup.sh (or cargo install cargo-afl --locked)" >&2
    exit 2
fi

cargo afl build --quiet --release --manifest-path "$crate/Cargo.toml" --target-dir target/afl \
    --bin "$target"
bin="target/afl/release/$target"
out="target/fuzz/$target"

# Every seed through the target once, outside AFL (a seed that fails is a finding too).
n=0
for f in "$seeds"/*; do
    "$bin" < "$f" > /dev/null 2>&1 || { echo "fuzz.sh: seed $f fails: replay with $bin < $f" >&2; exit 1; }
    n=$((n + 1))
done
echo "fuzz $target: $n seeds pass"
rm -rf "$out"
mkdir -p "$out"

dict=()
if [ -f "$crate/dict/$target.dict" ]; then dict=(-x "$crate/dict/$target.dict"); fi

# No UI; do not insist on a core_pattern, CPU governor or free core (shared CI machines);
# 1 s per input, so only a real hang counts as one; 512 MB of memory, so a huge allocation
# is a crash.
AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1 \
    cargo afl fuzz -V "$seconds" -t 1000 -m 512 ${dict[@]+"${dict[@]}"} -i "$seeds" -o "$out" -- "$bin" \
    > "$out/afl.log" 2>&1 || { tail -n 30 "$out/afl.log"; echo "fuzz.sh: afl-fuzz failed" >&2; exit 1; }

stats="$out/default/fuzzer_stats"
if [ -f "$stats" ]; then
    execs=$(awk -F: '/^execs_done/ {gsub(/ /, "", $2); print $2}' "$stats")
    paths=$(awk -F: '/^corpus_count/ {gsub(/ /, "", $2); print $2}' "$stats")
    echo "fuzz $target: ${seconds}s, $execs executions, $paths inputs in the corpus"
fi
found=0
for kind in crashes hangs; do
    dir="$out/default/$kind"
    [ -d "$dir" ] || continue
    for f in "$dir"/*; do
        [ -f "$f" ] || continue
        [ "$(basename "$f")" = README.txt ] && continue
        echo "fuzz $target: $kind: $f" >&2
        found=$((found + 1))
    done
done
if [ "$found" -ne 0 ]; then
    echo "fuzz.sh: $found finding(s); replay with: $bin < FILE" >&2
    exit 1
fi
echo "fuzz $target: no crash, no hang"
