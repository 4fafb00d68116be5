import { Queue, type Job } from 'bullmq';
import type { RedisClient } from '../redis/redis.js';
import { z } from 'zod';
import { JOB_NAMES, type JobName } from '../outcomes.js';
import { RETRY_DEFAULTS } from '../policy.js';

/** The queue that carries every API-calling row job. */
export const ROWS_QUEUE = 'subsync-rows';
/** File-level work: finalising imports, exports. */
export const CONTROL_QUEUE = 'subsync-control';

/**
 * A row job's data: which row of which import, and its card fields sealed
 * (never plaintext). A row has a job of its own when its batch handed it one
 * (a retry, or a failed row kept for the dashboard), or when it is retried or
 * edited from the dashboard.
 */
export const RowJobDataSchema = z.object({
  importId: z.string(),
  row: z.number().int().min(1),
  /** AES-256-GCM token of the row's card cells by column index (src/cards/crypto.ts). */
  secrets: z.string().optional(),
  /** Attempts the row made in its batch before this job took it over. */
  after: z.number().int().min(0).optional(),
  /** Its card cells were lost with its job: it reads back, and settles `failed` when nothing is found; it never sends. */
  readBackOnly: z.literal(true).optional(),
  /**
   * The row failed for good in its batch: this job settles it so, without a
   * request, and is kept, failed, for the dashboard's retry (with the card
   * number, sealed, for card rows).
   */
  verdict: z.object({ status: z.enum(['failed', 'needs-review']), note: z.string(), candidates: z.array(z.string()).optional() }).optional(),
});
export type RowJobData = z.infer<typeof RowJobDataSchema>;

/**
 * A batch job: the valid rows of one block of ROWS_PER_BATCH consecutive
 * rows of an import, run side by side, with one ledger read and the ledger
 * writes of rows that finish together in one script call. Per row, BullMQ's
 * own handling of a job (fetch, lock, finish) cost about as much as the
 * request itself.
 */
export const RowBatchDataSchema = z.object({
  importId: z.string(),
  rows: z.array(z.number().int().min(1)),
  /** Sealed card cells by row (as RowJobData.secrets). */
  secrets: z.record(z.string(), z.string()).optional(),
});
export type RowBatchData = z.infer<typeof RowBatchDataSchema>;

/** The name of batch jobs on the rows queue (a batch may mix job names: each row's is in its ledger entry). */
export const BATCH_JOB = 'rows.batch';
export type RowQueueJobName = JobName | typeof BATCH_JOB;
export type RowQueueData = RowJobData | RowBatchData;

/**
 * Rows per batch job of an import enqueued now: a block of consecutive row
 * numbers, so a re-run producer makes the same batches. Each import's record
 * keeps the size it was enqueued with (`batchRows`), and everything that
 * maps a row to its batch reads it there: a fleet that changes this mid-way
 * still finds the batches of imports already queued. Against 25, batches of
 * 50 cost 4-7% less CPU a row and a tenth less Redis at 20 ms of service
 * latency (BullMQ's fetch, lock and finish of a job are paid once per batch).
 */
export const ROWS_PER_BATCH = 50;
/** Rows per batch job of an import whose record names none: one enqueued before the size was recorded. */
export const LEGACY_ROWS_PER_BATCH = 25;
/** Rows per batch job of an import, by its record. */
export const batchRowsOf = (record: { batchRows?: number | undefined }): number => record.batchRows ?? LEGACY_ROWS_PER_BATCH;
/** The block a row's batch is, in an import of `batchRows`-row batches ({@link batchRowsOf}). */
export const batchOf = (row: number, batchRows: number): number => Math.floor((row - 1) / batchRows);

export const JobNameSchema = z.enum(JOB_NAMES);

export const FinalizeJobDataSchema = z.object({ importId: z.string(), round: z.number().int() });
export type FinalizeJobData = z.infer<typeof FinalizeJobDataSchema>;
export const FINALIZE_JOB = 'import.finalize';

