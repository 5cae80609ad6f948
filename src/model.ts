/**
 * Language models: {@link loadModel} reads a GGUF file on the device into a
 * {@link LanguageModel}, which tokenizes, renders chat templates, streams completions and
 * computes embeddings, all off the JS thread (the native protocol's model methods,
 * docs/native-protocol.md).
 *
 * @packageDocumentation
 */

import { newRequestId, onRequestEvents, request, type NativeEvent } from './caller';
import { defineAsyncDispose, type AbortSignalLike } from './compute';
import { Platform } from 'react-native';
import { CancelledError, ClosedError, InvalidArgumentError } from './errors';

/** How to load a model (the protocol's `loadModel` options). */
export interface LoadModelOptions {
  /**
   * A device name from {@link getDevices} (case-insensitive), or `"auto"` (the default): a
   * hardware GPU when there is one, else the CPU.
   */
  device?: string;
  /** CPU threads (1 to 512); `null` or absent for the performance cores. */
  threads?: number | null;
  /**
   * Positions of the context (its KV cache): prompt and completion together. Default 4096, or
   * the model's training context when that is smaller.
   */
  nCtx?: number;
  /** Prompt tokens computed per batch (default 512). */
  nBatch?: number;
  /**
   * Conversations the model holds at once (llama.rn's `n_parallel`), 1 to 64 (default 1): each
   * a sequence with its own KV cache of `nCtx` positions, sharing the weights; completions
   * pick one with {@link CompletionOptions.sequence}. A sequence's cache is allocated on its
   * first use; {@link ModelInfo.cacheBytesPerSequence} says how large it is.
   */
  nSequences?: number;
  /**
   * Bytes the sequences' KV caches may take together; `null` or absent for 75% of the free
   * memory once the weights are placed (the CPU's; for a GPU model the host's, as the GPU
   * reports no heap size). `nSequences` caches that do not fit
   * reject the load with a `TesseraError` of kind `OutOfMemory` naming the figures.
   */
  memoryBudget?: number | null;
  /**
   * The KV cache's key type (llama.rn: `cache_type_k`): `"f16"` (default), `"q8_0"` (about half
   * the memory) or `"q4_0"` (about a quarter); `modelInfo.kvBytesPerToken` tells the result.
   */
  cacheTypeK?: KvCacheType;
  /** The KV cache's value type (llama.rn: `cache_type_v`), as {@link LoadModelOptions.cacheTypeK}. */
  cacheTypeV?: KvCacheType;
  /**
   * Cancels the load: the promise rejects at once with a {@link CancelledError}, the core
   * stops placing weights at its next progress step, and a model that was already loaded
   * when the cancel arrived is released.
   */
  signal?: AbortSignalLike;
}

/** Receives the fraction of the weights placed while a model loads, from 0 to 1. */
export type LoadProgressCallback = (progress: number) => void;

/** What a loaded model is. */
export interface ModelInfo {
  /** `general.architecture`: "gemma3", "llama", "phi3", "qwen2", "qwen3", "smollm3". */
  architecture: string;
  /** `general.name`, or `null` when the file has none. */
  name: string | null;
  /** Parameters (elements of every weight). */
  nParams: number;
  /** Bytes of the weights. */
  sizeBytes: number;
  /** The quantization by `general.file_type` ("Q4_K_M", ...), or the most common weight type. */
  quantization: string;
  /** The context the model was trained with. */
  nCtxTrain: number;
  /** The context of this load (see {@link LoadModelOptions.nCtx}). */
  nCtx: number;
  /** Tokens in the vocabulary. */
  nVocab: number;
  /** Width of the hidden state (the length of an embedding). */
  nEmbd: number;
  /** Transformer blocks. */
  nLayer: number;
  /** The device running it. */
  device: string;
  /** Whether the model has a chat template (its own, or the built-in Gemma one). */
  hasChatTemplate: boolean;
  /** Bytes of weights read in place from the mapped file. */
  mappedBytes: number;
  /** Sequences (conversations) of this load (see {@link LoadModelOptions.nSequences}); 0 for an embedding model. */
  nSequences: number;
  /** Bytes of device memory the KV cache (and recurrent states) of one sequence takes; 0 for an embedding model. */
  cacheBytesPerSequence: number;
  /**
   * Bytes of keys and values one token takes in the KV cache, over every attention layer, with
   * the load's cache types (0 for an embedding model, which keeps no cache).
   */
  kvBytesPerToken: number;
}

/** A KV cache element type: F16, or 8-bit / 4-bit blocks of 32 values (ggml's Q8_0 / Q4_0). */
export type KvCacheType = 'f16' | 'q8_0' | 'q4_0';

/** A tool call: of an answer ({@link CompletionResult.toolCalls}) or of an assistant message. */
export interface ToolCall {
  /** The call's id (the model's, or made up from the answer where its format has none). */
  id: string;
  /** The function's name. */
  name: string;
  /** The arguments (a JSON object; valid against the tool's `parameters`). */
  arguments: Record<string, unknown>;
}

/** A chat message. */
export interface ChatMessage {
  /** "system", "user", "assistant", "tool" (or another role the template knows). */
  role: string;
  /** The text (`null` for an assistant message with only tool calls). */
  content: string | null;
  /** An assistant message's tool calls (`arguments` an object, or a string holding one). */
  toolCalls?: ReadonlyArray<{ id?: string; name: string; arguments: Record<string, unknown> | string }>;
  /** A `tool` message: the id of the call it answers. */
  toolCallId?: string;
  /** A `tool` message: the tool's name. */
  name?: string;
  /** An assistant message's reasoning (templates such as Qwen 3's render it). */
  reasoningContent?: string;
}

/**
 * A piece of the answer while it streams, typed by what it extends. The `text` chunks of a
 * completion add up to {@link CompletionResult.content}, the `reasoning` chunks to its
 * `reasoning`, and a call's `toolCallArguments` chunks to the JSON text of its `arguments`.
 */
export type CompletionChunk =
  | { type: 'text'; text: string }
  | { type: 'reasoning'; text: string }
  | { type: 'toolCallName'; index: number; name: string }
  | { type: 'toolCallArguments'; index: number; text: string };

