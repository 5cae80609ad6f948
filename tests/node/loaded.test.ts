/**
 * End to end: graphs loaded once and model files, over the real Rust core (the tessera-ffi
 * cdylib through its C ABI). A GGUF file written here byte by byte (so its tensors' values are
 * known) is named by a version-2 document, loaded once and computed several times with only the
 * inputs, against the same product computed here in f64; `ggufInfo` reads that file and the
 * seed rust/gguf/fuzz/seeds/gguf/valid-small.gguf (values as `tessera gguf FILE --json` prints
 * them, and as the file's bytes say).
 *
 * Run with `npm run test:e2e` after `cargo build -p tessera-ffi` (or set TESSERA_FFI_LIB).
 */

import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ClosedError,
  InvalidGraphError,
  InvalidModelError,
  Session,
  ShapeError,
  TesseraError,
  ggufInfo,
  setNativeCaller,
  type GraphDocumentV2,
} from '../../src/index';
import { koffiCaller, type KoffiCaller } from './koffi-caller';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const native: KoffiCaller = koffiCaller();
const dir = mkdtempSync(join(tmpdir(), 'tessera-loaded-'));

beforeAll(() => setNativeCaller(native));
afterAll(() => {
  setNativeCaller(null);
  rmSync(dir, { recursive: true, force: true });
});

// ------------------------------------------------------------------ a GGUF file, by hand

/** GGUF v3, little-endian: one UINT32 metadata entry, F32 tensors at 32-byte aligned offsets. */
function writeGguf(path: string, tensors: { name: string; shape: number[]; values: number[] }[]): { offsets: number[]; dataOffset: number } {
  const parts: Buffer[] = [];
  const u32 = (v: number): Buffer => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    return b;
  };
  const u64 = (v: number): Buffer => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    return b;
  };
  const str = (s: string): Buffer => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
  parts.push(Buffer.from('GGUF'), u32(3), u64(tensors.length), u64(1));
  parts.push(str('test.answer'), u32(4 /* UINT32 */), u32(42));
  const offsets: number[] = [];
  let offset = 0;
  for (const t of tensors) {
    offsets.push(offset);
    parts.push(str(t.name), u32(t.shape.length), ...t.shape.map(u64), u32(0 /* F32 */), u64(offset));
    offset += Math.ceil((4 * t.values.length) / 32) * 32;
  }
  const header = Buffer.concat(parts);
  const dataOffset = Math.ceil(header.length / 32) * 32;
  const data = Buffer.alloc(offset);
  tensors.forEach((t, i) => t.values.forEach((v, j) => data.writeFloatLE(v, offsets[i]! + 4 * j)));
  writeFileSync(path, Buffer.concat([header, Buffer.alloc(dataOffset - header.length), data]));
  return { offsets, dataOffset };
}

// W: 3 rows of 4 (shape [4, 3]), small integers, so that every product and sum is exact in f32.
const K = 4;
const M = 3;
const N = 2;
const W = Array.from({ length: K * M }, (_, i) => ((i * 7) % 11) - 5);
const B = [0.5, -1, 2];
const MODEL = join(dir, 'small.gguf');
const layout = writeGguf(MODEL, [
  { name: 'w.f32', shape: [K, M], values: W },
  { name: 'b.f32', shape: [M], values: B },
]);

const DOC: GraphDocumentV2 = {
  version: 2,
  files: [{ name: 'm', path: MODEL }],
  tensors: [
    { name: 'w', file: 'm', tensor: 'w.f32' },
    { name: 'b', file: 'm', tensor: 'b.f32', type: 'F32', shape: [M] },
    { name: 'x', type: 'F32', shape: [K, N] },
  ],
  nodes: [
    { name: 'y', op: 'MUL_MAT', src: ['w', 'x'] },
    { name: 'z', op: 'ADD', src: ['y', 'b'] },
  ],
  outputs: ['z'],
};

/** z[n][m] = sum_k W[m][k] x[n][k] + B[m], in f64. */
function expected(x: Float32Array): number[] {
  const out: number[] = [];
  for (let n = 0; n < N; n++) {
    for (let m = 0; m < M; m++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += W[m * K + k]! * x[n * K + k]!;
      out.push(s + B[m]!);
    }
  }
  return out;
}

