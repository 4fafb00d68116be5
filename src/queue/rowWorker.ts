import { hostname } from 'node:os';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import type { RedisClient } from './redis.js';
import type { Logger } from 'pino';
import { PROCESSORS, READ_BACKS, type RowContext, type RowOutcome } from '../../jobs/index.js';
import type { ApiClient } from '../api/client.js';
import { ApiError, ApiRateLimitedError, ApiTimeoutError } from '../api/errors.js';
import { openSecrets, sealSecrets, type CardKeyring } from '../cards/crypto.js';
import { scrubCardNumbers } from '../api/rules.js';
import type { ColumnPlan } from '../csv/columns.js';
import { JOB_LOCK_MS } from '../policy.js';
import type { ImportKind, JobName } from '../outcomes.js';
import { observeRetry, observeRowSettled } from '../metrics.js';
import { isSettled, type ImportRecord, type ImportStore, type LedgerEntry, type RunFigures } from '../store/importStore.js';
import type { ApiBudget } from './budget.js';
import { jobFigures, type CallFigures } from './figures.js';
import {
  ROWS_QUEUE,
  RowJobDataSchema,
  enqueueFinalize,
  fullJitterBackoff,
  type BackoffBounds,
  type Queues,
  type RowJobData,
} from './queues.js';

export interface RowWorkerOptions {
  connection: RedisClient;
  prefix: string;
  concurrency: number;
  store: ImportStore;
  queues: Queues;
  api: ApiClient;
  budget: ApiBudget;
  keyring: CardKeyring | undefined;
  logger: Logger;
  /** Retry backoff bounds; default DEFAULT_BACKOFF (1 s base, 60 s cap). */
  backoff?: BackoffBounds;
  /** The job lock (SUBSYNC_JOB_LOCK_MS); a dead worker's jobs are taken over after it. Default JOB_LOCK_MS. */
  lockMs?: number;
}

/** The column plan of an import, rebuilt from its record (the producer validated it). */
export function planOf(record: ImportRecord): ColumnPlan {
  const index = new Map<string, number>();
  record.paths.forEach((p, i) => {
    if (p !== '') index.set(p, i);
  });
  return { kind: record.kind, headers: record.headers, paths: record.paths, index };
}

/**
 * Runs row jobs: one processor per job name (jobs/), around which this file
 * keeps the ledger, the API figures, the fleet-wide 429 handling and the
 * settle-once rule. Retries happen in one place: the job's attempts.
 */
