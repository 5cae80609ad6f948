/**
 * Conversion of results to plain numbers.
 *
 * @packageDocumentation
 */

import { InvalidArgumentError } from './errors';
import { bfloat16ToFloat32, float16ToFloat32 } from './half';
import type { AnyTensorValue, TensorValue } from './compute';
import type { DType } from './dtype';

/**
 * The values of a result as a `Float32Array`: F32 as is, F16 and BF16 bits converted, I32
 * values converted. Quantized results are raw blocks and are rejected.
 *
 * @param value - one output of `compute`
 */
export function toFloat32(value: AnyTensorValue | TensorValue<DType>): Float32Array {
  const v = value as AnyTensorValue;
  switch (v.dtype) {
    case 'F32':
      return v.data;
    case 'F16':
      return float16ToFloat32(v.data);
    case 'BF16':
      return bfloat16ToFloat32(v.data);
    case 'I32':
      return Float32Array.from(v.data);
    default:
      throw new InvalidArgumentError(`toFloat32: ${v.dtype} results are raw blocks; compute an F32 output instead`);
  }
}
