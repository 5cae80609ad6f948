/**
 * The React hooks and ChatSession in an app's Jest (React Native's preset, the package's mock,
 * react-test-renderer), run by scripts/pack-test.sh in a fresh app: the state each hook goes
 * through, unmounting while a model loads or a completion runs, StrictMode's double effects, and
 * what each hook releases (only what it created).
 */
jest.mock('react-native-tessera', () => require('react-native-tessera/jest/mock'));

import React, { StrictMode, useEffect } from 'react';
import { act, create } from 'react-test-renderer';
import {
  ChatSession,
  InvalidModelError,
  __mock,
  loadModel,
  releaseAllModels,
  setNativeCaller,
  useCompletion,
  useModel,
} from 'react-native-tessera';

globalThis.IS_REACT_ACT_ENVIRONMENT = true;

afterEach(async () => {
  await releaseAllModels();
  __mock.reset();
});

const methods = () => __mock.requests.map((r) => r.method);

/** Renders `element` and returns a probe whose `states` are every value the hook returned. */
function probe(useHook) {
  const states = [];
  function Probe(props) {
    const s = useHook(props);
    states.push(s);
    return null;
  }
  return { Probe, states, last: () => states[states.length - 1] };
}

/** Holds the mock's tokens until `step(n)` lets `n` of them through. */
function gate() {
  const waiting = [];
  let credit = 0;
  __mock.gate = () =>
    new Promise((resolve) => {
      if (credit > 0) {
        credit -= 1;
        resolve();
      } else waiting.push(resolve);
    });
  return {
    async step(n = 1) {
      for (let i = 0; i < n; i++) {
        const next = waiting.shift();
        if (next) next();
        else credit += 1;
        await flush(3);
      }
    },
    open() {
      __mock.gate = null;
      for (const w of waiting.splice(0)) w();
    },
  };
}

/** Lets the mock's microtasks and React's updates run. */
async function flush(turns = 20) {
  for (let i = 0; i < turns; i++) {
    await act(async () => {
      await Promise.resolve();
    });
  }
}

