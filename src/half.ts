/**
 * Conversions between `Float32Array` and the raw 16-bit patterns of F16 (IEEE binary16) and
 * BF16 (bfloat16) that tensors of those types hold. Rounding is to nearest, ties to even, as
 * in the Rust core (`half` crate).
 *
 * @packageDocumentation
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The F16 bit pattern nearest to `value` (round to nearest even; NaN stays NaN). */
export function float32ToFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) {
    // Inf or NaN (keep a quiet NaN bit so NaN never becomes Inf).
    return sign | 0x7c00 | (mant ? 0x200 | (mant >>> 13) : 0);
  }
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow to Inf
  if (e <= 0) {
    // Subnormal F16 (or zero).
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && (m & 1) === 1)) m++;
    return sign | m;
  }
  let h = sign | (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++; // may carry into exp: correct
  return h;
}

/** The value of the F16 bit pattern `bits`. */
export function float16BitsToFloat32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** The BF16 bit pattern nearest to `value` (round to nearest even; NaN stays NaN). */
export function float32ToBFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 0x40) & 0xffff; // quiet NaN
  const rounded = x + 0x7fff + ((x >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

/** The value of the BF16 bit pattern `bits`. */
export function bfloat16BitsToFloat32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** F16 bit patterns of every value of `values`. */
export function float32ToFloat16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = float32ToFloat16Bits(values[i]!);
  return out;
}

/** The values of F16 bit patterns. */
export function float16ToFloat32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = float16BitsToFloat32(bits[i]!);
  return out;
}

/** BF16 bit patterns of every value of `values`. */
export function float32ToBFloat16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = float32ToBFloat16Bits(values[i]!);
  return out;
}

/** The values of BF16 bit patterns. */
export function bfloat16ToFloat32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = bfloat16BitsToFloat32(bits[i]!);
  return out;
}
