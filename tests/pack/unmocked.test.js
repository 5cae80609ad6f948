/**
 * Without the mock, under React Native's Jest preset: the package imports (its CommonJS build;
 * the preset does not transform node_modules/react-native-tessera) and a call rejects with
 * NativeModuleMissingError, since no TurboModule is registered in Jest.
 */
import { NativeModuleMissingError, getDevices, graph } from 'react-native-tessera';

test('imports, builds graphs, and reports the missing native module', async () => {
  const g = graph();
  g.output(g.relu(g.input('x', 'F32', [4])), 'y');
  expect(JSON.parse(g.toJSONString()).nodes).toEqual([{ name: 'y', op: 'RELU', src: ['x'] }]);
  const e = await getDevices().catch((err) => err);
  expect(e).toBeInstanceOf(NativeModuleMissingError);
  expect(e.kind).toBe('NativeModuleMissing');
});
