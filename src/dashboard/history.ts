/**
 * The History page (every import within retention, a page at a time, by
 * state), the search page, and an import's activity charts, as the
 * dashboard shows them. `subsync history` and `subsync find` print the same.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { findRows, isCardShaped, shownQuery } from '../import/find.js';
import { IMPORT_STATES, importHistory, importSeries, type HistoryEntry } from '../import/history.js';
import { ROW_STATUSES } from '../outcomes.js';
import type { ImportStore } from '../store/importStore.js';
import { activityCharts } from './charts.js';
import { sendPage, type DashboardContext } from './context.js';
import { html, type Html } from './html.js';

/** Imports per page of the history. */
const HISTORY_PAGE = 50;
/** Rows a search shows at most. */
const FIND_LIMIT = 100;

const HistoryQuerySchema = z.object({
  offset: z.coerce.number().int().min(0).max(10_000_000).catch(0),
  state: z.enum(IMPORT_STATES).optional().catch(undefined),
});
const FindQuerySchema = z.object({
  q: z.string().max(200).optional().catch(undefined),
  /** Set by the redirect that takes a card number out of the address: says why nothing was searched. */
  card: z.literal('1').optional().catch(undefined),
});

const when = (iso: string | null): Html | string => (iso === null ? '—' : html`<time datetime="${iso}">${iso.replace('T', ' ').slice(0, 19)} UTC</time>`);
const shortId = (id: string): string => (id.length > 14 ? `${id.slice(0, 12)}…` : id);
const stateBadge = (state: string): Html => html`<span class="state ${state.replace(/ /g, '-')}">${state}</span>`;

