import { describe, expect, it } from 'vitest';
import {
  DTypeError,
  InvalidGraphError,
  ShapeError,
  TesseraError,
  graph,
  graphFromDocument,
  type GraphDocument,
} from '../../src/index';

function sample() {
  const g = graph();
  const x = g.input('x', 'F32', [8, 4]);
  const pos = g.input('pos', 'I32', [4]);
  const w = g.constant('w', new Float32Array(64).fill(0.25), { dtype: 'Q8_0', shape: [32, 2] });
  const wf = g.constant('wf', new Float32Array(16).fill(1), { dtype: 'F32', shape: [8, 2] });
  const h = g.constant('h', new Uint16Array([0x3c00, 0x4000]), { dtype: 'F16', shape: [2] });
  const r = g.rope(g.reshape(g.rmsNorm(x), [4, 2, 4]), pos, { mode: 'neox' });
  const y = g.matmul(wf, g.cont(g.reshape(r, [8, 4])));
  g.output(g.softmax(g.add(y, h), { scale: 0.5 }), 'p').output(w, 'w');
  return g;
}

describe('graphFromDocument', () => {
  it('reads back what toJSON writes, identically', () => {
    const doc = sample().toJSON();
    expect(graphFromDocument(doc).toJSON()).toEqual(doc);
    expect(graphFromDocument(JSON.stringify(doc)).toJSON()).toEqual(doc);
  });

  it('accepts nodes in any order and gives typed outputs', () => {
    const doc = sample().toJSON();
    const shuffled: GraphDocument = { ...doc, nodes: [...doc.nodes].reverse() };
    const g = graphFromDocument(shuffled);
    const p = g.get('p')!;
    expect([p.dtype, p.shape]).toEqual(['F32', [2, 4]]);
    expect(g.outputs.map((t) => t.name)).toEqual(['p', 'w']);
    expect(g.toJSON().nodes.map((n) => n.name).sort()).toEqual(doc.nodes.map((n) => n.name).sort());
  });

  it('rejects bad documents naming the node', () => {
    const base = (nodes: unknown[], outputs = ['c']): GraphDocument =>
      ({
        version: 1,
        tensors: [
          { name: 'a', type: 'F32', shape: [4, 3] },
          { name: 'b', type: 'F32', shape: [3, 3] },
        ],
        nodes,
        outputs,
      }) as GraphDocument;
    const cases: [GraphDocument | string, new (...a: any[]) => TesseraError, string, string | RegExp][] = [
      [base([{ name: 'c', op: 'MUL_MAT', src: ['a', 'b'] }]), ShapeError, 'ShapeMismatch', /^node "c": MUL_MAT: src0 \[4, 3, 1, 1\]/],
      [base([{ name: 'c', op: 'NOPE', src: ['a'] }]), TesseraError, 'UnknownOp', 'node "c": unknown op "NOPE"'],
      [base([{ name: 'c', op: 'ADD', src: ['a'] }]), InvalidGraphError, 'InvalidGraph', 'node "c": ADD takes 2 sources, got 1'],
      [base([{ name: 'c', op: 'RELU', src: ['zz'] }]), InvalidGraphError, 'InvalidGraph', 'node "c": unknown tensor "zz"'],
      [
        base([
          { name: 'c', op: 'RELU', src: ['d'] },
          { name: 'd', op: 'RELU', src: ['c'] },
        ]),
        InvalidGraphError,
        'InvalidGraph',
        /cycle/,
      ],
      [base([{ name: 'a', op: 'RELU', src: ['b'] }], ['a']), InvalidGraphError, 'InvalidGraph', 'duplicate tensor name "a"'],
      [base([{ name: 'c', op: 'RELU', src: ['a'], params: { x: 1 } }]), InvalidGraphError, 'InvalidGraph', 'RELU takes no params, got ["x"]'],
      [base([{ name: 'c', op: 'SCALE', src: ['a'], params: { scal: 1 } }]), InvalidGraphError, 'InvalidGraph', /unknown field "scal"/],
      [base([{ name: 'c', op: 'SCALE', src: ['a'] }]), InvalidGraphError, 'InvalidGraph', 'SCALE params: missing field "scale"'],
      [base([{ name: 'c', op: 'RELU', src: ['a'] }], ['q']), InvalidGraphError, 'InvalidGraph', 'outputs: unknown tensor "q"'],
      [base([{ name: 'c', op: 'RELU', src: ['a'] }], []), InvalidGraphError, 'InvalidGraph', /no outputs/],
      [{ ...base([]), version: 2 } as unknown as GraphDocument, InvalidGraphError, 'InvalidGraph', /unsupported version 2/],
      ['{', InvalidGraphError, 'InvalidGraph', /not valid JSON/],
      [
        { version: 1, tensors: [{ name: 'a', type: 'F99', shape: [1] }], nodes: [], outputs: ['a'] } as unknown as GraphDocument,
        TesseraError,
        'UnknownType',
        /unknown tensor type "F99"/,
      ],
      [
        { version: 1, tensors: [{ name: 'a', type: 'I32', shape: [2], values: [1] }], nodes: [], outputs: ['a'] } as GraphDocument,
        TesseraError,
        'DataLength',
        /needs 2 values, got 1/,
      ],
      [base([{ name: 'c', op: 'CONCAT', src: ['a', 'b'], params: { dim: 9 } }]), InvalidGraphError, 'InvalidGraph', 'node "c": CONCAT: dim 9 is not below 4'],
      [base([{ name: 'c', op: 'SOFT_MAX', src: ['a', 'b'] }]), ShapeError, 'ShapeMismatch', /mask/],
      [base([{ name: 'c', op: 'GET_ROWS', src: ['a', 'b'] }]), DTypeError, 'Unsupported', /indices/],
    ];
    for (const [doc, cls, kind, message] of cases) {
      let err: unknown;
      try {
        graphFromDocument(doc);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(doc)).toBeInstanceOf(cls);
      expect((err as TesseraError).kind).toBe(kind);
      if (typeof message === 'string') expect((err as Error).message).toBe(message);
      else expect((err as Error).message).toMatch(message);
    }
  });
});
