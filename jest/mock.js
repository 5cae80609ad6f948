/**
 * A Jest mock of react-native-tessera for app tests, with no native code:
 *
 *   jest.mock('react-native-tessera', () => require('react-native-tessera/jest/mock'));
 *
 * Everything that runs in JavaScript is the real thing (the graph builder and its checks,
 * input validation, errors, typed results); the native side is replaced by a deterministic
 * fake:
 * - getDevices(): one CPU, "Mock CPU", 8 GiB of which 4 GiB free;
 * - getCpuFeatures(): an ARMv8.2 phone (NEON, ARM_FMA, FP16_VA, DOTPROD; no i8mm, SVE, SME);
 * - getBuildInfo(): version of this package, target "mock", profile "mock";
 * - compute() / Session: every output is zeros of its type and shape;
 * - cancel, close / release, closeAllSessions, setLogLevel, toggleNativeLog: accepted, no
 *   effect.
 *
 * The mock's `__mock` export gives the requests received (`__mock.requests`) and lets a test
 * emit a native log record (`__mock.emitLog({ level, target, message })`).
 *
 * It works with React Native's Jest preset as it is (`preset: 'react-native'`): the preset does
 * not transform node_modules/react-native-tessera, and Jest loads the package's CommonJS build
 * (lib/commonjs, the `require` condition of its exports).
 */
'use strict';

/* global jest */
const actual = jest.requireActual('react-native-tessera');

const GiB = 1024 * 1024 * 1024;

const devices = [
  {
    backend: 'CPU',
    name: 'CPU',
    description: 'Mock CPU',
    type: 'cpu',
    memoryFree: 4 * GiB,
    memoryTotal: 8 * GiB,
    caps: { asyncOps: false, hostBuffer: false, bufferFromHostPtr: true, events: false },
  },
];

const cpuFeatures = {
  pairs: [
    { name: 'NEON', value: '1' },
    { name: 'ARM_FMA', value: '1' },
    { name: 'FP16_VA', value: '1' },
    { name: 'DOTPROD', value: '1' },
    { name: 'MATMUL_INT8', value: '0' },
    { name: 'SVE', value: '0' },
    { name: 'SVE_CNT', value: '0' },
    { name: 'SME', value: '0' },
  ],
  tiers: ['F32', 'F16', 'BF16', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K'].map(
    (dtype) => ({ dtype, tier: dtype.startsWith('Q') ? 'neon+dotprod' : 'neon' })
  ),
};

let version = '0.0.0';
try {
  version = require('../package.json').version;
} catch (e) {
  // keep the default
}

const buildInfo = { version, target: 'mock', features: [], profile: 'mock' };

/** Zero bytes of a tensor of `dtype` and `shape`, in base64. */
function zeros(dtype, shape) {
  const info = actual.DTYPE_INFO[dtype];
  const count = shape.reduce((a, b) => a * b, 1);
  const bytes = new Uint8Array((count / info.blockSize) * info.typeSize);
  return actual.base64FromBytes(bytes);
}

const requests = [];
const logListeners = new Set();
let nextSession = 1;

function answer(req) {
  switch (req.method) {
    case 'devices':
      return devices;
    case 'cpuFeatures':
      return cpuFeatures;
    case 'buildInfo':
      return buildInfo;
    case 'openSession':
      return { session: nextSession++ };
    case 'cancel':
      return { cancelled: false };
    case 'closeSession':
      return { closed: true };
    case 'closeAllSessions':
      return { closed: 0 };
    case 'setLogLevel':
      return {};
    case 'compute': {
      // The real document reader gives every output's type and shape.
      const g = actual.graphFromDocument(req.graph);
      return {
        outputs: g.outputs.map((t) => ({
          name: t.name,
          dtype: t.dtype,
          shape: Array.from(t.shape),
          data: zeros(t.dtype, t.shape),
        })),
      };
    }
    default:
      throw new actual.InvalidArgumentError('unknown method ' + JSON.stringify(req.method));
  }
}

const mockCaller = {
  call(requestJson) {
    let response;
    try {
      const req = JSON.parse(requestJson);
      requests.push(req);
      response = { ok: answer(req) };
    } catch (e) {
      response = { error: { kind: (e && e.kind) || 'Internal', message: String((e && e.message) || e) } };
    }
    return Promise.resolve(JSON.stringify(response));
  },
  toggleNativeLog() {},
  addLogListener(listener) {
    logListeners.add(listener);
    return () => logListeners.delete(listener);
  },
};

actual.setNativeCaller(mockCaller);

module.exports = {
  ...actual,
  /** Replacing the native side in tests of tests is allowed; `null` restores the mock. */
  setNativeCaller(caller) {
    actual.setNativeCaller(caller === null ? mockCaller : caller);
  },
  __mock: {
    requests,
    devices,
    cpuFeatures,
    buildInfo,
    emitLog(event) {
      for (const l of [...logListeners]) l(event);
    },
    reset() {
      requests.length = 0;
      nextSession = 1;
      actual.setNativeCaller(mockCaller);
    },
  },
};
