import { Queue } from 'bullmq';
import type { RedisClient } from './redis.js';
import { z } from 'zod';
import { JOB_NAMES, type JobName } from '../outcomes.js';
import { RETRY_DEFAULTS } from '../policy.js';

/** The queue that carries every API-calling row job (DESIGN section 1). */
export const ROWS_QUEUE = 'subsync-rows';
/** File-level work: finalising imports, exports. */
export const CONTROL_QUEUE = 'subsync-control';

/** A row job's data: which row of which import, and its card fields sealed (never plaintext). */
export const RowJobDataSchema = z.object({
  importId: z.string(),
  row: z.number().int().min(1),
  /** AES-256-GCM token of the row's card cells by column index (src/cards/crypto.ts). */
  secrets: z.string().optional(),
});
export type RowJobData = z.infer<typeof RowJobDataSchema>;

export const JobNameSchema = z.enum(JOB_NAMES);

export const FinalizeJobDataSchema = z.object({ importId: z.string(), round: z.number().int() });
export type FinalizeJobData = z.infer<typeof FinalizeJobDataSchema>;
export const FINALIZE_JOB = 'import.finalize';

/** Seven days, the default retention of failed jobs so the dashboard can retry them. */
export const FAILED_RETENTION_SECONDS = 7 * 24 * 3600;

/** Deterministic job id of a row: the same row of the same import is never queued twice. */
export const rowJobId = (importId: string, row: number): string => `${importId}-${row}`;
/** Deterministic id of the finalize job of one round of an import. */
export const finalizeJobId = (importId: string, round: number): string => `finalize-${importId}-${round}`;

/** BullMQ options of a row job: the ledger is the record, so a completed job is removed at once. */
export function rowJobOptions(importId: string, row: number, attempts: number = RETRY_DEFAULTS.attempts) {
  return {
    jobId: rowJobId(importId, row),
    attempts,
    backoff: { type: 'full-jitter' },
    removeOnComplete: true,
    removeOnFail: { age: FAILED_RETENTION_SECONDS },
  };
}

/** The queues one process talks to. */
export interface Queues {
  rows: Queue<RowJobData, unknown, JobName>;
  control: Queue;
  close(): Promise<void>;
}

/** Opens the queues; `onError` hears their connection errors (a cut connection reconnects by itself). */
export function openQueues(connection: RedisClient, prefix: string, onError: (error: Error) => void = () => undefined): Queues {
  const rows = new Queue<RowJobData, unknown, JobName>(ROWS_QUEUE, { connection, prefix });
  const control = new Queue(CONTROL_QUEUE, { connection, prefix });
  rows.on('error', onError);
  control.on('error', onError);
  return {
    rows,
    control,
    async close() {
      await control.close();
      await rows.close();
    },
  };
}

/** Bounds of the retry backoff; defaults in src/policy.ts. */
export interface BackoffBounds {
  baseMs: number;
  capMs: number;
}
export const DEFAULT_BACKOFF: BackoffBounds = { baseMs: RETRY_DEFAULTS.backoffBaseMs, capMs: RETRY_DEFAULTS.backoffCapMs };

/**
 * Exponential backoff with full jitter: a random delay in [0, min(cap, base ·
 * 2^(n-1))), so retrying workers spread out; never sooner than a Retry-After.
 */
export function fullJitterBackoff(attemptsMade: number, retryAfterMs: number | undefined, bounds: BackoffBounds = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const ceiling = Math.min(bounds.capMs, bounds.baseMs * 2 ** Math.max(0, attemptsMade - 1));
  return Math.max(retryAfterMs ?? 0, Math.floor(random() * ceiling));
}

/** Queues the writing of an import's results for `round`; adding it twice is a no-op. */
export async function enqueueFinalize(queues: Queues, importId: string, round: number): Promise<void> {
  await queues.control.add(FINALIZE_JOB, { importId, round } satisfies FinalizeJobData, {
    jobId: finalizeJobId(importId, round),
    removeOnComplete: true,
    removeOnFail: { age: FAILED_RETENTION_SECONDS },
  });
}
