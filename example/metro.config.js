const path = require('path');
const { getDefaultConfig, mergeConfig } = require('@react-native/metro-config');

// The library lives one folder up (react-native-tessera is "file:.." in package.json). Metro
// bundles its TypeScript sources directly, so no `npm run build` of the library is needed, and
// resolves react-native from this app only.
const root = path.resolve(__dirname, '..');

/** @type {import('@react-native/metro-config').MetroConfig} */
const config = {
  watchFolders: [root],
  resolver: {
    nodeModulesPaths: [path.resolve(__dirname, 'node_modules')],
    // The library's own dev dependencies (vitest, koffi, ...) are not part of the app.
    blockList: [new RegExp(`^${escape(path.join(root, 'node_modules'))}/.*`)],
    resolveRequest: (context, moduleName, platform) => {
      if (moduleName === 'react-native-tessera') {
        return { type: 'sourceFile', filePath: path.join(root, 'src', 'index.ts') };
      }
      return context.resolveRequest(context, moduleName, platform);
    },
  },
};

function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

module.exports = mergeConfig(getDefaultConfig(__dirname), config);
