/**
 * End to end: the language-model API over the real Rust core (the tessera-ffi cdylib through
 * its C ABI, events through `tessera_set_event_callback`) on Gemma 3 270M Q4_K_M, against
 * llama.cpp's token ids (llama-cpp-python 0.3.36 on the same file, greedy).
 *
 * The model file: $TESSERA_GEMMA_GGUF (scripts/test.sh sets it), else
 * target/models/gemma3-270m-q4_k_m.gguf (scripts/setup.sh installs it).
 */

import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CancelledError,
  ChatSession,
  ClosedError,
  InvalidArgumentError,
  InvalidModelError,
  LanguageModel,
  loadModel,
  setNativeCaller,
  type Completion,
  type CompletionResult,
  type TokenEvent,
} from '../../src/index';
import { koffiCaller, type KoffiCaller } from './koffi-caller';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const GEMMA = process.env.TESSERA_GEMMA_GGUF ?? resolve(root, 'target/models/gemma3-270m-q4_k_m.gguf');
if (!existsSync(GEMMA)) {
  throw new Error(`${GEMMA} not found: set TESSERA_GEMMA_GGUF to the Gemma 3 270M Q4_K_M file (scripts/setup.sh installs it)`);
}

/** llama.cpp's ids of "The capital of France is" (BOS first). */
const PROMPT_IDS = [2, 818, 5279, 529, 7001, 563];
/** llama.cpp's greedy continuation of it: " the capital of the country of France." */
const GREEDY_IDS = [506, 5279, 529, 506, 2891, 529, 7001, 236761];
/** llama.cpp's greedy reply to the Gemma chat prompt of "What is the capital of France?" (its first 6). */
const CHAT_IDS = [3689, 563, 506, 5279, 529, 7001];

const native: KoffiCaller = koffiCaller();
let model: LanguageModel;
const progress: number[] = [];

beforeAll(async () => {
  setNativeCaller(native);
  model = await loadModel(GEMMA, { device: 'CPU', threads: 2, nCtx: 512 }, (p) => progress.push(p));
});

afterAll(async () => {
  await model?.release();
  setNativeCaller(null);
  native.close();
});

/** Drains a completion with `for await`, returning the events and the result. */
async function drain(c: Completion, onEach?: (e: TokenEvent, i: number) => void): Promise<{ events: TokenEvent[]; result: CompletionResult }> {
  const events: TokenEvent[] = [];
  for await (const e of c) {
    events.push(e);
    onEach?.(e, events.length - 1);
  }
  return { events, result: await c.result };
}

/** The token events the core emitted for `requestId` (as received by the C callback). */
function nativeTokenEvents(requestId: string): { token: number; text: string }[] {
  return native.events
    .map((e) => JSON.parse(e) as { type: string; requestId: unknown; token: number; text: string })
    .filter((e) => e.type === 'token' && e.requestId === requestId)
    .map(({ token, text }) => ({ token, text }));
}

/** The checks of a hand-written validator for the form schema below (independent of the engine). */
function formErrors(v: unknown): string[] {
  const errors: string[] = [];
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return ['not an object'];
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!['name', 'age', 'city', 'tags'].includes(k)) errors.push(`extra key ${k}`);
  if (typeof o.name !== 'string' || o.name.length < 1 || o.name.length > 20) errors.push(`name ${JSON.stringify(o.name)}`);
  if (typeof o.age !== 'number' || !Number.isInteger(o.age) || o.age < 0 || o.age > 120) errors.push(`age ${JSON.stringify(o.age)}`);
  if (!['Lisbon', 'Porto', 'Faro'].includes(o.city as string)) errors.push(`city ${JSON.stringify(o.city)}`);
  if (o.tags !== undefined) {
    if (!Array.isArray(o.tags) || o.tags.length > 3 || o.tags.some((t) => typeof t !== 'string' || !/^[a-z]+$/.test(t))) errors.push(`tags ${JSON.stringify(o.tags)}`);
  }
  return errors;
}

const FORM_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 20 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    city: { enum: ['Lisbon', 'Porto', 'Faro'] },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]+$' }, maxItems: 3 },
  },
  required: ['name', 'age', 'city'],
  additionalProperties: false,
};