describe('useModel', () => {
  test('goes idle -> loading (with progress) -> ready, and releases its model on unmount', async () => {
    const { Probe, states, last } = probe(({ path }) => useModel(path, { nCtx: 512 }));
    let r;
    await act(async () => {
      r = create(<Probe path={null} />);
    });
    expect(last().status).toBe('idle');
    const steps = gate();
    await act(async () => r.update(<Probe path="/models/a.gguf" />));
    await steps.step(2);
    expect([last().status, last().isLoading, last().progress, last().model]).toEqual(['loading', true, 0.5, null]);
    steps.open();
    await flush();
    const s = last();
    expect([s.status, s.isReady, s.isLoading, s.progress, s.error]).toEqual(['ready', true, false, 1, null]);
    expect(s.model.info.name).toBe('Mock model');
    const statuses = [...new Set(states.map((x) => x.status))];
    expect(statuses).toEqual(['idle', 'loading', 'ready']);
    expect([...new Set(states.filter((x) => x.status === 'loading').map((x) => x.progress))]).toEqual([0, 0.5, 1]);
    const load = __mock.requests.find((q) => q.method === 'loadModel');
    expect([load.path, load.options]).toEqual(['/models/a.gguf', { nCtx: 512 }]);
    const model = s.model;
    await act(async () => r.unmount());
    await flush(2);
    expect(model.isReleased).toBe(true);
    expect(methods().filter((m) => m === 'releaseModel')).toHaveLength(1);
  });

  test('under StrictMode the double effects load the model once, and unmounting releases it once', async () => {
    let setups = 0;
    function Effects() {
      useEffect(() => {
        setups += 1;
      }, []);
      return null;
    }
    const { Probe, last } = probe(() => useModel('/models/strict.gguf'));
    let r;
    await act(async () => {
      r = create(
        <StrictMode>
          <Effects />
          <Probe />
        </StrictMode>
      );
    });
    await flush();
    // The renderer does run StrictMode's double effects here.
    expect(setups).toBe(2);
    expect(last().status).toBe('ready');
    expect(methods().filter((m) => m === 'loadModel')).toHaveLength(1);
    expect(methods()).not.toContain('releaseModel');
    const model = last().model;
    await act(async () => r.unmount());
    await flush(2);
    expect(model.isReleased).toBe(true);
    expect(methods().filter((m) => m === 'releaseModel')).toHaveLength(1);
  });

  test('a new source releases the old model; null releases it and goes idle', async () => {
    const { Probe, last } = probe(({ path }) => useModel(path));
    let r;
    await act(async () => {
      r = create(<Probe path="/models/a.gguf" />);
    });
    await flush();
    const a = last().model;
    await act(async () => r.update(<Probe path="/models/b.gguf" />));
    await flush();
    const b = last().model;
    expect([a.isReleased, b.isReleased, b === a, last().status]).toEqual([true, false, false, 'ready']);
    expect(b.path).toBe('/models/b.gguf');
    await act(async () => r.update(<Probe path={null} />));
    await flush(2);
    expect([b.isReleased, last().status, last().model]).toEqual([true, 'idle', null]);
    await act(async () => r.unmount());
  });

  test('unmounting while the model loads cancels the load and releases the model that arrives', async () => {
    let answer;
    const { caller } = __mock;
    setNativeCaller({
      ...caller,
      call: (json) =>
        JSON.parse(json).method === 'loadModel' ? new Promise((resolve) => (answer = () => resolve(caller.call(json)))) : caller.call(json),
    });
    const { Probe, last } = probe(() => useModel('/models/slow.gguf'));
    let r;
    await act(async () => {
      r = create(<Probe />);
    });
    expect(last().status).toBe('loading');
    await act(async () => r.unmount());
    await flush(2);
    expect(methods()).toContain('cancelLoad');
    answer();
    await flush();
    // The model the core loaded anyway was released, and nothing is left loaded.
    expect(methods().filter((m) => m === 'releaseModel')).toHaveLength(1);
    expect(await releaseAllModels()).toBe(0);
  });

  test('a { url, sha256 } source downloads first (downloadProgress), then loads; a file with that hash is not downloaded again', async () => {
    const source = { url: 'https://example.com/models/tiny.gguf', sha256: 'cd'.repeat(32) };
    const { Probe, last } = probe(({ s }) => useModel(s));
    const steps = gate();
    let r;
    await act(async () => {
      r = create(<Probe s={source} />);
    });
    await steps.step(2);
    expect([last().status, last().isLoading, last().downloadProgress, last().model]).toEqual(['downloading', true, 0.5, null]);
    steps.open();
    await flush();
    expect([last().status, last().downloadProgress, last().model.path]).toEqual(['ready', 1, '/mock/files/tessera/models/tiny.gguf']);
    await act(async () => r.unmount());
    const again = probe(({ s }) => useModel(s));
    await act(async () => {
      r = create(<again.Probe s={{ ...source }} />);
    });
    await flush();
    expect(again.last().status).toBe('ready');
    expect(methods().filter((m) => m === 'downloadModel')).toHaveLength(1);
    await act(async () => r.unmount());
  });

  test('unmounting during a download cancels it', async () => {
    const { Probe, last } = probe(() => useModel({ url: 'https://example.com/big.gguf', sha256: 'ef'.repeat(32) }));
    const steps = gate();
    let r;
    await act(async () => {
      r = create(<Probe />);
    });
    await steps.step(1);
    expect(last().status).toBe('downloading');
    await act(async () => r.unmount());
    await flush(2);
    expect(methods()).toContain('cancelDownload');
    steps.open();
    await flush();
    expect(methods()).not.toContain('loadModel');
    expect((await require('react-native-tessera').listModels()).map((m) => m.name)).not.toContain('big.gguf');
  });

  test('a load that fails gives status "error" with the typed error', async () => {
    const { caller } = __mock;
    setNativeCaller({
      ...caller,
      call: async (json) =>
        JSON.parse(json).method === 'loadModel'
          ? JSON.stringify({ error: { kind: 'InvalidModel', message: '/models/bad.gguf: not a GGUF file' } })
          : caller.call(json),
    });
    const { Probe, last } = probe(() => useModel('/models/bad.gguf'));
    let r;
    await act(async () => {
      r = create(<Probe />);
    });
    await flush();
    expect(last().status).toBe('error');
    expect(last().error).toBeInstanceOf(InvalidModelError);
    expect(last().error.message).toBe('/models/bad.gguf: not a GGUF file');
    await act(async () => r.unmount());
  });
});

