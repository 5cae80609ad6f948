/**
 * The builder's checks against the core's: random one-op graphs are built with the
 * GraphBuilder and, independently, written as raw graph documents and sent to the Rust core.
 * Whatever the builder refuses, the core refuses with the same error kind; whatever it
 * accepts, the core builds (it may still lack a kernel for a type, which is not a graph
 * error) and, where it computes it, returns with the type and shape the builder gave the
 * output.
 */

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DTYPE_INFO, TesseraError, graph, graphFromDocument, setNativeCaller, type DType, type GraphBuilder, type Tensor } from '../../src/index';
import { base64FromBytes } from '../../src/base64';
import { trimShape } from '../../src/layout';
import { koffiCaller } from './koffi-caller';

const native = koffiCaller();
beforeAll(() => setNativeCaller(native));
afterAll(() => setNativeCaller(null));

// A small deterministic PRNG (the cases are the same on every run).
let seed = 0x2545f491;
function rnd(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
}
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
const chance = (p: number): boolean => rnd() < p;

interface Leaf {
  name: string;
  dtype: DType;
  shape: number[];
  /** A view applied to the leaf before use. */
  pre?: { op: 'TRANSPOSE' } | { op: 'PERMUTE'; axes: [number, number, number, number] };
}

interface Case {
  op: string;
  leaves: Leaf[];
  params: Record<string, unknown>;
}

const DIMS = [1, 2, 3, 4, 6, 32, 64];
const TYPES: DType[] = ['F32', 'F32', 'F32', 'F16', 'I32', 'Q8_0', 'Q4_0'];

function randomShape(): number[] {
  const n = 1 + Math.floor(rnd() * 4);
  const shape: number[] = [];
  let total = 1;
  for (let i = 0; i < n; i++) {
    const d = total > 512 ? pick([1, 2]) : pick(DIMS);
    shape.push(d);
    total *= d;
  }
  return shape;
}

/** A shape like `base`, changed in one dim half the time. */
function near(base: number[]): number[] {
  const s = [...base];
  if (chance(0.5)) s[Math.floor(rnd() * s.length)] = pick(DIMS);
  if (chance(0.1)) s.push(pick([1, 2]));
  return s.slice(0, 4);
}

function leaf(name: string, dtype: DType, shape: number[]): Leaf {
  const l: Leaf = { name, dtype, shape };
  if (chance(0.12)) l.pre = { op: 'TRANSPOSE' };
  else if (chance(0.08)) {
    const axes = [0, 1, 2, 3].sort(() => rnd() - 0.5) as [number, number, number, number];
    l.pre = { op: 'PERMUTE', axes };
  }
  return l;
}

const UNARY = ['SQR', 'SQRT', 'SUM', 'SUM_ROWS', 'MEAN', 'ARGMAX', 'SILU', 'GELU', 'RELU', 'TANH', 'SIGMOID', 'SOFTPLUS', 'DUP', 'CONT', 'TRANSPOSE'];
const BINARY = ['ADD', 'SUB', 'MUL', 'DIV'];
const OPS = [
  ...UNARY,
  ...BINARY,
  'MUL_MAT',
  'MUL_MAT',
  'GET_ROWS',
  'CPY',
  'SCALE',
  'CLAMP',
  'REPEAT',
  'CONCAT',
  'SOFT_MAX',
  'SOFT_MAX',
  'DIAG_MASK_INF',
  'RMS_NORM',
  'NORM',
  'ROPE',
  'ROPE',
  'SWIGLU',
  'GEGLU',
  'RESHAPE',
  'VIEW',
  'VIEW',
  'PERMUTE',
];

