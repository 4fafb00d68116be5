import type { Logger } from 'pino';
import { canReadBack } from '../../jobs/index.js';
import type { FailureLog } from '../failureLog.js';
import { SWEEP_DEFAULTS } from '../policy.js';
import type { RedisClient } from '../redis/redis.js';
import { batchJobId, batchOf, batchRowsOf, enqueueFinalize, finalizeJobId, rowJobId, type Queues, type RowBatchData } from '../queue/queues.js';
import { holdsCardData, isLive, requeueStranded, type StrandedRow } from '../queue/requeue.js';
import { blocksAwaitingRelease } from '../queue/feeder.js';
import { isSettled, type ImportRecord, type ImportStore, type LedgerEntry } from '../store/importStore.js';
import type { CardCells } from './cardCells.js';

/** What a sweep found of one import, and what it did. */
export interface SweepReport {
  importId: string;
  /** `enqueuing`: the producer has not finished (nothing is swept); `finished`: the results are written. */
  state: 'enqueuing' | 'running' | 'settled' | 'finished';
  /** Rows without an outcome. */
  unsettled: number;
  /** Of those, rows a job will still run (waiting, active or delayed). */
  live: number;
  /** Rows whose jobs were all gone, now in a row job of their own. */
  requeued: number[];
  /** Card rows whose jobs were gone with their card data: settled `failed`, saying so. */
  withoutCards: number[];
  /** Every row had settled and the results were not being written: their control job was queued again. */
  finalizeQueued: boolean;
}

/**
 * Finds the rows of an import that no job will run any more, and queues
 * them again, so every row reaches an outcome: a row is unsettled (pending
 * or sent) while neither its batch job nor a row job of its own waits, runs
 * or is delayed (a batch whose attempts ran out and that could not hand its
 * rows on, a job deleted by hand or lost with Redis memory). Each gets a row
 * job (src/queue/requeue.ts); job ids are the deterministic ones, so a sweep
 * racing a batch that hands the same row on adds it once. The dead batch job
 * (kept failed) is removed once its rows are requeued: it held their card
 * data. An import whose rows all settled but whose results were never
 * written gets its finalize job again.
 *
 * Run by the workers periodically, by `status IMPORT_ID`, by `import --wait`
 * when nothing moves, and by `retry` (which takes such rows too).
 */
export async function sweepImport(store: ImportStore, queues: Queues, importId: string, cards?: CardCells): Promise<SweepReport | undefined> {
  const record = await store.getImport(importId);
  if (!record) return undefined;
  const report: SweepReport = { importId, state: 'running', unsettled: 0, live: 0, requeued: [], withoutCards: [], finalizeQueued: false };
  if (record.state !== 'enqueued' || record.total === undefined) return { ...report, state: 'enqueuing' };
  if (record.finishedAt !== undefined) return { ...report, state: 'finished' };
  const counts = await store.counts(importId);
  if (counts.settled >= record.total) {
    const finalize = await queues.control.getJob(finalizeJobId(importId, record.round));
    if (!finalize || ['failed', 'completed', 'unknown'].includes(await finalize.getState())) {
      // Re-read: the results may have been written between the two reads.
      if ((await store.getImport(importId))?.finishedAt === undefined) {
        await finalize?.remove();
        await enqueueFinalize(queues, importId, record.round);
        return { ...report, state: 'settled', finalizeQueued: true };
      }
      return { ...report, state: 'finished' };
    }
    return { ...report, state: 'settled' };
  }

  const unsettled: number[] = [];
  const batchRows = batchRowsOf(record);
  for await (const { row, entry } of store.rowsInOrder(importId, record.total)) if (!isSettled(entry.status) && entry.job !== null) unsettled.push(row);
  report.unsettled = unsettled.length;
  if (unsettled.length === 0) return report;

  // Job states first, the ledger again after: a row seen without a live job and still unsettled
  // afterwards is stranded (nothing but a sweep or a retry adds jobs with these ids).
  const batches = new Map<number, { live: boolean; secrets: Record<string, string> | undefined; remove: () => Promise<void> }>();
  const candidates: Array<{ row: number; secrets: string | undefined }> = [];
  // Batches still in the import's backlog wait for their turn (src/queue/feeder.ts): their rows are not stranded.
  const awaiting = await blocksAwaitingRelease(queues.redis, queues.prefix, importId, [...new Set(unsettled.map((row) => batchOf(row, batchRows)))]);
  for (const block of awaiting) batches.set(block, { live: true, secrets: undefined, remove: async () => undefined });
  for (const row of unsettled) {
    const block = batchOf(row, batchRows);
    let batch = batches.get(block);
    if (!batch) {
      const job = await queues.rows.getJob(batchJobId(importId, block));
      const live = await isLive(job);
      batch = { live, secrets: job && !live ? (job.data as RowBatchData).secrets : undefined, remove: async () => (job ? job.remove() : undefined) };
      batches.set(block, batch);
    }
    // (A live batch runs its rows, or re-adds the job of one it handed on; a row it leaves without one is found once it is gone.)
    if (batch.live) {
      report.live++;
      continue;
    }
    const own = await queues.rows.getJob(rowJobId(importId, row));
    if (await isLive(own)) {
      report.live++;
      continue;
    }
    const ownSecrets = own && 'secrets' in own.data && typeof own.data.secrets === 'string' ? own.data.secrets : undefined;
    candidates.push({ row, secrets: ownSecrets ?? batch.secrets?.[String(row)] });
  }
  if (candidates.length === 0) return report;
  const entries = await store.getRows(importId, candidates.map((c) => c.row));
  const stranded: StrandedRow[] = [];
  candidates.forEach((c, i) => {
    const entry: LedgerEntry | undefined = entries[i];
    if (entry && !isSettled(entry.status)) stranded.push({ row: c.row, entry, ...(c.secrets === undefined ? {} : { secrets: c.secrets }) });
  });
  if (cards) await resealStranded(cards, record, stranded);
  const result = await requeueStranded(store, queues, record, stranded, canReadBack);
  report.requeued = result.queued;
  report.withoutCards = result.withoutCards;
  // The dead batches' rows have jobs of their own or outcomes now: their sealed card data goes with them.
  for (const block of new Set(stranded.map((s) => batchOf(s.row, batchRows)))) {
    const batch = batches.get(block);
    if (batch && !batch.live) await batch.remove();
  }
  return report;
}

