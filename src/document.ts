/**
 * Reading graph documents back into a {@link GraphBuilder}, with every check of the builder:
 * for documents loaded from files or made by other tools.
 *
 * @packageDocumentation
 */

import { arrayFromBase64, type TypedArrayCtor } from './base64';
import { arrayKindFor, isDType, type DType, type TensorArray } from './dtype';
import { DTypeError, InvalidGraphError, TesseraError } from './errors';
import { GRAPH_FORMAT_VERSION, GraphBuilder, type GraphDocument, type NodeDocument, type Tensor } from './graph';

const CTORS = { Float32Array, Int32Array, Uint16Array, Uint8Array } as const;

/** Parameter names each op accepts (the core rejects unknown ones). */
const PARAMS: Record<string, readonly string[]> = {
  SCALE: ['scale', 'bias'],
  CLAMP: ['min', 'max'],
  REPEAT: ['shape'],
  CONCAT: ['dim'],
  SOFT_MAX: ['scale', 'max_bias'],
  DIAG_MASK_INF: ['n_past'],
  RMS_NORM: ['eps'],
  NORM: ['eps'],
  ROPE: ['n_dims', 'mode', 'n_ctx_orig', 'freq_base', 'freq_scale', 'ext_factor', 'attn_factor', 'beta_fast', 'beta_slow'],
  SWIGLU: ['swapped'],
  GEGLU: ['swapped'],
  RESHAPE: ['shape'],
  VIEW: ['shape', 'strides', 'offset'],
  PERMUTE: ['axes'],
};

/** Number of sources each op takes. */
const ARITY: Record<string, readonly number[]> = {
  ADD: [2], SUB: [2], MUL: [2], DIV: [2], MUL_MAT: [2], GET_ROWS: [2], CPY: [2], CONCAT: [2],
  DUP: [1], CONT: [1], SQR: [1], SQRT: [1], SUM: [1], SUM_ROWS: [1], MEAN: [1], ARGMAX: [1],
  TRANSPOSE: [1], SCALE: [1], CLAMP: [1], REPEAT: [1], DIAG_MASK_INF: [1], RMS_NORM: [1], NORM: [1],
  SILU: [1], GELU: [1], RELU: [1], TANH: [1], SIGMOID: [1], SOFTPLUS: [1], RESHAPE: [1], VIEW: [1], PERMUTE: [1],
  SOFT_MAX: [1, 2], ROPE: [2, 3], SWIGLU: [1, 2], GEGLU: [1, 2],
};

const REQUIRED: Record<string, readonly string[]> = {
  SCALE: ['scale'],
  CLAMP: ['min', 'max'],
  REPEAT: ['shape'],
  CONCAT: ['dim'],
  DIAG_MASK_INF: ['n_past'],
  RESHAPE: ['shape'],
  VIEW: ['shape'],
  PERMUTE: ['axes'],
};

/**
 * A {@link GraphBuilder} holding the graph of a document, checked op by op as the builder
 * checks its calls (and as the core does). Nodes may be listed in any order; cycles, unknown
 * names, unknown ops and parameters are errors naming the node.
 *
 * @param doc - a graph document (an object, or its JSON text)
 */
