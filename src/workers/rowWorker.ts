import { hostname } from 'node:os';
import { canReadBack } from '../../jobs/index.js';
import { DelayedError, RateLimitError, UnrecoverableError, Worker, type Job } from 'bullmq';
import type { RedisClient } from '../redis/redis.js';
import { ApiError } from '../api/errors.js';
import { JOB_LOCK_MS, KEYLESS_RETURN_MS } from '../policy.js';
import type { JobName } from '../outcomes.js';
import { isSettled, type RunClaim } from '../store/importStore.js';
import { createRowProtocol, type RowProtocol, type RowProtocolOptions } from '../rows/protocol.js';
import { reasonOf } from '../api/decision.js';
import { RowUnrunnableError, type BatchPort, type HandOn, type RowJobPort } from '../rows/interfaces.js';
import {
  BATCH_JOB,
  ROWS_QUEUE,
  RowBatchDataSchema,
  RowJobDataSchema,
  enqueueFinalize,
  isRowJob,
  rowJobOptions,
  type Queues,
  type RowBatchData,
  type RowJobData,
  type RowQueueData,
  type RowQueueJobName,
} from '../queue/queues.js';
import { requeueStranded } from '../queue/requeue.js';
import { fullJitterBackoff } from '../backoff.js';
import { createRunGate } from '../import/runGate.js';
import type { Notifier } from '../notify/notifier.js';

/** The protocol's options (passed on to it, but for the two this file makes), and what BullMQ's side needs. */
export interface RowWorkerOptions extends Omit<RowProtocolOptions, 'onComplete' | 'runGate'> {
  connection: RedisClient;
  prefix: string;
  /** Rows of this process talking to the API at once (and jobs held at once). */
  concurrency: number;
  queues: Queues;
  /** The job lock (SUBSYNC_JOB_LOCK_MS); a dead worker's jobs are taken over after it. Default JOB_LOCK_MS. */
  lockMs?: number;
  /** Told `import.paused` when a canary pauses its import. */
  notifier?: Pick<Notifier, 'notify'>;
}

/** Ends a worker's name in the fleet (BullMQ's client name) when it cannot open card data. */
export const NO_CARD_KEY_SUFFIX = ':no-card-key';

/**
 * Runs the rows queue: BullMQ's side of the row protocol (src/rows/), which
 * owns a row's life. This file parses a job's data, calls the protocol, and
 * maps what it answers to BullMQ: a retry to a thrown error (BullMQ's
 * backoff waits the protocol's delay), a 429 or a closing worker's batch to
 * a RateLimitError (no attempt spent), a row settled without success to an
 * UnrecoverableError (its job stays failed for the dashboard), a card job
 * on a worker without the key to a delayed job.
 */
