/**
 * A Jest mock of react-native-tessera for app tests, with no native code:
 *
 *   jest.mock('react-native-tessera', () => require('react-native-tessera/jest/mock'));
 *
 * Everything that runs in JavaScript is the real thing (the graph builder and its checks,
 * input validation, errors, typed results); the native side is replaced by a deterministic
 * fake:
 * - getDevices(): one CPU, "Mock CPU", 8 GiB of which 4 GiB free;
 * - getCpuFeatures(): an ARMv8.2 phone (NEON, ARM_FMA, FP16_VA, DOTPROD; no i8mm, SVE, SME);
 * - getBuildInfo(): version of this package, target "mock", profile "mock";
 * - compute() / Session: every output is zeros of its type and shape;
 * - session.load(graph) of a version-1 graph: its LoadedGraph computes zeros too; release()
 *   works as on a phone (compute after it rejects with ClosedError); version-2 documents
 *   (model files) reject with kind Unsupported, and ggufInfo(path) with an InvalidModelError:
 *   the mock has no files;
 * - cancel, close / release, closeAllSessions, setLogLevel, toggleNativeLog: accepted, no
 *   effect;
 * - loadModel(path): any path loads "Mock model" (info in `__mock.modelInfo`), with progress
 *   0, 0.5, 1; tokenize gives one token per UTF-16 unit (its code) after BOS (id 1, when
 *   addSpecial), detokenize inverts it; applyChatTemplate renders
 *   `<start_of_turn>role\ncontent<end_of_turn>\n` per message, the role "assistant" as
 *   "model" (+ `<start_of_turn>model\n`);
 *   complete() streams the fixed reply "This is a mock reply." (`__mock.completionTokens`, ids
 *   100, 101, ...), cut at maxTokens (stopReason "length", else "eog"; stop strings are not
 *   applied), one token per microtask (or as `__mock.gate` lets them through, as it does the
 *   load's progress events), so stop / AbortSignal / release work as on a phone;
 *   the prompt's longest prefix held from the model's previous completion (its prompt and
 *   reply, one token per UTF-16 unit) is reused, as the runtime's KV cache is (`cache_n`);
 *   saveSession(path) keeps the tokens held (in memory, by path) and loadSession(path) gives
 *   them back (a path never saved: StorageError); `nSequences` (1 to 64) sequences per model,
 *   each with its own held tokens and cancel (`sequence` on complete, saveSession,
 *   loadSession; an unknown one: InvalidArgumentError), `memoryBudget` below `nSequences`
 *   times `cacheBytesPerSequence` (131072): a TesseraError of kind OutOfMemory;
 *   timings: 1 ms per prompt token, 10 ms per generated token; each token one text chunk,
 *   the content the text (no reasoning, no tool calls); rerank scores by the cosine of the
 *   mock embeddings; embed gives unit vectors of 8 (an embedProgress event per text)
 *   values computed from the text; after release, calls reject with ClosedError;
 * - downloadModel(url, { sha256 }): "downloads" 250 MB with progress 0, half, all (held by
 *   `__mock.gate` like tokens; a signal cancels it with a CancelledError) into
 *   /mock/files/tessera/models/NAME; listModels lists what was downloaded, deleteModel removes
 *   it (no file exists: loading such a path loads the mock model as any path does).
 *
 * The mock's `__mock` export gives the requests received (`__mock.requests`), its native side
 * (`__mock.caller`) and lets a test emit a native log record
 * (`__mock.emitLog({ level, target, message })`).
 *
 * It works with React Native's Jest preset as it is (`preset: 'react-native'`): the preset does
 * not transform node_modules/react-native-tessera, and Jest loads the package's CommonJS build
 * (lib/commonjs, the `require` condition of its exports).
 */
'use strict';

/* global jest */
const actual = jest.requireActual('react-native-tessera');

const GiB = 1024 * 1024 * 1024;

const devices = [
  {
    backend: 'CPU',
    name: 'CPU',
    description: 'Mock CPU',
    type: 'cpu',
    memoryFree: 4 * GiB,
    memoryTotal: 8 * GiB,
    caps: { asyncOps: false, hostBuffer: false, bufferFromHostPtr: true, events: false },
  },
];

