import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Unit tests: no native code. `react-native` is replaced by a small stub.
export default defineConfig({
  resolve: {
    alias: {
      'react-native': fileURLToPath(new URL('./tests/unit/stubs/react-native.ts', import.meta.url)),
    },
  },
  test: {
    include: ['tests/unit/**/*.test.ts'],
    environment: 'node',
    reporters: ['default', './tests/summary-reporter.ts'],
    testTimeout: 30_000,
  },
});
