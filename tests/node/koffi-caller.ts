/**
 * A NativeCaller over the C ABI of the tessera-ffi cdylib, through koffi: the same JSON
 * dispatcher the TurboModule reaches through uniffi on phones.
 *
 * The library is `$TESSERA_FFI_LIB`, or `target/debug/libtessera_ffi.so` (`.dylib` on macOS,
 * `tessera_ffi.dll` on Windows) after `cargo build -p tessera-ffi`.
 */

import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import type { NativeCaller } from '../../src/caller';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The path of the cdylib to load. */
export function libraryPath(): string {
  const fromEnv = process.env.TESSERA_FFI_LIB;
  if (fromEnv) return resolve(fromEnv);
  const file =
    process.platform === 'darwin'
      ? 'libtessera_ffi.dylib'
      : process.platform === 'win32'
        ? 'tessera_ffi.dll'
        : 'libtessera_ffi.so';
  return resolve(root, 'target/debug', file);
}

export interface KoffiCaller extends NativeCaller {
  /** Runs a request on the calling thread (blocking); for set-up only. */
  callSync(requestJson: string): string;
  /** Every request and its response, in completion order. */
  log: { request: string; response: string }[];
}

/** Loads the library and returns a caller whose `call` runs on a koffi worker thread. */
export function koffiCaller(path = libraryPath()): KoffiCaller {
  if (!existsSync(path)) {
    throw new Error(
      `tessera-ffi library not found at ${path}: build it with \`cargo build -p tessera-ffi\` ` +
        'or set TESSERA_FFI_LIB to its path'
    );
  }
  const lib = koffi.load(path);
  const free = lib.func('void tessera_free_string(void *response)');
  // The response is copied into a JS string, then freed with tessera_free_string.
  const ResponseString = koffi.disposable('TesseraResponse', 'char *', free);
  const callJson = lib.func('tessera_call_json', ResponseString, ['const char *']);
  const log: { request: string; response: string }[] = [];
  return {
    log,
    callSync(requestJson: string): string {
      return callJson(requestJson) as string;
    },
    call(requestJson: string): Promise<string> {
      return new Promise((resolvePromise, reject) => {
        callJson.async(requestJson, (err: unknown, response: string) => {
          if (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          log.push({ request: requestJson, response });
          resolvePromise(response);
        });
      });
    },
  };
}