/**
 * Card rows whose sealed cells died with their jobs (Redis lost them) get them again from the import's
 * file, where it is unchanged (src/import/cardCells.ts): their new jobs send them. The others stay without.
 */
async function resealStranded(cards: CardCells, record: ImportRecord, stranded: StrandedRow[]): Promise<void> {
  if (!holdsCardData(record)) return;
  await Promise.all(
    stranded.map(async (s, i) => {
      if (s.secrets !== undefined) return;
      const secrets = await cards.reseal(record, s.row);
      if (secrets !== undefined) stranded[i] = { ...s, secrets };
    }),
  );
}

/**
 * A worker's periodic sweep: every `intervalMs`, one worker of the fleet
 * (a lock in Redis) sweeps the newest unfinished imports that have settled
 * nothing for `quietMs`, and drops from the list of imports those whose
 * record has expired (among those newest ones, and the oldest).
 */
export function startSweeper(deps: { redis: RedisClient; store: ImportStore; queues: Queues; logger: Logger; failures?: FailureLog; cards?: CardCells }, options: { intervalMs?: number; quietMs?: number } = {}) {
  const intervalMs = options.intervalMs ?? SWEEP_DEFAULTS.intervalMs;
  const quietMs = options.quietMs ?? SWEEP_DEFAULTS.quietMs;
  const { redis, store, queues, logger } = deps;
  let running: Promise<void> | undefined;
  let stopped = false;
  async function runOnce(now = Date.now()): Promise<SweepReport[]> {
    const reports: SweepReport[] = [];
    if ((await redis.set(store.keys.sweepLock, String(process.pid), 'PX', Math.max(1, Math.floor(intervalMs * 0.9)), 'NX')) !== 'OK') return reports;
    const ids = await store.listImportIds(SWEEP_DEFAULTS.imports);
    const vanished: string[] = [];
    for (const id of ids) {
      if (stopped) break;
      const record = await store.getImport(id);
      if (!record) {
        vanished.push(id);
        continue;
      }
      if (record.finishedAt !== undefined || record.state !== 'enqueued') continue;
      if ((record.lastSettledAt ?? record.createdAt) > now - quietMs) continue;
      const report = await sweepImport(store, queues, id, deps.cards);
      if (!report) continue;
      reports.push(report);
      if (report.requeued.length > 0 || report.withoutCards.length > 0 || report.finalizeQueued) {
        logger.warn(
          { importId: id, requeued: report.requeued.length, withoutCards: report.withoutCards.length, finalizeQueued: report.finalizeQueued },
          'sweep: rows of this import had no job that would run them: queued again',
        );
      }
    }
    await store.forgetImports(vanished);
    // Expired imports are the oldest: the list keeps none for long.
    await store.forgetExpiredImports();
    return reports;
  }
  const timer = setInterval(() => {
    running ??= runOnce()
      .then(() => undefined)
      .catch((error: unknown) => (deps.failures ? deps.failures.report('sweep', error) : logger.warn({ err: error }, 'sweep failed')))
      .finally(() => {
        running = undefined;
      });
  }, intervalMs);
  timer.unref();
  return {
    runOnce,
    async stop(): Promise<void> {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
