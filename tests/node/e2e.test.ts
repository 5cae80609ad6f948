/**
 * End to end: the TypeScript API over the real Rust core (the tessera-ffi cdylib through its C
 * ABI `tessera_call_json`), with answers computed by hand.
 *
 * Run with `npm run test:e2e` after `cargo build -p tessera-ffi` (or set TESSERA_FFI_LIB).
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CancelledError,
  InvalidArgumentError,
  Session,
  ShapeError,
  TesseraError,
  compute,
  float32ToFloat16,
  getBuildInfo,
  getCpuFeatures,
  getDevices,
  graph,
  setNativeCaller,
  toFloat32,
  type GraphDocument,
} from '../../src/index';
import { readFileSync } from 'node:fs';
import { koffiCaller, type KoffiCaller } from './koffi-caller';

const native: KoffiCaller = koffiCaller();

/** Whether the C ABI answers the session methods (openSession / cancel / closeSession). */
function supportsSessions(): boolean {
  const r = JSON.parse(native.callSync(JSON.stringify({ method: 'openSession', options: { device: 'CPU', threads: 1 } })));
  if (r.ok && typeof r.ok.session === 'number') {
    native.callSync(JSON.stringify({ method: 'closeSession', session: r.ok.session }));
    return true;
  }
  return false;
}
const sessions = supportsSessions();

beforeAll(() => setNativeCaller(native));
afterAll(() => setNativeCaller(null));

/** One Q8_0 block: the f16 scale `d`, then 32 int8 quants; the values are `d * q`. */
function q8Block(d: number, q: (i: number) => number): Uint8Array {
  const block = new Uint8Array(34);
  new DataView(block.buffer).setUint16(0, float32ToFloat16([d])[0]!, true);
  for (let i = 0; i < 32; i++) block[2 + i] = q(i) & 0xff;
  return block;
}

function concatBytes(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

function expectClose(actual: ArrayLike<number>, expected: number[], tol = 1e-6): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const e = expected[i]!;
    if (!Number.isFinite(e)) expect(actual[i]).toBe(e);
    else expect(Math.abs(actual[i]! - e), `element ${i}: ${actual[i]} vs ${e}`).toBeLessThanOrEqual(tol * Math.max(1, Math.abs(e)));
  }
}

/** The first value of `key` in /proc/cpuinfo (Linux), read independently of the core. */
function cpuinfoField(key: string): string | undefined {
  if (process.platform !== 'linux') return undefined;
  const line = readFileSync('/proc/cpuinfo', 'utf8')
    .split('\n')
    .find((l) => l.split(':')[0]!.trim() === key);
  return line?.slice(line.indexOf(':') + 1).trim();
}

/** The tier names of tessera-cpu (`Tier::name`). */
const TIERS = ['scalar', 'neon', 'dotprod', 'i8mm', 'avx2', 'avx512_vnni'];

describe('device information', () => {
  it('lists the CPU with a real description and memory', async () => {
    const devices = await getDevices();
    const cpu = devices.find((d) => d.type === 'cpu');
    if (cpu === undefined) throw new Error(`no CPU among ${JSON.stringify(devices)}`);
    expect([cpu.name, cpu.backend]).toEqual(['CPU', 'CPU']);
    // What the machine says of itself, read here from /proc (Linux).
    const model = cpuinfoField('model name');
    if (model) expect(cpu.description).toBe(model);
    else expect(cpu.description).not.toBe('');
    const memTotal = process.platform === 'linux' ? /^MemTotal:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8')) : null;
    if (memTotal) expect(cpu.memoryTotal).toBe(Number(memTotal[1]) * 1024);
    else expect(cpu.memoryTotal).toBeGreaterThan(0);
    expect(cpu.memoryFree).toBeGreaterThan(0);
    expect(cpu.memoryFree).toBeLessThanOrEqual(cpu.memoryTotal);
  });

  it('reports CPU features of this machine, typed', async () => {
    const f = await getCpuFeatures();
    const flags = new Set((cpuinfoField('flags') ?? cpuinfoField('Features') ?? '').split(/\s+/));
    if (process.arch === 'x64') {
      expect(f.raw).toHaveProperty('AVX2');
      expect(f.avx2).toBe(f.raw.AVX2 === '1');
      // The core's detection agrees with the kernel's list of the CPU's flags.
      if (flags.size > 1) expect(f.avx2).toBe(flags.has('avx2'));
      expect(f.neon).toBe(false);
    } else if (process.arch === 'arm64') {
      expect(f.neon).toBe(true);
    }
    // One tier per weight type, each a tier of tessera-cpu, the same in the typed view.
    expect(f.tiers.length).toBeGreaterThan(0);
    for (const t of f.tiers) {
      expect(TIERS).toContain(t.tier);
      expect(f.tierByType[t.dtype as keyof typeof f.tierByType]).toBe(t.tier);
    }
    expect(TIERS).toContain(f.tierByType.Q8_0);
    if (process.arch === 'x64') expect(['scalar', 'avx2', 'avx512_vnni']).toContain(f.tierByType.Q8_0);
  });

  it('reports the build', async () => {
    const b = await getBuildInfo();
    // The workspace's version (Cargo.toml), the host's target, the default features.
    const cargo = readFileSync(new URL('../../Cargo.toml', import.meta.url), 'utf8');
    const version = /\[workspace\.package\][^[]*?version = "([^"]+)"/.exec(cargo)?.[1];
    expect(b.version).toBe(version);
    const arch = { x64: 'x86_64', arm64: 'aarch64' }[process.arch as string];
    if (arch) expect(b.target.startsWith(`${arch}-`), b.target).toBe(true);
    if (process.platform === 'linux') expect(b.target).toContain('-linux');
    expect(b.features).toContain('gpu');
  });
});

