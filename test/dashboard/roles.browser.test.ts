/**
 * Roles and the audit trail in a real browser (an installed Chromium driven
 * by playwright-core, as test/dashboard/browser.test.ts): a viewer logs in,
 * sees the pages and is refused a retry; an operator's retry and edit show
 * up on the Audit page, escaped and a page at a time. Screenshots go to
 * test-output/screenshots/.
 */
import path from 'node:path';
import { type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import { recordAudit } from '../../src/audit/trail.js';
import { AUDIT_PAGE_SIZE } from '../../src/dashboard/audit.js';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { root } from '../support/cli.js';
import { browserTestRuns, suiteBrowser, reloadPage } from './chromium.js';
import { importAndFinish } from '../support/imports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

const SCREENSHOTS = path.join(root, 'test-output', 'screenshots');
const RUN = browserTestRuns('the roles browser test');

const VIEWER = 'viewer-token-0123456789';
const OPERATOR = 'operator-token-0123456789';
const ADMIN = 'admin-token-0123456789abc';

let browser: () => Browser;
let pipeline: Pipeline | undefined;

const shot = (page: Page, name: string): Promise<Buffer> => page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });

async function loggedIn(dashboard: Dashboard, token: string): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser().newContext({ viewport: { width: 1360, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${dashboard.url}/login`);
  await page.fill('input[name="token"]', token);
  await page.click('button[type="submit"]');
  await page.waitForURL(`${dashboard.url}/`);
  return { context, page };
}

describe.runIf(RUN)('roles and the audit trail in a browser', () => {
  browser = suiteBrowser(SCREENSHOTS);
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('a viewer sees the pages but is refused a retry (403); an operator\'s retry and edit show up on the Audit page', { timeout: 90_000 }, async () => {
    pipeline = await startPipeline();
    const dashboard = await startDashboard({
      runtime: pipeline.runtime,
      host: '127.0.0.1',
      port: 0,
      tokens: [
        { name: 'vera', role: 'viewer', token: VIEWER },
        { name: 'otto', role: 'operator', token: OPERATOR },
        { name: 'ada', role: 'admin', token: ADMIN },
      ],
    });
    pipeline.runtime.adopt(() => dashboard.close());
    const status = await importAndFinish(pipeline, await pipeline.file('missing.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n999992,bad-email\n'));
    const id = status.importId;

    const viewer = await loggedIn(dashboard, VIEWER);
    try {
      const { page } = viewer;
      expect(await page.locator('header [data-user]').textContent()).toBe('vera (viewer)');
      await page.goto(`${dashboard.url}/imports/${id}`);
      expect(await page.locator('tr[data-row="1"] .status').textContent()).toBe('failed');
      const [response] = await Promise.all([page.waitForResponse((r) => r.url().endsWith(`/imports/${id}/retry`)), page.locator('tr[data-row="1"] button[name="row"]').click()]);
      expect(response.status()).toBe(403);
      expect(await page.locator('h1').textContent()).toBe('Not allowed');
      expect(await page.locator('[data-refused]').textContent()).toContain('vera has the viewer role, and this needs operator: nothing was changed');
      await shot(page, '30-viewer-refused');
      expect((await pipeline.runtime.store.getRow(id, 1))?.status).toBe('failed');
    } finally {
      await viewer.context.close();
    }

    const operator = await loggedIn(dashboard, OPERATOR);
    try {
      const { page } = operator;
      await page.goto(`${dashboard.url}/imports/${id}`);
      await page.locator('tr[data-row="1"] button[name="row"]').click();
      await page.waitForURL(new RegExp(`/imports/${id}\\?notice=`));
      expect(await page.locator('.notice.ok').textContent()).toContain('retrying 1 row(s): 1');

      await page.goto(`${dashboard.url}/imports/${id}/rows/2`);
      await page.fill('input[name="cell.1"]', 'fixed@example.com');
      await page.click('button.primary');
      await page.waitForURL(new RegExp(`/imports/${id}\\?notice=`));

      // What a command line did shows there too, every value as text.
      await recordAudit(pipeline.runtime.redis, pipeline.runtime.config, { actor: 'cli:<b>mallory</b>', action: 'retry', target: id, details: { note: '<img src=x onerror=alert(1)>' } });

      await page.click('nav a[href="/audit"]');
      await page.waitForURL(`${dashboard.url}/audit`);
      const rows = page.locator('table.audit > tbody > tr');
      expect(await rows.count()).toBe(3);
      expect(await rows.nth(0).locator('td').nth(1).textContent()).toBe('cli:<b>mallory</b>');
      expect(await page.locator('table.audit b, table.audit img').count()).toBe(0);
      const edit = page.locator('tr[data-action="edit"]');
      expect(await edit.textContent()).toContain('dashboard:otto');
      expect(await edit.locator('del').textContent()).toBe('bad-email');
      expect(await edit.locator('ins').textContent()).toBe('fixed@example.com');
      const retry = page.locator('tr[data-action="retry"]', { hasText: 'dashboard:otto' });
      expect(await retry.locator('td').nth(2).textContent()).toBe('operator');
      expect(await retry.textContent()).toContain('retried: 1');
      expect(await page.locator('[data-retention]').textContent()).toContain('kept 30 days');
      await shot(page, '31-audit');

      // A page at a time, newest first.
      for (let i = 0; i < AUDIT_PAGE_SIZE; i++) await recordAudit(pipeline.runtime.redis, pipeline.runtime.config, { actor: 'cli:bulk', action: 'retry', target: `bulk-${i}` });
      await reloadPage(page);
      expect(await rows.count()).toBe(AUDIT_PAGE_SIZE);
      expect(await page.locator('p.pager').first().textContent()).toContain(`Entries 1–${AUDIT_PAGE_SIZE} of ${AUDIT_PAGE_SIZE + 3}`);
      await page.locator('a[rel="next"]').first().click();
      await page.waitForURL(`${dashboard.url}/audit?offset=${AUDIT_PAGE_SIZE}`);
      expect(await rows.count()).toBe(3);
      expect(await page.locator('tr[data-action="edit"]').count()).toBe(1);
      await shot(page, '32-audit-older');

      await page.goto(`${dashboard.url}/queue-health`);
      expect(await page.locator('dl[data-retention]').textContent()).toContain('Audit entries30 days after they are recorded');
      await shot(page, '33-queue-health-retention');
    } finally {
      await operator.context.close();
    }

    // An admin sets the export schedule from the exports page; it is in the trail too.
    const admin = await loggedIn(dashboard, ADMIN);
    try {
      const { page } = admin;
      await page.goto(`${dashboard.url}/exports`);
      await page.locator('details.schedule-form summary').click();
      await page.fill('input[name="cron"]', '30 1 * * *');
      await page.fill('input[name="tz"]', 'Europe/Paris');
      await page.selectOption('select[name="format"]', 'jsonl');
      await page.click('button[value="set"]');
      await page.waitForURL(new RegExp('/exports\\?notice='));
      expect(await page.locator('.notice.ok').textContent()).toContain('schedule saved: "30 1 * * *" Europe/Paris');
      expect(await page.locator('main table').first().textContent()).toContain('30 1 * * *');
      await page.locator('details.schedule-form summary').click();
      await shot(page, '34-exports-schedule-admin');
      await page.goto(`${dashboard.url}/audit`);
      const set = page.locator('tr[data-action="schedule.set"]');
      expect(await set.textContent()).toContain('dashboard:ada');
      expect(await set.textContent()).toContain('pattern: 30 1 * * *');
    } finally {
      await admin.context.close();
    }
  });
});
