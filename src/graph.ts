/**
 * The graph builder: declare inputs and constants, apply ops, name outputs, and get the graph
 * document (`rust/core/src/document.rs`) that {@link compute} sends to the Rust core.
 *
 * Every op checks its operands with the rules of `rust/core/src/graph.rs` as it is called and
 * throws a {@link TesseraError} subclass naming the op and the shapes, so a graph that builds
 * here is one the core accepts.
 *
 * Shapes are innermost first, like ggml's `ne`: a matrix of `rows` rows of `cols` values has
 * shape `[cols, rows]`.
 *
 * @packageDocumentation
 */

import { base64FromArray } from './base64';
import {
  DTYPE_INFO,
  arrayKindFor,
  describeArray,
  isArrayFor,
  isDType,
  isFloat,
  isQuantized,
  type ArrayFor,
  type DType,
  type FloatDType,
} from './dtype';
import { DTypeError, InvalidArgumentError, InvalidGraphError, ShapeError, DataLengthError } from './errors';
import {
  MAX_DIMS,
  canRepeat,
  contiguous,
  fmtShape,
  isContiguous,
  isTransposed,
  nbytes,
  nelements,
  normalizeShape,
  rowBytes,
  rowsContiguous,
  trimShape,
  type Dims4,
  type Layout,
} from './layout';

/** The graph document version this package writes (`GRAPH_FORMAT_VERSION` in the core). */
export const GRAPH_FORMAT_VERSION = 1;

/** The op names of graph documents. */
export type OpName =
  | 'ADD'
  | 'SUB'
  | 'MUL'
  | 'DIV'
  | 'MUL_MAT'
  | 'GET_ROWS'
  | 'CPY'
  | 'DUP'
  | 'CONT'
  | 'SQR'
  | 'SQRT'
  | 'SUM'
  | 'SUM_ROWS'
  | 'MEAN'
  | 'ARGMAX'
  | 'TRANSPOSE'
  | 'SCALE'
  | 'CLAMP'
  | 'REPEAT'
  | 'CONCAT'
  | 'SOFT_MAX'
  | 'DIAG_MASK_INF'
  | 'RMS_NORM'
  | 'NORM'
  | 'ROPE'
  | 'SWIGLU'
  | 'GEGLU'
  | 'SILU'
  | 'GELU'
  | 'RELU'
  | 'TANH'
  | 'SIGMOID'
  | 'SOFTPLUS'
  | 'RESHAPE'
  | 'VIEW'
  | 'PERMUTE';

/** A parameter value in a graph document. */
export type ParamValue = number | boolean | number[];

/** A leaf tensor of a graph document: an input without data, a constant with it. */
export interface TensorDocument {
  /** Unique name. */
  name: string;
  /** Element type. */
  type: DType;
  /** Shape, innermost first, 1 to 4 dims. */
  shape: number[];
  /** Constant bytes in base64 (little-endian, GGUF block layout). */
  data?: string;
  /** Constant values as numbers, converted (or quantized) to `type` by the core. */
  values?: number[];
}

/** A node of a graph document: an op applied to named sources. */
export interface NodeDocument {
  /** Unique name. */
  name: string;
  /** Op name. */
  op: OpName;
  /** Source tensor or node names, in ggml's operand order. */
  src: string[];
  /** Op parameters (absent when the op has none). */
  params?: Record<string, ParamValue>;
}

/** A whole graph document (docs/graph-format.md; `GraphDocument` in rust/core/src/document.rs). */
export interface GraphDocument {
  /** Format version, {@link GRAPH_FORMAT_VERSION}. */
  version: typeof GRAPH_FORMAT_VERSION;
  /** Inputs and constants. */
  tensors: TensorDocument[];
  /** Nodes, in the order they were created (a valid forward order). */
  nodes: NodeDocument[];
  /** Names of the tensors to return. */
  outputs: string[];
}

/** A model file (GGUF) that a version-2 document takes constants from. */
export interface FileDocument {
  /** Unique name, which file tensors refer to. */
  name: string;
  /** The file's path on the device. */
  path: string;
}

/**
 * A constant of a version-2 document read in place from a model file's tensor: no bytes in the
 * document. `type` and `shape` come from the file; when given they must equal the file's.
 */
export interface FileTensorDocument {
  /** Unique name in the document. */
  name: string;
  /** The `name` of one of the document's {@link GraphDocumentV2.files}. */
  file: string;
  /** The tensor's name in the file (e.g. `blk.0.ffn_up.weight`). */
  tensor: string;
  /** The type the document expects (checked against the file's). */
  type?: DType;
  /** The shape the document expects, innermost first (checked against the file's). */
  shape?: number[];
}

/**
 * A graph document of version 2 (docs/graph-format.md): version 1's fields, plus model files
 * whose tensors constants name. Run it with {@link Session.load}.
 */
export interface GraphDocumentV2 {
  /** Format version 2. */
  version: 2;
  /** The model files the document uses. */
  files?: FileDocument[];
  /** Inputs, constants and file tensors. */
  tensors: (TensorDocument | FileTensorDocument)[];
  /** Nodes, in any order (they are sorted so that sources come first). */
  nodes: NodeDocument[];
  /** Names of the tensors to return. */
  outputs: string[];
}

/** How a tensor came to be. */
export type TensorKind = 'input' | 'constant' | 'node';

/**
 * A tensor of a graph being built: an input, a constant or the result of an op. It carries
 * its element type and shape, so that results have known types. Create tensors through a
 * {@link GraphBuilder}, never directly.
 *
 * @typeParam D - the element type
 */
export class Tensor<D extends DType = DType> {
  /** Whether this is an input, a constant or an op result. */
  readonly kind: TensorKind;
  /** Element type. */
  readonly dtype: D;
  /**
   * Shape, innermost first: as declared for inputs and constants; without trailing dims of 1
   * for op results.
   */
  readonly shape: readonly number[];
  /** Elements per dimension, always 4 (ggml's `ne`). */
  readonly ne: Readonly<Dims4>;
  /** Byte strides per dimension (ggml's `nb`); not dense for views. */
  readonly nb: Readonly<Dims4>;
  /** The op that computes it, or `null` for inputs and constants. */
  readonly op: OpName | null;
  /** The op's operands. */
  readonly src: readonly Tensor[];
  /** The op's parameters as written in the document. */
  readonly params: Readonly<Record<string, ParamValue>>;
  /** Whether the tensor shares the memory of another (RESHAPE, VIEW, PERMUTE, TRANSPOSE, CPY). */
  readonly isView: boolean;

