import { access } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { maskCells, passwordColumn, secretColumnIndexes } from '../csv/rows.js';
import { scrubSecrets } from '../secrets.js';
import { alignedCells, cardFieldsOf, EditRefusedError, editAndRetryRow, lockedPaths, type CardFields, type CardInput } from '../import/edit.js';
import { errorGroups, type ErrorGroup } from '../import/errorGroups.js';
import { RetryError, retryGroup, retryRows, type RetryResult } from '../import/retry.js';
import { RunControlError, cancelImport, pauseImport, resumeImport } from '../import/control.js';
import { ImportNotFoundError, formatSeconds, importStatus, turnText, type ImportStatus } from '../import/status.js';
import { PROBLEM_STATUSES, ROW_STATUSES, type RowStatus } from '../outcomes.js';
import { planOf } from '../store/plan.js';
import { RESULT_FILE_NAMES } from '../results/writeResults.js';
import type { ImportRecord, LedgerEntry } from '../store/importStore.js';
import { AUDIT_ACTIONS, recordAudit } from '../audit/trail.js';
import { actorOf, csrfOf, noticeOf, redirectWithNotice, sendPage, type DashboardContext } from './context.js';
import { escapedCsv } from './downloads.js';
import { activitySection } from './history.js';
import { html, type Html } from './html.js';

/** Imports listed on the front page. */
const LISTED_IMPORTS = 50;
/** Rows that did not succeed, per page of an import. */
const ROWS_PER_PAGE = 100;
/** Rows `retry` takes (invalid rows are edited first). */
const RETRYABLE: ReadonlySet<string> = new Set(['failed', 'needs-review']);

const ImportIdSchema = z.string().regex(/^[A-Za-z0-9-]{1,100}$/);
const ImportParamsSchema = z.object({ id: ImportIdSchema });
const RowParamsSchema = z.object({ id: ImportIdSchema, row: z.coerce.number().int().min(1) });
const PageQuerySchema = z.object({ offset: z.coerce.number().int().min(0).catch(0) }).catch({ offset: 0 });
/** A form field that may come once or several times. */
const manyStrings = z.union([z.string(), z.array(z.string())]).optional().transform((v) => (v === undefined ? [] : Array.isArray(v) ? v : [v]));
const RetryFormSchema = z.object({
  row: z.coerce.number().int().min(1).optional(),
  rows: manyStrings,
  action: z.enum(['selected', 'all', 'group']).optional(),
  /** With action=group: the code of a group of `subsync errors`. */
  code: z.string().max(200).optional(),
});
const GroupQuerySchema = z.object({ code: z.string().min(1).max(200) });
/** Groups shown on an import's page, the largest first; `subsync errors` lists them all. */
const GROUPS_SHOWN = 50;
/** Rows named per group on the page. */
const GROUP_SAMPLE_ROWS = 10;
const EditFormSchema = z.record(z.string(), z.union([z.string(), z.array(z.string())]));

/** One group of failures on an import's page: its figures, sample rows, and a link to preview its retry. */
function groupRow(id: string, group: ErrorGroup): Html {
  const sample = group.rows.slice(0, GROUP_SAMPLE_ROWS).join(', ') + (group.rows.length > GROUP_SAMPLE_ROWS ? ` and ${group.rows.length - GROUP_SAMPLE_ROWS} more` : '');
  const retryable = group.status !== 'invalid';
  return html`<tr data-group="${group.code}">
<td class="num">${group.count}</td>
<td>${statusBadge(group.status)}</td>
<td class="problem">${group.reason}</td>
<td class="mono">${group.code}</td>
<td>${group.firstSeen ?? '—'}</td>
<td>${group.lastSeen ?? '—'}</td>
<td>${sample}</td>
<td>${retryable ? html`<a href="/imports/${id}/groups/retry?code=${encodeURIComponent(group.code)}">Retry group…</a>` : html`<span class="hint">fix and import again</span>`}</td>
</tr>`;
}

/** The text of each live field of an import, as the poll route sends it and the pages first render it. */
export function liveFields(status: ImportStatus): { fields: Record<string, string>; progress: { value: number; max: number } } {
  const outcomes = ROW_STATUSES.filter((s) => status.counts[s] > 0).map((s) => `${s} ${status.counts[s]}`).join(' · ') || '—';
  const fields: Record<string, string> = {
    state: stateOf(status),
    settled: `${status.settledRows}/${status.total ?? '?'}`,
    outcomes,
    rowsPerSecond: String(status.schedule?.rowsPerSecond ?? status.rowsPerSecond),
    apiCalls: String(status.apiCalls),
    retries: String(status.retries),
    rateLimited: String(status.rateLimited),
    runReason: status.runReason ?? '',
  };
  for (const s of ROW_STATUSES) fields[`count-${s}`] = String(status.counts[s]);
  return { fields, progress: { value: status.settledRows, max: status.total ?? status.settledRows } };
}

