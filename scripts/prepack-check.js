#!/usr/bin/env node
/**
 * The prepack check of react-native-tessera: refuses a package that an app could not build.
 *
 *   node scripts/prepack-check.js             # the files `npm pack` would ship from this folder
 *   node scripts/prepack-check.js --dir DIR   # the files of an unpacked or installed package
 *
 * `npm pack` and `npm publish` run it (the `prepack` script, after `bob build`). It checks that
 * the package has
 * - the JavaScript build (lib/commonjs, lib/module, lib/typescript), the TypeScript sources,
 *   the Jest mock, the Expo plugin, the podspec, LICENSE;
 * - the Android module (build.gradle, the R8 keep rules, the Kotlin sources and the generated
 *   uniffi bindings) and the iOS module (Swift, Objective-C++, the generated Swift bindings, the
 *   C header and module map, the bindings check);
 * - for each platform, the native library in one of two forms:
 *   - prebuilt: android/src/main/jniLibs/{arm64-v8a,x86_64}/libtessera_ffi.so (and the .so of
 *     every other ABI folder there); ios/TesseraFFI.xcframework with a device and a simulator
 *     slice, each with libtessera_ffi.a;
 *   - or the Rust sources that android/build.gradle and the podspec build from: Cargo.toml,
 *     Cargo.lock, every workspace member's manifest, its build script, the files its targets
 *     start from, every module file reached from them through `mod name;`, and every file named
 *     in `include_str!` / `include_bytes!`.
 * Prints what it found and exits 1, naming every missing file, when the package is incomplete.
 * A module whose file is absent is named as both places it may be (`a.rs or a/mod.rs`).
 */
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const ANDROID_ABIS = ['arm64-v8a', 'x86_64'];
const LIB_SO = 'libtessera_ffi.so';
const LIB_A = 'libtessera_ffi.a';
const XCFRAMEWORK = 'ios/TesseraFFI.xcframework';

/** Files every package must have. */
const ALWAYS = [
  'package.json',
  'LICENSE',
  'README.md',
  'src/index.ts',
  'src/NativeTessera.ts',
  'lib/commonjs/index.js',
  'lib/module/index.js',
  'lib/typescript/commonjs/src/index.d.ts',
  'lib/typescript/module/src/index.d.ts',
  'jest/mock.js',
  'app.plugin.js',
  'react-native-tessera.podspec',
  'android/build.gradle',
  'android/gradle.properties',
  'android/consumer-rules.pro',
  'android/src/main/AndroidManifest.xml',
  'android/src/main/java/com/tessera/tessera_ffi.kt',
  'android/src/main/java/com/tessera/reactnative/TesseraBridge.kt',
  'android/src/main/java/com/tessera/reactnative/ContentDocuments.kt',
  'android/src/main/java/com/tessera/reactnative/TesseraModule.kt',
  'android/src/main/java/com/tessera/reactnative/TesseraPackage.kt',
  'ios/Tessera.mm',
  'ios/TesseraImpl.swift',
  'ios/Generated/TesseraBindings.swift',
  'ios/Generated/TesseraBindingsCheck.swift',
  'ios/Generated/TesseraFFI.h',
  'ios/Generated/TesseraFFI.modulemap',
];

/** The files `npm pack` would put in the package, as paths relative to `root`. */
function packedFiles(root) {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const [info] = JSON.parse(out);
  return info.files.map((f) => f.path);
}

/** Every file under `dir`, relative to it (node_modules skipped). */
function filesUnder(dir) {
  const out = [];
  const walk = (rel) => {
    for (const entry of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules') walk(p);
      } else {
        out.push(p);
      }
    }
  };
  walk('');
  return out;
}

/** `a/./b/../c` -> `a/c`, with forward slashes. */
function normal(p) {
  return path.posix.normalize(p.split(path.sep).join('/'));
}

