/**
 * {@link ChatSession}: a conversation with a {@link LanguageModel} that keeps its message
 * history and the model's KV cache warm across turns.
 *
 * @packageDocumentation
 */

import { InvalidArgumentError } from './errors';
import type { ChatMessage, Completion, CompletionChunk, CompletionOptions, CompletionResult, LanguageModel, TokenEvent } from './model';

/** Options of a {@link ChatSession}. */
export interface ChatSessionOptions {
  /** A system prompt, kept as the first message (and not counted as a turn). */
  system?: string;
  /** The conversation so far (after the system prompt), e.g. restored from storage. */
  messages?: readonly ChatMessage[];
  /** Options of every turn's completion (a turn's own options override them). */
  completion?: Omit<CompletionOptions, 'onToken' | 'signal'>;
}

/**
 * A conversation: `send(text)` adds the user's message, generates the assistant's reply to the
 * whole history, and adds the reply when it ends.
 *
 * The runtime reuses the longest prefix of the new prompt that its KV cache already holds
 * (`timings.cache_n`), so a turn computes only the new messages if its prompt extends the
 * previous one. A session keeps it so: the reply is stored exactly as generated (not trimmed,
 * the text of a cancelled turn included, since the cache holds it), earlier messages are never
 * rewritten, and the chat template renders the same history the same way each turn. Another
 * completion on the same sequence between turns (or another session on it) replaces the cache:
 * the next turn then computes the whole history again, correctly but slower. Sessions on
 * different sequences (`completion: { sequence }`, with `nSequences` at load) keep a cache
 * each.
 *
 * ```ts
 * const chat = new ChatSession(model, { system: 'Answer briefly.', completion: { maxTokens: 128 } });
 * const first = chat.send('What is the capital of France?');
 * for await (const { text } of first) append(text);
 * const second = await chat.send('And of Italy?').result;   // reuses the first turn's cache
 * chat.messages;   // system, user, assistant, user, assistant
 * ```
 */
export class ChatSession {
  /** The model this conversation runs on (the session does not release it). */
  readonly model: LanguageModel;
  private readonly history: ChatMessage[] = [];
  private readonly defaults: Omit<CompletionOptions, 'onToken' | 'signal'>;
  private current: Completion | null = null;
  /** Bumped by {@link ChatSession.reset}: a turn that ends after it adds nothing. */
  private epoch = 0;

  /**
   * @param model - a loaded model (with a chat template: `model.info.hasChatTemplate`)
   * @param options - system prompt, earlier messages, default completion options
   */
  constructor(model: LanguageModel, options: ChatSessionOptions = {}) {
    if (options === null || typeof options !== 'object') {
      throw new InvalidArgumentError('ChatSession: options must be an object');
    }
    this.model = model;
    this.defaults = { ...options.completion };
    if (options.system !== undefined) {
      if (typeof options.system !== 'string') throw new InvalidArgumentError('ChatSession: system must be a string');
      this.history.push({ role: 'system', content: options.system });
    }
    for (const [i, m] of (options.messages ?? []).entries()) {
      if (m === null || typeof m !== 'object' || typeof m.role !== 'string' || (typeof m.content !== 'string' && !(m.content === null && m.toolCalls))) {
        throw new InvalidArgumentError(`ChatSession: message ${i} must be { role: string, content: string }`);
      }
      this.history.push({ ...m });
    }
  }

  /** The conversation: the system prompt, then the users' and the assistant's messages. */
  get messages(): readonly ChatMessage[] {
    return this.history.map((m) => ({ ...m }));
  }

  /** Whether a turn is generating. */
  get isGenerating(): boolean {
    return this.current !== null;
  }

