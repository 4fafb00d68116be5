/**
 * The queue health page tells a Redis that came back without acknowledged
 * writes (a rollback recorded by src/store/rollback.ts), and says so when
 * none was; a screenshot goes to test-output/screenshots/ when Chromium is
 * installed.
 */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CHROMIUM, launchChromium } from './chromium.js';
import { root } from '../support/cli.js';
import { startTestDashboard } from '../support/dashboard.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

describe('queue health: Redis writes', () => {
  it('says no rollback was seen, then lists one with its imports in read-back mode', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const dashboard = await startTestDashboard(pipeline, null);
    const page = async (): Promise<string> => (await fetch(`${dashboard.url}/queue-health`)).text();
    expect(await page()).toContain('no rollback detected');
    const { redis, store } = pipeline.runtime;
    const rollback = { at: Date.now(), from: 3204, to: 3170, runIdBefore: 'a'.repeat(40), runId: 'b'.repeat(40), by: 'host:1', how: 'reconnect', imports: ['0123456789abcdef01234567'], rows: 58 };
    await redis.lpush(store.keys.rollbacks, JSON.stringify(rollback));
    const html = await page();
    expect(html).toMatch(/Redis lost acknowledged writes \(Redis restarted from persistence that lacked them; its write counter went back from 3204 to 3170/);
    expect(html).toContain('0123456789abcdef01234567');
    const api = (await (await fetch(`${dashboard.url}/api/queue-health`)).json()) as { rollbacks: unknown[] };
    expect(api.rollbacks).toMatchObject([{ from: 3204, imports: ['0123456789abcdef01234567'] }]);

    if (CHROMIUM === undefined) return;
    const dir = path.join(root, 'test-output', 'screenshots');
    const browser = await launchChromium(dir);
    try {
      const tab = await browser.newPage();
      await tab.goto(`${dashboard.url}/queue-health`);
      await tab.screenshot({ path: path.join(dir, 'queue-health-rollback.png'), fullPage: true });
      expect(await tab.locator('main').textContent()).toContain('Redis lost acknowledged writes');
    } finally {
      await browser.close();
    }
  }, 60_000);
});
