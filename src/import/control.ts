/**
 * Cancel, pause and resume of one import, and the end of its canary: the
 * operator's commands and the dashboard's buttons call these; the run state
 * they change is src/import/runState.ts.
 *
 * A cancel is two steps. First the import's state becomes `cancelling`: from
 * then on the ledger's scripts refuse to mark any of its pending rows sent
 * (or claimed), and a worker that finds one settles it `cancelled`. Then the
 * cancel settles, itself, every row that is pending and unclaimed. A row is
 * decided in one script call either way, so it is cancelled or sent, never
 * both and never neither; rows already sent (or claimed by a worker) finish
 * as they would have.
 */
import type { Logger } from 'pino';
import { SubsyncError } from '../errors.js';
import type { Notifier } from '../notify/notifier.js';
import { SUCCESS_STATUSES } from '../outcomes.js';
import { RowBatchDataSchema, batchJobId, batchOf, batchRowsOf, enqueueFinalize, type Queues } from '../queue/queues.js';
import { dropBacklog } from '../queue/feeder.js';
import type { RedisClient } from '../redis/redis.js';
import { isSettled, type ImportStore } from '../store/importStore.js';
import { ImportNotFoundError } from './status.js';
import { cancelRun, concludeCanaryRun, pauseRun, readRunState, resumeRun, type CanaryVerdict, type RunState } from './runState.js';

/** The command cannot do that to this import now (resume a cancelled one, say): exit 64, with the reason. */
export class RunControlError extends SubsyncError {
  readonly code = 'RUN_CONTROL_REFUSED';
}

/** Rows settled per script call of a cancel. */
const CANCEL_CHUNK = 500;

export interface ControlDeps {
  store: ImportStore;
  queues: Queues;
  redis: RedisClient;
  logger?: Logger;
  /** Told `import.paused` and `import.cancelled` (queued, never waited on). */
  notifier?: Pick<Notifier, 'notify'>;
  /** Who acts (an audit actor), for the notification. */
  actor?: string;
}

/** What `cancel` did. */
export interface CancelResult {
  importId: string;
  /** The run state before the cancel (`finished`: the import had already settled, and nothing changed). */
  before: RunState | 'finished';
  /** `cancelling` while rows already sent finish; `cancelled` once every row has an outcome. */
  state: RunState | 'finished';
  /** Rows this cancel settled as `cancelled`. */
  cancelled: number;
  /** Rows left to the workers holding them (sent, or claimed): they finish as they would have. */
  inFlight: number;
}

/** The import's record, or ImportNotFoundError; `finished` when its results are written or every row settled. */
async function recordOf(store: ImportStore, importId: string) {
  const record = await store.getImport(importId);
  if (!record) throw new ImportNotFoundError(importId);
  const settled = (await store.counts(importId)).settled;
  const finished = record.finishedAt !== undefined || (record.total !== undefined && settled >= record.total);
  return { record, settled, finished };
}

/**
 * Cancels an import: its unsent rows settle `cancelled` (see the file's
 * comment). Run again, it settles what became cancellable since (rows a
 * producer was still enqueuing). A finished import is left as it is.
 */
export async function cancelImport(deps: ControlDeps, importId: string): Promise<CancelResult> {
  const { store, queues, redis } = deps;
  const { record, finished } = await recordOf(store, importId);
  const current = (await readRunState(redis, store.keys, importId)).state;
  if (finished && current !== 'cancelling') return { importId, before: current === 'cancelled' ? 'cancelled' : 'finished', state: current === 'cancelled' ? 'cancelled' : 'finished', cancelled: 0, inFlight: 0 };
  const change = await cancelRun(redis, store.keys, importId);
  if (change.before === 'cancelled') return { importId, before: 'cancelled', state: 'cancelled', cancelled: 0, inFlight: 0 };
  if (change.before !== 'cancelling') await deps.notifier?.notify({ event: 'import.cancelled', importId, reason: 'cancelled by the operator', ...(deps.actor ? { actor: deps.actor } : {}) });

  let cancelled = 0;
  const rows = await store.unclaimedPendingRows(importId);
  for (let i = 0; i < rows.length; i += CANCEL_CHUNK) {
    const chunk = rows.slice(i, i + CANCEL_CHUNK);
    const result = await store.settleCancelled(importId, chunk, 'unclaimed');
    cancelled += result.applied.filter(Boolean).length;
    if (result.complete) await enqueueFinalize(queues, importId, result.round);
  }
  await dropIdleBatches(store, queues, importId, batchRowsOf(record), rows);
  // The batches still waiting for their turn (their rows were never sent, so all settled cancelled above) go too.
  await dropBacklog(queues.redis, queues.prefix, importId);
  const after = await recordOf(store, importId);
  const inFlight = after.record.total === undefined ? 0 : after.record.total - after.settled;
  deps.logger?.info({ importId, cancelled, inFlight }, 'import cancelled: its unsent rows settled as cancelled');
  return { importId, before: change.before, state: after.finished && inFlight === 0 ? 'cancelled' : 'cancelling', cancelled, inFlight };
}