/** A candidate token of one step with its probability after the sampler chain. */
export interface TokenProbability {
  /** The token id. */
  token: number;
  /** Its text. */
  text: string;
  /** Its probability. */
  prob: number;
}

/** One generated token's candidates (llama.rn's `completion_probabilities` entry). */
export interface TokenProbs {
  /** The token drawn. */
  token: number;
  /** Its text. */
  text: string;
  /** The `nProbs` most likely candidates, most likely first. */
  probs: TokenProbability[];
}

/** One generated token. */
export interface TokenEvent {
  /** The token id. */
  token: number;
  /**
   * The raw text this token completes: empty while part of a character or a possible stop
   * string is held back, which a later event then carries. The texts of all events add up to the
   * result's text.
   */
  text: string;
  /** The pieces of the answer this token made certain (reasoning, text, tool calls), typed. */
  chunks: CompletionChunk[];
  /** With `nProbs`, this step's most likely candidates. */
  probs?: TokenProbability[];
}

/** The shape the answer must have, enforced token by token (llama.rn's `response_format`). */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; schema: Record<string, unknown> | boolean };

/** A tool the model may call (OpenAI's function definition). */
export interface ToolDefinition {
  type: 'function';
  function: {
    /** The function's name. */
    name: string;
    /** What it does. */
    description?: string;
    /** A JSON Schema of its arguments (an object). */
    parameters?: Record<string, unknown>;
  };
}

/** Sampling, stops and streaming of {@link LanguageModel.complete}. */
export interface CompletionOptions {
  /** Most tokens to generate (default 256; llama.rn's `n_predict`). */
  maxTokens?: number;
  /** Strings that end the text where they appear; never part of the text or the events. */
  stop?: string[];
  /** Sampling temperature, 0 for greedy (default 0.8). */
  temperature?: number;
  /** Keep the `topK` most likely tokens, 0 for all (default 40). */
  topK?: number;
  /** Nucleus sampling, 1 for off (default 0.95). */
  topP?: number;
  /** Drop tokens below `minP` times the top probability, 0 for off (default 0.05). */
  minP?: number;
  /** Locally typical sampling, 1 for off (default 1). */
  typicalP?: number;
  /** Repetition penalty over the last `penaltyLastN` tokens, 1 for off (default 1; llama.rn's `penalty_repeat`). */
  repeatPenalty?: number;
  /** Frequency penalty, 0 for off (llama.rn's `penalty_freq`). */
  frequencyPenalty?: number;
  /** Presence penalty, 0 for off (llama.rn's `penalty_present`). */
  presencePenalty?: number;
  /** Tokens the penalties look back over (default 64). */
  penaltyLastN?: number;
  /** `[token, bias]` pairs added to the logits before sampling; `false` bans the token. */
  logitBias?: ReadonlyArray<readonly [number, number | false]>;
  /** Seed of the draw: the same seed gives the same text. Absent: random. */
  seed?: number;
  /** Keep generating past end-of-generation tokens. */
  ignoreEos?: boolean;
  /**
   * The shape of the answer: `{ type: 'json_schema', schema }` (JSON valid against the schema)
   * or `{ type: 'json_object' }`, enforced on every token so the text always parses. A schema
   * the engine cannot use rejects with an {@link InvalidArgumentError} before any token.
   */
  responseFormat?: ResponseFormat;
  /** A grammar in llama.cpp's GBNF (`root` is the start rule) the answer must match. */
  grammar?: string;
  /** A regular expression the whole answer must match. */
  regex?: string;
  /** Tools the model may call (messages only); its calls are parsed into `toolCalls`. */
  tools?: readonly ToolDefinition[];
  /** `'auto'` (default), `'none'`, `'required'`, or the name of the function to call. */
  toolChoice?: 'auto' | 'none' | 'required' | (string & {});
  /** `enable_thinking` for the template (Qwen 3, SmolLM3, ...); absent: the template's default. */
  enableThinking?: boolean;
  /** `'auto'` (default) puts `<think>…</think>` into `reasoning`; `'none'` leaves it in `content`. */
  reasoningFormat?: 'none' | 'auto';
  /** At most this many tokens of reasoning; then `</think>` is written for the model. */
  thinkingBudget?: number;
  /** Further template variables; they override the standard ones. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** A Jinja chat template to use instead of the model's. */
  chatTemplate?: string;
  /** Report each generated token's `nProbs` most likely candidates (events' and result's `probs`). */
  nProbs?: number;
  /**
   * The sequence (conversation) to generate on, 0 to `nSequences - 1` of the load (default 0;
   * llama.cpp server's `id_slot`). Completions on one sequence run one after the other;
   * completions on different sequences run at the same time.
   */
  sequence?: number;
  /**
   * When the context is full, discard the oldest half of what follows the first `nKeep` tokens
   * and go on (llama.cpp's context shift) instead of ending with `stopReason` `"context"`.
   * Default false. Models with recurrent layers (LFM2, Qwen 3.5) reject it (error kind
   * `Unsupported`, thrown as `DTypeError`).
   */
  contextShift?: boolean;
  /**
   * With `contextShift`: the tokens a shift keeps at the start, after the BOS token (kept
   * besides); -1 keeps the whole prompt (at most `nCtx - 4` tokens of it). Default 0; at most
   * `nCtx - 4` with the BOS token.
   */
  nKeep?: number;
  /**
   * Stops the generation when aborted: the result resolves with the text so far and
   * `stopReason` `"cancelled"` (it never rejects because of the signal).
   */
  signal?: AbortSignalLike;
  /**
   * Called with each token as it arrives (before the async iterator sees it). If it throws, the
   * generation stops and the result rejects with that error.
   */
  onToken?: (event: TokenEvent) => void;
}

/**
 * Why a completion ended: `"eog"` (an end-of-generation or end-of-turn token), `"stop"` (a stop
 * string), `"length"` (`maxTokens`), `"context"` (the context is full), `"cancelled"` (a signal,
 * {@link Completion.stop}, {@link LanguageModel.stopCompletion} or {@link LanguageModel.release}).
 */
export type StopReason = 'eog' | 'stop' | 'length' | 'context' | 'cancelled';