export function startRowWorker(options: RowWorkerOptions): Worker<RowJobData, unknown, JobName> {
  const { store, queues, api, budget, logger } = options;
  // Import records do not change once enqueued (but for counts, kept elsewhere).
  const records = new Map<string, Promise<ImportRecord | undefined>>();
  const recordOf = (importId: string): Promise<ImportRecord | undefined> => {
    let record = records.get(importId);
    if (!record) {
      record = store.getImport(importId);
      records.set(importId, record);
      void record.then((r) => r ?? records.delete(importId));
    }
    return record;
  };

  async function settle(job: Job<RowJobData, unknown, JobName>, kind: ImportKind, entry: LedgerEntry, figures: RunFigures): Promise<void> {
    const { importId, row } = job.data;
    const result = await store.settle(importId, row, entry, figures);
    if (result.applied && isSettled(entry.s)) observeRowSettled(kind, entry.s);
    if (result.complete) await enqueueFinalize(queues, importId, result.round);
  }

  async function processRow(job: Job<RowJobData, unknown, JobName>): Promise<string> {
    const data = RowJobDataSchema.parse(job.data);
    const { importId, row } = data;
    // A child logger costs a redaction setup: made only when a line is written.
    let rowLogger: Logger | undefined;
    const log = (): Logger => (rowLogger ??= logger.child({ importId, row, jobId: job.id }));
    const [record, stored] = await Promise.all([recordOf(importId), store.getRow(importId, row)]);
    if (!record || !stored) throw new UnrecoverableError(`import ${importId} row ${row} has no record or ledger entry`);
    if (isSettled(stored.s)) return `already ${stored.s}`;
    const processor = PROCESSORS[job.name];
    const plan = planOf(record);
    const cells = [...stored.c];
    if (data.secrets !== undefined) {
      if (!options.keyring) throw new UnrecoverableError('this row carries card data, and this worker has no SUBSYNC_CARD_KEY to open it');
      for (const [index, value] of Object.entries(openSecrets(options.keyring, data.secrets))) cells[Number(index)] = value;
    }

    const attempt = job.attemptsMade + 1;
    if (attempt > 1) observeRetry(record.kind);
    const maxAttempts = job.opts.attempts ?? 1;
    let entry: LedgerEntry = { ...stored, a: stored.a + 1, t: Date.now() };
    let sentNow = false;
    const figures: CallFigures = { apiCalls: 0, rateLimited: 0 };
    const runFigures = (): RunFigures => ({ ...figures, retries: attempt > 1 ? 1 : 0 });
    // Settling adds the figures in its own round trip; a run that does not settle adds them at the end.
    let figuresAdded = false;
    const ctx: RowContext = {
      importId,
      row,
      plan,
      cells,
      options: { expiryFormat: record.options.expiryFormat, match: record.options.match },
      api,
      previous: stored.s === 'sent' ? 'sent' : 'pending',
      preexisting: stored.pre,
      markSent: async () => {
        entry = { ...entry, s: 'sent' };
        sentNow = true;
        if (!(await store.updateUnsettled(importId, row, entry))) throw new UnrecoverableError('row settled by another run meanwhile');
      },
      recordPreexisting: async (ids) => {
        entry = { ...entry, pre: [...ids] };
        await store.updateUnsettled(importId, row, entry);
      },
      get log() {
        return log();
      },
    };

    try {
      const outcome: RowOutcome = await jobFigures.run(figures, () => processor(ctx));
      await settle(job, record.kind, outcomeEntry(entry, outcome), runFigures());
      figuresAdded = true;
      if (logger.isLevelEnabled('debug')) log().debug({ status: outcome.status }, 'row settled');
      return outcome.status;
    } catch (error) {
      if (error instanceof UnrecoverableError) throw error;
      const notApplied = error instanceof ApiError && !error.maybeApplied;
      if (sentNow && notApplied) {
        // This attempt's request cannot have been applied: nothing to reconcile next time.
        entry = { ...entry, s: 'pending' };
        await store.updateUnsettled(importId, row, entry);
      }
      if (error instanceof ApiRateLimitedError) {
        // The fleet's budget slows everyone down (and waits out the Retry-After
        // when it must); this row goes back to wait without spending an attempt,
        // and takes its turn from the budget like any other. Fetching stays on:
        // the budget, not the queue, holds requests back.
        await budget.block(error.retryAfterMs);
        throw Worker.RateLimitError();
      }
      const transient = error instanceof ApiError ? error.transient : true;
      const reason = describe(error);
      if (transient && attempt < maxAttempts) {
        log().info({ err: error, attempt }, 'row attempt failed; retrying');
        throw error;
      }
      const settled = entry.s === 'sent' ? await lastReadBack(job.name, ctx, entry, error, reason) : { ...entry, s: 'failed' as const, e: transient ? `retries ran out: ${reason}` : reason };
      // The job stays (failed, for the dashboard): its CVC goes now that the row has an outcome.
      // Before settling: the settle may complete the import, whose finaliser drops the rest.
      await forgetCvc(job, plan, options.keyring);
      await settle(job, record.kind, settled, runFigures());
      figuresAdded = true;
      log().info({ status: settled.s, err: error }, 'row settled without success');
      throw new UnrecoverableError(settled.e);
    } finally {
      if (!figuresAdded) await store.addFigures(importId, runFigures());
    }
  }

  const worker = new Worker<RowJobData, unknown, JobName>(ROWS_QUEUE, processRow, {
    // Stored on each job it runs (job.processedBy): which process on which machine ran a row.
    name: `${hostname()}:${process.pid}`,
    connection: options.connection,
    prefix: options.prefix,
    concurrency: options.concurrency,
    lockDuration: options.lockMs ?? JOB_LOCK_MS,
    // Stalled jobs (their worker died) are looked for twice per lock period,
    // and always run again: the ledger makes a re-run safe (it reconciles), so
    // no stall count may fail a row behind the ledger's back.
    stalledInterval: Math.round((options.lockMs ?? JOB_LOCK_MS) / 2),
    maxStalledCount: Number.MAX_SAFE_INTEGER,
    settings: {
      backoffStrategy: (attemptsMade, _type, err) => fullJitterBackoff(attemptsMade, err instanceof ApiError ? err.retryAfterMs : undefined, options.backoff),
    },
  });
  worker.on('error', (error) => logger.error({ err: error }, 'row worker error'));
  return worker;
}

/**
 * The retries ran out and the last attempt may have been applied. When the
 * service did answer (a 5xx, a cut connection after it answered nothing), the
 * change, if made, is visible now: read it back once more. After a timeout
 * the service may still be working on it, so that row needs review.
 */
async function lastReadBack(name: JobName, ctx: RowContext, entry: LedgerEntry, error: unknown, reason: string): Promise<LedgerEntry> {
  const readBack = READ_BACKS[name];
  const review: LedgerEntry = { ...entry, s: 'needs-review', e: `retries ran out and the last attempt may have been applied: ${reason}` };
  if (!readBack || error instanceof ApiTimeoutError) return review;
  try {
    const verdict = await readBack({ ...ctx, previous: 'sent' });
    if (verdict) return outcomeEntry(entry, verdict);
    return { ...entry, s: 'failed', e: `retries ran out: ${reason}; reading back found nothing, so it was not applied` };
  } catch {
    return review;
  }
}

/**
 * Re-seals a kept job's card cells without the CVC (DESIGN section 6: kept
 * only until the row has a definite outcome). The card number stays sealed
 * until the import settles, for a retry.
 */
async function forgetCvc(job: Job<RowJobData, unknown, JobName>, plan: ColumnPlan, keyring: CardKeyring | undefined): Promise<void> {
  const { secrets, ...rest } = job.data;
  if (secrets === undefined || !keyring) return;
  const kept = Object.fromEntries(Object.entries(openSecrets(keyring, secrets)).filter(([index]) => !/CVCode$/.test(plan.paths[Number(index)] ?? '')));
  await job.updateData(Object.keys(kept).length > 0 ? { ...rest, secrets: sealSecrets(keyring, kept) } : rest);
}

function outcomeEntry(entry: LedgerEntry, outcome: RowOutcome): LedgerEntry {
  return {
    ...entry,
    s: outcome.status,
    cid: outcome.customerId,
    sid: outcome.subscriptionId,
    pmk: outcome.paymentMethodKey,
    e: outcome.note,
    cand: outcome.candidates ? [...outcome.candidates] : undefined,
  };
}

/** The reason stored for a row: the API's words when it gave some; never a request body. */
function describe(error: unknown): string {
  if (error instanceof ApiError) return error.apiMessage ? `${error.apiMessage} (${error.code}${error.status ? ` ${error.status}` : ''})` : error.message;
  return scrubCardNumbers(error instanceof Error ? error.message : String(error));
}
