/**
 * The audit trail's page: who did what, newest first, a page at a time
 * (src/audit/trail.ts). Every value is escaped by the html template; details
 * were masked when they were recorded.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { expiresAt, listAudit, type AuditEntry } from '../audit/trail.js';
import { noticeOf, sendPage, type DashboardContext } from './context.js';
import { html, type Html } from './html.js';

/** Entries per page. */
export const AUDIT_PAGE_SIZE = 50;

const AuditQuerySchema = z.object({ offset: z.coerce.number().int().min(0).max(1_000_000).catch(0) }).catch({ offset: 0 });

/** An entry's details as short lines: an edit's changes as `column: before → after`, anything else as `key: value`. */
function detailsOf(entry: AuditEntry): Html {
  const details = entry.details ?? {};
  const lines: Html[] = [];
  for (const [key, value] of Object.entries(details)) {
    if (key === 'changes' && typeof value === 'object' && value !== null && !Array.isArray(value)) {
      for (const [column, change] of Object.entries(value)) {
        const parsed = z.object({ before: z.string(), after: z.string() }).safeParse(change);
        lines.push(parsed.success ? html`<li><span class="name">${column}</span>: <del>${parsed.data.before || '(empty)'}</del> → <ins>${parsed.data.after || '(empty)'}</ins></li>` : html`<li>${column}: ${JSON.stringify(change)}</li>`);
      }
      continue;
    }
    const text = Array.isArray(value) ? (value.length === 0 ? 'none' : value.join(', ')) : typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value);
    lines.push(html`<li><span class="name">${key}</span>: ${text}</li>`);
  }
  return lines.length === 0 ? html`<span class="muted">—</span>` : html`<ul class="details">${lines}</ul>`;
}

/** A link to what the entry acted on, when it is an import or one of its rows. */
function targetOf(entry: AuditEntry): Html {
  const row = /^([A-Za-z0-9-]{1,100})\/(\d+)$/.exec(entry.target);
  if (row) return html`<a class="mono" href="/imports/${row[1] ?? ''}/rows/${row[2] ?? ''}">${entry.target}</a>`;
  if (/^[A-Za-z0-9-]{1,100}$/.test(entry.target) && entry.action !== 'schedule.set' && entry.action !== 'schedule.remove') return html`<a class="mono" href="/imports/${entry.target}">${entry.target}</a>`;
  return html`<span class="mono">${entry.target}</span>`;
}

export function auditRoutes(app: FastifyInstance, ctx: DashboardContext): void {
  const { runtime } = ctx;

  app.get('/api/audit', async (request) => {
    const { offset } = AuditQuerySchema.parse(request.query);
    const page = await listAudit(runtime.redis, runtime.config, { limit: AUDIT_PAGE_SIZE, offset });
    return { ...page, offset, entries: page.entries.map((e) => ({ ...e, expiresAt: expiresAt(e, runtime.config) })) };
  });

  app.get('/audit', async (request, reply) => {
    const { offset } = AuditQuerySchema.parse(request.query);
    const { entries, total, retentionDays } = await listAudit(runtime.redis, runtime.config, { limit: AUDIT_PAGE_SIZE, offset });
    const pager = total > AUDIT_PAGE_SIZE
      ? html`<p class="pager">Entries ${Math.min(total, offset + 1)}–${Math.min(total, offset + AUDIT_PAGE_SIZE)} of ${total}.
${offset > 0 ? html`<a href="/audit?offset=${Math.max(0, offset - AUDIT_PAGE_SIZE)}" rel="prev">Newer</a>` : undefined}
${offset + AUDIT_PAGE_SIZE < total ? html`<a href="/audit?offset=${offset + AUDIT_PAGE_SIZE}" rel="next">Older</a>` : undefined}</p>`
      : undefined;
    const table = entries.length === 0
      ? html`<p class="muted">${offset > 0 ? 'No entries this far back.' : 'Nothing recorded yet: retries, edits and schedule changes, from here or from the command line, are listed here.'}</p>`
      : html`<table class="audit">
<thead><tr><th>When</th><th>Who</th><th>Role</th><th>Action</th><th>Target</th><th>Details</th></tr></thead>
<tbody>${entries.map((e) => html`<tr data-audit="${e.id}" data-action="${e.action}">
<td><time datetime="${e.at}">${e.at.replace('T', ' ').slice(0, 19)} UTC</time></td>
<td class="mono">${e.actor}</td>
<td>${e.role ?? '—'}</td>
<td class="mono">${e.action}</td>
<td>${targetOf(e)}</td>
<td>${detailsOf(e)}</td>
</tr>`)}</tbody></table>`;
    const body = html`<p class="hint" data-retention>Entries are kept ${retentionDays} days (SUBSYNC_RETENTION_DAYS), like import results and ledgers; card numbers are masked, CVCs and passwords never recorded. <code>subsync audit --json</code> prints the same.</p>
${pager}${table}${pager}`;
    return sendPage(ctx, request, reply, { title: 'Audit', body, ...noticeOf(request.query) });
  });
}
