/**
 * Session files over a scripted native side: saveSession / loadSession send the path
 * (`file://` URIs decoded), run after the completions queued before them, unwrap the token
 * count, refuse paths that are not files, and reject with the class of the native kind.
 */

import { afterEach, describe, expect, it } from 'vitest';
import { ContextFullError, InvalidArgumentError, loadModel, setNativeCaller } from '../../src/index';
import { deferred, fakeCaller, nativeError, type Request } from './fake';

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

afterEach(() => setNativeCaller(null));

describe('LanguageModel sessions', () => {
  it('saveSession and loadSession send the path after queued completions and unwrap the tokens', async () => {
    const gen = deferred<unknown>();
    const fake = fakeCaller((req: Request) => {
      switch (req.method) {
        case 'loadModel':
          return { model: 3, info: INFO };
        case 'generate':
          return gen.promise;
        case 'saveSession':
          return { tokens: 42 };
        case 'loadSession':
          return (req.params as { path: string }).path === '/big.session'
            ? nativeError('ContextFull', "the session's 900 tokens do not fit in the context of 512")
            : { tokens: 42 };
        default:
          return nativeError('InvalidArgument', `unscripted ${req.method}`);
      }
    });
    setNativeCaller(fake);
    const model = await loadModel('/m.gguf');
    const completion = model.complete('Hello', { maxTokens: 2 });
    const saved = model.saveSession('file:///data/My%20Chat.session');
    for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
    // The save waits for the completion queued before it.
    expect(fake.requests.map((r) => r.method)).toEqual(['loadModel', 'generate']);
    gen.resolve({
      text: ' world',
      tokens: [1, 2],
      promptTokens: 2,
      stopReason: 'length',
      timings: { promptN: 2, promptMs: 1, promptPerSecond: 1, predictedN: 2, predictedMs: 1, predictedPerSecond: 1, cachedN: 0 },
    });
    await completion.result;
    expect(await saved).toBe(42);
    expect(await model.loadSession('/data/chat.session')).toBe(42);
    expect(fake.requests.slice(2)).toEqual([
      { method: 'saveSession', model: 3, params: { path: '/data/My Chat.session' } },
      { method: 'loadSession', model: 3, params: { path: '/data/chat.session' } },
    ]);
    const e = await model.loadSession('/big.session').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ContextFullError);
    await expect(model.saveSession('')).rejects.toThrow(InvalidArgumentError);
    await expect(model.loadSession('https://example.com/a.session')).rejects.toThrow('loadSession: "https://example.com/a.session" is not a file path');
    await expect(model.saveSession(5 as never)).rejects.toThrow('saveSession: the path must be a non-empty string, got number');
  });
});
