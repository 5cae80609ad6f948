/**
 * `await using` in an app's TypeScript, as docs/js-api.md says to set it up: scripts/pack-test.sh
 * type-checks this file with the docs' tsconfig (React Native's lib list plus
 * esnext.disposable) and Jest runs it compiled by the docs' babel.config.js (React Native's
 * preset plus @babel/plugin-transform-explicit-resource-management), with the package's mock.
 */
jest.mock('react-native-tessera', () => jest.requireActual('react-native-tessera/jest/mock'));

import { Session, loadModel, type LanguageModel } from 'react-native-tessera';

test('await using releases a model and closes a session at the end of the block', async () => {
  let kept: LanguageModel | null = null;
  let session: Session | null = null;
  {
    await using model = await loadModel('/models/any.gguf', { nCtx: 256 });
    await using s = await Session.open();
    kept = model;
    session = s;
    expect(model.isReleased).toBe(false);
    const disposable: AsyncDisposable = model;
    // Hermes and older Nodes have no Symbol.asyncDispose: Babel's helper then uses this key.
    const key = typeof Symbol.asyncDispose === 'symbol' ? Symbol.asyncDispose : Symbol.for('Symbol.asyncDispose');
    expect(typeof (disposable as unknown as Record<symbol, unknown>)[key]).toBe('function');
  }
  expect(kept.isReleased).toBe(true);
  expect(session.closed).toBe(true);
});
