import path from 'node:path';
import { type Browser } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { root } from '../support/cli.js';
import { browserTestRuns, suiteBrowser } from '../dashboard/chromium.js';
import { startTestDashboard, TOKEN } from '../support/dashboard.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

/** The imports page while two imports wait for their turn at the budget, in a real browser (as test/dashboard/browser.test.ts). */
const SCREENSHOTS = path.join(root, 'test-output', 'screenshots');
const RUN = browserTestRuns("the dashboard's browser test");

let browser: () => Browser;
let pipeline: Pipeline | undefined;

describe.runIf(RUN)('the imports page while imports share the budget', () => {
  browser = suiteBrowser(SCREENSHOTS);
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('shows each waiting import its place, share and ETA', { timeout: 60_000 }, async () => {
    // No worker: both imports keep their backlogs, each waiting for its turn.
    pipeline = await startPipeline({ workers: false, seed: false, config: { rate: 50 } });
    const { store, queues, keyring, logger, redis } = pipeline.runtime;
    const csv = (n: number, tag: string): string => `FirstName,LastName,EmailAddress\n${Array.from({ length: n }, (_, i) => `Row${i},${tag},r${i}.${tag}@example.com`).join('\n')}\n`;
    const big = await importFile({ file: await pipeline.file('migration.csv', csv(500, 'big')) }, { store, queues, keyring, logger, redis });
    const fix = await importFile({ file: await pipeline.file('card-fix.csv', csv(5, 'fix')), priority: 'high' }, { store, queues, keyring, logger, redis });
    const dashboard = await startTestDashboard(pipeline);
    const context = await browser().newContext({ viewport: { width: 1360, height: 500 }, extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` } });
    const page = await context.newPage();
    try {
      await page.goto(`${dashboard.url}/`);
      const state = (id: string) => page.locator(`tr[data-import="${id}"] [data-field="state"]`);
      // 500 rows at a third of 50/s (weight 2 of 6) is 30 s; 5 rows at two thirds, under a second (shown as 1s).
      await expect.poll(() => state(big.importId).textContent()).toBe('running · place 1 of 2 sharing the budget, share 33% · ETA 30s');
      await expect.poll(() => state(fix.importId).textContent()).toBe('running · place 2 of 2 sharing the budget, high priority, share 67% · ETA 1s');
      await page.screenshot({ path: path.join(SCREENSHOTS, 'imports-sharing.png'), fullPage: true });
    } finally {
      await context.close();
    }
  });
});
