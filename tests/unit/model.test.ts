/**
 * The language-model API over a scripted native side: the requests it sends, how it routes
 * events by requestId, streams, stops, queues and releases. (The same API over the real core:
 * tests/node/model.test.ts.)
 */

import { afterEach, describe, expect, it } from 'vitest';
import {
  CancelledError,
  ChatSession,
  ClosedError,
  ContextFullError,
  InvalidArgumentError,
  InvalidModelError,
  LanguageModel,
  loadModel,
  releaseAllModels,
  setNativeCaller,
  type CompletionResult,
  type TokenEvent,
} from '../../src/index';
import { __emit, __setNativeModule } from './stubs/react-native';
import { deferred, fakeCaller, nativeError, type FakeCaller, type Request } from './fake';

const INFO = {
  architecture: 'gemma3',
  name: 'Gemma 3 270m',
  nParams: 268098176,
  sizeBytes: 246587904,
  quantization: 'Q4_K_M',
  nCtxTrain: 32768,
  nCtx: 512,
  nVocab: 262144,
  nEmbd: 640,
  nLayer: 18,
  device: 'CPU',
  hasChatTemplate: true,
  mappedBytes: 231750144,
  kvBytesPerToken: 18432,
};

function nativeResult(tokens: number[], text: string, stopReason = 'length'): object {
  return {
    text,
    tokens,
    promptTokens: 6,
    stopReason,
    timings: { promptN: 6, promptMs: 30, promptPerSecond: 200, predictedN: tokens.length, predictedMs: 40 * tokens.length, predictedPerSecond: 25, cachedN: 4 },
  };
}

interface Scripted {
  fake: FakeCaller;
  /** The generate requests received, each answered when its `done` resolves. */
  gens: { req: Request; done: ReturnType<typeof deferred<unknown>> }[];
  methods(): string[];
}

function scripted(extra: (req: Request) => unknown = () => undefined): Scripted {
  const gens: Scripted['gens'] = [];
  const fake = fakeCaller((req) => {
    const r = extra(req);
    if (r !== undefined) return r;
    switch (req.method) {
      case 'loadModel':
        return { model: 3, info: INFO };
      case 'generate': {
        const done = deferred<unknown>();
        gens.push({ req, done });
        return done.promise;
      }
      case 'cancelGeneration':
        return { cancelled: true };
      case 'releaseModel':
        return { released: true };
      default:
        return nativeError('InvalidArgument', `unscripted ${req.method}`);
    }
  });
  setNativeCaller(fake);
  return { fake, gens, methods: () => fake.requests.map((r) => r.method) };
}

/** Lets queued promise callbacks and zero-delay timers run: 50 turns of the event loop. */
async function settle(): Promise<void> {
  for (let i = 0; i < 50; i++) await new Promise((r) => setTimeout(r, 0));
}