function stateOf(status: ImportStatus): string {
  if (status.runState === 'cancelled' || (status.runState === 'cancelling' && status.finished)) return 'cancelled';
  if (status.runState === 'cancelling') return 'cancelling';
  if (status.finished) return 'finished';
  if (status.runState === 'paused') return 'paused';
  if (status.canary?.holding && status.total !== undefined) return `canary (first ${status.canary.rows} rows)`;
  if (status.settled) return 'writing results';
  if (status.total === undefined) return 'enqueuing';
  // While other imports share the budget: its place and share, and the ETA at the rate it gets.
  const turn = turnText(status).trim();
  const eta = status.schedule?.etaSeconds === undefined ? '' : ` · ETA ${formatSeconds(status.schedule.etaSeconds)}`;
  return `running${turn ? ` · ${turn}` : ''}${eta}`;
}

/** The pause, resume and cancel buttons of an import that has not finished (each a POST with the CSRF token). */
function controls(id: string, status: ImportStatus, csrf: string): Html | undefined {
  if (status.finished || status.runState === 'cancelling' || status.runState === 'cancelled') return undefined;
  const paused = status.runState === 'paused' || status.canary?.holding === true;
  const button = (action: string, label: string, extra = ''): Html => html`<form method="post" action="/imports/${id}/${action}" class="control">
<input type="hidden" name="_csrf" value="${csrf}"><button type="submit" class="${action}" data-action="${action}"${extra === 'confirm' ? html` data-confirm="Cancel this import? Rows not yet sent will not be sent."` : undefined}>${label}</button></form>`;
  return html`<div class="actions controls">
${paused ? button('resume', status.runState === 'paused' ? 'Resume' : 'Run the rest now') : button('pause', 'Pause')}
${button('cancel', 'Cancel import…', 'confirm')}
<span class="hint">Cancel: rows not yet sent settle as cancelled and go to unprocessed.csv, to import again; rows already sent finish.</span>
</div>`;
}

const shortId = (id: string): string => (id.length > 14 ? `${id.slice(0, 12)}…` : id);
const when = (ms: number | undefined): Html | string => (ms === undefined ? '—' : html`<time datetime="${new Date(ms).toISOString()}">${new Date(ms).toISOString().replace('T', ' ').slice(0, 19)} UTC</time>`);
const statusBadge = (s: string): Html => html`<span class="status ${s}">${s}</span>`;

