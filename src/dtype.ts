/**
 * Element types, with the same names, block sizes and byte sizes as the Rust core
 * (`rust/core/src/dtype.rs`) and GGUF.
 *
 * @packageDocumentation
 */

/** Block size (values per block) and type size (bytes per block) of every element type. */
export const DTYPE_INFO = {
  F32: { blockSize: 1, typeSize: 4 },
  F16: { blockSize: 1, typeSize: 2 },
  BF16: { blockSize: 1, typeSize: 2 },
  I32: { blockSize: 1, typeSize: 4 },
  Q4_0: { blockSize: 32, typeSize: 18 },
  Q4_1: { blockSize: 32, typeSize: 20 },
  Q5_0: { blockSize: 32, typeSize: 22 },
  Q5_1: { blockSize: 32, typeSize: 24 },
  Q8_0: { blockSize: 32, typeSize: 34 },
  Q8_1: { blockSize: 32, typeSize: 36 },
  Q2_K: { blockSize: 256, typeSize: 84 },
  Q3_K: { blockSize: 256, typeSize: 110 },
  Q4_K: { blockSize: 256, typeSize: 144 },
  Q5_K: { blockSize: 256, typeSize: 176 },
  Q6_K: { blockSize: 256, typeSize: 210 },
  Q8_K: { blockSize: 256, typeSize: 292 },
  IQ4_NL: { blockSize: 32, typeSize: 18 },
  IQ4_XS: { blockSize: 256, typeSize: 136 },
} as const satisfies Record<string, { blockSize: number; typeSize: number }>;

/** An element type name, as used in graph documents ("F32", "Q4_0", "Q4_K", ...). */
export type DType = keyof typeof DTYPE_INFO;

/** The floating-point types that element-wise ops read and write. */
export type FloatDType = 'F32' | 'F16' | 'BF16';

/** The 16-bit float types, stored as raw bits in a `Uint16Array`. */
export type HalfDType = 'F16' | 'BF16';

/** The block-quantized types (GGUF block layout), stored as raw bytes in a `Uint8Array`. */
export type QuantizedDType = Exclude<DType, 'F32' | 'F16' | 'BF16' | 'I32'>;

/**
 * The typed array holding values of type `D`:
 * - `F32`: `Float32Array`;
 * - `I32`: `Int32Array`;
 * - `F16` and `BF16`: `Uint16Array` of the raw 16-bit patterns (see {@link float16ToFloat32});
 * - quantized types: `Uint8Array` of the raw GGUF blocks.
 */
export type ArrayFor<D extends DType> = D extends 'F32'
  ? Float32Array
  : D extends 'I32'
    ? Int32Array
    : D extends HalfDType
      ? Uint16Array
      : Uint8Array;

/** Any typed array that holds tensor data. */
export type TensorArray = Float32Array | Int32Array | Uint16Array | Uint8Array;

/** Every element type, in ggml id order. */
export const DTYPES: readonly DType[] = Object.freeze(Object.keys(DTYPE_INFO) as DType[]);

/** Whether `name` is an element type name (exact, upper case). */
export function isDType(name: unknown): name is DType {
  return typeof name === 'string' && Object.prototype.hasOwnProperty.call(DTYPE_INFO, name);
}

/** Whether `dtype` is block-quantized. */
export function isQuantized(dtype: DType): dtype is QuantizedDType {
  return DTYPE_INFO[dtype].blockSize > 1;
}

/** Whether `dtype` is F32, F16 or BF16. */
export function isFloat(dtype: DType): dtype is FloatDType {
  return dtype === 'F32' || dtype === 'F16' || dtype === 'BF16';
}

/** The name of the typed array that holds values of `dtype`. */
export function arrayKindFor(dtype: DType): 'Float32Array' | 'Int32Array' | 'Uint16Array' | 'Uint8Array' {
  if (dtype === 'F32') return 'Float32Array';
  if (dtype === 'I32') return 'Int32Array';
  if (dtype === 'F16' || dtype === 'BF16') return 'Uint16Array';
  return 'Uint8Array';
}

/** Whether `data` is the typed array that holds values of `dtype` ({@link ArrayFor}). */
export function isArrayFor<D extends DType>(dtype: D, data: unknown): data is ArrayFor<D> {
  switch (arrayKindFor(dtype)) {
    case 'Float32Array':
      return data instanceof Float32Array;
    case 'Int32Array':
      return data instanceof Int32Array;
    case 'Uint16Array':
      return data instanceof Uint16Array;
    default:
      return data instanceof Uint8Array;
  }
}

/** The name of a typed array's constructor, for messages. */
export function describeArray(data: unknown): string {
  if (data === null) return 'null';
  if (typeof data !== 'object') return typeof data;
  const ctor = (data as { constructor?: { name?: string } }).constructor;
  return ctor?.name ?? 'object';
}
