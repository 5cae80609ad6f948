import { afterEach, describe, expect, it } from 'vitest';
import {
  CancelledError,
  DataLengthError,
  InvalidArgumentError,
  Session,
  ShapeError,
  TesseraError,
  compute,
  float32ToFloat16,
  graph,
  setNativeCaller,
} from '../../src/index';
import { b64, deferred, fakeCaller, nativeError, type Request } from './fake';

afterEach(() => setNativeCaller(null));

/** x [2, 2] F32 -> matmul with a constant -> "y"; plus "i" (argmax, I32). */
function smallGraph() {
  const g = graph();
  const x = g.input('x', 'F32', [2, 2]);
  const w = g.constant('w', new Float32Array([1, 0, 0, 1]), { dtype: 'F32', shape: [2, 2] });
  const y = g.matmul(w, x);
  return g.output(y, 'y').output(g.argmax(y), 'i');
}

const okOutputs = {
  outputs: [
    { name: 'y', dtype: 'F32', shape: [2, 2], data: b64(new Float32Array([1, 2, 3, 4])) },
    { name: 'i', dtype: 'I32', shape: [2], data: b64(new Int32Array([1, 1])) },
  ],
};

describe('compute', () => {
  it('sends one compute request with the graph, base64 inputs and options', async () => {
    const fake = fakeCaller(() => okOutputs);
    setNativeCaller(fake);
    const g = smallGraph();
    const out = await compute(g, { x: new Float32Array([1, 2, 3, 4]) }, { threads: 2 });
    expect(fake.requests).toHaveLength(1);
    const req = fake.requests[0]!;
    expect(req).toEqual({
      method: 'compute',
      graph: g.toJSON(),
      inputs: [{ name: 'x', dtype: 'F32', shape: [2, 2], data: 'AACAPwAAAEAAAEBAAACAQA==' }],
      options: { device: 'auto', threads: 2 },
    });
    // The result is typed per output
    const y: Float32Array = out.y.data;
    const i: Int32Array = out.i.data;
    expect(Array.from(y)).toEqual([1, 2, 3, 4]);
    expect(out.y.shape).toEqual([2, 2]);
    expect(out.y.dtype).toBe('F32');
    expect(Array.from(i)).toEqual([1, 1]);
    expect(i).toBeInstanceOf(Int32Array);
  });

  it('accepts a graph document and { data, shape } inputs', async () => {
    const fake = fakeCaller(() => ({
      outputs: [{ name: 'y', dtype: 'F32', shape: [2, 2], data: b64(new Float32Array(4)) }],
    }));
    setNativeCaller(fake);
    const doc = JSON.parse(JSON.stringify(smallGraph()));
    const out = await compute(doc, { x: { data: new Float32Array(4), shape: [2, 2, 1] } }, { device: 'CPU' });
    expect(Object.keys(out)).toEqual(['y']);
    expect(fake.requests[0]!.options).toEqual({ device: 'CPU', threads: null });
    await expect(compute(doc, { x: { data: new Float32Array(4), shape: [4] } })).rejects.toThrow(
      new ShapeError('compute: input "x" has shape [4], the graph declares [2, 2]')
    );
  });

  it('converts every output type: F16 bits, BF16 bits, raw quantized blocks', async () => {
    const half = float32ToFloat16([1, -0.5, 2, 65504]);
    const block = new Uint8Array(34).map((_, k) => k);
    setNativeCaller(
      fakeCaller(() => ({
        outputs: [
          { name: 'h', dtype: 'F16', shape: [4], data: b64(half) },
          { name: 'b', dtype: 'BF16', shape: [1], data: b64(new Uint16Array([0x3f80])) },
          { name: 'q', dtype: 'Q8_0', shape: [32], data: b64(block) },
        ],
      }))
    );
    const g = graph();
    const x = g.input('x', 'F16', [4]);
    g.output(x, 'x');
    const out = await compute(g, { x: half });
    expect(out.h!.data).toBeInstanceOf(Uint16Array);
    expect(Array.from(out.h!.data)).toEqual([0x3c00, 0xb800, 0x4000, 0x7bff]);
    expect(Array.from(out.b!.data)).toEqual([0x3f80]);
    expect(out.q!.data).toBeInstanceOf(Uint8Array);
    expect(Array.from(out.q!.data)).toEqual(Array.from(block));
  });

  it('rejects output data that does not fit its shape', async () => {
    setNativeCaller(
      fakeCaller(() => ({ outputs: [{ name: 'y', dtype: 'F32', shape: [3], data: b64(new Float32Array(2)) }] }))
    );
    const g = graph();
    g.output(g.input('x', 'F32', [1]));
    await expect(compute(g, { x: new Float32Array(1) })).rejects.toBeInstanceOf(DataLengthError);
  });

  it('checks inputs before anything reaches native code', async () => {
    const fake = fakeCaller(() => okOutputs);
    setNativeCaller(fake);
    const g = smallGraph();
    const cases: [Record<string, unknown>, new (m: string) => TesseraError, string][] = [
      [{}, InvalidArgumentError, 'compute: missing input "x" (F32 [2, 2])'],
      [{ x: new Float32Array(3) }, DataLengthError, 'compute: input "x" (F32 [2, 2]) needs 4 values, got 3'],
      [{ x: new Float64Array(4) }, InvalidArgumentError, 'compute: input "x" is F32: expected a Float32Array, got Float64Array'],
      [{ x: [1, 2, 3, 4] }, InvalidArgumentError, 'compute: input "x" is F32: expected a Float32Array, got Array'],
      [{ x: new Float32Array(4), z: new Float32Array(1) }, InvalidArgumentError, 'compute: unknown input "z" (the graph\'s inputs: "x")'],
    ];
    for (const [inputs, cls, message] of cases) {
      const p = compute(g, inputs as never);
      await expect(p).rejects.toBeInstanceOf(cls);
      await expect(p).rejects.toThrow(message);
    }
    // Quantized inputs are raw bytes
    const gq = graph();
    gq.output(gq.input('q', 'Q4_0', [64]));
    await expect(compute(gq, { q: new Uint8Array(35) })).rejects.toThrow('compute: input "q" (Q4_0 [64]) needs 36 bytes, got 35');
    // Options
    await expect(compute(g, { x: new Float32Array(4) }, { threads: 0 })).rejects.toThrow(/threads 0 must be a positive integer/);
    await expect(compute(g, { x: new Float32Array(4) }, { device: '' })).rejects.toThrow(/device must be/);
    // A graph without outputs
    const empty = graph();
    empty.input('x', 'F32', [1]);
    await expect(compute(empty, { x: new Float32Array(1) })).rejects.toThrow(/no outputs/);
    expect(fake.requests).toHaveLength(0);
  });

  it('turns native errors into TesseraErrors with kind and message', async () => {
    const kinds = ['ShapeMismatch', 'UnknownDevice', 'OutOfMemory', 'Backend', 'Closed', 'Cancelled', 'InvalidArgument'];
    for (const kind of kinds) {
      setNativeCaller(fakeCaller(() => nativeError(kind, `native says ${kind}`)));
      const err = await compute(smallGraph(), { x: new Float32Array(4) }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TesseraError);
      expect((err as TesseraError).kind).toBe(kind);
      expect((err as TesseraError).message).toBe(`native says ${kind}`);
    }
    setNativeCaller(fakeCaller(() => nativeError('ShapeMismatch', 'MUL_MAT: ...')));
    await expect(compute(smallGraph(), { x: new Float32Array(4) })).rejects.toBeInstanceOf(ShapeError);
    setNativeCaller(fakeCaller(() => nativeError('Cancelled', 'computation cancelled')));
    const c = await compute(smallGraph(), { x: new Float32Array(4) }).catch((e: unknown) => e);
    expect(c).toBeInstanceOf(CancelledError);
    expect((c as Error).name).toBe('AbortError');
    // Unknown kinds become Internal, keeping the native kind in the message
    setNativeCaller(fakeCaller(() => nativeError('Weird', 'what')));
    const w = (await compute(smallGraph(), { x: new Float32Array(4) }).catch((e: unknown) => e)) as TesseraError;
    expect([w.kind, w.message]).toEqual(['Internal', 'Weird: what']);
  });

  it('handles malformed responses and rejected native calls', async () => {
    setNativeCaller({ call: async () => 'not json' });
    await expect(compute(smallGraph(), { x: new Float32Array(4) })).rejects.toThrow(/malformed native response \(not JSON\)/);
    setNativeCaller({ call: async () => '{"neither": 1}' });
    await expect(compute(smallGraph(), { x: new Float32Array(4) })).rejects.toThrow(/malformed native response/);
    setNativeCaller({
      call: async () => {
        throw Object.assign(new Error('boom'), { code: 'OutOfMemory' });
      },
    });
    const e1 = (await compute(smallGraph(), { x: new Float32Array(4) }).catch((e: unknown) => e)) as TesseraError;
    expect([e1.kind, e1.message]).toEqual(['OutOfMemory', 'boom']);
    setNativeCaller({
      call: async () => {
        throw new Error('bridge gone');
      },
    });
    const e2 = (await compute(smallGraph(), { x: new Float32Array(4) }).catch((e: unknown) => e)) as TesseraError;
    expect([e2.kind, e2.message]).toEqual(['Internal', 'native call failed: bridge gone']);
  });
});