function randomCase(): Case {
  const op = pick(OPS);
  const s0 = randomShape();
  const t0 = pick(TYPES);
  const a = leaf('a', t0, s0);
  switch (op) {
    case 'MUL_MAT': {
      const b = [s0[0]!, pick(DIMS), ...(chance(0.5) ? [pick([1, 2, 4])] : [])];
      if (chance(0.3)) b[0] = pick(DIMS);
      return { op, leaves: [a, leaf('b', chance(0.9) ? 'F32' : pick(TYPES), b)], params: {} };
    }
    case 'GET_ROWS': {
      const idx = chance(0.8) ? [pick([1, 2, 3]), s0[2] ?? 1, s0[3] ?? 1] : randomShape();
      return { op, leaves: [a, leaf('b', chance(0.9) ? 'I32' : pick(TYPES), idx)], params: {} };
    }
    case 'CPY':
      return { op, leaves: [a, { name: 'b', dtype: pick(TYPES), shape: chance(0.6) ? [s0.reduce((x, y) => x * y, 1)] : randomShape() }], params: {} };
    case 'CONCAT':
      return { op, leaves: [a, leaf('b', chance(0.8) ? t0 : pick(TYPES), near(s0))], params: { dim: pick([0, 1, 2, 3, 4]) } };
    case 'SCALE':
      return { op, leaves: [a], params: { scale: pick([0.5, -2]), ...(chance(0.5) ? { bias: 1 } : {}) } };
    case 'CLAMP':
      return { op, leaves: [a], params: chance(0.9) ? { min: -1, max: 1 } : { min: 2, max: 1 } };
    case 'REPEAT':
      return { op, leaves: [a], params: { shape: chance(0.5) ? s0.map((d) => d * pick([1, 2])) : randomShape() } };
    case 'SOFT_MAX': {
      const leaves = [a];
      if (chance(0.5)) leaves.push(leaf('m', pick(['F32', 'F16', 'F32', 'I32'] as DType[]), near([s0[0]!, (s0[1] ?? 1) * pick([1, 2])])));
      return { op, leaves, params: { scale: pick([1, 0.125]), max_bias: pick([0, 0, 8, -1]) } };
    }
    case 'DIAG_MASK_INF':
      return { op, leaves: [a], params: { n_past: pick([0, 2]) } };
    case 'RMS_NORM':
    case 'NORM':
      return { op, leaves: [a], params: { eps: pick([1e-6, 0, -1]) } };
    case 'ROPE': {
      const x = leaf('a', chance(0.9) ? 'F32' : t0, [pick([4, 8, 6, 3]), pick([1, 2]), pick([1, 2, 3])]);
      const p = leaf('p', chance(0.9) ? 'I32' : 'F32', chance(0.85) ? [x.shape[2]!] : randomShape());
      const leaves = [x, p];
      if (chance(0.2)) leaves.push(leaf('f', chance(0.8) ? 'F32' : pick(TYPES), [pick([1, 2, 4])]));
      return {
        op,
        leaves,
        params: { n_dims: pick([2, 4, 3, 8, 0]), mode: pick([0, 2, 0, 2, 1]), freq_base: pick([10000, 10000, 0]) },
      };
    }
    case 'SWIGLU':
    case 'GEGLU':
      if (chance(0.4)) {
        const params = chance(0.15) ? { swapped: true } : {};
        return { op, leaves: [a, leaf('b', chance(0.8) ? t0 : pick(TYPES), near(s0))], params };
      }
      return { op, leaves: [a], params: chance(0.3) ? { swapped: true } : {} };
    case 'RESHAPE':
      return { op, leaves: [a], params: { shape: chance(0.5) ? [s0.reduce((x, y) => x * y, 1)] : randomShape() } };
    case 'VIEW': {
      const shape = near(s0).map((d) => Math.max(1, Math.min(d, 4)));
      const params: Record<string, unknown> = { shape, offset: pick([0, 0, 4, 16, 34, 36]) };
      if (chance(0.3)) params.strides = shape.slice(1).map(() => pick([4, 8, 16, 64, 128]));
      return { op, leaves: [a], params };
    }
    case 'PERMUTE': {
      const axes = [0, 1, 2, 3].sort(() => rnd() - 0.5);
      if (chance(0.1)) axes[1] = axes[0]!;
      return { op, leaves: [a], params: { axes } };
    }
    default:
      if (BINARY.includes(op)) {
        const b = chance(0.5) ? s0.map((d) => (chance(0.5) ? 1 : d)) : near(s0);
        return { op, leaves: [a, leaf('b', chance(0.8) ? t0 : pick(TYPES), b)], params: {} };
      }
      return { op, leaves: [a], params: {} };
  }
}