const cpuFeatures = {
  pairs: [
    { name: 'NEON', value: '1' },
    { name: 'ARM_FMA', value: '1' },
    { name: 'FP16_VA', value: '1' },
    { name: 'DOTPROD', value: '1' },
    { name: 'MATMUL_INT8', value: '0' },
    { name: 'SVE', value: '0' },
    { name: 'SVE_CNT', value: '0' },
    { name: 'SME', value: '0' },
  ],
  tiers: ['F32', 'F16', 'BF16', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K'].map(
    (dtype) => ({ dtype, tier: dtype.startsWith('Q') ? 'neon+dotprod' : 'neon' })
  ),
};

let version = '0.0.0';
try {
  version = require('../package.json').version;
} catch (e) {
  // keep the default
}

const buildInfo = { version, target: 'mock', features: [], profile: 'mock' };

/** Zero bytes of a tensor of `dtype` and `shape`, in base64. */
function zeros(dtype, shape) {
  const info = actual.DTYPE_INFO[dtype];
  const count = shape.reduce((a, b) => a * b, 1);
  const bytes = new Uint8Array((count / info.blockSize) * info.typeSize);
  return actual.base64FromBytes(bytes);
}

const requests = [];
const logListeners = new Set();
const eventListeners = new Set();
let nextSession = 1;

// ------------------------------------------------------------------ the mock language model

const modelInfo = {
  architecture: 'mock',
  name: 'Mock model',
  nParams: 1000000,
  sizeBytes: 500000,
  quantization: 'Q4_K_M',
  nCtxTrain: 2048,
  nCtx: 2048,
  nVocab: 65536,
  nEmbd: 8,
  nLayer: 2,
  device: 'CPU',
  hasChatTemplate: true,
  mappedBytes: 500000,
  nSequences: 1,
  // 2 layers x 2048 positions x 8 values of K and of V, F16.
  cacheBytesPerSequence: 131072,
  // 2 layers x 8 values of K and of V, F16 (the mock keeps F16 whatever cacheTypeK / V say).
  kvBytesPerToken: 64,
};

const DEFAULT_COMPLETION = ['This', ' is', ' a', ' mock', ' reply', '.'];
const completionTokens = DEFAULT_COMPLETION.slice();
/**
 * Loaded models by number: { released, info, sequences: [{ cancel, history }] } (per sequence,
 * `history`: the tokens its "KV cache" holds, the last prompt and the text generated after it,
 * one token per UTF-16 unit).
 */
const models = new Map();
let nextModel = 1;
/** What tests set: `gate`, awaited before each load progress event and generated token. */
const state = { gate: null, downloadSize: 250000000 };
/** Graphs loaded with loadGraph, by handle (null once released). */
const loadedGraphs = new Map();
let nextGraph = 1;

/** Zeros of the types and shapes of a version-1 document's outputs. */
function zeroOutputs(graph) {
  // The real document reader gives every output's type and shape.
  const g = actual.graphFromDocument(graph);
  return {
    outputs: g.outputs.map((t) => ({
      name: t.name,
      dtype: t.dtype,
      shape: Array.from(t.shape),
      data: zeros(t.dtype, t.shape),
    })),
  };
}

function loadedAnswer(req) {
  switch (req.method) {
    case 'loadGraph': {
      if (req.graph && req.graph.version === 2) {
        const e = new actual.TesseraError('Unsupported', 'the Jest mock has no model files: it loads version-1 documents only');
        throw e;
      }
      zeroOutputs(req.graph);
      const id = nextGraph++;
      loadedGraphs.set(id, req.graph);
      return { graph: id };
    }
    case 'computeLoaded': {
      const graph = loadedGraphs.get(req.graph);
      if (graph === undefined) throw new actual.InvalidArgumentError('unknown graph handle ' + req.graph);
      if (graph === null) throw new actual.ClosedError('graph ' + req.graph + ' was released');
      return zeroOutputs(graph);
    }
    case 'releaseGraph':
      if (loadedGraphs.has(req.graph)) loadedGraphs.set(req.graph, null);
      return { released: true };
    case 'ggufInfo':
      throw new actual.InvalidModelError(req.path + ': the Jest mock has no model files');
    default:
      return undefined;
  }
}