export function importRoutes(app: FastifyInstance, ctx: DashboardContext): void {
  const { store, queues, keyring } = ctx.runtime;
  // The imports' turn at the budget, for the schedule of an unfinished import.
  const feed = { redis: ctx.runtime.redis, prefix: ctx.runtime.config.queuePrefix, rate: ctx.runtime.config.rate };

  async function recentStatuses(): Promise<ImportStatus[]> {
    const ids = await store.listImportIds(LISTED_IMPORTS);
    const statuses = await Promise.all(ids.map((id) => importStatus(store, id, Date.now(), feed)));
    return statuses.filter((s): s is ImportStatus => s !== undefined);
  }

  async function recordOr404(request: FastifyRequest, reply: FastifyReply, id: string): Promise<ImportRecord | undefined> {
    const record = await store.getImport(id);
    if (!record) {
      sendPage(ctx, request, reply, { title: 'No such import', body: html`<p>There is no import <code>${id}</code> in Redis. <a href="/">All imports</a></p>` }, 404);
    }
    return record;
  }

  app.get('/', async (request, reply) => {
    const statuses = await recentStatuses();
    const body = statuses.length === 0
      ? html`<p class="muted">No imports yet. Run <code>subsync import FILE</code> or drop a file into the inbox.</p>`
      : html`<table data-poll="/api/imports">
<thead><tr><th>Import</th><th>File</th><th>Kind</th><th>Started</th><th>Progress</th><th>Outcomes</th><th class="num">Rows/s</th><th>State</th></tr></thead>
<tbody>${statuses.map((s) => {
        const live = liveFields(s);
        return html`<tr data-import="${s.importId}">
<td><a class="mono" href="/imports/${s.importId}" title="${s.importId}">${shortId(s.importId)}</a></td>
<td>${s.file}</td><td>${s.kind}</td><td>${when(Date.parse(s.createdAt))}</td>
<td><progress data-field-progress max="${Math.max(1, live.progress.max)}" value="${live.progress.value}"></progress> <span data-field="settled">${live.fields.settled}</span></td>
<td data-field="outcomes">${live.fields.outcomes}</td>
<td class="num" data-field="rowsPerSecond">${live.fields.rowsPerSecond}</td>
<td data-field="state">${live.fields.state}</td></tr>`;
      })}</tbody></table>`;
    return sendPage(ctx, request, reply, { title: 'Imports', body: html`${body}<p class="hint">The ${LISTED_IMPORTS} latest imports; every import Redis holds, by state: <a href="/history">History</a>.</p>`, ...noticeOf(request.query) });
  });

  app.get('/api/imports', async () => {
    const statuses = await recentStatuses();
    return { imports: statuses.map((s) => ({ importId: s.importId, ...liveFields(s), status: s })) };
  });

  app.get('/api/imports/:id', async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    const status = await importStatus(store, id, Date.now(), feed);
    if (!status) return reply.code(404).send({ error: `no import ${id}` });
    return { imports: [{ importId: id, ...liveFields(status), status }] };
  });

  app.get('/imports/:id', async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    const { offset } = PageQuerySchema.parse(request.query);
    const record = await recordOr404(request, reply, id);
    const status = record && (await importStatus(store, id, Date.now(), feed));
    if (!record || !status) return reply;
    const live = liveFields(status);
    const plan = planOf(record);

    const rows: Array<{ row: number; entry: LedgerEntry }> = [];
    let problems = 0;
    for await (const item of store.rowsWithStatus(id, PROBLEM_STATUSES)) {
      if (problems >= offset && rows.length < ROWS_PER_PAGE) rows.push(item);
      problems++;
    }
    const downloads = record.resultsDir !== undefined && (await exists(path.join(record.resultsDir, RESULT_FILE_NAMES.results)))
      ? html`<p><a href="/imports/${id}/results.csv" download>Download results.csv</a> · <a href="/imports/${id}/errors.csv" download>Download errors.csv</a>${status.counts.cancelled > 0 ? html` · <a href="/imports/${id}/unprocessed.csv" download>Download unprocessed.csv</a> (the ${status.counts.cancelled} cancelled rows, to import again; card numbers and CVCs left empty)` : undefined} <span class="hint">(every cell quoted; cells that a spreadsheet would run as a formula are prefixed with ')</span></p>`
      : html`<p class="muted">results.csv and errors.csv are written when every row has settled.</p>`;
    const pager = problems > ROWS_PER_PAGE
      ? html`<p>Rows ${offset + 1}–${Math.min(problems, offset + ROWS_PER_PAGE)} of ${problems}.
${offset > 0 ? html`<a href="/imports/${id}?offset=${Math.max(0, offset - ROWS_PER_PAGE)}">Previous</a>` : undefined}
${offset + ROWS_PER_PAGE < problems ? html`<a href="/imports/${id}?offset=${offset + ROWS_PER_PAGE}">Next</a>` : undefined}</p>`
      : undefined;

    const { groups } = problems === 0 ? { groups: [] } : await errorGroups(store, id);
    const groupTable = groups.length === 0
      ? undefined
      : html`<h2>Failures by cause</h2>
<table class="groups">
<thead><tr><th class="num">Rows</th><th>Status</th><th>Cause</th><th>Code</th><th>First seen</th><th>Last seen</th><th>Rows</th><th></th></tr></thead>
<tbody>${groups.slice(0, GROUPS_SHOWN).map((g) => groupRow(id, g))}</tbody></table>
${groups.length > GROUPS_SHOWN ? html`<p class="hint">${groups.length - GROUPS_SHOWN} smaller groups more: <code>subsync errors ${id}</code> lists every group.</p>` : undefined}`;
    const table = rows.length === 0
      ? html`<p class="muted">${!status.settled ? 'None so far.' : status.counts.cancelled > 0 ? `No row failed; ${status.counts.cancelled} row(s) were cancelled before they were sent.` : 'Every row succeeded.'}</p>`
      : html`<form method="post" action="/imports/${id}/retry">
<input type="hidden" name="_csrf" value="${csrfFor(request)}">
<table class="rows">
<thead><tr><th><input type="checkbox" data-select-all aria-label="select all"></th><th class="num">Row</th><th>Status</th><th>Data (card numbers masked)</th><th>Why</th><th class="num">Attempts</th><th>Last attempt</th><th></th></tr></thead>
<tbody>${rows.map(({ row, entry }) => html`<tr data-row="${row}">
<td>${RETRYABLE.has(entry.status) ? html`<input type="checkbox" name="rows" value="${row}" aria-label="select row ${row}">` : undefined}</td>
<td class="num">${row}</td>
<td>${statusBadge(entry.status)}</td>
<td>${rowData(plan.headers, maskCells(plan, entry.cells))}</td>
<td class="problem">${reasonOf(entry)}</td>
<td class="num">${entry.attempts}</td>
<td>${when(entry.lastAttemptAt)}</td>
<td>${RETRYABLE.has(entry.status) ? html`<button type="submit" name="row" value="${row}">Retry</button> ` : undefined}<a href="/imports/${id}/rows/${row}">Edit${entry.status === 'invalid' ? ' and fix' : ''}</a></td>
</tr>`)}</tbody></table>
<div class="actions"><button type="submit" name="action" value="selected">Retry selected</button><button type="submit" name="action" value="all">Retry all failed and needs-review</button></div>
</form>`;

    const body = html`<div data-poll="/api/imports/${id}">
<dl class="facts" data-import="${id}" data-state="${live.fields.state}" data-reload-when="finished cancelled paused running">
<dt>Import</dt><dd class="mono">${id}</dd>
<dt>File</dt><dd>${record.file}</dd>
<dt>Kind</dt><dd>${record.kind}</dd>
<dt>Started</dt><dd>${when(record.createdAt)}</dd>
<dt>Finished</dt><dd>${when(record.finishedAt)}</dd>
<dt>Progress</dt><dd><progress data-field-progress max="${Math.max(1, live.progress.max)}" value="${live.progress.value}"></progress> <span data-field="settled">${live.fields.settled}</span> settled · <span data-field="state">${live.fields.state}</span></dd>
<dt>State</dt><dd><span class="run ${status.runState}" data-run-state="${status.runState}">${status.runState}</span> <span class="hint" data-field="runReason">${live.fields.runReason}</span></dd>
<dt>Rows/s</dt><dd data-field="rowsPerSecond">${live.fields.rowsPerSecond}</dd>
<dt>API calls · retries · 429s</dt><dd><span data-field="apiCalls">${live.fields.apiCalls}</span> · <span data-field="retries">${live.fields.retries}</span> · <span data-field="rateLimited">${live.fields.rateLimited}</span></dd>
</dl>
${controls(id, status, csrfFor(request))}
<h2>Outcomes</h2>
<table data-import="${id}"><thead><tr>${ROW_STATUSES.map((s) => html`<th class="num">${statusBadge(s)}</th>`)}</tr></thead>
<tbody><tr>${ROW_STATUSES.map((s) => html`<td class="num" data-field="count-${s}">${status.counts[s]}</td>`)}</tr></tbody></table>
</div>
${downloads}
${await activitySection(store, id, record.createdAt, record.lastSettledAt, status.settled)}
${groupTable}
<h2>Rows that did not succeed</h2>
${pager}${table}`;
    return sendPage(ctx, request, reply, { title: `Import ${record.file}`, body, ...noticeOf(request.query) });
  });

  // Cancel, pause and resume (operator actions, as retries are).
  const controlDeps = (request: FastifyRequest) => ({ store, queues, redis: ctx.runtime.redis, logger: ctx.runtime.logger, notifier: ctx.runtime.notifier, actor: actorOf(request).actor });
  app.post('/imports/:id/cancel', { config: { role: 'operator' } }, async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    try {
      const result = await cancelImport(controlDeps(request), id);
      await recordAudit(ctx.runtime.redis, ctx.runtime.config, { ...actorOf(request), action: AUDIT_ACTIONS.cancel, target: id, details: { before: result.before, cancelled: result.cancelled, inFlight: result.inFlight } });
      const text = result.before === 'finished'
        ? 'the import had already finished: nothing cancelled'
        : `cancelled: ${result.cancelled} row(s) never sent settled as cancelled (in unprocessed.csv once the results are written)${result.inFlight > 0 ? `; ${result.inFlight} row(s) already sent finish as they would have` : ''}`;
      return redirectWithNotice(reply, `/imports/${id}`, text, 'ok');
    } catch (error) {
      if (!(error instanceof RunControlError || error instanceof ImportNotFoundError)) throw error;
      return redirectWithNotice(reply, `/imports/${id}`, error.message, 'error');
    }
  });
  app.post('/imports/:id/pause', { config: { role: 'operator' } }, async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    try {
      const result = await pauseImport(controlDeps(request), id, 'paused from the dashboard');
      await recordAudit(ctx.runtime.redis, ctx.runtime.config, { ...actorOf(request), action: AUDIT_ACTIONS.pause, target: id, details: { before: result.before, changed: result.changed } });
      return redirectWithNotice(reply, `/imports/${id}`, result.changed ? 'paused: no new row starts; requests already out finish' : `nothing to pause: the import is ${result.state}`, result.changed ? 'ok' : 'error');
    } catch (error) {
      if (!(error instanceof RunControlError || error instanceof ImportNotFoundError)) throw error;
      return redirectWithNotice(reply, `/imports/${id}`, error.message, 'error');
    }
  });
  app.post('/imports/:id/resume', { config: { role: 'operator' } }, async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    try {
      const result = await resumeImport(controlDeps(request), id);
      await recordAudit(ctx.runtime.redis, ctx.runtime.config, { ...actorOf(request), action: AUDIT_ACTIONS.resume, target: id, details: { before: result.before, changed: result.changed } });
      return redirectWithNotice(reply, `/imports/${id}`, result.changed ? 'resumed: its rows run on' : `nothing to resume: the import is ${result.state}`, result.changed ? 'ok' : 'error');
    } catch (error) {
      if (!(error instanceof RunControlError || error instanceof ImportNotFoundError)) throw error;
      return redirectWithNotice(reply, `/imports/${id}`, error.message, 'error');
    }
  });

  app.post('/imports/:id/retry', { config: { role: 'operator' } }, async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    const form = RetryFormSchema.safeParse(request.body);
    if (!form.success) return redirectWithNotice(reply, `/imports/${id}`, 'nothing to retry: choose rows, or retry all', 'error');
    const { row, rows, action } = form.data;
    let result: RetryResult;
    try {
      if (row !== undefined) result = await retryRows(store, queues, id, row);
      else if (action === 'all') result = await retryRows(store, queues, id);
      else if (action === 'group') result = await retryGroup(store, queues, id, form.data.code ?? '');
      else result = await retrySelected(id, rows.map(Number).filter((n) => Number.isInteger(n) && n > 0));
    } catch (error) {
      if (!(error instanceof RetryError || error instanceof ImportNotFoundError)) throw error;
      return redirectWithNotice(reply, `/imports/${id}`, error.message, 'error');
    }
    const group = action === 'group' && row === undefined;
    await recordAudit(ctx.runtime.redis, ctx.runtime.config, {
      ...actorOf(request),
      action: group ? AUDIT_ACTIONS.retryGroup : AUDIT_ACTIONS.retry,
      target: id,
      details: {
        ...(group ? { group: form.data.code ?? '' } : { scope: row !== undefined ? 'row' : action === 'all' ? 'all' : 'selected' }),
        retried: result.retried,
        skipped: result.skipped.map((s) => s.row),
      },
    });
    return redirectWithNotice(reply, `/imports/${id}`, describeRetry(result), result.retried.length === 0 ? 'error' : 'ok');
  });

  // What retrying a group would send, before it is sent (as `retry --group CODE --dry-run`).
  app.get('/imports/:id/groups/retry', async (request, reply) => {
    const { id } = ImportParamsSchema.parse(request.params);
    const query = GroupQuerySchema.safeParse(request.query);
    if (!query.success) return redirectWithNotice(reply, `/imports/${id}`, 'no group named', 'error');
    let preview;
    try {
      preview = await retryGroup(store, queues, id, query.data.code, { dryRun: true });
    } catch (error) {
      if (!(error instanceof RetryError || error instanceof ImportNotFoundError)) throw error;
      return redirectWithNotice(reply, `/imports/${id}`, error.message, 'error');
    }
    const body = html`<dl class="facts">
<dt>Import</dt><dd class="mono"><a href="/imports/${id}">${id}</a></dd>
<dt>Group</dt><dd class="mono">${preview.group}</dd>
<dt>Cause</dt><dd class="problem">${preview.reason}</dd>
<dt>Rows it sends again</dt><dd>${preview.rows}</dd>
<dt>Of them, may create a customer or a subscription</dt><dd>${preview.mayCreate} <span class="hint">(a create whose answer was lost reads back first; nothing is created twice)</span></dd>
<dt>Not sent</dt><dd>${preview.skipped.length === 0 ? 'none' : html`${preview.skipped.length}: ${preview.skipped.slice(0, 5).map((s) => `row ${s.row} (${s.reason})`).join('; ')}`}</dd>
</dl>
<form method="post" action="/imports/${id}/retry">
<input type="hidden" name="_csrf" value="${csrfFor(request)}">
<input type="hidden" name="code" value="${preview.group}">
<div class="actions"><button type="submit" name="action" value="group"${preview.rows === 0 ? ' disabled' : ''}>Retry these ${preview.rows} rows</button> <a href="/imports/${id}">Back</a></div>
</form>`;
    return sendPage(ctx, request, reply, { title: 'Retry a group', body });
  });

  /** Retry of the rows ticked: each as `retry --row` would, a row that cannot be retried is reported, not fatal. */
  async function retrySelected(id: string, rows: readonly number[]): Promise<RetryResult> {
    const total: RetryResult = { retried: [], skipped: [] };
    for (const row of rows) {
      try {
        const result = await retryRows(store, queues, id, row);
        total.retried.push(...result.retried);
        total.skipped.push(...result.skipped);
      } catch (error) {
        if (!(error instanceof RetryError || error instanceof ImportNotFoundError)) throw error;
        total.skipped.push({ row, reason: error.message });
      }
    }
    return total;
  }

  /** The import and the row a row route names; undefined when a 404 page was sent instead. */
  async function rowOr404(request: FastifyRequest, reply: FastifyReply): Promise<{ id: string; row: number; record: ImportRecord; entry: LedgerEntry } | undefined> {
    const { id, row } = RowParamsSchema.parse(request.params);
    const record = await recordOr404(request, reply, id);
    const entry = record && (await store.getRow(id, row));
    if (record && !entry) sendPage(ctx, request, reply, { title: 'No such row', body: html`<p>Import <code>${id}</code> has no row ${row}.</p>` }, 404);
    return record && entry ? { id, row, record, entry } : undefined;
  }

  app.get('/imports/:id/rows/:row', async (request, reply) => {
    const found = await rowOr404(request, reply);
    if (!found) return reply;
    const { id, row, record, entry } = found;
    const card = await cardFieldsOf(store, queues, keyring, id, row);
    return sendPage(ctx, request, reply, { title: `Row ${row} of ${record.file}`, body: editForm(record, row, entry, card, csrfFor(request), {}) });
  });

  app.post('/imports/:id/rows/:row', { config: { role: 'operator' } }, async (request, reply) => {
    const found = await rowOr404(request, reply);
    if (!found) return reply;
    const { id, row, record, entry } = found;
    const form = EditFormSchema.parse(request.body ?? {});
    const plan = planOf(record);
    const current = alignedCells(plan, entry);
    const submitted: Record<number, string> = {};
    const changes: Record<string, string> = {};
    for (const [name, raw] of Object.entries(form)) {
      const column = /^cell\.(\d+)$/.exec(name)?.[1];
      const path = column === undefined ? undefined : plan.paths[Number(column)];
      if (column === undefined || path === undefined || path === '') continue;
      const text = Array.isArray(raw) ? (raw[0] ?? '') : raw;
      // Browsers send a textarea's line ends as CRLF: keep the cell's own LF when it had no CR.
      const value = current[Number(column)]?.includes('\r') ? text : text.replace(/\r\n/g, '\n');
      submitted[Number(column)] = value;
      changes[path] = value;
    }
    const card: CardInput = { AccountNumber: fieldText(form['card.AccountNumber']), CVCode: fieldText(form['card.CVCode']), Password: fieldText(form['card.Password']) };
    try {
      const result = await editAndRetryRow(store, queues, keyring, id, row, changes, card);
      await recordAudit(ctx.runtime.redis, ctx.runtime.config, {
        ...actorOf(request),
        action: AUDIT_ACTIONS.edit,
        target: `${id}/${row}`,
        details: editDetails(plan, current, submitted, card, result.jobName),
        // What was typed as card data is scrubbed even where it was typed into another column.
        known: [card.AccountNumber ?? '', card.CVCode ?? '', card.Password ?? ''],
      });
      return redirectWithNotice(reply, `/imports/${id}`, `row ${row} saved and queued again (${result.jobName}${result.state === 'sent' ? ', reading back first' : ''})`);
    } catch (error) {
      if (!(error instanceof EditRefusedError)) throw error;
      const fields = await cardFieldsOf(store, queues, keyring, id, row);
      const status = error.reason === 'no-import' || error.reason === 'no-row' ? 404 : error.reason === 'busy' || error.reason === 'not-editable' ? 409 : 422;
      // The card number, CVC and password are never sent back: the form asks for them again.
      return sendPage(ctx, request, reply, { title: `Row ${row} of ${record.file}`, body: editForm(record, row, entry, fields, csrfFor(request), submitted, error), notice: error.reason === 'invalid' ? 'The row still breaks a rule; nothing was retried.' : error.message, noticeKind: 'error' }, status);
    }
  });

  for (const name of ['results', 'errors', 'unprocessed'] as const) {
    app.get(`/imports/:id/${RESULT_FILE_NAMES[name]}`, async (request, reply) => {
      const { id } = ImportParamsSchema.parse(request.params);
      const record = await store.getImport(id);
      const file = record?.resultsDir === undefined ? undefined : path.join(record.resultsDir, RESULT_FILE_NAMES[name]);
      if (file === undefined || !(await exists(file))) return reply.code(404).type('text/plain').send(`no ${RESULT_FILE_NAMES[name]} for import ${id} yet: it is written when every row has settled\n`);
      return reply
        .type('text/csv; charset=utf-8')
        .header('content-disposition', `attachment; filename="${id}-${RESULT_FILE_NAMES[name]}"`)
        .send(escapedCsv(file));
    });
  }

  const csrfFor = (request: FastifyRequest): string => csrfOf(ctx, request);
}