/** Time spent, with llama.rn's names (its `timings` object). */
export interface CompletionTimings {
  /** Prompt tokens computed (those reused from the KV cache not counted). */
  prompt_n: number;
  /** Milliseconds spent on them. */
  prompt_ms: number;
  /** Milliseconds per prompt token (0 when none). */
  prompt_per_token_ms: number;
  /** Prompt tokens per second. */
  prompt_per_second: number;
  /** Tokens generated. */
  predicted_n: number;
  /** Milliseconds spent generating. */
  predicted_ms: number;
  /** Milliseconds per generated token (0 when none). */
  predicted_per_token_ms: number;
  /** Generated tokens per second. */
  predicted_per_second: number;
  /** Prompt tokens reused from the KV cache (llama.rn's `cache_n`). */
  cache_n: number;
  /**
   * The same as {@link CompletionTimings.cache_n}, under this package's first name for it.
   *
   * @deprecated Use `cache_n` (llama.rn's name); `cached_n` goes away in the next release.
   */
  cached_n: number;
  /** Milliseconds spent computing the output constraint's token masks (part of `predicted_ms`). */
  constraint_ms: number;
}

/** The result of a completion. */
export interface CompletionResult {
  /** The raw generated text (a stop string excluded). */
  text: string;
  /** The answer for the user: `text` without the reasoning and the tool calls, trimmed. */
  content: string;
  /** The reasoning (with `reasoningFormat` `'auto'`), empty if none. */
  reasoning: string;
  /** The tool calls parsed from the answer (with `tools`). */
  toolCalls: ToolCall[];
  /** With `nProbs`, each generated token's candidates (llama.rn's `completion_probabilities`). */
  probs?: TokenProbs[];
  /** The generated token ids. */
  tokens: number[];
  /** Tokens of the prompt (the rendered chat for messages). */
  promptTokens: number;
  /** Why it ended. */
  stopReason: StopReason;
  /** Time spent. */
  timings: CompletionTimings;
}

/**
 * A completion in progress: an async iterable of its {@link TokenEvent}s, and the promise of
 * its {@link CompletionResult}.
 *
 * ```ts
 * const c = model.complete('The capital of France is', { maxTokens: 32, signal });
 * for await (const { text } of c) process.stdout.write(text);
 * const { stopReason, timings } = await c.result;
 * ```
 *
 * Every iteration starts from the first token (events are kept until the completion is
 * garbage). Leaving a `for await` loop early (`break`, `return`, an exception) stops the
 * generation. The iteration throws what the result rejects with.
 */
export interface Completion extends AsyncIterable<TokenEvent> {
  /** The request's id, which tags its native events. */
  readonly requestId: string;
  /** Resolves when the generation ends; rejects with a {@link TesseraError}. */
  readonly result: Promise<CompletionResult>;
  /** Stops the generation (the result resolves with `stopReason` `"cancelled"`). */
  stop(): void;
  /**
   * The typed pieces of the answer as they stream (reasoning, text, tool call names and
   * arguments), from the first.
   */
  chunks(): AsyncIterable<CompletionChunk>;
}

/** Options of {@link LanguageModel.tokenize}. */
export interface TokenizeOptions {
  /** Add BOS (and EOS) as the model asks (default true). */
  addSpecial?: boolean;
  /** Recognize special tokens written in the text, such as `<start_of_turn>` (default true). */
  parseSpecial?: boolean;
}

/** Options of {@link LanguageModel.detokenize}. */
export interface DetokenizeOptions {
  /** Render special tokens as their text (default false: they are left out). */
  special?: boolean;
}

/** Options of {@link LanguageModel.applyChatTemplate}. */
export interface ChatTemplateOptions {
  /** End with the opening of the assistant's turn (default true). */
  addGenerationPrompt?: boolean;
}

/** Options of {@link LanguageModel.rerank}. */
export interface RerankOptions {
  /** Map the scores (logits) through the logistic function into (0, 1) (default false). */
  normalize?: boolean;
}

/** One document's relevance to the query (llama.rn's rerank result). */
export interface RerankResult {
  /** The document's position in the input. */
  index: number;
  /** Its score (higher: more relevant). */
  score: number;
  /** The document. */
  document: string;
}

/** Options of {@link LanguageModel.saveSession} and {@link LanguageModel.loadSession}. */
export interface SessionFileOptions {
  /** The sequence (conversation), 0 to `nSequences - 1` of the load (default 0). */
  sequence?: number;
}

/** Options of {@link LanguageModel.embed}. */
export interface EmbedOptions {
  /** `"mean"`, `"last"` or `"first"`; absent: the model's own pooling, or mean. */
  pooling?: 'mean' | 'last' | 'first';
  /**
   * Called after each text is embedded with how many are done and how many there are (an
   * exception it throws is ignored). `stopCompletion()` stops an `embed` of many texts between
   * two of them: it rejects with a `CancelledError`.
   */
  onProgress?: (done: number, total: number) => void;
}

// --------------------------------------------------------------------------- checks

/** llama.rn's names of the options, with the name they have here. */
const LLAMA_RN_NAMES: Record<string, string> = {
  model: 'the first argument of loadModel',
  n_ctx: 'nCtx',
  n_batch: 'nBatch',
  n_parallel: 'nSequences',
  id_slot: 'sequence',
  cache_type_k: 'cacheTypeK',
  cache_type_v: 'cacheTypeV',
  n_threads: 'threads',
  n_gpu_layers: 'device',
  prompt: 'the first argument of complete',
  messages: 'the first argument of complete',
  n_predict: 'maxTokens',
  top_k: 'topK',
  top_p: 'topP',
  min_p: 'minP',
  typical_p: 'typicalP',
  penalty_repeat: 'repeatPenalty',
  repeat_penalty: 'repeatPenalty',
  penalty_freq: 'frequencyPenalty',
  frequency_penalty: 'frequencyPenalty',
  penalty_present: 'presencePenalty',
  presence_penalty: 'presencePenalty',
  penalty_last_n: 'penaltyLastN',
  repeat_last_n: 'penaltyLastN',
  logit_bias: 'logitBias',
  ignore_eos: 'ignoreEos',
  response_format: 'responseFormat',
  json_schema: 'responseFormat',
  tool_choice: 'toolChoice',
  enable_thinking: 'enableThinking',
  reasoning_format: 'reasoningFormat',
  thinking_budget_tokens: 'thinkingBudget',
  chat_template_kwargs: 'chatTemplateKwargs',
  chat_template: 'chatTemplate',
  n_probs: 'nProbs',
  n_keep: 'nKeep',
  ctx_shift: 'contextShift',
};

