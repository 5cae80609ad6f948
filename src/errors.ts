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
  | 'Internal';

/**
 * Every error kind: the native kinds, plus `NativeModuleMissing` when the TurboModule is not
 * linked into the app.
 */
export type TesseraErrorKind = NativeErrorKind | 'NativeModuleMissing';

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
   * The error for a native `{"error": {"kind", "message"}}` response: the subclass that
   * matches the kind (so `instanceof ShapeError` works for errors found in JS and in Rust
   * alike), or a plain `TesseraError`.
   *
   * @param kind - the native kind; an unknown kind becomes `Internal`
   * @param message - the native message
   */
  static fromNative(kind: string, message: string): TesseraError {
    const k: NativeErrorKind = (NATIVE_ERROR_KINDS as readonly string[]).includes(kind)
      ? (kind as NativeErrorKind)
      : 'Internal';
    const text = k === kind ? message : `${kind}: ${message}`;
    switch (k) {
      case 'ShapeMismatch':
        return new ShapeError(text);
      case 'InvalidArgument':
        return new InvalidArgumentError(text);
      case 'InvalidGraph':
        return new InvalidGraphError(text);
      case 'DataLength':
        return new DataLengthError(text);
      case 'Cancelled':
        return new CancelledError(text);
      case 'Closed':
        return new ClosedError(text);
      case 'InvalidModel':
        return new InvalidModelError(text);
      case 'ContextFull':
        return new ContextFullError(text);
      default:
        return new TesseraError(k, text);
    }
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
 * An operand whose element type the op does not accept, or an unknown type name (kind
 * `UnknownType` for names, `Unsupported` for types an op does not take).
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