describe('Gemma 3 270M through loadModel', () => {
  it('loads with progress events and reports what it is', () => {
    expect(progress.length).toBeGreaterThan(2);
    for (let i = 1; i < progress.length; i++) expect(progress[i]!).toBeGreaterThanOrEqual(progress[i - 1]!);
    expect(progress[0]!).toBeGreaterThanOrEqual(0);
    expect(progress.at(-1)).toBe(1);
    expect(model.info).toMatchObject({
      architecture: 'gemma3',
      name: 'Gemma 3 270m',
      quantization: 'Q4_K_M',
      nCtx: 512,
      nCtxTrain: 32768,
      nVocab: 262144,
      nEmbd: 640,
      nLayer: 18,
      device: 'CPU',
      hasChatTemplate: true,
    });
    expect(model.info.nParams).toBe(268098176);
  });

  it("tokenizes as llama.cpp does, and detokenizes", async () => {
    expect(await model.tokenize('The capital of France is')).toEqual(PROMPT_IDS);
    expect(await model.tokenize('The capital of France is', { addSpecial: false })).toEqual(PROMPT_IDS.slice(1));
    expect(await model.detokenize([818, 5279])).toBe('The capital');
    expect(await model.detokenize([2, 818], { special: true })).toBe('<bos>The');
  });

  it("streams a greedy completion whose tokens are llama.cpp's, with for await and onToken", async () => {
    const viaCallback: TokenEvent[] = [];
    const c = model.complete('The capital of France is', { temperature: 0, maxTokens: 6, onToken: (e) => viaCallback.push(e) });
    const { events, result } = await drain(c);
    expect(result.tokens).toEqual(GREEDY_IDS.slice(0, 6));
    expect(events.map((e) => e.token)).toEqual(result.tokens);
    expect(events.map((e) => e.text).join('')).toBe(result.text);
    expect(result.text).toBe(' the capital of the country of');
    // Each event came from the core as it was generated (not made up from the result).
    expect(nativeTokenEvents(c.requestId)).toEqual(events.map(({ token, text }) => ({ token, text })));
    expect(events.map((e) => e.text)).toEqual([' the', ' capital', ' of', ' the', ' country', ' of']);
    expect(viaCallback).toEqual(events);
    expect(result.stopReason).toBe('length');
    expect(result.promptTokens).toBe(PROMPT_IDS.length);
    expect(result.timings.prompt_n).toBe(PROMPT_IDS.length);
    expect(result.timings.predicted_n).toBe(6);
    expect(result.timings.predicted_per_second).toBeGreaterThan(0);
    expect(result.timings.predicted_per_token_ms).toBeCloseTo(result.timings.predicted_ms / 6, 9);
  });

  it('aborts with an AbortSignal mid-stream: the result resolves "cancelled" with the tokens so far', async () => {
    const controller = new AbortController();
    const c = model.complete('Once upon a time', { temperature: 0, maxTokens: 200, signal: controller.signal });
    const { events, result } = await drain(c, (_, i) => {
      if (i === 2) controller.abort();
    });
    expect(result.stopReason).toBe('cancelled');
    expect(result.tokens.length).toBeGreaterThanOrEqual(3);
    expect(result.tokens.length).toBeLessThan(200);
    expect(events.map((e) => e.token)).toEqual(result.tokens);
    expect(events.map((e) => e.text).join('')).toBe(result.text);
    expect(native.log.some((l) => l.request.includes('"cancelGeneration"'))).toBe(true);
  });

  it("chats with the model's template: the reply starts with llama.cpp's tokens", async () => {
    const messages = [{ role: 'user', content: 'What is the capital of France?' }];
    const prompt = await model.applyChatTemplate(messages);
    expect(prompt).toBe('<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n');
    const { events, result } = await drain(model.complete(messages, { temperature: 0, maxTokens: 6 }));
    expect(result.promptTokens).toBe(16);
    expect(result.tokens).toEqual(CHAT_IDS);
    expect(events.map((e) => e.token)).toEqual(CHAT_IDS);
    expect(events.map((e) => e.text).join('')).toBe('What is the capital of France');
  });

  it('a ChatSession turn reuses the previous turn\'s prompt and reply from the KV cache', async () => {
    const chat = new ChatSession(model, { completion: { temperature: 0, maxTokens: 8 } });
    const first = await chat.send('What is the capital of France?').result;
    expect(first.tokens).toEqual(CHAT_IDS.concat(first.tokens.slice(6)));
    expect(first.stopReason).toBe('length');
    const second = await chat.send('And of Italy?').result;
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    expect(chat.messages[1]!.content).toBe(first.text);
    // The cache held the first prompt and every reply token but the last (sampled, never
    // decoded, as a generation that stops at maxTokens leaves it): all of it is reused.
    expect(second.timings.cache_n).toBe(first.promptTokens + first.tokens.length - 1);
    expect(second.timings.prompt_n).toBe(second.promptTokens - second.timings.cache_n);
    // The same history as one prompt gives the same reply: the reuse changed nothing.
    await model.complete('x', { maxTokens: 1 }).result; // another prompt replaces the cache
    const fresh = await model.complete(chat.messages.slice(0, 3), { temperature: 0, maxTokens: 8 }).result;
    expect(fresh.timings.cache_n).toBeLessThan(5);
    expect(fresh.tokens).toEqual(second.tokens);
  });

  it('embeds texts as unit vectors of 640 values', async () => {
    const one = await model.embed('hello world');
    const both = await model.embed(['hello world', 'bonjour']);
    expect(one).toHaveLength(640);
    expect(both).toHaveLength(2);
    for (const v of [one, ...both]) {
      expect(v).toHaveLength(640);
      expect(Math.hypot(...v)).toBeCloseTo(1, 4);
    }
    expect(both[0]).toEqual(one);
    const cosine = one.reduce((s, x, i) => s + x * both[1]![i]!, 0);
    expect(cosine).toBeLessThan(0.9999);
  });

  it('a load aborted at its first progress event stops in the core (Cancelled) and rejects with a CancelledError', async () => {
    const controller = new AbortController();
    const seen: number[] = [];
    const e = await loadModel(GEMMA, { device: 'CPU', threads: 1, nCtx: 256, signal: controller.signal }, (p) => {
      seen.push(p);
      controller.abort();
    }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CancelledError);
    // The core's own answer to the load is Cancelled too (it stopped placing weights), once it comes.
    await expect.poll(() => native.log.filter((l) => l.request.includes('"method":"loadModel"')).length, { timeout: 30_000 }).toBe(2);
    const answer = native.log.filter((l) => l.request.includes('"method":"loadModel"')).at(-1)!.response;
    expect(JSON.parse(answer).error.kind).toBe('Cancelled');
    expect(seen.length).toBeGreaterThan(0);
    expect(native.log.some((l) => l.request.includes('"method":"releaseModel"') && l.request.includes('"model":2'))).toBe(false);
  });

  it('rejects bad files and options with typed errors', async () => {
    const e = await loadModel('/nonexistent/model.gguf').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(InvalidModelError);
    expect((e as Error).message).toContain('/nonexistent/model.gguf');
    await expect(model.complete('a', { topP: 2 }).result).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(model.complete('a', { maxTokens: 1, temperature: -1 }).result).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('a second model at once', () => {
  let other: LanguageModel;
  beforeAll(async () => {
    other = await loadModel(GEMMA, { device: 'CPU', threads: 1, nCtx: 256 });
  });

  it('two completions in parallel give the tokens each gives alone, each stream its own', async () => {
    const alone = await drain(other.complete('Once upon a time', { temperature: 0, maxTokens: 5 }));
    const [a, b] = await Promise.all([
      drain(model.complete('The capital of France is', { temperature: 0, maxTokens: 5 })),
      drain(other.complete('Once upon a time', { temperature: 0, maxTokens: 5 })),
    ]);
    expect(a.result.tokens).toEqual(GREEDY_IDS.slice(0, 5));
    expect(a.events.map((e) => e.token)).toEqual(a.result.tokens);
    expect(b.result.tokens).toEqual(alone.result.tokens);
    expect(b.events.map((e) => e.token)).toEqual(alone.result.tokens);
    expect(b.result.text).toBe(alone.result.text);
  });

  it('release during a completion ends it "cancelled"; later calls reject with ClosedError', async () => {
    const c = other.complete('Once upon a time', { temperature: 0, maxTokens: 200 });
    const released = (async () => {
      for await (const _ of c) {
        await other.release();
        return;
      }
    })();
    const result = await c.result;
    await released;
    expect(result.stopReason).toBe('cancelled');
    expect(result.tokens.length).toBeLessThan(200);
    for (const p of [other.tokenize('a'), other.complete('a').result, other.embed('a')]) {
      await expect(p).rejects.toBeInstanceOf(ClosedError);
    }
    // The core says so too: a LanguageModel with the released number.
    const stale = new LanguageModel(other.id, other.info, other.path);
    const e = await stale.tokenize('a').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ClosedError);
    expect((e as Error).message).toBe(`model ${other.id} is released`);
    expect(native.log.at(-1)!.request).toContain('"method":"tokenize"');
    await other.release();
  });
});

describe('sequences of one model', () => {
  let two: LanguageModel;
  beforeAll(async () => {
    two = await loadModel(GEMMA, { device: 'CPU', threads: 1, nCtx: 256, nSequences: 2 });
  });
  afterAll(async () => {
    await two?.release();
  });

  it('two conversations at once on two sequences give llama.cpp\'s tokens and what each gives alone; each keeps its cache', async () => {
    // 18 layers x 256 cells (the sliding-window ring capped at the context) x 1 KV head of 256
    // F16 values for K and for V.
    expect([two.info.nSequences, two.info.cacheBytesPerSequence]).toEqual([2, 18 * 256 * 1024]);
    const alone = await other1Alone();
    const [a, b] = await Promise.all([
      drain(two.complete('The capital of France is', { temperature: 0, maxTokens: 5, sequence: 0 })),
      drain(two.complete('Once upon a time', { temperature: 0, maxTokens: 5, sequence: 1 })),
    ]);
    expect(a.result.tokens).toEqual(GREEDY_IDS.slice(0, 5));
    expect(a.events.map((e) => e.token)).toEqual(a.result.tokens);
    expect(b.result.tokens).toEqual(alone);
    // Sequence 0's next turn reuses its prompt and reply although sequence 1 ran meanwhile.
    const next = await two.complete('The capital of France is' + a.result.text + ' And', { temperature: 0, maxTokens: 1, sequence: 0 }).result;
    expect(next.timings.cache_n).toBeGreaterThanOrEqual(PROMPT_IDS.length + 3);
    await expect(two.complete('x', { sequence: 2 }).result).rejects.toThrow(/sequence 2 does not exist/);
  });

  /** Sequence 1's greedy tokens on a model of its own. */
  async function other1Alone(): Promise<number[]> {
    const one = await loadModel(GEMMA, { device: 'CPU', threads: 1, nCtx: 256 });
    try {
      return (await one.complete('Once upon a time', { temperature: 0, maxTokens: 5 }).result).tokens;
    } finally {
      await one.release();
    }
  }
});

describe('structured output on Gemma 3 270M', () => {
  it('a JSON-schema form fill at temperature 1 parses and validates; its text chunks are the content', async () => {
    for (const seed of [1, 2]) {
      const c = model.complete([{ role: 'user', content: 'Rui is 44, lives in Faro and likes boats. His record as JSON:' }], {
        responseFormat: { type: 'json_schema', schema: FORM_SCHEMA },
        temperature: 1,
        seed,
        maxTokens: 80,
      });
      const chunks: string[] = [];
      for await (const ch of c.chunks()) if (ch.type === 'text') chunks.push(ch.text);
      const r = await c.result;
      expect(r.stopReason).toBe('eog');
      expect(formErrors(JSON.parse(r.text))).toEqual([]);
      expect(chunks.join('')).toBe(r.content);
      expect(r.timings.constraint_ms).toBeGreaterThan(0);
    }
  });

  it('a required tool call is parsed, its arguments an object valid against the tool schema', async () => {
    const c = model.complete([{ role: 'user', content: 'Set a timer for 5 minutes.' }], {
      tools: [
        {
          type: 'function',
          function: {
            name: 'set_timer',
            description: 'Starts a timer',
            parameters: { type: 'object', properties: { minutes: { type: 'integer', minimum: 1, maximum: 60 } }, required: ['minutes'], additionalProperties: false },
          },
        },
      ],
      toolChoice: 'required',
      temperature: 1,
      seed: 3,
      maxTokens: 40,
    });
    const names: string[] = [];
    let args = '';
    for await (const ch of c.chunks()) {
      if (ch.type === 'toolCallName') names.push(ch.name);
      if (ch.type === 'toolCallArguments') args += ch.text;
    }
    const r = await c.result;
    expect(r.toolCalls).toHaveLength(1);
    const call = r.toolCalls[0]!;
    expect(call.name).toBe('set_timer');
    expect(names).toEqual(['set_timer']);
    expect(Object.keys(call.arguments)).toEqual(['minutes']);
    const minutes = call.arguments.minutes as number;
    expect(Number.isInteger(minutes) && minutes >= 1 && minutes <= 60).toBe(true);
    expect(JSON.parse(args)).toEqual(call.arguments);
  });

  it('nProbs: per token, the candidates most likely first, summing to 1 under top-k, the drawn token among them', async () => {
    const c = model.complete('The capital of France is', { nProbs: 4, topK: 4, topP: 1, minP: 0, temperature: 1, seed: 6, maxTokens: 5, ignoreEos: true });
    const { events, result } = await drain(c);
    expect(result.probs).toHaveLength(result.tokens.length);
    result.probs!.forEach((step, i) => {
      expect(step.token).toBe(result.tokens[i]);
      const p = step.probs.map((x) => x.prob);
      expect(p).toHaveLength(4);
      for (let j = 1; j < p.length; j++) expect(p[j]!).toBeLessThanOrEqual(p[j - 1]!);
      expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 4);
      expect(step.probs.map((x) => x.token)).toContain(step.token);
      expect(events[i]!.probs).toEqual(step.probs);
    });
  });

  it('a malformed schema, grammar or regex rejects with InvalidArgumentError naming the problem, before any token', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ responseFormat: { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'wat' } } } } }, 'JSON schema'],
      [{ grammar: 'root ::= undefined-rule' }, 'grammar'],
      [{ regex: '[a-' }, 'regex'],
    ];
    for (const [options, needle] of cases) {
      const c = model.complete('x', { maxTokens: 4, ...options });
      const seen: TokenEvent[] = [];
      await expect(
        (async () => {
          for await (const e of c) seen.push(e);
        })()
      ).rejects.toThrow(InvalidArgumentError);
      await expect(c.result).rejects.toThrow(needle);
      expect(seen).toEqual([]);
      expect(nativeTokenEvents(c.requestId)).toEqual([]);
    }
  });

  it('a GBNF grammar with reasoning: reasoningFormat auto splits it out', async () => {
    const r = await model.complete('Think first:', { grammar: 'root ::= "<think>" [a-z]{2,6} "</think>" [A-Z][a-z]{1,6}', temperature: 1, seed: 2, maxTokens: 30 }).result;
    const m = /^<think>([a-z]+)<\/think>([A-Z][a-z]*)$/.exec(r.text);
    expect(m).not.toBeNull();
    expect([r.reasoning, r.content]).toEqual([m![1], m![2]]);
  });
});

