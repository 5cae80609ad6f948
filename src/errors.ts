/**
 * Errors: every failure, whether found in JavaScript before a request crosses to native code
 * or reported by the Rust core, is a {@link TesseraError} with a {@link TesseraErrorKind}.
 *
 * @packageDocumentation
 */

/** The error kinds the Rust core reports (docs/native-protocol.md). */
export type NativeErrorKind =
  | 'InvalidGraph'
  | 'UnknownOp'
  | 'UnknownType'
  | 'ShapeMismatch'
  | 'DataLength'
  | 'UnknownDevice'
  | 'InvalidArgument'
  | 'Unsupported'
  | 'Cancelled'
  | 'Aborted'
  | 'Closed'
  | 'InvalidModel'
  | 'ContextFull'
  | 'OutOfMemory'
  | 'Backend'
  | 'Internal'
  | 'Network'
  | 'Storage';

/**
 * The kinds the platform modules (Kotlin, Swift) answer with when the Rust core cannot be
 * reached: `NativeLibrary` when the native library is missing, cannot be loaded (wrong ABI,
 * missing symbol) or does not match the generated bindings (uniffi checksum mismatch).
 */
export type BridgeErrorKind = 'NativeLibrary';

/**
 * Every error kind: the native kinds, the bridge kinds, and `NativeModuleMissing` when the
 * TurboModule is not linked into the app.
 */
export type TesseraErrorKind = NativeErrorKind | BridgeErrorKind | 'NativeModuleMissing';

/** The native kinds, for checking responses. */
export const NATIVE_ERROR_KINDS: readonly NativeErrorKind[] = Object.freeze([
  'InvalidGraph',
  'UnknownOp',
  'UnknownType',
  'ShapeMismatch',
  'DataLength',
  'UnknownDevice',
  'InvalidArgument',
  'Unsupported',
  'Cancelled',
  'Aborted',
  'Closed',
  'InvalidModel',
  'ContextFull',
  'OutOfMemory',
  'Backend',
  'Internal',
  'Network',
  'Storage',
]);

/** The kinds a response may carry: the native kinds and the bridge kinds. */
export const RESPONSE_ERROR_KINDS: readonly (NativeErrorKind | BridgeErrorKind)[] = Object.freeze([
  ...NATIVE_ERROR_KINDS,
  'NativeLibrary',
]);

/**
 * The base class of every error this package throws or rejects with.
 *
 * `kind` says what went wrong in a stable, machine-readable way; `message` says it for people,
 * naming the op, tensor, shapes or device concerned.
 */
export class TesseraError extends Error {
  /** What went wrong. */
  readonly kind: TesseraErrorKind;

  /**
   * @param kind - what went wrong
   * @param message - a description naming what is concerned
   * @param options - the underlying cause, if any
   */
  constructor(kind: TesseraErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    // Keep `instanceof` working when classes are compiled to ES5 functions (Hermes builds).
    Object.setPrototypeOf(this, new.target.prototype);
    // Engines without the `cause` option of Error (older Hermes) still get the cause.
    if (options && 'cause' in options && !('cause' in this)) {
      Object.defineProperty(this, 'cause', { value: options.cause, writable: true, configurable: true });
    }
    this.kind = kind;
    this.name = 'TesseraError';
  }

  /**
   * The error for a native `{"error": {"kind", "message"}}` response: the class that
   * {@link errorOfKind} gives for the kind, so that `instanceof ShapeError` or
   * `instanceof DTypeError` works alike for errors found in JS and in Rust.
   *
   * @param kind - the native kind; an unknown kind becomes `Internal`
   * @param message - the native message
   */
  static fromNative(kind: string, message: string): TesseraError {
    const known = (RESPONSE_ERROR_KINDS as readonly string[]).includes(kind);
    return known ? errorOfKind(kind as TesseraErrorKind, message) : new TesseraError('Internal', `${kind}: ${message}`);
  }
}

/**
 * Operands whose shapes do not fit the op (kind `ShapeMismatch`): broadcasting, matmul
 * inner dims, element counts, view bounds, block alignment of quantized rows, ...
 */
export class ShapeError extends TesseraError {
  /** @param message - names the op and the shapes */
  constructor(message: string) {
    super('ShapeMismatch', message);
    this.name = 'ShapeError';
  }
}

/**
 * An operand whose element type the op does not accept, an op or type that no device runs, or
 * an unknown type name (kind `UnknownType` for names, `Unsupported` for the others; the Rust
 * core's `Unsupported` and `UnknownType` errors arrive as this class too).
 */
export class DTypeError extends TesseraError {
  /**
   * @param message - names the op, the operand and the accepted types
   * @param kind - `Unsupported` (the default) or `UnknownType`
   */
  constructor(message: string, kind: 'Unsupported' | 'UnknownType' = 'Unsupported') {
    super(kind, message);
    this.name = 'DTypeError';
  }
}

/** A parameter out of range or of the wrong kind (kind `InvalidArgument`). */
export class InvalidArgumentError extends TesseraError {
  /** @param message - names the op or call and the parameter */
  constructor(message: string) {
    super('InvalidArgument', message);
    this.name = 'InvalidArgumentError';
  }
}