describe('compute', () => {
  it('F32 matmul', async () => {
    // W: 2 rows of 3 (shape [3, 2]); x: 2 columns of 3 (shape [3, 2]); C[n][m] = W[m] . x[n]
    const g = graph();
    const w = g.constant('w', new Float32Array([1, 2, 3, 4, 5, 6]), { dtype: 'F32', shape: [3, 2] });
    const x = g.input('x', 'F32', [3, 2]);
    const out = await compute(g.output(g.matmul(w, x), 'y'), { x: new Float32Array([1, 0, -1, 2, 1, 0]) });
    // n = 0: [1-3, 4-6] = [-2, -2]; n = 1: [2+2, 8+5] = [4, 13]
    expect(out.y.shape).toEqual([2, 2]);
    expect(Array.from(out.y.data)).toEqual([-2, -2, 4, 13]);
  });

  it('matmul of Q8_0 weights from raw blocks, exactly', async () => {
    // Row 0: d = 0.5, q_i = i - 16 -> w_i = (i - 16) / 2; row 1: d = 1, q_i = 1 -> w_i = 1.
    const blocks = concatBytes(
      q8Block(0.5, (i) => i - 16),
      q8Block(1, () => 1)
    );
    const g = graph();
    const w = g.constant('w', blocks, { dtype: 'Q8_0', shape: [32, 2] });
    const x = g.input('x', 'F32', [32, 1]);
    // x_0 = 127, x_31 = 2, others 0: the activations quantize to Q8_0 exactly (d = 1).
    const xs = new Float32Array(32);
    xs[0] = 127;
    xs[31] = 2;
    const out = await compute(g.output(g.matmul(w, x), 'y'), { x: xs });
    // row 0: -8 * 127 + 7.5 * 2 = -1001; row 1: 127 + 2 = 129
    expect(Array.from(out.y.data)).toEqual([-1001, 129]);
  });

  it('matmul of Q8_0 weights quantized by the core from values, then softmax', async () => {
    // Rows whose largest magnitude is 127 quantize exactly (d = 1).
    const values = new Float32Array(64);
    values[0] = -127;
    for (let i = 1; i < 32; i++) values[i] = i;
    values[32] = 127;
    const g = graph();
    const w = g.constant('w', values, { dtype: 'Q8_0', shape: [32, 2] });
    const x = g.input('x', 'F32', [32, 1]);
    const y = g.matmul(w, x);
    const xs = new Float32Array(32);
    xs[0] = 127;
    xs[31] = 2;
    const gg = g.output(y, 'y').output(g.softmax(g.scale(y, 0)), 'p');
    const out = await compute(gg, { x: xs });
    // row 0: -127 * 127 + 31 * 2 = -16067; row 1: 127 * 127 = 16129
    expect(Array.from(out.y.data)).toEqual([-16067, 16129]);
    // softmax of [0, 0]
    expect(Array.from(out.p.data)).toEqual([0.5, 0.5]);
  });

  it('softmax with scale, a mask and -Infinity', async () => {
    const g = graph();
    const a = g.input('a', 'F32', [4, 2]);
    const mask = g.input('mask', 'F32', [4, 2]);
    const gg = g.output(g.softmax(a), 'plain').output(g.softmax(a, { scale: 2, mask }), 'masked');
    const ln = Math.log;
    const out = await compute(gg, {
      a: new Float32Array([0, 0, 0, 0, 0, ln(2), ln(3), -Infinity]),
      mask: new Float32Array([0, -Infinity, 0, -Infinity, 0, 0, 0, 0]),
    });
    // row 0: uniform; row 1: exp = 1, 2, 3, 0 -> 1/6, 2/6, 3/6, 0
    expectClose(out.plain.data, [0.25, 0.25, 0.25, 0.25, 1 / 6, 2 / 6, 3 / 6, 0]);
    // row 0 masked at 1 and 3: 1/2, 0, 1/2, 0; row 1 scaled by 2: exp = 1, 4, 9, 0 -> /14
    expectClose(out.masked.data, [0.5, 0, 0.5, 0, 1 / 14, 4 / 14, 9 / 14, 0]);
  });

  it('rms_norm', async () => {
    const g = graph();
    const x = g.input('x', 'F32', [2, 2]);
    const out = await compute(g.output(g.rmsNorm(x, 0), 'n'), { x: new Float32Array([3, 4, -2, 2]) });
    // [3, 4]: rms = sqrt(12.5); [-2, 2]: rms = 2
    const r = Math.sqrt(12.5);
    expectClose(out.n.data, [3 / r, 4 / r, -1, 1]);
  });

  it('rope, normal and NeoX', async () => {
    // One head of 4 dims, 2 tokens at positions 0 and 1; theta_i = pos * 10000^(-2i/4) = pos, pos / 100
    const g = graph();
    const a = g.input('a', 'F32', [4, 1, 2]);
    const pos = g.input('pos', 'I32', [2]);
    const gg = g.output(g.rope(a, pos, { nDims: 4 }), 'normal').output(g.rope(a, pos, { nDims: 4, mode: 'neox' }), 'neox');
    const out = await compute(gg, { a: new Float32Array([1, 0, 1, 0, 1, 0, 1, 0]), pos: new Int32Array([0, 1]) });
    const { cos, sin } = Math;
    // normal: pairs (x0, x1) by theta_0, (x2, x3) by theta_1
    expectClose(out.normal.data, [1, 0, 1, 0, cos(1), sin(1), cos(0.01), sin(0.01)], 1e-5);
    // NeoX: pairs (x0, x2) by theta_0, (x1, x3) by theta_1
    expectClose(out.neox.data, [1, 0, 1, 0, cos(1) - sin(1), 0, sin(1) + cos(1), 0], 1e-5);
    expect(out.normal.shape).toEqual([4, 1, 2]);
  });

  it('I32 and F16 outputs: argmax, get_rows, cpy to F16', async () => {
    const g = graph();
    const a = g.input('a', 'F32', [3, 2]);
    const ids = g.input('ids', 'I32', [3]);
    const dst = g.input('dst', 'F16', [6]);
    const gg = g
      .output(g.argmax(a), 'best')
      .output(g.getRows(a, ids), 'rows')
      .output(g.cpy(a, dst), 'half');
    const out = await compute(gg, {
      a: new Float32Array([1, 5, 2, 7, -1, 0.5]),
      ids: new Int32Array([1, 0, 1]),
      dst: new Uint16Array(6),
    });
    expect(out.best.data).toBeInstanceOf(Int32Array);
    expect(Array.from(out.best.data)).toEqual([1, 0]);
    expect(Array.from(out.rows.data)).toEqual([7, -1, 0.5, 1, 5, 2, 7, -1, 0.5]);
    expect(out.half.dtype).toBe('F16');
    expect(out.half.data).toBeInstanceOf(Uint16Array);
    expect(Array.from(toFloat32(out.half))).toEqual([1, 5, 2, 7, -1, 0.5]);
  });

  (sessions ? it : it.todo)('runs repeatedly in a session', async () => {
    const g = graph();
    const x = g.input('x', 'F32', [2]);
    const gg = g.output(g.scale(x, 3, 1), 'y');
    const session = await Session.open({ device: 'CPU', threads: 2 });
    try {
      for (let k = 0; k < 3; k++) {
        const out = await session.compute(gg, { x: new Float32Array([k, -k]) });
        expect(Array.from(out.y.data)).toEqual([3 * k + 1, -3 * k + 1]);
      }
    } finally {
      await session.close();
    }
    await expect(session.compute(gg, { x: new Float32Array(2) })).rejects.toMatchObject({ kind: 'Closed' });
  });
});