/** Lets queued promise callbacks and timers run until `cond` holds. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 0));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function tokenEvent(requestId: string, token: number, text: string): object {
  return { type: 'token', requestId, token, text };
}

afterEach(() => setNativeCaller(null));

describe('loadModel', () => {
  it('sends the path (file:// URIs decoded), the options and a requestId, and routes only its progress events', async () => {
    const seen: number[] = [];
    const { fake } = scripted();
    const pending = loadModel('file:///data/user/0/app/files/My%20Model.gguf', { device: 'CPU', threads: 2, nCtx: 512, cacheTypeK: 'q8_0', cacheTypeV: 'q4_0' }, (p) => seen.push(p));
    await until(() => fake.requests.length === 1, 'the loadModel request');
    const req = fake.requests[0]!;
    expect(req).toEqual({
      method: 'loadModel',
      path: '/data/user/0/app/files/My Model.gguf',
      requestId: req.requestId,
      options: { device: 'CPU', threads: 2, nCtx: 512, cacheTypeK: 'q8_0', cacheTypeV: 'q4_0' },
    });
    expect(typeof req.requestId).toBe('string');
    fake.emitEvent({ type: 'loadProgress', requestId: req.requestId, progress: 0.25 });
    fake.emitEvent({ type: 'loadProgress', requestId: 'another-1', progress: 0.5 });
    fake.emitEvent({ type: 'token', requestId: req.requestId, token: 1, text: 'x' });
    fake.emitEvent({ type: 'loadProgress', requestId: req.requestId, progress: 1 });
    const model = await pending;
    expect(seen).toEqual([0.25, 1]);
    expect(model).toBeInstanceOf(LanguageModel);
    expect([model.id, model.path]).toEqual([3, '/data/user/0/app/files/My Model.gguf']);
    expect(model.info).toEqual(INFO);
    expect(Object.isFrozen(model.info)).toBe(true);
    // Events of a finished request go nowhere.
    fake.emitEvent({ type: 'loadProgress', requestId: req.requestId, progress: 0.5 });
    expect(seen).toEqual([0.25, 1]);
  });

  it('refuses llama.rn option names with the name to use, URIs that are not files, and bad callbacks', async () => {
    const { fake } = scripted();
    const e = await loadModel('/m.gguf', { n_ctx: 2048 } as never).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect((e as Error).message).toBe('loadModel: unknown option "n_ctx" (llama.rn\'s name; here: nCtx)');
    const t = await loadModel('/m.gguf', { cache_type_k: 'q8_0' } as never).catch((x: unknown) => x);
    expect((t as Error).message).toBe('loadModel: unknown option "cache_type_k" (llama.rn\'s name; here: cacheTypeK)');
    await expect(loadModel('/m.gguf', { gpu: true } as never)).rejects.toThrow('loadModel: unknown option "gpu"; known: device, threads, nCtx, nBatch, nSequences, memoryBudget, cacheTypeK, cacheTypeV, signal');
    await expect(loadModel('content://com.android.providers/document/12')).rejects.toThrow(
      /is not a file path \(content:\/\/ URIs are Android's\); copy the file into the app's storage first/
    );
    await expect(loadModel('https://example.com/m.gguf')).rejects.toThrow(/is not a file path; copy the file/);
    await expect(loadModel('', {})).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(loadModel('/m.gguf', {}, 5 as never)).rejects.toThrow('loadModel: onProgress must be a function, got number');
    expect(fake.requests).toEqual([]);
  });

  it('an AbortSignal rejects the load at once with a CancelledError, sends cancelLoad, and releases a model that arrives anyway', async () => {
    const answers: Array<() => void> = [];
    const { fake } = scripted((req) => {
      if (req.method === 'loadModel') return new Promise((resolve) => answers.push(() => resolve({ model: 7, info: INFO })));
      if (req.method === 'cancelLoad') return { cancelled: true };
      return undefined;
    });
    const controller = new AbortController();
    const pending = loadModel('/m.gguf', { nCtx: 256, signal: controller.signal });
    await until(() => fake.requests.length === 1, 'the loadModel request');
    const load = fake.requests[0]!;
    expect(load.options).toEqual({ nCtx: 256 });
    controller.abort();
    const e = await pending.catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CancelledError);
    expect((e as CancelledError).kind).toBe('Cancelled');
    expect(fake.requests.map((r) => [r.method, r.requestId])).toEqual([
      ['loadModel', load.requestId],
      ['cancelLoad', load.requestId],
    ]);
    answers[0]!();
    await until(() => fake.requests.length === 3, 'the release');
    expect(fake.requests[2]).toEqual({ method: 'releaseModel', model: 7 });
    // A signal aborted before the call sends nothing.
    await expect(loadModel('/m.gguf', { signal: controller.signal })).rejects.toBeInstanceOf(CancelledError);
    await expect(loadModel('/m.gguf', { signal: {} as never })).rejects.toThrow('loadModel: signal must be an AbortSignal, got object');
    expect(fake.requests).toHaveLength(3);
  });

  it('releaseAllModels releases the models not yet released, once each', async () => {
    let next = 10;
    const { fake } = scripted((req) => (req.method === 'loadModel' ? { model: next++, info: INFO } : undefined));
    await releaseAllModels(); // the models of earlier tests
    fake.requests.length = 0;
    const a = await loadModel('/a.gguf');
    const b = await loadModel('/b.gguf');
    await a.release();
    expect(await releaseAllModels()).toBe(1);
    expect(await releaseAllModels()).toBe(0);
    expect(b.isReleased).toBe(true);
    expect(fake.requests.filter((r) => r.method === 'releaseModel').map((r) => r.model)).toEqual([10, 11]);
  });

  it('on Android a content:// URI goes to the module as it is; a copy is the first half of the progress', async () => {
    const { Platform } = await import('./stubs/react-native');
    const was = Platform.OS;
    Platform.OS = 'android';
    try {
      const seen: number[] = [];
      const { fake } = scripted();
      const uri = 'content://com.android.externalstorage.documents/document/primary%3ADownload%2Fm.gguf';
      const pending = loadModel(uri, {}, (p) => seen.push(p));
      await until(() => fake.requests.length === 1, 'the loadModel request');
      const req = fake.requests[0]!;
      expect(req.path).toBe(uri);
      fake.emitEvent({ type: 'copyProgress', requestId: req.requestId, received: 50, total: 100 });
      fake.emitEvent({ type: 'copyProgress', requestId: req.requestId, received: 100, total: 100 });
      fake.emitEvent({ type: 'loadProgress', requestId: req.requestId, progress: 0.5 });
      fake.emitEvent({ type: 'loadProgress', requestId: req.requestId, progress: 1 });
      expect((await pending).path).toBe(uri);
      expect(seen).toEqual([0.25, 0.5, 0.75, 1]);
    } finally {
      Platform.OS = was;
    }
  });

  it('rejects with the class of the native kind', async () => {
    scripted(() => nativeError('InvalidModel', '/nope.gguf: No such file or directory'));
    const e = await loadModel('/nope.gguf').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(InvalidModelError);
    expect([(e as InvalidModelError).kind, (e as Error).message]).toEqual(['InvalidModel', '/nope.gguf: No such file or directory']);
  });
});

describe('LanguageModel', () => {
  async function loaded(extra?: (req: Request) => unknown): Promise<Scripted & { model: LanguageModel }> {
    const s = scripted(extra);
    const model = await loadModel('/m.gguf');
    s.fake.requests.length = 0;
    return { ...s, model };
  }

  it('tokenize, detokenize, applyChatTemplate and embed send their params and unwrap the results', async () => {
    const { fake, model } = await loaded((req) => {
      switch (req.method) {
        case 'tokenize':
          return { tokens: [2, 818] };
        case 'detokenize':
          return { text: 'The' };
        case 'applyChatTemplate':
          return { prompt: '<bos>...' };
        case 'embed':
          return { embeddings: (req.params as { texts: string[] }).texts.map((_, i) => [i, 1]) };
        default:
          return undefined;
      }
    });
    expect(await model.tokenize('The', { addSpecial: false })).toEqual([2, 818]);
    expect(await model.detokenize([818], { special: true })).toBe('The');
    expect(await model.applyChatTemplate([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: false })).toBe('<bos>...');
    expect(await model.embed('a')).toEqual([0, 1]);
    expect(await model.embed(['a', 'b'], { pooling: 'mean' })).toEqual([
      [0, 1],
      [1, 1],
    ]);
    expect(fake.requests).toEqual([
      { method: 'tokenize', model: 3, params: { text: 'The', addSpecial: false } },
      { method: 'detokenize', model: 3, params: { tokens: [818], special: true } },
      { method: 'applyChatTemplate', model: 3, params: { messages: [{ role: 'user', content: 'Hi' }], addGenerationPrompt: false } },
      { method: 'embed', model: 3, requestId: expect.any(String), params: { texts: ['a'] } },
      { method: 'embed', model: 3, requestId: expect.any(String), params: { texts: ['a', 'b'], pooling: 'mean' } },
    ]);
    await expect(model.applyChatTemplate([{ role: 'user' }] as never)).rejects.toThrow('applyChatTemplate: message 0 must be { role: string, content: string }, got object');
    await expect(model.tokenize(5 as never)).rejects.toThrow('tokenize: text must be a string, got number');
  });

  it('complete streams the token events of its request to the iterator and onToken, and maps the result', async () => {
    const { fake, gens, model } = await loaded();
    const viaCallback: TokenEvent[] = [];
    const c = model.complete('The capital of France is', { maxTokens: 3, temperature: 0, stop: ['\n'], onToken: (e) => viaCallback.push(e) });
    await until(() => gens.length === 1, 'the generate request');
    const req = gens[0]!.req;
    expect(req).toEqual({
      method: 'generate',
      model: 3,
      requestId: c.requestId,
      params: { prompt: 'The capital of France is', maxTokens: 3, temperature: 0, stop: ['\n'] },
    });
    const streamed: TokenEvent[] = [];
    const consumer = (async () => {
      for await (const e of c) streamed.push(e);
    })();
    fake.emitEvent(tokenEvent(c.requestId, 506, ' the'));
    fake.emitEvent(tokenEvent('someone-else', 1, 'x'));
    fake.emitEvent(tokenEvent(c.requestId, 5279, ' capital'));
    fake.emitEvent(tokenEvent(c.requestId, 529, ' of'));
    gens[0]!.done.resolve(nativeResult([506, 5279, 529], ' the capital of'));
    const r = await c.result;
    await consumer;
    const expected = [
      { token: 506, text: ' the', chunks: [] },
      { token: 5279, text: ' capital', chunks: [] },
      { token: 529, text: ' of', chunks: [] },
    ];
    expect(streamed).toEqual(expected);
    expect(viaCallback).toEqual(expected);
    expect(r).toEqual({
      text: ' the capital of',
      content: ' the capital of',
      reasoning: '',
      toolCalls: [],
      tokens: [506, 5279, 529],
      promptTokens: 6,
      stopReason: 'length',
      timings: {
        prompt_n: 6,
        prompt_ms: 30,
        prompt_per_token_ms: 5,
        prompt_per_second: 200,
        predicted_n: 3,
        predicted_ms: 120,
        predicted_per_token_ms: 40,
        predicted_per_second: 25,
        cache_n: 4,
        cached_n: 4,
        constraint_ms: 0,
      },
    } satisfies CompletionResult);
    // A second iteration replays the events.
    const again: TokenEvent[] = [];
    for await (const e of c) again.push(e);
    expect(again).toEqual(expected);
  });

  it('makes up the token events still on their way when the result arrives first', async () => {
    const { fake, gens, model } = await loaded();
    const c = model.complete('x', { maxTokens: 3 });
    await until(() => gens.length === 1, 'the generate request');
    fake.emitEvent(tokenEvent(c.requestId, 10, 'Hel'));
    gens[0]!.done.resolve(nativeResult([10, 11, 12], 'Hello world'));
    await c.result;
    fake.emitEvent(tokenEvent(c.requestId, 11, 'lo')); // late: dropped
    const streamed: TokenEvent[] = [];
    for await (const e of c) streamed.push(e);
    expect(streamed).toEqual([
      { token: 10, text: 'Hel', chunks: [] },
      { token: 11, text: '', chunks: [] },
      { token: 12, text: 'lo world', chunks: [] },
    ]);
  });

  it('messages are sent as messages; llama.rn names and bad inputs reject the result without a request', async () => {
    const { gens, fake, model } = await loaded();
    const chat = model.complete([{ role: 'user', content: 'Hi' }], { seed: 7, logitBias: [[5, false], [6, -1.5]] });
    await until(() => gens.length === 1, 'the generate request');
    expect(gens[0]!.req.params).toEqual({ messages: [{ role: 'user', content: 'Hi' }], seed: 7, logitBias: [[5, false], [6, -1.5]] });
    gens[0]!.done.resolve(nativeResult([1], '!', 'eog'));
    expect((await chat.result).stopReason).toBe('eog');
    fake.requests.length = 0;
    const bad = model.complete('x', { n_predict: 5 } as never);
    await expect(bad.result).rejects.toThrow('complete: unknown option "n_predict" (llama.rn\'s name; here: maxTokens)');
    const it = bad[Symbol.asyncIterator]();
    await expect(it.next()).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(model.complete(42 as never).result).rejects.toThrow('complete: expected a prompt string or an array of messages, got number');
    await expect(model.complete([]).result).rejects.toThrow('complete: messages must be a non-empty array of { role, content }');
    expect(fake.requests).toEqual([]);
  });

  it('native errors reject the result and end the iteration with the typed error', async () => {
    const { model, methods } = await loaded((req) =>
      req.method === 'generate' ? nativeError('ContextFull', 'the prompt needs 600 positions, the context holds 512') : undefined
    );
    const c = model.complete('long');
    await expect(c.result).rejects.toBeInstanceOf(ContextFullError);
    await expect(
      (async () => {
        for await (const _ of c) {
          // no tokens
        }
      })()
    ).rejects.toThrow('the prompt needs 600 positions, the context holds 512');
    expect(methods()).toEqual(['generate']);
  });

  it('an AbortSignal sends cancelGeneration at once and again on each later token until the generation ends; the result resolves "cancelled"', async () => {
    const { fake, gens, model, methods } = await loaded();
    const controller = new AbortController();
    const c = model.complete('x', { signal: controller.signal });
    await until(() => gens.length === 1, 'the generate request');
    fake.emitEvent(tokenEvent(c.requestId, 1, 'a'));
    expect(methods()).toEqual(['generate']);
    controller.abort();
    await until(() => methods().length === 2, 'cancelGeneration');
    expect(fake.requests[1]).toEqual({ method: 'cancelGeneration', model: 3, params: { sequence: 0 } });
    await new Promise((r) => setTimeout(r, 0));
    // The core had not seen it (it started late): the next token sends it again.
    fake.emitEvent(tokenEvent(c.requestId, 2, 'b'));
    await until(() => methods().length === 3, 'the second cancelGeneration');
    gens[0]!.done.resolve(nativeResult([1, 2], 'ab', 'cancelled'));
    const r = await c.result;
    expect([r.stopReason, r.text]).toEqual(['cancelled', 'ab']);
    expect(methods()).toEqual(['generate', 'cancelGeneration', 'cancelGeneration']);
  });

  it('an already-aborted signal sends nothing and resolves "cancelled" with no text', async () => {
    const { model, methods } = await loaded();
    const c = model.complete('x', { signal: AbortSignal.abort() });
    const r = await c.result;
    expect([r.stopReason, r.text, r.tokens, r.timings.predicted_n]).toEqual(['cancelled', '', [], 0]);
    expect(methods()).toEqual([]);
  });

  it('completions of one model run one at a time; stopping a queued one sends nothing', async () => {
    const { gens, model, methods } = await loaded();
    const first = model.complete('one');
    const second = model.complete('two');
    const third = model.complete('three');
    await until(() => gens.length === 1, 'the first generate');
    // Every callback the three calls queued has run (the fake answers within the event loop's
    // turns), and still only the first generate was sent.
    await settle();
    expect(gens.length).toBe(1);
    second.stop();
    gens[0]!.done.resolve(nativeResult([1], 'a'));
    expect((await first.result).stopReason).toBe('length');
    expect((await second.result).stopReason).toBe('cancelled');
    await until(() => gens.length === 2, 'the third generate');
    expect(gens[1]!.req.params).toEqual({ prompt: 'three' });
    gens[1]!.done.resolve(nativeResult([2], 'b'));
    expect((await third.result).text).toBe('b');
    expect(methods()).toEqual(['generate', 'generate']);
  });

  it('sequences: each runs its completions in order, different ones at once; stop cancels only its own; session calls name theirs', async () => {
    const { gens, model, fake, methods } = await loaded((req) => (req.method === 'saveSession' || req.method === 'loadSession' ? { tokens: 7 } : undefined));
    const a0 = model.complete('a', { sequence: 0 });
    const b1 = model.complete('b', { sequence: 1 });
    const c0 = model.complete('c');
    await until(() => gens.length === 2, 'the generates of sequences 0 and 1');
    await settle();
    // Sequence 0's second completion waits for its first; sequence 1's did not wait.
    expect(gens.map((g) => g.req.params)).toEqual([{ prompt: 'a', sequence: 0 }, { prompt: 'b', sequence: 1 }]);
    b1.stop();
    await until(() => methods().includes('cancelGeneration'), 'cancelGeneration');
    expect(fake.requests.find((r) => r.method === 'cancelGeneration')).toEqual({ method: 'cancelGeneration', model: 3, params: { sequence: 1 } });
    gens[1]!.done.resolve(nativeResult([9], '', 'cancelled'));
    expect((await b1.result).stopReason).toBe('cancelled');
    expect(gens.length).toBe(2);
    gens[0]!.done.resolve(nativeResult([1], 'x'));
    expect((await a0.result).text).toBe('x');
    await until(() => gens.length === 3, 'the queued completion of sequence 0');
    expect(gens[2]!.req.params).toEqual({ prompt: 'c' });
    gens[2]!.done.resolve(nativeResult([2], 'y'));
    expect((await c0.result).text).toBe('y');

    expect(await model.saveSession('/s.session', { sequence: 1 })).toBe(7);
    expect(await model.loadSession('/s.session', { sequence: 2 })).toBe(7);
    expect(await model.saveSession('/t.session')).toBe(7);
    expect(fake.requests.filter((r) => r.method.endsWith('Session')).map((r) => r.params)).toEqual([
      { path: '/s.session', sequence: 1 },
      { path: '/s.session', sequence: 2 },
      { path: '/t.session' },
    ]);
    // Bad sequences reject without a request.
    const before = fake.requests.length;
    for (const sequence of [-1, 1.5, '1', null]) {
      await expect(model.complete('x', { sequence } as never).result).rejects.toThrow(`complete: sequence must be a whole number from 0, got`);
    }
    await expect(model.saveSession('/s', { sequence: -2 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(model.loadSession('/s', { seq: 1 } as never)).rejects.toThrow('loadSession: unknown option "seq"; known: sequence');
    await expect(model.complete('x', { id_slot: 1 } as never).result).rejects.toThrow('(llama.rn\'s name; here: sequence)');
    expect(fake.requests.length).toBe(before);
  });

  it('loadModel sends nSequences and memoryBudget; the info states the cache per sequence', async () => {
    const info = { ...INFO, nSequences: 4, cacheBytesPerSequence: 9437184 };
    const { fake } = scripted((req) => (req.method === 'loadModel' ? { model: 5, info } : undefined));
    const model = await loadModel('/m.gguf', { nSequences: 4, memoryBudget: 64 << 20 });
    expect(fake.requests[0]!.options).toEqual({ nSequences: 4, memoryBudget: 64 << 20 });
    expect([model.info.nSequences, model.info.cacheBytesPerSequence]).toEqual([4, 9437184]);
    await expect(loadModel('/m.gguf', { n_parallel: 2 } as never)).rejects.toThrow('(llama.rn\'s name; here: nSequences)');
  });

  it('leaving a for-await loop early stops the generation', async () => {
    const { fake, gens, model, methods } = await loaded();
    const c = model.complete('x');
    await until(() => gens.length === 1, 'the generate request');
    const loop = (async () => {
      for await (const e of c) if (e.token === 2) break;
    })();
    fake.emitEvent(tokenEvent(c.requestId, 1, 'a'));
    fake.emitEvent(tokenEvent(c.requestId, 2, 'b'));
    await loop;
    await until(() => methods().includes('cancelGeneration'), 'cancelGeneration');
    gens[0]!.done.resolve(nativeResult([1, 2], 'ab', 'cancelled'));
    expect((await c.result).stopReason).toBe('cancelled');
  });

  it('an exception of onToken stops the generation and rejects the result with it', async () => {
    const { fake, gens, model, methods } = await loaded();
    const boom = new Error('boom');
    const c = model.complete('x', {
      onToken: () => {
        throw boom;
      },
    });
    await until(() => gens.length === 1, 'the generate request');
    fake.emitEvent(tokenEvent(c.requestId, 1, 'a'));
    await until(() => methods().includes('cancelGeneration'), 'cancelGeneration');
    gens[0]!.done.resolve(nativeResult([1], 'a', 'cancelled'));
    await expect(c.result).rejects.toBe(boom);
  });

  it('release cancels the running and queued completions, and later calls reject with ClosedError without a request', async () => {
    const { gens, model, methods } = await loaded();
    const running = model.complete('one');
    const queued = model.complete('two');
    await until(() => gens.length === 1, 'the generate request');
    const released = model.release();
    expect(model.isReleased).toBe(true);
    await until(() => methods().includes('releaseModel'), 'releaseModel');
    gens[0]!.done.resolve(nativeResult([1], 'a', 'cancelled'));
    await released;
    expect((await running.result).stopReason).toBe('cancelled');
    expect((await queued.result).stopReason).toBe('cancelled');
    expect(methods()).toEqual(['generate', 'cancelGeneration', 'releaseModel']);
    for (const p of [model.tokenize('a'), model.detokenize([1]), model.applyChatTemplate([{ role: 'user', content: 'a' }]), model.embed('a'), model.complete('a').result]) {
      const e = await p.catch((x: unknown) => x);
      expect(e).toBeInstanceOf(ClosedError);
      expect([(e as ClosedError).kind, (e as Error).message]).toEqual(['Closed', 'model 3 is released']);
    }
    await model.release(); // twice is fine
    expect(methods()).toEqual(['generate', 'cancelGeneration', 'releaseModel']);
  });

  it('await using releases the model', async () => {
    const { methods } = await loaded();
    {
      await using m = await loadModel('/m.gguf');
      expect(m.isReleased).toBe(false);
    }
    expect(methods()).toEqual(['loadModel', 'releaseModel']);
  });

  it('without an event subscription on the caller, the tokens arrive with the result', async () => {
    const gens: { done: ReturnType<typeof deferred<unknown>> }[] = [];
    const fake = fakeCaller((req) => {
      if (req.method === 'loadModel') return { model: 1, info: INFO };
      const done = deferred<unknown>();
      gens.push({ done });
      return done.promise;
    });
    setNativeCaller({ call: (json) => fake.call(json) });
    const model = await loadModel('/m.gguf');
    const c = model.complete('x');
    await until(() => gens.length === 1, 'the generate request');
    gens[0]!.done.resolve(nativeResult([7, 8], 'hi there'));
    const streamed: TokenEvent[] = [];
    for await (const e of c) streamed.push(e);
    expect(streamed).toEqual([
      { token: 7, text: '', chunks: [] },
      { token: 8, text: 'hi there', chunks: [] },
    ]);
  });
});

describe('the TurboModule', () => {
  it('delivers TesseraEvent { json } events to the requests they name', async () => {
    const pending = deferred<string>();
    const respond = deferred<void>();
    const subscriptions: string[] = [];
    __setNativeModule('Tessera', {
      call: async (json: string) => {
        const req = JSON.parse(json);
        if (req.method === 'loadModel') {
          pending.resolve(req.requestId);
          // The response comes after the events, as the core sends them.
          await respond.promise;
          return JSON.stringify({ ok: { model: 9, info: INFO } });
        }
        return JSON.stringify({ ok: {} });
      },
      toggleNativeLog: () => undefined,
      addListener: (name: string) => subscriptions.push(name),
      removeListeners: () => undefined,
    });
    try {
      const seen: number[] = [];
      const load = loadModel('/m.gguf', {}, (p) => seen.push(p));
      const requestId = await pending.promise;
      __emit('TesseraEvent', { json: JSON.stringify({ type: 'loadProgress', requestId, progress: 0.5 }) });
      __emit('TesseraEvent', { json: '{not json' });
      __emit('TesseraEvent', { other: 1 });
      __emit('TesseraEvent', { json: JSON.stringify({ type: 'loadProgress', requestId, progress: 1 }) });
      respond.resolve();
      expect((await load).id).toBe(9);
      expect(seen).toEqual([0.5, 1]);
      expect(subscriptions).toEqual(['TesseraEvent']);
    } finally {
      __setNativeModule('Tessera', undefined);
    }
  });
});

describe('structured output, tools, reasoning, probabilities, rerank', () => {
  async function loadedModel(extra?: (req: Request) => unknown): Promise<Scripted & { model: LanguageModel }> {
    const s = scripted(extra);
    const model = await loadModel('/m.gguf');
    s.fake.requests.length = 0;
    return { ...s, model };
  }

  it('sends the options as the protocol params, types the streamed chunks and maps the parsed result', async () => {
    const { fake, gens, model } = await loadedModel();
    const tools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object' } } }];
    const messages = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: null, toolCalls: [{ id: 'c1', name: 'f', arguments: { x: 1 } }] },
      { role: 'tool', content: '2', toolCallId: 'c1', name: 'f' },
    ];
    const c = model.complete(messages, {
      tools,
      toolChoice: 'required',
      enableThinking: false,
      reasoningFormat: 'auto',
      thinkingBudget: 16,
      chatTemplateKwargs: { flag: true },
      chatTemplate: '{{ messages }}',
      nProbs: 2,
    });
    await until(() => gens.length === 1, 'the generate request');
    expect(gens[0]!.req.params).toEqual({
      messages,
      tools,
      toolChoice: 'required',
      enableThinking: false,
      reasoningFormat: 'auto',
      thinkingBudget: 16,
      chatTemplateKwargs: { flag: true },
      chatTemplate: '{{ messages }}',
      nProbs: 2,
    });
    const probs = [{ token: 5, text: 'a', prob: 0.75 }, { token: 6, text: 'b', prob: 0.25 }];
    fake.emitEvent({ type: 'token', requestId: c.requestId, token: 5, text: '<think>a', chunks: [], probs });
    fake.emitEvent({
      type: 'token',
      requestId: c.requestId,
      token: 7,
      text: '</think>{"name":"f","arguments":{"x":',
      chunks: [
        { kind: 'reasoning', delta: 'a' },
        { kind: 'toolCallName', index: 0, delta: 'f' },
        { kind: 'toolCallArguments', index: 0, delta: '{"x":' },
      ],
      probs,
    });
    fake.emitEvent({ type: 'token', requestId: c.requestId, token: 8, text: '2}}', chunks: [{ kind: 'toolCallArguments', index: 0, delta: '2}' }, { kind: 'text', delta: 'ok' }] });
    const result = {
      ...(nativeResult([5, 7, 8], '<think>a</think>{"name":"f","arguments":{"x":2}}', 'eog') as Record<string, unknown>),
      content: 'ok',
      reasoning: 'a',
      toolCalls: [{ id: 'call_1', name: 'f', arguments: { x: 2 } }],
      probs: [{ token: 5, text: 'a', probs }],
    };
    gens[0]!.done.resolve(result);
    const r = await c.result;
    expect([r.content, r.reasoning, r.toolCalls, r.probs]).toEqual(['ok', 'a', [{ id: 'call_1', name: 'f', arguments: { x: 2 } }], [{ token: 5, text: 'a', probs }]]);
    const chunks = [];
    for await (const ch of c.chunks()) chunks.push(ch);
    expect(chunks).toEqual([
      { type: 'reasoning', text: 'a' },
      { type: 'toolCallName', index: 0, name: 'f' },
      { type: 'toolCallArguments', index: 0, text: '{"x":' },
      { type: 'toolCallArguments', index: 0, text: '2}' },
      { type: 'text', text: 'ok' },
    ]);
    const events: TokenEvent[] = [];
    for await (const e of c) events.push(e);
    expect(events.map((e) => e.probs)).toEqual([probs, probs, undefined]);
  });

  it('responseFormat, grammar and regex go through; llama.rn names are pointed to', async () => {
    const { gens, model } = await loadedModel();
    const c = model.complete('x', { responseFormat: { type: 'json_schema', schema: { type: 'object' } }, grammar: 'root ::= "a"', regex: 'a+' });
    await until(() => gens.length === 1, 'the generate request');
    expect(gens[0]!.req.params).toEqual({ prompt: 'x', responseFormat: { type: 'json_schema', schema: { type: 'object' } }, grammar: 'root ::= "a"', regex: 'a+' });
    gens[0]!.done.resolve(nativeResult([1], 'a', 'eog'));
    await c.result;
    const shifted = model.complete('x', { contextShift: true, nKeep: -1 });
    await until(() => gens.length === 2, 'the generate request with contextShift');
    expect(gens[1]!.req.params).toEqual({ prompt: 'x', contextShift: true, nKeep: -1 });
    gens[1]!.done.resolve(nativeResult([1], 'a', 'length'));
    await shifted.result;
    for (const [name, ours] of [['n_keep', 'nKeep'], ['ctx_shift', 'contextShift'], ['response_format', 'responseFormat'], ['json_schema', 'responseFormat'], ['n_probs', 'nProbs'], ['tool_choice', 'toolChoice'], ['enable_thinking', 'enableThinking'], ['chat_template_kwargs', 'chatTemplateKwargs']]) {
      await expect(model.complete('x', { [name!]: 1 } as never).result).rejects.toThrow(`complete: unknown option "${name}" (llama.rn's name; here: ${ours})`);
    }
    await expect(model.complete([{ role: 'assistant', content: null }] as never).result).rejects.toThrow('complete: message 0 must be { role: string, content: string }');
  });

  it('ChatSession stores a reply with tool calls as such and sends the tool result back with the history', async () => {
    const { gens, model } = await loadedModel();
    const tools = [{ type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object' } } }];
    const chat = new ChatSession(model, { completion: { tools } });
    const first = chat.send('What time is it?');
    await until(() => gens.length === 1, 'the first generate');
    expect(gens[0]!.req.params).toEqual({ messages: [{ role: 'user', content: 'What time is it?' }], tools });
    const call = { id: 'call_0', name: 'get_time', arguments: { zone: 'UTC' } };
    gens[0]!.done.resolve({ ...(nativeResult([1], '{"tool_call": {...}}', 'eog') as Record<string, unknown>), content: '', reasoning: '', toolCalls: [call], probs: [] });
    expect((await first.result).toolCalls).toEqual([call]);
    expect(chat.messages.at(-1)).toEqual({ role: 'assistant', content: '', toolCalls: [call] });
    const second = chat.send({ role: 'tool', toolCallId: 'call_0', name: 'get_time', content: '12:00' });
    await until(() => gens.length === 2, 'the second generate');
    expect(gens[1]!.req.params).toEqual({
      messages: [
        { role: 'user', content: 'What time is it?' },
        { role: 'assistant', content: '', toolCalls: [call] },
        { role: 'tool', toolCallId: 'call_0', name: 'get_time', content: '12:00' },
      ],
      tools,
    });
    gens[1]!.done.resolve(nativeResult([2], 'It is noon.', 'eog'));
    expect((await second.result).content).toBe('It is noon.');
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(() => chat.addMessage({ role: 7 } as never)).toThrow('ChatSession.addMessage: the message must be { role, content }');
  });

  it('rerank sends query, documents and normalize, and adds each document to its result', async () => {
    const { fake, model } = await loadedModel((req) =>
      req.method === 'rerank' ? { results: [{ index: 1, score: 2.5 }, { index: 0, score: -1 }] } : undefined
    );
    const r = await model.rerank('q', ['a', 'b'], { normalize: true });
    expect(fake.requests).toEqual([{ method: 'rerank', model: 3, params: { query: 'q', documents: ['a', 'b'], normalize: true } }]);
    expect(r).toEqual([
      { index: 1, score: 2.5, document: 'b' },
      { index: 0, score: -1, document: 'a' },
    ]);
    await expect(model.rerank('q', 'a' as never)).rejects.toThrow('rerank: documents must be an array of strings');
    await expect(model.rerank('q', ['a'], { top_n: 1 } as never)).rejects.toThrow('rerank: unknown option "top_n"');
  });
});
