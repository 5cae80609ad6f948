/**
 * React hooks: {@link useModel} loads a model for as long as a component shows it;
 * {@link useCompletion} runs completions (or a {@link ChatSession}'s turns) and keeps the text
 * as it streams. Both work with React 18 and 19 and under `<StrictMode>`, and release on
 * unmount only what they created.
 *
 * @packageDocumentation
 */

import { useCallback, useEffect, useRef, useState } from 'react';
import { ChatSession } from './chat';
import type { AbortSignalLike } from './compute';
import { InvalidArgumentError } from './errors';
import { downloadModel, listModels, type DownloadModelOptions } from './download';
import {
  loadModel,
  type ChatMessage,
  type Completion,
  type CompletionOptions,
  type CompletionResult,
  type LanguageModel,
  type LoadModelOptions,
} from './model';

/** Where {@link useModel} is in getting its model. */
export type ModelStatus = 'idle' | 'downloading' | 'loading' | 'ready' | 'error';

/**
 * What {@link useModel} loads: a path (or `file://` / Android `content://` URI), or a model to
 * download first (into the app's models folder, unless a file with that SHA-256 is there).
 */
export type ModelSource = string | { url: string; sha256: string; name?: string };

/** What {@link useModel} returns. */
export interface ModelState {
  /** The loaded model, once `status` is `"ready"`; `null` otherwise. */
  model: LanguageModel | null;
  /** `"idle"` (no source), `"loading"`, `"ready"` or `"error"`. */
  status: ModelStatus;
  /** `status === "ready"`. */
  isReady: boolean;
  /** `status === "loading"` or `"downloading"`. */
  isLoading: boolean;
  /** The fraction of the weights placed while loading, 0 to 1. */
  progress: number;
  /** The fraction downloaded, 0 to 1 (1 when nothing had to be downloaded). */
  downloadProgress: number;
  /** Why the load failed, when `status` is `"error"`. */
  error: Error | null;
}

/** Options of {@link useModel}: those of {@link loadModel} (the hook owns the signal). */
export type UseModelOptions = Omit<LoadModelOptions, 'signal'>;

const IDLE: ModelState = Object.freeze({
  model: null,
  status: 'idle',
  isReady: false,
  isLoading: false,
  progress: 0,
  downloadProgress: 0,
  error: null,
});
const LOADING: ModelState = Object.freeze({ ...IDLE, status: 'loading', isLoading: true, downloadProgress: 1 });
const DOWNLOADING: ModelState = Object.freeze({ ...IDLE, status: 'downloading', isLoading: true });

/** The path of `source`: downloaded first (unless there already) when it is a download. */
async function pathOf(
  source: ModelSource,
  signal: AbortSignalLike,
  onDownload: (fraction: number) => void
): Promise<string> {
  if (typeof source === 'string') return source;
  const sha256 = source.sha256.toLowerCase();
  const there = (await listModels()).find((m) => m.sha256 === sha256 && (source.name === undefined || m.name === source.name));
  if (there) return there.path;
  onDownload(0);
  const options: DownloadModelOptions = { sha256, signal, onProgress: (r, t) => onDownload(t ? r / t : 0) };
  if (source.name !== undefined) options.name = source.name;
  return (await downloadModel(source.url, options)).path;
}

/** A load the hook owns, kept across StrictMode's simulated unmount and remount. */
interface OwnedLoad {
  key: string;
  abort(): void;
  model: LanguageModel | null;
  /** Set by the effect's cleanup; the load is dropped a microtask later unless the effect runs again. */
  dropping: boolean;
}

/**
 * Loads the model at `source` (a path or URI, as {@link loadModel} takes, or `{ url, sha256 }`
 * to download it first with {@link downloadModel}, unless the models folder has a file with that
 * SHA-256) and keeps it loaded while the component is mounted and `source` and `options` stay
 * the same; `null` loads nothing. A download shows as `status` `"downloading"` with
 * `downloadProgress`; unmounting cancels it (its bytes are kept for the next try).
 *
 * The hook releases the model it loaded when the component unmounts or the source or options
 * change (a load still running is cancelled), and never a model it did not load. Under
 * `<StrictMode>` the effect's development-only unmount and remount keep the same load: the
 * model is loaded once.
 *
 * ```tsx
 * const { model, isReady, progress, error } = useModel(path, { nCtx: 2048 });
 * if (!isReady) return <Text>{error ? error.message : `Loading ${Math.round(progress * 100)}%`}</Text>;
 * ```
 *
 * @param source - the model file, or `null` / `undefined` for none
 * @param options - device, threads, context length, batch size
 */
