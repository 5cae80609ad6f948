/**
 * Expo config plugin of react-native-tessera, for development builds (`npx expo prebuild`,
 * `npx expo run:android` / `run:ios`, EAS Build; Expo Go cannot load native modules).
 *
 *   // app.json
 *   { "expo": { "plugins": ["react-native-tessera"] } }
 *   // or with options
 *   { "expo": { "plugins": [["react-native-tessera", { "extendedVirtualAddressing": true }]] } }
 *
 * Autolinking links the module (the podspec on iOS, the Gradle library on Android). The plugin
 * sets what an app running a model on the device needs:
 * - iOS: the entitlement `com.apple.developer.kernel.increased-memory-limit` (option
 *   `increasedMemoryLimit`, default true), without which iOS stops an app at a few GB, less
 *   than a model and its work memory may need; optionally
 *   `com.apple.developer.kernel.extended-virtual-addressing` (option
 *   `extendedVirtualAddressing`, default false) for models mapped into memory whole. Both need
 *   the capability on the App ID (a paid developer account): set them to false for free
 *   provisioning.
 * - Android: `android:largeHeap="true"` on the application (option `largeHeap`, default true):
 *   requests and responses cross the bridge as JSON strings, so a graph's weights sit on the
 *   Java heap while a call runs, and the default heap limit (often 256 MB) is below a model's
 *   size.
 * - Android: optionally the ABIs to build or package the native library for (option `abis`,
 *   e.g. ["arm64-v8a"]; the Gradle property `tessera.abis`), since building from source costs a
 *   Rust build per ABI and React Native's template lists four.
 * - It warns about `expo.useLegacyPackaging=true`, which compresses libtessera_ffi.so in the APK
 *   (extracted at install: space and time), and leaves the value alone.
 *
 * It loads with plain `require` in Node; without `@expo/config-plugins` it is a passthrough.
 */
'use strict';

const pkg = require('./package.json');

const ENTITLEMENT_MEMORY = 'com.apple.developer.kernel.increased-memory-limit';
const ENTITLEMENT_ADDRESSING = 'com.apple.developer.kernel.extended-virtual-addressing';
// The ABIs the Rust core builds for (64-bit only).
const ANDROID_ABIS = ['arm64-v8a', 'x86_64'];
const DEFAULTS = { increasedMemoryLimit: true, extendedVirtualAddressing: false, largeHeap: true, abis: null };

/**
 * The options with their defaults; throws naming the option when one is unknown or of the
 * wrong type.
 *
 * @param {unknown} options
 */
function resolveOptions(options) {
  if (options === undefined || options === null) return { ...DEFAULTS };
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(`[${pkg.name}] plugin options must be an object, got ${JSON.stringify(options)}`);
  }
  const out = { ...DEFAULTS };
  for (const [key, value] of Object.entries(options)) {
    if (!(key in DEFAULTS)) {
      throw new TypeError(`[${pkg.name}] unknown plugin option "${key}" (known: ${Object.keys(DEFAULTS).join(', ')})`);
    }
    if (key === 'abis') {
      if (!Array.isArray(value) || value.length === 0 || !value.every((a) => ANDROID_ABIS.includes(a))) {
        throw new TypeError(`[${pkg.name}] option "abis" must be a non-empty list of ${ANDROID_ABIS.join(', ')}; got ${JSON.stringify(value)}`);
      }
    } else if (typeof value !== 'boolean') {
      throw new TypeError(`[${pkg.name}] option "${key}" must be true or false, got ${JSON.stringify(value)}`);
    }
    out[key] = value;
  }
  return out;
}

/**
 * The plugin, built on the given `@expo/config-plugins` module (or `null`: passthrough).
 *
 * @param {any} plugins - `@expo/config-plugins`, or null
 * @param {(message: string) => void} [warn] - where warnings go
 */
function createPlugin(plugins, warn) {
  const report =
    warn ||
    ((message) => {
      if (plugins && plugins.WarningAggregator) {
        plugins.WarningAggregator.addWarningAndroid(pkg.name, message);
      } else {
        console.warn(`[${pkg.name}] ${message}`);
      }
    });

  function withTessera(config, options) {
    const o = resolveOptions(options);
    if (!plugins || typeof plugins.withGradleProperties !== 'function') return config;

    // iOS: entitlements of the app (written to its .entitlements file by prebuild).
    if (o.increasedMemoryLimit || o.extendedVirtualAddressing) {
      config.ios = config.ios || {};
      config.ios.entitlements = { ...(config.ios.entitlements || {}) };
      if (o.increasedMemoryLimit) config.ios.entitlements[ENTITLEMENT_MEMORY] = true;
      if (o.extendedVirtualAddressing) config.ios.entitlements[ENTITLEMENT_ADDRESSING] = true;
    }

    // Android: a large Java heap for the JSON strings of requests and responses.
    if (o.largeHeap) {
      config = plugins.withAndroidManifest(config, (c) => {
        const app = plugins.AndroidConfig.Manifest.getMainApplicationOrThrow(c.modResults);
        app.$['android:largeHeap'] = 'true';
        return c;
      });
    }

    // Android: gradle.properties (the ABIs; the packaging warning).
    return plugins.withGradleProperties(config, (c) => {
      const items = Array.isArray(c.modResults) ? c.modResults : [];
      c.modResults = items;
      if (o.abis) {
        const value = o.abis.join(',');
        const existing = items.find((item) => item && item.type === 'property' && item.key === 'tessera.abis');
        if (existing) existing.value = value;
        else items.push({ type: 'property', key: 'tessera.abis', value });
      }
      const legacy = items.find(
        (item) => item && item.type === 'property' && item.key === 'expo.useLegacyPackaging'
      );
      if (legacy && String(legacy.value).trim() === 'true') {
        report(
          'expo.useLegacyPackaging=true compresses libtessera_ffi.so in the APK; ' +
            'set it to false to keep native libraries uncompressed and page-aligned'
        );
      }
      return c;
    });
  }

  if (plugins && typeof plugins.createRunOncePlugin === 'function') {
    return plugins.createRunOncePlugin(withTessera, pkg.name, pkg.version);
  }
  return withTessera;
}

let configPlugins = null;
try {
  configPlugins = require('@expo/config-plugins');
} catch (e) {
  // Not an Expo project: the plugin is a passthrough.
}

module.exports = createPlugin(configPlugins);
module.exports.createPlugin = createPlugin;
module.exports.resolveOptions = resolveOptions;