describe('rerank on a BERT reranker', () => {
  it("scores as llama.cpp does (its recorded scores), highest first; normalize is the logistic", async () => {
    const fixture = JSON.parse(readFileSync(resolve(root, 'rust/llm/tests/fixtures/embed-tiny-bert-rerank.json'), 'utf8')) as {
      query: string;
      documents: Array<{ document: string; score: number; score_fa_on: number }>;
    };
    // llama.cpp's own spread (flash attention on / off), the margin of rust/llm/tests/embed_models.rs.
    const allowed = 1.25 * Math.max(...fixture.documents.map((d) => Math.abs(d.score - d.score_fa_on))) + 1e-6;
    const reranker = await loadModel(resolve(root, 'target/models/tiny-bert-rerank.gguf'), { device: 'CPU', threads: 1 });
    try {
      const docs = fixture.documents.map((d) => d.document);
      const r = await reranker.rerank(fixture.query, docs);
      expect(r.map((x) => x.index).sort()).toEqual(docs.map((_, i) => i));
      for (let i = 1; i < r.length; i++) expect(r[i]!.score).toBeLessThanOrEqual(r[i - 1]!.score);
      for (const x of r) {
        expect(x.document).toBe(docs[x.index]);
        expect(Math.abs(x.score - fixture.documents[x.index]!.score)).toBeLessThanOrEqual(allowed);
      }
      const n = await reranker.rerank(fixture.query, docs, { normalize: true });
      for (const x of n) {
        const want = 1 / (1 + Math.exp(-fixture.documents[x.index]!.score));
        expect(Math.abs(x.score - want)).toBeLessThanOrEqual(allowed / 4);
      }
      await expect(model.rerank('q', ['d'])).rejects.toThrow(InvalidArgumentError);
    } finally {
      await reranker.release();
    }
  });
});
