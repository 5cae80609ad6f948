import { createRequire } from 'node:module';
import { afterAll, describe, expect, it } from 'vitest';
import * as tessera from '../../src/index';

const require = createRequire(import.meta.url);

describe('jest/mock.js', () => {
  // What jest.requireActual('react-native-tessera') returns in an app's Jest run.
  (globalThis as any).jest = { requireActual: (name: string) => (name === 'react-native-tessera' ? tessera : require(name)) };
  const mock = require('../../jest/mock.js');
  afterAll(() => {
    tessera.setNativeCaller(null);
    delete (globalThis as any).jest;
  });

  it('exports the whole API', () => {
    for (const key of Object.keys(tessera)) expect(mock).toHaveProperty(key);
  });

  it('gives deterministic devices, features and build info', async () => {
    expect(await mock.getDevices()).toEqual([
      {
        backend: 'CPU',
        name: 'CPU',
        description: 'Mock CPU',
        type: 'cpu',
        memoryFree: 4 * 2 ** 30,
        memoryTotal: 8 * 2 ** 30,
        caps: { asyncOps: false, hostBuffer: false, bufferFromHostPtr: true, events: false },
      },
    ]);
    const f = await mock.getCpuFeatures();
    expect([f.neon, f.dotprod, f.i8mm, f.sve, f.avx2]).toEqual([true, true, false, false, false]);
    expect(f.tierByType.Q4_0).toBe('neon+dotprod');
    expect((await mock.getBuildInfo()).target).toBe('mock');
  });

  it('computes zeros of the right types and shapes, and checks inputs for real', async () => {
    const g = mock.graph();
    const x = g.input('x', 'F32', [32, 3]);
    const w = g.constant('w', new Float32Array(64), { dtype: 'Q8_0', shape: [32, 2] });
    const y = g.matmul(w, x);
    g.output(g.softmax(y), 'p').output(g.argmax(y), 'best').output(g.cpy(y, g.input('h', 'F16', [6])), 'half');
    const out = await mock.compute(g, { x: new Float32Array(96), h: new Uint16Array(6) });
    expect(out.p.shape).toEqual([2, 3]);
    expect(Array.from(out.p.data)).toEqual([0, 0, 0, 0, 0, 0]);
    expect(out.best.data).toBeInstanceOf(Int32Array);
    expect(out.best.shape).toEqual([3]);
    expect(out.half.data).toBeInstanceOf(Uint16Array);
    await expect(mock.compute(g, { x: new Float32Array(1), h: new Uint16Array(6) })).rejects.toBeInstanceOf(tessera.DataLengthError);
    // Sessions and signals work
    const s = await mock.Session.open();
    expect((await s.compute(g, { x: new Float32Array(96), h: new Uint16Array(6) }, { signal: new AbortController().signal })).p.shape).toEqual([2, 3]);
    await s.close();
    expect(mock.__mock.requests.map((r: { method: string }) => r.method)).toContain('closeSession');
  });

  it('loads version-1 graphs (zeros), releases them; model files are not there', async () => {
    const g = mock.graph();
    g.output(g.scale(g.input('x', 'F32', [4, 2]), 2), 'y');
    const s = await mock.Session.open();
    const loaded = await s.load(g);
    for (let i = 0; i < 2; i++) {
      const out = await loaded.compute({ x: new Float32Array(8).fill(i + 1) });
      expect([out.y.shape, Array.from(out.y.data)]).toEqual([[4, 2], [0, 0, 0, 0, 0, 0, 0, 0]]);
    }
    await expect(loaded.compute({ x: new Float32Array(3) })).rejects.toBeInstanceOf(tessera.DataLengthError);
    await loaded.release();
    await expect(loaded.compute({ x: new Float32Array(8) })).rejects.toBeInstanceOf(tessera.ClosedError);
    // The mock's native side answers Closed for the released handle too.
    const raw = JSON.parse(
      await mock.__mock.caller.call(JSON.stringify({ method: 'computeLoaded', session: s.id, graph: loaded.handle, inputs: [] }))
    );
    expect(raw.error.kind).toBe('Closed');
    const v2 = { version: 2, files: [{ name: 'm', path: '/m.gguf' }], tensors: [{ name: 'w', file: 'm', tensor: 't' }], nodes: [], outputs: ['w'] };
    await expect(s.load(v2)).rejects.toMatchObject({ kind: 'Unsupported' });
    await expect(mock.ggufInfo('/m.gguf')).rejects.toBeInstanceOf(tessera.InvalidModelError);
    await s.close();
  });

  it('forwards log records emitted by the test', () => {
    const seen: unknown[] = [];
    const off = mock.addNativeLogListener((e: unknown) => seen.push(e));
    mock.__mock.emitLog({ level: 'info', target: 'mock', message: 'hi' });
    off();
    expect(seen).toEqual([{ level: 'info', target: 'mock', message: 'hi' }]);
  });
  it('mocks the language model deterministically: progress, tokenizer, template, a fixed streamed reply, stop, embeddings, release', async () => {
    mock.__mock.reset();
    const progress: number[] = [];
    const model = await mock.loadModel('file:///models/any.gguf', { nCtx: 512 }, (p: number) => progress.push(p));
    expect(progress).toEqual([0, 0.5, 1]);
    expect(model.info).toEqual(mock.__mock.modelInfo);
    expect([model.info.name, model.info.nEmbd, model.path]).toEqual(['Mock model', 8, '/models/any.gguf']);
    expect(await model.tokenize('Hi')).toEqual([1, 72, 105]);
    expect(await model.detokenize([1, 72, 105])).toBe('Hi');
    expect(await model.applyChatTemplate([{ role: 'user', content: 'Hi' }])).toBe('<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n');

    const c = model.complete([{ role: 'user', content: 'Hi' }], { temperature: 0 });
    const texts: string[] = [];
    for await (const e of c) texts.push(e.text);
    const r = await c.result;
    expect(texts).toEqual(['This', ' is', ' a', ' mock', ' reply', '.']);
    expect([r.text, r.tokens, r.stopReason]).toEqual(['This is a mock reply.', [100, 101, 102, 103, 104, 105], 'eog']);
    expect([r.timings.predicted_n, r.timings.predicted_ms, r.timings.predicted_per_second]).toEqual([6, 60, 100]);
    expect((await model.complete('x', { maxTokens: 2 }).result).text).toBe('This is');

    // An AbortSignal mid-stream stops it, as on a phone.
    const controller = new AbortController();
    const stopped = model.complete('x', { signal: controller.signal, onToken: (e: { token: number }) => e.token === 101 && controller.abort() });
    const s = await stopped.result;
    expect(s.stopReason).toBe('cancelled');
    expect(s.tokens.length).toBeLessThan(6);
    expect(s.tokens.slice(0, 2)).toEqual([100, 101]);

    mock.__mock.completionTokens.splice(0, 6, 'Bonjour', '!');
    expect((await model.complete('x').result).text).toBe('Bonjour!');

    const [a, b] = await model.embed(['a', 'b']);
    expect(a).toHaveLength(8);
    expect(Math.hypot(...a)).toBeCloseTo(1, 12);
    expect(a).not.toEqual(b);
    expect(await model.embed('a')).toEqual(a);
    const embedded: Array<[number, number]> = [];
    await model.embed(['a', 'b', 'c'], { onProgress: (done: number, total: number) => embedded.push([done, total]) });
    expect(embedded).toEqual([
      [1, 3],
      [2, 3],
      [3, 3],
    ]);

    await model.release();
    await expect(model.tokenize('x')).rejects.toBeInstanceOf(tessera.ClosedError);
    // The mock's own check too: a second handle on the released number.
    await expect(new tessera.LanguageModel(model.id, model.info, model.path).tokenize('x')).rejects.toBeInstanceOf(tessera.ClosedError);
    mock.__mock.reset();
    expect(mock.__mock.completionTokens).toEqual(['This', ' is', ' a', ' mock', ' reply', '.']);
  });

  it('mocks sequences: each keeps its own cache and cancel; unknown ones and a small budget reject', async () => {
    mock.__mock.reset();
    const model = await mock.loadModel('/m.gguf', { nSequences: 2 });
    expect([model.info.nSequences, model.info.cacheBytesPerSequence]).toEqual([2, 131072]);
    const first = await model.complete('Hello', { sequence: 0 }).result;
    const other = await model.complete('Bye', { sequence: 1 }).result;
    // Sequence 0 still holds "Hello" and its reply: only the new text is computed.
    const again = await model.complete('Hello' + first.text + ' more', { sequence: 0 }).result;
    expect([first.timings.cache_n, other.timings.cache_n, again.timings.cache_n]).toEqual([0, 0, 1 + 'Hello'.length + first.text.length]);
    expect(await model.saveSession('/one.session', { sequence: 1 })).toBe(1 + 'Bye'.length + other.text.length);
    expect(await model.loadSession('/one.session', { sequence: 0 })).toBe(1 + 'Bye'.length + other.text.length);
    await expect(model.complete('x', { sequence: 2 }).result).rejects.toThrow('sequence 2 does not exist: the model was loaded with nSequences 2');
    await expect(mock.loadModel('/m.gguf', { nSequences: 3, memoryBudget: 3 * 131072 - 1 })).rejects.toMatchObject({ kind: 'OutOfMemory' });
    await expect(mock.loadModel('/m.gguf', { nSequences: 0 })).rejects.toBeInstanceOf(tessera.InvalidArgumentError);
    await model.release();
  });
});

