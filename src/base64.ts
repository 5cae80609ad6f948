/**
 * Base64 of bytes and typed arrays, in pure TypeScript: no `Buffer`, no `atob`, so it runs
 * the same in Hermes, JSC and Node. Typed arrays are encoded as their little-endian bytes,
 * which is what the native protocol carries.
 *
 * @packageDocumentation
 */

import { InvalidArgumentError } from './errors';
import type { TensorArray } from './dtype';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const ENCODE: string[] = ALPHABET.split('');
const DECODE = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) DECODE[ALPHABET.charCodeAt(i)] = i;

/** Whether this platform stores numbers little-endian (every phone and desktop CPU today). */
export const LITTLE_ENDIAN: boolean = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Standard base64 (RFC 4648, with padding) of `bytes`. */
export function base64FromBytes(bytes: Uint8Array): string {
  const n = bytes.length;
  const parts: string[] = [];
  // Build in chunks to keep intermediate strings small and joins cheap.
  const CHUNK = 3 * 4096;
  for (let start = 0; start < n; start += CHUNK) {
    const end = Math.min(start + CHUNK, n);
    let s = '';
    let i = start;
    for (; i + 2 < end; i += 3) {
      const v = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
      s += ENCODE[v >>> 18]! + ENCODE[(v >>> 12) & 63]! + ENCODE[(v >>> 6) & 63]! + ENCODE[v & 63]!;
    }
    const rest = end - i;
    if (rest === 1) {
      const v = bytes[i]! << 16;
      s += ENCODE[v >>> 18]! + ENCODE[(v >>> 12) & 63]! + '==';
    } else if (rest === 2) {
      const v = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
      s += ENCODE[v >>> 18]! + ENCODE[(v >>> 12) & 63]! + ENCODE[(v >>> 6) & 63]! + '=';
    }
    parts.push(s);
  }
  return parts.join('');
}

/**
 * The bytes of standard base64 `text` (padding optional; whitespace and other characters are
 * rejected with an `InvalidArgument` error).
 */
export function bytesFromBase64(text: string): Uint8Array {
  let end = text.length;
  let pad = 0;
  while (end > 0 && text.charCodeAt(end - 1) === 61 /* = */) {
    end--;
    pad++;
  }
  if (pad > 2) throw new InvalidArgumentError('invalid base64: too much padding');
  if (end % 4 === 1) throw new InvalidArgumentError('invalid base64: truncated');
  const out = new Uint8Array(Math.floor((end * 3) / 4));
  let acc = 0;
  let bits = 0;
  let o = 0;
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i);
    const v = c < 128 ? DECODE[c]! : -1;
    if (v < 0) {
      throw new InvalidArgumentError(
        `invalid base64: unexpected character ${JSON.stringify(text[i])} at ${i}`
      );
    }
    acc = ((acc << 6) | v) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >>> bits) & 0xff;
    }
  }
  return o === out.length ? out : out.subarray(0, o);
}

/** The little-endian bytes of a typed array (a view of it on little-endian platforms). */
export function bytesOf(data: TensorArray): Uint8Array {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (LITTLE_ENDIAN || data.BYTES_PER_ELEMENT === 1) return bytes;
  return swapped(bytes, data.BYTES_PER_ELEMENT);
}

/** Base64 of the little-endian bytes of a typed array. */
export function base64FromArray(data: TensorArray): string {
  return base64FromBytes(bytesOf(data));
}

/** A typed array constructor. */
export interface TypedArrayCtor<T extends TensorArray> {
  new (buffer: ArrayBuffer, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

/**
 * Decodes base64 of little-endian values into a new typed array of `ctor`; throws
 * `InvalidArgument` when the byte count is not a whole number of elements.
 */
export function arrayFromBase64<T extends TensorArray>(text: string, ctor: TypedArrayCtor<T>): T {
  let bytes = bytesFromBase64(text);
  const size = ctor.BYTES_PER_ELEMENT;
  if (bytes.length % size !== 0) {
    throw new InvalidArgumentError(
      `invalid data: ${bytes.length} bytes are not a whole number of ${size}-byte elements`
    );
  }
  if (!LITTLE_ENDIAN && size > 1) bytes = swapped(bytes, size);
  // bytesFromBase64 returns a fresh, zero-offset buffer (possibly a prefix of it).
  const buffer =
    bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
      ? (bytes.buffer as ArrayBuffer)
      : (bytes.slice().buffer as ArrayBuffer);
  return new ctor(buffer, 0, bytes.length / size);
}

function swapped(bytes: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += size) {
    for (let j = 0; j < size; j++) out[i + j] = bytes[i + size - 1 - j]!;
  }
  return out;
}
