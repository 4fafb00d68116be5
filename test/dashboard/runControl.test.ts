import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { type Browser, type Page } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { importStatus } from '../../src/import/status.js';
import { startWorkers } from '../../src/runtime.js';
import { root } from '../support/cli.js';
import { browserTestRuns, suiteBrowser } from './chromium.js';
import { startDashboard } from '../../src/dashboard/server.js';
import { startTestDashboard, TOKEN } from '../support/dashboard.js';
import { waitFinished } from '../support/imports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

/**
 * Pause, resume and cancel from an import's page, in a real browser (the
 * pattern of browser.test.ts). Screenshots go to test-output/screenshots/.
 */
const SCREENSHOTS = path.join(root, 'test-output', 'screenshots');
const RUN = browserTestRuns("the dashboard's run-control browser test");

let browser: () => Browser;
let pipeline: Pipeline | undefined;

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

describe.runIf(RUN)('pause, resume and cancel from the dashboard', () => {
  browser = suiteBrowser(SCREENSHOTS);
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('pauses, resumes and cancels an import from its page; its unsent rows settle cancelled and go to unprocessed.csv', { timeout: 90_000 }, async () => {
    // No worker yet: the import waits, every row pending, so what the buttons do is all that happens.
    pipeline = await startPipeline({ workers: false });
    const p = pipeline;
    const dashboard = await startTestDashboard(p);
    const rows = Array.from({ length: 30 }, (_, i) => `Mia${i + 1},Berg${i + 1},mia.${i + 1}@example.no,NOR`);
    const file = await p.file('waiting.csv', `FirstName,LastName,EmailAddress,CountryCode\n${rows.join('\n')}\n`);
    const { store, queues, keyring, logger, redis } = p.runtime;
    const result = await importFile({ file }, { store, queues, keyring, logger, redis });
    expect(result.outcome).toBe('enqueued');
    const id = result.importId;

    const context = await browser().newContext({ viewport: { width: 1360, height: 900 }, extraHTTPHeaders: { authorization: `Bearer ${TOKEN}` } });
    const page = await context.newPage();
    try {
      await page.goto(`${dashboard.url}/imports/${id}`);
      expect(await page.locator('[data-run-state]').textContent()).toBe('running');
      await shot(page, '30-import-running-controls');

      await page.click('button[data-action="pause"]');
      expect(await page.locator('.notice.ok').textContent()).toContain('paused');
      expect(await page.locator('[data-run-state]').textContent()).toBe('paused');
      await shot(page, '31-import-paused');

      await page.click('button[data-action="resume"]');
      expect(await page.locator('.notice.ok').textContent()).toContain('resumed');
      expect(await page.locator('[data-run-state]').textContent()).toBe('running');

      // Cancel asks first: dismissed, nothing happens.
      page.once('dialog', (dialog) => void dialog.dismiss());
      await page.click('button[data-action="cancel"]');
      expect(await page.locator('[data-run-state]').textContent()).toBe('running');
      expect((await store.counts(id)).byStatus.cancelled).toBe(0);

      page.once('dialog', (dialog) => void dialog.accept());
      await page.click('button[data-action="cancel"]');
      expect(await page.locator('.notice.ok').textContent()).toContain('cancelled: 30 row(s) never sent settled as cancelled');
      expect(await page.locator('[data-run-state]').textContent()).toBe('cancelling');
      expect(await page.locator('button[data-action="pause"]').count()).toBe(0);

      // A worker writes the results: the import is cancelled, every row in unprocessed.csv, nothing sent.
      startWorkers(p.runtime, { apiUrl: p.sandbox.url, concurrency: 2 });
      const status = await waitFinished(p, id);
      expect(status.counts.cancelled).toBe(30);
      expect(p.sandbox.stats().requests).toBe(0);
      await page.goto(`${dashboard.url}/imports/${id}`);
      expect(await page.locator('[data-run-state]').textContent()).toBe('cancelled');
      expect(await page.locator('[data-field="state"]').first().textContent()).toBe('cancelled');
      expect(await page.locator('a[href$="/unprocessed.csv"]').count()).toBe(1);
      expect(await page.locator('main').textContent()).toContain('No row failed; 30 row(s) were cancelled before they were sent.');
      await shot(page, '32-import-cancelled');
      const download = await page.request.get(`${dashboard.url}/imports/${id}/unprocessed.csv`);
      expect(download.status()).toBe(200);
      expect((await download.text()).trim().split('\n')).toHaveLength(31);
      const unprocessed = await readFile(path.join(status.resultsDir ?? '', 'unprocessed.csv'), 'utf8');
      expect(unprocessed.replace(/^\uFEFF/, '').trim().split('\n')).toEqual(['FirstName,LastName,EmailAddress,CountryCode', ...rows]);
    } finally {
      await context.close();
    }
  });
});