/**
 * Removes the waiting or delayed batch jobs whose rows have all settled:
 * they would only run to find nothing to do, and a card import's batches
 * hold sealed card data until then. A job that a worker has just taken is
 * left to it (it finds its rows settled).
 */
async function dropIdleBatches(store: ImportStore, queues: Queues, importId: string, batchRows: number, rows: readonly number[]): Promise<void> {
  for (const block of new Set(rows.map((row) => batchOf(row, batchRows)))) {
    const job = await queues.rows.getJob(batchJobId(importId, block));
    if (!job || !['waiting', 'delayed', 'prioritized'].includes(await job.getState())) continue;
    const data = RowBatchDataSchema.safeParse(job.data);
    if (!data.success) continue;
    const entries = await store.getRows(importId, data.data.rows);
    if (entries.every((entry) => entry !== undefined && isSettled(entry.status))) await job.remove().catch(() => undefined);
  }
}

/** What `pause` or `resume` did. */
export interface PauseResult {
  importId: string;
  before: RunState | 'finished';
  state: RunState | 'finished';
  /** Whether the state changed (false: it already was so). */
  changed: boolean;
  /** Resume: jobs put back while paused or held, run again now. */
  promoted?: number;
}

/** Pauses an import: workers start none of its rows until `resume` (requests already out finish). */
export async function pauseImport(deps: ControlDeps, importId: string, reason?: string): Promise<PauseResult> {
  const { store, redis } = deps;
  const { finished } = await recordOf(store, importId);
  const current = (await readRunState(redis, store.keys, importId)).state;
  if (current === 'cancelling' || current === 'cancelled') throw new RunControlError(`import ${importId} is ${current}; there is nothing to pause`);
  if (finished) return { importId, before: 'finished', state: 'finished', changed: false };
  const change = await pauseRun(redis, store.keys, importId, reason);
  if (change.before === 'cancelling' || change.before === 'cancelled') throw new RunControlError(`import ${importId} is ${change.before}; there is nothing to pause`);
  deps.logger?.info({ importId, changed: change.changed }, 'import paused');
  if (change.changed) await deps.notifier?.notify({ event: 'import.paused', importId, reason: reason ?? 'paused by the operator', ...(deps.actor ? { actor: deps.actor } : {}) });
  return { importId, before: change.before, state: change.after, changed: change.changed };
}

/** Runs a paused import on (and lets go of a canary's hold): the jobs put back while paused run now. */
export async function resumeImport(deps: ControlDeps, importId: string): Promise<PauseResult> {
  const { store, redis } = deps;
  const { finished } = await recordOf(store, importId);
  const status = await readRunState(redis, store.keys, importId);
  if (status.state === 'cancelling' || status.state === 'cancelled') {
    throw new RunControlError(`import ${importId} is ${status.state} and cannot run on; import its unprocessed.csv (beside its results) to send the rows it did not send`);
  }
  if (finished) return { importId, before: 'finished', state: 'finished', changed: false };
  const change = await resumeRun(redis, store.keys, importId);
  if (change.before === 'cancelling' || change.before === 'cancelled') throw new RunControlError(`import ${importId} is ${change.before} and cannot run on`);
  const promoted = await promoteHeld(deps, importId);
  deps.logger?.info({ importId, promoted }, 'import resumed');
  return { importId, before: change.before, state: change.after, changed: change.before !== 'running' || status.holdFrom !== undefined, promoted };
}

