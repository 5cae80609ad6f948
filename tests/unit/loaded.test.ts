/**
 * Graphs loaded once (`Session.load` / `LoadedGraph`: the protocol's loadGraph, computeLoaded,
 * releaseGraph) and model files (`ggufInfo`), over a scripted native caller that answers as the
 * Rust core does (rust/ffi/src/json_api.rs).
 */

import { afterEach, describe, expect, it } from 'vitest';
import {
  ClosedError,
  DataLengthError,
  InvalidArgumentError,
  InvalidGraphError,
  InvalidModelError,
  Session,
  ShapeError,
  TesseraError,
  ggufInfo,
  graph,
  setNativeCaller,
  type GraphDocumentV2,
} from '../../src/index';
import { b64, fakeCaller, nativeError, type Request } from './fake';

afterEach(() => setNativeCaller(null));

const DOC_V2: GraphDocumentV2 = {
  version: 2,
  files: [{ name: 'm', path: '/data/m.gguf' }],
  tensors: [
    { name: 'w', file: 'm', tensor: 'a.f32' },
    { name: 'x', type: 'F32', shape: [4, 2] },
  ],
  nodes: [{ name: 'y', op: 'MUL_MAT', src: ['w', 'x'] }],
  outputs: ['y'],
};

/**
 * A native side holding loaded graphs: `computeLoaded` answers `y` = 3 * x + handle (so the test
 * sees that the inputs it sent and the handle it named were used); released handles are Closed.
 */
function loadingNative() {
  const loaded = new Map<number, unknown>();
  let next = 1;
  return fakeCaller((req: Request) => {
    switch (req.method) {
      case 'openSession':
        return { session: 7 };
      case 'closeSession':
        return { closed: true };
      case 'loadGraph':
        loaded.set(next, req.graph);
        return { graph: next++ };
      case 'computeLoaded': {
        const h = req.graph as number;
        if (!loaded.has(h)) return nativeError('Closed', `graph ${h} was released`);
        const [x] = req.inputs as { data: string }[];
        const xs = new Float32Array(new Uint8Array(Buffer.from(x!.data, 'base64')).buffer);
        return { outputs: [{ name: 'y', dtype: 'F32', shape: [xs.length], data: b64(xs.map((v) => 3 * v + h)) }] };
      }
      case 'releaseGraph':
        loaded.delete(req.graph as number);
        return { released: true };
      default:
        return nativeError('InvalidArgument', `unknown method ${req.method}`);
    }
  });
}