export function startRowWorker(options: RowWorkerOptions): Worker<RowQueueData, unknown, RowQueueJobName> {
  const { connection, prefix, queues, lockMs, notifier, ...passed } = options;
  const { store, logger } = options;
  // Paused, held (a canary) and cancelling imports (src/import/runGate.ts).
  const gate = createRunGate({ redis: connection, store, queues, logger, notifier });
  const protocol: RowProtocol = createRowProtocol({
    ...passed,
    onComplete: (importId, round) => enqueueFinalize(queues, importId, round),
    runGate: gate,
  });
  /**
   * A run's claim: the key of its job's lock and the token BullMQ holds there for this run. A run whose
   * lock has gone to another (its job stalled and was taken over, or Redis lost the fetch) marks nothing.
   */
  const claimOf = (job: Job, token: string | undefined): RunClaim | undefined =>
    token === undefined || job.id === undefined ? undefined : { token, lockKey: `${prefix}:${ROWS_QUEUE}:${job.id}:lock` };
  // The protocol's delay for a retry, read by the backoff strategy when BullMQ schedules the next attempt.
  const delays = new WeakMap<Error, number>();

  /** A row job: a row's retries (it failed in its batch), a failed row kept for the dashboard, a dashboard retry. */
  async function processRow(job: Job<RowJobData, unknown, JobName>, token: string | undefined): Promise<string> {
    const data = RowJobDataSchema.parse(job.data);
    const port: RowJobPort = {
      // A failed row's job keeps nothing of its batch (so a retry starts afresh), and its cells without the CVC.
      sealSecrets: async (_row, token) => job.updateData({ importId: data.importId, row: data.row, ...(token === undefined ? {} : { secrets: token }) }),
    };
    const result = await unrunnable(() =>
      protocol.runRow(
        {
          name: job.name,
          importId: data.importId,
          row: data.row,
          jobId: job.id,
          secrets: data.secrets,
          after: data.after,
          verdict: data.verdict,
          attemptsMade: job.attemptsMade,
          attempts: job.opts.attempts ?? 1,
          claim: claimOf(job, token),
          readBackOnly: data.readBackOnly,
        },
        port,
      ),
    );
    switch (result.kind) {
      case 'settled':
        return result.status;
      case 'already':
        return `already ${result.status}`;
      case 'taken':
        throw new UnrecoverableError('row settled by another run meanwhile');
      case 'rate-limited':
        // Fetching stays on: the budget, not the queue, holds requests back.
        throw Worker.RateLimitError();
      case 'again':
        // Nothing was sent (a held or claimed mark): back to wait, no attempt spent.
        throw Worker.RateLimitError();
      case 'held':
        // Paused, or after a canary still running: back, delayed, without spending an attempt.
        await gate.hold(job, token, data.importId);
        throw new DelayedError();
      case 'retry':
        delays.set(result.error, result.delayMs);
        throw result.error;
      case 'failed':
        throw new UnrecoverableError(result.outcome.note ?? result.outcome.status);
    }
  }

  /** A batch job: its rows side by side, each settled as it succeeds, or handed to a job of its own. */
  async function processBatch(job: Job<RowBatchData, unknown, typeof BATCH_JOB>, token: string | undefined): Promise<string> {
    const data = RowBatchDataSchema.parse(job.data);
    const held = heldSecrets(job, data);
    const port: BatchPort = {
      sealSecrets: async (row, token) => held.set(row, token),
      handOn: async (handOn) => {
        await queues.rows.add(handOn.name, rowJobDataOf(handOn), { ...rowJobOptions(handOn.importId, handOn.row, handOn.attempts), delay: handOn.delayMs });
      },
    };
    const result = await unrunnable(() => protocol.runBatch({ importId: data.importId, rows: data.rows, jobId: job.id, secrets: data.secrets, claim: claimOf(job, token) }, port));
    // Closing: the batch goes back to wait, without spending an attempt, for the rows it did not start.
    if (result.held > 0) {
      // Paused, or after a canary still running: the batch goes back, delayed, without spending an attempt.
      await gate.hold(job, token, data.importId);
      throw new DelayedError();
    }
    if (result.deferred > 0) throw Worker.RateLimitError();
    return `${result.settled} settled, ${result.handed} handed to row jobs, ${result.skipped} already settled`;
  }

  /**
   * A batch whose last attempt failed (or that failed unrecoverably) hands
   * its unsettled rows on to row jobs of their own, as a failing row always
   * is, instead of leaving them without a job. When even that fails (Redis
   * refusing writes), the batch fails and the sweep queues its rows later.
   */
  async function processBatchOrHandOn(job: Job<RowBatchData, unknown, typeof BATCH_JOB>, token: string | undefined): Promise<string> {
    try {
      return await processBatch(job, token);
    } catch (error) {
      const last = error instanceof UnrecoverableError || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      if (!last || !(error instanceof Error) || error instanceof RateLimitError || error instanceof DelayedError) throw error;
      options.failures?.report('batch job', error);
      let handed: number;
      try {
        const data = RowBatchDataSchema.parse(job.data);
        const [record, entries] = await Promise.all([store.getImport(data.importId), store.getRows(data.importId, data.rows)]);
        if (!record) throw error;
        const stranded = data.rows.flatMap((row, i) => {
          const entry = entries[i];
          const secrets = data.secrets?.[String(row)];
          return entry && !isSettled(entry.status) ? [{ row, entry, ...(secrets === undefined ? {} : { secrets }) }] : [];
        });
        handed = (await requeueStranded(store, queues, record, stranded, canReadBack)).queued.length;
      } catch {
        // Left to the sweep, which finds the failed batch and queues its rows.
        throw error;
      }
      return `last attempt failed (${reasonOf(error)}): ${handed} rows handed to row jobs`;
    }
  }

  /**
   * A worker without SUBSYNC_CARD_KEY cannot open card cells: it puts a job
   * that holds some back, delayed and without spending an attempt, for a
   * worker that has the key.
   */
  async function returnCardJob(job: Job<RowQueueData, unknown, RowQueueJobName>, token: string | undefined): Promise<boolean> {
    if (options.keyring) return false;
    const secrets = job.data.secrets;
    if (secrets === undefined || (typeof secrets === 'object' && Object.keys(secrets).length === 0)) return false;
    await job.moveToDelayed(Date.now() + KEYLESS_RETURN_MS, token);
    return true;
  }

  if (!options.keyring) logger.warn('this worker has no SUBSYNC_CARD_KEY: it will leave card and sign-up rows to workers that have the key');
  const worker = new Worker<RowQueueData, unknown, RowQueueJobName>(
    ROWS_QUEUE,
    async (job, token) => {
      if (await returnCardJob(job, token)) throw new DelayedError();
      return isRowJob(job) ? processRow(job, token) : processBatchOrHandOn(job as Job<RowBatchData, unknown, typeof BATCH_JOB>, token);
    },
    {
      // Stored on each job it runs (job.processedBy): which process on which machine ran a row; and
      // in its client name, which tells `import --wait` whether any worker of the fleet can open card data.
      name: `${hostname()}:${process.pid}${options.keyring ? '' : NO_CARD_KEY_SUFFIX}`,
      connection,
      prefix,
      concurrency: options.concurrency,
      lockDuration: lockMs ?? JOB_LOCK_MS,
      // Stalled jobs (their worker died) are looked for twice per lock period,
      // and always run again: the ledger makes a re-run safe (it reconciles), so
      // no stall count may fail a row behind the ledger's back.
      stalledInterval: Math.round((lockMs ?? JOB_LOCK_MS) / 2),
      maxStalledCount: Number.MAX_SAFE_INTEGER,
      settings: {
        // The protocol's decision (src/api/decision.ts) chose the delay; a row job handed on by its
        // batch counts the batch's attempt too, so its backoff keeps growing.
        backoffStrategy: (attemptsMade, _type, err, job) =>
          (err && delays.get(err)) ?? fullJitterBackoff(attemptsMade + afterOf(job?.data), err instanceof ApiError ? err.retryAfterMs : undefined, options.backoff),
      },
    },
  );
  worker.on('error', (error) => (options.failures ? options.failures.report('row worker', error) : logger.error({ err: error }, 'row worker error')));
  worker.on('closing', () => protocol.stopStarting());
  return worker;
}