const fieldText = (value: string | string[] | undefined): string | undefined => (Array.isArray(value) ? value[0] : value);

/**
 * An edit as the audit trail keeps it: each changed column's value before and
 * after, both masked as the dashboard shows cells (card numbers to their last
 * four, CVCs and passwords never), and whether card data was entered.
 */
function editDetails(plan: ReturnType<typeof planOf>, current: readonly string[], submitted: Readonly<Record<number, string>>, card: CardInput, job: string): Record<string, unknown> {
  const after = [...current];
  for (const [column, value] of Object.entries(submitted)) after[Number(column)] = value;
  const before = maskCells(plan, current);
  const shown = maskCells(plan, after);
  const changes: Record<string, { before: string; after: string }> = {};
  for (const column of Object.keys(submitted).map(Number)) {
    if ((current[column] ?? '') === (after[column] ?? '')) continue;
    changes[plan.headers[column] ?? `column ${column + 1}`] = { before: before[column] ?? '', after: shown[column] ?? '' };
  }
  return {
    changes,
    cardNumberEntered: (card.AccountNumber ?? '') !== '',
    cvcEntered: (card.CVCode ?? '') !== '',
    passwordEntered: (card.Password ?? '') !== '',
    job,
  };
}

function describeRetry(result: RetryResult): string {
  const parts = [result.retried.length === 0 ? 'no row retried' : `retrying ${result.retried.length} row(s): ${result.retried.join(', ')}`];
  for (const skip of result.skipped) parts.push(`row ${skip.row} not retried: ${skip.reason}${/card data/.test(skip.reason) ? ' (or use Edit to enter the card again)' : ''}`);
  return parts.join('; ');
}

