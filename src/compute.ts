/**
 * Running graphs: {@link compute} for one-off runs, {@link Session} for repeated ones, and the
 * native log switches.
 *
 * @packageDocumentation
 */

import { arrayFromBase64, base64FromArray, type TypedArrayCtor } from './base64';
import { getNativeCaller, request } from './caller';
import {
  DTYPE_INFO,
  arrayKindFor,
  describeArray,
  isArrayFor,
  isDType,
  isQuantized,
  type ArrayFor,
  type DType,
  type TensorArray,
} from './dtype';
import {
  CancelledError,
  ClosedError,
  DataLengthError,
  DTypeError,
  InvalidArgumentError,
  InvalidGraphError,
  ShapeError,
  TesseraError,
} from './errors';
import {
  GraphBuilder,
  GRAPH_FORMAT_VERSION,
  type FileTensorDocument,
  type GraphDocument,
  type GraphDocumentV2,
  type TensorDocument,
} from './graph';
import { contiguous, fmtShape, nbytes, nelements, normalizeShape } from './layout';

// A timer exists in every JavaScript host (Hermes, JSC, Node); declared here because the
// package is type-checked without DOM or Node types.
declare const setTimeout: (callback: () => void, ms: number) => unknown;

/**
 * The parts of an `AbortSignal` this package uses (structural, so the DOM's, Node's and React
 * Native's signals all fit).
 */
export interface AbortSignalLike {
  /** Whether abort() was called. */
  readonly aborted: boolean;
  /** The abort reason. */
  readonly reason?: unknown;
  /** Subscribes to the `abort` event. */
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  /** Unsubscribes from the `abort` event. */
  removeEventListener(type: 'abort', listener: () => void): void;
}

/**
 * One tensor of a result.
 *
 * @typeParam D - the element type
 */
export interface TensorValue<D extends DType = DType> {
  /** The output's name. */
  name: string;
  /** Element type. */
  dtype: D;
  /** Shape, innermost first. */
  shape: number[];
  /**
   * The values: `Float32Array` (F32), `Int32Array` (I32), `Uint16Array` of raw bits (F16,
   * BF16: convert with {@link float16ToFloat32} / {@link bfloat16ToFloat32}), `Uint8Array`
   * of GGUF blocks (quantized types).
   */
  data: ArrayFor<D>;
}

/** A {@link TensorValue} of any element type, discriminated by `dtype`. */
export type AnyTensorValue = { [D in DType]: TensorValue<D> }[DType];

/**
 * The result of {@link compute}: one {@link TensorValue} per output, by name. Typed per output
 * when the graph's outputs are known statically.
 */
export type ComputeResult<O extends Record<string, DType>> = [keyof O] extends [never]
  ? Record<string, AnyTensorValue>
  : { [K in keyof O]: TensorValue<O[K]> };

/**
 * The data of one input: the typed array of its type ({@link ArrayFor}), optionally with the
 * shape it is meant to have (checked against the declared one).
 */
export type InputValue = TensorArray | { data: TensorArray; shape?: readonly number[] };

/** Input data by input name. */
export type ComputeInputs = Record<string, InputValue>;

/** Where and how to run. */
export interface SessionOptions {
  /** A device name from {@link getDevices}, or `"auto"` (the default: GPU first, CPU last). */
  device?: string;
  /** CPU threads, or `null` / absent for the core's choice (the performance cores). */
  threads?: number | null;
  /**
   * The most bytes one graph may plan on the session's devices (compute buffers, weights,
   * copies), checked before anything is allocated: a graph that needs more fails with kind
   * `OutOfMemory`. `null` / absent: 75% of the free memory of the session's devices.
   */
  memoryBudget?: number | null;
}

/** Options of {@link compute}. */
export interface ComputeOptions extends SessionOptions {
  /** Cancels the computation: the promise rejects with a {@link CancelledError}. */
  signal?: AbortSignalLike;
}

/** Options of {@link Session.compute}. */
export interface SessionComputeOptions {
  /** Cancels the computation: the promise rejects with a {@link CancelledError}. */
  signal?: AbortSignalLike;
}