/** The strings of a TOML array `key = [ "a", "b" ]` (the workspace's members). */
function tomlArray(text, key) {
  const m = new RegExp(`^\\s*${key}\\s*=\\s*\\[([^\\]]*)\\]`, 'm').exec(text);
  return m ? [...m[1].matchAll(/"([^"]+)"/g)].map((x) => x[1]) : [];
}

/** Lines `key = "value"` at the start of a line (not inside inline tables). */
function tomlValues(text, key) {
  return [...text.matchAll(new RegExp(`^\\s*${key}\\s*=\\s*"([^"]+)"`, 'gm'))].map((x) => x[1]);
}

/**
 * The Rust files a crate needs: its targets' root files, the module files they reach, and the
 * files named in include_str!/include_bytes!. Returns [needed, missing] relative to the package.
 */
function crateFiles(has, read, member) {
  const needed = new Set([`${member}/Cargo.toml`]);
  const manifest = read(`${member}/Cargo.toml`) || '';
  const roots = new Set(tomlValues(manifest, 'path').filter((p) => p.endsWith('.rs')).map((p) => normal(`${member}/${p}`)));
  const build = tomlValues(manifest, 'build')[0];
  if (build) roots.add(normal(`${member}/${build}`));
  else if (has(`${member}/build.rs`)) roots.add(`${member}/build.rs`);
  for (const r of ['src/lib.rs', 'src/main.rs']) if (has(`${member}/${r}`)) roots.add(`${member}/${r}`);
  if (roots.size === 0) roots.add(`${member}/src/lib.rs`);
  const queue = [...roots];
  while (queue.length > 0) {
    const file = queue.shift();
    if (needed.has(file)) continue;
    needed.add(file);
    if (file.includes('|')) continue;
    const text = read(file);
    if (text === null) continue;
    const stripped = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
    const dir = path.posix.dirname(file);
    const base = path.posix.basename(file, '.rs');
    // `mod name;` in lib.rs / main.rs / mod.rs / build.rs looks next to the file; elsewhere in a
    // folder named after the file.
    const modDir = ['lib', 'main', 'mod', 'build'].includes(base) ? dir : `${dir}/${base}`;
    let pending = null;
    for (const line of stripped.split('\n')) {
      const attr = /#\[path\s*=\s*"([^"]+)"\]/.exec(line);
      if (attr) pending = attr[1];
      const m = /^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(r#)?(\w+)\s*;/.exec(line);
      if (m) {
        const name = m[2];
        if (pending) {
          queue.push(normal(`${dir}/${pending}`));
        } else {
          const flat = `${modDir}/${name}.rs`;
          const nested = `${modDir}/${name}/mod.rs`;
          // Neither there: the missing file is either one.
          queue.push(has(flat) ? flat : has(nested) ? nested : `${flat}|${nested}`);
        }
        pending = null;
      } else if (/^\s*(?:pub|mod|fn|use|struct|enum|impl)\b/.test(line)) {
        pending = null;
      }
    }
    for (const inc of stripped.matchAll(/include_(?:str|bytes)!\s*\(\s*"([^"]+)"\s*\)/g)) {
      queue.push(normal(`${dir}/${inc[1]}`));
    }
  }
  return [...needed];
}

/** The check; returns { ok, lines }. `files` are the package's paths; `read` reads one or null. */
function check(files, read) {
  const set = new Set(files.map(normal));
  const has = (f) => set.has(f);
  const lines = [];
  const missing = ALWAYS.filter((f) => !has(f));

  // The Rust sources.
  let sources = { complete: false, missing: [], crates: 0, files: 0 };
  if (has('Cargo.toml')) {
    const root = read('Cargo.toml') || '';
    const members = tomlArray(root, 'members');
    const need = ['Cargo.toml', 'Cargo.lock'];
    for (const m of members) need.push(...crateFiles(has, read, m));
    // "a|b": either file will do.
    const absent = need.filter((f) => !f.split('|').some(has)).map((f) => f.split('|').join(' or '));
    sources = { complete: members.length > 0 && absent.length === 0, missing: absent, crates: members.length, files: need.length };
    if (members.length === 0) sources.missing.push('Cargo.toml: no [workspace] members');
  }

  // Prebuilt Android libraries.
  const abiDirs = new Set(
    files.map(normal).filter((f) => f.startsWith('android/src/main/jniLibs/')).map((f) => f.split('/')[4])
  );
  const soMissing = [...new Set([...ANDROID_ABIS, ...abiDirs])]
    .map((abi) => `android/src/main/jniLibs/${abi}/${LIB_SO}`)
    .filter((f) => !has(f));
  const androidPrebuilt = soMissing.length === 0;

  // Prebuilt iOS XCFramework: Info.plist, a device slice and a simulator slice.
  const slices = new Set(
    files.map(normal).filter((f) => f.startsWith(`${XCFRAMEWORK}/`) && f.endsWith(`/${LIB_A}`)).map((f) => f.split('/')[2])
  );
  const device = [...slices].find((s) => /^ios-arm64$/.test(s));
  const simulator = [...slices].find((s) => /^ios-.*-simulator$/.test(s));
  const iosPrebuilt = has(`${XCFRAMEWORK}/Info.plist`) && Boolean(device) && Boolean(simulator);

  let ok = missing.length === 0;
  if (missing.length > 0) lines.push(`missing: ${missing.join(', ')}`);
  const fromSource = `the Rust sources (${sources.crates} crates, ${sources.files} files checked)`;
  if (androidPrebuilt) lines.push(`android: prebuilt ${LIB_SO} for ${[...new Set([...ANDROID_ABIS, ...abiDirs])].join(', ')}`);
  else if (sources.complete) lines.push(`android: built from ${fromSource} by android/build.gradle`);
  if (iosPrebuilt) lines.push(`ios: prebuilt ${XCFRAMEWORK} (${[...slices].sort().join(', ')})`);
  else if (sources.complete) lines.push(`ios: built from ${fromSource} by the podspec's script phase`);
  const why = () =>
    sources.missing.length > 0
      ? `the Rust sources are incomplete (missing: ${sources.missing.slice(0, 20).join(', ')}${sources.missing.length > 20 ? ', ...' : ''})`
      : 'the Rust sources are absent (no Cargo.toml)';
  if (!androidPrebuilt && !sources.complete) {
    ok = false;
    lines.push(
      `android: no native library: no prebuilt ${soMissing.join(', ')}, and ${why()}; ` +
        'run scripts/build-android.sh or ship the sources (package.json "files")'
    );
  }
  if (!iosPrebuilt && !sources.complete) {
    ok = false;
    lines.push(
      `ios: no native library: no prebuilt ${XCFRAMEWORK} with device and simulator slices, and ${why()}; ` +
        'run scripts/build-ios.sh on macOS or ship the sources (package.json "files")'
    );
  }
  return { ok, lines };
}

function main(argv) {
  const i = argv.indexOf('--dir');
  let files;
  let root;
  if (i >= 0) {
    root = path.resolve(argv[i + 1] || '.');
    files = filesUnder(root);
  } else {
    root = path.resolve(__dirname, '..');
    files = packedFiles(root);
  }
  const listed = new Set(files.map(normal));
  const read = (f) => (listed.has(f) ? fs.readFileSync(path.join(root, f), 'utf8') : null);
  const { ok, lines } = check(files, read);
  for (const line of lines) console.log(`prepack-check: ${line}`);
  if (!ok) {
    console.error(`prepack-check: refusing to pack ${root}: an app could not build it (see above)`);
    return 1;
  }
  console.log(`prepack-check: ok (${files.length} files)`);
  return 0;
}

if (require.main === module) process.exit(main(process.argv.slice(2)));

module.exports = { check, crateFiles };