describe('errors arrive as TesseraError with the right kind', () => {
  it('a graph the core rejects (sent as a document, past the JS checks)', async () => {
    const doc: GraphDocument = {
      version: 1,
      tensors: [
        { name: 'a', type: 'F32', shape: [4, 3] },
        { name: 'b', type: 'F32', shape: [3, 3] },
      ],
      nodes: [{ name: 'c', op: 'MUL_MAT', src: ['a', 'b'] }],
      outputs: ['c'],
    };
    const e = (await compute(doc, { a: new Float32Array(12), b: new Float32Array(9) }).catch((x: unknown) => x)) as TesseraError;
    expect(e).toBeInstanceOf(ShapeError);
    expect(e.kind).toBe('ShapeMismatch');
    expect(e.message).toContain('MUL_MAT');
    expect(e.message).toContain('[4, 3, 1, 1]');
  });

  it('the same graph is refused in JS with the same kind', () => {
    const g = graph();
    const a = g.input('a', 'F32', [4, 3]);
    const b = g.input('b', 'F32', [3, 3]);
    expect(() => g.matmul(a, b)).toThrow(ShapeError);
  });

  it('unknown op, unknown type, unknown device', async () => {
    const bad = (op: string, type = 'F32'): GraphDocument =>
      ({
        version: 1,
        tensors: [{ name: 'a', type, shape: [2] }],
        nodes: [{ name: 'b', op, src: ['a'] }],
        outputs: ['b'],
      }) as unknown as GraphDocument;
    const e1 = (await compute(bad('FROBNICATE'), { a: new Float32Array(2) }).catch((x: unknown) => x)) as TesseraError;
    expect(e1.kind).toBe('UnknownOp');
    expect(e1.message).toContain('FROBNICATE');
    const e2 = (await native
      .call(JSON.stringify({ method: 'compute', graph: bad('RELU', 'F99'), inputs: [] }))
      .then((r) => JSON.parse(r))) as { error: { kind: string } };
    expect(e2.error.kind).toBe('UnknownType');
    const g = graph();
    g.output(g.input('x', 'F32', [1]));
    const e3 = (await compute(g, { x: new Float32Array(1) }, { device: 'NoSuchDevice' }).catch((x: unknown) => x)) as TesseraError;
    expect(e3).toBeInstanceOf(TesseraError);
    expect(e3.kind).toBe('UnknownDevice');
    expect(e3.message).toContain('NoSuchDevice');
  });

  it('malformed requests are InvalidArgument', async () => {
    const r = JSON.parse(await native.call('{"method":"nope"}'));
    expect(r.error.kind).toBe('InvalidArgument');
    const r2 = JSON.parse(await native.call('not json'));
    expect(r2.error.kind).toBe('InvalidArgument');
    // And through the API, wrong input lengths never reach the core
    const g = graph();
    g.output(g.input('x', 'F32', [2]));
    await expect(compute(g, { x: new Float32Array(3) })).rejects.toMatchObject({ kind: 'DataLength' });
    await expect(compute(g, { y: new Float32Array(2) })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('cancellation', () => {
  /** A long graph: 2000 chained 256 x 256 matmuls (67 GFLOP: seconds even in an optimized build). */
  function longGraph() {
    const g = graph();
    const n = 256;
    const w = g.constant('w', new Float32Array(n * n).fill(1 / n), { dtype: 'F32', shape: [n, n] });
    let y = g.input('x', 'F32', [n, n]);
    for (let k = 0; k < 2000; k++) y = g.matmul(w, y);
    return { g: g.output(g.sum(y), 'sum'), x: new Float32Array(n * n).fill(1) };
  }

  (sessions ? it : it.todo)('an AbortSignal cancels a long compute in the core', async () => {
    const { g, x } = longGraph();
    const ac = new AbortController();
    const from = native.log.length;
    const sentFrom = native.sent.length;
    const p = compute(g, { x }, { signal: ac.signal, device: 'CPU' });
    // Abort once the compute request has been handed to the core (the client repeats its
    // cancel until the core has registered the computation).
    const isCompute = (r: string) => r.startsWith('{"method":"compute","session"');
    for (let i = 0; i < 60_000 && !native.sent.slice(sentFrom).some(isCompute); i++) {
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(native.sent.slice(sentFrom).some(isCompute), 'the compute request was never sent').toBe(true);
    ac.abort();
    const e = (await p.catch((err: unknown) => err)) as TesseraError;
    expect(e).toBeInstanceOf(CancelledError);
    expect(e.kind).toBe('Cancelled');
    expect(e.name).toBe('AbortError');
    // The core saw the cancel: the compute request itself came back Cancelled.
    const deadline = Date.now() + 60_000;
    let entry: { request: string; response: string } | undefined;
    while (!entry && Date.now() < deadline) {
      entry = native.log.slice(from).find((l) => l.request.startsWith('{"method":"compute","session"'));
      if (!entry) await new Promise((r) => setTimeout(r, 20));
    }
    expect(entry, 'the compute request never returned').toBeDefined();
    expect(JSON.parse(entry!.response).error?.kind).toBe('Cancelled');
    expect(native.log.slice(from).some((l) => JSON.parse(l.request).method === 'cancel')).toBe(true);
  });
});
