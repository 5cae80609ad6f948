import { describe, expect, it } from 'vitest';
// The stub that vitest.config.mts puts in place of 'react-native'
import { __emit, __setNativeModule, lookups } from './stubs/react-native';
import * as tessera from '../../src/index';
import { NativeModuleMissingError, addNativeLogListener, getDevices, setNativeCaller, toggleNativeLog } from '../../src/index';

describe('the TurboModule', () => {
  it('is not looked up at import time', () => {
    expect(lookups).toEqual([]);
    expect(typeof tessera.compute).toBe('function');
  });

  it('is looked up on first use, with a clear error when it is missing', async () => {
    const e = await getDevices().catch((x: unknown) => x);
    expect(e).toBeInstanceOf(NativeModuleMissingError);
    expect((e as NativeModuleMissingError).kind).toBe('NativeModuleMissing');
    expect((e as Error).message).toBe(
      'react-native-tessera: native module not found; did you rebuild the app / run pod install?'
    );
    expect(lookups).toEqual(['Tessera']);
    // Graph building needs no native module at all
    const g = tessera.graph();
    g.output(g.relu(g.input('x', 'F32', [2])), 'y');
    expect(g.toJSON().nodes).toHaveLength(1);
  });

  it('is used once registered, for calls, log toggling and TesseraLog events', async () => {
    const calls: string[] = [];
    const toggles: boolean[] = [];
    const subscriptions: string[] = [];
    let removed = 0;
    __setNativeModule('Tessera', {
      call: async (json: string) => {
        calls.push(json);
        return JSON.stringify({ ok: JSON.parse(json).method === 'devices' ? [] : {} });
      },
      toggleNativeLog: (enabled: boolean) => toggles.push(enabled),
      addListener: (name: string) => subscriptions.push(name),
      removeListeners: (n: number) => (removed += n),
    });
    expect(await getDevices()).toEqual([]);
    expect(calls).toEqual(['{"method":"devices"}']);

    const seen: unknown[] = [];
    const unsubscribe = addNativeLogListener((e) => seen.push(e));
    expect(subscriptions).toEqual(['TesseraLog']);
    await toggleNativeLog(true, 'debug');
    expect(toggles).toEqual([true]);
    expect(calls[1]).toBe('{"method":"setLogLevel","level":"debug"}');
    __emit('TesseraLog', { level: 'info', target: 'tessera_cpu', message: 'hello' });
    expect(seen).toEqual([{ level: 'info', target: 'tessera_cpu', message: 'hello' }]);
    unsubscribe();
    unsubscribe(); // idempotent
    expect(removed).toBe(1);
    __emit('TesseraLog', { level: 'info', target: 't', message: 'not delivered' });
    expect(seen).toHaveLength(1);
    await toggleNativeLog(false);
    expect(toggles).toEqual([true, false]);
    expect(calls).toHaveLength(2); // disabling leaves the level alone

    // An injected caller takes precedence
    setNativeCaller({ call: async () => '{"ok":[{"backend":"X","name":"X0","type":"gpu"}]}' });
    expect((await getDevices())[0]!.name).toBe('X0');
    setNativeCaller(null);
    expect(await getDevices()).toEqual([]);
  });
});
