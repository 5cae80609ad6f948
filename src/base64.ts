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
const CODES = new Uint8Array(64);
for (let i = 0; i < 64; i++) CODES[i] = ALPHABET.charCodeAt(i);
const DECODE = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) DECODE[ALPHABET.charCodeAt(i)] = i;

/** Whether this platform stores numbers little-endian (every phone and desktop CPU today). */
export const LITTLE_ENDIAN: boolean = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Standard base64 (RFC 4648, with padding) of `bytes`. */
export function base64FromBytes(bytes: Uint8Array): string {
  const n = bytes.length;
  // The output as character codes, turned into a string a chunk at a time: much faster than
  // appending small strings, in V8 and in Hermes alike.
  const out = new Uint8Array(Math.ceil(n / 3) * 4);
  let o = 0;
  let i = 0;
  for (; i + 2 < n; i += 3) {
    const v = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out[o] = CODES[v >>> 18]!;
    out[o + 1] = CODES[(v >>> 12) & 63]!;
    out[o + 2] = CODES[(v >>> 6) & 63]!;
    out[o + 3] = CODES[v & 63]!;
    o += 4;
  }
  const rest = n - i;
  if (rest > 0) {
    const v = (bytes[i]! << 16) | (rest === 2 ? bytes[i + 1]! << 8 : 0);
    out[o] = CODES[v >>> 18]!;
    out[o + 1] = CODES[(v >>> 12) & 63]!;
    out[o + 2] = rest === 2 ? CODES[(v >>> 6) & 63]! : 61; // '='
    out[o + 3] = 61;
  }
  return asciiToString(out);
}

/** A string of ASCII codes. */
function asciiToString(codes: Uint8Array): string {
  const CHUNK = 8192;
  const parts: string[] = [];
  for (let start = 0; start < codes.length; start += CHUNK) {
    parts.push(String.fromCharCode.apply(null, codes.subarray(start, start + CHUNK) as unknown as number[]));
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
  let o = 0;
  let i = 0;
  const at = (k: number): number => {
    const c = text.charCodeAt(k);
    const v = c < 128 ? DECODE[c]! : -1;
    if (v < 0) {
      throw new InvalidArgumentError(`invalid base64: unexpected character ${JSON.stringify(text[k])} at ${k}`);
    }
    return v;
  };
  for (; i + 4 <= end; i += 4) {
    const c0 = text.charCodeAt(i);
    const c1 = text.charCodeAt(i + 1);
    const c2 = text.charCodeAt(i + 2);
    const c3 = text.charCodeAt(i + 3);
    const v =
      (c0 | c1 | c2 | c3) < 128
        ? (DECODE[c0]! << 18) | (DECODE[c1]! << 12) | (DECODE[c2]! << 6) | DECODE[c3]!
        : -1;
    if (v < 0) {
      // An invalid character (its table entry, -1, makes v negative): name it.
      for (let k = i; k < i + 4; k++) at(k);
    }
    out[o] = v >>> 16;
    out[o + 1] = (v >>> 8) & 0xff;
    out[o + 2] = v & 0xff;
    o += 3;
  }
  const rest = end - i;
  if (rest >= 2) {
    const v = (at(i) << 18) | (at(i + 1) << 12) | (rest === 3 ? at(i + 2) << 6 : 0);
    out[o++] = v >>> 16;
    if (rest === 3) out[o++] = (v >>> 8) & 0xff;
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