/** Seven days, the default retention of failed jobs so the dashboard can retry them. */
export const FAILED_RETENTION_SECONDS = 7 * 24 * 3600;

/** Deterministic job id of a row: the same row of the same import is never queued twice. */
export const rowJobId = (importId: string, row: number): string => `${importId}-${row}`;
/** Deterministic id of a batch job: a block of rows is never queued twice either. */
export const batchJobId = (importId: string, block: number): string => `${importId}-b${block}`;
/** Deterministic id of the finalize job of one round of an import. */
export const finalizeJobId = (importId: string, round: number): string => `finalize-${importId}-${round}`;

/** BullMQ options of a row job: the ledger is the record, so a completed job is removed at once. */
export function rowJobOptions(importId: string, row: number, attempts: number = RETRY_DEFAULTS.attempts) {
  return rowsQueueJobOptions(rowJobId(importId, row), attempts);
}

/**
 * The BullMQ priority of batch jobs. A worker takes jobs without a priority
 * (the wait list) before prioritized ones, so every row job (a row's
 * retries, handed on by its batch or promoted after its backoff; a retry or
 * an edit from the dashboard or `subsync retry`; a stranded row queued again)
 * runs before any batch of fresh rows, never behind them. Batches are few in
 * the queue (the feeder, src/queue/feeder.ts, releases them as the budget
 * frees), all at this one priority, so among themselves they keep the order
 * the feeder released them in.
 */
export const BATCH_PRIORITY = 1000;

/** BullMQ options of a batch job: its rows' attempts are their own (a failing row gets a job of its own). */
export function batchJobOptions(importId: string, block: number, attempts: number = RETRY_DEFAULTS.attempts) {
  return { ...rowsQueueJobOptions(batchJobId(importId, block), attempts), priority: BATCH_PRIORITY };
}

function rowsQueueJobOptions(jobId: string, attempts: number) {
  return { jobId, attempts, backoff: { type: 'full-jitter' }, removeOnComplete: true, removeOnFail: { age: FAILED_RETENTION_SECONDS } };
}

/** The queues one process talks to. */
export interface Queues {
  rows: Queue<RowQueueData, unknown, RowQueueJobName>;
  control: Queue;
  /** The Redis connection and key prefix of the queues (the feeder's backlogs live beside them). */
  redis: RedisClient;
  prefix: string;
  close(): Promise<void>;
}

/** Opens the queues; `onError` hears their connection errors (a cut connection reconnects by itself). */
export function openQueues(connection: RedisClient, prefix: string, onError: (error: Error) => void = () => undefined): Queues {
  const rows = new Queue<RowQueueData, unknown, RowQueueJobName>(ROWS_QUEUE, { connection, prefix });
  const control = new Queue(CONTROL_QUEUE, { connection, prefix });
  rows.on('error', onError);
  control.on('error', onError);
  return {
    rows,
    control,
    redis: connection,
    prefix,
    async close() {
      await control.close();
      await rows.close();
    },
  };
}

/** A row's own job, if it has one (batch jobs have other ids). */
export async function getRowJob(queues: Queues, importId: string, row: number): Promise<Job<RowJobData, unknown, RowQueueJobName> | undefined> {
  const job = await queues.rows.getJob(rowJobId(importId, row));
  return job && isRowJob(job) ? job : undefined;
}

export const isRowJob = (job: Job<RowQueueData, unknown, RowQueueJobName>): job is Job<RowJobData, unknown, JobName> => job.name !== BATCH_JOB;

/** Queues the writing of an import's results for `round`; adding it twice is a no-op. */
export async function enqueueFinalize(queues: Queues, importId: string, round: number): Promise<void> {
  await queues.control.add(FINALIZE_JOB, { importId, round } satisfies FinalizeJobData, {
    jobId: finalizeJobId(importId, round),
    removeOnComplete: true,
    removeOnFail: { age: FAILED_RETENTION_SECONDS },
  });
}
