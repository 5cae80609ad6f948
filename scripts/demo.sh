#!/usr/bin/env bash
# The main job: builds Tessera and runs `tessera info` (the build, the host CPU and its
# features, the devices, and a quantized matmul + softmax computed and checked).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh demo
cargo run --quiet --release -p tessera-cli -- info
