/**
 * A stand-in for `react-native` in Node tests (aliased in the vitest configs): no native
 * module is registered unless a test registers one.
 */

type Listener = (event: unknown) => void;

const modules = new Map<string, unknown>();
export const lookups: string[] = [];

/** Registers (or with `undefined` removes) a fake native module. */
export function __setNativeModule(name: string, module: unknown): void {
  if (module === undefined) modules.delete(name);
  else modules.set(name, module);
}

export const TurboModuleRegistry = {
  get<T>(name: string): T | null {
    lookups.push(name);
    return (modules.get(name) as T | undefined) ?? null;
  },
  getEnforcing<T>(name: string): T {
    const m = modules.get(name);
    if (m == null) throw new Error(`TurboModuleRegistry.getEnforcing(...): '${name}' could not be found`);
    return m as T;
  },
};

const listeners = new Map<string, Set<Listener>>();

/** Emits a device event, as RCTDeviceEventEmitter would. */
export function __emit(eventType: string, event: unknown): void {
  for (const l of listeners.get(eventType) ?? []) l(event);
}

export class NativeEventEmitter {
  constructor(private readonly nativeModule?: { addListener?(e: string): void; removeListeners?(n: number): void }) {}
  addListener(eventType: string, listener: Listener): { remove(): void } {
    this.nativeModule?.addListener?.(eventType);
    let set = listeners.get(eventType);
    if (!set) listeners.set(eventType, (set = new Set()));
    set.add(listener);
    return {
      remove: () => {
        if (set.delete(listener)) this.nativeModule?.removeListeners?.(1);
      },
    };
  }
  removeAllListeners(eventType: string): void {
    listeners.delete(eventType);
  }
  listenerCount(eventType: string): number {
    return listeners.get(eventType)?.size ?? 0;
  }
}

export const Platform = { OS: 'node' };