  /** @internal */
  _name: string;
  /** @internal whether the name was made up by the builder (and may be replaced) */
  _autoNamed: boolean;
  /** @internal */
  readonly _graph: GraphBuilder<any>;
  /** @internal constant payload */
  readonly _data: { data?: string; values?: number[] } | undefined;

  /** @internal Use the {@link GraphBuilder} methods to create tensors. */
  constructor(init: {
    graph: GraphBuilder<any>;
    kind: TensorKind;
    layout: Layout;
    shape?: readonly number[];
    op?: OpName;
    src?: readonly Tensor[];
    params?: Record<string, ParamValue>;
    isView?: boolean;
    name: string;
    autoNamed: boolean;
    data?: { data?: string; values?: number[] };
  }) {
    this._graph = init.graph;
    this.kind = init.kind;
    this.dtype = init.layout.dtype as D;
    this.ne = Object.freeze([...init.layout.ne]) as Readonly<Dims4>;
    this.nb = Object.freeze([...init.layout.nb]) as Readonly<Dims4>;
    this.shape = Object.freeze(init.shape ? [...init.shape] : trimShape(init.layout.ne));
    this.op = init.op ?? null;
    this.src = Object.freeze([...(init.src ?? [])]);
    this.params = Object.freeze({ ...(init.params ?? {}) });
    this.isView = init.isView ?? false;
    this._name = init.name;
    this._autoNamed = init.autoNamed;
    this._data = init.data;
  }

  /** The tensor's name in the graph document (op results get one made up, like `mul_mat_0`). */
  get name(): string {
    return this._name;
  }

  /** Number of elements. */
  get size(): number {
    return this.ne[0] * this.ne[1] * this.ne[2] * this.ne[3];
  }

  /** @internal */
  get _layout(): Layout {
    return { dtype: this.dtype, ne: this.ne, nb: this.nb };
  }

  /** `F32 [4, 3]` style description, for messages. */
  toString(): string {
    return `${this.dtype} ${fmtShape(this.shape)}`;
  }
}

/** Options of {@link GraphBuilder.constant}. */
export interface ConstantOptions<D extends DType> {
  /** Element type. */
  dtype: D;
  /** Shape, innermost first. */
  shape: readonly number[];
}

/** Options of {@link GraphBuilder.softmax}. */
export interface SoftmaxOptions {
  /** Added to `a * scale` before the softmax: F32 or F16, `a`'s `ne0`, at least `a`'s rows. */
  mask?: Tensor<'F32' | 'F16'>;
  /** Multiplies `a` first (default 1). */
  scale?: number;
  /** ALiBi maximum bias (default 0: off); needs a mask. */
  maxBias?: number;
}

/** Options of {@link GraphBuilder.rope} (ggml's `ggml_rope_ext` parameters). */
export interface RopeOptions {
  /** Leading dims of each row that are rotated: even, at most `ne0` (default: `ne0`). */
  nDims?: number;
  /** `'normal'` rotates adjacent pairs; `'neox'` pairs half the rotated dims apart (default `'normal'`). */
  mode?: 'normal' | 'neox' | 0 | 2;
  /** Original training context length, for YaRN (default 0). */
  nCtxOrig?: number;
  /** Frequency base theta (default 10000). */
  freqBase?: number;
  /** Frequency scale, 1 / the linear scaling factor (default 1). */
  freqScale?: number;
  /** YaRN extrapolation mix factor (default 0: YaRN off). */
  extFactor?: number;
  /** Magnitude scale (default 1). */
  attnFactor?: number;
  /** YaRN low correction dim (default 32). */
  betaFast?: number;
  /** YaRN high correction dim (default 1). */
  betaSlow?: number;
  /** Per-frequency divisors: F32 with at least `nDims / 2` values. */
  freqFactors?: Tensor<'F32'>;
}

/** Options of {@link GraphBuilder.view}. */
export interface ViewOptions {
  /** Byte strides of dims 1.. (`shape.length - 1` of them; default: the source's). */
  strides?: readonly number[];
  /** Byte offset into the source (default 0). */
  offset?: number;
}

/** Options of the gated linear units with one operand. */
export interface GluOptions {
  /** Whether the gate is the first half of each row instead of the second. */
  swapped?: boolean;
}

type Empty = Record<never, never>;

/**
 * Builds a graph. Inputs and constants are declared with {@link GraphBuilder.input} and
 * {@link GraphBuilder.constant}; ops return new {@link Tensor}s; {@link GraphBuilder.output}
 * names what {@link compute} returns.
 *
 * The type parameter accumulates the outputs' names and types, so that when `output` calls
 * are chained the result of `compute` is typed per output:
 *
 * ```ts
 * const g = graph();
 * const x = g.input('x', 'F32', [4, 2]);
 * const w = g.constant('w', new Float32Array(12), { dtype: 'Q8_0', shape: [32, 3] });
 * const gg = g.output(g.softmax(g.matmul(w, x)), 'probs'); // GraphBuilder<{ probs: 'F32' }>
 * ```
 *
 * @typeParam O - output names and their element types
 */
export class GraphBuilder<O extends Record<string, DType> = Empty> {
  private readonly leaves: Tensor[] = [];
  private readonly nodes: Tensor[] = [];
  private readonly outs: Tensor[] = [];
  private readonly names = new Map<string, Tensor>();
  private autoIndex = 0;
  private revision = 0;
  private cached: { revision: number; json: string } | null = null;

  // ---------------------------------------------------------------- leaves and names

  /**
   * Declares an input: its data is given to each {@link compute} call.
   *
   * @param name - unique name, the key of the input in `compute`
   * @param dtype - element type
   * @param shape - shape, innermost first, 1 to 4 dims
   */
  input<D extends DType>(name: string, dtype: D, shape: readonly number[]): Tensor<D> {
    const what = `input ${JSON.stringify(name)}`;
    checkDType(dtype, what);
    const layout = contiguous(dtype, shape, what);
    this.claimName(name, what);
    const t = new Tensor<D>({ graph: this, kind: 'input', layout, shape, name, autoNamed: false });
    this.names.set(name, t);
    this.leaves.push(t);
    this.touch();
    return t;
  }

