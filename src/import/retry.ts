import type { Queues, RowBatchData } from '../queue/queues.js';
import { canReadBack } from '../../jobs/index.js';
import { batchJobId, batchOf, batchRowsOf, getRowJob, rowJobOptions } from '../queue/queues.js';
import { blocksAwaitingRelease } from '../queue/feeder.js';
import { CARD_DATA_GONE, isLive, requeueStranded } from '../queue/requeue.js';
import type { ImportRecord, ImportStore, LedgerEntry } from '../store/importStore.js';
import { causeOf, rowsOfGroup } from './errorGroups.js';
import { hadPassword } from './edit.js';
import { readRunState } from './runState.js';
import { ImportNotFoundError } from './status.js';
import { sweepImport } from './sweep.js';
import { SubsyncError } from '../errors.js';

/** Rows `retry` takes: invalid rows need their data fixed first (edit and retry in the dashboard, or re-import). */
const RETRYABLE = new Set(['failed', 'needs-review'] as const);

/** `retry` cannot do what it was asked: the rows or the group cannot be retried (exit 64). */
export class RetryError extends SubsyncError {
  readonly code = 'RETRY_REFUSED';
}

export interface RetryResult {
  retried: number[];
  skipped: Array<{ row: number; reason: string }>;
}

/**
 * Runs failed and needs-review rows again, with the same reconciliation
 * rules: a needs-review row may have been applied, so it goes
 * back as `sent` and reconciles before anything is sent again. The import
 * starts a new round and writes its results again when the rows settle.
 *
 * It also takes the rows that are stuck: `pending` or `sent` with no job that
 * will run them (src/import/sweep.ts). They keep their state, so a `sent`
 * row reads back before sending; a pending or sent row whose job still
 * waits, runs or is delayed is left to it.
 */
export async function retryRows(store: ImportStore, queues: Queues, importId: string, only?: number): Promise<RetryResult> {
  const record = await store.getImport(importId);
  if (!record) throw new ImportNotFoundError(importId);
  await refuseStopped(store, importId);
  const result: RetryResult = { retried: [], skipped: [] };
  const targets: Array<{ row: number; entry: LedgerEntry }> = [];
  if (only !== undefined) {
    const entry = await store.getRow(importId, only);
    if (!entry) throw new RetryError(`import ${importId} has no row ${only}`);
    if (entry.status === 'pending' || entry.status === 'sent') {
      if (entry.job === null || record.state !== 'enqueued') throw new RetryError(`row ${only} is ${entry.status} and its import is still being enqueued: run the import again to finish it`);
      const block = batchOf(only, batchRowsOf(record));
      const batch = await queues.rows.getJob(batchJobId(importId, block));
      const own = await getRowJob(queues, importId, only);
      // (A batch still in the import's backlog waits for its turn: the feeder will queue it.)
      const waiting = (await blocksAwaitingRelease(queues.redis, queues.prefix, importId, [block])).size > 0;
      if (waiting || (await isLive(batch)) || (await isLive(own))) throw new RetryError(`row ${only} is ${entry.status} and its job will run it (\`subsync status ${importId}\` follows it)`);
      const secrets = own?.data.secrets ?? (batch ? (batch.data as RowBatchData).secrets?.[String(only)] : undefined);
      const requeued = await requeueStranded(store, queues, record, [{ row: only, entry, ...(secrets === undefined ? {} : { secrets }) }], canReadBack);
      result.retried.push(...requeued.queued);
      for (const row of requeued.withoutCards) result.skipped.push({ row, reason: `settled failed: ${CARD_DATA_GONE}` });
      return result;
    }
    if (!RETRYABLE.has(entry.status as 'failed')) {
      throw new RetryError(`row ${only} is ${entry.status}; only failed, needs-review and stuck (pending or sent without a job) rows are retried${entry.status === 'invalid' ? ' (fix an invalid row and import it again)' : ''}`);
    }
    targets.push({ row: only, entry });
  } else {
    for await (const item of store.rowsWithStatus(importId, new Set(RETRYABLE))) targets.push(item);
  }

  await retryTargets(store, queues, record, targets, result);
  if (only === undefined) {
    // The stuck rows: pending or sent, and no job will run them.
    const swept = await sweepImport(store, queues, importId);
    result.retried.push(...(swept?.requeued ?? []));
    for (const row of swept?.withoutCards ?? []) result.skipped.push({ row, reason: `settled failed: ${CARD_DATA_GONE}` });
  }
  return result;
}

/** Why a failed or needs-review row cannot be sent again as it is, or undefined when it can. */
function notRetriable(record: ImportRecord, entry: LedgerEntry, job: Awaited<ReturnType<typeof getRowJob>>): string | undefined {
  if (record.kind !== 'customers' && job?.data.secrets === undefined) {
    // Card data lives only in the sealed job data, which is gone once the import settled.
    return 'its card data is no longer held; import the corrected row again';
  }
  if (job?.data.secrets === undefined && hadPassword(record, entry)) {
    // So does a password: the ledger holds only its mask, which must never be sent.
    return 'its password is no longer held; enter it again (edit the row) or import the corrected row';
  }
  return undefined;
}

