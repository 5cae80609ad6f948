/**
 * One class per error kind wherever the error was found (the JS checks or the Rust core), and
 * releasing a session: `release()` and `Symbol.asyncDispose`.
 */

import { afterEach, describe, expect, it } from 'vitest';
import {
  CancelledError,
  ClosedError,
  ContextFullError,
  DataLengthError,
  DTypeError,
  InvalidArgumentError,
  InvalidGraphError,
  InvalidModelError,
  NativeLibraryError,
  Session,
  ShapeError,
  TesseraError,
  errorOfKind,
  graph,
  graphFromDocument,
  setNativeCaller,
  type TesseraErrorKind,
  NetworkError,
  StorageError,
} from '../../src/index';
import { fakeCaller, nativeError } from './fake';

afterEach(() => setNativeCaller(null));

/** The error a native response of `kind` becomes. */
async function nativeErrorOf(kind: string): Promise<unknown> {
  setNativeCaller(fakeCaller(() => nativeError(kind, `native ${kind}`)));
  return Session.open().catch((e: unknown) => e);
}

/** The error `f` throws. */
function thrown(f: () => unknown): unknown {
  try {
    f();
  } catch (e) {
    return e;
  }
  throw new Error('nothing thrown');
}

describe('errors', () => {
  it('a kind found in JS and the same kind from native are one class', async () => {
    const g = graph();
    const x = g.input('x', 'F32', [4]);
    const found: [string, unknown][] = [
      ['Unsupported', thrown(() => g.matmul(x, g.input('i', 'I32', [4])))],
      ['UnknownType', thrown(() => g.input('q', 'Q9_9' as 'F32', [1]))],
      ['UnknownType', thrown(() => graphFromDocument({ version: 1, tensors: [{ name: 'a', type: 'F99' as 'F32', shape: [1] }], nodes: [], outputs: ['a'] }))],
      ['ShapeMismatch', thrown(() => g.add(x, g.input('y', 'F32', [5])))],
      ['InvalidArgument', thrown(() => g.add(x, {} as never))],
      ['InvalidGraph', thrown(() => g.scale(x, Number.NaN))],
      ['InvalidGraph', thrown(() => g.input('x', 'F32', [4]))],
    ];
    for (const [kind, jsError] of found) {
      const native = await nativeErrorOf(kind);
      expect((jsError as TesseraError).kind, String(jsError)).toBe(kind);
      expect((native as TesseraError).kind).toBe(kind);
      expect((native as object).constructor, `native ${kind}`).toBe((jsError as object).constructor);
      expect((native as Error).message).toBe(`native ${kind}`);
    }
  });

  it('the table: each kind to its class, the rest plain TesseraErrors', async () => {
    const classes: [TesseraErrorKind, abstract new (...a: never[]) => TesseraError][] = [
      ['Unsupported', DTypeError],
      ['UnknownType', DTypeError],
      ['ShapeMismatch', ShapeError],
      ['InvalidArgument', InvalidArgumentError],
      ['InvalidGraph', InvalidGraphError],
      ['DataLength', DataLengthError],
      ['Cancelled', CancelledError],
      ['Closed', ClosedError],
      ['InvalidModel', InvalidModelError],
      ['ContextFull', ContextFullError],
      ['NativeLibrary', NativeLibraryError],
      ['Network', NetworkError],
      ['Storage', StorageError],
    ];
    for (const [kind, cls] of classes) {
      const e = errorOfKind(kind, 'm');
      expect(e, kind).toBeInstanceOf(cls);
      expect([e.kind, e.message]).toEqual([kind, 'm']);
      expect((await nativeErrorOf(kind)) as object, kind).toBeInstanceOf(cls);
    }
    for (const kind of ['UnknownOp', 'UnknownDevice', 'Aborted', 'OutOfMemory', 'Backend', 'Internal'] as const) {
      const e = (await nativeErrorOf(kind)) as TesseraError;
      expect(e.constructor, kind).toBe(TesseraError);
      expect(e.kind).toBe(kind);
    }
  });

  it("a bridge's NativeLibrary error, answered or rejected, is a NativeLibraryError", async () => {
    const answered = await nativeErrorOf('NativeLibrary');
    expect(answered).toBeInstanceOf(NativeLibraryError);
    expect((answered as Error).name).toBe('NativeLibraryError');
    setNativeCaller({
      call: async () => {
        throw Object.assign(new Error('could not load libtessera_ffi.so for ABI x86'), { code: 'NativeLibrary' });
      },
    });
    const rejected = await Session.open().catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(NativeLibraryError);
    expect((rejected as Error).message).toBe('could not load libtessera_ffi.so for ABI x86');
  });
});

describe('releasing sessions', () => {
  function sessionCaller() {
    let next = 1;
    return fakeCaller((req) => (req.method === 'openSession' ? { session: next++ } : { closed: true }));
  }

  it('release() closes the native session once', async () => {
    const fake = sessionCaller();
    setNativeCaller(fake);
    const s = await Session.open();
    await s.release();
    await s.release();
    await s.close();
    expect(s.closed).toBe(true);
    expect(fake.requests.map((r) => [r.method, r.session])).toEqual([
      ['openSession', undefined],
      ['closeSession', 1],
    ]);
    await expect(s.compute(smallGraph(), { x: new Float32Array(4) })).rejects.toMatchObject({ kind: 'Closed' });
  });

  it('Symbol.asyncDispose and the key Babel falls back to both release the session', async () => {
    const fake = sessionCaller();
    setNativeCaller(fake);
    const a = await Session.open();
    await a[Symbol.asyncDispose]();
    const b = await Session.open();
    await (b as unknown as Record<symbol, () => Promise<void>>)[Symbol.for('Symbol.asyncDispose')]!();
    expect([a.closed, b.closed]).toEqual([true, true]);
    expect(fake.requests.filter((r) => r.method === 'closeSession').map((r) => r.session)).toEqual([1, 2]);
  });

  it('`await using` closes the session at the end of the block, also when it throws', async () => {
    const fake = sessionCaller();
    setNativeCaller(fake);
    let kept: Session | null = null;
    await expect(
      (async () => {
        await using s = await Session.open();
        kept = s;
        throw new Error('inside');
      })()
    ).rejects.toThrow('inside');
    expect(kept!.closed).toBe(true);
    expect(fake.requests.map((r) => r.method)).toEqual(['openSession', 'closeSession']);
  });
});

function smallGraph() {
  const g = graph();
  g.output(g.relu(g.input('x', 'F32', [4])), 'y');
  return g;
}
