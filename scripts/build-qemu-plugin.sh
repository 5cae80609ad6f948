#!/usr/bin/env bash
# Builds the instruction-count plugin for qemu-user (scripts/qemu-plugin/insn_count.c) into
# target/qemu-plugin/libinsn_count.so and checks it on a program of known instructions
# (scripts/qemu-plugin/selftest.S).
#
# The plugin API header (include/qemu/qemu-plugin.h) comes from the Debian source package of
# the installed qemu-user: `apt-get source --download-only` with a deb-src list of our own under
# target/ (the system's apt configuration is not touched), then only that header is unpacked.
#
# Usage: scripts/build-qemu-plugin.sh      (prints the plugin's path on success)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=target/qemu-plugin
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SRC=scripts/qemu-plugin
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v cc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
    echo "build-qemu-plugin: apt-get install ${need[*]}" >&2
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! qemu-aarch64 -h | grep -q -- '^-plugin'; then
    echo "build-qemu-plugin: this qemu-aarch64 ($(qemu-aarch64 --version | head -n1)) was built" \
        "without plugin support (no -plugin option)" >&2
    exit 1
fi

# The header, from the source package of the installed version.
HDR="$OUT/include/qemu-plugin.h"
if [ ! -f "$HDR" ]; then
    src_ver=$(dpkg-query -W -f='${source:Version}' qemu-user 2>/dev/null || true)
    . /etc/os-release
    suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
    APT="$OUT/apt"
    mkdir -p "$APT/lists/partial" "$APT/src"
    cat > "$APT/sources.list" <<EOF
deb-src http://deb.debian.org/debian $suite main
deb-src http://deb.debian.org/debian $suite-updates main
deb-src http://deb.debian.org/debian-security $suite-security main
EOF
    opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$APT/lists" -o Debug::NoDropPrivs=1 -qq)
    apt-get "${opts[@]}" update >/dev/null
    # The exact source version when the mirror still has it, else the suite's current one (the
    # header is upstream's, the same for every Debian revision of one upstream version).
    (cd "$APT/src" && { apt-get "${opts[@]}" source --download-only "qemu=$src_ver" >/dev/null 2>&1 \
        || apt-get "${opts[@]}" source --download-only qemu >/dev/null; })
    orig=$(ls "$APT"/src/qemu_*.orig.tar.* | head -n1)
    member=$(tar -tf "$orig" | grep '/include/qemu/qemu-plugin.h$')
    mkdir -p "$OUT/include"
    tar -xOf "$orig" "$member" > "$HDR.tmp"
    mv "$HDR.tmp" "$HDR"
    echo "build-qemu-plugin: header from $(basename "$orig") (installed qemu-user $src_ver)" >&2
    rm -rf "$APT/src"
fi

cc -O2 -std=c11 -Wall -Wextra -Wno-unused-parameter -shared -fPIC -I"$OUT/include" \
    -o "$OUT/libinsn_count.so" "$SRC/insn_count.c"

# Self-test: region 1 minus region 0 is 2000 loop bodies of known classes.
aarch64-linux-gnu-gcc -nostdlib -static -o "$OUT/selftest" "$SRC/selftest.S"
rm -f "$OUT/selftest.jsonl" "$OUT/selftest.syms"
qemu-aarch64 -cpu max \
    -plugin "$OUT/libinsn_count.so,out=$OUT/selftest.jsonl,syms=$OUT/selftest.syms" "$OUT/selftest"
python3 - "$OUT/selftest.jsonl" "$OUT/selftest.syms" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
syms = {s["symbol"]: s for s in map(json.loads, open(sys.argv[2]))}
regions = [r for r in rows if r["region"] != "all"]
assert len(regions) == 2, f"expected 2 regions, got {rows}"
want = {"dot": 4, "mmla": 3, "load": 10, "store": 7, "simd": 7, "other": 5}
want["total"] = sum(want.values())
got = {k: regions[1][k] - regions[0][k] for k in want}
bad = {k: (got[k], 2000 * v) for k, v in want.items() if got[k] != 2000 * v}
if bad:
    sys.exit(f"build-qemu-plugin: self-test FAILED (class: counted, expected): {bad}")
for r in rows:
    parts = sum(r[k] for k in want if k != "total")
    assert parts == r["total"], f"classes do not add up to the total in {r}"
# Per function: region() = 4000 loop bodies + 2 x 16 instructions (the markers' system calls,
# the argument move, the return; all "other"); _start = 16 instructions.
want_region = {k: 4000 * v for k, v in want.items()}
want_region["other"] += 32
want_region["total"] += 32
everything = next(r for r in rows if r["region"] == "all")
got_region = {k: syms.get("region", {}).get(k) for k in want}
if got_region != want_region or syms.get("_start", {}).get("total") != 16 or \
        any(sum(s[k] for s in syms.values()) != everything[k] for k in want):
    sys.exit(f"build-qemu-plugin: per-function self-test FAILED: {syms} (region: want "
             f"{want_region}, _start: 16, the sum: {everything})")
EOF
echo "$OUT/libinsn_count.so"