async function exists(file: string): Promise<boolean> {
  try {
    await access(file);
    return true;
  } catch {
    return false;
  }
}

/** A row's masked cells: a short summary, every column on demand. */
function rowData(headers: readonly string[], cells: readonly string[]): Html {
  const summary = cells.filter((c) => c.trim() !== '').slice(0, 3).join(' · ');
  const extra = cells.length > headers.length ? cells.slice(headers.length) : [];
  return html`<details><summary>${summary || '(empty)'}</summary><table>
${headers.map((header, i) => html`<tr><th>${header}</th><td>${cells[i] ?? ''}</td></tr>`)}
${extra.map((cell, i) => html`<tr><th class="muted">(extra cell ${i + 1})</th><td>${cell}</td></tr>`)}
</table></details>`;
}

/**
 * Why a row did not succeed, as shown: scrubbed of card-shaped digit runs
 * (reasons are scrubbed where they are stored; a ledger written before that
 * is scrubbed here), with its candidates (customer ids from the service, as
 * they are).
 */
function reasonOf(entry: LedgerEntry): string {
  return `${scrubSecrets(entry.note ?? '')}${entry.candidates?.length ? ` (candidates: ${entry.candidates.join(', ')})` : ''}`;
}

/** The columns the row's error names (`column "EmailAddress"`), to mark them in the form. */
function columnsInError(error: string | undefined): Set<string> {
  return new Set([...(error ?? '').matchAll(/column "([^"]+)"/g)].map((m) => m[1] ?? ''));
}

function editForm(record: ImportRecord, row: number, entry: LedgerEntry, card: CardFields, csrf: string, submitted: Record<number, string>, refusal?: EditRefusedError): Html {
  const plan = planOf(record);
  const editable = PROBLEM_STATUSES.has(entry.status as RowStatus);
  const cells = maskCells(plan, alignedCells(plan, entry));
  const password = passwordColumn(plan);
  const secret = new Set([...secretColumnIndexes(plan), ...(password === undefined ? [] : [password])]);
  const locked = new Set(lockedPaths(record, entry));
  const wrong = columnsInError(refusal?.rowErrors.length ? refusal.rowErrors.map((e) => e.message).join(' ') : entry.note);
  const facts = html`<dl class="facts">
<dt>Status</dt><dd>${statusBadge(entry.status)}</dd>
<dt>Why</dt><dd class="problem">${reasonOf(entry) || '—'}</dd>
<dt>Attempts</dt><dd>${entry.attempts}</dd>
<dt>Last attempt</dt><dd>${when(entry.lastAttemptAt)}</dd>
</dl>`;
  if (!editable) {
    return html`${facts}<p>Only invalid, failed and needs-review rows are edited; this one is ${entry.status}. <a href="/imports/${record.id}">Back to the import</a></p>`;
  }
  const misaligned = entry.cells.length !== plan.headers.length
    ? html`<p class="notice error">This row had ${entry.cells.length} cells where the header has ${plan.headers.length}: its cells are laid on the columns in order below; check each one.</p>`
    : undefined;
  const fields = plan.headers.map((header, column) => {
    const path = plan.paths[column] ?? '';
    if (path === '' || secret.has(column)) return undefined;
    const value = submitted[column] ?? cells[column] ?? '';
    const name = `cell.${column}`;
    const readOnly = locked.has(path);
    const label = html`<span class="name">${header}${header.trim() !== path ? html` <span class="hint">(${path})</span>` : undefined}</span>`;
    const input = /[\r\n]/.test(value)
      ? html`<textarea name="${name}" rows="3" ${readOnly ? html`readonly` : undefined}>${value}</textarea>`
      : html`<input type="text" name="${name}" value="${value}" ${readOnly ? html`readonly title="reading back compares this field: it cannot change while the row may have been created"` : undefined}>`;
    return html`<label class="${wrong.has(header.trim()) || wrong.has(path) ? 'error' : ''}">${label}${input}</label>`;
  });
  const cardSection = card.accountNumber || card.cvCode
    ? html`<fieldset><legend>Card (never stored: sealed into the job only)</legend>
${card.accountNumber ? html`<label><span class="name">Card number</span><input type="text" name="card.AccountNumber" inputmode="numeric" autocomplete="off" ${card.accountNumberNeeded ? html`required` : undefined}></label>
<p class="hint">${card.accountNumberNeeded ? 'Needed: the card number is no longer held for this row (it is shown masked). Enter it again.' : 'Leave empty to keep the card number held for this row.'}</p>` : undefined}
${card.cvCode ? html`<label><span class="name">CVC</span><input type="text" name="card.CVCode" inputmode="numeric" autocomplete="off" maxlength="4"></label>
<p class="hint">Asked again every time: a CVC is never kept once a row has an outcome. Leave empty to send none.</p>` : undefined}
</fieldset>`
    : undefined;
  const passwordSection = card.password
    ? html`<fieldset><legend>Password (never shown: sealed into the job only)</legend>
<label><span class="name">Password</span><input type="password" name="card.Password" value="" autocomplete="new-password" ${card.passwordNeeded ? html`required` : undefined}></label>
<p class="hint">${card.passwordNeeded ? 'Needed: the password is no longer held for this row. Enter it again.' : card.passwordHeld ? 'Leave empty to keep the password held for this row.' : 'The row has no password. Leave empty to send none.'}</p>
</fieldset>`
    : undefined;
  const problems = refusal?.rowErrors.length
    ? html`<ul class="errors">${refusal.rowErrors.map((e) => html`<li>${e.message}</li>`)}</ul>`
    : undefined;
  return html`${facts}${misaligned}${problems}
<form method="post" action="/imports/${record.id}/rows/${row}" class="edit" autocomplete="off">
<input type="hidden" name="_csrf" value="${csrf}">
${fields}
${cardSection}
${passwordSection}
${locked.size > 0 ? html`<p class="hint">This row may already have been created: the fields reading it back compares are read-only, and it reads back before anything is sent again.</p>` : undefined}
<div class="actions"><button type="submit" class="primary">Save and retry</button> <a href="/imports/${record.id}">Cancel</a></div>
</form>`;
}