/** Reopens failed and needs-review rows and queues each in a job of its own. */
async function retryTargets(store: ImportStore, queues: Queues, record: ImportRecord, targets: ReadonlyArray<{ row: number; entry: LedgerEntry }>, result: RetryResult): Promise<void> {
  const importId = record.id;
  for (const { row, entry } of targets) {
    if (entry.job === null) continue;
    const job = await getRowJob(queues, importId, row);
    // The row now has a job of its own: its batch, if it ever runs again, leaves the row to that job.
    const reopened: LedgerEntry = { ...entry, status: entry.status === 'needs-review' ? 'sent' : 'pending', note: undefined, candidates: undefined, handed: true };
    const why = notRetriable(record, entry, job);
    if (why !== undefined) {
      result.skipped.push({ row, reason: why });
      continue;
    }
    await store.reopenRow(importId, row, reopened);
    // A retried row gets its full attempts again.
    if (job && (await job.isFailed())) await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    else {
      if (job) await job.remove();
      await queues.rows.add(entry.job, { importId, row }, rowJobOptions(importId, row, record.options.attempts));
    }
    result.retried.push(row);
  }
}

/** What retrying one group did, or with `dryRun` would do. */
export interface GroupRetryResult extends RetryResult {
  importId: string;
  group: string;
  reason: string;
  status: 'failed' | 'needs-review';
  dryRun: boolean;
  /** Rows sent again (with dryRun: that would be). */
  rows: number;
  /** Of them, rows that may create a customer or a subscription: a create, a sign-up, an upsert that has no CustomerID yet. */
  mayCreate: number;
}

/** Whether sending the row may create a customer or subscription (what an operator weighs before sending many again). */
function mayCreate(entry: LedgerEntry): boolean {
  return entry.job === 'customer.create' || entry.job === 'signup' || (entry.job === 'customer.upsert' && entry.customerId === undefined);
}

/**
 * Retries the rows of one group of `subsync errors` (its code), with the rules
 * of retryRows: failed and needs-review rows only. A group of invalid rows is
 * refused: their data must be fixed first. With `dryRun`, counts and sends
 * nothing.
 */
export async function retryGroup(store: ImportStore, queues: Queues, importId: string, code: string, options: { dryRun?: boolean } = {}): Promise<GroupRetryResult> {
  const record = await store.getImport(importId);
  if (!record) throw new ImportNotFoundError(importId);
  if (!options.dryRun) await refuseStopped(store, importId);
  if (code.startsWith('invalid:')) {
    throw new RetryError(`group ${code} holds invalid rows, which retry never sends: fix them and import them again, or edit them in the dashboard`);
  }
  if (!code.startsWith('failed:') && !code.startsWith('needs-review:')) {
    throw new RetryError(`${code} is not a group code of failed or needs-review rows (\`subsync errors ${importId}\` lists them)`);
  }
  const targets: Array<{ row: number; entry: LedgerEntry }> = [];
  for await (const item of rowsOfGroup(store, importId, code)) targets.push(item);
  const first = targets[0];
  if (first === undefined) throw new RetryError(`import ${importId} has no rows in group ${code} (\`subsync errors ${importId}\` lists its groups)`);
  const status = first.entry.status === 'needs-review' ? 'needs-review' : 'failed';
  const result: GroupRetryResult = { importId, group: code, reason: causeOf(first.entry)?.reason ?? '', status, dryRun: options.dryRun === true, rows: 0, mayCreate: 0, retried: [], skipped: [] };
  if (options.dryRun) {
    for (const { row, entry } of targets) {
      if (entry.job === null) continue;
      const why = notRetriable(record, entry, await getRowJob(queues, importId, row));
      if (why !== undefined) result.skipped.push({ row, reason: why });
      else {
        result.rows++;
        if (mayCreate(entry)) result.mayCreate++;
      }
    }
    return result;
  }
  await retryTargets(store, queues, record, targets, result);
  const retried = new Set(result.retried);
  for (const { row, entry } of targets) {
    if (retried.has(row) && mayCreate(entry)) result.mayCreate++;
  }
  result.rows = result.retried.length;
  return result;
}

/** A cancelled import sends nothing more: its rows would only settle `cancelled` (its unprocessed.csv imports them again). */
async function refuseStopped(store: ImportStore, importId: string): Promise<void> {
  const { state } = await readRunState(store.redis, store.keys, importId);
  if (state === 'cancelling' || state === 'cancelled') {
    throw new RetryError(`import ${importId} is ${state}: nothing of it is sent again; import its unprocessed.csv (beside its results), or the rows to retry, as a new file`);
  }
}