describe('a graph loaded once', () => {
  it('computes many times with only its inputs, from the file tensors, exactly', async () => {
    const session = await Session.open({ device: 'CPU', threads: 1 });
    try {
      const loaded = await session.load(DOC);
      expect(loaded.inputs).toEqual([{ name: 'x', dtype: 'F32', shape: [K, N] }]);
      const inputsSeen: string[] = [];
      for (const seed of [1, 2, 3, 4]) {
        const x = Float32Array.from({ length: K * N }, (_, i) => ((i * seed * 5 + seed) % 9) - 4);
        const out = await loaded.compute({ x });
        expect(out.z!.dtype).toBe('F32');
        expect(out.z!.shape).toEqual([M, N]);
        expect(Array.from(out.z!.data)).toEqual(expected(x));
        inputsSeen.push(JSON.stringify(Array.from(x)));
      }
      expect(new Set(inputsSeen).size).toBe(4);
      // One loadGraph carried the document; each computeLoaded the handle and x only.
      const requests = native.log.map((l) => JSON.parse(l.request) as { method: string; [k: string]: unknown });
      expect(requests.filter((r) => r.method === 'loadGraph')).toHaveLength(1);
      const computes = requests.filter((r) => r.method === 'computeLoaded');
      expect(computes).toHaveLength(4);
      for (const r of computes) {
        expect(Object.keys(r).sort()).toEqual(['graph', 'inputs', 'method', 'session']);
        expect(r.graph).toBe(loaded.handle);
      }

      await loaded.release();
      await loaded.release();
      const err = await loaded.compute({ x: new Float32Array(K * N) }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ClosedError);
      // The core too answers Closed for the released handle.
      const raw = JSON.parse(
        await native.call(JSON.stringify({ method: 'computeLoaded', session: session.id, graph: loaded.handle, inputs: [] }))
      ) as { error?: { kind: string; message: string } };
      expect(raw.error?.kind).toBe('Closed');
      expect(raw.error?.message).toContain(`graph ${loaded.handle} was released`);
    } finally {
      await session.close();
    }
  });

  it('a document that misstates a file tensor, or names a missing file, is a typed error', async () => {
    const session = await Session.open({ device: 'CPU', threads: 1 });
    try {
      const wrongShape = structuredClone(DOC);
      wrongShape.tensors[1] = { name: 'b', file: 'm', tensor: 'b.f32', type: 'F32', shape: [M + 1] };
      const e1 = await session.load(wrongShape).catch((e: unknown) => e);
      expect(e1).toBeInstanceOf(ShapeError);
      // Names the document's statement and the file's tensor.
      expect((e1 as Error).message).toContain('the document states F32 [4]');
      expect((e1 as Error).message).toContain(`"b.f32" in ${MODEL} is F32 [3, 1, 1, 1]`);
      const missing = structuredClone(DOC);
      missing.files = [{ name: 'm', path: join(dir, 'absent.gguf') }];
      const e2 = await session.load(missing).catch((e: unknown) => e);
      // The core reports a document whose file cannot be opened as an invalid graph.
      expect(e2).toBeInstanceOf(InvalidGraphError);
      expect((e2 as Error).message).toContain(join(dir, 'absent.gguf'));
    } finally {
      await session.close();
    }
  });

  it('a memoryBudget smaller than the graph: loadGraph fails with OutOfMemory', async () => {
    const session = await Session.open({ device: 'CPU', threads: 1, memoryBudget: 16 });
    try {
      const err = await session.load(DOC).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TesseraError);
      expect((err as TesseraError).kind).toBe('OutOfMemory');
    } finally {
      await session.close();
    }
    // The same document within a budget of 1 MiB.
    const roomy = await Session.open({ device: 'CPU', threads: 1, memoryBudget: 1 << 20 });
    try {
      const x = Float32Array.from({ length: K * N }, (_, i) => 2 * i - 7);
      expect(Array.from((await (await roomy.load(DOC)).compute({ x })).z!.data)).toEqual(expected(x));
    } finally {
      await roomy.close();
    }
  });

  it('computes after the session closed reject with ClosedError', async () => {
    const session = await Session.open({ device: 'CPU', threads: 1 });
    const loaded = await session.load(JSON.stringify(DOC));
    const x = Float32Array.from({ length: K * N }, (_, i) => i);
    expect(Array.from((await loaded.compute({ x })).z!.data)).toEqual(expected(x));
    await session.close();
    await expect(loaded.compute({ x })).rejects.toBeInstanceOf(ClosedError);
    await loaded.release();
  });
});

