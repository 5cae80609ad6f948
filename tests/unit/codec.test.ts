import { describe, expect, it } from 'vitest';
import { arrayFromBase64, base64FromArray, base64FromBytes, bytesFromBase64 } from '../../src/base64';
import {
  bfloat16BitsToFloat32,
  bfloat16ToFloat32,
  float16BitsToFloat32,
  float16ToFloat32,
  float32ToBFloat16Bits,
  float32ToFloat16,
  float32ToFloat16Bits,
  InvalidArgumentError,
  toFloat32,
} from '../../src/index';
import { b64 } from './fake';

describe('base64', () => {
  it('matches RFC 4648 vectors', () => {
    const vectors: [string, string][] = [
      ['', ''],
      ['f', 'Zg=='],
      ['fo', 'Zm8='],
      ['foo', 'Zm9v'],
      ['foob', 'Zm9vYg=='],
      ['fooba', 'Zm9vYmE='],
      ['foobar', 'Zm9vYmFy'],
    ];
    for (const [text, encoded] of vectors) {
      const bytes = new TextEncoder().encode(text);
      expect(base64FromBytes(bytes)).toBe(encoded);
      expect(bytesFromBase64(encoded)).toEqual(bytes);
    }
  });

  it('round-trips random bytes of every length, and agrees with Buffer', () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff;
    const bad: number[] = [];
    for (let n = 0; n < 300; n++) {
      const bytes = Uint8Array.from({ length: n }, rnd);
      const s = base64FromBytes(bytes);
      const same = (x: Uint8Array) => Buffer.from(x).equals(Buffer.from(bytes));
      // unpadded input decodes too
      if (s !== b64(bytes) || !same(bytesFromBase64(s)) || !same(bytesFromBase64(s.replace(/=+$/, '')))) bad.push(n);
    }
    expect(bad).toEqual([]);
    // Large input crosses the internal chunking
    const big = Uint8Array.from({ length: 100_003 }, rnd);
    expect(base64FromBytes(big)).toBe(b64(big));
    expect(Buffer.from(bytesFromBase64(b64(big))).equals(Buffer.from(big))).toBe(true);
  });

  it('encodes typed arrays as little-endian bytes, including subarrays', () => {
    const f = new Float32Array([1, -2, 0.5, 3]);
    expect(base64FromArray(f)).toBe(b64(f));
    const sub = f.subarray(1, 3);
    expect(base64FromArray(sub)).toBe(Buffer.from(new Uint8Array(f.buffer, 4, 8)).toString('base64'));
    expect(Array.from(arrayFromBase64(base64FromArray(sub), Float32Array))).toEqual([-2, 0.5]);
    const i = new Int32Array([-1, 2147483647, -2147483648]);
    expect(Array.from(arrayFromBase64(base64FromArray(i), Int32Array))).toEqual([-1, 2147483647, -2147483648]);
    const h = new Uint16Array([0x3c00, 0xffff]);
    expect(Array.from(arrayFromBase64(base64FromArray(h), Uint16Array))).toEqual([0x3c00, 0xffff]);
  });

  it('rejects malformed input', () => {
    expect(() => bytesFromBase64('TW!u')).toThrow(InvalidArgumentError);
    expect(() => bytesFromBase64('TW!u')).toThrow(/unexpected character "!" at 2/);
    expect(() => bytesFromBase64('A===')).toThrow(/too much padding/);
    expect(() => bytesFromBase64('AAAAA')).toThrow(/truncated/);
    expect(() => bytesFromBase64('AA A')).toThrow(/unexpected character " "/);
    expect(() => arrayFromBase64('AAAA', Float32Array)).toThrow(/3 bytes are not a whole number of 4-byte elements/);
  });
});

