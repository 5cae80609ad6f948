/** A scripted NativeCaller for unit tests: records every request and answers from a handler. */

import type { NativeCaller, NativeEventListener, NativeLogListener } from '../../src/caller';

export type Request = { method: string; [key: string]: unknown };
export type Handler = (req: Request) => unknown | Promise<unknown>;

export interface FakeCaller extends NativeCaller {
  requests: Request[];
  raw: string[];
  toggles: boolean[];
  emit(event: { level: string; target: string; message: string }): void;
  listenerCount(): number;
  /** Delivers a protocol event (an object, sent as JSON text) to the event listeners. */
  emitEvent(event: object): void;
  eventListenerCount(): number;
}

/** `ok` wraps a result; throw `nativeError(kind, message)` from the handler for an error. */
export class NativeErrorResponse {
  constructor(
    readonly kind: string,
    readonly message: string
  ) {}
}

export function nativeError(kind: string, message: string): NativeErrorResponse {
  return new NativeErrorResponse(kind, message);
}

export function fakeCaller(handler: Handler): FakeCaller {
  const listeners = new Set<NativeLogListener>();
  const eventListeners = new Set<NativeEventListener>();
  const fake: FakeCaller = {
    requests: [],
    raw: [],
    toggles: [],
    async call(json: string): Promise<string> {
      fake.raw.push(json);
      const req = JSON.parse(json) as Request;
      fake.requests.push(req);
      const r = await handler(req);
      if (r instanceof NativeErrorResponse) return JSON.stringify({ error: { kind: r.kind, message: r.message } });
      return JSON.stringify({ ok: r ?? {} });
    },
    toggleNativeLog(enabled: boolean) {
      fake.toggles.push(enabled);
    },
    addLogListener(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    emit(event) {
      for (const l of listeners) l(event);
    },
    listenerCount() {
      return listeners.size;
    },
    addEventListener(listener) {
      eventListeners.add(listener);
      return () => eventListeners.delete(listener);
    },
    emitEvent(event) {
      for (const l of eventListeners) l(JSON.stringify(event));
    },
    eventListenerCount() {
      return eventListeners.size;
    },
  };
  return fake;
}

/** A promise with its resolve function exposed. */
export function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Base64 of bytes with Node's Buffer (the reference for the pure-TS codec). */
export function b64(data: ArrayBufferView): string {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64');
}
