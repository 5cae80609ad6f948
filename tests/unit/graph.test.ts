import { describe, expect, it } from 'vitest';
import {
  DataLengthError,
  DTypeError,
  GraphBuilder,
  InvalidArgumentError,
  InvalidGraphError,
  ShapeError,
  TesseraError,
  graph,
  type Tensor,
} from '../../src/index';

/** Erases a tensor's static type, to reach the run-time checks that the types already prevent. */
const any = (t: Tensor): Tensor<any> => t as Tensor<any>;

/** Expects `fn` to throw a TesseraError of `cls` with `kind` and a message matching `message`. */
function expectError(
  fn: () => unknown,
  cls: abstract new (...args: any[]) => TesseraError,
  kind: string,
  message: string | RegExp
): void {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  expect(thrown, 'expected an error').toBeInstanceOf(cls);
  expect(thrown).toBeInstanceOf(TesseraError);
  const e = thrown as TesseraError;
  expect(e.kind).toBe(kind);
  if (typeof message === 'string') expect(e.message).toBe(message);
  else expect(e.message).toMatch(message);
}

describe('graph documents', () => {
  it('matmul + softmax with an F32 constant', () => {
    const g = graph();
    const x = g.input('x', 'F32', [2, 3]);
    const w = g.constant('w', new Float32Array([1, 2, 3, 4]), { dtype: 'F32', shape: [2, 2] });
    const y = g.matmul(w, x);
    expect(y.dtype).toBe('F32');
    expect(y.shape).toEqual([2, 3]);
    const p = g.softmax(y, { scale: 0.5 });
    g.output(p, 'probs');
    expect(g.toJSON()).toEqual({
      version: 1,
      tensors: [
        { name: 'x', type: 'F32', shape: [2, 3] },
        // 1, 2, 3, 4 as little-endian f32
        { name: 'w', type: 'F32', shape: [2, 2], data: 'AACAPwAAAEAAAEBAAACAQA==' },
      ],
      nodes: [
        { name: 'mul_mat_0', op: 'MUL_MAT', src: ['w', 'x'] },
        { name: 'probs', op: 'SOFT_MAX', src: ['mul_mat_0'], params: { scale: 0.5, max_bias: 0 } },
      ],
      outputs: ['probs'],
    });
    // JSON.stringify uses toJSON, and the string form is the same document.
    expect(JSON.parse(JSON.stringify(g))).toEqual(g.toJSON());
    expect(JSON.parse(g.toJSONString())).toEqual(g.toJSON());
  });

  it('Q8_0 weights from values and from raw blocks, I32 constants, get_rows', () => {
    const g = graph();
    const wq = g.constant('wq', new Float32Array(64).fill(0.5), { dtype: 'Q8_0', shape: [32, 2] });
    const raw = new Uint8Array(34); // one Q8_0 block: f16 scale then 32 int8
    raw[1] = 0x3c; // d = 1.0 (f16 0x3c00)
    raw[2] = 1;
    const wr = g.constant('wr', raw, { dtype: 'Q8_0', shape: [32] });
    const ids = g.constant('ids', [1, 0, 1], { dtype: 'I32', shape: [3] });
    const ids2 = g.constant('ids2', new Int32Array([0]), { dtype: 'I32', shape: [1] });
    const rows = g.getRows(wq, ids);
    expect(rows.dtype).toBe('F32');
    expect(rows.shape).toEqual([32, 3]);
    const r2 = g.getRows(wr, ids2);
    const x = g.input('x', 'F32', [32, 1]);
    const y = g.matmul(wq, x);
    g.output(rows, 'rows').output(r2).output(y, 'y');
    const doc = g.toJSON();
    expect(doc.tensors).toEqual([
      { name: 'wq', type: 'Q8_0', shape: [32, 2], values: new Array(64).fill(0.5) },
      { name: 'wr', type: 'Q8_0', shape: [32], data: 'ADwBAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==' },
      { name: 'ids', type: 'I32', shape: [3], values: [1, 0, 1] },
      { name: 'ids2', type: 'I32', shape: [1], data: 'AAAAAA==' },
      { name: 'x', type: 'F32', shape: [32, 1] },
    ]);
    expect(doc.nodes).toEqual([
      { name: 'rows', op: 'GET_ROWS', src: ['wq', 'ids'] },
      { name: 'get_rows_1', op: 'GET_ROWS', src: ['wr', 'ids2'] },
      { name: 'y', op: 'MUL_MAT', src: ['wq', 'x'] },
    ]);
    expect(doc.outputs).toEqual(['rows', 'get_rows_1', 'y']);
  });

  it('an attention block: rms_norm, rope, permute, view, reshape, cont, diag mask, swiglu', () => {
    const g = graph();
    const x = g.input('x', 'F32', [8, 4]); // 4 tokens of 8
    const pos = g.input('pos', 'I32', [4]);
    const n = g.rmsNorm(x, 1e-5);
    const q = g.reshape(n, [4, 2, 4]); // head_dim 4, 2 heads, 4 tokens
    const r = g.rope(q, pos, { nDims: 4, mode: 'neox', freqBase: 500000 });
    const pq = g.permute(r, [0, 2, 1, 3]); // [4, 4, 2]
    expect(pq.shape).toEqual([4, 4, 2]);
    expect(pq.nb).toEqual([4, 32, 16, 128]);
    const kq = g.matmul(g.cont(pq), g.cont(pq)); // [4, 4, 2]
    const masked = g.diagMaskInf(kq, 0);
    const sm = g.softmax(masked, { scale: 0.5 });
    const first = g.view(sm, [4, 4], { offset: 0 });
    const t = g.transpose(first);
    const c = g.cont(t);
    const gate = g.swiglu(c); // [2, 4]
    const sw2 = g.swiglu(gate, { swapped: true }); // [1, 4]
    const cat = g.concat(sw2, sw2, 0); // [2, 4]
    const sc = g.scale(g.add(cat, gate), 2, 1);
    const cl = g.clamp(sc, -1, 1);
    g.output(cl, 'out');
    const doc = g.toJSON();
    expect(doc.tensors).toEqual([
      { name: 'x', type: 'F32', shape: [8, 4] },
      { name: 'pos', type: 'I32', shape: [4] },
    ]);
    expect(doc.nodes).toEqual([
      { name: 'rms_norm_0', op: 'RMS_NORM', src: ['x'], params: { eps: 1e-5 } },
      { name: 'reshape_1', op: 'RESHAPE', src: ['rms_norm_0'], params: { shape: [4, 2, 4] } },
      {
        name: 'rope_2',
        op: 'ROPE',
        src: ['reshape_1', 'pos'],
        params: {
          n_dims: 4,
          mode: 2,
          n_ctx_orig: 0,
          freq_base: 500000,
          freq_scale: 1,
          ext_factor: 0,
          attn_factor: 1,
          beta_fast: 32,
          beta_slow: 1,
        },
      },
      { name: 'permute_3', op: 'PERMUTE', src: ['rope_2'], params: { axes: [0, 2, 1, 3] } },
      { name: 'cont_4', op: 'CONT', src: ['permute_3'] },
      { name: 'cont_5', op: 'CONT', src: ['permute_3'] },
      { name: 'mul_mat_6', op: 'MUL_MAT', src: ['cont_4', 'cont_5'] },
      { name: 'diag_mask_inf_7', op: 'DIAG_MASK_INF', src: ['mul_mat_6'], params: { n_past: 0 } },
      { name: 'soft_max_8', op: 'SOFT_MAX', src: ['diag_mask_inf_7'], params: { scale: 0.5, max_bias: 0 } },
      { name: 'view_9', op: 'VIEW', src: ['soft_max_8'], params: { shape: [4, 4], strides: [16], offset: 0 } },
      { name: 'transpose_10', op: 'TRANSPOSE', src: ['view_9'] },
      { name: 'cont_11', op: 'CONT', src: ['transpose_10'] },
      { name: 'swiglu_12', op: 'SWIGLU', src: ['cont_11'] },
      { name: 'swiglu_13', op: 'SWIGLU', src: ['swiglu_12'], params: { swapped: true } },
      { name: 'concat_14', op: 'CONCAT', src: ['swiglu_13', 'swiglu_13'], params: { dim: 0 } },
      { name: 'add_15', op: 'ADD', src: ['concat_14', 'swiglu_12'] },
      { name: 'scale_16', op: 'SCALE', src: ['add_15'], params: { scale: 2, bias: 1 } },
      { name: 'out', op: 'CLAMP', src: ['scale_16'], params: { min: -1, max: 1 } },
    ]);
    expect(doc.outputs).toEqual(['out']);
  });

  it('the remaining ops and their result types', () => {
    const g = graph();
    const a = g.input('a', 'F32', [6, 2]);
    const h = g.input('h', 'F16', [6, 2]);
    const b = g.input('b', 'F32', [6]);
    const m = g.input('mask', 'F16', [6, 4]);
    expect(g.sub(a, b).dtype).toBe('F32');
    expect(g.mul(h, b).dtype).toBe('F16');
    expect(g.div(a, h).shape).toEqual([6, 2]);
    expect(g.sqr(a).op).toBe('SQR');
    expect(g.sqrt(h).dtype).toBe('F16');
    expect(g.sum(h).shape).toEqual([1]);
    expect(g.sum(h).dtype).toBe('F16');
    expect(g.sumRows(a).shape).toEqual([1, 2]);
    expect(g.mean(h).dtype).toBe('F32');
    const am = g.argmax(a);
    expect([am.dtype, am.shape]).toEqual(['I32', [2]]);
    expect(g.repeat(b, [6, 3]).shape).toEqual([6, 3]);
    expect(g.repeat(b, a).shape).toEqual([6, 2]);
    expect(g.norm(a).params).toEqual({ eps: 1e-6 });
    expect(g.silu(a).op).toBe('SILU');
    expect(g.gelu(a).op).toBe('GELU');
    expect(g.relu(a).op).toBe('RELU');
    expect(g.tanh(a).op).toBe('TANH');
    expect(g.sigmoid(a).op).toBe('SIGMOID');
    expect(g.softplus(a).op).toBe('SOFTPLUS');
    expect(g.geglu(a, a).shape).toEqual([6, 2]);
    expect(g.softmax(a, { mask: m, maxBias: 8 }).src.map((t) => t.name)).toEqual(['a', 'mask']);
    const dst = g.input('dst', 'F16', [12]);
    const cp = g.cpy(a, dst);
    expect([cp.dtype, cp.shape, cp.isView]).toEqual(['F16', [12], true]);
    const q = g.input('q', 'Q4_0', [64, 2]);
    expect(g.dup(q).dtype).toBe('Q4_0');
    const qi = g.input('qi', 'F32', [64, 2]);
    expect(g.cpy(qi, g.input('qd', 'Q8_0', [128])).dtype).toBe('Q8_0');
    const ids = g.input('ids', 'I32', [5]);
    expect(g.getRows(g.input('tab', 'I32', [3, 4]), ids).dtype).toBe('I32');
    // A 1-dim view of the second row, and a 3-dim reshape
    const row = g.view(a, [6], { offset: 24 });
    expect(row.params).toEqual({ shape: [6], strides: [], offset: 24 });
    expect(g.reshape(a, [3, 2, 2]).shape).toEqual([3, 2, 2]);
  });

  it('names: made-up names give way, outputs keep theirs, names are unique', () => {
    const g = graph();
    const a = g.input('a', 'F32', [2]);
    const r = g.relu(a);
    expect(r.name).toBe('relu_0');
    // A user name taken from a made-up one renames the latter
    const c = g.input('relu_0', 'F32', [2]);
    expect(c.name).toBe('relu_0');
    expect(r.name).toBe('relu_1');
    g.setName(r, 'act');
    expect(g.get('act')).toBe(r);
    expectError(() => g.input('a', 'F32', [2]), InvalidGraphError, 'InvalidGraph', 'input "a": duplicate tensor name "a"');
    expectError(() => g.setName(r, 'a'), InvalidGraphError, 'InvalidGraph', 'node "a": duplicate tensor name "a"');
    expectError(() => g.output(a, 'other'), InvalidArgumentError, 'InvalidArgument', /input "a" is already named/);
    g.output(a);
    expectError(() => g.output(a), InvalidGraphError, 'InvalidGraph', 'output: "a" is already an output');
    expectError(() => g.input('', 'F32', [1]), InvalidGraphError, 'InvalidGraph', /non-empty name/);
    expect(g.toJSON().outputs).toEqual(['a']);
  });

  it('needs outputs, and caches its JSON until the graph changes', () => {
    const g = new GraphBuilder();
    const a = g.input('a', 'F32', [2]);
    expectError(() => g.toJSON(), InvalidGraphError, 'InvalidGraph', /no outputs/);
    g.output(a);
    const s1 = g.toJSONString();
    expect(g.toJSONString()).toBe(s1);
    g.output(g.relu(a), 'r');
    expect(g.toJSONString()).not.toBe(s1);
    expect(JSON.parse(g.toJSONString()).outputs).toEqual(['a', 'r']);
  });

  it('copies constant data', () => {
    const g = graph();
    const data = new Float32Array([1, 2]);
    g.output(g.constant('c', data, { dtype: 'F32', shape: [2] }));
    data[0] = 5;
    expect(g.toJSON().tensors[0]!.data).toBe('AACAPwAAAEA=');
  });
});

