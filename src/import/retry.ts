import type { Queues } from '../queue/queues.js';
import { getRowJob, rowJobOptions } from '../queue/queues.js';
import type { ImportStore, LedgerEntry } from '../store/importStore.js';
import { hadPassword } from './edit.js';

/** Rows `retry` takes: invalid rows need their data fixed first (edit and retry in the dashboard, or re-import). */
const RETRYABLE = new Set(['failed', 'needs-review'] as const);

export class RetryError extends Error {
  readonly code = 'RETRY_REFUSED';
}

export interface RetryResult {
  retried: number[];
  skipped: Array<{ row: number; reason: string }>;
}

/**
 * Runs failed and needs-review rows again, with the same reconciliation rules
 * (DESIGN section 4): a needs-review row may have been applied, so it goes
 * back as `sent` and reconciles before anything is sent again. The import
 * starts a new round and writes its results again when the rows settle.
 */
export async function retryRows(store: ImportStore, queues: Queues, importId: string, only?: number): Promise<RetryResult> {
  const record = await store.getImport(importId);
  if (!record) throw new RetryError(`no import ${importId}`);
  const result: RetryResult = { retried: [], skipped: [] };
  const targets: Array<{ row: number; entry: LedgerEntry }> = [];
  if (only !== undefined) {
    const entry = await store.getRow(importId, only);
    if (!entry) throw new RetryError(`import ${importId} has no row ${only}`);
    if (!RETRYABLE.has(entry.s as 'failed')) {
      throw new RetryError(`row ${only} is ${entry.s}; only failed and needs-review rows are retried${entry.s === 'invalid' ? ' (fix an invalid row and import it again)' : ''}`);
    }
    targets.push({ row: only, entry });
  } else {
    for await (const item of store.rowsWithStatus(importId, new Set(RETRYABLE))) targets.push(item);
  }

  for (const { row, entry } of targets) {
    if (entry.j === null) continue;
    const job = await getRowJob(queues, importId, row);
    // The row now has a job of its own: its batch, if it ever runs again, leaves the row to that job.
    const reopened: LedgerEntry = { ...entry, s: entry.s === 'needs-review' ? 'sent' : 'pending', e: undefined, cand: undefined, h: 1 };
    if (record.kind !== 'customers' && job?.data.secrets === undefined) {
      // Card data lives only in the sealed job data, which is gone once the import settled.
      result.skipped.push({ row, reason: 'its card data is no longer held; import the corrected row again' });
      continue;
    }
    if (job?.data.secrets === undefined && hadPassword(record, entry)) {
      // So does a password: the ledger holds only its mask, which must never be sent.
      result.skipped.push({ row, reason: 'its password is no longer held; enter it again (edit the row) or import the corrected row' });
      continue;
    }
    await store.reopenRow(importId, row, reopened);
    // A retried row gets its full attempts again.
    if (job && (await job.isFailed())) await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    else {
      if (job) await job.remove();
      await queues.rows.add(entry.j, { importId, row }, rowJobOptions(importId, row, record.options.attempts));
    }
    result.retried.push(row);
  }
  return result;
}
