import type { Job } from 'bullmq';
import type { JobName } from '../outcomes.js';
import { secretColumnIndexes } from '../csv/rows.js';
import type { ImportRecord, ImportStore, LedgerEntry } from '../store/importStore.js';
import { planOf } from '../store/plan.js';
import { enqueueFinalize, rowJobId, rowJobOptions, type Queues, type RowQueueData, type RowQueueJobName } from './queues.js';

/** Job states in which a job will still run (or is running): a row behind one of them is not stranded. */
const LIVE_STATES: ReadonlySet<string> = new Set(['waiting', 'active', 'delayed', 'prioritized', 'waiting-children']);

/** Whether a job will still run: it exists and waits, runs or is delayed (not failed, not completed). */
export async function isLive(job: Job<RowQueueData, unknown, RowQueueJobName> | undefined): Promise<boolean> {
  if (!job) return false;
  return LIVE_STATES.has(await job.getState());
}

/** Whether an import's rows carry card data, which lives only sealed in job data. */
export const holdsCardData = (record: ImportRecord): boolean => secretColumnIndexes(planOf(record)).length > 0;

/** The outcome of a card row whose job, and with it the sealed card data, is gone. */
export const CARD_DATA_GONE = 'its job was lost with the sealed card data it held, so it was not sent again; import the row again to send it';

/** An unsettled row without a live job, and the sealed card cells its dead job still held, if any. */
export interface StrandedRow {
  row: number;
  entry: LedgerEntry;
  secrets?: string;
}

/** What became of stranded rows. */
export interface RequeueResult {
  /** Rows now in a row job of their own. */
  queued: number[];
  /** Card rows whose card data was gone: settled `failed`, saying so. */
  withoutCards: number[];
}

/**
 * Gives stranded rows (unsettled, and no job that will run them) a row job
 * of their own, id `<importId>-<row>` as for a row its batch handed on: the
 * ledger marks them handed (`h`) first, so a batch run again leaves them to
 * that job. Each becomes `sent` (read-back mode), so its job reads back
 * before sending: a pending row without a job may be one whose settle a
 * Redis that lost writes forgot, after its request left.
 * A dead job of the row's own (failed) is replaced, and the row gets its
 * full attempts. A card row whose sealed cells are gone cannot be sent: when
 * its job can read it back (`canReadBack`), it is queued to read back only
 * (a sign-up whose settle Redis lost is found and reconciled); otherwise, or
 * when nothing is found, it settles `failed`, saying why.
 */
export async function requeueStranded(
  store: ImportStore,
  queues: Queues,
  record: ImportRecord,
  rows: readonly StrandedRow[],
  canReadBack: (name: JobName) => boolean = () => false,
): Promise<RequeueResult> {
  const importId = record.id;
  const cards = holdsCardData(record);
  const result: RequeueResult = { queued: [], withoutCards: [] };
  const unsendable: Array<{ row: number; entry: LedgerEntry }> = [];
  for (const { row, entry, secrets } of rows) {
    const name = entry.job;
    if (name === null) continue;
    // Without its card cells a row can still be read back (a sign-up's customer): its job reads back and
    // settles `failed` only when nothing is found, never sending the masked cells.
    const readBackOnly = cards && secrets === undefined && canReadBack(name);
    if (cards && secrets === undefined && !readBackOnly) {
      unsendable.push({ row, entry: { ...entry, status: 'failed', note: CARD_DATA_GONE } });
      continue;
    }
    // Read-back mode: a row without a job may have been sent by a run whose settle Redis lost
    // (a rollback), so even a pending one reads back before any create.
    if (!(await store.updateUnsettled(importId, row, { ...entry, status: 'sent', handed: true }))) continue;
    const own = await queues.rows.getJob(rowJobId(importId, row));
    if (own && !(await isLive(own))) await own.remove();
    else if (own) {
      // Its job came back meanwhile (a batch handing it on): that job runs it.
      result.queued.push(row);
      continue;
    }
    await queues.rows.add(name, { importId, row, ...(secrets === undefined ? {} : { secrets }), ...(readBackOnly ? { readBackOnly: true as const } : {}) }, rowJobOptions(importId, row, record.options.attempts));
    result.queued.push(row);
  }
  if (unsendable.length > 0) {
    const settled = await store.settleRows(importId, unsendable);
    unsendable.forEach(({ row }, i) => {
      if (settled.applied[i]) result.withoutCards.push(row);
    });
    if (settled.complete) await enqueueFinalize(queues, importId, settled.round);
  }
  return result;
}