function duration(seconds: number | null): string {
  if (seconds === null) return '—';
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  const minutes = Math.round(seconds / 60);
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min`;
}

function historyRow(e: HistoryEntry): Html {
  const outcomes = ROW_STATUSES.filter((s) => e.counts[s] > 0).map((s) => html`<span class="status ${s}">${s} ${e.counts[s]}</span> `);
  return html`<tr data-import="${e.importId}" data-state="${e.state}">
<td><a class="mono" href="/imports/${e.importId}" title="${e.importId}">${shortId(e.importId)}</a></td>
<td>${e.file}</td><td>${e.kind}</td><td>${when(e.createdAt)}</td>
<td>${stateBadge(e.state)}</td>
<td class="num">${e.settled}/${e.total ?? '?'}</td>
<td>${outcomes.length > 0 ? outcomes : html`<span class="muted">nothing settled yet</span>`}</td>
<td class="num">${e.rowsPerSecond}</td>
<td class="num">${e.rateLimited}</td>
<td>${e.state === 'running' ? duration(e.etaSeconds) : '—'}</td>
<td>${when(e.finishedAt)}</td>
</tr>`;
}

/** The activity section of an import's page: its charts, from its series. */
export async function activitySection(store: ImportStore, importId: string, createdAt: number, lastSettledAt: number | undefined, settled: boolean, now = Date.now()): Promise<Html> {
  const points = await importSeries(store, importId);
  const end = settled && lastSettledAt !== undefined ? lastSettledAt : now;
  return html`<h2>Activity</h2>${activityCharts(points, Math.max(0, (end - createdAt) / 1000))}`;
}

export function historyRoutes(app: FastifyInstance, ctx: DashboardContext): void {
  const { store } = ctx.runtime;

  app.get('/history', async (request, reply) => {
    const { offset, state } = HistoryQuerySchema.parse(request.query);
    const page = await importHistory(store, { limit: HISTORY_PAGE, offset, state });
    const link = (to: { offset?: number; state?: string }): string => {
      const query = new URLSearchParams();
      if (to.state) query.set('state', to.state);
      if (to.offset) query.set('offset', String(to.offset));
      const text = query.toString();
      return text === '' ? '/history' : `/history?${text}`;
    };
    const filters = html`<p class="filters">Show: <a href="/history"${state === undefined ? html` aria-current="page"` : undefined}>all</a>${IMPORT_STATES.map((s) => html` · <a href="${link({ state: s })}"${state === s ? html` aria-current="page"` : undefined}>${s}</a>`)}</p>`;
    const pager = html`<p class="pager">${offset > 0 ? html`<a href="${link({ state, offset: Math.max(0, offset - HISTORY_PAGE) })}" rel="prev">Newer</a> ` : undefined}${page.nextOffset !== null ? html`<a href="${link({ state, offset: page.nextOffset })}" rel="next">Older</a>` : undefined}
<span class="hint">${page.indexed} import(s) held in Redis; a finished import's data expires after SUBSYNC_RETENTION_DAYS.</span></p>`;
    const table = page.imports.length === 0
      ? html`<p class="muted">${state ? `No ${state} imports.` : 'No imports yet.'}</p>`
      : html`<table class="history">
<thead><tr><th>Import</th><th>File</th><th>Kind</th><th>Started</th><th>State</th><th class="num">Settled</th><th>Outcomes</th><th class="num">Rows/s</th><th class="num">429s</th><th>ETA</th><th>Finished</th></tr></thead>
<tbody>${page.imports.map(historyRow)}</tbody></table>`;
    return sendPage(ctx, request, reply, { title: 'Import history', body: html`${filters}${table}${pager}` });
  });

  app.get('/api/history', async (request) => {
    const { offset, state } = HistoryQuerySchema.parse(request.query);
    return importHistory(store, { limit: HISTORY_PAGE, offset, state });
  });

  app.get('/find', async (request, reply) => {
    const { q, card } = FindQuerySchema.parse(request.query);
    // A card number is taken out of the address (and so the history and any log of it) at once, masked.
    if (q !== undefined && isCardShaped(q)) return reply.redirect(`/find?${new URLSearchParams({ q: shownQuery(q), card: '1' }).toString()}`, 303);
    const form = html`<form method="get" action="/find" class="find" role="search">
<input type="search" name="q" value="${q ?? ''}" placeholder="email, first or last name, CustomerID, PaymentMethodKey" aria-label="search rows" autofocus>
<button type="submit" class="primary">Search</button>
</form>
<p class="hint">Rows of every import held in Redis, by a whole email, name (first, last, or both), CustomerID or PaymentMethodKey. Card data is never searched.</p>`;
    if (q === undefined || q.trim() === '') return sendPage(ctx, request, reply, { title: 'Search rows', body: form });
    const result = await findRows(store, q, { limit: FIND_LIMIT });
    const summary = card !== undefined
      ? html`<p class="notice error" role="status">"${result.shown}" looks like a card number: card data is never searched.</p>`
      : result.hits.length === 0
        ? html`<p class="muted" data-no-results>No rows match "${result.shown}" in ${result.imports} import(s).</p>`
        : html`<p>${result.hits.length} row(s) match "${result.shown}"${result.more ? html` <span class="hint">(more match: search a whole email or id to narrow it)</span>` : undefined}.</p>`;
    const table = result.hits.length === 0
      ? undefined
      : html`<table class="found">
<thead><tr><th>Import</th><th>File</th><th class="num">Row</th><th>Status</th><th>Name</th><th>Email</th><th>CustomerID</th><th>PaymentMethodKey</th><th>Matched</th></tr></thead>
<tbody>${result.hits.map((h) => html`<tr data-import="${h.importId}" data-row="${h.row}">
<td><a class="mono" href="/imports/${h.importId}" title="${h.importId}">${shortId(h.importId)}</a></td>
<td>${h.file}</td>
<td class="num"><a href="/imports/${h.importId}/rows/${h.row}">${h.row}</a></td>
<td><span class="status ${h.status}">${h.status}</span></td>
<td>${[h.firstName, h.lastName].filter((n) => n !== '').join(' ')}</td>
<td>${h.email}</td><td class="mono">${h.customerId}</td><td class="mono">${h.paymentMethodKey}</td><td>${h.matched}</td>
</tr>`)}</tbody></table>`;
    return sendPage(ctx, request, reply, { title: 'Search rows', body: html`${form}${summary}${table}` });
  });
}