  /**
   * Declares a constant (a weight): its data is part of the graph document.
   *
   * `data` is either
   * - the typed array of the type ({@link ArrayFor}): `Float32Array` for F32, `Int32Array`
   *   for I32, `Uint16Array` of raw bits for F16 and BF16, `Uint8Array` of raw GGUF blocks for
   *   the quantized types; sent as bytes;
   * - or numbers (a `Float32Array` or a `number[]`) for any other type, sent as values that
   *   the core converts, or quantizes row by row, to `dtype` (integers only for I32).
   *
   * The data is copied: later changes to the array do not change the graph.
   *
   * @param name - unique name
   * @param data - the values, innermost dim first
   * @param options - element type and shape
   */
  constant<D extends DType>(
    name: string,
    data: ArrayFor<D> | Float32Array | readonly number[],
    options: ConstantOptions<D>
  ): Tensor<D> {
    const what = `constant ${JSON.stringify(name)}`;
    if (options == null || typeof options !== 'object') {
      throw new InvalidArgumentError(`${what}: options { dtype, shape } are required`);
    }
    const { dtype, shape } = options;
    checkDType(dtype, what);
    const layout = contiguous(dtype, shape, what);
    const payload = constantPayload(what, dtype, layout, data);
    this.claimName(name, what);
    const t = new Tensor<D>({
      graph: this,
      kind: 'constant',
      layout,
      shape,
      name,
      autoNamed: false,
      data: payload,
    });
    this.names.set(name, t);
    this.leaves.push(t);
    this.touch();
    return t;
  }

  /**
   * Renames an op result (inputs and constants keep the name they were declared with).
   *
   * @param t - the tensor
   * @param name - unique name
   * @returns `t`
   */
  setName<T extends Tensor>(t: T, name: string): T {
    this.own(t, 'setName');
    if (t._name === name) {
      t._autoNamed = false;
      return t;
    }
    if (t.kind !== 'node') {
      throw new InvalidArgumentError(
        `setName: ${t.kind} ${JSON.stringify(t._name)} cannot be renamed to ${JSON.stringify(name)}`
      );
    }
    this.claimName(name, `node ${JSON.stringify(name)}`);
    this.names.delete(t._name);
    t._name = name;
    t._autoNamed = false;
    this.names.set(name, t);
    this.touch();
    return t;
  }

  /**
   * Marks `t` as an output, returned by {@link compute} under `name` (default: the tensor's
   * name). Naming an op result renames it; inputs and constants keep their own name.
   *
   * @param t - the tensor to return
   * @param name - the key of the result
   * @returns this builder, typed with the new output
   */
  output<D extends DType, N extends string>(t: Tensor<D>, name?: N): GraphBuilder<O & { [K in N]: D }> {
    this.own(t, 'output');
    if (name !== undefined) {
      if (typeof name !== 'string' || name === '') {
        throw new InvalidArgumentError('output: the name must be a non-empty string');
      }
      if (t._name !== name) {
        if (t.kind !== 'node' || !t._autoNamed) {
          throw new InvalidArgumentError(
            `output: ${t.kind} ${JSON.stringify(t._name)} is already named; ` +
              `outputs are returned under their tensor's name (got ${JSON.stringify(name)})`
          );
        }
        this.setName(t, name);
      }
    }
    if (this.outs.includes(t)) {
      throw new InvalidGraphError(`output: ${JSON.stringify(t._name)} is already an output`);
    }
    t._autoNamed = false;
    this.outs.push(t);
    this.touch();
    return this as unknown as GraphBuilder<O & { [K in N]: D }>;
  }

  /** The declared inputs, in order. */
  get inputs(): readonly Tensor[] {
    return this.leaves.filter((t) => t.kind === 'input');
  }

  /** The outputs, in order. */
  get outputs(): readonly Tensor[] {
    return [...this.outs];
  }

  /** The tensor named `name`, if any. */
  get(name: string): Tensor | undefined {
    return this.names.get(name);
  }

  /**
   * The graph document: `{ version, tensors, nodes, outputs }` as read by
   * `GraphDocument::from_json` in the core. `JSON.stringify(builder)` gives its JSON.
   */
  toJSON(): GraphDocument {
    if (this.outs.length === 0) {
      throw new InvalidGraphError('the graph has no outputs: call output(tensor, name) first');
    }
    const tensors: TensorDocument[] = this.leaves.map((t) => {
      const doc: TensorDocument = { name: t._name, type: t.dtype, shape: [...t.shape] };
      if (t._data?.data !== undefined) doc.data = t._data.data;
      if (t._data?.values !== undefined) doc.values = [...t._data.values];
      return doc;
    });
    const nodes: NodeDocument[] = this.nodes.map((t) => {
      const doc: NodeDocument = { name: t._name, op: t.op as OpName, src: t.src.map((s) => s._name) };
      if (Object.keys(t.params).length > 0) doc.params = cloneParams(t.params);
      return doc;
    });
    return { version: GRAPH_FORMAT_VERSION, tensors, nodes, outputs: this.outs.map((t) => t._name) };
  }

  /** The document as a JSON string (cached until the graph changes). */
  toJSONString(): string {
    if (this.cached?.revision !== this.revision) {
      this.cached = { revision: this.revision, json: JSON.stringify(this.toJSON()) };
    }
    return this.cached.json;
  }

  // ---------------------------------------------------------------- element-wise

  /** `a + b`, `b` broadcast to `a`'s shape (each of `a`'s dims a multiple of `b`'s). */
  add<D extends FloatDType>(a: Tensor<D>, b: Tensor<FloatDType>): Tensor<D> {
    return this.binary('ADD', a, b);
  }

  /** `a - b`, `b` broadcast to `a`'s shape. */
  sub<D extends FloatDType>(a: Tensor<D>, b: Tensor<FloatDType>): Tensor<D> {
    return this.binary('SUB', a, b);
  }

  /** `a * b` element-wise, `b` broadcast to `a`'s shape. */
  mul<D extends FloatDType>(a: Tensor<D>, b: Tensor<FloatDType>): Tensor<D> {
    return this.binary('MUL', a, b);
  }

  /** `a / b` element-wise, `b` broadcast to `a`'s shape. */
  div<D extends FloatDType>(a: Tensor<D>, b: Tensor<FloatDType>): Tensor<D> {
    return this.binary('DIV', a, b);
  }