function emitEvent(event) {
  const json = JSON.stringify(event);
  for (const l of [...eventListeners]) l(json);
}

/** Session files saved by saveSession: the path and the tokens held (in memory). */
const sessionFiles = new Map();

function modelOf(req) {
  const m = models.get(req.model);
  if (!m) throw new actual.InvalidArgumentError('unknown model ' + JSON.stringify(req.model));
  if (m.released) throw new actual.ClosedError('model ' + req.model + ' is released');
  return m;
}

/** The sequence `params.sequence` (default 0) of model `m`. */
function sequenceOf(m, params) {
  const s = params && params.sequence !== undefined ? params.sequence : 0;
  const n = m.sequences.length;
  if (!Number.isInteger(s) || s < 0 || s >= n) {
    throw new actual.InvalidArgumentError('sequence ' + s + ' does not exist: the model was loaded with nSequences ' + n + ' (sequences 0 to ' + (n - 1) + ')');
  }
  return m.sequences[s];
}

function mockTokenize(text, addSpecial) {
  const tokens = addSpecial === false ? [] : [1];
  for (let i = 0; i < text.length; i++) tokens.push(text.charCodeAt(i));
  return tokens;
}

function mockTemplate(messages, addGenerationPrompt) {
  let out = '<bos>';
  // As Gemma's template: the assistant's turns are the model's.
  for (const m of messages) {
    out += '<start_of_turn>' + (m.role === 'assistant' ? 'model' : m.role) + '\n' + m.content + '<end_of_turn>\n';
  }
  return addGenerationPrompt === false ? out : out + '<start_of_turn>model\n';
}

function mockEmbedding(text) {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (h * 31 + text.charCodeAt(i)) % 1000003;
  const v = [];
  for (let i = 0; i < modelInfo.nEmbd; i++) v.push(1 + ((h + 7 * i) % 13));
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / norm);
}

async function mockGenerate(req) {
  const model = modelOf(req);
  const p = req.params || {};
  const m = sequenceOf(model, p);
  const prompt = p.messages ? mockTemplate(p.messages, true) : p.prompt;
  if (typeof prompt !== 'string') throw new actual.InvalidArgumentError('generate: give exactly one of prompt and messages');
  const promptTokens = mockTokenize(prompt, p.messages ? false : true);
  // As the runtime: the longest prefix the cache holds is reused (one token is always computed).
  let cachedN = 0;
  while (cachedN < m.history.length && cachedN < promptTokens.length - 1 && m.history[cachedN] === promptTokens[cachedN]) cachedN++;
  const promptN = promptTokens.length - cachedN;
  const max = p.maxTokens === undefined ? 256 : p.maxTokens;
  m.cancel = false;
  const tokens = [];
  let text = '';
  let stopReason = 'eog';
  for (let i = 0; i < completionTokens.length; i++) {
    // One token per microtask (not a timer: apps' fake timers do not stall it), or when the
    // test's gate opens.
    await (state.gate ? state.gate() : Promise.resolve());
    if (m.cancel || model.released) {
      stopReason = 'cancelled';
      break;
    }
    if (tokens.length >= max) {
      stopReason = 'length';
      break;
    }
    tokens.push(100 + i);
    text += completionTokens[i];
    emitEvent({ type: 'token', requestId: req.requestId, token: 100 + i, text: completionTokens[i], chunks: [{ kind: 'text', delta: completionTokens[i] }] });
  }
  const n = tokens.length;
  m.history = promptTokens.concat(mockTokenize(text, false));
  return {
    text,
    content: text,
    reasoning: '',
    toolCalls: [],
    probs: [],
    tokens,
    promptTokens: promptTokens.length,
    stopReason,
    timings: {
      promptN,
      promptMs: promptN,
      promptPerSecond: promptN > 0 ? 1000 : 0,
      predictedN: n,
      predictedMs: 10 * n,
      predictedPerSecond: n > 0 ? 100 : 0,
      cachedN,
      constraintMs: 0,
    },
  };
}

