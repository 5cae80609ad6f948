/**
 * An app's Jest test with React Native's own preset (`preset: 'react-native'`), run by
 * scripts/pack-test.sh in a fresh app that installed the packed tarball: the mock replaces the
 * native side, and everything in JavaScript is the package's real code.
 */
jest.mock('react-native-tessera', () => require('react-native-tessera/jest/mock'));

import { Platform } from 'react-native';
import {
  DTypeError,
  DataLengthError,
  ClosedError,
  NativeLibraryError,
  Session,
  ShapeError,
  __mock,
  compute,
  getCpuFeatures,
  getDevices,
  graph,
  loadModel,
  setNativeCaller,
} from 'react-native-tessera';

afterEach(() => __mock.reset());

test('runs under the react-native preset (the real react-native, platform ios)', () => {
  expect(Platform.OS).toBe('ios');
});

test('the mock reports one CPU and an ARMv8.2 phone', async () => {
  const devices = await getDevices();
  expect(devices.map((d) => [d.name, d.type, d.description, d.memoryFree])).toEqual([['CPU', 'cpu', 'Mock CPU', 4 * 2 ** 30]]);
  const f = await getCpuFeatures();
  expect([f.neon, f.dotprod, f.i8mm]).toEqual([true, true, false]);
});

test('compute gives zeros of each output type and shape; the JS checks are real', async () => {
  const g = graph();
  const x = g.input('x', 'F32', [32, 3]);
  const w = g.constant('w', new Float32Array(64), { dtype: 'Q8_0', shape: [32, 2] });
  g.output(g.softmax(g.matmul(w, x)), 'p');
  const out = await compute(g, { x: new Float32Array(96) });
  expect(out.p.shape).toEqual([2, 3]);
  expect(out.p.data).toBeInstanceOf(Float32Array);
  expect(Array.from(out.p.data)).toEqual([0, 0, 0, 0, 0, 0]);
  await expect(compute(g, { x: new Float32Array(95) })).rejects.toBeInstanceOf(DataLengthError);
  expect(() => g.matmul(w, g.input('i', 'I32', [32]))).toThrow(DTypeError);
  expect(() => g.add(x, g.input('y', 'F32', [5]))).toThrow(ShapeError);
  expect(__mock.requests.map((r) => r.method)).toEqual(['compute']);
});

test('a session is released by release() and by Symbol.asyncDispose', async () => {
  const a = await Session.open();
  await a.release();
  expect(a.closed).toBe(true);
  const b = await Session.open();
  const key = typeof Symbol.asyncDispose === 'symbol' ? Symbol.asyncDispose : Symbol.for('Symbol.asyncDispose');
  await b[key]();
  expect(b.closed).toBe(true);
  expect(__mock.requests.map((r) => [r.method, r.session])).toEqual([
    ['openSession', undefined],
    ['closeSession', 1],
    ['openSession', undefined],
    ['closeSession', 2],
  ]);
});

test('native errors arrive as the classes the JS checks throw', async () => {
  const answer = (kind) => ({ call: async () => JSON.stringify({ error: { kind, message: `native ${kind}` } }) });
  setNativeCaller(answer('Unsupported'));
  const e1 = await getDevices().catch((e) => e);
  expect([e1 instanceof DTypeError, e1.kind, e1.message]).toEqual([true, 'Unsupported', 'native Unsupported']);
  setNativeCaller(answer('UnknownType'));
  const e2 = await getDevices().catch((e) => e);
  expect([e2 instanceof DTypeError, e2.kind]).toEqual([true, 'UnknownType']);
  setNativeCaller(answer('NativeLibrary'));
  const e3 = await getDevices().catch((e) => e);
  expect([e3 instanceof NativeLibraryError, e3.kind]).toEqual([true, 'NativeLibrary']);
});

test('a mock model streams its fixed reply with for await, and is released', async () => {
  const progress = [];
  const model = await loadModel('/models/any.gguf', {}, (p) => progress.push(p));
  expect(progress).toEqual([0, 0.5, 1]);
  const c = model.complete([{ role: 'user', content: 'Hi' }], { maxTokens: 4 });
  const texts = [];
  for await (const e of c) texts.push(e.text);
  expect(texts).toEqual(['This', ' is', ' a', ' mock']);
  expect((await c.result).stopReason).toBe('length');
  await model.release();
  await expect(model.embed('x')).rejects.toBeInstanceOf(ClosedError);
});

test('downloads in the mock: progress, the list, a cancel, delete', async () => {
  const { downloadModel, listModels, deleteModel, CancelledError } = require('react-native-tessera');
  const sha256 = 'ab'.repeat(32);
  const progress = [];
  const m = await downloadModel('https://example.com/models/m.gguf?download=1', { sha256, onProgress: (r, t) => progress.push([r, t]) });
  expect(m).toEqual({ name: 'm.gguf', path: '/mock/files/tessera/models/m.gguf', size: 250000000, sha256, url: 'https://example.com/models/m.gguf?download=1' });
  expect(progress).toEqual([[0, 250000000], [125000000, 250000000], [250000000, 250000000]]);
  expect(await listModels()).toEqual([m]);
  const controller = new AbortController();
  __mock.gate = () => new Promise((resolve) => setTimeout(resolve, 0));
  const cancelled = downloadModel('https://example.com/other.gguf', { sha256, signal: controller.signal, onProgress: () => controller.abort() });
  await expect(cancelled).rejects.toBeInstanceOf(CancelledError);
  expect((await listModels()).map((x) => x.name)).toEqual(['m.gguf']);
  expect(await deleteModel('m.gguf')).toBe(true);
  expect(await listModels()).toEqual([]);
});
