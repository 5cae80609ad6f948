/**
 * A NativeCaller over the C ABI of the tessera-ffi cdylib, through koffi: the same JSON
 * dispatcher the TurboModule reaches through uniffi on phones.
 *
 * Protocol events (model loading progress, generated tokens) come through the C callback
 * `tessera_set_event_callback`: the core calls it on the thread running the request (a koffi
 * worker), and koffi runs the JS function on the JS thread while that worker waits, so the
 * events of a request arrive in order and before its response. Hence never make a blocking
 * `callSync` that waits for a request emitting events (a `releaseModel` during a `generate`):
 * the worker would wait for the JS thread, and the JS thread for the worker.
 *
 * The library is `$TESSERA_FFI_LIB`, or `target/debug/libtessera_ffi.so` (`.dylib` on macOS,
 * `tessera_ffi.dll` on Windows) after `cargo build -p tessera-ffi`.
 */

import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import type { NativeCaller, NativeEventListener } from '../../src/caller';

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
  /** Every request passed to the library by `call`, in the order it was sent. */
  sent: string[];
  /** Every event received (its JSON text), in order. */
  events: string[];
  /** Removes the event callback from the library. */
  close(): void;
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
  const sent: string[] = [];
  const events: string[] = [];

  const EventCallback = koffi.proto('void TesseraEventCallback(const char *eventJson)');
  const setEventCallback = lib.func('tessera_set_event_callback', 'void', [koffi.pointer(EventCallback)]);
  const listeners = new Set<NativeEventListener>();
  const callback = koffi.register((eventJson: string) => {
    events.push(eventJson);
    for (const listener of [...listeners]) {
      try {
        listener(eventJson);
      } catch {
        // as the TurboModule's emitter: one failing listener does not stop the others
      }
    }
  }, koffi.pointer(EventCallback));
  setEventCallback(callback);

  return {
    log,
    sent,
    events,
    addEventListener(listener: NativeEventListener): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close(): void {
      setEventCallback(null);
      koffi.unregister(callback);
    },
    callSync(requestJson: string): string {
      return callJson(requestJson) as string;
    },
    call(requestJson: string): Promise<string> {
      return new Promise((resolvePromise, reject) => {
        sent.push(requestJson);
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