function checkOptions(what: string, options: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new InvalidArgumentError(`${what}: options must be an object, got ${describe(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (allowed.includes(key)) continue;
    const hint = LLAMA_RN_NAMES[key];
    throw new InvalidArgumentError(
      `${what}: unknown option "${key}"` + (hint ? ` (llama.rn's name; here: ${hint})` : `; known: ${allowed.join(', ')}`)
    );
  }
  return options as Record<string, unknown>;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'string' ? JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v) : typeof v;
}

function checkMessages(what: string, messages: unknown): ChatMessage[] {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new InvalidArgumentError(`${what}: messages must be a non-empty array of { role, content }`);
  }
  return messages.map((m: unknown, i) => {
    const r = m as Partial<Record<keyof ChatMessage, unknown>> | null;
    const toolCalls = r?.toolCalls !== undefined && r.toolCalls !== null;
    if (
      r === null ||
      typeof r !== 'object' ||
      typeof r.role !== 'string' ||
      !(typeof r.content === 'string' || (r.content === null && toolCalls))
    ) {
      throw new InvalidArgumentError(`${what}: message ${i} must be { role: string, content: string }, got ${describe(m)}`);
    }
    const out: ChatMessage = { role: r.role, content: r.content };
    for (const key of ['toolCalls', 'toolCallId', 'name', 'reasoningContent'] as const) {
      if (r[key] !== undefined && r[key] !== null) (out as unknown as Record<string, unknown>)[key] = r[key];
    }
    if (toolCalls && !Array.isArray(r.toolCalls)) {
      throw new InvalidArgumentError(`${what}: message ${i}: toolCalls must be an array of { id, name, arguments }`);
    }
    return out;
  });
}

/** A session file's path from a path or a `file://` URI. */
function sessionPath(method: string, path: unknown): string {
  if (typeof path !== 'string' || path.length === 0) {
    throw new InvalidArgumentError(`${method}: the path must be a non-empty string, got ${describe(path)}`);
  }
  if (path.startsWith('file://')) {
    const rest = path.slice('file://'.length);
    try {
      return decodeURIComponent(rest);
    } catch {
      return rest;
    }
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(path)) {
    throw new InvalidArgumentError(`${method}: ${describe(path)} is not a file path`);
  }
  return path;
}

/** A path from a path or a `file://` URI (what document pickers and file libraries give). */
function filePath(path: unknown): string {
  if (typeof path !== 'string' || path.length === 0) {
    throw new InvalidArgumentError(`loadModel: the path must be a non-empty string, got ${describe(path)}`);
  }
  if (path.startsWith('file://')) {
    const rest = path.slice('file://'.length);
    try {
      return decodeURIComponent(rest);
    } catch {
      return rest;
    }
  }
  // Android's storage access framework: the module opens it through the content resolver.
  if (path.startsWith('content://') && Platform.OS === 'android') return path;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(path)) {
    throw new InvalidArgumentError(
      `loadModel: ${describe(path)} is not a file path` +
        (path.startsWith('content://') ? ' (content:// URIs are Android\'s)' : '') +
        "; copy the file into the app's storage first (a document picker's local copy, or downloadModel) and pass that path"
    );
  }
  return path;
}

// --------------------------------------------------------------------------- native shapes

interface NativeTimings {
  promptN: number;
  promptMs: number;
  promptPerSecond: number;
  predictedN: number;
  predictedMs: number;
  predictedPerSecond: number;
  cachedN: number;
  constraintMs?: number;
}

interface NativeToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

interface NativeGenerateResult {
  text: string;
  tokens: number[];
  promptTokens: number;
  stopReason: StopReason;
  timings: NativeTimings;
  content: string;
  reasoning: string;
  toolCalls: NativeToolCall[];
  probs: TokenProbs[];
}

/** A native stream chunk (`{kind, index?, delta}`) as a {@link CompletionChunk}. */
function chunkFrom(c: { kind?: unknown; index?: unknown; delta?: unknown }): CompletionChunk | null {
  const delta = typeof c.delta === 'string' ? c.delta : '';
  const index = Number(c.index ?? 0);
  switch (c.kind) {
    case 'text':
      return { type: 'text', text: delta };
    case 'reasoning':
      return { type: 'reasoning', text: delta };
    case 'toolCallName':
      return { type: 'toolCallName', index, name: delta };
    case 'toolCallArguments':
      return { type: 'toolCallArguments', index, text: delta };
    default:
      return null;
  }
}

/** The token event of a native `token` event. */
function tokenEventFrom(e: NativeEvent): TokenEvent {
  const chunks = Array.isArray(e.chunks) ? (e.chunks as Array<Record<string, unknown>>).map(chunkFrom).filter((c): c is CompletionChunk => c !== null) : [];
  const event: TokenEvent = { token: Number(e.token), text: typeof e.text === 'string' ? e.text : '', chunks };
  if (Array.isArray(e.probs)) event.probs = e.probs as TokenProbability[];
  return event;
}

/** The result of a native `generate` reply. */
function resultFrom(r: NativeGenerateResult): CompletionResult {
  const result: CompletionResult = {
    text: r.text,
    content: r.content ?? r.text,
    reasoning: r.reasoning ?? '',
    toolCalls: (r.toolCalls ?? []).map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
    tokens: r.tokens,
    promptTokens: r.promptTokens,
    stopReason: r.stopReason,
    timings: timingsFrom(r.timings),
  };
  if (r.probs && r.probs.length > 0) result.probs = r.probs;
  return result;
}

