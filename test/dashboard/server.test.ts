import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { importStatus } from '../../src/import/status.js';
import { afterEach, describe, expect, it } from 'vitest';
import { DashboardNeedsTokenError, safeNext } from '../../src/dashboard/auth.js';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { startTestDashboard, TOKEN } from '../support/dashboard.js';
import { importAndFinish, SIGNUPS_CSV, waitFinished } from '../support/imports.js';
import { rawRequest } from '../support/http.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/** A browser-like HTTP client: keeps the session cookie, sends the dashboard's own Origin on POSTs unless told otherwise. */
function client(dashboard: Dashboard) {
  let cookie: string | undefined;
  const origin = dashboard.url;
  async function call(method: 'GET' | 'POST' | 'PUT', route: string, options: { form?: Record<string, string | string[]>; headers?: Record<string, string> } = {}): Promise<Answer> {
    const body = options.form === undefined ? undefined : new URLSearchParams(Object.entries(options.form).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x): [string, string] => [k, x])));
    const response = await fetch(`${dashboard.url}${route}`, {
      method,
      redirect: 'manual',
      body,
      headers: {
        ...(cookie ? { cookie } : {}),
        ...(method !== 'GET' ? { origin } : {}),
        ...options.headers,
      },
    });
    const set = response.headers.get('set-cookie');
    if (set) cookie = set.split(';')[0];
    return { status: response.status, headers: response.headers, text: await response.text() };
  }
  return {
    get: (route: string, headers?: Record<string, string>) => call('GET', route, { headers }),
    post: (route: string, form: Record<string, string | string[]>, headers?: Record<string, string>) => call('POST', route, { form, headers }),
    put: (route: string, headers?: Record<string, string>) => call('PUT', route, { headers }),
    cookie: () => cookie,
    setCookie: (value: string | undefined) => {
      cookie = value;
    },
    async csrf(route: string): Promise<string> {
      const page = await call('GET', route);
      const token = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1];
      if (!token) throw new Error(`no form token on ${route} (${page.status})`);
      return token;
    },
    async login(token = TOKEN): Promise<Answer> {
      return call('POST', '/login', { form: { token, next: '/' } });
    },
  };
}

/** The notice a POST's redirect carries. */
const noticeOf = (answer: Answer): string => new URL(answer.headers.get('location') ?? '/', 'http://x').searchParams.get('notice') ?? '';

const bearer = { authorization: `Bearer ${TOKEN}` };
const customersFile = (p: Pipeline, rows: string[], name = 'customers.csv') => p.file(name, ['FirstName,LastName,EmailAddress,Company', ...rows].join('\n'));

