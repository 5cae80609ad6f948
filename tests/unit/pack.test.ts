/**
 * What `npm pack` ships: the sources, the build output, the native projects without their
 * build folders, the podspec, the Jest mock and the Expo plugin; no tests, no example, no
 * build junk. Junk files are planted in the build folders for the check and removed after.
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
    for (const d of ['android/build', 'android/.cxx', 'android/.gradle', 'ios/build', 'src/__tests__']) {
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
      /^lib\/(module|typescript)\//,
      /^android\/(build\.gradle|gradle\.properties)$/,
      /^android\/src\/main\//,
      /^ios\/[^/]+\.(swift|mm|m|h)$/,
      /^ios\/Generated\//,
      /^ios\/TesseraFFI\.xcframework\//,
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
      /^(rust|scripts|types|docs|target)\//,
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
      'android/src/main/AndroidManifest.xml',
      'android/src/main/java/com/tessera/reactnative/TesseraModule.kt',
      'android/src/main/java/com/tessera/reactnative/TesseraPackage.kt',
      'android/src/main/java/com/tessera/reactnative/TesseraBridge.kt',
      'ios/Tessera.mm',
      'ios/TesseraImpl.swift',
    ]) {
      expect(files).toContain(f);
    }
    if (existsSync(join(root, 'lib/module/index.js'))) {
      expect(files).toContain('lib/module/index.js');
      expect(files).toContain('lib/typescript/src/index.d.ts');
    }
  });
});
