/**
 * A vitest reporter that ends the run with one plain line, "N passed, M failed" (", K skipped"
 * when some were skipped or todo), which CI logs and scripts read the same way for every test
 * runner of the project.
 */

import type { Reporter, TestModule } from 'vitest/node';

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    let passed = 0;
    let failed = unhandledErrors.length;
    let skipped = 0;
    for (const m of testModules) {
      let tests = 0;
      for (const t of m.children.allTests()) {
        tests++;
        const state = t.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
      // A file that failed to load has no tests: count it as a failure.
      if (tests === 0 && m.state() === 'failed') failed++;
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}\n`);
  }
}
