/**
 * Expo config plugin of react-native-tessera, for development builds (`npx expo prebuild`,
 * `npx expo run:android` / `run:ios`; Expo Go cannot load native modules).
 *
 *   // app.json
 *   { "expo": { "plugins": ["react-native-tessera"] } }
 *
 * Autolinking does the real work (the podspec on iOS, the Gradle library on Android), so the
 * plugin changes nothing in the native projects. It only checks one Android setting: with
 * `expo.useLegacyPackaging=true` in gradle.properties, the native library is compressed in
 * the APK and extracted at install, which costs space and time; the plugin warns about it and
 * leaves the value alone.
 *
 * It loads with plain `require` in Node; without `@expo/config-plugins` it is a passthrough.
 */
'use strict';

const pkg = require('./package.json');

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

  function withTessera(config) {
    if (!plugins || typeof plugins.withGradleProperties !== 'function') return config;
    return plugins.withGradleProperties(config, (c) => {
      const items = Array.isArray(c.modResults) ? c.modResults : [];
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
