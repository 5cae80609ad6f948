/**
 * End to end: downloadModel / listModels / deleteModel over the real Rust core (the tessera-ffi
 * cdylib through koffi) against an HTTP server of this test on 127.0.0.1: a whole download
 * checked byte for byte, a connection cut mid-way (resumed with a range request), a cancel and
 * a later resume, a wrong SHA-256, a size beyond the free space, an HTTP error. No partial file
 * ever appears under the model's name.
 */

import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CancelledError,
  InvalidModelError,
  NetworkError,
  StorageError,
  deleteModel,
  downloadModel,
  listModels,
  loadModel,
  setNativeCaller,
} from '../../src/index';
import { koffiCaller, type KoffiCaller } from './koffi-caller';

/** 3 MiB of deterministic bytes (xorshift), the "model". */
const FILE = (() => {
  const b = Buffer.alloc(3 * 1024 * 1024);
  let x = 0x12345678;
  for (let i = 0; i < b.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
})();
const SHA = createHash('sha256').update(FILE).digest('hex');
const CUT_AT = 1024 * 1024 + 12345;

/** What the server saw: each request's path and Range header. */
const seen: { path: string; range: string | undefined }[] = [];
/** Paths whose first request is cut after CUT_AT bytes. */
const cutOnce = new Set<string>();
/** Paths served slowly (64 KiB every 20 ms), so that a cancel lands mid-way. */
const slow = new Set<string>();

function serve(req: IncomingMessage, res: ServerResponse): void {
  const path = (req.url ?? '/').split('?')[0]!;
  const range = req.headers.range;
  seen.push({ path, range });
  if (path.startsWith('/missing/')) {
    res.writeHead(404).end('not found');
    return;
  }
  if (path.startsWith('/huge/')) {
    // Announces a petabyte: the free-space check must refuse it before reading.
    res.writeHead(200, { 'Content-Length': String(2 ** 50) });
    res.write(FILE.subarray(0, 1024));
    setTimeout(() => res.destroy(), 200);
    return;
  }
  let start = 0;
  const m = range ? /^bytes=(\d+)-$/.exec(range) : null;
  if (m) start = Number(m[1]);
  const body = FILE.subarray(start);
  if (m) {
    res.writeHead(206, { 'Content-Length': String(body.length), 'Content-Range': `bytes ${start}-${FILE.length - 1}/${FILE.length}` });
  } else {
    res.writeHead(200, { 'Content-Length': String(body.length) });
  }
  if (cutOnce.delete(path)) {
    res.write(body.subarray(0, CUT_AT), () => setTimeout(() => res.socket?.destroy(), 50));
    return;
  }
  if (slow.has(path)) {
    let at = 0;
    const step = (): void => {
      if (res.destroyed) return;
      if (at >= body.length) {
        res.end();
        return;
      }
      res.write(body.subarray(at, at + 65536));
      at += 65536;
      setTimeout(step, 20);
    };
    step();
    return;
  }
  res.end(body);
}

let server: Server;
let base: string;
let dir: string;
const native: KoffiCaller = koffiCaller();

beforeAll(async () => {
  server = createServer(serve);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  dir = mkdtempSync(join(tmpdir(), 'tessera-models-'));
  setNativeCaller(native);
  const r = JSON.parse(native.callSync(JSON.stringify({ method: 'setModelsDirectory', params: { path: dir } })));
  expect(r).toEqual({ ok: { path: dir } });
});

afterAll(async () => {
  setNativeCaller(null);
  native.close();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

/** The files in the models folder, without the hidden ones. */
const visible = (): string[] => readdirSync(dir).filter((n) => !n.startsWith('.')).sort();

describe('downloadModel against a local server', () => {
  it('downloads with progress, checks the SHA-256, and lists the model', async () => {
    const progress: [number, number | null][] = [];
    const m = await downloadModel(`${base}/models/whole.gguf?download=true`, { sha256: SHA.toUpperCase(), onProgress: (r, t) => progress.push([r, t]) });
    expect(m).toEqual({ name: 'whole.gguf', path: join(dir, 'whole.gguf'), size: FILE.length, sha256: SHA, url: `${base}/models/whole.gguf?download=true` });
    expect(readFileSync(m.path).equals(FILE)).toBe(true);
    expect(progress[0]).toEqual([0, FILE.length]);
    expect(progress.at(-1)).toEqual([FILE.length, FILE.length]);
    for (let i = 1; i < progress.length; i++) expect(progress[i]![0]).toBeGreaterThan(progress[i - 1]![0]);
    expect(progress.length).toBeGreaterThan(3);
    expect(await listModels()).toEqual([m]);
    // Asked again: refused, the file stays.
    await expect(downloadModel(`${base}/models/whole.gguf`, { sha256: SHA })).rejects.toThrow('whole.gguf is already downloaded');
  });

  it('resumes a connection cut mid-way with a range request, by itself', async () => {
    cutOnce.add('/models/cut.gguf');
    seen.length = 0;
    const m = await downloadModel(`${base}/models/cut.gguf`, { sha256: SHA });
    expect(readFileSync(m.path).equals(FILE)).toBe(true);
    expect(seen).toEqual([
      { path: '/models/cut.gguf', range: undefined },
      { path: '/models/cut.gguf', range: `bytes=${CUT_AT}-` },
    ]);
  });

  it('a cancel rejects with a CancelledError, leaves no model that loads, and the next try resumes', async () => {
    slow.add('/models/slow.gguf');
    seen.length = 0;
    const controller = new AbortController();
    let received = 0;
    const first = downloadModel(`${base}/models/slow.gguf`, {
      sha256: SHA,
      name: 'cancelled.gguf',
      signal: controller.signal,
      onProgress: (r) => {
        received = r;
        if (r >= 512 * 1024) controller.abort();
      },
    });
    await expect(first).rejects.toBeInstanceOf(CancelledError);
    expect(received).toBeGreaterThanOrEqual(512 * 1024);
    expect(received).toBeLessThan(FILE.length);
    // Nothing under the model's name: loading it fails, listing does not show it.
    expect(existsSync(join(dir, 'cancelled.gguf'))).toBe(false);
    await expect(loadModel(join(dir, 'cancelled.gguf'))).rejects.toBeInstanceOf(InvalidModelError);
    expect((await listModels()).map((x) => x.name)).not.toContain('cancelled.gguf');
    slow.delete('/models/slow.gguf');
    const m = await downloadModel(`${base}/models/slow.gguf`, { sha256: SHA, name: 'cancelled.gguf' });
    expect(readFileSync(m.path).equals(FILE)).toBe(true);
    const resumedFrom = Number(/^bytes=(\d+)-$/.exec(seen.at(-1)!.range ?? '')?.[1]);
    expect(resumedFrom).toBeGreaterThanOrEqual(512 * 1024);
    expect(resumedFrom).toBeLessThan(FILE.length);
  });

  it('a wrong SHA-256 rejects with an InvalidModelError and deletes what it wrote', async () => {
    const wrong = SHA.replace(/^./, (c) => (c === '0' ? '1' : '0'));
    seen.length = 0;
    const e = await downloadModel(`${base}/models/bad.gguf`, { sha256: wrong }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(InvalidModelError);
    expect((e as Error).message).toContain(`the file's SHA-256 is ${SHA}, not the ${wrong}`);
    expect(visible()).not.toContain('bad.gguf');
    expect(readdirSync(join(dir, '.partial')).filter((n) => n.startsWith('bad.gguf'))).toEqual([]);
    // Nothing kept to resume from: the next try starts at byte 0.
    await downloadModel(`${base}/models/bad.gguf`, { sha256: SHA });
    expect(seen.map((s) => s.range)).toEqual([undefined, undefined]);
  });

  it('refuses a file larger than the free space before writing it (a StorageError)', async () => {
    const e = await downloadModel(`${base}/huge/huge.gguf`, { sha256: SHA }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(StorageError);
    expect((e as StorageError).kind).toBe('Storage');
    expect((e as Error).message).toMatch(/^not enough free space for .*huge\.gguf: 1125899906842624 more bytes needed/);
    expect(visible()).not.toContain('huge.gguf');
  });

  it('an HTTP error is a NetworkError naming the status; bad arguments are refused in JS', async () => {
    const e = await downloadModel(`${base}/missing/none.gguf`, { sha256: SHA }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(NetworkError);
    expect((e as Error).message).toBe(`${base}/missing/none.gguf: HTTP 404`);
    await expect(downloadModel(`${base}/m.gguf`, { sha256: 'abc' })).rejects.toThrow('sha256 must be the file');
    await expect(downloadModel('ftp://x/m.gguf', { sha256: SHA })).rejects.toThrow('must be an http(s) URL');
    await expect(downloadModel(`${base}/m.gguf`, { sha256: SHA, name: '../evil' })).rejects.toThrow('model name "../evil"');
  });

  it('deleteModel removes a model (and says whether there was one)', async () => {
    expect(await deleteModel('whole.gguf')).toBe(true);
    expect(await deleteModel('whole.gguf')).toBe(false);
    expect(visible()).toEqual(['bad.gguf', 'cancelled.gguf', 'cut.gguf']);
    expect((await listModels()).map((m) => [m.name, m.size, m.sha256])).toEqual([
      ['bad.gguf', FILE.length, SHA],
      ['cancelled.gguf', FILE.length, SHA],
      ['cut.gguf', FILE.length, SHA],
    ]);
  });
});