function timingsFrom(t: NativeTimings): CompletionTimings {
  return {
    prompt_n: t.promptN,
    prompt_ms: t.promptMs,
    prompt_per_token_ms: t.promptN > 0 ? t.promptMs / t.promptN : 0,
    prompt_per_second: t.promptPerSecond,
    predicted_n: t.predictedN,
    predicted_ms: t.predictedMs,
    predicted_per_token_ms: t.predictedN > 0 ? t.predictedMs / t.predictedN : 0,
    predicted_per_second: t.predictedPerSecond,
    cache_n: t.cachedN,
    cached_n: t.cachedN,
    constraint_ms: t.constraintMs ?? 0,
  };
}

function cancelledBeforeStart(): CompletionResult {
  return {
    text: '',
    content: '',
    reasoning: '',
    toolCalls: [],
    tokens: [],
    promptTokens: 0,
    stopReason: 'cancelled',
    timings: timingsFrom({ promptN: 0, promptMs: 0, promptPerSecond: 0, predictedN: 0, predictedMs: 0, predictedPerSecond: 0, cachedN: 0 }),
  };
}

const COMPLETION_OPTIONS = [
  'maxTokens',
  'stop',
  'temperature',
  'topK',
  'topP',
  'minP',
  'typicalP',
  'repeatPenalty',
  'frequencyPenalty',
  'presencePenalty',
  'penaltyLastN',
  'logitBias',
  'seed',
  'ignoreEos',
  'responseFormat',
  'grammar',
  'regex',
  'tools',
  'toolChoice',
  'enableThinking',
  'reasoningFormat',
  'thinkingBudget',
  'chatTemplateKwargs',
  'chatTemplate',
  'nProbs',
  'sequence',
  'contextShift',
  'nKeep',
  'signal',
  'onToken',
] as const;

/** The protocol's `generate` params for `input` and `options` (JS-only options left out). */
function generateParams(input: unknown, options: Record<string, unknown>): Record<string, unknown> {
  const params: Record<string, unknown> = {};
  if (typeof input === 'string') params.prompt = input;
  else if (Array.isArray(input)) params.messages = checkMessages('complete', input);
  else throw new InvalidArgumentError(`complete: expected a prompt string or an array of messages, got ${describe(input)}`);
  for (const key of COMPLETION_OPTIONS) {
    if (key === 'signal' || key === 'onToken' || options[key] === undefined) continue;
    params[key] = options[key];
  }
  if (options.onToken !== undefined && typeof options.onToken !== 'function') {
    throw new InvalidArgumentError(`complete: onToken must be a function, got ${describe(options.onToken)}`);
  }
  checkSignal('complete', options.signal);
  if (options.sequence !== undefined) checkSequence('complete', options.sequence);
  return params;
}

/** `sequence` checked to be a sequence number (its range is the core's to check). */
function checkSequence(what: string, sequence: unknown): number {
  if (typeof sequence !== 'number' || !Number.isInteger(sequence) || sequence < 0 || sequence > 0xffffffff) {
    throw new InvalidArgumentError(`${what}: sequence must be a whole number from 0, got ${describe(sequence)}`);
  }
  return sequence;
}

/** The sequence of a saveSession / loadSession call's options (absent: the core's default, 0). */
function sessionSequence(what: string, options: unknown): number | undefined {
  const o = checkOptions(what, options, ['sequence']);
  return o.sequence === undefined ? undefined : checkSequence(what, o.sequence);
}

// --------------------------------------------------------------------------- streams

/** The events of one completion: kept, handed to `onToken`, iterated any number of times. */
class TokenStream {
  readonly events: TokenEvent[] = [];
  private waiters: Array<() => void> = [];
  private ended: { error: unknown } | { error?: undefined } | null = null;
  /** The first exception of `onToken`, if any. */
  callbackError: { error: unknown } | null = null;

  constructor(
    private readonly onToken: ((e: TokenEvent) => void) | undefined,
    private readonly stop: () => void
  ) {}

  push(event: TokenEvent): void {
    if (this.ended) return;
    this.events.push(event);
    if (this.onToken && !this.callbackError) {
      try {
        this.onToken(event);
      } catch (e) {
        this.callbackError = { error: e };
        this.stop();
      }
    }
    this.wake();
  }

  /**
   * Ends the stream with the result. Token events still on their way when the result arrived
   * (the platform may deliver events and the promise through different queues) are made up
   * from it: the missing ids, the missing text on the last one.
   */
  finish(r: CompletionResult): void {
    if (this.events.length < r.tokens.length) {
      const streamed = this.events.map((e) => e.text).join('');
      const rest = r.text.startsWith(streamed) ? r.text.slice(streamed.length) : '';
      for (let i = this.events.length; i < r.tokens.length; i++) {
        this.push({ token: r.tokens[i]!, text: i === r.tokens.length - 1 ? rest : '', chunks: [] });
      }
    }
    this.ended = {};
    this.wake();
  }

  fail(error: unknown): void {
    this.ended = { error };
    this.wake();
  }

  get isEnded(): boolean {
    return this.ended !== null;
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const resolve of w) resolve();
  }

  /** The typed chunks of the events, in order, as they arrive. */
  async *chunks(): AsyncGenerator<CompletionChunk> {
    const it = this.iterator();
    try {
      for (;;) {
        const n = await it.next();
        if (n.done) return;
        yield* n.value.chunks;
      }
    } finally {
      await it.return?.();
    }
  }

  iterator(): AsyncIterator<TokenEvent> {
    let i = 0;
    let left = false;
    return {
      next: async (): Promise<IteratorResult<TokenEvent>> => {
        for (;;) {
          if (left) return { value: undefined, done: true };
          if (i < this.events.length) return { value: this.events[i++]!, done: false };
          const ended = this.ended;
          if (ended) {
            if ('error' in ended && ended.error !== undefined) throw ended.error;
            return { value: undefined, done: true };
          }
          await new Promise<void>((resolve) => this.waiters.push(resolve));
        }
      },
      return: async (): Promise<IteratorResult<TokenEvent>> => {
        left = true;
        if (!this.ended) this.stop();
        return { value: undefined, done: true };
      },
    };
  }
}

const noop = (): void => {};


// --------------------------------------------------------------------------- the model

