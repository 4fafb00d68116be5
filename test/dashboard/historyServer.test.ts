/**
 * The History page, the search page and the activity charts over real HTTP:
 * behind the token, every text escaped (a hostile file name, a hostile
 * search), and a card number taken out of the address before anything is
 * searched.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startTestDashboard, TOKEN } from '../support/dashboard.js';
import { importAndFinish } from '../support/imports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const auth = { authorization: `Bearer ${TOKEN}` };

describe('history and search over HTTP', () => {
  it('needs the token, escapes what it shows, and never searches or echoes a card number', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const hostile = '<img src=x onerror=alert(1)>';
    const status = await importAndFinish(pipeline, await pipeline.file('evil"<b>.csv', `FirstName,LastName,EmailAddress\n${hostile},Smith,h@example.com\n`));

    for (const route of ['/history', '/find?q=smith', '/api/history']) {
      const response = await fetch(`${dashboard.url}${route}`, { redirect: 'manual' });
      expect(response.status, route).toBe(401);
      await response.body?.cancel();
    }

    const history = await (await fetch(`${dashboard.url}/history`, { headers: auth })).text();
    expect(history).toContain('evil&quot;&lt;b&gt;.csv');
    expect(history).not.toContain('<b>');
    expect(history).toContain(`data-import="${status.importId}" data-state="finished"`);
    const api = (await (await fetch(`${dashboard.url}/api/history`, { headers: auth })).json()) as { imports: Array<{ importId: string; state: string }>; nextOffset: number | null };
    expect(api.imports.map((e) => [e.importId, e.state])).toEqual([[status.importId, 'finished']]);
    expect(api.nextOffset).toBeNull();

    // A hostile search text, and a hostile name found by it: both escaped.
    const found = await (await fetch(`${dashboard.url}/find?q=${encodeURIComponent(hostile)}`, { headers: auth })).text();
    expect(found).toContain('1 row(s) match');
    expect(found).toContain('&lt;img src=x onerror=alert(1)&gt;');
    expect(found).not.toContain(hostile);
    const missing = await (await fetch(`${dashboard.url}/find?q=${encodeURIComponent('<script>x</script>')}`, { headers: auth })).text();
    expect(missing).toContain('No rows match "&lt;script&gt;x&lt;/script&gt;"');
    expect(missing).not.toContain('<script>x');

    // A card number: out of the address at once, masked; nothing searched.
    const card = await fetch(`${dashboard.url}/find?q=4111-1111-1111-1111`, { headers: auth, redirect: 'manual' });
    expect(card.status).toBe(303);
    const location = card.headers.get('location') ?? '';
    expect(location).not.toMatch(/1111.*1111.*1111/);
    expect(decodeURIComponent(location)).toContain('************1111');
    const page = await (await fetch(`${dashboard.url}${location}`, { headers: auth })).text();
    expect(page).toContain('looks like a card number: card data is never searched');
    expect(page).not.toMatch(/4111/);

    // The import's page draws its charts as inline SVG.
    const importPage = await (await fetch(`${dashboard.url}/imports/${status.importId}`, { headers: auth })).text();
    expect(importPage).toMatch(/<svg [^>]*data-chart="rows" data-points="\d+"/);
    expect(importPage).toMatch(/<svg [^>]*data-chart="429s"/);
  });
});