export function graphFromDocument(doc: GraphDocument | string): GraphBuilder<Record<string, DType>> {
  let d: GraphDocument;
  if (typeof doc === 'string') {
    try {
      d = JSON.parse(doc) as GraphDocument;
    } catch (e) {
      throw new InvalidGraphError(`not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
    }
  } else {
    d = doc;
  }
  if (d === null || typeof d !== 'object') throw new InvalidGraphError('a graph document must be an object');
  if (d.version !== GRAPH_FORMAT_VERSION) {
    throw new InvalidGraphError(`unsupported version ${String(d.version)}: this package reads version ${GRAPH_FORMAT_VERSION}`);
  }
  const g = new GraphBuilder<Record<string, DType>>();
  const byName = new Map<string, Tensor>();
  for (const t of d.tensors ?? []) {
    const what = `tensor ${JSON.stringify(t?.name)}`;
    if (!t || typeof t.name !== 'string' || t.name === '') throw new InvalidGraphError('a tensor has an empty name');
    if (!isDType(t.type)) {
      throw new DTypeError(`${what}: unknown tensor type ${JSON.stringify(t.type)}`, 'UnknownType');
    }
    let tensor: Tensor;
    if (t.data !== undefined && t.values !== undefined) {
      throw new InvalidGraphError(`${what}: give either "data" or "values", not both`);
    } else if (t.data !== undefined) {
      const data = arrayFromBase64(String(t.data), CTORS[arrayKindFor(t.type)] as TypedArrayCtor<TensorArray>);
      tensor = g.constant(t.name, data as never, { dtype: t.type, shape: t.shape });
    } else if (t.values !== undefined) {
      tensor = g.constant(t.name, t.values, { dtype: t.type, shape: t.shape });
    } else {
      tensor = g.input(t.name, t.type, t.shape);
    }
    byName.set(t.name, tensor);
  }
  const nodes = new Map<string, NodeDocument>();
  for (const n of d.nodes ?? []) {
    if (!n || typeof n.name !== 'string' || n.name === '') throw new InvalidGraphError('a node has an empty name');
    if (byName.has(n.name) || nodes.has(n.name)) throw new InvalidGraphError(`duplicate tensor name ${JSON.stringify(n.name)}`);
    nodes.set(n.name, n);
  }
  // Depth-first, so that sources are built before their readers.
  const state = new Map<string, 'open' | 'done'>();
  const visit = (root: NodeDocument): void => {
    const stack: { node: NodeDocument; next: number }[] = [{ node: root, next: 0 }];
    state.set(root.name, 'open');
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      const src = top.node.src ?? [];
      if (top.next === src.length) {
        stack.pop();
        state.set(top.node.name, 'done');
        byName.set(top.node.name, addNode(g, top.node, byName));
        continue;
      }
      const s = src[top.next++]!;
      if (byName.has(s) && !nodes.has(s)) continue;
      const child = nodes.get(s);
      if (!child) throw new InvalidGraphError(`node ${JSON.stringify(top.node.name)}: unknown tensor ${JSON.stringify(s)}`);
      const st = state.get(s);
      if (st === 'open') throw new InvalidGraphError(`the graph has a cycle through ${JSON.stringify(s)}`);
      if (st === undefined) {
        state.set(s, 'open');
        stack.push({ node: child, next: 0 });
      }
    }
  };
  for (const n of nodes.values()) if (!state.has(n.name)) visit(n);
  if (!Array.isArray(d.outputs) || d.outputs.length === 0) throw new InvalidGraphError('the document names no outputs');
  for (const o of d.outputs) {
    const t = byName.get(o);
    if (!t) throw new InvalidGraphError(`outputs: unknown tensor ${JSON.stringify(o)}`);
    g.output(t);
  }
  return g;
}

function addNode(g: GraphBuilder<any>, n: NodeDocument, byName: Map<string, Tensor>): Tensor {
  const what = `node ${JSON.stringify(n.name)}`;
  const arity = ARITY[n.op];
  if (!arity) throw new TesseraError('UnknownOp', `${what}: unknown op ${JSON.stringify(n.op)}`);
  const src = (n.src ?? []).map((s) => byName.get(s)!);
  if (!arity.includes(src.length)) {
    throw new InvalidGraphError(`${what}: ${n.op} takes ${arity.join(' or ')} sources, got ${src.length}`);
  }
  const p = (n.params ?? {}) as Record<string, any>;
  const allowed = PARAMS[n.op] ?? [];
  const unknown = Object.keys(p).filter((k) => !allowed.includes(k));
  if (unknown.length > 0) {
    throw new InvalidGraphError(
      allowed.length === 0 ? `${n.op} takes no params, got ${JSON.stringify(unknown)}` : `${n.op} params: unknown field ${JSON.stringify(unknown[0])}`
    );
  }
  for (const k of REQUIRED[n.op] ?? []) {
    if (p[k] === undefined) throw new InvalidGraphError(`${n.op} params: missing field ${JSON.stringify(k)}`);
  }
  const [a, b, c] = src as [Tensor<any>, Tensor<any>, Tensor<any> | undefined];
  let t: Tensor;
  try {
    t = build(g, n.op, a, b, c, p);
  } catch (e) {
    // Name the node, as the core does ("node \"x\": MUL_MAT: ...").
    if (e instanceof TesseraError) e.message = `${what}: ${e.message}`;
    throw e;
  }
  return g.setName(t, n.name);
}

function build(g: GraphBuilder<any>, op: string, a: Tensor<any>, b: Tensor<any>, c: Tensor<any> | undefined, p: Record<string, any>): Tensor {
  switch (op) {
    case 'ADD': return g.add(a, b);
    case 'SUB': return g.sub(a, b);
    case 'MUL': return g.mul(a, b);
    case 'DIV': return g.div(a, b);
    case 'MUL_MAT': return g.matmul(a, b);
    case 'GET_ROWS': return g.getRows(a, b);
    case 'CPY': return g.cpy(a, b);
    case 'DUP': return g.dup(a);
    case 'CONT': return g.cont(a);
    case 'SQR': return g.sqr(a);
    case 'SQRT': return g.sqrt(a);
    case 'SUM': return g.sum(a);
    case 'SUM_ROWS': return g.sumRows(a);
    case 'MEAN': return g.mean(a);
    case 'ARGMAX': return g.argmax(a);
    case 'TRANSPOSE': return g.transpose(a);
    case 'SILU': return g.silu(a);
    case 'GELU': return g.gelu(a);
    case 'RELU': return g.relu(a);
    case 'TANH': return g.tanh(a);
    case 'SIGMOID': return g.sigmoid(a);
    case 'SOFTPLUS': return g.softplus(a);
    case 'SCALE': return g.scale(a, p.scale, p.bias ?? 0);
    case 'CLAMP': return g.clamp(a, p.min, p.max);
    case 'REPEAT': return g.repeat(a, p.shape);
    case 'CONCAT': return g.concat(a, b, p.dim);
    case 'SOFT_MAX': return g.softmax(a, { ...(b ? { mask: b } : {}), scale: p.scale ?? 1, maxBias: p.max_bias ?? 0 });
    case 'DIAG_MASK_INF': return g.diagMaskInf(a, p.n_past);
    case 'RMS_NORM': return g.rmsNorm(a, p.eps ?? 1e-6);
    case 'NORM': return g.norm(a, p.eps ?? 1e-6);
    case 'ROPE':
      return g.rope(a, b, {
        // The document's default n_dims is 0, which the core rejects; keep that.
        nDims: p.n_dims ?? 0,
        mode: p.mode ?? 0,
        nCtxOrig: p.n_ctx_orig ?? 0,
        freqBase: p.freq_base ?? 10000,
        freqScale: p.freq_scale ?? 1,
        extFactor: p.ext_factor ?? 0,
        attnFactor: p.attn_factor ?? 1,
        betaFast: p.beta_fast ?? 32,
        betaSlow: p.beta_slow ?? 1,
        ...(c ? { freqFactors: c } : {}),
      });
    case 'SWIGLU': return b ? g.swiglu(a, b, { swapped: p.swapped ?? false }) : g.swiglu(a, { swapped: p.swapped ?? false });
    case 'GEGLU': return b ? g.geglu(a, b, { swapped: p.swapped ?? false }) : g.geglu(a, { swapped: p.swapped ?? false });
    case 'RESHAPE': return g.reshape(a, p.shape);
    case 'VIEW': return g.view(a, p.shape, { ...(p.strides != null ? { strides: p.strides } : {}), offset: p.offset ?? 0 });
    case 'PERMUTE': return g.permute(a, p.axes);
    default: throw new TesseraError('UnknownOp', `unknown op ${JSON.stringify(op)}`);
  }
}
