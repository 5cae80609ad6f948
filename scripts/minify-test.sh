#!/usr/bin/env bash
# The R8 / ProGuard keep rules (android/consumer-rules.pro) on the JVM: the bridge, the generated
# uniffi bindings, JNA, Kotlin's stdlib and coroutines are shrunk and obfuscated together, as a
# minified release build of an app does, then run over the real libtessera_ffi:
#  - with the package's rules, `devices` and a compute answer correctly;
#  - without them, the calls fail (JNA binds by names the obfuscator changed), as the NativeLibrary
#    error pointing at the keep rules.
# R8 itself comes from Google's Maven repository, which this machine cannot reach; ProGuard
# (Debian's proguard-cli 6.2, whose rule language R8 implements) stands in. ProGuard 6.2 reads
# class files up to Java 13, so the Java library it resolves against is the JDK's own Java 8 API
# signatures (lib/ct.sym, what `javac --release 8` compiles against) with their class version
# set to Java 8. Prints "N passed, M failed".
#
# Needs the JDK, JNA and the Kotlin compiler (as scripts/kotlin-bridge-test.sh), python3, and
# target/debug/libtessera_ffi.so (or $TESSERA_FFI_LIB).
set -euo pipefail

KOTLIN_VERSION="${KOTLIN_VERSION:-2.4.20}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TESSERA_KOTLIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
KOTLIN_HOME="$CACHE/kotlin-compiler-$KOTLIN_VERSION"
JNA_JAR="${JNA_JAR:-/usr/share/java/jna.jar}"
lib="${TESSERA_FFI_LIB:-$ROOT/target/debug/libtessera_ffi.so}"
for need in "$KOTLIN_HOME/bin/kotlinc" "$JNA_JAR" "$lib"; do
  [ -e "$need" ] || { echo "minify-test: $need not found (run scripts/kotlin-bridge-test.sh and cargo build -p tessera-ffi first)" >&2; exit 1; }
done
if ! command -v proguard >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "minify-test: apt-get install proguard-cli" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq proguard-cli >/dev/null
fi
java_home="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
COROUTINES_JAR="$KOTLIN_HOME/lib/kotlinx-coroutines-core-jvm.jar"
STDLIB_JAR="$KOTLIN_HOME/lib/kotlin-stdlib.jar"

"$KOTLIN_HOME/bin/kotlinc" -nowarn -cp "$JNA_JAR:$COROUTINES_JAR" \
  "$ROOT/android/src/main/java/com/tessera/tessera_ffi.kt" \
  "$ROOT/android/src/main/java/com/tessera/reactnative/TesseraBridge.kt" \
  "$ROOT/tests/kotlin-bridge/MinifiedMain.kt" -d "$OUT/app.jar" 2>&1 | grep -v '^OpenJDK 64-Bit Server VM warning' >&2 || true
[ -f "$OUT/app.jar" ] || { echo "minify-test: compilation failed" >&2; exit 1; }

# The Java 8 API as class files ProGuard 6.2 reads.
python3 - "$java_home/lib/ct.sym" "$OUT/java8-api.jar" <<'PY'
import sys, zipfile
src, out = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED)
seen = set()
for name in src.namelist():
    parts = name.split("/")
    # Folders are named by the releases they hold ("87", "879A", ...); the class's module
    # folder (java.base ...) follows.
    if len(parts) < 3 or "8" not in parts[0] or not name.endswith(".sig"):
        continue
    rest = parts[2:] if "." in parts[1] else parts[1:]
    cls = "/".join(rest)[: -len(".sig")] + ".class"
    if cls in seen:
        continue
    seen.add(cls)
    data = bytearray(src.read(name))
    data[6:8] = (52).to_bytes(2, "big")  # class file major version 52: Java 8
    out.writestr(cls, bytes(data))
out.close()
if len(seen) < 1000:
    sys.exit(f"only {len(seen)} Java 8 classes in {sys.argv[1]}")
PY

common() {
  cat <<PRO
-injars $OUT/app.jar
-injars $JNA_JAR(!META-INF/**)
-injars $COROUTINES_JAR(!META-INF/**)
-injars $STDLIB_JAR(!META-INF/**)
-libraryjars $OUT/java8-api.jar
-dontoptimize
-dontnote
-ignorewarnings
-keep class MinifiedMainKt { public static void main(java.lang.String[]); }
PRO
}
{ common; echo "-outjars $OUT/with-rules.jar"; cat "$ROOT/android/consumer-rules.pro"; } > "$OUT/with.pro"
{ common; echo "-outjars $OUT/without-rules.jar"; } > "$OUT/without.pro"
proguard @"$OUT/with.pro" > "$OUT/with.log" 2>&1 || { tail -n 20 "$OUT/with.log"; echo "minify-test: proguard failed" >&2; exit 1; }
proguard @"$OUT/without.pro" > "$OUT/without.log" 2>&1 || { tail -n 20 "$OUT/without.log"; echo "minify-test: proguard failed" >&2; exit 1; }

passed=0
failed=0
run() { java -Djna.library.path="$(dirname "$lib")" -cp "$1" MinifiedMainKt 2>/dev/null; }
with="$(run "$OUT/with-rules.jar")"
without="$(run "$OUT/without-rules.jar")"
# -1.5 and 2 as little-endian f32, in base64.
if [ "$(sed -n 1p <<< "$with" | cut -c1-8)" = '{"ok":[{' ] \
    && [ "$(sed -n 2p <<< "$with")" = '{"ok":{"outputs":[{"name":"b","dtype":"F32","shape":[2],"data":"AADAvwAAAEA="}]}}' ]; then
  passed=$((passed + 1)); echo "ok   minified with android/consumer-rules.pro: devices and compute answer ($(du -h "$OUT/with-rules.jar" | cut -f1) jar)"
else
  failed=$((failed + 1)); echo "FAIL minified with android/consumer-rules.pro: $with"
fi
if grep -q '"kind":"NativeLibrary"' <<< "$without" && grep -q 'consumer-rules.pro' <<< "$without" && ! grep -q '"ok"' <<< "$without"; then
  passed=$((passed + 1)); echo "ok   minified without the rules: every call fails, as a NativeLibrary error naming the keep rules"
else
  failed=$((failed + 1)); echo "FAIL minified without the rules: $without"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
