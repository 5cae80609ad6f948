import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// End-to-end tests: the TypeScript API over the real Rust core (the tessera-ffi cdylib,
// through koffi). Build it first: `cargo build -p tessera-ffi`.
export default defineConfig({
  resolve: {
    alias: {
      'react-native': fileURLToPath(new URL('./tests/unit/stubs/react-native.ts', import.meta.url)),
    },
  },
  test: {
    include: ['tests/node/**/*.test.ts'],
    environment: 'node',
    reporters: ['default', './tests/summary-reporter.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
    // One process: the cdylib is loaded once per worker.
    fileParallelism: false,
  },
});