async function mockLoad(req) {
  for (const progress of [0, 0.5, 1]) {
    if (state.gate) await state.gate();
    emitEvent({ type: 'loadProgress', requestId: req.requestId, progress });
  }
  const o = req.options || {};
  const n = o.nSequences === undefined ? 1 : o.nSequences;
  if (!Number.isInteger(n) || n < 1 || n > 64) throw new actual.InvalidArgumentError('nSequences ' + n + ' must be between 1 and 64');
  const info = { ...modelInfo, nSequences: n };
  if (typeof o.memoryBudget === 'number' && n * info.cacheBytesPerSequence > o.memoryBudget) {
    const needed = n * info.cacheBytesPerSequence;
    throw new actual.TesseraError(
      'OutOfMemory',
      'nSequences ' + n + ' x ' + info.cacheBytesPerSequence + ' bytes of KV cache per sequence = ' + needed +
        " bytes exceed the model's memory budget of " + o.memoryBudget + ' bytes (memoryBudget)'
    );
  }
  const id = nextModel++;
  const sequences = Array.from({ length: n }, () => ({ cancel: false, history: [] }));
  models.set(id, { released: false, info, sequences });
  return { model: id, info };
}

/** Models "downloaded" in the mock, by name: { name, path, size, sha256, url }. */
const downloaded = new Map();
/** Downloads running: requestId -> { cancel: boolean }. */
const downloads = new Map();
const MOCK_MODELS_DIR = '/mock/files/tessera/models';

async function mockDownload(req) {
  const p = req.params || {};
  const name = p.name || String(p.url).split('?')[0].split('/').pop();
  if (downloaded.has(name)) throw new actual.InvalidArgumentError('downloadModel: ' + name + ' is already downloaded');
  const size = state.downloadSize;
  const d = { cancel: false };
  downloads.set(req.requestId, d);
  try {
    for (const received of [0, size / 2, size]) {
      if (state.gate) await state.gate();
      else await Promise.resolve();
      if (d.cancel) throw new actual.CancelledError('downloadModel: ' + name + ' cancelled');
      emitEvent({ type: 'downloadProgress', requestId: req.requestId, received, total: size });
    }
  } finally {
    downloads.delete(req.requestId);
  }
  const model = { name, path: MOCK_MODELS_DIR + '/' + name, size, sha256: p.sha256.toLowerCase(), url: p.url };
  downloaded.set(name, model);
  return model;
}

function modelAnswer(req) {
  const p = req.params || {};
  switch (req.method) {
    case 'loadModel':
      return mockLoad(req);
    case 'modelInfo':
      return modelOf(req).info;
    case 'tokenize':
      modelOf(req);
      return { tokens: mockTokenize(p.text, p.addSpecial) };
    case 'detokenize':
      modelOf(req);
      return { text: p.tokens.map((t) => (t === 1 ? (p.special ? '<bos>' : '') : String.fromCharCode(t))).join('') };
    case 'applyChatTemplate':
      modelOf(req);
      return { prompt: mockTemplate(p.messages, p.addGenerationPrompt) };
    case 'generate':
      return mockGenerate(req);
    case 'cancelGeneration': {
      const m = modelOf(req);
      if (p.sequence !== undefined) sequenceOf(m, p).cancel = true;
      else for (const s of m.sequences) s.cancel = true;
      return { cancelled: true };
    }
    case 'embed':
      modelOf(req);
      p.texts.forEach((_, i) => emitEvent({ type: 'embedProgress', requestId: req.requestId, done: i + 1, total: p.texts.length }));
      return { embeddings: p.texts.map(mockEmbedding) };
    case 'saveSession': {
      const m = sequenceOf(modelOf(req), p);
      sessionFiles.set(p.path, m.history.slice());
      return { tokens: m.history.length };
    }
    case 'loadSession': {
      const m = sequenceOf(modelOf(req), p);
      m.history = [];
      const saved = sessionFiles.get(p.path);
      if (!saved) throw new actual.StorageError('session file ' + p.path + ': No such file or directory');
      m.history = saved.slice();
      return { tokens: saved.length };
    }
    case 'rerank': {
      // Scores: the cosine of the mock embeddings, highest first.
      modelOf(req);
      const q = mockEmbedding(p.query);
      const results = p.documents.map((d, index) => ({ index, score: mockEmbedding(d).reduce((s, x, i) => s + x * q[i], 0) }));
      return { results: results.sort((a, b) => b.score - a.score || a.index - b.index) };
    }
    case 'cancelLoad':
      // Loads finish within the request: nothing left to cancel.
      return { cancelled: false };
    case 'downloadModel':
      return mockDownload(req);
    case 'cancelDownload': {
      const d = downloads.get(req.requestId);
      if (d) d.cancel = true;
      return { cancelled: Boolean(d) };
    }
    case 'listModels':
      return { directory: MOCK_MODELS_DIR, models: [...downloaded.values()].sort((a, b) => (a.name < b.name ? -1 : 1)) };
    case 'deleteModel':
      return { deleted: downloaded.delete(p.name) };
    case 'releaseModel': {
      const m = models.get(req.model);
      if (m) m.released = true;
      return { released: true };
    }
    default:
      return undefined;
  }
}