/** Anything {@link compute} runs: a builder, or a graph document (e.g. loaded from JSON). */
export type GraphLike<O extends Record<string, DType> = Record<never, never>> = GraphBuilder<O> | GraphDocument;

/** A graph document {@link Session.load} reads: version 1, or version 2 with model files. */
export type LoadableDocument = GraphDocument | GraphDocumentV2;

/**
 * Anything {@link Session.load} loads: a builder, a graph document of version 1 or 2, or the
 * document's JSON text.
 */
export type LoadableGraph<O extends Record<string, DType> = Record<never, never>> = GraphLike<O> | GraphDocumentV2 | string;

interface DeclaredInput {
  name: string;
  dtype: DType;
  shape: number[];
}

interface Prepared {
  graphJson: string;
  inputsJson: string;
}

interface NativeOutput {
  name?: unknown;
  dtype?: unknown;
  shape?: unknown;
  data?: unknown;
}

function declaredInputs(g: GraphLike<any> | LoadableDocument): DeclaredInput[] {
  if (g instanceof GraphBuilder) {
    return g.inputs.map((t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape] }));
  }
  // Inputs are the tensors without data, values or a file (version 2's file tensors).
  return (g.tensors as (TensorDocument | FileTensorDocument)[])
    .filter((t) => !('file' in t && t.file !== undefined))
    .map((t) => t as TensorDocument)
    .filter((t) => t.data === undefined && t.values === undefined)
    .map((t) => ({ name: t.name, dtype: t.type, shape: Array.isArray(t.shape) ? [...t.shape] : [] }));
}

function graphJson(g: GraphLike<any>): string {
  if (g instanceof GraphBuilder) return g.toJSONString();
  if (g === null || typeof g !== 'object' || !Array.isArray((g as GraphDocument).outputs)) {
    throw new InvalidArgumentError('compute: expected a GraphBuilder or a graph document { version, tensors, nodes, outputs }');
  }
  if (g.version !== GRAPH_FORMAT_VERSION) {
    throw new InvalidGraphError(`unsupported graph document version ${String(g.version)}: this package writes ${GRAPH_FORMAT_VERSION}`);
  }
  if (g.outputs.length === 0) throw new InvalidGraphError('the document names no outputs');
  if (!Array.isArray(g.tensors)) throw new InvalidGraphError('the document has no tensors list');
  return JSON.stringify(g);
}

/**
 * The JSON of a graph to load and the document it was read from: a builder, a document of
 * version 1 or 2 (which may name model files), or the document's JSON text.
 */
