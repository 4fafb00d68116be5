/**
 * The History page, an import's activity charts and the search box in a
 * real browser (Debian's Chromium through playwright-core, as
 * browser.test.ts): imports listed with their state, the charts drawn as
 * inline SVG while an import runs and once it has finished, rows found by
 * email and by CustomerID, and nothing (and no card number shown) for a
 * card number. Screenshots go to test-output/screenshots/.
 */
import path from 'node:path';
import { type Browser, type Page } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { importStatus } from '../../src/import/status.js';
import { root } from '../support/cli.js';
import { startTestDashboard, TOKEN } from '../support/dashboard.js';
import { importAndFinish, SIGNUPS_CSV, waitFinished } from '../support/imports.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';
import { browserTestRuns, suiteBrowser, reloadPage } from './chromium.js';

const SCREENSHOTS = path.join(root, 'test-output', 'screenshots');
const RUN = browserTestRuns('the history browser test');

let browser: () => Browser;
let pipeline: Pipeline | undefined;

const shot = (page: Page, name: string): Promise<Buffer> => page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });

describe.runIf(RUN)('history, charts and search in a browser', () => {
  browser = suiteBrowser(SCREENSHOTS);
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('lists imports by state, charts a running and a finished import, and finds rows by email and CustomerID but never by card number', { timeout: 120_000 }, async () => {
    // A service that answers 429 beyond 25 requests a second: the import runs for a while, and meets 429s.
    pipeline = await startPipeline({ faults: { rateLimit: 25 } });
    const dashboard = await startTestDashboard(pipeline);
    const { store, queues, keyring, logger } = pipeline.runtime;
    const signups = await importAndFinish(pipeline, await pipeline.file('signups.csv', SIGNUPS_CSV));
    const lines = ['FirstName,LastName,EmailAddress', ...Array.from({ length: 240 }, (_, i) => `Pat${i},Quinn${i},pat${i}@example.com`), 'Bad,Row,not-an-email'];
    const started = await importFile({ file: await pipeline.file('people.csv', lines.join('\n')) }, { store, queues, keyring, logger });
    expect(started.outcome).toBe('enqueued');
    const id = started.importId;

    const context = await browser().newContext({ viewport: { width: 1360, height: 900 }, extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` } });
    const page = await context.newPage();
    try {
      // Running: some rows settled, not all.
      await until(async () => {
        const s = await importStatus(store, id);
        return s && s.settledRows >= 20 && !s.settled ? s : undefined;
      }, 'the import to be under way', 60_000, 20);
      await page.goto(`${dashboard.url}/history`);
      const running = page.locator(`tr[data-import="${id}"]`);
      expect(await running.getAttribute('data-state')).toBe('running');
      expect(await running.locator('.state').textContent()).toBe('running');
      await shot(page, '30-history-running');

      await running.locator('a').first().click();
      await page.waitForURL(`${dashboard.url}/imports/${id}`);
      const rowsChart = page.locator('svg[data-chart="rows"]');
      expect(Number(await rowsChart.getAttribute('data-points'))).toBeGreaterThan(0);
      expect(await rowsChart.locator('polyline.series').getAttribute('points')).toMatch(/^[\d.]+,[\d.]+( [\d.]+,[\d.]+)*$/);
      expect(await rowsChart.locator('text.axis-label').allTextContents()).toEqual(['time since the import started (h:min:s)', 'rows/s']);
      await shot(page, '31-import-activity-running');

      const finished = await waitFinished(pipeline, id);
      expect(finished.counts).toMatchObject({ created: 240, invalid: 1 });
      expect(finished.rateLimited).toBeGreaterThan(0);
      await reloadPage(page);
      const points = Number(await rowsChart.getAttribute('data-points'));
      expect(points).toBeGreaterThan(0);
      expect(await page.locator('svg[data-chart="429s"] rect.point').count()).toBe(points - 1);
      expect(await page.locator('figure.chart figcaption').nth(1).textContent()).toBe(`429 answers per minute (${finished.rateLimited} in all)`);
      await shot(page, '32-import-activity-finished');

      // The history: each import with its state; a filter by state.
      await page.goto(`${dashboard.url}/history`);
      expect(await page.locator(`tr[data-import="${id}"]`).getAttribute('data-state')).toBe('finished with failures');
      expect(await page.locator(`tr[data-import="${signups.importId}"]`).getAttribute('data-state')).toBe('finished with failures');
      expect(await page.locator(`tr[data-import="${id}"]`).textContent()).toContain('created 240');
      await shot(page, '33-history');
      await page.locator('.filters a', { hasText: /^finished$/ }).click();
      expect(await page.locator('table.history').count()).toBe(0);
      expect(await page.locator('main').textContent()).toContain('No finished imports.');

      // Search from the box in the header: by email.
      await page.fill('form.header-search input[name="q"]', 'PAT17@example.com');
      await page.click('form.header-search button');
      await page.waitForURL(/\/find\?q=/);
      const found = page.locator('table.found tbody tr');
      expect(await found.count()).toBe(1);
      expect(await found.getAttribute('data-row')).toBe('18');
      expect(await found.textContent()).toContain('pat17@example.com');
      const customerId = (await found.locator('td.mono').first().textContent()) ?? '';
      expect(customerId).toMatch(/^\S+$/);
      await shot(page, '34-find-by-email');

      // By the CustomerID the service gave that row.
      await page.fill('form.find input[name="q"]', customerId);
      await page.click('form.find button');
      await page.waitForURL(/\/find\?q=/);
      expect(await found.count()).toBe(1);
      expect(await found.getAttribute('data-import')).toBe(id);
      expect(await found.locator('td').last().textContent()).toBe('customerId');
      await shot(page, '35-find-by-customer-id');

      // A card number of the sign-ups file: nothing found, and the number is shown nowhere, not even in the address.
      await page.fill('form.find input[name="q"]', '4111 1111 1111 1111');
      await page.click('form.find button');
      await page.waitForURL(/card=1/);
      expect(await found.count()).toBe(0);
      const text = (await page.content()) + page.url();
      expect(text).not.toMatch(/4111[\s+%20]*1111[\s+%20]*1111/);
      expect(await page.locator('.notice.error').textContent()).toContain('looks like a card number: card data is never searched');
      await shot(page, '36-find-card-number');
    } finally {
      await context.close();
    }
  });
});
