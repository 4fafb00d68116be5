/**
 * Roles over HTTP: SUBSYNC_DASHBOARD_TOKENS' viewer, operator and admin
 * against every state-changing route, and the audit trail each action
 * leaves. Real Redis, the sandbox over HTTP, a real dashboard on 127.0.0.1.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { listAudit } from '../../src/audit/trail.js';
import { requiredRole, roleAllows } from '../../src/dashboard/auth.js';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { listSchedules } from '../../src/export/schedule.js';
import { TOKEN } from '../support/dashboard.js';
import { importAndFinish } from '../support/imports.js';
import { redisText, startPipeline, type Pipeline } from '../support/pipeline.js';

const VIEWER = 'viewer-token-0123456789';
const OPERATOR = 'operator-token-0123456789';
const ADMIN = 'admin-token-0123456789ab';
const TOKENS = [
  { name: 'vera', role: 'viewer' as const, token: VIEWER },
  { name: 'otto', role: 'operator' as const, token: OPERATOR },
  { name: 'ada', role: 'admin' as const, token: ADMIN },
];

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

async function startWithRoles(p: Pipeline): Promise<Dashboard> {
  const dashboard = await startDashboard({ runtime: p.runtime, host: '127.0.0.1', port: 0, token: TOKEN, tokens: TOKENS });
  p.runtime.adopt(() => dashboard.close());
  return dashboard;
}

/** A request as a script makes it: the bearer token, the dashboard's own Origin on a POST. */
async function as(dashboard: Dashboard, token: string, method: 'GET' | 'POST', route: string, form?: Record<string, string>, accept = 'text/plain') {
  const response = await fetch(`${dashboard.url}${route}`, {
    method,
    redirect: 'manual',
    headers: { authorization: `Bearer ${token}`, accept, ...(method === 'POST' ? { origin: dashboard.url } : {}) },
    ...(form ? { body: new URLSearchParams(form) } : {}),
  });
  return { status: response.status, location: response.headers.get('location') ?? '', text: await response.text() };
}