/** The raw document of a case, written without the builder. */
function documentOf(c: Case): object {
  const tensors = c.leaves.map((l) => ({ name: l.name, type: l.dtype, shape: l.shape }));
  const nodes: object[] = [];
  const src = c.leaves.map((l) => {
    if (!l.pre) return l.name;
    const name = `${l.name}_pre`;
    nodes.push(
      l.pre.op === 'TRANSPOSE'
        ? { name, op: 'TRANSPOSE', src: [l.name] }
        : { name, op: 'PERMUTE', src: [l.name], params: { axes: l.pre.axes } }
    );
    return name;
  });
  nodes.push({ name: 'out', op: c.op, src, ...(Object.keys(c.params).length ? { params: c.params } : {}) });
  return { version: 1, tensors, nodes, outputs: ['out'] };
}

const P = (c: Case) => c.params as Record<string, any>;

/** Builds the case with the GraphBuilder. */
function buildOf(c: Case): GraphBuilder {
  const g = graph();
  // Every input first, then their views: the order of a document (tensors, then nodes), so
  // that a graph with two faults is refused for the same one on both sides.
  const inputs = c.leaves.map((l) => g.input(l.name, l.dtype, l.shape) as Tensor<any>);
  const ts = c.leaves.map((l, i) => {
    let t: Tensor<any> = inputs[i]!;
    if (l.pre?.op === 'TRANSPOSE') t = g.transpose(t);
    else if (l.pre?.op === 'PERMUTE') t = g.permute(t, l.pre.axes);
    return t;
  }) as Tensor<any>[];
  const [a, b, f] = ts as [Tensor<any>, Tensor<any>, Tensor<any>];
  const p = P(c);
  let out: Tensor;
  switch (c.op) {
    case 'ADD': out = g.add(a, b); break;
    case 'SUB': out = g.sub(a, b); break;
    case 'MUL': out = g.mul(a, b); break;
    case 'DIV': out = g.div(a, b); break;
    case 'MUL_MAT': out = g.matmul(a, b); break;
    case 'GET_ROWS': out = g.getRows(a, b); break;
    case 'CPY': out = g.cpy(a, b); break;
    case 'DUP': out = g.dup(a); break;
    case 'CONT': out = g.cont(a); break;
    case 'SQR': out = g.sqr(a); break;
    case 'SQRT': out = g.sqrt(a); break;
    case 'SUM': out = g.sum(a); break;
    case 'SUM_ROWS': out = g.sumRows(a); break;
    case 'MEAN': out = g.mean(a); break;
    case 'ARGMAX': out = g.argmax(a); break;
    case 'TRANSPOSE': out = g.transpose(a); break;
    case 'SILU': out = g.silu(a); break;
    case 'GELU': out = g.gelu(a); break;
    case 'RELU': out = g.relu(a); break;
    case 'TANH': out = g.tanh(a); break;
    case 'SIGMOID': out = g.sigmoid(a); break;
    case 'SOFTPLUS': out = g.softplus(a); break;
    case 'SCALE': out = g.scale(a, p.scale, p.bias ?? 0); break;
    case 'CLAMP': out = g.clamp(a, p.min, p.max); break;
    case 'REPEAT': out = g.repeat(a, p.shape); break;
    case 'CONCAT': out = g.concat(a, b, p.dim); break;
    case 'SOFT_MAX': out = g.softmax(a, { mask: b, scale: p.scale, maxBias: p.max_bias }); break;
    case 'DIAG_MASK_INF': out = g.diagMaskInf(a, p.n_past); break;
    case 'RMS_NORM': out = g.rmsNorm(a, p.eps); break;
    case 'NORM': out = g.norm(a, p.eps); break;
    case 'ROPE':
      out = g.rope(a, b, { nDims: p.n_dims, mode: p.mode, freqBase: p.freq_base, ...(f ? { freqFactors: f } : {}) });
      break;
    case 'SWIGLU': out = b ? g.swiglu(a, b, { swapped: p.swapped ?? false }) : g.swiglu(a, { swapped: p.swapped ?? false }); break;
    case 'GEGLU': out = b ? g.geglu(a, b, { swapped: p.swapped ?? false }) : g.geglu(a, { swapped: p.swapped ?? false }); break;
    case 'RESHAPE': out = g.reshape(a, p.shape); break;
    case 'VIEW': out = g.view(a, p.shape, { offset: p.offset, ...(p.strides ? { strides: p.strides } : {}) }); break;
    case 'PERMUTE': out = g.permute(a, p.axes); break;
    default: throw new Error(`no builder for ${c.op}`);
  }
  return g.output(out, 'out');
}