function loadableJson(g: LoadableGraph<any>): { json: string; doc: GraphBuilder<any> | LoadableDocument } {
  if (g instanceof GraphBuilder) return { json: g.toJSONString(), doc: g };
  let doc: unknown = g;
  if (typeof g === 'string') {
    try {
      doc = JSON.parse(g);
    } catch (e) {
      throw new InvalidGraphError(`load: the graph is not JSON: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  if (doc === null || typeof doc !== 'object' || !Array.isArray((doc as LoadableDocument).outputs)) {
    throw new InvalidArgumentError(
      'load: expected a GraphBuilder, a graph document { version, tensors, nodes, outputs } or its JSON text'
    );
  }
  const d = doc as LoadableDocument;
  const version: unknown = d.version;
  if (version !== 1 && version !== 2) {
    throw new InvalidGraphError(`unsupported graph document version ${String(version)}: load reads versions 1 and 2`);
  }
  if (d.outputs.length === 0) throw new InvalidGraphError('the document names no outputs');
  if (!Array.isArray(d.tensors)) throw new InvalidGraphError('the document has no tensors list');
  return { json: typeof g === 'string' ? g : JSON.stringify(d), doc: d };
}

/** Checks the inputs against the graph's declared inputs and encodes them. */
export function prepareCompute(g: GraphLike<any>, inputs: ComputeInputs): Prepared {
  const json = graphJson(g);
  return { graphJson: json, inputsJson: encodeInputs(declaredInputs(g), inputs) };
}

/** Checks `inputs` against the declared inputs and encodes them as the protocol's JSON array. */
function encodeInputs(declared: DeclaredInput[], inputs: ComputeInputs): string {
  if (inputs === null || typeof inputs !== 'object') {
    throw new InvalidArgumentError('compute: inputs must be an object of typed arrays by input name');
  }
  const known = new Set(declared.map((d) => d.name));
  for (const key of Object.keys(inputs)) {
    if (!known.has(key)) {
      const list = declared.map((d) => JSON.stringify(d.name)).join(', ') || 'none';
      throw new InvalidArgumentError(`compute: unknown input ${JSON.stringify(key)} (the graph's inputs: ${list})`);
    }
  }
  const encoded = declared.map((d) => {
    const what = `input ${JSON.stringify(d.name)}`;
    if (!isDType(d.dtype)) throw new DTypeError(`${what}: unknown tensor type ${JSON.stringify(d.dtype)}`, 'UnknownType');
    const value = inputs[d.name];
    if (value === undefined) throw new InvalidArgumentError(`compute: missing ${what} (${d.dtype} ${fmtShape(d.shape)})`);
    const isTyped = ArrayBuffer.isView(value);
    const wrapped = !isTyped && value !== null && typeof value === 'object' && 'data' in value;
    const data: unknown = wrapped ? (value as { data?: unknown }).data : value;
    if (!isArrayFor(d.dtype, data)) {
      throw new InvalidArgumentError(
        `compute: ${what} is ${d.dtype}: expected a ${arrayKindFor(d.dtype)}, got ${describeArray(data)}`
      );
    }
    const layout = contiguous(d.dtype, d.shape, what);
    const given = wrapped ? (value as { shape?: readonly number[] }).shape : undefined;
    if (given !== undefined) {
      const ne = normalizeShape(given, what);
      if (ne.some((n, i) => n !== layout.ne[i])) {
        throw new ShapeError(`compute: ${what} has shape ${fmtShape(given)}, the graph declares ${fmtShape(d.shape)}`);
      }
    }
    const expected = isQuantized(d.dtype) ? nbytes(layout) : nelements(layout);
    if (data.length !== expected) {
      const unit = isQuantized(d.dtype) ? 'bytes' : 'values';
      throw new DataLengthError(
        `compute: ${what} (${d.dtype} ${fmtShape(d.shape)}) needs ${expected} ${unit}, got ${data.length}`
      );
    }
    return { name: d.name, dtype: d.dtype, shape: d.shape, data: base64FromArray(data) };
  });
  return JSON.stringify(encoded);
}

function computeRequest(p: Prepared, session: number | null, options: SessionOptions | null): string {
  let head = '{"method":"compute"';
  if (session !== null) head += `,"session":${session}`;
  let tail = `,"inputs":${p.inputsJson}`;
  if (options !== null) tail += `,"options":${JSON.stringify(sessionOptions(options))}`;
  return `${head},"graph":${p.graphJson}${tail}}`;
}

function sessionOptions(o: SessionOptions): { device: string; threads: number | null; memoryBudget?: number } {
  const device = o.device ?? 'auto';
  if (typeof device !== 'string' || device === '') {
    throw new InvalidArgumentError('device must be "auto" or a device name from getDevices()');
  }
  const threads = o.threads ?? null;
  if (threads !== null && (!Number.isSafeInteger(threads) || threads < 1)) {
    throw new InvalidArgumentError(`threads ${String(threads)} must be a positive integer or null`);
  }
  const budget = o.memoryBudget ?? null;
  if (budget === null) return { device, threads };
  if (!Number.isSafeInteger(budget) || budget < 1) {
    throw new InvalidArgumentError(`memoryBudget ${String(budget)} must be a positive integer number of bytes or null`);
  }
  return { device, threads, memoryBudget: budget };
}

const ARRAY_CTORS = {
  Float32Array,
  Int32Array,
  Uint16Array,
  Uint8Array,
} as const;

/** The typed results of a `compute` response (`{outputs: [{name, dtype, shape, data}]}`). */
export function decodeOutputs(result: unknown): Record<string, AnyTensorValue> {
  const outputs = (result as { outputs?: unknown } | null)?.outputs;
  if (!Array.isArray(outputs)) throw new TesseraError('Internal', 'malformed compute response: no outputs');
  const out: Record<string, AnyTensorValue> = {};
  for (const o of outputs as NativeOutput[]) {
    const name = String(o.name);
    const dtype = o.dtype;
    if (!isDType(dtype)) throw new TesseraError('Internal', `output ${JSON.stringify(name)}: unknown type ${String(dtype)}`);
    if (!Array.isArray(o.shape) || !o.shape.every((n) => Number.isSafeInteger(n) && n > 0)) {
      throw new TesseraError('Internal', `output ${JSON.stringify(name)}: malformed shape`);
    }
    if (typeof o.data !== 'string') throw new TesseraError('Internal', `output ${JSON.stringify(name)}: no data`);
    const shape = o.shape as number[];
    const data = arrayFromBase64(o.data, ARRAY_CTORS[arrayKindFor(dtype)] as TypedArrayCtor<TensorArray>);
    const count = shape.reduce((a, b) => a * b, 1);
    const { blockSize, typeSize } = DTYPE_INFO[dtype];
    const expected = blockSize === 1 ? count : (count / blockSize) * typeSize;
    if (data.length !== expected) {
      throw new DataLengthError(
        `output ${JSON.stringify(name)} (${dtype} ${fmtShape(shape)}): expected ${expected} elements, got ${data.length}`
      );
    }
    out[name] = { name, dtype, shape, data } as AnyTensorValue;
  }
  return out;
}

function abortError(signal: AbortSignalLike): CancelledError {
  return new CancelledError('compute cancelled', { cause: signal.reason });
}

function checkSignal(signal: unknown): asserts signal is AbortSignalLike | undefined {
  if (
    signal !== undefined &&
    (signal === null ||
      typeof signal !== 'object' ||
      typeof (signal as AbortSignalLike).addEventListener !== 'function' ||
      typeof (signal as AbortSignalLike).removeEventListener !== 'function')
  ) {
    throw new InvalidArgumentError('signal must be an AbortSignal');
  }
}

/**
 * Runs `graph` once with `inputs` and resolves to its outputs by name.
 *
 * The graph and the inputs are checked in JavaScript first (every declared input present, of
 * the declared type and length); the work runs on a native background thread. With a
 * `signal`, the computation runs in a session of its own so it can be cancelled: aborting
 * sends `cancel` and rejects with a {@link CancelledError} (`kind` `Cancelled`, `name`
 * `AbortError`).
 *
 * @param graph - a {@link GraphBuilder} with outputs, or a graph document
 * @param inputs - the data of every input, by name
 * @param options - device, threads and an abort signal
 */
export async function compute<O extends Record<string, DType>>(
  graph: GraphLike<O>,
  inputs: ComputeInputs,
  options: ComputeOptions = {}
): Promise<ComputeResult<O>> {
  const prepared = prepareCompute(graph, inputs);
  const opts = sessionOptions(options);
  const { signal } = options;
  checkSignal(signal);
  if (signal === undefined) {
    return decodeOutputs(await request(computeRequest(prepared, null, opts))) as ComputeResult<O>;
  }
  if (signal.aborted) throw abortError(signal);
  const session = await Session.open(opts);
  let run: ReturnType<Session['_run']>;
  try {
    if (signal.aborted) throw abortError(signal);
    run = session._run(prepared, signal);
  } catch (e) {
    void session.close().catch(() => undefined);
    throw e;
  }
  // Close the one-off session once the native side is done with it (after a cancel too).
  void run.settled.finally(() => session.close().catch(() => undefined));
  return (await run.result) as ComputeResult<O>;
}

/**
 * A device and thread pool kept open for repeated computations.
 *
 * ```ts
 * const session = await Session.open({ device: 'auto' });
 * try {
 *   const out = await session.compute(g, { x });
 * } finally {
 *   await session.close();
 * }
 * ```
 */
export class Session {
  /** The native session id. */
  readonly id: number;
  private isClosed = false;

  private constructor(id: number) {
    this.id = id;
  }

  /**
   * Opens a session on a device.
   *
   * @param options - `device` (`"auto"` or a name from {@link getDevices}) and `threads`
   */
  static async open(options: SessionOptions = {}): Promise<Session> {
    const r = await request<{ session?: unknown }>({ method: 'openSession', options: sessionOptions(options) });
    const id = r?.session;
    if (typeof id !== 'number' || !Number.isSafeInteger(id)) {
      throw new TesseraError('Internal', 'malformed openSession response: no session id');
    }
    return new Session(id);
  }

  /** Whether {@link Session.close} was called. */
  get closed(): boolean {
    return this.isClosed;
  }

  /**
   * Runs `graph` on this session; see {@link compute}. Computations on one session run one
   * after the other; `signal` cancels this one.
   *
   * @param graph - a {@link GraphBuilder} with outputs, or a graph document
   * @param inputs - the data of every input, by name
   * @param options - an abort signal
   */
  async compute<O extends Record<string, DType>>(
    graph: GraphLike<O>,
    inputs: ComputeInputs,
    options: SessionComputeOptions = {}
  ): Promise<ComputeResult<O>> {
    const prepared = prepareCompute(graph, inputs);
    checkSignal(options.signal);
    return (await this._run(prepared, options.signal).result) as ComputeResult<O>;
  }

  /**
   * Asks the computation running on this session to stop; it then fails with `Cancelled`.
   *
   * @returns whether a computation was running
   */
  async cancel(): Promise<boolean> {
    if (this.isClosed) return false;
    const r = await request<{ cancelled?: unknown }>({ method: 'cancel', session: this.id });
    return Boolean(r?.cancelled);
  }

  /** Closes the session and frees its memory; later calls fail with `Closed`. Idempotent. */
  async close(): Promise<void> {
    if (this.isClosed) return;
    this.isClosed = true;
    await request({ method: 'closeSession', session: this.id });
  }

  /**
   * Releases the session's native memory: the same as {@link Session.close}, under the name
   * every object of this package that holds native resources has. Also reached through
   * `Symbol.asyncDispose`, so `await using session = await Session.open()` closes it at the
   * end of the block.
   */
  release(): Promise<void> {
    return this.close();
  }

  /**
   * Sends `cancel` until the core reports a computation cancelled or `stopped()` is true: a
   * cancel that arrives before the core has registered the computation (an abort right after
   * the call) finds nothing to cancel and is repeated.
   */
  private async cancelUntilStopped(stopped: () => boolean): Promise<void> {
    for (let attempt = 0; !stopped() && !this.isClosed; attempt++) {
      let cancelled = false;
      try {
        cancelled = await this.cancel();
      } catch {
        return;
      }
      if (cancelled) return;
      await new Promise<void>((r) => setTimeout(r, Math.min(5 * 2 ** attempt, 200)));
    }
  }

  /** @internal Starts a computation; `settled` resolves when the native side is done. */
  _run(
    prepared: Prepared,
    signal: AbortSignalLike | undefined
  ): { result: Promise<Record<string, AnyTensorValue>>; settled: Promise<void> } {
    return this._start(() => computeRequest(prepared, this.id, null), signal);
  }

  /**
   * Loads `graph` into this session once: its constants are placed (model files mapped, weights
   * repacked or uploaded) and kept until {@link LoadedGraph.release} or {@link Session.close};
   * each {@link LoadedGraph.compute} then sends only the inputs.
   *
   * ```ts
   * const loaded = await session.load(g);
   * const a = await loaded.compute({ x: x1 });
   * const b = await loaded.compute({ x: x2 });
   * await loaded.release();
   * ```
   *
   * @param graph - a {@link GraphBuilder} with outputs, a graph document (version 1, or 2 with
   *   model files: docs/graph-format.md), or the document's JSON text
   * @returns the loaded graph; rejects with the core's typed error (`InvalidGraph`,
   *   `ShapeMismatch` for a file tensor misstated, `InvalidModel` for a file that cannot be read,
   *   ...) or a {@link ClosedError} when the session is closed
   */
  async load<O extends Record<string, DType> = Record<never, never>>(graph: LoadableGraph<O>): Promise<LoadedGraph<O>> {
    const { json, doc } = loadableJson(graph);
    const declared = declaredInputs(doc);
    if (this.isClosed) throw new ClosedError(`session ${this.id} is closed`);
    const r = await request<{ graph?: unknown }>(`{"method":"loadGraph","session":${this.id},"graph":${json}}`);
    const handle = r?.graph;
    if (typeof handle !== 'number' || !Number.isSafeInteger(handle) || handle < 1) {
      throw new TesseraError('Internal', 'malformed loadGraph response: no graph handle');
    }
    return new LoadedGraph<O>(this, handle, declared);
  }

  /**
   * @internal Sends the compute request `requestJson()` builds (unless the session is closed or
   * `signal` aborted); `settled` resolves when the native side is done.
   */
  _start(
    requestJson: () => string,
    signal: AbortSignalLike | undefined
  ): { result: Promise<Record<string, AnyTensorValue>>; settled: Promise<void> } {
    if (this.isClosed) {
      const result = Promise.reject(new ClosedError(`session ${this.id} is closed`));
      return { result, settled: Promise.resolve() };
    }
    if (signal?.aborted) {
      return { result: Promise.reject(abortError(signal)), settled: Promise.resolve() };
    }
    const pending = request(requestJson());
    let isSettled = false;
    const settled = pending.then(
      () => {
        isSettled = true;
      },
      () => {
        isSettled = true;
      }
    );
    if (signal === undefined) return { result: pending.then(decodeOutputs), settled };
    const result = new Promise<Record<string, AnyTensorValue>>((resolve, reject) => {
      let done = false;
      const onAbort = (): void => {
        if (done) return;
        done = true;
        // Reject now; the native computation stops at its next check and its late answer
        // (an error of kind Cancelled) is dropped.
        reject(abortError(signal));
        void this.cancelUntilStopped(() => isSettled);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      pending.then(
        (r) => {
          signal.removeEventListener('abort', onAbort);
          if (done) return;
          done = true;
          try {
            resolve(decodeOutputs(r));
          } catch (e) {
            reject(e);
          }
        },
        (e: unknown) => {
          signal.removeEventListener('abort', onAbort);
          if (done) return;
          done = true;
          reject(e);
        }
      );
    });
    return { result, settled };
  }
}

/**
 * A graph loaded once into a {@link Session} ({@link Session.load}): its weights stay placed on
 * the session's device until {@link LoadedGraph.release} or the session closes, and each
 * {@link LoadedGraph.compute} sends only the inputs (the protocol's `computeLoaded`).
 *
 * @typeParam O - the output types by name, when loaded from a typed {@link GraphBuilder}
 */
export class LoadedGraph<O extends Record<string, DType> = Record<never, never>> {
  /** The session it is loaded in. */
  readonly session: Session;
  /** The native graph handle (the `graph` of `loadGraph`'s answer). */
  readonly handle: number;
  private readonly declared: DeclaredInput[];
  private isReleased = false;

  /** @internal Made by {@link Session.load}. */
  constructor(session: Session, handle: number, declared: DeclaredInput[]) {
    this.session = session;
    this.handle = handle;
    this.declared = declared;
  }

  /** The inputs each compute needs: name, type and shape. */
  get inputs(): { name: string; dtype: DType; shape: number[] }[] {
    return this.declared.map((d) => ({ name: d.name, dtype: d.dtype, shape: [...d.shape] }));
  }

  /** Whether {@link LoadedGraph.release} was called or the session closed. */
  get released(): boolean {
    return this.isReleased || this.session.closed;
  }

  /**
   * Computes the loaded graph with `inputs` (checked in JavaScript as {@link Session.compute}
   * checks them) and resolves to its outputs by name. Computations on one session run one after
   * the other; `signal` cancels this one.
   *
   * @param inputs - the data of every input, by name
   * @param options - an abort signal
   * @returns the outputs; rejects with a {@link ClosedError} after {@link LoadedGraph.release}
   *   or once the session is closed
   */
  async compute(inputs: ComputeInputs, options: SessionComputeOptions = {}): Promise<ComputeResult<O>> {
    if (this.isReleased) throw new ClosedError(`graph ${this.handle} of session ${this.session.id} was released`);
    const inputsJson = encodeInputs(this.declared, inputs);
    checkSignal(options.signal);
    const requestJson = (): string =>
      `{"method":"computeLoaded","session":${this.session.id},"graph":${this.handle},"inputs":${inputsJson}}`;
    return (await this.session._start(requestJson, options.signal).result) as ComputeResult<O>;
  }

  /**
   * Frees the graph's weights and buffers (a computation in flight finishes first). Later
   * computes fail with a {@link ClosedError}. Idempotent; nothing to do once the session is
   * closed (closing frees every graph loaded in it). Also `Symbol.asyncDispose`.
   */
  async release(): Promise<void> {
    if (this.isReleased) return;
    this.isReleased = true;
    if (this.session.closed) return;
    try {
      await request({ method: 'releaseGraph', session: this.session.id, graph: this.handle });
    } catch (e) {
      // The session closed meanwhile: its graphs are freed with it.
      if (e instanceof ClosedError) return;
      throw e;
    }
  }
}

/** `LoadedGraph` is `AsyncDisposable`: `[Symbol.asyncDispose]()` is {@link LoadedGraph.release}. */
export interface LoadedGraph<O extends Record<string, DType> = Record<never, never>> {
  /** {@link LoadedGraph.release}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** `Session` is `AsyncDisposable`: `[Symbol.asyncDispose]()` is {@link Session.release}. */
export interface Session {
  /** {@link Session.release}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Defines `[Symbol.asyncDispose]` as `release()` on the prototype of a class that holds native
 * resources. Defined at run time, not in the class body, because engines without explicit
 * resource management (Hermes today) have no `Symbol.asyncDispose`: there the method goes under
 * `Symbol.for('Symbol.asyncDispose')`, the key Babel's `await using` helpers fall back to.
 *
 * @param proto - the prototype, whose `release()` returns a promise
 */
export function defineAsyncDispose(proto: { release(): Promise<void> }): void {
  const keys = new Set<symbol>([Symbol.for('Symbol.asyncDispose')]);
  const standard = (Symbol as { asyncDispose?: symbol }).asyncDispose;
  if (typeof standard === 'symbol') keys.add(standard);
  for (const key of keys) {
    Object.defineProperty(proto, key, {
      value: function asyncDispose(this: { release(): Promise<void> }) {
        return this.release();
      },
      writable: true,
      configurable: true,
      enumerable: false,
    });
  }
}

defineAsyncDispose(Session.prototype);
defineAsyncDispose(LoadedGraph.prototype);

// ------------------------------------------------------------------------------ logs

/** Levels of the Rust core's log, from none to everything. */
export type LogLevel = 'off' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

const LOG_LEVELS: readonly LogLevel[] = ['off', 'error', 'warn', 'info', 'debug', 'trace'];

/**
 * Sets the most detailed level the Rust core logs (to logcat / os_log, and to JS listeners
 * when forwarding is on).
 *
 * @param level - `"off"` to `"trace"`
 */
export async function setLogLevel(level: LogLevel): Promise<void> {
  if (!LOG_LEVELS.includes(level)) {
    throw new InvalidArgumentError(`log level ${JSON.stringify(level)} is not one of ${LOG_LEVELS.join(', ')}`);
  }
  await request({ method: 'setLogLevel', level });
}

/**
 * Starts or stops forwarding the Rust core's log records to {@link addNativeLogListener}
 * listeners (as `TesseraLog` events of the native module). Enabling also sets the log level
 * (default `"info"`); disabling leaves the level as it is.
 *
 * @param enabled - whether to forward records
 * @param level - the level to log at when enabling
 */
export async function toggleNativeLog(enabled: boolean, level: Exclude<LogLevel, 'off'> = 'info'): Promise<void> {
  const caller = getNativeCaller();
  caller.toggleNativeLog?.(Boolean(enabled));
  if (enabled) await setLogLevel(level);
}