/** A graph that cannot be built: duplicate names, no outputs, ... (kind `InvalidGraph`). */
export class InvalidGraphError extends TesseraError {
  /** @param message - names the tensor concerned */
  constructor(message: string) {
    super('InvalidGraph', message);
    this.name = 'InvalidGraphError';
  }
}

/** Data whose length does not fit its tensor (kind `DataLength`). */
export class DataLengthError extends TesseraError {
  /** @param message - names the tensor and both lengths */
  constructor(message: string) {
    super('DataLength', message);
    this.name = 'DataLengthError';
  }
}

/**
 * A computation cancelled through an `AbortSignal` or {@link Session.cancel} (kind
 * `Cancelled`). Its `name` is `"AbortError"`, like the errors of `fetch`, so code that checks
 * `error.name === 'AbortError'` handles it.
 */
export class CancelledError extends TesseraError {
  /**
   * @param message - what was cancelled
   * @param options - the abort reason, if any
   */
  constructor(message = 'computation cancelled', options?: { cause?: unknown }) {
    super('Cancelled', message, options);
    this.name = 'AbortError';
  }
}

/** A session or model used after it was closed or released (kind `Closed`). */
export class ClosedError extends TesseraError {
  /** @param message - names what is closed */
  constructor(message: string) {
    super('Closed', message);
    this.name = 'ClosedError';
  }
}

/**
 * A model file that cannot be used (kind `InvalidModel`): missing or unreadable, not GGUF, an
 * unknown architecture, a missing or misshapen tensor, an unusable vocabulary.
 */
export class InvalidModelError extends TesseraError {
  /** @param message - names the file and what is wrong */
  constructor(message: string) {
    super('InvalidModel', message);
    this.name = 'InvalidModelError';
  }
}

/** The tokens of a prompt and its completion do not fit in the model's context (kind `ContextFull`). */
export class ContextFullError extends TesseraError {
  /** @param message - how many positions were needed and how many the context holds */
  constructor(message: string) {
    super('ContextFull', message);
    this.name = 'ContextFullError';
  }
}

/** A download failed on the network: no connection, a cut one, an HTTP error (kind `Network`). */
export class NetworkError extends TesseraError {
  /** @param message - names the URL and what happened */
  constructor(message: string) {
    super('Network', message);
    this.name = 'NetworkError';
  }
}

/** Files could not be written: not enough free space, a full disk (kind `Storage`). */
export class StorageError extends TesseraError {
  /** @param message - names the file or folder and what happened */
  constructor(message: string) {
    super('Storage', message);
    this.name = 'StorageError';
  }
}

/** The TurboModule is not linked into the app (kind `NativeModuleMissing`). */
export class NativeModuleMissingError extends TesseraError {
  /** @param detail - what was tried, appended to the standard message */
  constructor(detail?: string) {
    super(
      'NativeModuleMissing',
      'react-native-tessera: native module not found; did you rebuild the app / run pod install?' +
        (detail ? ` (${detail})` : '')
    );
    this.name = 'NativeModuleMissingError';
  }
}

/**
 * The native library is missing, cannot be loaded, or does not match the generated bindings
 * (kind `NativeLibrary`). Answered by the platform module, whose message names the library, the
 * ABI or architecture and what to rebuild.
 */
export class NativeLibraryError extends TesseraError {
  /** @param message - names the library, the ABI and the cause */
  constructor(message: string) {
    super('NativeLibrary', message);
    this.name = 'NativeLibraryError';
  }
}

/**
 * The one table from error kinds to classes: used for native responses
 * ({@link TesseraError.fromNative}) and by the checks in JavaScript, so that a kind always
 * arrives as the same class wherever it was found. Kinds without a class of their own are a
 * plain {@link TesseraError}.
 */
const ERROR_CLASSES: { readonly [K in TesseraErrorKind]?: (message: string) => TesseraError } = {
  ShapeMismatch: (m) => new ShapeError(m),
  InvalidArgument: (m) => new InvalidArgumentError(m),
  InvalidGraph: (m) => new InvalidGraphError(m),
  DataLength: (m) => new DataLengthError(m),
  Cancelled: (m) => new CancelledError(m),
  Closed: (m) => new ClosedError(m),
  InvalidModel: (m) => new InvalidModelError(m),
  ContextFull: (m) => new ContextFullError(m),
  Unsupported: (m) => new DTypeError(m, 'Unsupported'),
  UnknownType: (m) => new DTypeError(m, 'UnknownType'),
  NativeLibrary: (m) => new NativeLibraryError(m),
  Network: (m) => new NetworkError(m),
  Storage: (m) => new StorageError(m),
};

/**
 * The error of `kind` with `message`, of the class the kind maps to (see the table above).
 *
 * @param kind - the error kind
 * @param message - the message, used as it is
 */
export function errorOfKind(kind: TesseraErrorKind, message: string): TesseraError {
  const make = ERROR_CLASSES[kind];
  return make ? make(message) : new TesseraError(kind, message);
}