describe('dashboard: authentication', () => {
  it('answers 401 on every route without the token, the login form and its stylesheet excepted', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const http = client(dashboard);
    for (const route of ['/', '/imports/abc', '/imports/abc/rows/1', '/imports/abc/results.csv', '/imports/abc/errors.csv', '/api/imports', '/exports', '/exports/customers-x.csv', '/queue-health', '/api/queue-health', '/metrics', '/queues', '/queues/api/queues', '/assets/dashboard.js', '/no-such-page']) {
      const answer = await http.get(route);
      expect(answer.status, route).toBe(401);
      expect(answer.headers.get('www-authenticate'), route).toBe('Bearer realm="subsync dashboard"');
      expect(answer.text, route).not.toContain('subsync-rows');
    }
    for (const route of ['/imports/abc/retry', '/imports/abc/rows/1', '/logout']) expect((await http.post(route, {})).status, route).toBe(401);
    // A browser asking for a page gets the login form with its 401.
    const page = await http.get('/imports/abc?offset=100', { accept: 'text/html' });
    expect(page.status).toBe(401);
    expect(page.text).toContain('<form method="post" action="/login"');
    expect(page.text).toContain('name="next" value="/imports/abc?offset=100"');
    expect((await http.get('/login')).status).toBe(200);
    expect((await http.get('/assets/dashboard.css')).status).toBe(200);

    expect((await http.get('/', { authorization: 'Bearer wrong-token' })).status).toBe(401);
    expect((await http.get('/', { authorization: `Basic ${TOKEN}` })).status).toBe(401);
    for (const route of ['/', '/api/imports', '/exports', '/queue-health', '/metrics', '/queues', '/assets/dashboard.js']) {
      expect((await http.get(route, bearer)).status, route).toBe(200);
    }
    expect(http.cookie()).toBeUndefined();
  });

  it('logs in with the token into an HttpOnly SameSite=Strict session cookie that only this token signs', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const http = client(dashboard);
    const wrong = await http.login('guess');
    expect(wrong.status).toBe(401);
    expect(wrong.text).toContain('not the dashboard token');
    expect(http.cookie()).toBeUndefined();

    const ok = await http.post('/login', { token: TOKEN, next: '/exports' });
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toBe('/exports');
    const set = ok.headers.get('set-cookie') ?? '';
    expect(set).toMatch(/^subsync_session=[\w-]+\.[\w-]+;/);
    expect(set).toContain('HttpOnly');
    expect(set).toContain('SameSite=Strict');
    expect(set).toContain('Path=/');
    expect(set).not.toContain(TOKEN);
    expect((await http.get('/')).status).toBe(200);
    expect((await http.get('/metrics')).status).toBe(200);

    // A session cookie altered, or signed for another token, is no session.
    const good = http.cookie() ?? '';
    http.setCookie(`${good.slice(0, -2)}xx`);
    expect((await http.get('/')).status).toBe(401);
    const other = await startTestDashboard(pipeline, 'another-token');
    const otherHttp = client(other);
    await otherHttp.login('another-token');
    http.setCookie(otherHttp.cookie());
    expect((await http.get('/')).status).toBe(401);

    // Only local paths to go back to after logging in.
    http.setCookie(undefined);
    expect((await http.post('/login', { token: TOKEN, next: '//evil.example/x' })).headers.get('location')).toBe('/');
    expect((await http.post('/login', { token: TOKEN, next: 'https://evil.example/' })).headers.get('location')).toBe('/');

    const csrf = await http.csrf('/');
    const out = await http.post('/logout', { _csrf: csrf });
    expect(out.status).toBe(303);
    expect(out.headers.get('set-cookie')).toMatch(/subsync_session=;/);
  });

  it('answers only to localhost names when bound to 127.0.0.1 (no DNS rebinding)', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const port = new URL(dashboard.url).port;
    // fetch will not send another Host: a raw request does.
    expect((await rawRequest(`${dashboard.url}/`, { headers: { ...bearer, host: `evil.example:${port}` } })).status).toBe(421);
    expect((await rawRequest(`${dashboard.url}/`, { headers: { ...bearer, host: `localhost:${port}` } })).status).toBe(200);
    expect((await rawRequest(`${dashboard.url}/`, { headers: { ...bearer, host: `[::1]:${port}` } })).status).toBe(200);
    expect((await rawRequest(`${dashboard.url}/`, { headers: { ...bearer, host: `127.0.0.1:${port}` } })).status).toBe(200);
  });
});

