/**
 * Getting models onto the device: {@link downloadModel} fetches a GGUF file into the app's
 * models folder natively (no byte goes through JavaScript), resumably, checked against its
 * SHA-256 before it gets its name; {@link listModels} and {@link deleteModel} manage what was
 * downloaded.
 *
 * @packageDocumentation
 */

import { newRequestId, onRequestEvents, request } from './caller';
import type { AbortSignalLike } from './compute';
import { CancelledError, InvalidArgumentError } from './errors';

/** A model file in the app's models folder. */
export interface DownloadedModel {
  /** Its file name (what {@link deleteModel} takes). */
  name: string;
  /** Its path, for {@link loadModel}. */
  path: string;
  /** Bytes. */
  size: number;
  /** The SHA-256 it was checked against (hex), or `null` for a file put there otherwise. */
  sha256: string | null;
  /** Where it was downloaded from, or `null`. */
  url: string | null;
}

/** Receives a download's progress: bytes received so far, and the size (`null` if unknown). */
export type DownloadProgressCallback = (received: number, total: number | null) => void;

/** Options of {@link downloadModel}. */
export interface DownloadModelOptions {
  /** The file's SHA-256 in hex (64 digits; Hugging Face shows it on the file's page). Required. */
  sha256: string;
  /** The file name to save it as (default: the last part of the URL's path). */
  name?: string;
  /** Progress, on the JS thread, at most every 0.5% of the file. */
  onProgress?: DownloadProgressCallback;
  /**
   * Stops the download: the promise rejects with a {@link CancelledError} once the native side
   * has stopped (at its next read); the bytes so far are kept, and the same download asked
   * again resumes from them.
   */
  signal?: AbortSignalLike;
}

const noop = (): void => {};

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'string' ? JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}…` : v) : typeof v;
}

/**
 * Downloads the model at `url` into the app's models folder (Android: the app's files folder;
 * iOS: Application Support; both under `tessera/models`) and resolves to it once its SHA-256
 * matches.
 *
 * - Resumable: an interrupted download (a cut connection, a cancel, the app killed) keeps its
 *   bytes; asking for the same URL and SHA-256 again continues with an HTTP range request (a
 *   connection cut mid-way is resumed once or twice by itself).
 * - Checked: the file is hashed as it is written and gets its name only if the SHA-256
 *   matches (an atomic rename); a mismatch deletes it and rejects with an
 *   {@link InvalidModelError}. A download that did not finish never leaves a file under the
 *   model's name, so nothing half-written can be loaded.
 * - The free space is checked against the announced size first (a {@link StorageError}).
 * - Network failures reject with a {@link NetworkError} naming the URL and the HTTP status or
 *   the cause.
 *
 * @param url - an http(s) URL of the GGUF file
 * @param options - `sha256` (required), `name`, `onProgress`, `signal`
 */
export async function downloadModel(url: string, options: DownloadModelOptions): Promise<DownloadedModel> {
  if (typeof url !== 'string' || !/^https?:\/\//i.test(url)) {
    throw new InvalidArgumentError(`downloadModel: the URL must be an http(s) URL, got ${describe(url)}`);
  }
  if (options === null || typeof options !== 'object') {
    throw new InvalidArgumentError('downloadModel: options { sha256, name?, onProgress?, signal? } are required');
  }
  const known = ['sha256', 'name', 'onProgress', 'signal'];
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new InvalidArgumentError(`downloadModel: unknown option "${key}"; known: ${known.join(', ')}`);
  }
  const { sha256, name, onProgress, signal } = options;
  if (typeof sha256 !== 'string' || !/^[0-9a-fA-F]{64}$/.test(sha256)) {
    throw new InvalidArgumentError(`downloadModel: sha256 must be the file's SHA-256 as 64 hex digits, got ${describe(sha256)}`);
  }
  if (name !== undefined && typeof name !== 'string') throw new InvalidArgumentError(`downloadModel: name must be a string, got ${describe(name)}`);
  if (onProgress !== undefined && typeof onProgress !== 'function') {
    throw new InvalidArgumentError(`downloadModel: onProgress must be a function, got ${describe(onProgress)}`);
  }
  if (signal !== undefined && (signal === null || typeof signal.addEventListener !== 'function')) {
    throw new InvalidArgumentError('downloadModel: signal must be an AbortSignal');
  }
  if (signal?.aborted) throw new CancelledError('downloadModel: cancelled before it started', { cause: signal.reason });
  const requestId = newRequestId();
  const off = onProgress
    ? onRequestEvents(requestId, (e) => {
        if (e.type !== 'downloadProgress' || typeof e.received !== 'number') return;
        try {
          onProgress(e.received, typeof e.total === 'number' ? e.total : null);
        } catch {
          // A failing progress callback does not stop the download.
        }
      })
    : noop;
  const onAbort = (): void => {
    request({ method: 'cancelDownload', requestId }).catch(noop);
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const params: Record<string, unknown> = { url, sha256 };
    if (name !== undefined) params.name = name;
    return await request<DownloadedModel>({ method: 'downloadModel', params, requestId });
  } finally {
    signal?.removeEventListener('abort', onAbort);
    off();
  }
}

/** The models in the app's models folder (downloaded, or put there otherwise), by name. */
export async function listModels(): Promise<DownloadedModel[]> {
  const r = await request<{ directory: string; models: DownloadedModel[] }>({ method: 'listModels' });
  return r.models;
}

/**
 * Deletes a model of the app's models folder, and the bytes of an unfinished download of it.
 *
 * @param name - its name ({@link DownloadedModel.name})
 * @returns whether there was something to delete
 */
export async function deleteModel(name: string): Promise<boolean> {
  if (typeof name !== 'string' || name.length === 0) {
    throw new InvalidArgumentError(`deleteModel: name must be a model's file name, got ${describe(name)}`);
  }
  const r = await request<{ deleted: boolean }>({ method: 'deleteModel', params: { name } });
  return r.deleted;
}