function answer(req) {
  switch (req.method) {
    case 'devices':
      return devices;
    case 'cpuFeatures':
      return cpuFeatures;
    case 'buildInfo':
      return buildInfo;
    case 'openSession':
      return { session: nextSession++ };
    case 'cancel':
      return { cancelled: false };
    case 'closeSession':
      return { closed: true };
    case 'closeAllSessions':
      return { closed: 0 };
    case 'setLogLevel':
      return {};
    case 'compute':
      return zeroOutputs(req.graph);
    default: {
      const r = modelAnswer(req) ?? loadedAnswer(req);
      if (r === undefined) throw new actual.InvalidArgumentError('unknown method ' + JSON.stringify(req.method));
      return r;
    }
  }
}

const mockCaller = {
  async call(requestJson) {
    let response;
    try {
      const req = JSON.parse(requestJson);
      requests.push(req);
      response = { ok: await answer(req) };
    } catch (e) {
      response = { error: { kind: (e && e.kind) || 'Internal', message: String((e && e.message) || e) } };
    }
    return JSON.stringify(response);
  },
  toggleNativeLog() {},
  addLogListener(listener) {
    logListeners.add(listener);
    return () => logListeners.delete(listener);
  },
  addEventListener(listener) {
    eventListeners.add(listener);
    return () => eventListeners.delete(listener);
  },
};

actual.setNativeCaller(mockCaller);

module.exports = {
  ...actual,
  /** Replacing the native side in tests of tests is allowed; `null` restores the mock. */
  setNativeCaller(caller) {
    actual.setNativeCaller(caller === null ? mockCaller : caller);
  },
  __mock: {
    requests,
    /** The mock's native side, for raw protocol requests (`caller.call(requestJson)`). */
    caller: mockCaller,
    devices,
    cpuFeatures,
    buildInfo,
    modelInfo,
    /** The texts of the tokens complete() streams (ids 100, 101, ...); replace them freely. */
    completionTokens,
    /**
     * A function returning a promise that each load progress event and each generated token
     * waits for (to hold a load or a completion mid-way and check a UI while it runs); `null`
     * (the default): loads answer at once, tokens come one per microtask.
     */
    get gate() {
      return state.gate;
    },
    set gate(gate) {
      state.gate = gate;
    },
    emitLog(event) {
      for (const l of [...logListeners]) l(event);
    },
    reset() {
      requests.length = 0;
      nextSession = 1;
      nextModel = 1;
      models.clear();
      nextGraph = 1;
      loadedGraphs.clear();
      completionTokens.splice(0, completionTokens.length, ...DEFAULT_COMPLETION);
      state.gate = null;
      downloaded.clear();
      actual.setNativeCaller(mockCaller);
    },
  },
};
