import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { contentTypeOf, exportPath, listExports, listSchedules } from './exports.js';
import type { IndexReport } from '../customers/report.js';
import { queueHealth, QUEUE_STATES } from './health.js';
import { rollbackMessage } from '../store/rollback.js';
import { FAILED_RETENTION_SECONDS } from '../queue/queues.js';
import { html, type Html } from './html.js';
import { actorOf, csrfOf, noticeOf, redirectWithNotice, sendPage, type DashboardContext } from './context.js';
import { AUDIT_ACTIONS, recordAudit } from '../audit/trail.js';
import { EXPORT_SCHEDULER_ID, listSchedules as exportSchedules, removeSchedule, ScheduleError, scheduleExport } from '../export/schedule.js';

/**
 * The schedule form: pattern, zone, format, gzip, keep. Never a folder: the
 * schedule's job writes where its data says, and the dashboard does not
 * choose places on a worker's disk (the command line's --out does).
 */
const ScheduleFormSchema = z.object({
  action: z.enum(['set', 'remove']),
  cron: z.string().trim().max(100).optional(),
  tz: z.string().trim().max(64).optional(),
  format: z.enum(['csv', 'jsonl']).optional(),
  gzip: z.string().optional(),
  keep: z.string().regex(/^\d{0,4}$/).optional(),
});

const iso = (date: Date | undefined): string => (date === undefined ? '—' : `${date.toISOString().replace('T', ' ').slice(0, 19)} UTC`);

function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 ** 2).toFixed(1)} MiB`;
}

/** A manifest's value as text: scalars as they are, lists and objects as JSON. */
function manifestValue(value: unknown): Html | string {
  if (Array.isArray(value) && value.length === 0) return '—';
  // Short names (fields, pruned files) on one line; sentences (warnings) one per line.
  if (Array.isArray(value) && value.every((v) => typeof v === 'string' && v.length <= 40)) return value.join(', ');
  if (Array.isArray(value)) return html`<ul>${value.map((v) => html`<li>${typeof v === 'string' ? v : JSON.stringify(v)}</li>`)}</ul>`;
  return typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value);
}

const TotalSchema = z.union([z.number(), z.object({ atEnd: z.number().nullable() }).transform((t) => t.atEnd)]);

/** The manifest's headline figures: count, TotalItemCount, complete or not, how many warnings (whatever names of these it uses). */
function manifestSummary(manifest: Record<string, unknown>): string {
  const parts: string[] = [];
  if (manifest.count !== undefined) parts.push(`count: ${String(manifest.count)}`);
  const total = TotalSchema.safeParse(manifest.TotalItemCount ?? manifest.totalItemCount);
  if (total.success && total.data !== null) parts.push(`TotalItemCount: ${total.data}`);
  if (manifest.complete === false) parts.push('INCOMPLETE');
  if (typeof manifest.drift === 'object' && manifest.drift !== null) parts.push('drift re-read');
  const warnings = manifest.warnings;
  if (Array.isArray(warnings)) parts.push(`${warnings.length} warning(s)`);
  return parts.join(' · ') || 'manifest';
}

/** The exports page (runs on disk, with manifests and downloads; the schedule) and the queue health page. */
/** What the customer index holds and how current it is, as the queue-health page shows it. */
function indexFacts(index: IndexReport): Html {
  if (!index.present) return html`<p>No customer index yet: <code>subsync index refresh</code> builds one (an import builds it when that is cheaper than searching, and a complete export rebuilds it).</p>`;
  return html`<dl class="facts">
