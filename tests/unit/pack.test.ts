/**
 * What `npm pack` ships: the sources, the build output, the native projects without their
 * build folders, the podspec, the Jest mock, the Expo plugin, and the Rust workspace that the
 * Gradle and podspec builds compile (manifests, lock file, sources, shaders; no tests); no
 * tests, no example, no build junk. Junk files are planted in the build folders for the check
 * and removed after. (scripts/pack-test.sh installs the real tarball in a fresh app.)
 */

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const junk = [
  'android/build/junk.txt',
  'android/.cxx/junk.txt',
  'android/.gradle/junk.txt',
  'android/local.properties',
  'ios/build/junk.txt',
  'src/__tests__/junk.test.ts',
  'android/src/main/.DS_Store',
  'rust/ffi/tests/junk.rs',
  'rust/ffi/benches/junk.rs',
];
const planted: string[] = [];

function packList(): string[] {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const [info] = JSON.parse(out) as { files: { path: string }[] }[];
  return info!.files.map((f) => f.path).sort();
}

describe('npm pack', () => {
  let files: string[] = [];

  beforeAll(() => {
    for (const j of junk) {
      const p = join(root, j);
      if (existsSync(p)) continue;
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(p, 'junk\n');
      planted.push(p);
    }
    files = packList();
  }, 60_000);

  afterAll(() => {
    for (const p of planted) rmSync(p, { force: true });
    // Remove the folders planted above when they are empty now.
    for (const d of ['android/build', 'android/.cxx', 'android/.gradle', 'ios/build', 'src/__tests__', 'rust/ffi/benches']) {
      try {
        rmdirSync(join(root, d));
      } catch {
        // not empty or not there: a real build folder, left alone
      }
    }
  });

  it('ships only the package', () => {
    const allowed = [
      /^package\.json$/,
      /^README\.md$/,
      /^LICENSE(\.md|\.txt)?$/,
      /^app\.plugin\.js$/,
      /^react-native-tessera\.podspec$/,
      /^jest\/mock\.js$/,
      /^src\/[^_].*\.tsx?$/,
      /^lib\/(commonjs|module|typescript)\//,
      /^android\/(build\.gradle|gradle\.properties|consumer-rules\.pro)$/,
      /^android\/src\/main\//,
      /^ios\/[^/]+\.(swift|mm|m|h)$/,
      /^ios\/build-rust\.sh$/,
      /^ios\/Generated\//,
      /^ios\/TesseraFFI\.xcframework\//,
      /^(Cargo\.toml|Cargo\.lock|uniffi\.toml)$/,
      /^rust\/[a-z]+\/(Cargo\.toml|build\.rs)$/,
      /^rust\/[a-z]+\/src\//,
      /^rust\/gpu\/shaders\/[a-z0-9_]+\.wgsl$/,
    ];
    const unexpected = files.filter((f) => !allowed.some((re) => re.test(f)));
    expect(unexpected).toEqual([]);
  });

  it('has no tests, example, build folders, configs or secrets', () => {
    const forbidden = [
      /(^|\/)tests?\//,
      /__tests__|__mocks__|__fixtures__/,
      /^example\//,
      /^android\/(build|\.cxx|\.gradle)\//,
      /local\.properties$/,
      /^ios\/build\//,
      /(^|\/)\.[^/]+$/,
      /^(scripts|types|docs|target)\//,
      /^rust\/[^/]+\/(tests|benches|examples)\//,
      /node_modules/,
      /\.tgz$/,
      /^(tsconfig.*|vitest.*|\.npmrc)$/,
    ];
    expect(files.filter((f) => forbidden.some((re) => re.test(f)))).toEqual([]);
  });

  it('has what an app needs', () => {
    for (const f of [
      'package.json',
      'src/index.ts',
      'src/NativeTessera.ts',
      'jest/mock.js',
      'app.plugin.js',
      'react-native-tessera.podspec',
      'android/build.gradle',
      'android/consumer-rules.pro',
      'android/src/main/AndroidManifest.xml',
      'android/src/main/java/com/tessera/tessera_ffi.kt',
      'android/src/main/java/com/tessera/reactnative/TesseraModule.kt',
      'android/src/main/java/com/tessera/reactnative/TesseraPackage.kt',
      'android/src/main/java/com/tessera/reactnative/TesseraBridge.kt',
      'android/src/main/java/com/tessera/reactnative/ContentDocuments.kt',
      'ios/Tessera.mm',
      'ios/TesseraImpl.swift',
      'ios/build-rust.sh',
      'ios/Generated/TesseraBindingsCheck.swift',
      'LICENSE',
      'Cargo.toml',
      'Cargo.lock',
      'rust/ffi/Cargo.toml',
      'rust/ffi/build.rs',
      'rust/ffi/src/lib.rs',
      'rust/gpu/shaders/mul_mat.wgsl',
    ]) {
      expect(files).toContain(f);
    }
    if (existsSync(join(root, 'lib/module/index.js'))) {
      expect(files).toContain('lib/module/index.js');
      expect(files).toContain('lib/commonjs/index.js');
      expect(files).toContain('lib/typescript/module/src/index.d.ts');
      expect(files).toContain('lib/typescript/commonjs/src/index.d.ts');
    }
  });
});
