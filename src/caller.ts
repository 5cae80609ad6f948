/**
 * The native side, as seen from JavaScript: something that answers JSON requests of the
 * native protocol (docs/native-protocol.md). In an app it is the TurboModule; tests and Node
 * hosts inject another with {@link setNativeCaller}.
 *
 * @packageDocumentation
 */

import { NativeEventEmitter } from 'react-native';
import { getNativeTessera } from './NativeTessera';
import { NativeModuleMissingError, TesseraError, RESPONSE_ERROR_KINDS } from './errors';

/** One log record of the Rust core, as forwarded in `TesseraLog` events. */
export interface NativeLogEvent {
  /** "error", "warn", "info", "debug" or "trace". */
  level: string;
  /** The Rust module that logged it, e.g. `tessera_cpu::features`. */
  target: string;
  /** The text. */
  message: string;
}

/** A function that receives native log records. */
export type NativeLogListener = (event: NativeLogEvent) => void;

/**
 * A function that receives the events of long requests (`loadModel` progress, `generate`
 * tokens: docs/native-protocol.md) as the JSON text the core wrote, e.g.
 * `{"type":"token","requestId":"a1-3","token":818,"text":" the"}`.
 */
export type NativeEventListener = (eventJson: string) => void;

/**
 * Answers requests of the native protocol.
 *
 * `call` takes one JSON request and resolves to the JSON response, `{"ok": ...}` or
 * `{"error": {"kind", "message"}}`; it must not block the calling thread while the core
 * computes (a `cancel` request has to get through meanwhile).
 */
export interface NativeCaller {
  /** Runs one request; resolves to its JSON response. */
  call(requestJson: string): Promise<string>;
  /** Starts or stops forwarding native log records to {@link NativeCaller.addLogListener}. */
  toggleNativeLog?(enabled: boolean): void;
  /** Subscribes to native log records; returns the unsubscribe function. */
  addLogListener?(listener: NativeLogListener): () => void;
  /**
   * Subscribes to the events of long requests, delivered on the JS thread while the request
   * runs (the TurboModule's `TesseraEvent` events; on Node, the C ABI's event callback);
   * returns the unsubscribe function. Without it, requests still work, without progress and
   * with a completion's tokens all at its end.
   */
  addEventListener?(listener: NativeEventListener): () => void;
}

let injected: NativeCaller | null = null;
let turbo: NativeCaller | null = null;

/**
 * Replaces the native side: for tests (a fake) and for hosts without React Native (Node,
 * through the C function `tessera_call_json`). `null` restores the TurboModule.
 *
 * @param caller - the caller to use from now on, or `null`
 */
export function setNativeCaller(caller: NativeCaller | null): void {
  if (caller !== null && (typeof caller !== 'object' || typeof caller.call !== 'function')) {
    throw new TypeError('setNativeCaller: expected an object with a call(requestJson) method, or null');
  }
  injected = caller;
  detachLogSource();
  detachEventSource();
}

/**
 * The caller in use: the injected one, or the TurboModule (looked up on first use, so that
 * importing this package never fails; a missing module is a {@link NativeModuleMissingError}
 * when something is actually called).
 */
export function getNativeCaller(): NativeCaller {
  if (injected) return injected;
  if (turbo) return turbo;
  let module: ReturnType<typeof getNativeTessera>;
  try {
    module = getNativeTessera();
  } catch (e) {
    throw new NativeModuleMissingError(e instanceof Error ? e.message : String(e));
  }
  if (module == null) throw new NativeModuleMissingError();
  const mod = module;
  let emitter: NativeEventEmitter | null = null;
  turbo = {
    call: (requestJson) => mod.call(requestJson),
    toggleNativeLog: (enabled) => mod.toggleNativeLog(enabled),
    addLogListener: (listener) => {
      emitter ??= new NativeEventEmitter(mod);
      const sub = emitter.addListener('TesseraLog', listener);
      return () => sub.remove();
    },
    addEventListener: (listener) => {
      emitter ??= new NativeEventEmitter(mod);
      // The modules emit { json: <the event's JSON text> }.
      const sub = emitter.addListener('TesseraEvent', (e: { json?: unknown } | null) => {
        if (typeof e?.json === 'string') listener(e.json);
      });
      return () => sub.remove();
    },
  };
  return turbo;
}

/**
 * Sends one request and returns its `ok` result, or throws the {@link TesseraError} of its
 * `error`.
 *
 * @param request - the request object, or its JSON already serialized
 */
export async function request<T>(request: object | string): Promise<T> {
  const caller = getNativeCaller();
  const json = typeof request === 'string' ? request : JSON.stringify(request);
  let text: string;
  try {
    text = await caller.call(json);
  } catch (e) {
    throw rejectionToError(e);
  }
  return parseResponse<T>(text);
}

/** The `ok` result of a JSON response, or the {@link TesseraError} of its `error`. */
export function parseResponse<T>(text: string): T {
  let response: unknown;
  try {
    response = JSON.parse(text);
  } catch {
    throw new TesseraError('Internal', `malformed native response (not JSON): ${text.slice(0, 200)}`);
  }
  if (response !== null && typeof response === 'object') {
    const r = response as { ok?: unknown; error?: { kind?: unknown; message?: unknown } };
    if ('ok' in r) return r.ok as T;
    if (r.error && typeof r.error === 'object') {
      return throwNative(r.error.kind, r.error.message);
    }
  }
  throw new TesseraError('Internal', `malformed native response: ${text.slice(0, 200)}`);
}