/**
 * A loaded language model and its contexts (a KV cache per sequence, see
 * {@link LoadModelOptions.nSequences}). Get one with {@link loadModel}.
 *
 * Completions of one sequence run one at a time, in call order, and embeddings and reranks
 * queue with the completions of sequence 0; completions on different sequences run at the
 * same time. Tokenize,
 * detokenize and applyChatTemplate run at once; several models run side by side. Call
 * {@link LanguageModel.release} (or `await using`) to free its memory; later calls reject
 * with a {@link ClosedError}.
 */
export class LanguageModel {
  /** The model's number in the native model table. */
  readonly id: number;
  /** What the model is. */
  readonly info: Readonly<ModelInfo>;
  /** The file it was loaded from. */
  readonly path: string;
  private released = false;
  private releasing: Promise<void> | null = null;
  /**
   * The work on each sequence's context, one at a time per sequence (embeddings and reranks
   * queue on sequence 0, as they did before there were sequences).
   */
  private readonly tails = new Map<number, Promise<void>>();
  /** Stops of the completions not ended yet. */
  private readonly live = new Set<() => void>();

  /** @internal Use {@link loadModel}. */
  constructor(id: number, info: ModelInfo, path: string) {
    this.id = id;
    this.info = Object.freeze({ ...info });
    this.path = path;
    liveModels.add(this);
  }

  /** Whether {@link LanguageModel.release} was called. */
  get isReleased(): boolean {
    return this.released;
  }

  private closedError(): ClosedError {
    return new ClosedError(`model ${this.id} is released`);
  }

  private async call<T>(method: string, params: Record<string, unknown>): Promise<T> {
    if (this.released) throw this.closedError();
    return request<T>({ method, model: this.id, params });
  }

  /** Runs `work` after the earlier work on `sequence`'s context. */
  private exclusive<T>(work: () => Promise<T>, sequence = 0): Promise<T> {
    const run = (this.tails.get(sequence) ?? Promise.resolve()).then(work);
    const tail = run.then(noop, noop);
    this.tails.set(sequence, tail);
    // A sequence's queue that emptied is forgotten.
    void tail.then(() => {
      if (this.tails.get(sequence) === tail) this.tails.delete(sequence);
    });
    return run;
  }

  /**
   * The token ids of `text` (llama.rn: `tokenize(text)` resolving to `{ tokens }`).
   *
   * @param text - the text
   * @param options - BOS and special-token handling
   */
  async tokenize(text: string, options?: TokenizeOptions): Promise<number[]> {
    const o = checkOptions('tokenize', options, ['addSpecial', 'parseSpecial']);
    if (typeof text !== 'string') throw new InvalidArgumentError(`tokenize: text must be a string, got ${describe(text)}`);
    const r = await this.call<{ tokens: number[] }>('tokenize', { text, ...o });
    return r.tokens;
  }

  /**
   * The text of `tokens`.
   *
   * @param tokens - token ids (each below `info.nVocab`)
   * @param options - whether special tokens are rendered
   */
  async detokenize(tokens: readonly number[], options?: DetokenizeOptions): Promise<string> {
    const o = checkOptions('detokenize', options, ['special']);
    if (!Array.isArray(tokens)) throw new InvalidArgumentError(`detokenize: tokens must be an array of token ids, got ${describe(tokens)}`);
    const r = await this.call<{ text: string }>('detokenize', { tokens, ...o });
    return r.text;
  }

  /**
   * The prompt `messages` render to with the model's chat template (llama.rn:
   * `getFormattedChat`).
   *
   * @param messages - the conversation
   * @param options - whether to open the assistant's turn
   */
  async applyChatTemplate(messages: readonly ChatMessage[], options?: ChatTemplateOptions): Promise<string> {
    const o = checkOptions('applyChatTemplate', options, ['addGenerationPrompt']);
    const r = await this.call<{ prompt: string }>('applyChatTemplate', { messages: checkMessages('applyChatTemplate', messages), ...o });
    return r.prompt;
  }

  /**
   * Generates a continuation of a prompt, or the assistant's reply to `messages` (rendered with
   * the model's chat template), streaming its tokens (llama.rn: `completion(params, callback)`).
   *
   * Never throws: every error (bad options, a released model, the core's errors) rejects
   * `result` and ends the iteration with it.
   *
   * @param input - a prompt (BOS added as the model asks, special tokens parsed), or messages
   * @param options - sampling, stops, `signal`, `onToken`
   */
  complete(input: string | readonly ChatMessage[], options?: CompletionOptions): Completion {
    const requestId = newRequestId();
    let state: 'queued' | 'running' | 'done' = 'queued';
    let stopped = false;
    let cancelling: Promise<void> | null = null;
    const sequence = typeof options?.sequence === 'number' ? options.sequence : 0;
    const sendCancel = (): void => {
      if (state !== 'running' || cancelling) return;
      cancelling = request({ method: 'cancelGeneration', model: this.id, params: { sequence } }).then(
        () => {
          cancelling = null;
        },
        () => {
          cancelling = null;
        }
      );
    };
    const stop = (): void => {
      if (stopped || state === 'done') return;
      stopped = true;
      sendCancel();
    };
    const stream = new TokenStream(options?.onToken, stop);

    const start = (): { params: Record<string, unknown>; signal: AbortSignalLike | undefined } => {
      if (this.released) throw this.closedError();
      const o = checkOptions('complete', options, COMPLETION_OPTIONS);
      return { params: generateParams(input, o), signal: o.signal as AbortSignalLike | undefined };
    };

    let result: Promise<CompletionResult>;
    try {
      const { params, signal } = start();
      const onAbort = (): void => stop();
      if (signal?.aborted) stopped = true;
      else signal?.addEventListener('abort', onAbort, { once: true });
      this.live.add(stop);
      const run = async (): Promise<CompletionResult> => {
        if (stopped) return cancelledBeforeStart();
        if (this.released) throw this.closedError();
        state = 'running';
        const off = onRequestEvents(requestId, (e: NativeEvent) => {
          if (e.type !== 'token') return;
          stream.push(tokenEventFrom(e));
          // A cancel sent before the core began the generation is not seen by it: again.
          if (stopped) sendCancel();
        });
        try {
          if (stopped) sendCancel();
          const r = await request<NativeGenerateResult>({ method: 'generate', model: this.id, requestId, params });
          return resultFrom(r);
        } finally {
          off();
          state = 'done';
          // A cancel still on its way must not reach the next work on the context.
          while (cancelling) await cancelling;
        }
      };
      result = this.exclusive(run, sequence)
        .finally(() => {
          state = 'done';
          this.live.delete(stop);
          signal?.removeEventListener('abort', onAbort);
        })
        .then((r) => {
          stream.finish(r);
          if (stream.callbackError) throw stream.callbackError.error;
          return r;
        });
    } catch (e) {
      state = 'done';
      result = Promise.reject(e);
    }
    result = result.catch((e: unknown) => {
      if (!stream.isEnded) stream.fail(e);
      throw e;
    });
    // Errors reach the iteration too; a caller that only iterates is not warned twice.
    result.catch(noop);
    return {
      requestId,
      result,
      stop,
      chunks: () => stream.chunks(),
      [Symbol.asyncIterator]: () => stream.iterator(),
    };
  }