describe('pause, resume and cancel over HTTP', () => {
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('refuse a session\'s POST without its form token or from another origin (403), changing nothing', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const p = pipeline;
    const dashboard = await startTestDashboard(p);
    const { store, queues, keyring, logger, redis } = p.runtime;
    const result = await importFile({ file: await p.file('x.csv', 'FirstName,LastName\nAna,One\nBen,Two\n') }, { store, queues, keyring, logger, redis });
    const id = result.importId;
    const login = await fetch(`${dashboard.url}/login`, { method: 'POST', redirect: 'manual', body: new URLSearchParams({ token: TOKEN, next: '/' }), headers: { origin: dashboard.url } });
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const page = await (await fetch(`${dashboard.url}/imports/${id}`, { headers: { cookie } })).text();
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page)?.[1] ?? '';
    expect(csrf).not.toBe('');
    const post = (action: string, form: Record<string, string>, origin = dashboard.url) =>
      fetch(`${dashboard.url}/imports/${id}/${action}`, { method: 'POST', redirect: 'manual', body: new URLSearchParams(form), headers: { cookie, origin } });
    for (const action of ['cancel', 'pause', 'resume']) {
      expect((await post(action, {})).status).toBe(403);
      expect((await post(action, { _csrf: 'forged' })).status).toBe(403);
      expect((await post(action, { _csrf: csrf }, 'https://evil.example')).status).toBe(403);
    }
    expect((await store.counts(id)).byStatus.cancelled).toBe(0);
    expect((await importStatusOf(id))?.runState).toBe('running');
    const ok = await post('cancel', { _csrf: csrf });
    expect(ok.status).toBe(303);
    expect((await store.counts(id)).byStatus.cancelled).toBe(2);
  });
});

async function importStatusOf(id: string) {
  return pipeline ? importStatus(pipeline.runtime.store, id) : undefined;
}

describe('pause, resume and cancel by role', () => {
  afterEach(async () => {
    await pipeline?.close();
    pipeline = undefined;
  });

  it('a viewer is refused (403) and nothing changes; an operator pauses and cancels', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const p = pipeline;
    const dashboard = await startDashboard({
      runtime: p.runtime,
      host: '127.0.0.1',
      port: 0,
      tokens: [
        { name: 'vera', role: 'viewer', token: 'viewer-token-0123456789' },
        { name: 'otto', role: 'operator', token: 'operator-token-0123456789' },
      ],
    });
    p.runtime.adopt(() => dashboard.close());
    const { store, queues, keyring, logger, redis } = p.runtime;
    const result = await importFile({ file: await p.file('roles.csv', 'FirstName,LastName\nAna,One\n') }, { store, queues, keyring, logger, redis });
    const id = result.importId;
    const post = (action: string, token: string) => fetch(`${dashboard.url}/imports/${id}/${action}`, { method: 'POST', redirect: 'manual', headers: { authorization: `Bearer ${token}` } });
    for (const action of ['pause', 'cancel']) expect((await post(action, 'viewer-token-0123456789')).status).toBe(403);
    expect((await importStatusOf(id))?.runState).toBe('running');
    expect((await post('pause', 'operator-token-0123456789')).status).toBe(303);
    expect((await importStatusOf(id))?.runState).toBe('paused');
    expect((await post('resume', 'viewer-token-0123456789')).status).toBe(403);
    expect((await post('cancel', 'operator-token-0123456789')).status).toBe(303);
    expect((await store.counts(id)).byStatus.cancelled).toBe(1);
  });
});
