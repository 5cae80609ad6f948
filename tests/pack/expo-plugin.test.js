/**
 * The Expo config plugin of the installed package, applied with the real @expo/config-plugins
 * (from npm) to a sample config and a sample Android project, the way `expo prebuild` runs it.
 * Run by scripts/pack-test.sh in the fresh app folder: node expo-plugin.test.js. Prints
 * "N passed, M failed".
 */
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { compileModsAsync, withPlugins } = require('@expo/config-plugins');
const plugin = require('react-native-tessera/app.plugin.js');

const MANIFEST = `<manifest xmlns:android="http://schemas.android.com/apk/res/android">
  <uses-permission android:name="android.permission.INTERNET"/>
  <application android:name=".MainApplication" android:label="@string/app_name" android:allowBackup="false">
    <activity android:name=".MainActivity" android:exported="true"/>
  </application>
</manifest>
`;

/** A sample project: android/app/src/main/AndroidManifest.xml and android/gradle.properties. */
function sampleProject(gradleProperties) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-expo-'));
  fs.mkdirSync(path.join(root, 'android/app/src/main'), { recursive: true });
  fs.writeFileSync(path.join(root, 'android/app/src/main/AndroidManifest.xml'), MANIFEST);
  fs.writeFileSync(path.join(root, 'android/gradle.properties'), gradleProperties);
  return root;
}

/**
 * An app config as expo-cli hands it to plugins; plugins named by string resolve from the app
 * folder (this test's working directory, where the tarball is installed).
 */
function sample(extra = {}) {
  return { name: 'demo', slug: 'demo', _internal: { projectRoot: process.cwd() }, ...extra };
}

async function prebuildAndroid(entry, gradleProperties = 'org.gradle.jvmargs=-Xmx2048m\n') {
  const root = sampleProject(gradleProperties);
  let config = sample({ android: { package: 'com.example.demo' } });
  config = withPlugins(config, [entry]);
  await compileModsAsync(config, { projectRoot: root, platforms: ['android'] });
  return {
    config,
    manifest: fs.readFileSync(path.join(root, 'android/app/src/main/AndroidManifest.xml'), 'utf8'),
    properties: fs.readFileSync(path.join(root, 'android/gradle.properties'), 'utf8'),
  };
}

const tests = [
  ['defaults: the iOS increased-memory-limit entitlement, a large Java heap, gradle.properties unchanged', async () => {
    const { config, manifest, properties } = await prebuildAndroid('react-native-tessera');
    assert.deepEqual(config.ios.entitlements, { 'com.apple.developer.kernel.increased-memory-limit': true });
    assert.match(manifest, /<application android:name="\.MainApplication" android:label="@string\/app_name" android:allowBackup="false" android:largeHeap="true">/);
    assert.equal(properties.trim(), 'org.gradle.jvmargs=-Xmx2048m');
  }],
  ['options: extended virtual addressing, no large heap, the ABIs as tessera.abis', async () => {
    const { config, manifest, properties } = await prebuildAndroid(
      ['react-native-tessera', { extendedVirtualAddressing: true, largeHeap: false, abis: ['arm64-v8a', 'x86_64'] }],
      'tessera.abis=x86\nexpo.useLegacyPackaging=false\n'
    );
    assert.deepEqual(config.ios.entitlements, {
      'com.apple.developer.kernel.increased-memory-limit': true,
      'com.apple.developer.kernel.extended-virtual-addressing': true,
    });
    assert.doesNotMatch(manifest, /largeHeap/);
    assert.deepEqual(properties.trim().split('\n'), ['tessera.abis=arm64-v8a,x86_64', 'expo.useLegacyPackaging=false']);
  }],
  ['keeps the entitlements the app has, and can leave them all out', async () => {
    let config = sample({ ios: { entitlements: { 'aps-environment': 'production' } } });
    config = withPlugins(config, [[plugin, { increasedMemoryLimit: false }]]);
    assert.deepEqual(config.ios.entitlements, { 'aps-environment': 'production' });
    config = withPlugins(sample({ ios: { entitlements: { 'aps-environment': 'production' } } }), [plugin]);
    assert.deepEqual(config.ios.entitlements, {
      'aps-environment': 'production',
      'com.apple.developer.kernel.increased-memory-limit': true,
    });
  }],
  ['runs once when listed twice, and warns about legacy packaging once', async () => {
    const warnings = [];
    const counting = plugin.createPlugin(require('@expo/config-plugins'), (m) => warnings.push(m));
    const { config } = await prebuildAndroid(counting, 'expo.useLegacyPackaging=true\n');
    assert.equal(config._internal.pluginHistory['react-native-tessera'].name, 'react-native-tessera');
    const root = sampleProject('expo.useLegacyPackaging=true\n');
    let twice = withPlugins(sample({ android: { package: 'com.example.demo' } }), [counting, counting]);
    await compileModsAsync(twice, { projectRoot: root, platforms: ['android'] });
    assert.equal(warnings.length, 2, 'one warning per prebuild');
    assert.match(warnings[0], /expo\.useLegacyPackaging=true compresses libtessera_ffi\.so/);
  }],
  ['rejects unknown or mistyped options, naming them', async () => {
    assert.throws(() => withPlugins(sample(), [[plugin, { largeheap: true }]]), /unknown plugin option "largeheap"/);
    assert.throws(() => withPlugins(sample(), [[plugin, { largeHeap: 'yes' }]]), /option "largeHeap" must be true or false/);
    assert.throws(() => withPlugins(sample(), [[plugin, { abis: ['mips'] }]]), /option "abis" must be a non-empty list of arm64-v8a, x86_64/);
    assert.throws(() => withPlugins(sample(), [[plugin, { abis: ['armeabi-v7a'] }]]), /option "abis" must be a non-empty list/);
  }],
];

(async () => {
  let passed = 0;
  let failed = 0;
  for (const [name, body] of tests) {
    try {
      await body();
      passed++;
      console.log(`ok   expo plugin: ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL expo plugin: ${name}: ${e && e.message}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
})();