describe('dashboard: forms against cross-site requests', () => {
  it('needs the session\'s form token and a same-site Origin on every POST; a bearer client needs neither token nor cookie', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const status = await importAndFinish(pipeline, await customersFile(pipeline, ['Ann,Lee,ann@,', 'Bo,Ek,bo@example.se,']));
    const route = `/imports/${status.importId}/retry`;
    const http = client(dashboard);
    await http.login();
    const csrf = await http.csrf(`/imports/${status.importId}`);

    expect((await http.post(route, { action: 'all' })).status).toBe(403);
    expect((await http.post(route, { action: 'all', _csrf: 'forged' })).status).toBe(403);
    expect((await http.post(route, { action: 'all', _csrf: csrf }, { origin: 'https://evil.example' })).status).toBe(403);
    expect((await http.post(route, { action: 'all', _csrf: csrf }, { origin: 'null' })).status).toBe(403);
    expect((await http.post(route, { action: 'all', _csrf: csrf }, { origin: '', 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    // Another session's token is not this one's.
    const other = client(dashboard);
    await other.login();
    expect((await other.post(route, { action: 'all', _csrf: csrf })).status).toBe(403);

    const ok = await http.post(route, { action: 'all', _csrf: csrf });
    expect(ok.status).toBe(303);
    expect(noticeOf(ok)).toContain('no row retried');

    const api = client(dashboard);
    expect((await api.post(route, { action: 'all' }, bearer)).status).toBe(303);
    expect((await api.post(route, { action: 'all' }, { ...bearer, origin: 'https://evil.example' })).status).toBe(403);
    // bull-board's API: guarded by the Origin check and the cookie.
    expect((await http.put('/queues/api/queues/subsync-control/pause', { origin: 'https://evil.example' })).status).toBe(403);
  });

  it('without a token, still hands out a session cookie and checks the form token', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline, null);
    const status = await importAndFinish(pipeline, await customersFile(pipeline, ['Ann,Lee,ann@,']));
    const http = client(dashboard);
    const page = await http.get(`/imports/${status.importId}`);
    expect(page.status).toBe(200);
    expect(page.text).not.toContain('Log out');
    expect(http.cookie()).toMatch(/^subsync_session=/);
    expect((await http.post(`/imports/${status.importId}/retry`, { action: 'all' })).status).toBe(403);
    const csrf = await http.csrf(`/imports/${status.importId}`);
    expect((await http.post(`/imports/${status.importId}/retry`, { action: 'all', _csrf: csrf })).status).toBe(303);
    expect((await http.get('/login')).status).toBe(303);
  });
});

describe('dashboard: pages', () => {
  it('escapes every value from the file, the API and the URL', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const file = await customersFile(pipeline, ['<script>alert(1)</script>,"O\'Neil ""&"" Co",<b>@x,<img src=x onerror=alert(2)>', 'Ok,Fine,ok@example.com,"=HYPERLINK(""http://evil.example"",""x"")"'], '<b onmouseover=alert(3)>odd.csv');
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ invalid: 1, created: 1 });
    const http = client(dashboard);
    await http.login();
    for (const route of ['/', `/imports/${status.importId}`, `/imports/${status.importId}/rows/1`]) {
      const page = await http.get(route);
      expect(page.status, route).toBe(200);
      expect(page.text, route).not.toMatch(/<script>alert|<img src=x|<b>@x|<b onmouseover/);
      expect(page.text, route).toContain('&lt;b onmouseover=alert(3)&gt;odd.csv');
    }
    const rows = await http.get(`/imports/${status.importId}`);
    expect(rows.text).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(rows.text).toContain('&quot;&lt;b&gt;@x&quot; is not an email address');
    expect(rows.text).toContain('O&#39;Neil &quot;&amp;&quot; Co');
    const form = await http.get(`/imports/${status.importId}/rows/1`);
    expect(form.text).toContain('value="&lt;img src=x onerror=alert(2)&gt;"');
    const missing = await http.get('/imports/%3Cscript%3E');
    expect(missing.status).toBe(400);
    expect(missing.text).not.toContain('<script>');
    const notFound = await http.get('/x/%3Cscript%3Ealert(1)%3C%2Fscript%3E');
    expect(notFound.status).toBe(404);
    expect(notFound.text).not.toContain('<script>alert');
    expect(rows.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(rows.headers.get('cache-control')).toBe('no-store');
    expect(rows.headers.get('x-frame-options')).toBe('DENY');
  });

  it('downloads results.csv and errors.csv with every cell quoted and formulas escaped, as the files on disk are', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const status = await importAndFinish(pipeline, await customersFile(pipeline, [
      'Ann,Lee,ann@example.com,"=HYPERLINK(""http://evil.example"",""x"")"',
      '+33 6 12,-Lee,bad@,@SUM(A1)',
    ]));
    const http = client(dashboard);
    const results = await http.get(`/imports/${status.importId}/results.csv`, bearer);
    expect(results.status).toBe(200);
    expect(results.headers.get('content-type')).toContain('text/csv');
    expect(results.headers.get('content-disposition')).toBe(`attachment; filename="${status.importId}-results.csv"`);
    const lines = results.text.trimEnd().split('\n');
    expect(lines[0]).toBe('"FirstName","LastName","EmailAddress","Company","_row","_status","_customerId","_subscriptionId","_paymentMethodKey","_attempts","_error"');
    expect(lines[1]).toMatch(/^"Ann","Lee","ann@example.com","'=HYPERLINK\(""http:\/\/evil.example"",""x""\)","1","created","\d+","","","1",""$/);
    const downloaded = parse(results.text) as string[][];
    expect(downloaded[2]?.slice(0, 4)).toEqual(["'+33 6 12", "'-Lee", 'bad@', "'@SUM(A1)"]);

    const errors = await http.get(`/imports/${status.importId}/errors.csv`, bearer);
    expect(parse(errors.text)).toEqual([
      ['FirstName', 'LastName', 'EmailAddress', 'Company', '_error'],
      ["'+33 6 12", "'-Lee", 'bad@', "'@SUM(A1)", expect.stringContaining('rule: email')],
    ]);
    const onDisk = await readFile(path.join(status.resultsDir ?? '', 'errors.csv'), 'utf8');
    // Escaped on disk too (it is the file operators open); an errors.csv dropped back imports the values as written.
    expect(onDisk).toContain("'+33 6 12,'-Lee,bad@,'@SUM(A1)");
    expect((await http.get('/imports/0123456789abcdef01234567/errors.csv', bearer)).status).toBe(404);
  });

  it('groups the failures by cause, previews what retrying a group sends, and retries it', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const file = await pipeline.file('updates.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n999992,b@\n999993,c@example.com\n');
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ failed: 2, invalid: 1 });
    const id = status.importId;
    const http = client(dashboard);
    await http.login();

    const page = await http.get(`/imports/${id}`);
    expect(page.text).toContain('<h2>Failures by cause</h2>');
    const failedGroup = /<tr data-group="(failed:[0-9a-f]{8})">\s*<td class="num">2<\/td>/.exec(page.text);
    expect(failedGroup).not.toBeNull();
    const code = failedGroup?.[1] ?? '';
    expect(page.text).toMatch(/<tr data-group="invalid:EmailAddress:email">\s*<td class="num">1<\/td>[\s\S]*?fix and import again/);
    expect(page.text).toContain('Customer &lt;n&gt; was not found');

    const preview = await http.get(`/imports/${id}/groups/retry?code=${encodeURIComponent(code)}`);
    expect(preview.text).toMatch(/<dt>Rows it sends again<\/dt><dd>2<\/dd>/);
    expect(preview.text).toMatch(/may create a customer or a subscription<\/dt><dd>0 /);
    // The preview sends and reopens nothing.
    expect((await importStatus(pipeline.runtime.store, id))?.counts.failed).toBe(2);

    const csrf = await http.csrf(`/imports/${id}/groups/retry?code=${encodeURIComponent(code)}`);
    const retried = await http.post(`/imports/${id}/retry`, { _csrf: csrf, action: 'group', code });
    expect(noticeOf(retried)).toBe('retrying 2 row(s): 1, 3');
    const invalid = await http.post(`/imports/${id}/retry`, { _csrf: csrf, action: 'group', code: 'invalid:EmailAddress:email' });
    expect(noticeOf(invalid)).toMatch(/holds invalid rows, which retry never sends/);
  });

  it('retries one row, the rows ticked, or all failed ones, saying which were skipped and why', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const file = await pipeline.file('updates.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n999992,b@\n999993,c@example.com\n');
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ failed: 2, invalid: 1 });
    const id = status.importId;
    const http = client(dashboard);
    await http.login();
    let csrf = await http.csrf(`/imports/${id}`);

    const one = await http.post(`/imports/${id}/retry`, { _csrf: csrf, row: '1' });
    expect(noticeOf(one)).toBe('retrying 1 row(s): 1');
    const afterOne = await waitFinished(pipeline, id, (s) => s.settled);
    expect(afterOne.counts.failed).toBe(2);
    expect((await pipeline.runtime.store.getRow(id, 1))?.attempts).toBe(2);

    csrf = await http.csrf(`/imports/${id}`);
    const selected = await http.post(`/imports/${id}/retry`, { _csrf: csrf, action: 'selected', rows: ['2', '3'] });
    const notice = noticeOf(selected);
    expect(notice).toContain('retrying 1 row(s): 3');
    expect(notice).toContain('row 2 not retried: row 2 is invalid');
    await waitFinished(pipeline, id, (s) => s.settled);

    const all = await http.post(`/imports/${id}/retry`, { _csrf: csrf, action: 'all' });
    expect(noticeOf(all)).toBe('retrying 2 row(s): 1, 3');
    const page = await http.get(`/imports/${id}?${new URL(all.headers.get('location') ?? '', dashboard.url).searchParams.toString()}`);
    expect(page.text).toContain('class="notice ok"');
    expect(page.text).toContain('retrying 2 row(s): 1, 3');
  });

  it('edits a row over HTTP: refusals come back as the form with the rules broken, a fix queues the row', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline);
    const status = await importAndFinish(pipeline, await pipeline.file('signups.csv', SIGNUPS_CSV));
    const id = status.importId;
    const http = client(dashboard);
    await http.login();
    const csrf = await http.csrf(`/imports/${id}/rows/2`);
    const form = await http.get(`/imports/${id}/rows/2`);
    expect(form.text).toContain('name="card.AccountNumber" inputmode="numeric" autocomplete="off" required');
    expect(form.text).not.toContain('name="cell.4"');
    expect(form.text).not.toContain('name="cell.6"');

    const refused = await http.post(`/imports/${id}/rows/2`, { _csrf: csrf, 'cell.2': 'bob@nowhere', 'card.AccountNumber': '5555555555554444', 'card.CVCode': '123' });
    expect(refused.status).toBe(422);
    expect(refused.text).toContain('&quot;bob@nowhere&quot; is not an email address (rule: email)');
    expect(refused.text).not.toContain('5555555555554444');
    expect(refused.text).toContain('value="bob@nowhere"');

    const noCard = await http.post(`/imports/${id}/rows/2`, { _csrf: csrf, 'cell.2': 'bob@example.com' });
    expect(noCard.status).toBe(422);
    expect(noCard.text).toContain('card number is no longer held');

    const succeeded = await http.post(`/imports/${id}/rows/1`, { _csrf: csrf, 'cell.3': 'Lyon' });
    expect(succeeded.status).toBe(409);

    const fixed = await http.post(`/imports/${id}/rows/2`, { _csrf: csrf, 'cell.2': 'bob@example.com', 'card.AccountNumber': '5555555555554444', 'card.CVCode': '123' });
    expect(fixed.status).toBe(303);
    const done = await waitFinished(pipeline, id, (s) => s.counts['signed-up'] === 3);
    expect(done.counts.invalid).toBe(0);
  });

  it('lists exports from the files on disk with their manifests, hands them out, and shows the schedule', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const dir = path.join(pipeline.dataDir, 'exports');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'customers-2024-05-01T02-00-00Z.csv'), '"CustomerID","FirstName"\n"100001","\'=cmd"\n');
    await writeFile(path.join(dir, 'customers-2024-05-01T02-00-00Z.csv.manifest.json'), JSON.stringify({ count: 1, TotalItemCount: 1, sha256: 'ab12', durationMs: 40, warnings: ['<b>drift</b> at skip 100'] }));
    await writeFile(path.join(dir, 'customers-2024-05-02T02-00-00Z.jsonl.gz'), Buffer.from([0x1f, 0x8b]));
    await writeFile(path.join(dir, '.customers-2024-05-03T02-00-00Z.csv.tmp'), 'partial');
    await writeFile(path.join(pipeline.dataDir, 'secret.txt'), 'secret');
    await pipeline.runtime.queues.control.upsertJobScheduler('nightly-export', { pattern: '0 2 * * *', tz: 'Europe/London' }, { name: 'export', data: { format: 'csv' } });

    const http = client(dashboard);
    const page = await http.get('/exports', bearer);
    expect(page.status).toBe(200);
    expect(page.text).toContain('href="/exports/customers-2024-05-01T02-00-00Z.csv"');
    expect(page.text).toContain('href="/exports/customers-2024-05-02T02-00-00Z.jsonl.gz"');
    expect(page.text).not.toContain('.tmp');
    expect(page.text).toContain('count: 1 · TotalItemCount: 1 · 1 warning(s)');
    expect(page.text).toContain('&lt;b&gt;drift&lt;/b&gt; at skip 100');
    expect(page.text).toContain('nightly-export');
    expect(page.text).toContain('0 2 * * *');
    expect(page.text).toContain('Europe/London');

    const csv = await http.get('/exports/customers-2024-05-01T02-00-00Z.csv', bearer);
    expect(csv.status).toBe(200);
    expect(csv.text).toBe('"CustomerID","FirstName"\n"100001","\'=cmd"\n');
    expect(csv.headers.get('content-disposition')).toBe('attachment; filename="customers-2024-05-01T02-00-00Z.csv"');
    expect((await http.get('/exports/customers-2024-05-01T02-00-00Z.csv.manifest.json', bearer)).status).toBe(200);
    for (const route of ['/exports/..%2Fsecret.txt', '/exports/secret.txt', '/exports/.customers-2024-05-03T02-00-00Z.csv.tmp', '/exports/customers-..%2F..%2Fsecret.csv']) {
      expect((await http.get(route, bearer)).status, route).toBe(404);
    }
  });

  it('shows queue depth, the API budget and recent 429s, and serves them to Prometheus', async () => {
    pipeline = await startPipeline({ config: { rate: 25 } });
    const dashboard = await startTestDashboard(pipeline);
    const status = await importAndFinish(pipeline, await customersFile(pipeline, ['Ann,Lee,ann@example.com,', 'Bo,Ek,bo@,']));
    const { redis, store } = pipeline.runtime;
    await store.addFigures(status.importId, { apiCalls: 0, retries: 0, rateLimited: 3 });
    await redis.set(store.keys.budgetBlockedUntil, String(Date.now() + 60_000), 'PX', 60_000);
    await redis.hset(store.keys.budgetRate, 'r', '17.25');
    await pipeline.runtime.queues.control.add('export', {}, { delay: 3_600_000 });

    const http = client(dashboard);
    const page = await http.get('/queue-health', bearer);
    expect(page.text).toContain('25 requests/s for the whole fleet');
    expect(page.text).toContain('<dt>Learned rate</dt><dd>17.3 requests/s for the whole fleet (learned from 429s)');
    expect(page.text).toMatch(/Blocked<\/dt><dd>until .* \((59|60) s, after a 429\)/);
    expect(page.text).toContain('<dt>429s, recent imports</dt><dd>3 ');
    const json = JSON.parse((await http.get('/api/queue-health', bearer)).text) as { queues: Array<{ name: string; counts: Record<string, number> }>; rateLimited: { recentImports: number } };
    expect(json.queues.find((q) => q.name === 'subsync-control')?.counts.delayed).toBe(1);
    expect(json.rateLimited.recentImports).toBe(3);

    const metrics = await http.get('/metrics', bearer);
    expect(metrics.headers.get('content-type')).toContain('text/plain');
    expect(metrics.text).toContain('subsync_queue_jobs{queue="subsync-control",state="delayed"} 1');
    expect(metrics.text).toContain('subsync_queue_jobs{queue="subsync-rows",state="waiting"} 0');
    expect(metrics.text).toContain('subsync_api_budget_rate 25');
    expect(metrics.text).toContain('subsync_api_budget_learned_rate 17.25');
    expect(metrics.text).toMatch(/subsync_api_budget_blocked_seconds (59|60)(\.\d+)?\n/);
    expect(metrics.text).toContain('subsync_import_rows{kind="customers",status="created"} 1');
    expect(metrics.text).toContain('subsync_import_rows{kind="customers",status="invalid"} 1');
    // One create, and the page that built the customer index the duplicate guard read.
    expect(metrics.text).toContain('subsync_import_api_requests{kind="write"} 1');
    expect(metrics.text).toContain('subsync_import_api_requests{kind="search"} 1');
    // Built from the five seeded customers (the one created since is the index's too, counted at its next read).
    expect(metrics.text).toMatch(/subsync_customer_index_customers 5\n/);
    expect(metrics.text).toMatch(/subsync_customer_index_age_seconds \d/);
    expect(page.text).toContain('<dt>Requests, recent imports</dt><dd>1 searches · 0 reads · 1 writes');
    expect(page.text).toMatch(/<h2>Customer index<\/h2>\s*<dl class="facts">\s*<dt>Customers<\/dt><dd>5 /);
    expect(metrics.text).toContain('# TYPE subsync_rows_settled_total counter');
    expect(metrics.text).toContain('# TYPE subsync_api_request_duration_seconds histogram');
  });
});