describe('Session.load', () => {
  it('loads once and computes with the handle and the inputs only', async () => {
    const fake = loadingNative();
    setNativeCaller(fake);
    const session = await Session.open({ device: 'CPU' });
    const loaded = await session.load(DOC_V2);
    expect(loaded.handle).toBe(1);
    expect(loaded.inputs).toEqual([{ name: 'x', dtype: 'F32', shape: [4, 2] }]);
    const load = fake.requests.find((r) => r.method === 'loadGraph')!;
    expect(load).toEqual({ method: 'loadGraph', session: 7, graph: DOC_V2 });
    for (const k of [1, -2, 0.5]) {
      const x = Float32Array.from({ length: 8 }, (_, i) => k * (i - 3));
      const out = await loaded.compute({ x });
      expect(Array.from(out.y!.data)).toEqual(Array.from(x, (v) => 3 * v + 1));
    }
    const computes = fake.requests.filter((r) => r.method === 'computeLoaded');
    expect(computes).toHaveLength(3);
    for (const r of computes) {
      expect(Object.keys(r).sort()).toEqual(['graph', 'inputs', 'method', 'session']);
      expect([r.session, r.graph]).toEqual([7, 1]);
      expect(r.inputs).toEqual([expect.objectContaining({ name: 'x', dtype: 'F32', shape: [4, 2] })]);
    }
    expect(fake.raw.filter((j) => j.includes('"a.f32"'))).toHaveLength(1);
  });

  it('release is idempotent, and computes after it reject with ClosedError before any request', async () => {
    const fake = loadingNative();
    setNativeCaller(fake);
    const session = await Session.open();
    const loaded = await session.load(DOC_V2);
    expect(loaded.released).toBe(false);
    await loaded.release();
    await loaded.release();
    expect(loaded.released).toBe(true);
    expect(fake.requests.filter((r) => r.method === 'releaseGraph')).toEqual([{ method: 'releaseGraph', session: 7, graph: 1 }]);
    const before = fake.requests.length;
    const err = await loaded.compute({ x: new Float32Array(8) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ClosedError);
    expect((err as TesseraError).kind).toBe('Closed');
    expect((err as Error).message).toBe('graph 1 of session 7 was released');
    expect(fake.requests).toHaveLength(before);
  });

  it('a closed session: load and compute reject with ClosedError, release does nothing', async () => {
    const fake = loadingNative();
    setNativeCaller(fake);
    const session = await Session.open();
    const loaded = await session.load(DOC_V2);
    await session.close();
    expect(loaded.released).toBe(true);
    await expect(loaded.compute({ x: new Float32Array(8) })).rejects.toBeInstanceOf(ClosedError);
    await expect(session.load(DOC_V2)).rejects.toBeInstanceOf(ClosedError);
    await loaded.release();
    expect(fake.requests.filter((r) => r.method === 'releaseGraph')).toHaveLength(0);
  });

  it('takes a builder, a version-1 document or JSON text; checks inputs as compute does', async () => {
    const fake = loadingNative();
    setNativeCaller(fake);
    const session = await Session.open();
    const g = graph();
    g.output(g.scale(g.input('x', 'F32', [3]), 2), 'y');
    const fromBuilder = await session.load(g);
    expect(fake.requests.at(-1)!.graph).toEqual(g.toJSON());
    const fromText = await session.load(JSON.stringify(DOC_V2));
    expect(fake.requests.at(-1)!.graph).toEqual(DOC_V2);
    expect(fromText.inputs.map((i) => i.name)).toEqual(['x']);
    const out = await fromBuilder.compute({ x: Float32Array.of(1, 2, 3) });
    expect(Array.from(out.y!.data)).toEqual([4, 7, 10]);
    const n = fake.requests.length;
    await expect(fromBuilder.compute({ x: new Float32Array(2) })).rejects.toThrow(
      new DataLengthError('compute: input "x" (F32 [3]) needs 3 values, got 2')
    );
    await expect(fromText.compute({})).rejects.toThrow('compute: missing input "x" (F32 [4, 2])');
    await expect(fromText.compute({ x: new Float32Array(8), w: new Float32Array(1) })).rejects.toThrow(
      'compute: unknown input "w" (the graph\'s inputs: "x")'
    );
    await expect(fromText.compute({ x: { data: new Float32Array(8), shape: [2, 4] } })).rejects.toBeInstanceOf(ShapeError);
    expect(fake.requests).toHaveLength(n);
    // Documents that cannot be loaded never reach native code.
    await expect(session.load('{"version": 2, ')).rejects.toBeInstanceOf(InvalidGraphError);
    await expect(session.load({ ...DOC_V2, version: 3 } as unknown as GraphDocumentV2)).rejects.toThrow(
      /unsupported graph document version 3/
    );
    await expect(session.load({ ...DOC_V2, outputs: [] })).rejects.toThrow(/no outputs/);
    await expect(session.load(42 as unknown as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(fake.requests).toHaveLength(n);
  });

  it("the core's errors arrive as their classes", async () => {
    const cases: [string, abstract new (...a: never[]) => TesseraError][] = [
      ['InvalidModel', InvalidModelError],
      ['ShapeMismatch', ShapeError],
      ['InvalidGraph', InvalidGraphError],
    ];
    for (const [kind, cls] of cases) {
      setNativeCaller(
        fakeCaller((req) => (req.method === 'openSession' ? { session: 1 } : nativeError(kind, `loadGraph: ${kind}`)))
      );
      const session = await Session.open();
      const err = await session.load(DOC_V2).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(cls);
      expect((err as Error).message).toBe(`loadGraph: ${kind}`);
    }
    setNativeCaller(fakeCaller((req) => (req.method === 'openSession' ? { session: 1 } : { graph: 'x' })));
    const s = await Session.open();
    await expect(s.load(DOC_V2)).rejects.toThrow(/malformed loadGraph response/);
  });
});

describe('the memoryBudget option', () => {
  it('is sent when given, and checked', async () => {
    const fake = loadingNative();
    setNativeCaller(fake);
    await Session.open({ device: 'CPU', memoryBudget: 1 << 20 });
    await Session.open({ device: 'CPU', memoryBudget: null });
    expect(fake.requests.map((r) => r.options)).toEqual([
      { device: 'CPU', threads: null, memoryBudget: 1048576 },
      { device: 'CPU', threads: null },
    ]);
    for (const bad of [0, -5, 1.5, Number.NaN]) {
      await expect(Session.open({ memoryBudget: bad })).rejects.toThrow(
        new InvalidArgumentError(`memoryBudget ${bad} must be a positive integer number of bytes or null`)
      );
    }
    expect(fake.requests).toHaveLength(2);
  });
});

describe('ggufInfo', () => {
  const answer = {
    file: '/m.gguf',
    version: 3,
    file_size: 1184,
    alignment: 64,
    data_offset: 704,
    metadata: [
      { key: 'general.architecture', type: 'STRING', value: 'test' },
      { key: 'tokens', type: 'ARRAY', element_type: 'STRING', len: 5, truncated: true, value: ['a', 'bc'] },
    ],
    tensors: [{ name: 'b.q8_0', type: 'Q8_0', shape: [64], bytes: 68, offset: 64 }],
  };

  it('sends path and arrayItems and returns typed, camel-cased fields', async () => {
    const fake = fakeCaller(() => answer);
    setNativeCaller(fake);
    const info = await ggufInfo('/m.gguf', { arrayItems: 2 });
    expect(fake.requests).toEqual([{ method: 'ggufInfo', path: '/m.gguf', arrayItems: 2 }]);
    expect([info.path, info.version, info.fileSize, info.alignment, info.dataOffset]).toEqual(['/m.gguf', 3, 1184, 64, 704]);
    expect(info.metadata).toEqual([
      { key: 'general.architecture', type: 'STRING', value: 'test' },
      { key: 'tokens', type: 'ARRAY', elementType: 'STRING', length: 5, truncated: true, value: ['a', 'bc'] },
    ]);
    expect(info.get('general.architecture')).toBe('test');
    expect(info.get('nothing')).toBeUndefined();
    expect(info.tensors).toEqual([{ name: 'b.q8_0', type: 'Q8_0', shape: [64], bytes: 68, offset: 64 }]);
    expect(info.tensor('b.q8_0')!.bytes).toBe(68);
    await ggufInfo('/m.gguf');
    expect(fake.requests[1]).toEqual({ method: 'ggufInfo', path: '/m.gguf', arrayItems: 16 });
  });

  it('errors: the InvalidModel of the core, bad arguments and malformed answers', async () => {
    setNativeCaller(fakeCaller(() => nativeError('InvalidModel', '/nope.gguf: No such file or directory')));
    const err = await ggufInfo('/nope.gguf').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidModelError);
    expect((err as Error).message).toBe('/nope.gguf: No such file or directory');
    // A message that does not name the file gets its path in front.
    setNativeCaller(fakeCaller(() => nativeError('InvalidModel', 'not a GGUF file: the first four bytes are [47, 47, 4d, 4c]')));
    const bad = await ggufInfo('/x.bin').catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(InvalidModelError);
    expect((bad as Error).message).toBe('/x.bin: not a GGUF file: the first four bytes are [47, 47, 4d, 4c]');
    const fake = fakeCaller(() => ({ ...answer, tensors: [{ ...answer.tensors[0], type: 'Q9_9' }] }));
    setNativeCaller(fake);
    await expect(ggufInfo('')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(ggufInfo('/m.gguf', { arrayItems: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(fake.requests).toHaveLength(0);
    await expect(ggufInfo('/m.gguf')).rejects.toThrow('malformed ggufInfo response: tensor "b.q8_0": unknown type Q9_9');
  });
});