/** Zero bytes of a leaf's size (valid data for every type). */
function zeros(l: Leaf): string {
  const { blockSize, typeSize } = DTYPE_INFO[l.dtype];
  const count = l.shape.reduce((x, y) => x * y, 1);
  return base64FromBytes(new Uint8Array((count / blockSize) * typeSize));
}

/** A verdict: accepted with the output's type and shape, or refused with an error kind. */
interface Verdict {
  ok: boolean;
  kind?: string;
  message?: string;
  dtype?: string;
  shape?: number[];
}

function nativeResult(c: Case): Verdict {
  const inputs = c.leaves
    .filter((l) => Number.isInteger(l.shape.reduce((x, y) => x * y, 1) / DTYPE_INFO[l.dtype].blockSize))
    .map((l) => ({ name: l.name, dtype: l.dtype, shape: l.shape, data: zeros(l) }));
  const r = JSON.parse(
    native.callSync(JSON.stringify({ method: 'compute', graph: documentOf(c), inputs, options: { device: 'CPU', threads: 1 } }))
  );
  if (r.error) return { ok: false, kind: r.error.kind, message: r.error.message };
  const out = r.ok.outputs[0];
  return { ok: true, dtype: out.dtype, shape: out.shape };
}

describe('the builder checks graphs like the core', () => {
  it('agrees on 1500 random one-op graphs', () => {
    const disagreements: string[] = [];
    let refused = 0;
    let computed = 0;
    for (let n = 0; n < 1500; n++) {
      const c = randomCase();
      let js: Verdict;
      try {
        const g = buildOf(c);
        g.toJSON();
        const out = g.outputs[0]!;
        js = { ok: true, dtype: out.dtype, shape: trimShape(out.ne) };
      } catch (e) {
        if (!(e instanceof TesseraError)) throw e;
        js = { ok: false, kind: e.kind, message: e.message };
        refused++;
      }
      // Reading the raw document back gives the same verdict as the builder calls.
      let fromDoc: string;
      try {
        graphFromDocument(documentOf(c) as never);
        fromDoc = 'ok';
      } catch (e) {
        if (!(e instanceof TesseraError)) throw e;
        fromDoc = e.kind;
      }
      if (fromDoc !== (js.ok ? 'ok' : js.kind)) {
        disagreements.push(`${JSON.stringify(documentOf(c))}\n   builder: ${js.ok ? 'ok' : js.kind}\n   graphFromDocument: ${fromDoc}`);
      }
      const rs = nativeResult(c);
      const kernelMissing = !rs.ok && rs.kind === 'Unsupported' && /op .* is not supported/.test(rs.message ?? '');
      // Both accept: the output has the same type and shape on both sides.
      const sameOutput = rs.dtype === js.dtype && JSON.stringify(rs.shape) === JSON.stringify(js.shape);
      const agree = js.ok ? (rs.ok && sameOutput) || kernelMissing : !rs.ok && rs.kind === js.kind;
      if (js.ok && rs.ok) computed++;
      if (!agree) {
        const show = (v: Verdict) => (v.ok ? `ok ${v.dtype} ${JSON.stringify(v.shape)}` : `${v.kind}: ${v.message}`);
        disagreements.push(`${JSON.stringify(documentOf(c))}\n   JS: ${show(js)}\n   core: ${show(rs)}`);
      }
    }
    expect(disagreements.slice(0, 8).join('\n')).toBe('');
    // The generator exercises both sides, and the outputs of many accepted graphs are compared.
    expect(refused).toBeGreaterThan(300);
    expect(1500 - refused).toBeGreaterThan(300);
    expect(computed).toBeGreaterThan(300);
  });
});