describe('half floats', () => {
  it('converts F16 bit patterns', () => {
    const cases: [number, number][] = [
      [0x0000, 0],
      [0x3c00, 1],
      [0xc000, -2],
      [0x3800, 0.5],
      [0x7bff, 65504],
      [0x0001, 2 ** -24],
      [0x0400, 2 ** -14],
      [0x3555, 0.333251953125],
      [0x7c00, Infinity],
      [0xfc00, -Infinity],
    ];
    for (const [bits, value] of cases) {
      expect(float16BitsToFloat32(bits)).toBe(value);
      expect(float32ToFloat16Bits(value)).toBe(bits);
    }
    expect(Object.is(float16BitsToFloat32(0x8000), -0)).toBe(true);
    expect(float32ToFloat16Bits(-0)).toBe(0x8000);
    expect(Number.isNaN(float16BitsToFloat32(0x7e00))).toBe(true);
    expect(float32ToFloat16Bits(NaN) & 0x7c00).toBe(0x7c00);
    expect(float32ToFloat16Bits(NaN) & 0x3ff).not.toBe(0);
  });

  it('rounds to nearest even, overflows to Inf, underflows to 0', () => {
    expect(float32ToFloat16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie -> even
    expect(float32ToFloat16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie -> even (up)
    expect(float32ToFloat16Bits(1 + 2 ** -11 + 2 ** -20)).toBe(0x3c01);
    expect(float32ToFloat16Bits(65520)).toBe(0x7c00);
    expect(float32ToFloat16Bits(65519)).toBe(0x7bff);
    expect(float32ToFloat16Bits(2 ** -25)).toBe(0); // tie -> even (0)
    expect(float32ToFloat16Bits(2 ** -25 + 2 ** -35)).toBe(1);
    expect(float32ToFloat16Bits(2 ** -14 - 2 ** -25)).toBe(0x0400); // rounds up into the normals
    // Every F16 value survives a round trip
    const bad: number[] = [];
    for (let bits = 0; bits < 0x10000; bits++) {
      const v = float16BitsToFloat32(bits);
      if (!Number.isNaN(v) && float32ToFloat16Bits(v) !== bits) bad.push(bits);
    }
    expect(bad).toEqual([]);
  });

  it('converts BF16 bit patterns', () => {
    expect(bfloat16BitsToFloat32(0x3f80)).toBe(1);
    expect(bfloat16BitsToFloat32(0xc040)).toBe(-3);
    expect(float32ToBFloat16Bits(1)).toBe(0x3f80);
    expect(float32ToBFloat16Bits(1 + 2 ** -8)).toBe(0x3f80); // tie -> even
    expect(float32ToBFloat16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(float32ToBFloat16Bits(3.4e38)).toBe(0x7f80);
    expect(Number.isNaN(bfloat16BitsToFloat32(float32ToBFloat16Bits(NaN)))).toBe(true);
    expect(Array.from(bfloat16ToFloat32(new Uint16Array([0x4000, 0xbf00])))).toEqual([2, -0.5]);
  });

  it('converts whole arrays and results', () => {
    const bits = float32ToFloat16([1, 0.5, -2]);
    expect(Array.from(bits)).toEqual([0x3c00, 0x3800, 0xc000]);
    expect(Array.from(float16ToFloat32(bits))).toEqual([1, 0.5, -2]);
    expect(Array.from(toFloat32({ name: 'h', dtype: 'F16', shape: [3], data: bits }))).toEqual([1, 0.5, -2]);
    expect(Array.from(toFloat32({ name: 'b', dtype: 'BF16', shape: [1], data: new Uint16Array([0x3f80]) }))).toEqual([1]);
    expect(Array.from(toFloat32({ name: 'i', dtype: 'I32', shape: [2], data: new Int32Array([3, -4]) }))).toEqual([3, -4]);
    const f = new Float32Array([1]);
    expect(toFloat32({ name: 'f', dtype: 'F32', shape: [1], data: f })).toBe(f);
    expect(() => toFloat32({ name: 'q', dtype: 'Q8_0', shape: [32], data: new Uint8Array(34) })).toThrow(/raw blocks/);
  });
});
