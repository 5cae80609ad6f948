/**
 * Tessera example: lists the devices and CPU features, then builds and computes a small graph
 * (a matmul of Q8_0 weights with an input, then softmax) and shows the result and timing; the
 * Model tab (ModelScreen.tsx) loads a GGUF language model and chats with it.
 */

import React, { useCallback, useEffect, useRef, useState } from 'react';
import { Button, ScrollView, StatusBar, StyleSheet, Switch, Text, View } from 'react-native';
import ModelScreen from './ModelScreen';
import {
  TesseraError,
  addNativeLogListener,
  compute,
  getBuildInfo,
  getCpuFeatures,
  getDevices,
  graph,
  toggleNativeLog,
  type BuildInfo,
  type CpuFeatures,
  type DeviceInfo,
} from 'react-native-tessera';

// Hermes has it; React Native 0.81's types do not declare it.
declare const performance: { now(): number };

const K = 256; // input features
const M = 16; // classes
const N = 8; // batch columns

/** x F32 [K, N] -> (W Q8_0 [K, M]) -> logits [M, N] -> softmax -> probs; argmax per column. */
function buildGraph() {
  const g = graph();
  const x = g.input('x', 'F32', [K, N]);
  // Weights given as numbers: the core quantizes them to Q8_0 blocks of 32.
  const weights = new Float32Array(K * M);
  for (let m = 0; m < M; m++) {
    for (let k = 0; k < K; k++) weights[m * K + k] = Math.sin((m + 1) * (k + 1) * 0.01);
  }
  const w = g.constant('w', weights, { dtype: 'Q8_0', shape: [K, M] });
  const logits = g.matmul(w, x);
  const probs = g.softmax(logits, { scale: 0.1 });
  return g.output(probs, 'probs').output(g.argmax(logits), 'best');
}

function inputData(): Float32Array {
  const x = new Float32Array(K * N);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) x[n * K + k] = Math.cos((n + 1) * (k + 1) * 0.02);
  }
  return x;
}

const GiB = 1024 ** 3;

interface RunResult {
  ms: number;
  best: number[];
  firstColumn: number[];
}

export default function App(): React.JSX.Element {
  const [tab, setTab] = useState<'graph' | 'model'>('graph');
  return (
    <View style={styles.root}>
      <StatusBar barStyle="dark-content" />
      <View style={styles.tabs}>
        <Button title="Devices & graph" onPress={() => setTab('graph')} disabled={tab === 'graph'} />
        <Button title="Model" onPress={() => setTab('model')} disabled={tab === 'model'} />
      </View>
      {/* Both screens stay mounted: switching tabs keeps the model loaded and the chat going. */}
      <View style={tab === 'graph' ? styles.screen : styles.hidden}>
        <GraphScreen />
      </View>
      <View style={tab === 'model' ? styles.screen : styles.hidden}>
        <ModelScreen />
      </View>
    </View>
  );
}