export function useModel(source: ModelSource | null | undefined, options?: UseModelOptions): ModelState {
  const where = typeof source === 'object' && source !== null ? [source.url, source.sha256, source.name] : source;
  const key = source ? JSON.stringify([where, options?.device, options?.threads, options?.nCtx, options?.nBatch, options?.cacheTypeK, options?.cacheTypeV]) : '';
  const [state, setState] = useState<{ key: string; value: ModelState }>({ key: '', value: IDLE });
  const owned = useRef<OwnedLoad | null>(null);

  useEffect(() => {
    const current = owned.current;
    if (current && current.key === key && current.dropping) {
      // StrictMode's remount (or a remount within the same task): keep the load.
      current.dropping = false;
      return () => drop(owned, current);
    }
    if (!key) return undefined;
    const controller = abortable();
    const load: OwnedLoad = { key, abort: controller.abort, model: null, dropping: false };
    owned.current = load;
    const mine = (): boolean => owned.current === load && !load.dropping;
    setState({ key, value: typeof source === 'string' ? LOADING : DOWNLOADING });
    // The source and options of the render that changed the key.
    const src = source as ModelSource;
    pathOf(src, controller.signal, (downloadProgress) => {
      if (mine()) setState((s) => (s.key === key ? { key, value: { ...s.value, downloadProgress } } : s));
    })
      .then((path) => {
        if (mine() && typeof src !== 'string') setState({ key, value: LOADING });
        return loadModel(path, { ...options, signal: controller.signal }, (progress) => {
          if (mine()) setState((s) => (s.key === key && s.value.status === 'loading' ? { key, value: { ...s.value, progress } } : s));
        });
      })
      .then(
        (model) => {
          if (owned.current !== load) {
            model.release().catch(noop);
            return;
          }
          load.model = model;
          setState({ key, value: { ...IDLE, model, status: 'ready', isReady: true, progress: 1, downloadProgress: 1 } });
        },
        (e: unknown) => {
          if (!mine()) return;
          setState({ key, value: { ...IDLE, status: 'error', error: e instanceof Error ? e : new Error(String(e)) } });
        }
      );
    return () => drop(owned, load);
    // The key stands for the source and the options.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);

  if (!key) return IDLE;
  // Until the effect has started this key's load, and never the state of an older key.
  if (state.key !== key) return typeof source === 'string' ? LOADING : DOWNLOADING;
  return state.value;
}

/** Drops `load` a microtask from now unless the effect has taken it back meanwhile. */
function drop(owned: { current: OwnedLoad | null }, load: OwnedLoad): void {
  load.dropping = true;
  Promise.resolve().then(() => {
    if (!load.dropping) return;
    if (owned.current === load) owned.current = null;
    load.abort();
    load.model?.release().catch(noop);
    load.model = null;
  }, noop);
}

/** A minimal AbortController (the package is typed without the DOM's). */
function abortable(): { signal: AbortSignalLike; abort(): void } {
  const listeners = new Set<() => void>();
  const signal = {
    aborted: false,
    reason: undefined as unknown,
    addEventListener(_type: 'abort', listener: () => void) {
      listeners.add(listener);
    },
    removeEventListener(_type: 'abort', listener: () => void) {
      listeners.delete(listener);
    },
  };
  return {
    signal,
    abort() {
      if (signal.aborted) return;
      signal.aborted = true;
      for (const l of [...listeners]) l();
      listeners.clear();
    },
  };
}

/** What {@link useCompletion} returns. */
export interface CompletionState {
  /** The text of the running completion so far, or of the last one once it ended. */
  response: string;
  /**
   * The reasoning of the running completion so far (its `reasoning` chunks), or of the last
   * one once it ended; empty for models that do not think.
   */
  reasoning: string;
  /** Whether a completion started by this hook is running. */
  isGenerating: boolean;
  /** The last completion's result, once it ended. */
  result: CompletionResult | null;
  /** Why the last completion failed. */
  error: Error | null;
  /** With a {@link ChatSession}: its messages (updated when a turn starts and ends); else `[]`. */
  messages: readonly ChatMessage[];
  /**
   * Starts a completion of `input` (with a {@link ChatSession}: sends `input` as the user's
   * message, or a whole message such as a tool's result). Resolves with the result, or `null` when it failed (`error` says why) or the
   * component unmounted. Rejects with an {@link InvalidArgumentError} when there is no model
   * or a completion is already running.
   */
  complete(input: string | ChatMessage | readonly ChatMessage[], options?: CompletionOptions): Promise<CompletionResult | null>;
  /** Stops the running completion (it ends with `stopReason` `"cancelled"`). */
  stop(): void;
}

/**
 * Runs completions of `target` (a model, e.g. from {@link useModel}, or a {@link ChatSession})
 * and keeps their text as it streams, for rendering.
 *
 * The hook stops the completion it started when the component unmounts or `target` changes; it
 * never releases the model.
 *
 * ```tsx
 * const chat = useMemo(() => (model ? new ChatSession(model, { system: 'Be brief.' }) : null), [model]);
 * const { response, isGenerating, messages, complete, stop } = useCompletion(chat);
 * <Button title="Send" disabled={!chat || isGenerating} onPress={() => complete(draft)} />
 * ```
 *
 * @param target - the model or conversation, or `null` while there is none
 */
export function useCompletion(target: LanguageModel | ChatSession | null | undefined): CompletionState {
  const [response, setResponse] = useState('');
  const [reasoning, setReasoning] = useState('');
  const [isGenerating, setGenerating] = useState(false);
  const [result, setResult] = useState<CompletionResult | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const [messages, setMessages] = useState<readonly ChatMessage[]>(() => messagesOf(target));
  const running = useRef<Completion | null>(null);
  const mounted = useRef(false);

  useEffect(() => {
    mounted.current = true;
    setMessages(messagesOf(target));
    return () => {
      mounted.current = false;
      running.current?.stop();
      running.current = null;
    };
  }, [target]);

  const complete = useCallback(
    async (input: string | ChatMessage | readonly ChatMessage[], options?: CompletionOptions): Promise<CompletionResult | null> => {
      if (!target) throw new InvalidArgumentError('useCompletion: no model yet');
      if (running.current) throw new InvalidArgumentError('useCompletion: a completion is already running; stop() it first');
      let completion: Completion;
      if (target instanceof ChatSession) {
        if (Array.isArray(input)) throw new InvalidArgumentError("useCompletion: a ChatSession's input is the user's message (a string) or one message");
        completion = target.send(input as string | ChatMessage, options);
        setMessages(target.messages);
      } else {
        if (!(typeof input === 'string' || Array.isArray(input))) throw new InvalidArgumentError('useCompletion: a model completes a prompt or messages');
        completion = target.complete(input as string | readonly ChatMessage[], options);
      }
      running.current = completion;
      setResponse('');
      setReasoning('');
      setResult(null);
      setError(null);
      setGenerating(true);
      const live = (): boolean => mounted.current && running.current === completion;
      try {
        for await (const { text, chunks } of completion) {
          if (text && live()) setResponse((r) => r + text);
          const thought = chunks.map((c) => (c.type === 'reasoning' ? c.text : '')).join('');
          if (thought && live()) setReasoning((r) => r + thought);
        }
        const r = await completion.result;
        if (live()) {
          setResponse(r.text);
          setReasoning(r.reasoning);
          setResult(r);
        }
        return live() ? r : null;
      } catch (e) {
        if (live()) setError(e instanceof Error ? e : new Error(String(e)));
        return null;
      } finally {
        const wasLive = live();
        if (running.current === completion) running.current = null;
        if (wasLive) {
          setGenerating(false);
          if (target instanceof ChatSession) setMessages(target.messages);
        }
      }
    },
    [target]
  );

  const stop = useCallback(() => running.current?.stop(), []);

  return { response, reasoning, isGenerating, result, error, messages, complete, stop };
}

function messagesOf(target: LanguageModel | ChatSession | null | undefined): readonly ChatMessage[] {
  return target instanceof ChatSession ? target.messages : [];
}

const noop = (): void => {};