describe('useCompletion', () => {
  test('streams the response, then holds the result; never releases the model it was given', async () => {
    const model = await loadModel('/models/m.gguf');
    const { Probe, states, last } = probe(({ m }) => useCompletion(m));
    let r;
    await act(async () => {
      r = create(<Probe m={model} />);
    });
    const tokens = gate();
    let done;
    await act(async () => {
      done = last().complete('Hello', { maxTokens: 16 });
    });
    await tokens.step(2);
    expect([last().isGenerating, last().response, last().result]).toEqual([true, 'This is', null]);
    tokens.open();
    await flush();
    const result = await done;
    expect(result.text).toBe('This is a mock reply.');
    expect(result.stopReason).toBe('eog');
    const s = last();
    expect([s.response, s.isGenerating, s.error, s.result]).toEqual(['This is a mock reply.', false, null, result]);
    // The text grew token by token while generating.
    const partial = [...new Set(states.filter((x) => x.isGenerating).map((x) => x.response))];
    expect(partial.slice(0, 3)).toEqual(['', 'This', 'This is']);
    await act(async () => r.unmount());
    await flush(2);
    expect(model.isReleased).toBe(false);
    expect(methods()).not.toContain('releaseModel');
  });

  test('unmounting during a generation stops it (cancelled, text so far) and leaves the model loaded', async () => {
    const model = await loadModel('/models/m.gguf');
    const tokens = gate();
    const { Probe, last } = probe(({ m }) => useCompletion(m));
    let r;
    await act(async () => {
      r = create(<Probe m={model} />);
    });
    let done;
    await act(async () => {
      done = last().complete('Hello', { maxTokens: 256 });
    });
    await tokens.step(3);
    expect([last().isGenerating, last().response]).toEqual([true, 'This is a']);
    await act(async () => r.unmount());
    expect(methods()).toContain('cancelGeneration');
    tokens.open();
    // The hook resolves null (unmounted); the model's completion ended and it is still loaded.
    expect(await done).toBeNull();
    const generate = __mock.requests.find((q) => q.method === 'generate');
    expect(generate.params).toEqual({ prompt: 'Hello', maxTokens: 256 });
    const after = model.complete('x', { maxTokens: 1 });
    expect((await after.result).stopReason).toBe('length');
    expect(model.isReleased).toBe(false);
  });

  test('stop() ends the completion with "cancelled"; a second complete while one runs is refused', async () => {
    const model = await loadModel('/models/m.gguf');
    const tokens = gate();
    const { Probe, last } = probe(({ m }) => useCompletion(m));
    await act(async () => {
      create(<Probe m={model} />);
    });
    let done;
    await act(async () => {
      done = last().complete('Hello', { maxTokens: 256 });
    });
    await tokens.step(2);
    await expect(last().complete('again')).rejects.toThrow('a completion is already running');
    await act(async () => last().stop());
    tokens.open();
    await flush();
    const result = await done;
    expect([result.stopReason, result.text]).toEqual(['cancelled', 'This is']);
    expect([last().isGenerating, last().response]).toEqual([false, result.text]);
  });

  test('with a ChatSession: the history grows by turns and each turn reuses the cache of the last', async () => {
    const model = await loadModel('/models/m.gguf');
    const chat = new ChatSession(model, { system: 'Be brief.', completion: { maxTokens: 64 } });
    const { Probe, last } = probe(({ c }) => useCompletion(c));
    let r;
    await act(async () => {
      r = create(
        <StrictMode>
          <Probe c={chat} />
        </StrictMode>
      );
    });
    let first;
    await act(async () => {
      first = last().complete('Hi');
    });
    await flush();
    first = await first;
    let second;
    await act(async () => {
      second = last().complete('More');
    });
    await flush();
    second = await second;
    expect(last().messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'This is a mock reply.' },
      { role: 'user', content: 'More' },
      { role: 'assistant', content: 'This is a mock reply.' },
    ]);
    // The second prompt extends the first prompt and its reply: all of those are reused.
    const firstPrompt = await model.applyChatTemplate(chat.messages.slice(0, 2));
    expect(first.timings.cache_n).toBe(0);
    expect(second.timings.cache_n).toBe(firstPrompt.length + first.text.length);
    expect(second.timings.cached_n).toBe(second.timings.cache_n);
    expect(second.timings.prompt_n).toBe(second.promptTokens - second.timings.cache_n);
    await act(async () => r.unmount());
  });
});

describe('ChatSession', () => {
  test('a failed turn or one cancelled before any text takes the user message back; reset forgets', async () => {
    const model = await loadModel('/models/m.gguf');
    const chat = new ChatSession(model);
    const controller = new AbortController();
    controller.abort();
    const cancelled = await chat.send('Hi', { signal: controller.signal }).result;
    expect([cancelled.stopReason, chat.messages]).toEqual(['cancelled', []]);
    const bad = chat.send('Hi', { topK: -1, n_predict: 3 });
    await expect(bad.result).rejects.toThrow(/n_predict/);
    expect(chat.messages).toEqual([]);
    const running = chat.send('Hi');
    await expect(chat.send('Again').result).rejects.toThrow('a turn is still generating');
    await running.result;
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    chat.reset();
    expect(chat.messages).toEqual([]);
  });
});

test('releaseAllModels releases every model loaded, and a load running at the time', async () => {
  const a = await loadModel('/models/a.gguf');
  const b = await loadModel('/models/b.gguf');
  await b.release();
  const loading = loadModel('/models/c.gguf');
  expect(await releaseAllModels()).toBe(1);
  expect([a.isReleased, b.isReleased]).toEqual([true, true]);
  await expect(loading).rejects.toThrow('releaseAllModels was called while the model loaded');
  expect(methods().filter((m) => m === 'releaseModel')).toHaveLength(3);
});