  /** `a * scale + bias`. */
  scale<D extends FloatDType>(a: Tensor<D>, scale: number, bias = 0): Tensor<D> {
    finite('SCALE', 'scale', scale);
    finite('SCALE', 'bias', bias);
    return this.elementwise('SCALE', a, { scale, bias });
  }

  /** `a * a`. */
  sqr<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('SQR', a);
  }

  /** `sqrt(a)`. */
  sqrt<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('SQRT', a);
  }

  /** `a` clamped to `[min, max]` (finite bounds, `min <= max`). */
  clamp<D extends FloatDType>(a: Tensor<D>, min: number, max: number): Tensor<D> {
    finite('CLAMP', 'min', min);
    finite('CLAMP', 'max', max);
    if (min > max) throw new InvalidGraphError(`CLAMP: min ${min} must not be above max ${max}`);
    return this.elementwise('CLAMP', a, { min, max });
  }

  /** `silu(a) = a * sigmoid(a)`. */
  silu<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('SILU', a);
  }

  /** `gelu(a)` (tanh approximation, as ggml). */
  gelu<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('GELU', a);
  }

  /** `max(a, 0)`. */
  relu<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('RELU', a);
  }

  /** `tanh(a)`. */
  tanh<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('TANH', a);
  }

  /** `1 / (1 + exp(-a))`. */
  sigmoid<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('SIGMOID', a);
  }

  /** `log(1 + exp(a))`, `a` itself above 20 (as ggml's `ggml_softplus`). */
  softplus<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    return this.elementwise('SOFTPLUS', a);
  }

  // ---------------------------------------------------------------- reductions

  /** The sum of all elements: shape `[1]`, `a`'s type. */
  sum<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    const ta = this.floatOperand('SUM', a, 'src0');
    return this.node('SUM', [a], contiguous(ta.dtype, [1], 'SUM'));
  }

  /** The sum of each row: `[1, ne1, ne2, ne3]`, `a`'s type. */
  sumRows<D extends FloatDType>(a: Tensor<D>): Tensor<D> {
    const ta = this.floatOperand('SUM_ROWS', a, 'src0');
    const ne = ta.ne;
    return this.node('SUM_ROWS', [a], contiguous(ta.dtype, [1, ne[1], ne[2], ne[3]], 'SUM_ROWS'));
  }

  /** The mean of each row: F32 `[1, ne1, ne2, ne3]`. */
  mean(a: Tensor<FloatDType>): Tensor<'F32'> {
    const ta = this.floatOperand('MEAN', a, 'src0');
    const ne = ta.ne;
    return this.node('MEAN', [a], contiguous('F32', [1, ne[1], ne[2], ne[3]], 'MEAN'));
  }

  /** The index of the largest element of each row of the matrix `a`: I32 `[ne1]`. */
  argmax(a: Tensor<FloatDType>): Tensor<'I32'> {
    const ta = this.floatOperand('ARGMAX', a, 'src0');
    const ne = ta.ne;
    if (ne[2] !== 1 || ne[3] !== 1) throw new ShapeError(`ARGMAX: src0 ${fmtShape(ne)} is not a matrix`);
    if (ne[0] > 2 ** 31) throw new ShapeError(`ARGMAX: src0 rows of ${ne[0]} values do not fit I32 indices`);
    return this.node('ARGMAX', [a], contiguous('I32', [ne[1]], 'ARGMAX'));
  }

  // ---------------------------------------------------------------- shape ops

  /**
   * `a` tiled to a shape (each dim a multiple of `a`'s), given as a shape or as a tensor whose
   * shape is used.
   */
  repeat<D extends FloatDType>(a: Tensor<D>, to: readonly number[] | Tensor): Tensor<D> {
    const ta = this.floatOperand('REPEAT', a, 'src0');
    let shape: readonly number[];
    if (to instanceof Tensor) {
      this.own(to, 'REPEAT');
      shape = trimShape(to.ne);
    } else {
      shape = to;
    }
    const target = normalizeShape(shape, 'REPEAT');
    if (!canRepeat(ta.ne, target)) {
      throw new ShapeError(`REPEAT: src0 ${fmtShape(ta.ne)} cannot be tiled to ${fmtShape(target)}`);
    }
    return this.node('REPEAT', [a], contiguous(ta.dtype, target, 'REPEAT'), { shape: [...shape] });
  }

  /** `a` and `b` (same type, same shape outside `dim`) joined along `dim` (0 to 3). */
  concat<D extends FloatDType>(a: Tensor<D>, b: Tensor<D>, dim: number): Tensor<D> {
    const ta = this.floatOperand('CONCAT', a, 'src0');
    const tb = this.floatOperand('CONCAT', b, 'src1');
    index('CONCAT', 'dim', dim);
    if (dim >= MAX_DIMS) throw new InvalidGraphError(`CONCAT: dim ${dim} is not below 4`);
    if (ta.dtype !== tb.dtype) {
      throw new DTypeError(`CONCAT: type ${tb.dtype} is not supported (src1 must have src0's type ${ta.dtype})`);
    }
    const ne: Dims4 = [...ta.ne];
    for (let i = 0; i < MAX_DIMS; i++) {
      if (i !== dim && ta.ne[i] !== tb.ne[i]) {
        throw new ShapeError(`CONCAT: src0 ${fmtShape(ta.ne)} and src1 ${fmtShape(tb.ne)} differ outside dim ${dim}`);
      }
    }
    ne[dim] = ne[dim]! + tb.ne[dim]!;
    return this.node('CONCAT', [a, b], contiguous(ta.dtype, ne, 'CONCAT'), { dim });
  }

  /** A view of the contiguous `a` with another shape of the same element count. */
  reshape<D extends DType>(a: Tensor<D>, shape: readonly number[]): Tensor<D> {
    const ta = this.operand('RESHAPE', a);
    if (!isContiguous(ta._layout)) throw new ShapeError('RESHAPE: src0 is not contiguous (make it CONT first)');
    const layout = contiguous(ta.dtype, shape, 'RESHAPE');
    if (nelements(layout) !== ta.size) {
      throw new ShapeError(
        `RESHAPE: src0 ${fmtShape(ta.ne)} has ${ta.size} elements, shape ${fmtShape(shape)} has ${nelements(layout)}`
      );
    }
    return this.node('RESHAPE', [a], layout, { shape: [...shape] }, true);
  }

  /**
   * A view of `a`: `shape`, byte strides for dims 1.. and a byte offset; it must lie within
   * `a` (and start on a block for quantized types).
   */
  view<D extends DType>(a: Tensor<D>, shape: readonly number[], options: ViewOptions = {}): Tensor<D> {
    const ta = this.operand('VIEW', a);
    const offset = options.offset ?? 0;
    index('VIEW', 'offset', offset);
    const full = normalizeShape(shape, 'VIEW');
    const strides = options.strides ?? ta.nb.slice(1, Math.min(Math.max(shape.length, 1), 4));
    if (!Array.isArray(strides)) throw new InvalidArgumentError('VIEW: strides must be an array of byte strides');
    strides.forEach((s, i) => index('VIEW', `strides[${i}]`, s));
    if (strides.length + 1 !== shape.length) {
      throw new InvalidGraphError(
        `VIEW: ${shape.length} dims need ${shape.length - 1} strides, got ${strides.length}`
      );
    }
    const base = contiguous(ta.dtype, full, 'VIEW');
    const nb: Dims4 = [...base.nb];
    strides.forEach((s, i) => (nb[i + 1] = s));
    for (let i = strides.length + 1; i < MAX_DIMS; i++) nb[i] = nb[i - 1]! * full[i - 1]!;
    const layout: Layout = { dtype: ta.dtype, ne: full, nb };
    let span = rowBytes(layout);
    for (let i = 1; i < MAX_DIMS; i++) span += (full[i]! - 1) * nb[i]!;
    const srcBytes = nbytes(ta._layout);
    if (span + offset > srcBytes) {
      throw new ShapeError(
        `VIEW: view out of bounds: shape ${fmtShape(shape)} strides ${fmtShape(strides)} at offset ${offset} ` +
          `exceed the ${srcBytes} bytes of src0 ${fmtShape(ta.ne)}`
      );
    }
    if (isQuantized(ta.dtype) && offset % DTYPE_INFO[ta.dtype].typeSize !== 0) {
      throw new ShapeError(`VIEW: view out of bounds: offset ${offset} is not at a ${ta.dtype} block boundary`);
    }
    return this.node('VIEW', [a], layout, { shape: [...shape], strides: [...strides], offset }, true);
  }

  /** A view of `a` with its dims reordered: source dim `i` goes to position `axes[i]`. */
  permute<D extends DType>(a: Tensor<D>, axes: readonly [number, number, number, number]): Tensor<D> {
    const ta = this.operand('PERMUTE', a);
    const seen = [false, false, false, false];
    const ok =
      Array.isArray(axes) &&
      axes.length === 4 &&
      axes.every((ax) => {
        if (!Number.isInteger(ax) || ax < 0 || ax >= MAX_DIMS || seen[ax]) return false;
        seen[ax] = true;
        return true;
      });
    if (!ok) throw new InvalidGraphError(`PERMUTE: axes ${JSON.stringify(axes)} are not a permutation of 0..4`);
    if (isQuantized(ta.dtype) && axes[0] !== 0) {
      throw new ShapeError("PERMUTE: a quantized tensor's dim 0 must stay in place");
    }
    const ne: Dims4 = [...ta.ne];
    const nb: Dims4 = [...ta.nb];
    axes.forEach((ax, i) => {
      ne[ax] = ta.ne[i]!;
      nb[ax] = ta.nb[i]!;
    });
    return this.node('PERMUTE', [a], { dtype: ta.dtype, ne, nb }, { axes: [...axes] }, true);
  }

  /** A view of `a` with dims 0 and 1 swapped. */
  transpose<D extends DType>(a: Tensor<D>): Tensor<D> {
    const ta = this.operand('TRANSPOSE', a);
    if (isQuantized(ta.dtype)) throw new ShapeError('TRANSPOSE: a quantized tensor cannot be transposed');
    const ne: Dims4 = [ta.ne[1], ta.ne[0], ta.ne[2], ta.ne[3]];
    const nb: Dims4 = [ta.nb[1], ta.nb[0], ta.nb[2], ta.nb[3]];
    return this.node('TRANSPOSE', [a], { dtype: ta.dtype, ne, nb }, {}, true);
  }

  /** A contiguous copy of a possibly strided `a`. */
  cont<D extends DType>(a: Tensor<D>): Tensor<D> {
    return this.copyOp('CONT', a);
  }

  /** A contiguous copy of `a`. */
  dup<D extends DType>(a: Tensor<D>): Tensor<D> {
    return this.copyOp('DUP', a);
  }

  /**
   * `a` converted into the memory of `b` (same element count; I32 only to and from I32); the
   * result has `b`'s type and layout.
   */
  cpy<D extends DType>(a: Tensor, b: Tensor<D>): Tensor<D> {
    const ta = this.operand('CPY', a);
    const tb = this.operand('CPY', b);
    if (ta.size !== tb.size) {
      throw new ShapeError(
        `CPY: src0 ${fmtShape(ta.ne)} and destination ${fmtShape(tb.ne)} have different element counts`
      );
    }
    if ((ta.dtype === 'I32') !== (tb.dtype === 'I32')) {
      throw new DTypeError('CPY: type I32 is not supported (I32 copies only to I32)');
    }
    for (const [t, which] of [
      [ta, 'src0'],
      [tb, 'destination'],
    ] as const) {
      if (isQuantized(t.dtype) && !rowsContiguous(t._layout)) {
        throw new ShapeError(`CPY: quantized ${which} must have dense rows`);
      }
    }
    if (isQuantized(tb.dtype) && ta.ne[0] % DTYPE_INFO[tb.dtype].blockSize !== 0) {
      throw new ShapeError(`CPY: src0 rows of ${ta.ne[0]} are not whole ${tb.dtype} blocks`);
    }
    return this.node('CPY', [a, b], tb._layout, {}, true);
  }

  // ---------------------------------------------------------------- matrix ops

  /**
   * `C[n, m] = sum_k A[m, k] B[n, k]`: `a` the weights `[K, M, ne2, ne3]` of any type but
   * I32, `b` activations (F32, F16 or BF16, as ggml accepts) `[K, N, ne12, ne13]` with
   * `ne12`, `ne13` multiples of `a`'s; the result is F32 `[M, N, ne12, ne13]`.
   */
  matmul(a: Tensor, b: Tensor): Tensor<'F32'> {
    const ta = this.operand('MUL_MAT', a);
    const tb = this.operand('MUL_MAT', b);
    if (ta.dtype === 'I32') throw new DTypeError('MUL_MAT: type I32 is not supported (src0 (weights) must not be I32)');
    if (tb.dtype !== 'F32' && tb.dtype !== 'F16' && tb.dtype !== 'BF16') {
      throw new DTypeError(
        `MUL_MAT: type ${tb.dtype} is not supported (src1 (activations) must be F32, F16 or BF16)`
      );
    }
    const na = ta.ne;
    const nb = tb.ne;
    if (na[0] !== nb[0] || nb[2] % na[2] !== 0 || nb[3] % na[3] !== 0) {
      throw new ShapeError(
        `MUL_MAT: src0 ${fmtShape(na)} and src1 ${fmtShape(nb)} need equal ne0 and src1's ne2, ne3 multiples of src0's`
      );
    }
    if (isTransposed(ta._layout)) throw new ShapeError('MUL_MAT: src0 must not be transposed (make it CONT)');
    if (isQuantized(ta.dtype) && !rowsContiguous(ta._layout)) {
      throw new ShapeError('MUL_MAT: quantized src0 must have contiguous rows');
    }
    return this.node('MUL_MAT', [a, b], contiguous('F32', [na[1], nb[1], nb[2], nb[3]], 'MUL_MAT'));
  }

  /**
   * Rows of `a` (`[ne0, rows, ne2, ne3]`, any type) picked by the I32 indices `b`
   * (`[n, ne2, ne3]`): F32 `[ne0, n, ne2, ne3]` (I32 when `a` is I32).
   */
  getRows<D extends DType>(a: Tensor<D>, b: Tensor<'I32'>): Tensor<D extends 'I32' ? 'I32' : 'F32'> {
    const ta = this.operand('GET_ROWS', a);
    const tb = this.operand('GET_ROWS', b);
    if (tb.dtype !== 'I32') throw new DTypeError(`GET_ROWS: type ${tb.dtype} is not supported (src1 (indices) must be I32)`);
    const na = ta.ne;
    const nb = tb.ne;
    if (na[2] !== nb[1] || na[3] !== nb[2] || nb[3] !== 1) {
      throw new ShapeError(
        `GET_ROWS: src0 ${fmtShape(na)} and indices ${fmtShape(nb)}: need src0 ne2 == indices ne1, src0 ne3 == indices ne2`
      );
    }
    if (isQuantized(ta.dtype) && !rowsContiguous(ta._layout)) {
      throw new ShapeError('GET_ROWS: quantized src0 must have contiguous rows');
    }
    const out = ta.dtype === 'I32' ? 'I32' : 'F32';
    return this.node('GET_ROWS', [a, b], contiguous(out, [na[0], nb[0], nb[1], nb[2]], 'GET_ROWS')) as Tensor<
      D extends 'I32' ? 'I32' : 'F32'
    >;
  }

  /**
   * `softmax(a * scale + mask + alibi)` along rows of the F32 `a`. The mask (F32 or F16) has
   * `a`'s `ne0`, at least `a`'s `ne1` rows and is broadcast over dims 2 and 3.
   */
  softmax(a: Tensor<'F32'>, options: SoftmaxOptions = {}): Tensor<'F32'> {
    const ta = this.operand('SOFT_MAX', a);
    const scale = options.scale ?? 1;
    const maxBias = options.maxBias ?? 0;
    if (ta.dtype !== 'F32') throw new DTypeError(`SOFT_MAX: type ${ta.dtype} is not supported (src0 must be F32)`);
    if (!isFiniteNumber(scale) || !isFiniteNumber(maxBias) || maxBias < 0) {
      throw new InvalidGraphError(
        `SOFT_MAX: scale ${scale} must be finite and max_bias ${maxBias} finite and >= 0`
      );
    }
    const src: Tensor[] = [a];
    if (options.mask !== undefined) {
      const tm = this.operand('SOFT_MAX', options.mask);
      if (tm.dtype !== 'F32' && tm.dtype !== 'F16') {
        throw new DTypeError(`SOFT_MAX: type ${tm.dtype} is not supported (mask must be F32 or F16)`);
      }
      const na = ta.ne;
      const nm = tm.ne;
      if (nm[0] !== na[0] || nm[1] < na[1] || na[2] % nm[2] !== 0 || na[3] % nm[3] !== 0) {
        throw new ShapeError(
          `SOFT_MAX: mask ${fmtShape(nm)} does not fit src0 ${fmtShape(na)}: need equal ne0, at least as many rows, ` +
            `and ne2, ne3 dividing src0's`
        );
      }
      src.push(tm);
    } else if (maxBias > 0) {
      throw new InvalidGraphError('SOFT_MAX: max_bias > 0 needs a mask');
    }
    return this.node('SOFT_MAX', src, contiguous('F32', ta.ne, 'SOFT_MAX'), { scale, max_bias: maxBias });
  }

  /** Sets `a[i0, i1] = -inf` for `i0 > nPast + i1` (a causal mask) on the F32 `a`. */
  diagMaskInf(a: Tensor<'F32'>, nPast: number): Tensor<'F32'> {
    const ta = this.operand('DIAG_MASK_INF', a);
    index('DIAG_MASK_INF', 'n_past', nPast);
    if (ta.dtype !== 'F32') throw new DTypeError(`DIAG_MASK_INF: type ${ta.dtype} is not supported (src0 must be F32)`);
    return this.node('DIAG_MASK_INF', [a], contiguous('F32', ta.ne, 'DIAG_MASK_INF'), { n_past: nPast });
  }

  /** Each row of the F32 `a` divided by its root mean square (plus `eps`, default 1e-6). */
  rmsNorm(a: Tensor<'F32'>, eps = 1e-6): Tensor<'F32'> {
    return this.normOp('RMS_NORM', a, eps);
  }

  /** Each row of the F32 `a` normalized to zero mean and unit variance (plus `eps`, default 1e-6). */
  norm(a: Tensor<'F32'>, eps = 1e-6): Tensor<'F32'> {
    return this.normOp('NORM', a, eps);
  }

  /**
   * Rotary position embedding of the F32 `a` (`[head_dim, n_head, n_tokens, 1]`) at the I32
   * positions `pos` (`[n_tokens]`), with ggml's `ggml_rope_ext` parameters.
   */
  rope(a: Tensor<'F32'>, pos: Tensor<'I32'>, options: RopeOptions = {}): Tensor<'F32'> {
    const ta = this.operand('ROPE', a);
    const tp = this.operand('ROPE', pos);
    if (ta.dtype !== 'F32') throw new DTypeError(`ROPE: type ${ta.dtype} is not supported (src0 must be F32)`);
    if (tp.dtype !== 'I32') throw new DTypeError(`ROPE: type ${tp.dtype} is not supported (positions must be I32)`);
    const na = ta.ne;
    const np = tp.ne;
    if (np[1] !== 1 || np[2] !== 1 || np[3] !== 1 || np[0] !== na[2]) {
      throw new ShapeError(
        `ROPE: positions ${fmtShape(np)} must be a vector of src0's ne2 = ${na[2]} (src0 ${fmtShape(na)})`
      );
    }
    const nDims = options.nDims ?? na[0];
    index('ROPE', 'n_dims', nDims);
    const nCtxOrig = options.nCtxOrig ?? 0;
    index('ROPE', 'n_ctx_orig', nCtxOrig);
    if (nDims === 0 || nDims % 2 !== 0 || nDims > na[0]) {
      throw new InvalidGraphError(`ROPE: n_dims ${nDims} must be even, > 0 and at most ne0 = ${na[0]}`);
    }
    const modeOpt = options.mode ?? 'normal';
    const mode = modeOpt === 'normal' ? 0 : modeOpt === 'neox' ? 2 : modeOpt;
    if (mode !== 0 && mode !== 2) {
      throw new InvalidGraphError(`ROPE: mode ${JSON.stringify(modeOpt)} is not 'normal' (0) or 'neox' (2)`);
    }
    const p = {
      freq_base: options.freqBase ?? 10000,
      freq_scale: options.freqScale ?? 1,
      ext_factor: options.extFactor ?? 0,
      attn_factor: options.attnFactor ?? 1,
      beta_fast: options.betaFast ?? 32,
      beta_slow: options.betaSlow ?? 1,
    };
    if (Object.values(p).some((v) => !isFiniteNumber(v)) || p.freq_base <= 0) {
      throw new InvalidGraphError('ROPE: parameters must be finite, freq_base > 0');
    }
    const src: Tensor[] = [a, pos];
    if (options.freqFactors !== undefined) {
      const tf = this.operand('ROPE', options.freqFactors);
      if (tf.dtype !== 'F32') {
        throw new DTypeError(`ROPE: type ${tf.dtype} is not supported (frequency factors must be F32)`);
      }
      if (tf.ne[0] < nDims / 2) {
        throw new ShapeError(`ROPE: frequency factors must be F32 with at least ${nDims / 2} values`);
      }
      src.push(tf);
    }
    return this.node('ROPE', src, contiguous('F32', na, 'ROPE'), {
      n_dims: nDims,
      mode,
      n_ctx_orig: nCtxOrig,
      ...p,
    });
  }

  /**
   * SwiGLU: `silu(x) * g`. With one operand, `x` and `g` are the two halves of each row
   * (`[g, x]` when `swapped`), and the result has half the row length; with two, `silu(a) * b`
   * for `a`, `b` of equal shape.
   */
  swiglu<D extends FloatDType>(a: Tensor<D>, b?: Tensor<FloatDType> | GluOptions, options?: GluOptions): Tensor<D> {
    return this.gluOp('SWIGLU', a, b, options);
  }

  /** GeGLU: `gelu(x) * g`, with the operands of {@link GraphBuilder.swiglu}. */
  geglu<D extends FloatDType>(a: Tensor<D>, b?: Tensor<FloatDType> | GluOptions, options?: GluOptions): Tensor<D> {
    return this.gluOp('GEGLU', a, b, options);
  }

  // ---------------------------------------------------------------- internals

  private touch(): void {
    this.revision++;
  }

  private claimName(name: string, what: string): void {
    if (typeof name !== 'string' || name === '') {
      throw new InvalidGraphError(`${what}: a tensor needs a non-empty name`);
    }
    const other = this.names.get(name);
    if (other === undefined) return;
    if (other._autoNamed) {
      // A made-up name gives way to a chosen one.
      this.names.delete(name);
      other._name = this.freshName(other.op ?? 'tensor');
      this.names.set(other._name, other);
      return;
    }
    throw new InvalidGraphError(`${what}: duplicate tensor name ${JSON.stringify(name)}`);
  }

  private freshName(op: string): string {
    for (;;) {
      const name = `${op.toLowerCase()}_${this.autoIndex++}`;
      if (!this.names.has(name)) return name;
    }
  }

  private own<T extends Tensor>(t: T, op: string): T {
    if (!(t instanceof Tensor)) {
      throw new InvalidArgumentError(`${op}: expected a Tensor of this graph, got ${describeArray(t)}`);
    }
    if (t._graph !== this) {
      throw new InvalidArgumentError(`${op}: tensor ${JSON.stringify(t.name)} belongs to another graph`);
    }
    return t;
  }

  private operand<T extends Tensor>(op: OpName, t: T): T {
    return this.own(t, op);
  }

  private floatOperand<T extends Tensor>(op: OpName, t: T, which: string): T {
    this.own(t, op);
    if (!isFloat(t.dtype)) {
      throw new DTypeError(`${op}: type ${t.dtype} is not supported (${which} must be F32, F16 or BF16)`);
    }
    return t;
  }

  private node<D extends DType>(
    op: OpName,
    src: readonly Tensor[],
    layout: Layout,
    params: Record<string, ParamValue> = {},
    isView = false
  ): Tensor<D> {
    const name = this.freshName(op);
    const t = new Tensor<D>({ graph: this, kind: 'node', layout, op, src, params, isView, name, autoNamed: true });
    this.names.set(name, t);
    this.nodes.push(t);
    this.touch();
    return t;
  }

  private binary<D extends FloatDType>(op: OpName, a: Tensor<D>, b: Tensor<FloatDType>): Tensor<D> {
    const ta = this.floatOperand(op, a, 'src0');
    const tb = this.floatOperand(op, b, 'src1');
    if (!canRepeat(tb.ne, ta.ne)) {
      throw new ShapeError(`${op}: src1 ${fmtShape(tb.ne)} cannot be broadcast to src0 ${fmtShape(ta.ne)}`);
    }
    return this.node(op, [a, b], contiguous(ta.dtype, ta.ne, op));
  }

  private elementwise<D extends FloatDType>(op: OpName, a: Tensor<D>, params?: Record<string, ParamValue>): Tensor<D> {
    const ta = this.floatOperand(op, a, 'src0');
    return this.node(op, [a], contiguous(ta.dtype, ta.ne, op), params);
  }

  private normOp(op: 'RMS_NORM' | 'NORM', a: Tensor<'F32'>, eps: number): Tensor<'F32'> {
    const ta = this.operand(op, a);
    if (ta.dtype !== 'F32') throw new DTypeError(`${op}: type ${ta.dtype} is not supported (src0 must be F32)`);
    if (!isFiniteNumber(eps) || eps < 0) throw new InvalidGraphError(`${op}: eps ${eps} must be finite, >= 0`);
    return this.node(op, [a], contiguous('F32', ta.ne, op), { eps });
  }

  private copyOp<D extends DType>(op: 'DUP' | 'CONT', a: Tensor<D>): Tensor<D> {
    const ta = this.operand(op, a);
    if (isQuantized(ta.dtype) && !rowsContiguous(ta._layout)) {
      throw new ShapeError(`${op}: quantized src0 must have contiguous rows`);
    }
    return this.node(op, [a], contiguous(ta.dtype, ta.ne, op));
  }

  private gluOp<D extends FloatDType>(
    op: 'SWIGLU' | 'GEGLU',
    a: Tensor<D>,
    bOrOptions: Tensor<FloatDType> | GluOptions | undefined,
    options: GluOptions | undefined
  ): Tensor<D> {
    const b = bOrOptions instanceof Tensor ? bOrOptions : undefined;
    const opts = (bOrOptions instanceof Tensor ? options : bOrOptions) ?? {};
    const swapped = opts.swapped ?? false;
    if (typeof swapped !== 'boolean') throw new InvalidArgumentError(`${op}: swapped must be a boolean`);
    if (b !== undefined && swapped) throw new InvalidGraphError(`${op}: swapped applies to one source only`);
    const ta = this.floatOperand(op, a, 'src0');
    if (b !== undefined) {
      const tb = this.floatOperand(op, b, 'src1');
      if (!sameDims(ta.ne, tb.ne)) {
        throw new ShapeError(`${op}: src0 ${fmtShape(ta.ne)} and src1 ${fmtShape(tb.ne)} differ`);
      }
      return this.node(op, [a, b], contiguous(ta.dtype, ta.ne, op));
    }
    if (ta.ne[0] % 2 !== 0) throw new ShapeError(`${op}: src0 ne0 = ${ta.ne[0]} is not even`);
    const ne: Dims4 = [ta.ne[0] / 2, ta.ne[1], ta.ne[2], ta.ne[3]];
    return this.node(op, [a], contiguous(ta.dtype, ne, op), swapped ? { swapped } : {});
  }
}

