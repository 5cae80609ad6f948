/**
 * The TurboModule spec (New Architecture codegen: `codegenConfig.name` RNTesseraSpec).
 *
 * The module only moves JSON between JavaScript and the Rust core on a background thread;
 * nothing computes on the JS thread. See docs/native-protocol.md for the requests.
 *
 * @packageDocumentation
 */

import type { TurboModule } from 'react-native';
import { TurboModuleRegistry } from 'react-native';

/** The native module's methods. */
export interface Spec extends TurboModule {
  /**
   * Runs one request of the native protocol off the JS thread and resolves to its JSON
   * response (`{"ok": ...}` or `{"error": {"kind", "message"}}`).
   */
  call(requestJson: string): Promise<string>;
  /** Starts or stops forwarding the Rust core's log records as `TesseraLog` events. */
  toggleNativeLog(enabled: boolean): void;
  /** Required by NativeEventEmitter. */
  addListener(eventName: string): void;
  /** Required by NativeEventEmitter. */
  removeListeners(count: number): void;
}

/**
 * The native module, or `null` when it is not linked into the app. Looked up when called,
 * not when this file is imported.
 */
export function getNativeTessera(): Spec | null {
  return TurboModuleRegistry.get<Spec>('Tessera') ?? null;
}