<dt>Customers</dt><dd>${index.customers ?? 0} <span class="hint">(the service's TotalItemCount then: ${index.totalItemCount ?? 0})</span></dd>
<dt>Built</dt><dd>${index.builtAt ?? '—'}</dd>
<dt>Current as of</dt><dd>${index.readToEndFirst ? 'not until its end is read again (Redis came back without some of its writes): the next create reads it' : index.ageSeconds === null || index.ageSeconds === undefined ? 'not current: the end of the listing moved (subsync index refresh --full)' : `${index.currentAt ?? ''} (${index.ageSeconds} s ago)`}</dd>
<dt>Listing</dt><dd>${index.appendOnly ? 'in CustomerID order: new customers are read from its end' : 'not in CustomerID order: only a full refresh makes the index current'}</dd>
<dt>Keys</dt><dd>${(index.fields ?? []).join(', ')} <span class="hint">(memory: <code>subsync index status</code>)</span></dd>
</dl>`;
}

/** Where lifecycle events go: the webhook's origin only (its path may be a credential, as a Slack hook's is). */
function webhookFacts(config: { webhookUrl?: string; webhookSecret?: string; dashboardUrl?: string }): Html {
  if (config.webhookUrl === undefined) return html`<p class="muted" data-webhook>None: SUBSYNC_WEBHOOK_URL is not set.</p>`;
  let origin = '(unreadable URL)';
  try {
    origin = new URL(config.webhookUrl).origin;
  } catch {
    // Validated at start; kept as unreadable rather than shown.
  }
  return html`<dl class="facts" data-webhook>
<dt>Webhook</dt><dd>${origin}/… <span class="hint">(SUBSYNC_WEBHOOK_URL; import.finished, import.paused, import.cancelled, export.finished, export.failed)</span></dd>
<dt>Signed</dt><dd>${config.webhookSecret === undefined ? 'no: SUBSYNC_WEBHOOK_SECRET is not set' : 'yes, X-Subsync-Signature (HMAC-SHA256)'}</dd>
<dt>Links to</dt><dd>${config.dashboardUrl ?? 'none: SUBSYNC_DASHBOARD_URL is not set'}</dd>
</dl>`;
}

export function pageRoutes(app: FastifyInstance, ctx: DashboardContext): void {
  const { runtime } = ctx;

  app.get('/exports', async (request, reply) => {
    const [runs, schedules] = await Promise.all([listExports(runtime.config.dataDir), listSchedules(runtime.queues)]);
    const scheduleTable = schedules.length === 0
      ? html`<p class="muted">No schedule. <code>subsync schedule export --cron "0 2 * * *" --tz Europe/London</code> sets one.</p>`
      : html`<table><thead><tr><th>Scheduler</th><th>Job</th><th>When</th><th>Time zone</th><th>Next run</th><th class="num">Runs so far</th></tr></thead>
<tbody>${schedules.map((s) => html`<tr><td class="mono">${s.key}</td><td>${s.name}</td><td class="mono">${s.when}</td><td>${s.tz ?? 'UTC'}</td><td>${iso(s.next)}</td><td class="num">${s.iterations ?? '—'}</td></tr>`)}</tbody></table>`;
    const runTable = runs.length === 0
      ? html`<p class="muted">No exports yet in <code>${runtime.config.dataDir}/exports</code>. <code>subsync export</code> runs one.</p>`
      : html`<table><thead><tr><th>File</th><th>Written</th><th class="num">Size</th><th>Manifest</th></tr></thead>
<tbody>${runs.map((run) => html`<tr>
<td><a href="/exports/${run.file}" download>${run.file}</a></td>
<td>${iso(run.modifiedAt)}</td><td class="num">${bytes(run.bytes)}</td>
<td>${run.manifest === undefined
    ? html`<span class="muted">${run.manifestFile === undefined ? 'no manifest' : 'manifest unreadable'}</span>`
    : html`<details><summary>${manifestSummary(run.manifest)}</summary>
<table>${Object.entries(run.manifest).map(([key, value]) => html`<tr><th>${key}</th><td class="mono">${manifestValue(value)}</td></tr>`)}</table>
${run.manifestFile ? html`<a href="/exports/${run.manifestFile}" download>${run.manifestFile}</a>` : undefined}</details>`}</td>
</tr>`)}</tbody></table>`;
    const current = (await exportSchedules(runtime.queues.control)).find((s) => s.id === EXPORT_SCHEDULER_ID);
    const format = current?.request.format ?? 'csv';
    const scheduleForm = html`<details class="schedule-form"><summary>Change the schedule (admin)</summary>
<form method="post" action="/exports/schedule">
<input type="hidden" name="_csrf" value="${csrfOf(ctx, request)}">
<label>Cron pattern <input type="text" name="cron" value="${current?.pattern ?? '0 2 * * *'}" required></label>
<label>Time zone <input type="text" name="tz" value="${current?.tz ?? 'UTC'}" required></label>
<label>Format <select name="format">${(['csv', 'jsonl'] as const).map((f) => html`<option value="${f}"${f === format ? html` selected` : undefined}>${f}</option>`)}</select></label>
<label><input type="checkbox" name="gzip" value="1"${current?.request.gzip ? html` checked` : undefined}> gzip</label>
<label>Keep newest <input type="text" name="keep" inputmode="numeric" size="4" placeholder="all" value="${current?.request.keep ?? ''}"></label>
${current?.request.outDir ? html`<p class="hint">Saving here writes to the data dir's exports folder: the schedule's own folder (${current.request.outDir}, set by the command line) is not kept.</p>` : undefined}
<div class="actions"><button type="submit" name="action" value="set" class="primary">Save schedule</button>${current ? html` <button type="submit" name="action" value="remove">Remove schedule</button>` : undefined}</div>
</form></details>`;
    const body = html`<h2>Schedule</h2>${scheduleTable}${scheduleForm}<h2>Recent exports</h2>${runTable}`;
    return sendPage(ctx, request, reply, { title: 'Exports', body, ...noticeOf(request.query) });
  });

  // A schedule change is an admin's: the route declares it, the server's role hook enforces it.
  app.post('/exports/schedule', { config: { role: 'admin' } }, async (request, reply) => {
    const form = ScheduleFormSchema.safeParse(request.body);
    if (!form.success) return redirectWithNotice(reply, '/exports', 'the schedule form was incomplete: nothing changed', 'error');
    const { action, cron, tz, format, gzip, keep } = form.data;
    if (action === 'remove') {
      const removed = await removeSchedule(runtime.queues.control, EXPORT_SCHEDULER_ID);
      if (removed) await recordAudit(runtime.redis, runtime.config, { ...actorOf(request), action: AUDIT_ACTIONS.scheduleRemove, target: EXPORT_SCHEDULER_ID });
      return redirectWithNotice(reply, '/exports', removed ? 'schedule removed (exports already queued still run)' : 'there was no schedule to remove', removed ? 'ok' : 'error');
    }
    let saved;
    try {
      saved = await scheduleExport(runtime.queues.control, {
        pattern: cron ?? '',
        tz: tz || 'UTC',
        request: { format: format ?? 'csv', gzip: gzip !== undefined, ...(keep ? { keep: Math.max(1, Number(keep)) } : {}) },
      });
    } catch (error) {
      if (!(error instanceof ScheduleError)) throw error;
      return redirectWithNotice(reply, '/exports', error.message, 'error');
    }
    await recordAudit(runtime.redis, runtime.config, { ...actorOf(request), action: AUDIT_ACTIONS.scheduleSet, target: saved.id, details: { pattern: saved.pattern, tz: saved.tz, ...saved.request } });
    return redirectWithNotice(reply, '/exports', `schedule saved: "${saved.pattern}" ${saved.tz}, next ${iso(saved.next === undefined ? undefined : new Date(saved.next))}`);
  });

  app.get('/exports/:name', async (request, reply) => {
    const { name } = z.object({ name: z.string() }).parse(request.params);
    const file = exportPath(runtime.config.dataDir, name);
    const info = file === undefined ? undefined : await stat(file).catch(() => undefined);
    if (file === undefined || !info?.isFile()) return reply.code(404).type('text/plain').send(`no export ${name}\n`);
    // Export files are written escaped and quoted by the export itself: handed out as they are.
    return reply.type(contentTypeOf(name)).header('content-disposition', `attachment; filename="${name}"`).send(createReadStream(file));
  });

  app.get('/api/queue-health', async () => queueHealth(runtime));

  app.get('/queue-health', async (request, reply) => {
    const health = await queueHealth(runtime);
    const now = Date.now();
    const body = html`<h2>Queues</h2>
<table><thead><tr><th>Queue</th>${QUEUE_STATES.map((s) => html`<th class="num">${s}</th>`)}<th>Paused</th></tr></thead>
<tbody>${health.queues.map((q) => html`<tr><td class="mono">${q.name}</td>${QUEUE_STATES.map((s) => html`<td class="num">${q.counts[s]}</td>`)}<td>${q.paused ? 'paused' : 'no'}</td></tr>`)}</tbody></table>
<p class="hint">Every job, its data and its history: <a href="/queues">bull-board</a> (rows queue read-only there: retry rows from the imports pages, which reopen their ledger entries).</p>
<h2>API budget</h2>
<dl class="facts">
<dt>Configured rate</dt><dd>${health.budget.rate === undefined ? 'none (SUBSYNC_RATE unset): the fleet learns one from 429s' : `${health.budget.rate} requests/s for the whole fleet`}</dd>
<dt>Learned rate</dt><dd>${health.budget.learned === undefined ? 'none: no 429 lately, not paced by it' : `${Number(health.budget.learned.toFixed(1))} requests/s for the whole fleet (learned from 429s)`}</dd>
<dt>Blocked</dt><dd>${health.budget.blockedUntil === undefined ? 'no' : `until ${iso(new Date(health.budget.blockedUntil))} (${Math.ceil((health.budget.blockedUntil - now) / 1000)} s, after a 429)`}</dd>
<dt>429s, recent imports</dt><dd>${health.rateLimited.recentImports} <span class="hint">(summed over the ${health.rateLimited.imports} most recent imports)</span></dd>
<dt>429s, this process</dt><dd>${health.rateLimited.thisProcess} <span class="hint">(since it started; <code>subsync_api_rate_limited_total</code>)</span></dd>
<dt>Requests, recent imports</dt><dd>${health.requests.searches} searches · ${health.requests.reads} reads · ${health.requests.writes} writes <span class="hint">(summed over the ${health.rateLimited.imports} most recent imports)</span></dd>
</dl>
<h2>Redis writes</h2>
${health.rollbacks.length === 0
  ? html`<p>Redis has kept every acknowledged write subsync saw (no rollback detected).</p>`
  : html`<ul>${health.rollbacks.map((r) => html`<li>${rollbackMessage(r)}</li>`)}</ul>`}
<h2>Customer index</h2>
${indexFacts(health.customerIndex)}
<h2>Retention</h2>
<dl class="facts" data-retention>
<dt>Results, row ledgers, counts</dt><dd>${runtime.config.retentionDays} days after an import finishes <span class="hint">(SUBSYNC_RETENTION_DAYS)</span></dd>
<dt>Audit entries</dt><dd>${runtime.config.retentionDays} days after they are recorded <span class="hint">(SUBSYNC_RETENTION_DAYS; <a href="/audit">Audit</a>)</span></dd>
<dt>Failed jobs</dt><dd>${FAILED_RETENTION_SECONDS / 86_400} days <span class="hint">(in the queue, for bull-board; the rows' outcomes are in the ledger)</span></dd>
<dt>Rejected files in failed/</dt><dd>${runtime.config.failedRetentionDays} days <span class="hint">(SUBSYNC_FAILED_RETENTION_DAYS)</span></dd>
</dl>
<h2>Notifications</h2>
${webhookFacts(runtime.config)}`;
    return sendPage(ctx, request, reply, { title: 'Queue health', body });
  });
}