describe('app.plugin.js', () => {
  const plugin = require('../../app.plugin.js');

  it('loads with require and is a passthrough without @expo/config-plugins', () => {
    const config = { name: 'app', slug: 'app' };
    expect(typeof plugin).toBe('function');
    expect(plugin(config)).toBe(config);
  });

  it('with config plugins: runs once, sets the entitlement and the large heap, warns about legacy packaging', () => {
    // A stand-in of @expo/config-plugins that applies each mod at once (the real one runs in
    // scripts/pack-test.sh, tests/pack/expo-plugin.test.js).
    const warnings: string[] = [];
    const calls: string[] = [];
    const application = { $: { 'android:name': '.MainApplication' } as Record<string, string> };
    const fakePlugins = {
      withGradleProperties(config: any, action: (c: any) => any) {
        calls.push('withGradleProperties');
        return action(config);
      },
      withAndroidManifest(config: any, action: (c: any) => any) {
        calls.push('withAndroidManifest');
        action({ modResults: { manifest: { application: [application] } } });
        return config;
      },
      AndroidConfig: { Manifest: { getMainApplicationOrThrow: (m: any) => m.manifest.application[0] } },
      createRunOncePlugin(p: (c: unknown) => unknown, name: string, version: string) {
        calls.push(`runOnce ${name}@${version}`);
        return p;
      },
    };
    const p = plugin.createPlugin(fakePlugins, (m: string) => warnings.push(m));
    const modResults = [
      { type: 'property', key: 'expo.useLegacyPackaging', value: 'true' },
      { type: 'property', key: 'newArchEnabled', value: 'true' },
    ];
    const before = JSON.stringify(modResults);
    const out = p({ modResults });
    expect(JSON.stringify(out.modResults)).toBe(before);
    expect(out.ios.entitlements).toEqual({ 'com.apple.developer.kernel.increased-memory-limit': true });
    expect(application.$['android:largeHeap']).toBe('true');
    expect(calls).toEqual([
      `runOnce react-native-tessera@${require('../../package.json').version}`,
      'withAndroidManifest',
      'withGradleProperties',
    ]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/useLegacyPackaging=true/);
    p({ modResults: [{ type: 'property', key: 'expo.useLegacyPackaging', value: 'false' }] });
    expect(warnings).toHaveLength(1);
  });
});