describe('validation errors name the op and the shapes', () => {
  const g = graph();
  const a = g.input('a', 'F32', [4, 3]);
  const b = g.input('b', 'F32', [3, 3]);
  const h = g.input('h', 'F16', [4, 3]);
  const i = g.input('i', 'I32', [4, 3]);
  const q = g.input('q', 'Q4_0', [32, 3]);
  const pos = g.input('pos', 'I32', [3]);

  it('shapes of inputs and constants', () => {
    expectError(() => g.input('z', 'F32', [0, 2]), ShapeError, 'ShapeMismatch', 'input "z": invalid shape [0,2]: dimension 0 is zero');
    expectError(() => g.input('z', 'F32', []), ShapeError, 'ShapeMismatch', /expected 1 to 4 dimensions, got 0/);
    expectError(() => g.input('z', 'F32', [1, 2, 3, 4, 5]), ShapeError, 'ShapeMismatch', /expected 1 to 4 dimensions, got 5/);
    expectError(() => g.input('z', 'F32', [1.5]), ShapeError, 'ShapeMismatch', /dimension 0 is not a non-negative integer/);
    expectError(() => g.input('z', 'F32', [2 ** 41]), ShapeError, 'ShapeMismatch', /dimension 0 is larger than 1099511627776/);
    expectError(
      () => g.input('z', 'F32', [2 ** 40, 2 ** 40]),
      ShapeError,
      'ShapeMismatch',
      /exceed the limit of 281474976710656/
    );
    expectError(
      () => g.input('z', 'Q4_0', [33]),
      InvalidGraphError,
      'InvalidGraph',
      'input "z": 33 values of Q4_0 are not a whole number of blocks of 32'
    );
    expectError(() => g.input('z', 'Q9_9' as 'F32', [1]), DTypeError, 'UnknownType', /unknown tensor type "Q9_9"/);
    expectError(
      () => g.constant('z', new Float32Array(3), { dtype: 'F32', shape: [4] }),
      DataLengthError,
      'DataLength',
      'constant "z": F32 [4, 1, 1, 1] needs 4 values, got 3'
    );
    expectError(
      () => g.constant('z', new Uint8Array(35), { dtype: 'Q8_0', shape: [32] }),
      DataLengthError,
      'DataLength',
      'constant "z": Q8_0 [32, 1, 1, 1] needs 34 bytes, got 35'
    );
    expectError(
      () => g.constant('z', new Int32Array(2) as never, { dtype: 'F16', shape: [2] }),
      InvalidArgumentError,
      'InvalidArgument',
      'constant "z": F16 data must be a Uint16Array, a Float32Array or a number[], got Int32Array'
    );
    expectError(
      () => g.constant('z', [1.5], { dtype: 'I32', shape: [1] }),
      InvalidArgumentError,
      'InvalidArgument',
      'constant "z": value 0 (1.5) is not an I32 value'
    );
    expectError(
      () => g.constant('z', [NaN], { dtype: 'F16', shape: [1] }),
      InvalidArgumentError,
      'InvalidArgument',
      /value 0 \(NaN\) is not a finite number/
    );
  });

  it('broadcasting of binary ops', () => {
    expectError(
      () => g.add(a, b),
      ShapeError,
      'ShapeMismatch',
      'ADD: src1 [3, 3, 1, 1] cannot be broadcast to src0 [4, 3, 1, 1]'
    );
    expectError(() => g.mul(any(i), a), DTypeError, 'Unsupported', 'MUL: type I32 is not supported (src0 must be F32, F16 or BF16)');
    expectError(() => g.sub(a, any(q)), DTypeError, 'Unsupported', 'SUB: type Q4_0 is not supported (src1 must be F32, F16 or BF16)');
    expectError(() => g.relu(any(i)), DTypeError, 'Unsupported', /RELU: type I32 is not supported/);
  });

  it('matmul', () => {
    expectError(
      () => g.matmul(a, b),
      ShapeError,
      'ShapeMismatch',
      "MUL_MAT: src0 [4, 3, 1, 1] and src1 [3, 3, 1, 1] need equal ne0 and src1's ne2, ne3 multiples of src0's"
    );
    const a3 = g.input('a3', 'F32', [4, 3, 2]);
    const b3 = g.input('b3', 'F32', [4, 5, 3]);
    expectError(() => g.matmul(a3, b3), ShapeError, 'ShapeMismatch', /MUL_MAT: src0 \[4, 3, 2, 1\] and src1 \[4, 5, 3, 1\]/);
    expect(g.matmul(a3, g.input('b6', 'F32', [4, 5, 6])).shape).toEqual([3, 5, 6]);
    expectError(
      () => g.matmul(a, any(g.input('ai', 'I32', [4, 2]))),
      DTypeError,
      'Unsupported',
      'MUL_MAT: type I32 is not supported (src1 (activations) must be F32, F16 or BF16)'
    );
    expect(g.matmul(g.input('wf16', 'F16', [4, 3]), g.input('xf16', 'F16', [4, 2])).shape).toEqual([3, 2]);
    expectError(() => g.matmul(i, a), DTypeError, 'Unsupported', 'MUL_MAT: type I32 is not supported (src0 (weights) must not be I32)');
    expectError(
      () => g.matmul(g.transpose(g.input('sq', 'F32', [4, 4])), a),
      ShapeError,
      'ShapeMismatch',
      'MUL_MAT: src0 must not be transposed (make it CONT)'
    );
    expect(g.matmul(q, g.input('x32', 'F32', [32, 7])).shape).toEqual([3, 7]);
  });

  it('get_rows', () => {
    expectError(
      () => g.getRows(a, g.input('ix', 'I32', [2, 2])),
      ShapeError,
      'ShapeMismatch',
      'GET_ROWS: src0 [4, 3, 1, 1] and indices [2, 2, 1, 1]: need src0 ne2 == indices ne1, src0 ne3 == indices ne2'
    );
    expectError(() => g.getRows(a, any(a)), DTypeError, 'Unsupported', 'GET_ROWS: type F32 is not supported (src1 (indices) must be I32)');
  });

  it('softmax and its mask', () => {
    expectError(
      () => g.softmax(a, { mask: g.input('m1', 'F32', [5, 3]) }),
      ShapeError,
      'ShapeMismatch',
      "SOFT_MAX: mask [5, 3, 1, 1] does not fit src0 [4, 3, 1, 1]: need equal ne0, at least as many rows, and ne2, ne3 dividing src0's"
    );
    expectError(() => g.softmax(a, { mask: g.input('m2', 'F32', [4, 2]) }), ShapeError, 'ShapeMismatch', /mask \[4, 2, 1, 1\]/);
    expect(g.softmax(a, { mask: g.input('m3', 'F32', [4, 8]) }).shape).toEqual([4, 3]);
    expectError(() => g.softmax(a, { mask: any(i) }), DTypeError, 'Unsupported', 'SOFT_MAX: type I32 is not supported (mask must be F32 or F16)');
    expectError(() => g.softmax(any(h)), DTypeError, 'Unsupported', 'SOFT_MAX: type F16 is not supported (src0 must be F32)');
    expectError(() => g.softmax(a, { maxBias: 1 }), InvalidGraphError, 'InvalidGraph', 'SOFT_MAX: max_bias > 0 needs a mask');
    expectError(
      () => g.softmax(a, { scale: Infinity }),
      InvalidGraphError,
      'InvalidGraph',
      'SOFT_MAX: scale Infinity must be finite and max_bias 0 finite and >= 0'
    );
  });

  it('rope', () => {
    const x = g.input('rx', 'F32', [8, 2, 3]);
    expectError(
      () => g.rope(x, g.input('p4', 'I32', [4])),
      ShapeError,
      'ShapeMismatch',
      "ROPE: positions [4, 1, 1, 1] must be a vector of src0's ne2 = 3 (src0 [8, 2, 3, 1])"
    );
    expectError(() => g.rope(x, pos, { nDims: 3 }), InvalidGraphError, 'InvalidGraph', 'ROPE: n_dims 3 must be even, > 0 and at most ne0 = 8');
    expectError(() => g.rope(x, pos, { nDims: 10 }), InvalidGraphError, 'InvalidGraph', /n_dims 10/);
    expectError(() => g.rope(x, pos, { mode: 1 as 0 }), InvalidGraphError, 'InvalidGraph', /ROPE: mode 1 is not/);
    expectError(() => g.rope(x, pos, { freqBase: 0 }), InvalidGraphError, 'InvalidGraph', 'ROPE: parameters must be finite, freq_base > 0');
    expectError(() => g.rope(x, any(a)), DTypeError, 'Unsupported', 'ROPE: type F32 is not supported (positions must be I32)');
    expectError(
      () => g.rope(x, pos, { nDims: 8, freqFactors: g.input('ff', 'F32', [3]) }),
      ShapeError,
      'ShapeMismatch',
      'ROPE: frequency factors must be F32 with at least 4 values'
    );
    expectError(
      () => g.rope(x, pos, { nDims: 8, freqFactors: any(g.input('ffh', 'F16', [4])) }),
      DTypeError,
      'Unsupported',
      'ROPE: type F16 is not supported (frequency factors must be F32)'
    );
    expect(g.rope(x, pos).params.n_dims).toBe(8);
  });

  it('concat, repeat, argmax, glu', () => {
    expectError(() => g.concat(a, b, 1), ShapeError, 'ShapeMismatch', 'CONCAT: src0 [4, 3, 1, 1] and src1 [3, 3, 1, 1] differ outside dim 1');
    expect(g.concat(a, b, 0).shape).toEqual([7, 3]);
    expectError(() => g.concat(a, a, 4), InvalidGraphError, 'InvalidGraph', 'CONCAT: dim 4 is not below 4');
    expectError(() => g.concat(a, any(h), 0), DTypeError, 'Unsupported', "CONCAT: type F16 is not supported (src1 must have src0's type F32)");
    expectError(() => g.repeat(a, [6, 3]), ShapeError, 'ShapeMismatch', 'REPEAT: src0 [4, 3, 1, 1] cannot be tiled to [6, 3, 1, 1]');
    expectError(() => g.argmax(g.input('a3d', 'F32', [2, 2, 2])), ShapeError, 'ShapeMismatch', 'ARGMAX: src0 [2, 2, 2, 1] is not a matrix');
    expectError(() => g.swiglu(b), ShapeError, 'ShapeMismatch', 'SWIGLU: src0 ne0 = 3 is not even');
    expectError(() => g.geglu(a, b), ShapeError, 'ShapeMismatch', 'GEGLU: src0 [4, 3, 1, 1] and src1 [3, 3, 1, 1] differ');
    expectError(() => g.swiglu(a, a, { swapped: true }), InvalidGraphError, 'InvalidGraph', 'SWIGLU: swapped applies to one source only');
    expectError(() => g.clamp(a, 1, 0), InvalidGraphError, 'InvalidGraph', 'CLAMP: min 1 must not be above max 0');
    expectError(() => g.clamp(a, -Infinity, 0), InvalidGraphError, 'InvalidGraph', 'CLAMP: min -Infinity must be a finite number');
    expectError(() => g.rmsNorm(a, -1), InvalidGraphError, 'InvalidGraph', 'RMS_NORM: eps -1 must be finite, >= 0');
    expectError(() => g.diagMaskInf(a, -1), InvalidGraphError, 'InvalidGraph', 'DIAG_MASK_INF: n_past -1 must be a non-negative integer');
  });

  it('reshape, view, permute, transpose, cpy', () => {
    expectError(
      () => g.reshape(a, [5, 2]),
      ShapeError,
      'ShapeMismatch',
      'RESHAPE: src0 [4, 3, 1, 1] has 12 elements, shape [5, 2] has 10'
    );
    expectError(() => g.reshape(g.transpose(a), [12]), ShapeError, 'ShapeMismatch', 'RESHAPE: src0 is not contiguous (make it CONT first)');
    expectError(() => g.reshape(q, [16, 6]), InvalidGraphError, 'InvalidGraph', 'RESHAPE: 16 values of Q4_0 are not a whole number of blocks of 32');
    expectError(
      () => g.view(a, [4, 2], { offset: 24 }),
      ShapeError,
      'ShapeMismatch',
      'VIEW: view out of bounds: shape [4, 2] strides [16] at offset 24 exceed the 48 bytes of src0 [4, 3, 1, 1]'
    );
    expect(g.view(a, [4, 2], { offset: 16 }).shape).toEqual([4, 2]);
    expectError(() => g.view(a, [4, 2], { strides: [] }), InvalidGraphError, 'InvalidGraph', 'VIEW: 2 dims need 1 strides, got 0');
    expectError(() => g.view(q, [32], { offset: 9 }), ShapeError, 'ShapeMismatch', 'VIEW: view out of bounds: offset 9 is not at a Q4_0 block boundary');
    expect(g.view(q, [32], { offset: 18 }).shape).toEqual([32]);
    expectError(() => g.permute(a, [0, 1, 1, 3]), InvalidGraphError, 'InvalidGraph', 'PERMUTE: axes [0,1,1,3] are not a permutation of 0..4');
    expectError(() => g.permute(q, [1, 0, 2, 3]), ShapeError, 'ShapeMismatch', "PERMUTE: a quantized tensor's dim 0 must stay in place");
    expectError(() => g.transpose(q), ShapeError, 'ShapeMismatch', 'TRANSPOSE: a quantized tensor cannot be transposed');
    expectError(
      () => g.cpy(a, b),
      ShapeError,
      'ShapeMismatch',
      'CPY: src0 [4, 3, 1, 1] and destination [3, 3, 1, 1] have different element counts'
    );
    expectError(() => g.cpy(i, a), DTypeError, 'Unsupported', 'CPY: type I32 is not supported (I32 copies only to I32)');
    expectError(
      () => g.cpy(g.input('f48', 'F32', [48, 2]), g.input('q96', 'Q4_0', [96])),
      ShapeError,
      'ShapeMismatch',
      'CPY: src0 rows of 48 are not whole Q4_0 blocks'
    );
  });

  it('operands from another graph, or not tensors at all', () => {
    const other = graph().input('o', 'F32', [4, 3]);
    expectError(() => g.add(a, other), InvalidArgumentError, 'InvalidArgument', 'ADD: tensor "o" belongs to another graph');
    expectError(() => g.relu({} as Tensor<'F32'>), InvalidArgumentError, 'InvalidArgument', 'RELU: expected a Tensor of this graph, got Object');
  });
});