function throwNative(kind: unknown, message: unknown): never {
  throw TesseraError.fromNative(String(kind ?? 'Internal'), String(message ?? ''));
}

/** A promise rejection from the native module, as a TesseraError. */
function rejectionToError(e: unknown): TesseraError {
  if (e instanceof TesseraError) return e;
  const code = (e as { code?: unknown } | null)?.code;
  const message = e instanceof Error ? e.message : String(e);
  if (typeof code === 'string' && (RESPONSE_ERROR_KINDS as readonly string[]).includes(code)) {
    return TesseraError.fromNative(code, message);
  }
  const err = new TesseraError('Internal', `native call failed: ${message}`, { cause: e });
  return err;
}

// ------------------------------------------------------------------------------ logs

const logListeners = new Set<NativeLogListener>();
let logSource: { caller: NativeCaller; unsubscribe: () => void } | null = null;

function dispatchLog(event: NativeLogEvent): void {
  for (const listener of [...logListeners]) {
    try {
      listener(event);
    } catch {
      // A failing listener must not stop the others.
    }
  }
}

function attachLogSource(): void {
  if (logSource) return;
  const caller = getNativeCaller();
  if (!caller.addLogListener) return;
  logSource = { caller, unsubscribe: caller.addLogListener(dispatchLog) };
}

function detachLogSource(): void {
  if (logSource) {
    const { unsubscribe } = logSource;
    logSource = null;
    unsubscribe();
  }
  // Listeners registered before the caller changed follow it.
  if (logListeners.size > 0) {
    try {
      attachLogSource();
    } catch {
      // No caller available yet: attached on the next addNativeLogListener.
    }
  }
}

/**
 * Subscribes to the Rust core's log records (`TesseraLog` events). Records are forwarded
 * once {@link toggleNativeLog} has enabled them.
 *
 * @param listener - called with each record
 * @returns a function that unsubscribes
 */
export function addNativeLogListener(listener: NativeLogListener): () => void {
  if (typeof listener !== 'function') throw new TypeError('addNativeLogListener: expected a function');
  logListeners.add(listener);
  try {
    attachLogSource();
  } catch (e) {
    logListeners.delete(listener);
    throw e;
  }
  let active = true;
  return () => {
    if (!active) return;
    active = false;
    logListeners.delete(listener);
    if (logListeners.size === 0 && logSource) {
      const { unsubscribe } = logSource;
      logSource = null;
      unsubscribe();
    }
  };
}

/** @internal Delivers a log record to the listeners, as the native event would. */
export function _emitNativeLog(event: NativeLogEvent): void {
  dispatchLog(event);
}

// ------------------------------------------------------------------------------ events

/** One event of a long request, parsed; `requestId` routes it. */
export interface NativeEvent {
  /** "loadProgress", "token", ... */
  type: string;
  /** The `requestId` of the request that produced it. */
  requestId: string;
  /** The other fields of the event. */
  [field: string]: unknown;
}

const eventHandlers = new Map<string, (event: NativeEvent) => void>();
let eventSource: { caller: NativeCaller; unsubscribe: () => void } | null = null;

function dispatchEvent(json: string): void {
  let event: unknown;
  try {
    event = JSON.parse(json);
  } catch {
    return;
  }
  if (event === null || typeof event !== 'object') return;
  const { requestId, type } = event as { requestId?: unknown; type?: unknown };
  if (typeof requestId !== 'string' || typeof type !== 'string') return;
  const handler = eventHandlers.get(requestId);
  if (!handler) return;
  try {
    handler(event as NativeEvent);
  } catch {
    // A failing handler must not stop the delivery of other requests' events.
  }
}

function attachEventSource(): void {
  if (eventSource) return;
  const caller = getNativeCaller();
  if (!caller.addEventListener) return;
  eventSource = { caller, unsubscribe: caller.addEventListener(dispatchEvent) };
}

function detachEventSource(): void {
  if (eventSource) {
    const { unsubscribe } = eventSource;
    eventSource = null;
    unsubscribe();
  }
  if (eventHandlers.size > 0) {
    try {
      attachEventSource();
    } catch {
      // No caller available: attached by the next subscription.
    }
  }
}

let requestCount = 0;
// A random prefix, so that the events of a previous JS instance (before a reload) never match
// this one's requests.
const requestPrefix = Math.floor(Math.random() * 36 ** 6).toString(36);

/** @internal A `requestId` no other request of this JS instance has. */
export function newRequestId(): string {
  requestCount += 1;
  return `${requestPrefix}-${requestCount}`;
}

/**
 * @internal Delivers the events tagged `requestId` to `handler` until the returned function is
 * called. Subscribes to the caller's events on first use (the subscription is kept).
 */
export function onRequestEvents(requestId: string, handler: (event: NativeEvent) => void): () => void {
  attachEventSource();
  eventHandlers.set(requestId, handler);
  return () => {
    if (eventHandlers.get(requestId) === handler) eventHandlers.delete(requestId);
  };
}