  /** Stops every completion of this model, running or queued (llama.rn: `stopCompletion`). */
  stopCompletion(): void {
    for (const stop of [...this.live]) stop();
  }

  /**
   * The L2-normalized embedding of a text, or of each of several texts (llama.rn: `embedding`,
   * one text, resolving to `{ embedding }`).
   *
   * @param input - a text or texts
   * @param options - the pooling
   */
  embed(input: string, options?: EmbedOptions): Promise<number[]>;
  embed(input: readonly string[], options?: EmbedOptions): Promise<number[][]>;
  async embed(input: string | readonly string[], options?: EmbedOptions): Promise<number[] | number[][]> {
    const { onProgress, ...o } = checkOptions('embed', options, ['pooling', 'onProgress']);
    const texts = typeof input === 'string' ? [input] : input;
    if (!Array.isArray(texts) || texts.some((t) => typeof t !== 'string')) {
      throw new InvalidArgumentError(`embed: expected a text or an array of texts, got ${describe(input)}`);
    }
    if (onProgress !== undefined && typeof onProgress !== 'function') {
      throw new InvalidArgumentError(`embed: onProgress must be a function, got ${describe(onProgress)}`);
    }
    if (this.released) throw this.closedError();
    const requestId = newRequestId();
    const off = onProgress
      ? onRequestEvents(requestId, (e: NativeEvent) => {
          if (e.type !== 'embedProgress' || typeof e.done !== 'number' || typeof e.total !== 'number') return;
          try {
            onProgress(e.done, e.total);
          } catch {
            // A failing progress callback does not stop the embedding.
          }
        })
      : noop;
    try {
      const r = await this.exclusive(() =>
        request<{ embeddings: number[][] }>({ method: 'embed', model: this.id, requestId, params: { texts, ...o } })
      );
      return typeof input === 'string' ? r.embeddings[0]! : r.embeddings;
    } finally {
      off();
    }
  }

  /**
   * Saves the conversation (its tokens and KV cache) of a sequence to a session file at `path`,
   * after the completions queued before it on that sequence: {@link LanguageModel.loadSession}
   * of the same model file, in this app run or a later one, on any sequence, resumes it without
   * processing it again (llama.rn: `saveSession`). The file holds the cache of the tokens in use
   * (about 1 KB per token and layer for Gemma 3 270M), a checksum and the identity of the model
   * file.
   *
   * @param path - a file path or a `file://` URI (written to a temporary file beside it, then
   *   renamed over it)
   * @param options - `sequence`: the conversation to save (default 0)
   * @returns the number of tokens saved; rejects with a `StorageError` when the file cannot be
   *   written
   */
  async saveSession(path: string, options?: SessionFileOptions): Promise<number> {
    const file = sessionPath('saveSession', path);
    const sequence = sessionSequence('saveSession', options);
    const params = sequence === undefined ? { path: file } : { path: file, sequence };
    const r = await this.exclusive(() => this.call<{ tokens: number }>('saveSession', params), sequence ?? 0);
    return r.tokens;
  }

  /**
   * Loads a session file saved by {@link LanguageModel.saveSession} of the same model file in
   * place of a sequence's conversation, after the completions queued before it on that
   * sequence: a completion on it whose prompt continues it processes only what is new (llama.rn: `loadSession`, which also
   * returns the prompt; detokenize it if needed).
   *
   * @param path - a file path or a `file://` URI
   * @param options - `sequence`: the conversation to replace (default 0)
   * @returns the number of tokens loaded; rejects with an `InvalidArgumentError` for a file of
   *   another model, a truncated or corrupt file, or one that is not a session file, a
   *   `ContextFullError` for a session longer than the context, a `StorageError` for a
   *   file that cannot be read; the conversation is then empty
   */
  async loadSession(path: string, options?: SessionFileOptions): Promise<number> {
    const file = sessionPath('loadSession', path);
    const sequence = sessionSequence('loadSession', options);
    const params = sequence === undefined ? { path: file } : { path: file, sequence };
    const r = await this.exclusive(() => this.call<{ tokens: number }>('loadSession', params), sequence ?? 0);
    return r.tokens;
  }

  /**
   * Scores `documents` by their relevance to `query` with a reranker model (a BERT
   * classification head, such as bge-reranker), as llama.cpp scores them (llama.rn: `rerank`).
   * The results are sorted by score, highest first, each with its document's index.
   *
   * @param query - the query
   * @param documents - the texts to score
   * @param options - `normalize` maps the scores into (0, 1)
   */
  async rerank(query: string, documents: readonly string[], options?: RerankOptions): Promise<RerankResult[]> {
    const o = checkOptions('rerank', options, ['normalize']);
    if (typeof query !== 'string') throw new InvalidArgumentError(`rerank: query must be a string, got ${describe(query)}`);
    if (!Array.isArray(documents) || documents.some((d) => typeof d !== 'string')) {
      throw new InvalidArgumentError(`rerank: documents must be an array of strings, got ${describe(documents)}`);
    }
    if (this.released) throw this.closedError();
    const r = await this.exclusive(() =>
      this.call<{ results: Array<{ index: number; score: number }> }>('rerank', { query, documents, ...o })
    );
    return r.results.map((x) => ({ index: x.index, score: x.score, document: documents[x.index]! }));
  }