/** What the protocol cannot run, BullMQ must not run again. */
async function unrunnable<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof RowUnrunnableError) throw new UnrecoverableError(error.message);
    throw error;
  }
}

/**
 * A card batch's sealed cells, let go row by row: once a row has settled
 * or has a job of its own, its cells leave the batch's data (a CVC is kept
 * only until its row has an outcome). Rows that finish together share one
 * write; a failed write fails the row's batch, which runs again and forgets
 * again.
 */
function heldSecrets(job: Job<RowBatchData, unknown, typeof BATCH_JOB>, data: RowBatchData) {
  const remaining: Record<string, string> = { ...data.secrets };
  let writing: Promise<void> | undefined;
  let dirty = false;
  let failure: { error: unknown } | undefined;
  const write = async (): Promise<void> => {
    try {
      while (dirty) {
        dirty = false;
        await job.updateData({ ...data, secrets: { ...remaining } });
      }
    } catch (error) {
      failure ??= { error };
    } finally {
      writing = undefined;
    }
  };
  return {
    async set(row: number, token: string | undefined): Promise<void> {
      const key = String(row);
      if (remaining[key] !== token) {
        if (token === undefined) delete remaining[key];
        else remaining[key] = token;
        dirty = true;
        writing ??= write();
      }
      await writing;
      if (failure) throw failure.error;
    },
  };
}

/** A row job's data for a row its batch hands on. */
function rowJobDataOf(handOn: HandOn): RowJobData {
  const { importId, row, secrets, after, verdict } = handOn;
  return {
    importId,
    row,
    ...(after === undefined ? {} : { after }),
    ...(verdict === undefined ? {} : { verdict: { status: verdict.status, note: verdict.note, ...(verdict.candidates ? { candidates: [...verdict.candidates] } : {}) } }),
    ...(secrets === undefined ? {} : { secrets }),
  };
}

const afterOf = (data: unknown): number => {
  const parsed = RowJobDataSchema.safeParse(data);
  return parsed.success ? (parsed.data.after ?? 0) : 0;
};