describe('dashboard: hardening', () => {
  it('answers only to allowed Host names on any address: localhost names, the bound address, SUBSYNC_DASHBOARD_HOSTS', async () => {
    pipeline = await startPipeline({ workers: false });
    // Every interface: the case docker-compose runs.
    const wide = await startDashboard({ runtime: pipeline.runtime, host: '0.0.0.0', port: 0, token: TOKEN, hosts: ['subsync.internal'] });
    pipeline.runtime.adopt(() => wide.close());
    const port = new URL(wide.url).port;
    const local = `http://127.0.0.1:${port}`;
    const hostStatus = async (host: string): Promise<number> => (await rawRequest(`${local}/`, { headers: { ...bearer, host } })).status;
    expect(await hostStatus(`evil.example:${port}`)).toBe(421);
    expect(await hostStatus('evil.example')).toBe(421);
    expect(await hostStatus(`subsync.internal.evil.example:${port}`)).toBe(421);
    expect(await hostStatus(`subsync.internal:${port}`)).toBe(200);
    expect(await hostStatus(`SUBSYNC.INTERNAL:${port}`)).toBe(200);
    expect(await hostStatus(`localhost:${port}`)).toBe(200);
    expect(await hostStatus(`127.0.0.1:${port}`)).toBe(200);
    // The refusal comes before authentication: the login form is not served to a rebound name either.
    expect((await rawRequest(`${local}/login`, { headers: { host: `evil.example:${port}` } })).status).toBe(421);

    // On a named address: that address too, and still nothing else.
    const named = await startDashboard({ runtime: pipeline.runtime, host: '127.0.0.2', port: 0, token: TOKEN });
    pipeline.runtime.adopt(() => named.close());
    expect((await rawRequest(`${named.url}/`, { headers: { ...bearer, host: new URL(named.url).host } })).status).toBe(200);
    expect((await rawRequest(`${named.url}/`, { headers: { ...bearer, host: 'rebound.example' } })).status).toBe(421);
  });

  it('refuses to listen beyond loopback without a token', async () => {
    pipeline = await startPipeline({ workers: false });
    await expect(startDashboard({ runtime: pipeline.runtime, host: '0.0.0.0', port: 0 })).rejects.toBeInstanceOf(DashboardNeedsTokenError);
    await expect(startDashboard({ runtime: pipeline.runtime, host: '::', port: 0, token: '' })).rejects.toThrow(/needs SUBSYNC_DASHBOARD_TOKEN/);
  });

  it('ends a session on the server at logout and when it expires there, whatever the browser keeps', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const http = client(dashboard);
    await http.login();
    const cookie = http.cookie();
    expect((await http.get('/')).status).toBe(200);
    const keys = await pipeline.runtime.redis.keys(`${pipeline.prefix}:dashboard:session:*`);
    expect(keys).toHaveLength(1);
    const ttl = await pipeline.runtime.redis.ttl(keys[0] ?? '');
    expect(ttl).toBeGreaterThan(11 * 3600);
    expect(ttl).toBeLessThanOrEqual(12 * 3600);
    // The key names a hash of the session, not the cookie.
    expect(keys[0]).not.toContain((cookie ?? '').split('=')[1]?.split('.')[0]);

    const csrf = await http.csrf('/');
    expect((await http.post('/logout', { _csrf: csrf })).status).toBe(303);
    expect(await pipeline.runtime.redis.keys(`${pipeline.prefix}:dashboard:session:*`)).toEqual([]);
    // The cookie as it was before logging out (copied, or kept by a browser): no session any more.
    http.setCookie(cookie);
    expect((await http.get('/')).status).toBe(401);

    // Expiry is the server's: the key gone, the cookie (still within its Max-Age) is refused.
    http.setCookie(undefined);
    await http.login();
    expect((await http.get('/')).status).toBe(200);
    const [second] = await pipeline.runtime.redis.keys(`${pipeline.prefix}:dashboard:session:*`);
    await pipeline.runtime.redis.pexpire(second ?? '', 1);
    await until(async () => ((await pipeline!.runtime.redis.exists(second ?? '')) === 0 ? true : undefined), 'the session key to expire');
    expect((await http.get('/')).status).toBe(401);
  });

  it('throttles wrong tokens: after 5 from one address in a minute, 429 on every token attempt until the window ends', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const http = client(dashboard);
    for (let i = 0; i < 4; i++) expect((await http.login(`guess-${i}`)).status).toBe(401);
    // A wrong bearer token is a guess too.
    expect((await http.get('/', { authorization: 'Bearer guess-4' })).status).toBe(401);
    const blocked = await http.login('guess-5');
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(Number(blocked.headers.get('retry-after'))).toBeLessThanOrEqual(60);
    expect(blocked.text).toMatch(/Too many wrong tokens from this address: try again in \d+ s\./);
    expect(blocked.text).toContain('<form method="post" action="/login"');
    // The right token is no way round it: an answer that differed would tell a guess from the token.
    expect((await http.login()).status).toBe(429);
    expect(http.cookie()).toBeUndefined();
    expect((await http.get('/', bearer)).status).toBe(429);
    const [window] = await pipeline.runtime.redis.keys(`${pipeline.prefix}:dashboard:login-failures:*`);
    expect(await pipeline.runtime.redis.pttl(window ?? '')).toBeLessThanOrEqual(60_000);
    expect(window).not.toContain('127.0.0.1');

    // The window over (its key expired): the token works again.
    await pipeline.runtime.redis.del(window ?? '');
    expect((await http.login()).status).toBe(303);
    expect((await http.get('/')).status).toBe(200);
  });

  it('never redirects off-site after logging in: tabs, backslashes and encoded controls fall back to /', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const http = client(dashboard);
    const offSite = ['/\t/evil.example', '/%09/evil.example', '/\\evil.example', '/%5Cevil.example', '/%2F/evil.example', '//evil.example', '/\n/evil.example', '/%0a/evil.example', '/%00', ' /x', 'javascript:alert(1)', '/é'];
    for (const next of offSite) {
      http.setCookie(undefined);
      const answer = await http.post('/login', { token: TOKEN, next });
      expect(answer.status, JSON.stringify(next)).toBe(303);
      expect(answer.headers.get('location'), JSON.stringify(next)).toBe('/');
    }
    // Logged in, GET /login redirects at once: the same rule.
    expect((await http.get('/login?next=/%09/evil.example')).headers.get('location')).toBe('/');
    expect((await http.get('/login?next=%2F%5C%2Fevil.example')).headers.get('location')).toBe('/');
    expect((await http.get('/login?next=/imports/abc%3Foffset%3D100')).headers.get('location')).toBe('/imports/abc?offset=100');
    http.setCookie(undefined);
    // Not logged in: the form carries only a safe path.
    const form = await http.get('/login?next=/%09/evil.example');
    expect(form.text).toContain('name="next" value="/"');
    expect((await http.post('/login', { token: TOKEN, next: '/exports?page=2' })).headers.get('location')).toBe('/exports?page=2');
  });

  it('keeps every queue read-only in bull-board: no retry, add, clean or pause, whoever asks', async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startTestDashboard(pipeline);
    const http = client(dashboard);
    await http.login();
    const queues = JSON.parse((await http.get('/queues/api/queues')).text) as { queues: Array<{ name: string; readOnlyMode: boolean }> };
    expect(queues.queues.map((q) => [q.name, q.readOnlyMode]).sort()).toEqual([
      ['subsync-control', true],
      ['subsync-rows', true],
    ]);
    const { control } = pipeline.runtime.queues;
    const job = await control.add('export', { format: 'csv', out: '/tmp/elsewhere' }, { delay: 3_600_000 });
    for (const [method, route] of [
      ['PUT', '/queues/api/queues/subsync-control/retry/failed'],
      ['PUT', '/queues/api/queues/subsync-control/promote'],
      ['PUT', '/queues/api/queues/subsync-control/clean/delayed'],
      ['PUT', '/queues/api/queues/subsync-control/pause'],
      ['PUT', '/queues/api/queues/pause'],
      ['POST', '/queues/api/queues/subsync-control/add'],
      ['PUT', `/queues/api/queues/subsync-control/${job.id ?? ''}/promote`],
    ] as const) {
      // Same-site, logged in, and with the bearer token: still refused.
      const answer = await fetch(`${dashboard.url}${route}`, { method, headers: { cookie: http.cookie() ?? '', origin: dashboard.url, ...bearer, 'content-type': 'application/json' }, body: '{"name":"export","data":{"out":"/tmp/x"}}' });
      expect(answer.status, `${method} ${route}`).toBe(403);
      await answer.body?.cancel();
    }
    expect(await control.getJobCounts('delayed', 'waiting')).toEqual({ delayed: 1, waiting: 0 });
    expect(await control.isPaused()).toBe(false);
  });
});

describe('safeNext', () => {
  it('keeps same-origin paths and turns everything else into /', () => {
    for (const kept of ['/', '/imports/abc?offset=100', '/exports/customers-x.csv', '/imports/a%20b']) expect(safeNext(kept), kept).toBe(kept);
    for (const refused of ['/%09/evil.example', '/\t/evil.example', '/%5c%5cevil.example', '/%2f%2fevil.example', '/a\\b', '/%E0%A4%A', 'http://evil.example/', '', undefined, 42, `/${'a'.repeat(3000)}`]) {
      expect(safeNext(refused), String(refused)).toBe('/');
    }
  });
});