describe('cancellation', () => {
  /** A fake whose compute answers only when released; cancel makes it answer Cancelled. */
  function slowFake() {
    const gate = deferred<void>();
    let cancelled = false;
    const fake = fakeCaller(async (req: Request) => {
      switch (req.method) {
        case 'openSession':
          return { session: 7 };
        case 'compute':
          await gate.promise;
          return cancelled ? nativeError('Cancelled', 'computation cancelled') : okOutputs;
        case 'cancel':
          cancelled = true;
          gate.resolve();
          return { cancelled: true };
        case 'closeSession':
          return { closed: true };
        default:
          return nativeError('InvalidArgument', `unexpected ${req.method}`);
      }
    });
    return { fake, gate };
  }

  const flush = () => new Promise((r) => setTimeout(r, 0));

  it('an already aborted signal rejects without calling native code', async () => {
    const { fake } = slowFake();
    setNativeCaller(fake);
    const ac = new AbortController();
    ac.abort('stop');
    const e = (await compute(smallGraph(), { x: new Float32Array(4) }, { signal: ac.signal }).catch((x: unknown) => x)) as TesseraError;
    expect(e).toBeInstanceOf(CancelledError);
    expect([e.kind, e.name]).toEqual(['Cancelled', 'AbortError']);
    expect(e.cause).toBe('stop');
    expect(fake.requests).toHaveLength(0);
  });

  it('aborting a running compute sends cancel for its session, rejects, then closes the session', async () => {
    const { fake } = slowFake();
    setNativeCaller(fake);
    const ac = new AbortController();
    const p = compute(smallGraph(), { x: new Float32Array(4) }, { signal: ac.signal, device: 'CPU' });
    await flush();
    expect(fake.requests.map((r) => r.method)).toEqual(['openSession', 'compute']);
    expect(fake.requests[0]!.options).toEqual({ device: 'CPU', threads: null });
    expect(fake.requests[1]!.session).toBe(7);
    ac.abort();
    const e = (await p.catch((x: unknown) => x)) as TesseraError;
    expect(e).toBeInstanceOf(CancelledError);
    expect(e.kind).toBe('Cancelled');
    await flush();
    await flush();
    expect(fake.requests.map((r) => r.method)).toEqual(['openSession', 'compute', 'cancel', 'closeSession']);
    expect(fake.requests[2]).toEqual({ method: 'cancel', session: 7 });
    expect(fake.requests[3]).toEqual({ method: 'closeSession', session: 7 });
  });

  it('a compute that finishes before the abort resolves normally', async () => {
    const { fake, gate } = slowFake();
    setNativeCaller(fake);
    const ac = new AbortController();
    const p = compute(smallGraph(), { x: new Float32Array(4) }, { signal: ac.signal });
    await flush();
    gate.resolve();
    const out = await p;
    expect(Array.from(out.y.data)).toEqual([1, 2, 3, 4]);
    ac.abort(); // too late: nothing happens
    await flush();
    expect(fake.requests.map((r) => r.method)).toEqual(['openSession', 'compute', 'closeSession']);
  });

  it('Session: open, compute, cancel through a signal, close', async () => {
    const { fake } = slowFake();
    setNativeCaller(fake);
    const session = await Session.open({ threads: 4 });
    expect(session.id).toBe(7);
    expect(fake.requests[0]).toEqual({ method: 'openSession', options: { device: 'auto', threads: 4 } });
    const ac = new AbortController();
    const p = session.compute(smallGraph(), { x: new Float32Array(4) }, { signal: ac.signal });
    await flush();
    expect(fake.requests[1]!.session).toBe(7);
    expect(fake.requests[1]!.options).toBeUndefined();
    ac.abort();
    await expect(p).rejects.toBeInstanceOf(CancelledError);
    await session.close();
    await session.close(); // idempotent
    expect(session.closed).toBe(true);
    expect(fake.requests.map((r) => r.method)).toEqual(['openSession', 'compute', 'cancel', 'closeSession']);
    const closed = (await session.compute(smallGraph(), { x: new Float32Array(4) }).catch((x: unknown) => x)) as TesseraError;
    expect([closed.kind, closed.message]).toEqual(['Closed', 'session 7 is closed']);
    expect(await session.cancel()).toBe(false);
  });

  it('repeats cancel while the core has not registered the computation yet', async () => {
    const gate = deferred<void>();
    let cancels = 0;
    const fake = fakeCaller(async (req: Request) => {
      switch (req.method) {
        case 'openSession':
          return { session: 3 };
        case 'compute':
          await gate.promise;
          return nativeError('Cancelled', 'computation cancelled');
        case 'cancel':
          // The first two cancels arrive before the compute is registered.
          cancels++;
          if (cancels < 3) return { cancelled: false };
          gate.resolve();
          return { cancelled: true };
        default:
          return { closed: true };
      }
    });
    setNativeCaller(fake);
    const ac = new AbortController();
    const p = compute(smallGraph(), { x: new Float32Array(4) }, { signal: ac.signal });
    await flush();
    ac.abort();
    await expect(p).rejects.toBeInstanceOf(CancelledError);
    await gate.promise;
    await flush();
    await flush();
    expect(fake.requests.map((r) => r.method)).toEqual(['openSession', 'compute', 'cancel', 'cancel', 'cancel', 'closeSession']);
  });

  it('Session.cancel asks the native side directly', async () => {
    const { fake } = slowFake();
    setNativeCaller(fake);
    const session = await Session.open();
    const p = session.compute(smallGraph(), { x: new Float32Array(4) });
    await flush();
    expect(await session.cancel()).toBe(true);
    const e = (await p.catch((x: unknown) => x)) as TesseraError;
    expect(e).toBeInstanceOf(CancelledError);
    await session.close();
  });
});
