import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { type Browser, type Page } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import type { Dashboard } from '../../src/dashboard/server.js';
import { enqueueExport } from '../../src/export/job.js';
import { scheduleExport } from '../../src/export/schedule.js';
import { root } from '../support/cli.js';
import { browserTestRuns, reloadPage, suiteBrowser } from './chromium.js';
import { startTestDashboard, TOKEN } from '../support/dashboard.js';
import { importAndFinish, SIGNUPS_CSV, waitFinished } from '../support/imports.js';
import { redisText, startPipeline, until, type Pipeline } from '../support/pipeline.js';

/**
 * The dashboard in a real browser: an installed Chromium (Debian's, by
 * default), headless, driven by playwright-core (never a downloaded browser).
 * Screenshots of each page go to test-output/screenshots/. Without a
 * Chromium the test is skipped with a line saying how to get one, except
 * under CI (CI=true), where it must run and fails without one.
 */
const SCREENSHOTS = path.join(root, 'test-output', 'screenshots');
const RUN = browserTestRuns("the dashboard's browser test");

let browser: () => Browser;
let pipeline: Pipeline | undefined;

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

describe.runIf(RUN)('dashboard in a browser', () => {
  browser = suiteBrowser(SCREENSHOTS);
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('groups failures by cause, previews a group\'s retry and sends it', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline();
    const dashboard: Dashboard = await startTestDashboard(pipeline);
    const file = await pipeline.file('missing.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n999992,b@example.com\n999993,not-an-email\n');
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ failed: 2, invalid: 1 });
    const context = await browser().newContext({ viewport: { width: 1360, height: 900 }, extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` } });
    const page = await context.newPage();
    try {
      await page.goto(`${dashboard.url}/imports/${status.importId}`);
      const failed = page.locator('tr[data-group^="failed:"]');
      expect(await failed.locator('td.num').textContent()).toBe('2');
      expect(await page.locator('tr[data-group="invalid:EmailAddress:email"] td.num').textContent()).toBe('1');
      await shot(page, '20-failures-by-cause');
      await failed.locator('a', { hasText: 'Retry group' }).click();
      expect(await page.locator('dl.facts').textContent()).toMatch(/Rows it sends again\s*2/);
      await shot(page, '21-retry-group-preview');
      await page.click('button[value="group"]');
      expect(await page.locator('.notice.ok').textContent()).toContain('retrying 2 row(s): 1, 2');
    } finally {
      await context.close();
    }
  });

  it('logs in, shows the rows that did not succeed, fixes an invalid sign-up in the form and retries it to success', { timeout: 90_000 }, async () => {
    pipeline = await startPipeline();
    const dashboard: Dashboard = await startTestDashboard(pipeline);
    const status = await importAndFinish(pipeline, await pipeline.file('signups.csv', SIGNUPS_CSV));
    expect(status.counts).toMatchObject({ 'signed-up': 2, invalid: 1, failed: 1 });
    const id = status.importId;

    // Without the token: 401 everywhere but the login form.
    for (const route of ['/', `/imports/${id}`, `/imports/${id}/rows/2`, `/imports/${id}/results.csv`, `/imports/${id}/errors.csv`, '/exports', '/queue-health', '/api/imports', '/metrics', '/queues', '/queues/api/queues']) {
      const response = await fetch(`${dashboard.url}${route}`, { redirect: 'manual' });
      expect(response.status, route).toBe(401);
      await response.body?.cancel();
    }

    const context = await browser().newContext({ viewport: { width: 1360, height: 900 } });
    const page = await context.newPage();
    try {
      const first = await page.goto(`${dashboard.url}/`);
      expect(first?.status()).toBe(401);
      expect(await page.locator('form.login').isVisible()).toBe(true);
      await shot(page, '01-login');
      await page.fill('input[name="token"]', 'not-the-token');
      await page.click('button[type="submit"]');
      expect(await page.locator('.notice.error').textContent()).toContain('not the dashboard token');
      await page.fill('input[name="token"]', TOKEN);
      await page.click('button[type="submit"]');
      await page.waitForURL(`${dashboard.url}/`);
      const cookie = (await context.cookies()).find((c) => c.name === 'subsync_session');
      expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });

      // The imports list, with counts by outcome.
      const importRow = page.locator(`tr[data-import="${id}"]`);
      expect(await importRow.textContent()).toContain('signed-up 2 · invalid 1 · failed 1');
      await shot(page, '02-imports');

      // The import: its rows that did not succeed, with their reasons.
      await importRow.locator('a').first().click();
      await page.waitForURL(`${dashboard.url}/imports/${id}`);
      const rows = page.locator('table.rows > tbody > tr');
      expect(await rows.count()).toBe(2);
      const invalid = page.locator('tr[data-row="2"]');
      const refused = page.locator('tr[data-row="4"]');
      expect(await invalid.locator('.problem').textContent()).toContain('column "Customer.EmailAddress": "bob@" is not an email address (rule: email)');
      expect(await refused.locator('.problem').textContent()).toContain('offer LEGACY-2019 is Retired');
      expect(await invalid.textContent()).toContain('************4444');
      expect(await invalid.textContent()).not.toContain('5555555555554444');
      await shot(page, '03-import-rows');

      // Retry one: the refused sign-up's card data was let go when the import settled, so it is not retried.
      await refused.locator('button[name="row"]').click();
      await page.waitForURL(new RegExp(`/imports/${id}\\?`));
      expect(await page.locator('.notice').textContent()).toContain('card data is no longer held');
      await shot(page, '04-retry-refused');

      // Edit the invalid row: fix the email; the card is asked for again.
      await page.locator('tr[data-row="2"] a', { hasText: 'Edit' }).click();
      await page.waitForURL(`${dashboard.url}/imports/${id}/rows/2`);
      const email = page.locator('input[name="cell.2"]');
      expect(await email.inputValue()).toBe('bob@');
      expect(await page.locator('label.error').textContent()).toContain('Customer.EmailAddress');
      expect(await page.locator('input[name="card.AccountNumber"]').getAttribute('required')).not.toBeNull();
      await shot(page, '05-edit-row');

      // A still-wrong value is refused with the rule, and nothing is queued.
      await email.fill('bob@still-wrong');
      await page.fill('input[name="card.AccountNumber"]', '5555555555554444');
      await page.click('button.primary');
      expect(await page.locator('ul.errors').textContent()).toContain('is not an email address (rule: email)');
      expect(await page.locator('input[name="card.AccountNumber"]').inputValue()).toBe('');
      await shot(page, '06-edit-refused');

      await page.fill('input[name="cell.2"]', 'bob.marley-brown@example.co.uk');
      await page.fill('input[name="card.AccountNumber"]', '5555555555554444');
      await page.fill('input[name="card.CVCode"]', '123');
      await page.click('button.primary');
      await page.waitForURL(new RegExp(`/imports/${id}\\?notice=`));
      expect(await page.locator('.notice').textContent()).toContain('row 2 saved and queued again (signup)');

      // The row signs up: the page follows by itself (it polls, and reloads when the import finishes again).
      await waitFinished(pipeline, id, (s) => s.counts['signed-up'] === 3);
      await page.locator('[data-field="count-signed-up"]', { hasText: /^3$/ }).waitFor({ timeout: 15_000 });
      await reloadPage(page);
      expect(await page.locator('tr[data-row="2"]').count()).toBe(0);
      expect(await page.locator('table.rows > tbody > tr').count()).toBe(1);
      await shot(page, '07-import-after-retry');
      expect(await pipeline.runtime.store.getRow(id, 2)).toMatchObject({ status: 'signed-up', cells: expect.arrayContaining(['bob.marley-brown@example.co.uk', '************4444', '']) });
      const customer = pipeline.sandbox.store.customers().find((c) => c.EmailAddress === 'bob.marley-brown@example.co.uk');
      expect(customer).toMatchObject({ FirstName: 'Bob', LastName: 'Marley-Brown' });
      expect(await redisText(pipeline.runtime.redis, pipeline.prefix)).not.toContain('5555555555554444');

      // The other pages.
      // A real export and the nightly schedule, as the export commands make them.
      const { control } = pipeline.runtime.queues;
      await enqueueExport(control, { format: 'csv', gzip: false });
      await scheduleExport(control, { pattern: '0 2 * * *', tz: 'Europe/London', request: { format: 'csv', gzip: true } });
      const exportsDir = path.join(pipeline.dataDir, 'exports');
      const manifest = await until(async () => (await readdir(exportsDir).catch(() => [])).find((name) => name.endsWith('.manifest.json')), 'the export\'s manifest');
      await page.goto(`${dashboard.url}/exports`);
      const run = page.locator('main table').nth(1).locator('tbody > tr').first();
      await run.locator('summary').click();
      expect(await run.textContent()).toContain(manifest);
      expect(await page.locator('main').textContent()).toContain('0 2 * * *');
      const file = manifest.replace('.manifest.json', '.csv');
      const download = await page.request.get(`${dashboard.url}/exports/${file}`);
      expect(download.status()).toBe(200);
      expect((await download.text()).split('\n')[0]).toMatch(/^\uFEFF"?CustomerID"?,/);
      await shot(page, '08-exports');
      await page.goto(`${dashboard.url}/queue-health`);
      expect(await page.locator('main').textContent()).toContain('subsync-rows');
      await shot(page, '09-queue-health');
      // bull-board, on the same session: the refused row's job is kept failed (read-only there).
      await page.goto(`${dashboard.url}/queues/queue/subsync-rows?status=failed`);
      await page.getByText(`${id}-4`).first().waitFor({ timeout: 15_000 });
      // Read-only: no button there changes a job.
      expect(await page.getByRole('button', { name: /retry|promote|clean|remove|add|pause|empty|duplicate/i }).count()).toBe(0);
      await shot(page, '10-bull-board');
      const metrics = await page.goto(`${dashboard.url}/metrics`);
      expect(await metrics?.text()).toContain('subsync_queue_jobs{queue="subsync-rows",state="failed"}');
    } finally {
      await context.close();
    }
  });
});
