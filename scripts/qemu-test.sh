#!/usr/bin/env bash
# Runs the tessera-cpu tests for aarch64-unknown-linux-gnu under qemu-user, once per emulated
# CPU model, so every kernel tier (NEON, dotprod, i8mm) runs somewhere.
#
# Usage: scripts/qemu-test.sh [extra cargo test args...]
#   e.g. scripts/qemu-test.sh --test features -- --nocapture
# Environment:
#   TESSERA_QEMU_CPUS  space-separated qemu CPU models (default: "cortex-a53 cortex-a76 max")
#                      cortex-a53: NEON only; cortex-a76: + FP16, dotprod; max: + i8mm, SVE, SME
#   CARGO_TARGET_DIR   honoured as usual
# Each run exports TESSERA_EXPECT_CPU=<model>, which tests/features.rs checks against the
# detected features. The linker and default runner come from .cargo/config.toml.
set -euo pipefail

TARGET=aarch64-unknown-linux-gnu
CPUS=${TESSERA_QEMU_CPUS:-"cortex-a53 cortex-a76 max"}
SYSROOT=/usr/aarch64-linux-gnu

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Install the cross toolchain and qemu-user when missing (Debian / Ubuntu).
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null \
    || [ ! -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "qemu-test: installing gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user" >&2
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
if ! rustup target list --installed | grep -qx "$TARGET"; then
    rustup target add "$TARGET" >/dev/null 2>&1
fi

status=0
for cpu in $CPUS; do
    echo "=== qemu-aarch64 -cpu $cpu" >&2
    if CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L $SYSROOT" \
        TESSERA_EXPECT_CPU="$cpu" \
        cargo test -p tessera-cpu --target "$TARGET" "$@"; then
        echo "=== -cpu $cpu: ok" >&2
    else
        echo "=== -cpu $cpu: FAILED" >&2
        status=1
    fi
done
exit $status