/**
 * A new, empty {@link GraphBuilder}.
 */
export function graph(): GraphBuilder {
  return new GraphBuilder();
}

function sameDims(a: Readonly<Dims4>, b: Readonly<Dims4>): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] && a[3] === b[3];
}

function isFiniteNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

function finite(op: string, param: string, v: unknown): void {
  if (!isFiniteNumber(v)) {
    throw new InvalidGraphError(`${op}: ${param} ${String(v)} must be a finite number`);
  }
}

function index(op: string, param: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new InvalidGraphError(`${op}: ${param} ${String(v)} must be a non-negative integer`);
  }
}

function checkDType(dtype: unknown, what: string): asserts dtype is DType {
  if (!isDType(dtype)) {
    throw new DTypeError(
      `${what}: unknown tensor type ${JSON.stringify(dtype)} (expected one of ${Object.keys(DTYPE_INFO).join(', ')})`,
      'UnknownType'
    );
  }
}

function cloneParams(p: Readonly<Record<string, ParamValue>>): Record<string, ParamValue> {
  const out: Record<string, ParamValue> = {};
  for (const [k, v] of Object.entries(p)) out[k] = Array.isArray(v) ? [...v] : v;
  return out;
}

function constantPayload(
  what: string,
  dtype: DType,
  layout: Layout,
  data: unknown
): { data?: string; values?: number[] } {
  const count = nelements(layout);
  if (isArrayFor(dtype, data)) {
    // Native array of the type: raw bytes.
    const expected = isQuantized(dtype) ? nbytes(layout) : count;
    const unit = isQuantized(dtype) ? 'bytes' : 'values';
    if (data.length !== expected) {
      throw new DataLengthError(
        `${what}: ${dtype} ${fmtShape(layout.ne)} needs ${expected} ${unit}, got ${data.length}`
      );
    }
    return { data: base64FromArray(data) };
  }
  if (data instanceof Float32Array || Array.isArray(data)) {
    if (dtype === 'I32' && data instanceof Float32Array) {
      throw new InvalidArgumentError(`${what}: I32 data must be an Int32Array or integers, got a Float32Array`);
    }
    if (data.length !== count) {
      throw new DataLengthError(`${what}: ${dtype} ${fmtShape(layout.ne)} needs ${count} values, got ${data.length}`);
    }
    const values: number[] = new Array<number>(count);
    for (let i = 0; i < count; i++) {
      const v = data[i] as unknown;
      if (!isFiniteNumber(v)) {
        throw new InvalidArgumentError(`${what}: value ${i} (${String(v)}) is not a finite number`);
      }
      if (dtype === 'I32' && (!Number.isInteger(v) || v < -2147483648 || v > 2147483647)) {
        throw new InvalidArgumentError(`${what}: value ${i} (${v}) is not an I32 value`);
      }
      values[i] = v;
    }
    return { values };
  }
  throw new InvalidArgumentError(
    `${what}: ${dtype} data must be a ${arrayKindFor(dtype)}` +
      (dtype === 'I32' ? ' or a number[]' : ', a Float32Array or a number[]') +
      `, got ${describeArray(data)}`
  );
}