/**
 * Runs at once the jobs that workers put back, delayed, while the import
 * was paused or held (each put back records its id). One put back after
 * this read waits out its delay ({@link HELD_RETURN_MS}) instead.
 */
export async function promoteHeld(deps: Pick<ControlDeps, 'store' | 'queues' | 'redis'>, importId: string): Promise<number> {
  const key = deps.store.keys.heldJobs(importId);
  const reply = await deps.redis.multi().smembers(key).del(key).exec();
  const members = reply?.[0]?.[1];
  const ids = Array.isArray(members) ? members.filter((id): id is string => typeof id === 'string') : [];
  let promoted = 0;
  for (const id of ids) {
    const job = await deps.queues.rows.getJob(id);
    if (!job || !(await job.isDelayed())) continue;
    try {
      await job.promote();
      promoted++;
    } catch {
      // Taken meanwhile (its delay ran out): it runs anyway.
    }
  }
  return promoted;
}

/** Records that a job of the import was put back because it is paused or held, so a resume runs it at once. */
export async function recordHeld(redis: RedisClient, store: ImportStore, importId: string, jobId: string): Promise<void> {
  await redis.sadd(store.keys.heldJobs(importId), jobId);
}

/** What ending a canary did. */
export interface CanaryResult {
  verdict: CanaryVerdict;
  /** Canary rows, and how many of them did not succeed. */
  rows: number;
  failures: number;
  /** Why the import paused, for the operator. */
  reason?: string;
}

/**
 * Ends an import's canary once its rows have all settled: the rest runs
 * (its held jobs promoted), or, when more than the canary's bound did not
 * succeed, the import pauses itself and says why. Called whenever a canary
 * row settles (and by the producer, whose invalid rows settle at once); only
 * one caller ends it.
 */
export async function concludeCanary(deps: Pick<ControlDeps, 'store' | 'queues' | 'redis' | 'logger' | 'notifier'>, importId: string): Promise<CanaryResult> {
  const { store, redis } = deps;
  const status = await readRunState(redis, store.keys, importId);
  if (status.holdFrom === undefined || status.canaryRows === undefined) return { verdict: 'none', rows: 0, failures: 0 };
  const record = await store.getImport(importId);
  if (!record) return { verdict: 'none', rows: 0, failures: 0 };
  // A file shorter than its canary: the canary is the whole file, known once the producer has counted it.
  if (record.total === undefined && (await store.rowCount(importId)) < status.canaryRows) return { verdict: 'none', rows: 0, failures: 0 };
  const rows = Math.min(status.canaryRows, record.total ?? status.canaryRows);
  const entries = await store.getRows(importId, Array.from({ length: rows }, (_, i) => i + 1));
  if (entries.some((entry) => entry === undefined || !isSettled(entry.status))) return { verdict: 'none', rows, failures: 0 };
  const failures = entries.filter((entry) => entry !== undefined && isSettled(entry.status) && !SUCCESS_STATUSES.has(entry.status)).length;
  const bound = status.canaryMaxFailures ?? 0;
  const reason = `canary: ${failures} of the first ${rows} rows did not succeed (more than ${bound} allowed); \`subsync resume ${importId}\` runs the rest, \`subsync cancel ${importId}\` stops it`;
  const verdict = await concludeCanaryRun(redis, store.keys, importId, failures, reason);
  if (verdict === 'passed') await promoteHeld(deps, importId);
  if (verdict === 'paused') {
    deps.logger?.warn({ importId, failures, rows, bound }, 'import paused by its canary');
    await deps.notifier?.notify({ event: 'import.paused', importId, reason });
  }
  if (verdict === 'passed') deps.logger?.info({ importId, failures, rows, bound }, 'canary passed: the rest of the import runs');
  return { verdict, rows, failures, ...(verdict === 'paused' ? { reason } : {}) };
}