function GraphScreen(): React.JSX.Element {
  const [build, setBuild] = useState<BuildInfo | null>(null);
  const [devices, setDevices] = useState<DeviceInfo[]>([]);
  const [features, setFeatures] = useState<CpuFeatures | null>(null);
  const [result, setResult] = useState<RunResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [running, setRunning] = useState(false);
  const [logging, setLogging] = useState(false);
  const [logs, setLogs] = useState<string[]>([]);
  const graphRef = useRef<ReturnType<typeof buildGraph> | null>(null);

  const report = (e: unknown) =>
    setError(e instanceof TesseraError ? `${e.kind}: ${e.message}` : String(e));

  useEffect(() => {
    Promise.all([getBuildInfo(), getDevices(), getCpuFeatures()])
      .then(([b, d, f]) => {
        setBuild(b);
        setDevices(d);
        setFeatures(f);
      })
      .catch(report);
    return addNativeLogListener((e) =>
      setLogs((old) => [...old.slice(-19), `${e.level} ${e.target}: ${e.message}`])
    );
  }, []);

  const run = useCallback(async () => {
    setRunning(true);
    setError(null);
    try {
      graphRef.current ??= buildGraph(); // shapes are checked here, in JS
      const x = inputData();
      const start = performance.now();
      const out = await compute(graphRef.current, { x }, { device: 'auto' });
      const ms = performance.now() - start;
      const probs = out.probs.data; // Float32Array, shape [M, N]
      setResult({
        ms,
        best: Array.from(out.best.data),
        firstColumn: Array.from(probs.subarray(0, M)),
      });
    } catch (e) {
      report(e);
    } finally {
      setRunning(false);
    }
  }, []);

  const onToggleLog = (enabled: boolean) => {
    setLogging(enabled);
    toggleNativeLog(enabled, 'debug').catch(report);
  };

  const flags = features
    ? Object.entries({
        NEON: features.neon,
        DOTPROD: features.dotprod,
        I8MM: features.i8mm,
        FP16: features.fp16,
        SVE: features.sve,
        SME: features.sme,
        AVX2: features.avx2,
        F16C: features.f16c,
        FMA: features.fma,
        AVX512: features.avx512,
      })
    : [];

  return (
    <View style={styles.root}>
      <ScrollView contentContainerStyle={styles.content}>
        <Text style={styles.title}>Tessera</Text>
        {build && (
          <Text style={styles.dim}>
            {build.version} · {build.target} · {build.profile}
          </Text>
        )}

        <Text style={styles.heading}>Devices</Text>
        {devices.map((d) => (
          <Text key={d.name} style={styles.row}>
            {d.name} ({d.type}, {d.backend}): {d.description} — {(d.memoryFree / GiB).toFixed(1)} /{' '}
            {(d.memoryTotal / GiB).toFixed(1)} GiB free
          </Text>
        ))}

        <Text style={styles.heading}>CPU features</Text>
        <Text style={styles.row}>
          {flags.map(([name, on]) => `${name} ${on ? '✓' : '·'}`).join('   ')}
          {features && features.sveCnt > 0 ? `   SVE ${features.sveCnt * 8}-bit` : ''}
        </Text>
        {features && (
          <Text style={styles.dim}>
            kernels: {features.tiers.map((t) => `${t.dtype} ${t.tier}`).join(', ')}
          </Text>
        )}

        <Text style={styles.heading}>
          Q8_0 matmul [{K}×{M}] · [{K}×{N}] → softmax
        </Text>
        <Button title={running ? 'Computing…' : 'Compute'} onPress={run} disabled={running} />
        {result && (
          <View>
            <Text style={styles.row}>time: {result.ms.toFixed(2)} ms (build, run and copy back)</Text>
            <Text style={styles.row}>argmax per column: {result.best.join(', ')}</Text>
            <Text style={styles.row}>
              probabilities of column 0: {result.firstColumn.map((p) => p.toFixed(3)).join(' ')}
            </Text>
          </View>
        )}
        {error && <Text style={styles.error}>{error}</Text>}

        <View style={styles.switchRow}>
          <Text style={styles.heading}>Native log</Text>
          <Switch value={logging} onValueChange={onToggleLog} />
        </View>
        {logs.map((l, i) => (
          <Text key={i} style={styles.log}>
            {l}
          </Text>
        ))}
      </ScrollView>
    </View>
  );
}

const styles = StyleSheet.create({
  root: { flex: 1, backgroundColor: '#fff' },
  screen: { flex: 1 },
  hidden: { display: 'none' },
  content: { padding: 16 },
  tabs: { flexDirection: 'row', justifyContent: 'space-around', paddingTop: 48, paddingBottom: 8 },
  title: { fontSize: 28, fontWeight: '700' },
  heading: { fontSize: 17, fontWeight: '600', marginTop: 20, marginBottom: 6 },
  row: { fontSize: 14, marginVertical: 2 },
  dim: { fontSize: 12, color: '#666' },
  error: { color: '#b00020', marginTop: 8 },
  switchRow: { flexDirection: 'row', alignItems: 'center', justifyContent: 'space-between' },
  log: { fontFamily: 'monospace', fontSize: 11, color: '#333' },
});
