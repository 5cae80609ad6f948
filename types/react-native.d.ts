/**
 * Minimal ambient declarations of the parts of `react-native` that this package uses, for
 * type-checking and building the library without installing react-native (a ~150 MB
 * dev dependency). Apps type-check against react-native's own types; these declarations are
 * not shipped (the `types/` folder is not in the package's `files`), and the emitted .d.ts
 * files only `import type` from 'react-native', which resolves to the app's real types.
 */
declare module 'react-native' {
  /** Base interface of TurboModule specs. */
  export interface TurboModule {
    getConstants?(): object;
  }

  /** Looks up TurboModules (and legacy native modules through the interop layer). */
  export const TurboModuleRegistry: {
    get<T extends TurboModule>(name: string): T | null | undefined;
    getEnforcing<T extends TurboModule>(name: string): T;
  };

  /** A subscription to an event emitter. */
  export interface EmitterSubscription {
    remove(): void;
  }

  /** Receives events a native module emits through RCTDeviceEventEmitter. */
  export class NativeEventEmitter {
    constructor(nativeModule?: unknown);
    addListener(
      eventType: string,
      listener: (event: any) => void,
      context?: unknown
    ): EmitterSubscription;
    removeAllListeners(eventType: string): void;
    listenerCount(eventType: string): number;
  }

  /** Platform information. */
  export const Platform: {
    OS: 'ios' | 'android' | 'macos' | 'windows' | 'web' | string;
  };
}
