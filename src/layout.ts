/**
 * Tensor layouts (type, shape `ne`, byte strides `nb`), with the rules of
 * `rust/core/src/tensor.rs`: the graph builder checks shapes with them before anything is
 * sent to native code.
 *
 * @packageDocumentation
 */

import { DTYPE_INFO, type DType } from './dtype';
import { DTypeError, InvalidGraphError, ShapeError } from './errors';

/** Maximum number of dimensions, as in ggml. */
export const MAX_DIMS = 4;

/** The largest number of elements one dimension may have (2^40). */
export const MAX_DIM = 2 ** 40;

/** The largest size in bytes a tensor may have (2^48). */
export const MAX_TENSOR_BYTES = 2 ** 48;

/** Four numbers, one per dimension, innermost first. */
export type Dims4 = [number, number, number, number];

/** Type, shape and byte strides of a tensor. */
export interface Layout {
  /** Element type. */
  readonly dtype: DType;
  /** Elements per dimension, innermost first (ggml's `ne`). */
  readonly ne: Readonly<Dims4>;
  /** Byte stride per dimension (ggml's `nb`). */
  readonly nb: Readonly<Dims4>;
}

/** `[a, b, c, d]`, for messages. */
export function fmtShape(ne: readonly number[]): string {
  return `[${ne.join(', ')}]`;
}

/**
 * Pads a shape of 1 to 4 dimensions to 4 with ones, rejecting empty shapes, more than 4 dims,
 * zero, negative, fractional and over-large dimensions (a {@link ShapeError}).
 *
 * @param shape - the shape, innermost first
 * @param what - names the tensor or op for messages
 */
export function normalizeShape(shape: readonly number[], what: string): Dims4 {
  if (!Array.isArray(shape) || shape.length === 0 || shape.length > MAX_DIMS) {
    const len = Array.isArray(shape) ? shape.length : 'no';
    throw new ShapeError(`${what}: invalid shape ${show(shape)}: expected 1 to ${MAX_DIMS} dimensions, got ${len}`);
  }
  const ne: Dims4 = [1, 1, 1, 1];
  for (let i = 0; i < shape.length; i++) {
    const n = shape[i];
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
      throw new ShapeError(`${what}: invalid shape ${show(shape)}: dimension ${i} is not a non-negative integer`);
    }
    if (n === 0) throw new ShapeError(`${what}: invalid shape ${show(shape)}: dimension ${i} is zero`);
    if (n > MAX_DIM) {
      throw new ShapeError(`${what}: invalid shape ${show(shape)}: dimension ${i} is larger than ${MAX_DIM}`);
    }
    ne[i] = n;
  }
  return ne;
}

function show(shape: unknown): string {
  try {
    return JSON.stringify(shape) ?? String(shape);
  } catch {
    return String(shape);
  }
}

/**
 * Bytes of a row of `n` values of `dtype`; an {@link InvalidGraphError} when `n` is not whole
 * blocks (an invalid shape, as the core classifies it).
 */
export function rowSize(dtype: DType, n: number, what: string): number {
  const { blockSize, typeSize } = DTYPE_INFO[dtype];
  if (n % blockSize !== 0) {
    throw new InvalidGraphError(`${what}: ${n} values of ${dtype} are not a whole number of blocks of ${blockSize}`);
  }
  return (n / blockSize) * typeSize;
}

/**
 * A contiguous layout of `dtype` and `shape` (1 to 4 dims): rejects bad dims, rows that are
 * not whole blocks and sizes over 2^48 bytes.
 */
export function contiguous(dtype: DType, shape: readonly number[], what: string): Layout {
  if (!(dtype in DTYPE_INFO)) throw new DTypeError(`${what}: unknown tensor type ${JSON.stringify(dtype)}`, 'UnknownType');
  const ne = normalizeShape(shape, what);
  const row = rowSize(dtype, ne[0], what);
  const nb: Dims4 = [DTYPE_INFO[dtype].typeSize, row, 0, 0];
  nb[2] = nb[1] * ne[1];
  nb[3] = nb[2] * ne[2];
  const total = nb[3] * ne[3];
  if (total > MAX_TENSOR_BYTES) {
    throw new ShapeError(
      `${what}: invalid shape ${fmtShape(shape)}: ${total} bytes of ${dtype} exceed the limit of ${MAX_TENSOR_BYTES}`
    );
  }
  return { dtype, ne, nb };
}

/** Number of elements. */
export function nelements(l: Layout): number {
  return l.ne[0] * l.ne[1] * l.ne[2] * l.ne[3];
}

/** Bytes spanned from the first element to one past the last (ggml's `ggml_nbytes`). */
export function nbytes(l: Layout): number {
  const blck = DTYPE_INFO[l.dtype].blockSize;
  let n = blck === 1 ? DTYPE_INFO[l.dtype].typeSize : (l.ne[0] / blck) * l.nb[0];
  for (let i = blck === 1 ? 0 : 1; i < MAX_DIMS; i++) n += (l.ne[i]! - 1) * l.nb[i]!;
  return n;
}

/** Bytes of one row of `ne[0]` elements. */
export function rowBytes(l: Layout): number {
  const { blockSize, typeSize } = DTYPE_INFO[l.dtype];
  return (l.ne[0] / blockSize) * typeSize;
}

/** Whether the elements are densely packed in order (ggml's `ggml_is_contiguous`). */
export function isContiguous(l: Layout): boolean {
  const { blockSize, typeSize } = DTYPE_INFO[l.dtype];
  let next = typeSize;
  if (l.ne[0] !== blockSize && l.nb[0] !== next) return false;
  next *= l.ne[0] / blockSize;
  for (let i = 1; i < MAX_DIMS; i++) {
    if (l.ne[i] !== 1) {
      if (l.nb[i] !== next) return false;
      next *= l.ne[i]!;
    }
  }
  return true;
}

/** Whether each row is dense (`nb[0]` is the type size). */
export function rowsContiguous(l: Layout): boolean {
  return l.nb[0] === DTYPE_INFO[l.dtype].typeSize;
}

/** Whether dims 0 and 1 are swapped (`nb[0] > nb[1]`). */
export function isTransposed(l: Layout): boolean {
  return l.nb[0] > l.nb[1];
}

/** Whether `small` can be tiled to `big` (each dim of `big` a multiple of `small`'s). */
export function canRepeat(small: Readonly<Dims4>, big: Readonly<Dims4>): boolean {
  for (let i = 0; i < MAX_DIMS; i++) if (big[i]! % small[i]! !== 0) return false;
  return true;
}

/** The shape without trailing dims of 1 (at least one dim). */
export function trimShape(ne: Readonly<Dims4>): number[] {
  let n = MAX_DIMS;
  while (n > 1 && ne[n - 1] === 1) n--;
  return ne.slice(0, n);
}