describe('dashboard roles', () => {
  it('a viewer reads every page and changes nothing: each state-changing route answers 403, saying why', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline();
    const dashboard = await startWithRoles(pipeline);
    const status = await importAndFinish(pipeline, await pipeline.file('missing.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n999992,bad-email\n'));
    const id = status.importId;
    for (const route of ['/', `/imports/${id}`, `/imports/${id}/rows/1`, '/exports', '/queue-health', '/audit', '/api/imports', '/api/audit', '/queues']) {
      const answer = await as(dashboard, VIEWER, 'GET', route, undefined, 'text/html');
      expect(answer.status, route).toBe(200);
    }
    const page = await as(dashboard, VIEWER, 'GET', '/', undefined, 'text/html');
    expect(page.text).toContain('vera (viewer)');

    const refused: Array<{ route: string; form: Record<string, string>; needs: string }> = [
      { route: `/imports/${id}/retry`, form: { row: '1' }, needs: 'operator' },
      { route: `/imports/${id}/retry`, form: { action: 'all' }, needs: 'operator' },
      { route: `/imports/${id}/rows/2`, form: { 'cell.1': 'fixed@example.com' }, needs: 'operator' },
      { route: '/exports/schedule', form: { action: 'set', cron: '0 2 * * *', tz: 'UTC' }, needs: 'admin' },
      // A route nobody declared a role for: closed to all but admins.
      { route: '/no-such-route', form: {}, needs: 'admin' },
    ];
    for (const { route, form, needs } of refused) {
      const answer = await as(dashboard, VIEWER, 'POST', route, form);
      expect(answer.status, route).toBe(403);
      expect(answer.text, route).toBe(`vera has the viewer role, and this needs ${needs}: nothing was changed (roles: SUBSYNC_DASHBOARD_TOKENS)\n`);
    }
    // A browser gets the page, escaped like every other.
    const html = await as(dashboard, VIEWER, 'POST', `/imports/${id}/retry`, { row: '1' }, 'text/html');
    expect(html.status).toBe(403);
    expect(html.text).toContain('<p class="notice error" data-refused>vera has the viewer role, and this needs operator');

    // Nothing changed: the rows are as they were, no schedule, nothing in the audit trail.
    expect((await pipeline.runtime.store.getRow(id, 1))?.status).toBe('failed');
    expect((await pipeline.runtime.store.getRow(id, 2))?.status).toBe('invalid');
    expect(await listSchedules(pipeline.runtime.queues.control)).toEqual([]);
    expect((await listAudit(pipeline.runtime.redis, pipeline.runtime.config, { limit: 10 })).total).toBe(0);
    // Logging in (as someone else) and out is for everyone.
    expect((await as(dashboard, VIEWER, 'POST', '/login', { token: OPERATOR, next: '/' })).status).toBe(303);
    expect((await as(dashboard, VIEWER, 'POST', '/logout', {})).status).toBe(303);
  });

  it('an operator retries and edits, each kept in the audit trail with who, what and the edit\'s before and after masked; schedules are an admin\'s', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline();
    const dashboard = await startWithRoles(pipeline);
    const file = await pipeline.file('people.csv', ['FirstName,LastName,EmailAddress,Password', 'Ann,Lee,ann@,Sekr1t-Passw0rd', 'Bo,Ray,bo@example.com,An0ther-Passw0rd'].join('\n'));
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ invalid: 1, created: 1 });
    const id = status.importId;

    const edit = await as(dashboard, OPERATOR, 'POST', `/imports/${id}/rows/1`, { 'cell.2': 'ann@example.com', 'card.Password': 'Typed-N3w-Passw0rd' });
    expect(edit.status).toBe(303);
    expect(new URL(edit.location, dashboard.url).searchParams.get('notice')).toContain('row 1 saved and queued again');
    const retry = await as(dashboard, OPERATOR, 'POST', `/imports/${id}/retry`, { action: 'all' });
    expect(retry.status).toBe(303);
    const schedule = await as(dashboard, OPERATOR, 'POST', '/exports/schedule', { action: 'set', cron: '0 2 * * *', tz: 'UTC' });
    expect(schedule.status).toBe(403);
    expect(schedule.text).toContain('otto has the operator role, and this needs admin');

    const saved = await as(dashboard, ADMIN, 'POST', '/exports/schedule', { action: 'set', cron: '30 1 * * *', tz: 'Europe/Paris', format: 'jsonl' });
    expect(saved.status).toBe(303);
    expect((await listSchedules(pipeline.runtime.queues.control)).map((s) => [s.pattern, s.tz, s.request.format])).toEqual([['30 1 * * *', 'Europe/Paris', 'jsonl']]);
    // The single SUBSYNC_DASHBOARD_TOKEN is the admin it always was.
    expect((await as(dashboard, TOKEN, 'POST', '/exports/schedule', { action: 'remove' })).status).toBe(303);

    const { entries } = await listAudit(pipeline.runtime.redis, pipeline.runtime.config, { limit: 10 });
    expect(entries.map((e) => [e.actor, e.role, e.action, e.target])).toEqual([
      ['dashboard:admin', 'admin', 'schedule.remove', 'subsync-export'],
      ['dashboard:ada', 'admin', 'schedule.set', 'subsync-export'],
      ['dashboard:otto', 'operator', 'retry', id],
      ['dashboard:otto', 'operator', 'edit', `${id}/1`],
    ]);
    const edited = entries[3];
    expect(edited?.details).toMatchObject({ changes: { EmailAddress: { before: 'ann@', after: 'ann@example.com' } }, passwordEntered: true, cardNumberEntered: false });
    expect(entries[1]?.details).toMatchObject({ pattern: '30 1 * * *', tz: 'Europe/Paris', format: 'jsonl' });
    expect(entries[2]?.details).toMatchObject({ scope: 'all' });

    // The audit page shows them, every value escaped; no password anywhere in Redis.
    const auditPage = await as(dashboard, VIEWER, 'GET', '/audit', undefined, 'text/html');
    expect(auditPage.text).toContain('dashboard:otto');
    expect(auditPage.text).toContain('<del>ann@</del> → <ins>ann@example.com</ins>');
    expect(auditPage.text).toContain('kept 30 days');
    const stored = await redisText(pipeline.runtime.redis, pipeline.prefix);
    for (const password of ['Sekr1t-Passw0rd', 'An0ther-Passw0rd', 'Typed-N3w-Passw0rd']) {
      expect(stored).not.toContain(password);
      expect(auditPage.text).not.toContain(password);
    }
  });

  it('logs a named user in with the form; the session is that user, read afresh on every request', { timeout: 30_000 }, async () => {
    pipeline = await startPipeline({ workers: false });
    const dashboard = await startWithRoles(pipeline);
    const login = await fetch(`${dashboard.url}/login`, { method: 'POST', redirect: 'manual', headers: { origin: dashboard.url }, body: new URLSearchParams({ token: OPERATOR, next: '/audit' }) });
    expect(login.status).toBe(303);
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const page = await fetch(`${dashboard.url}/audit`, { headers: { cookie } });
    expect(await page.text()).toContain('otto (operator)');
    // Redis holds the user's name, never the cookie or a token.
    const stored = await redisText(pipeline.runtime.redis, pipeline.prefix);
    expect(stored).toContain('user:otto');
    expect(stored).not.toContain(OPERATOR);
    expect(stored).not.toContain(cookie.split('=')[1] ?? 'no cookie');
  });

  it('declares a role per route: undeclared reads need a viewer, anything else an admin', () => {
    expect(requiredRole('GET', undefined)).toBe('viewer');
    expect(requiredRole('HEAD', undefined)).toBe('viewer');
    expect(requiredRole('POST', undefined)).toBe('admin');
    expect(requiredRole('DELETE', undefined)).toBe('admin');
    expect(requiredRole('POST', 'operator')).toBe('operator');
    expect(roleAllows('viewer', 'operator')).toBe(false);
    expect(roleAllows('operator', 'operator')).toBe(true);
    expect(roleAllows('operator', 'admin')).toBe(false);
    expect(roleAllows('admin', 'viewer')).toBe(true);
  });
});