describe('ggufInfo', () => {
  it('reads the file written here: header, metadata and tensor table', async () => {
    const info = await ggufInfo(MODEL);
    expect(info.version).toBe(3);
    expect(info.fileSize).toBe(statSync(MODEL).size);
    expect(info.alignment).toBe(32);
    expect(info.dataOffset).toBe(layout.dataOffset);
    expect(info.metadata).toEqual([{ key: 'test.answer', type: 'UINT32', value: 42 }]);
    expect(info.tensors).toEqual([
      { name: 'w.f32', type: 'F32', shape: [K, M], bytes: 4 * K * M, offset: layout.offsets[0] },
      { name: 'b.f32', type: 'F32', shape: [M], bytes: 4 * M, offset: layout.offsets[1] },
    ]);
  });

  it('reads the seed valid-small.gguf as `tessera gguf --json` does', async () => {
    const path = resolve(root, 'rust/gguf/fuzz/seeds/gguf/valid-small.gguf');
    const info = await ggufInfo(path, { arrayItems: 1 });
    expect([info.version, info.fileSize, info.alignment, info.dataOffset]).toEqual([3, 1184, 64, 704]);
    expect(info.metadata.map((e) => [e.key, e.type])).toEqual([
      ['general.architecture', 'STRING'],
      ['general.alignment', 'UINT32'],
      ['u8', 'UINT8'],
      ['i8', 'INT8'],
      ['u16', 'UINT16'],
      ['i16', 'INT16'],
      ['u32', 'UINT32'],
      ['i32', 'INT32'],
      ['f32', 'FLOAT32'],
      ['bool', 'BOOL'],
      ['u64', 'UINT64'],
      ['i64', 'INT64'],
      ['f64', 'FLOAT64'],
      ['tokens', 'ARRAY'],
      ['scores', 'ARRAY'],
      ['flags', 'ARRAY'],
      ['nested', 'ARRAY'],
      ['empty', 'ARRAY'],
    ]);
    const values = Object.fromEntries(info.metadata.slice(0, 13).map((e) => [e.key, e.value]));
    expect(values).toEqual({
      'general.architecture': 'test',
      'general.alignment': 64,
      u8: 200,
      i8: -100,
      u16: 60000,
      i16: -30000,
      u32: 4000000000,
      i32: -2000000000,
      f32: 0.25,
      bool: true,
      u64: 2 ** 60,
      i64: -(2 ** 60),
      f64: -1.5e300,
    });
    // Arrays cut to one item, with their full length.
    expect(info.metadata.slice(13)).toEqual([
      { key: 'tokens', type: 'ARRAY', elementType: 'STRING', length: 2, truncated: true, value: ['a'] },
      { key: 'scores', type: 'ARRAY', elementType: 'FLOAT32', length: 3, truncated: true, value: [1] },
      { key: 'flags', type: 'ARRAY', elementType: 'BOOL', length: 2, truncated: true, value: [false] },
      { key: 'nested', type: 'ARRAY', elementType: 'ARRAY', length: 2, truncated: true, value: [[1]] },
      { key: 'empty', type: 'ARRAY', elementType: 'UINT64', length: 0, truncated: false, value: [] },
    ]);
    expect((await ggufInfo(path)).get('nested')).toEqual([[1, 2], ['z']]);
    expect(info.tensors).toEqual([
      { name: 'a.f32', type: 'F32', shape: [4, 3], bytes: 48, offset: 0 },
      { name: 'b.q8_0', type: 'Q8_0', shape: [64], bytes: 68, offset: 64 },
      { name: 'c.q4_k', type: 'Q4_K', shape: [256, 2], bytes: 288, offset: 192 },
    ]);
    // The file's own bytes: magic, version 3, 3 tensors, 18 metadata entries.
    const bytes = readFileSync(path);
    expect(bytes.subarray(0, 4).toString('latin1')).toBe('GGUF');
    expect([bytes.readUInt32LE(4), Number(bytes.readBigUInt64LE(8)), Number(bytes.readBigUInt64LE(16))]).toEqual([3, 3, 18]);
  });

  it('a missing file and a file that is not GGUF are InvalidModelErrors naming the file', async () => {
    const absent = join(dir, 'absent.gguf');
    const e1 = await ggufInfo(absent).catch((e: unknown) => e);
    expect(e1).toBeInstanceOf(InvalidModelError);
    expect((e1 as TesseraError).kind).toBe('InvalidModel');
    expect((e1 as Error).message).toContain(absent);
    const notGguf = join(dir, 'not.gguf');
    writeFileSync(notGguf, 'GGML and then some more bytes, not a GGUF header at all');
    const e2 = await ggufInfo(notGguf).catch((e: unknown) => e);
    expect(e2).toBeInstanceOf(InvalidModelError);
    expect((e2 as Error).message).toContain(notGguf);
  });
});