  /**
   * Frees the model: the running completion ends with `stopReason` `"cancelled"` (as do those
   * queued behind it), the native side waits for the work in flight, and later calls reject with
   * a {@link ClosedError}. Releasing twice is fine (llama.rn: `release`).
   */
  release(): Promise<void> {
    if (this.releasing) return this.releasing;
    this.released = true;
    liveModels.delete(this);
    this.stopCompletion();
    this.releasing = request({ method: 'releaseModel', model: this.id }).then(noop);
    return this.releasing;
  }
}

/** `LanguageModel` is `AsyncDisposable`: `[Symbol.asyncDispose]()` is {@link LanguageModel.release}. */
export interface LanguageModel {
  /** `await using model = await loadModel(...)` releases it at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

defineAsyncDispose(LanguageModel.prototype);

/** The models loaded and not released, for {@link releaseAllModels}. */
const liveModels = new Set<LanguageModel>();
/** Bumped by {@link releaseAllModels}: a load that began before it is released when it ends. */
let releaseEpoch = 0;

/**
 * Releases every model this JS instance loaded and has not released (llama.rn:
 * `releaseAllLlama`): their completions end with `stopReason` `"cancelled"`, later calls on
 * them reject with a {@link ClosedError}. A load still running when this is called is
 * released when it ends (its promise rejects with a {@link CancelledError}).
 *
 * @returns how many models were released
 */
export async function releaseAllModels(): Promise<number> {
  releaseEpoch += 1;
  const all = [...liveModels];
  await Promise.all(all.map((m) => m.release()));
  return all.length;
}

const LOAD_OPTIONS = [
  'device',
  'threads',
  'nCtx',
  'nBatch',
  'nSequences',
  'memoryBudget',
  'cacheTypeK',
  'cacheTypeV',
  'signal',
] as const;

/**
 * Loads the GGUF file at `path` (llama.rn: `initLlama({ model, ... }, onProgress)`).
 *
 * On Android, `path` may be a `content://` URI (a file picker's, shared storage): the module
 * opens it through the content resolver and the core reads it in place when the provider gives
 * a regular file (through `/proc/self/fd`), or loads a copy made in the app's storage when it
 * gives a stream (the copy is then the first half of `onProgress`, and reused by later loads
 * of the same URI while its size matches).
 *
 * @param path - a file path, a `file://` URI, or on Android a `content://` URI
 * @param options - device, threads, context length, batch size, KV cache types, an AbortSignal
 * @param onProgress - receives the fraction of the weights placed, from 0 to 1 (llama.rn: a
 *   percentage)
 * @returns the model; rejects with an {@link InvalidModelError} for a file that cannot be used,
 *   with a {@link CancelledError} when `options.signal` aborts first
 */
export async function loadModel(
  path: string,
  options?: LoadModelOptions,
  onProgress?: LoadProgressCallback
): Promise<LanguageModel> {
  const file = filePath(path);
  const { signal, ...o } = checkOptions('loadModel', options, LOAD_OPTIONS);
  if (onProgress !== undefined && typeof onProgress !== 'function') {
    throw new InvalidArgumentError(`loadModel: onProgress must be a function, got ${describe(onProgress)}`);
  }
  const abort = checkSignal('loadModel', signal);
  if (abort?.aborted) throw new CancelledError('loadModel: cancelled before it started', { cause: abort.reason });
  const requestId = newRequestId();
  const epoch = releaseEpoch;
  // A content document the provider cannot give as a file is copied first (Android's module
  // sends copyProgress): the copy is then the first half of the progress, the weights the rest.
  let copied = false;
  const off = onProgress
    ? onRequestEvents(requestId, (e) => {
        let p: number;
        if (e.type === 'copyProgress' && typeof e.received === 'number') {
          copied = true;
          p = typeof e.total === 'number' && e.total > 0 ? (0.5 * e.received) / e.total : 0;
        } else if (e.type === 'loadProgress' && typeof e.progress === 'number') {
          p = copied ? 0.5 + 0.5 * e.progress : e.progress;
        } else {
          return;
        }
        try {
          onProgress(p);
        } catch {
          // A failing progress callback does not stop the load.
        }
      })
    : noop;
  const loading = request<{ model: number; info: ModelInfo }>({ method: 'loadModel', path: file, requestId, options: o }).then(
    (r) => new LanguageModel(r.model, r.info, file)
  );
  if (!abort) {
    try {
      const model = await loading;
      return afterLoad(model, epoch);
    } finally {
      off();
    }
  }
  // Cancellable: rejects at the abort; the core is told to stop, and a model that arrives
  // anyway is released.
  let onAbort = noop;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => {
      request({ method: 'cancelLoad', requestId }).catch(noop);
      reject(new CancelledError('loadModel: cancelled', { cause: abort.reason }));
    };
    abort.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(noop);
  loading.then(
    (m) => {
      if (abort.aborted) m.release().catch(noop);
    },
    noop
  );
  try {
    const model = await Promise.race([loading, aborted]);
    return afterLoad(model, epoch);
  } finally {
    abort.removeEventListener('abort', onAbort);
    off();
  }
}

/** `model`, unless {@link releaseAllModels} ran during its load: then it is released. */
async function afterLoad(model: LanguageModel, epoch: number): Promise<LanguageModel> {
  if (epoch === releaseEpoch) return model;
  await model.release();
  throw new CancelledError('loadModel: releaseAllModels was called while the model loaded');
}

/** `signal` checked to be an AbortSignal (or absent). */
function checkSignal(what: string, signal: unknown): AbortSignalLike | undefined {
  if (signal === undefined) return undefined;
  const s = signal as AbortSignalLike | null;
  if (s === null || typeof s !== 'object' || typeof s.addEventListener !== 'function' || typeof s.aborted !== 'boolean') {
    throw new InvalidArgumentError(`${what}: signal must be an AbortSignal, got ${describe(signal)}`);
  }
  return s;
}