  /**
   * Adds `content` as the user's message and generates the reply (the completion of the whole
   * history). When the completion ends, its text is added as the assistant's message (a
   * cancelled turn's text too); if it fails, or is cancelled before any text, the user's
   * message is taken back.
   * One turn at a time: a second `send` while one runs rejects its result with an
   * {@link InvalidArgumentError}.
   *
   * A reply with tool calls is stored as `{ role: 'assistant', content, toolCalls }`; answer
   * the calls by sending `{ role: 'tool', toolCallId, name, content }` messages (the last one
   * starts the next turn: send tool results one by one with {@link ChatSession.addMessage}
   * and the last with `send`).
   *
   * @param content - the user's message, or a whole message (a tool's result)
   * @param options - this turn's completion options (over the session's)
   */
  send(content: string | ChatMessage, options?: CompletionOptions): Completion {
    const user: ChatMessage | null = typeof content === 'string' ? { role: 'user', content } : messageOf(content);
    if (user === null) return failed(new InvalidArgumentError('ChatSession.send: the message must be a string or { role, content }'));
    if (this.current) {
      return failed(new InvalidArgumentError('ChatSession.send: a turn is still generating; stop() it or await its result first'));
    }
    this.history.push(user);
    const completion = this.model.complete(this.messages, { ...this.defaults, ...options });
    this.current = completion;
    const epoch = this.epoch;
    const result = completion.result.then(
      (r) => {
        this.current = null;
        if (epoch !== this.epoch) return r;
        // A turn cancelled before any text is taken back whole (templates want roles to alternate).
        if (r.toolCalls.length > 0) this.history.push({ role: 'assistant', content: r.content, toolCalls: r.toolCalls });
        else if (r.text.length > 0 || r.stopReason !== 'cancelled') this.history.push({ role: 'assistant', content: r.text });
        else this.takeBack(user);
        return r;
      },
      (e: unknown) => {
        this.current = null;
        if (epoch === this.epoch) this.takeBack(user);
        throw e;
      }
    );
    result.catch(noop);
    return {
      requestId: completion.requestId,
      result,
      stop: () => completion.stop(),
      chunks: () => completion.chunks(),
      [Symbol.asyncIterator]: () => completion[Symbol.asyncIterator](),
    };
  }

  /**
   * Adds a message without generating (a tool's result when the model made several calls).
   *
   * @param message - the message
   */
  addMessage(message: ChatMessage): void {
    const m = messageOf(message);
    if (m === null) throw new InvalidArgumentError('ChatSession.addMessage: the message must be { role, content }');
    if (this.current) throw new InvalidArgumentError('ChatSession.addMessage: a turn is still generating');
    this.history.push(m);
  }

  private takeBack(message: ChatMessage): void {
    const at = this.history.lastIndexOf(message);
    if (at >= 0) this.history.splice(at, 1);
  }

  /** Stops the turn that is generating, if any (its reply so far is kept). */
  stop(): void {
    this.current?.stop();
  }

  /**
   * Forgets the conversation (the system prompt stays unless `keepSystem` is false); stops a
   * turn in progress first (its reply is not added). A new turn can start once that turn's
   * result has settled.
   *
   * @param keepSystem - keep the system prompt (default true)
   */
  reset(keepSystem = true): void {
    this.stop();
    this.epoch += 1;
    const system = keepSystem && this.history[0]?.role === 'system' ? this.history[0] : null;
    this.history.length = 0;
    if (system) this.history.push(system);
  }
}

const noop = (): void => {};

/** A copy of `m` if it is a message. */
function messageOf(m: unknown): ChatMessage | null {
  const r = m as ChatMessage | null;
  if (r === null || typeof r !== 'object' || typeof r.role !== 'string') return null;
  if (typeof r.content !== 'string' && !(r.content === null && r.toolCalls)) return null;
  return { ...r };
}

/** A completion that never ran, its result rejected with `error`. */
function failed(error: Error): Completion {
  const result: Promise<CompletionResult> = Promise.reject(error);
  result.catch(noop);
  return {
    requestId: '',
    result,
    stop: noop,
    chunks: (): AsyncIterable<CompletionChunk> => ({
      [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(error) }),
    }),
    [Symbol.asyncIterator]: (): AsyncIterator<TokenEvent> => ({
      next: () => Promise.reject(error),
    }),
  };
}
