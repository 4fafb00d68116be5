import { hostname } from 'node:os';
import { DelayedError, UnrecoverableError, Worker, type Job } from 'bullmq';
import type { RedisClient } from '../redis/redis.js';
import type { Logger } from 'pino';
import { PROCESSORS, READ_BACKS, type RowContext, type RowOutcome } from '../../jobs/index.js';
import type { ApiClient } from '../api/client.js';
import { ApiError, ApiRateLimitedError, ApiTimeoutError, withoutSecrets } from '../api/errors.js';
import { openSecrets, sealSecrets, type CardKeyring } from '../cards/crypto.js';
import type { ColumnPlan } from '../csv/columns.js';
import { secretValues } from '../csv/rows.js';
import { planOf } from '../store/plan.js';
import { scrubSecrets } from '../secrets.js';
import { JOB_LOCK_MS, KEYLESS_RETURN_MS } from '../policy.js';
import { SUCCESS_STATUSES, type ImportKind, type JobName } from '../outcomes.js';
import { observeRetry, observeRowSettled } from '../metrics.js';
import { NO_FIGURES, isSettled, type ImportRecord, type ImportStore, type LedgerEntry, type RunFigures } from '../store/importStore.js';
import type { CustomerFinder } from '../customers/finder.js';
import type { NameSearch } from '../customers/nameSearch.js';
import type { CustomerGuard } from '../customers/guard.js';
import type { ApiBudget } from '../redis/budget.js';
import { coalesce, Slots } from './coalesce.js';
import { countedApi, noCalls, type CallFigures } from './figures.js';
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
import { fullJitterBackoff, type BackoffBounds } from '../backoff.js';
import type { FailureLog } from '../failureLog.js';

export interface RowWorkerOptions {
  connection: RedisClient;
  prefix: string;
  /** Rows of this process talking to the API at once (and jobs held at once). */
  concurrency: number;
  store: ImportStore;
  queues: Queues;
  api: ApiClient;
  budget: ApiBudget;
  keyring: CardKeyring | undefined;
  logger: Logger;
  /** Retry backoff bounds; default DEFAULT_BACKOFF (src/policy.ts RETRY_DEFAULTS). */
  backoff?: BackoffBounds;
  /** The job lock (SUBSYNC_JOB_LOCK_MS); a dead worker's jobs are taken over after it. Default JOB_LOCK_MS. */
  lockMs?: number;
  /** The duplicate guard of creates (imports without `--allow-duplicates`). */
  guard?: CustomerGuard;
  /** How upserts find their customers. */
  finder?: CustomerFinder;
  /** Searches by name, shared per import (when there is no index to ask). */
  names?: NameSearch;
  /** Repeated failures (a Redis outage) logged once per class and interval, not once per row. */
  failures?: FailureLog;
}

/** Ends a worker's name in the fleet (BullMQ's client name) when it cannot open card data. */
export const NO_CARD_KEY_SUFFIX = ':no-card-key';

/** An import as a worker needs it: its record and column plan (both fixed once enqueued). */
interface KnownImport {
  record: ImportRecord;
  plan: ColumnPlan;
}

/** One attempt at a row: what it needs, whichever job runs it. */
interface RowRun {
  name: JobName;
  importId: string;
  row: number;
  known: KnownImport;
  /** The ledger entry before this attempt. */
  stored: LedgerEntry;
  cells: readonly string[];
  log: () => Logger;
  /** A batch's row: when the worker is closing, it does not start, and goes back with its batch. */
  deferrable: boolean;
}

/** How one attempt ended. `entry` is the row's ledger entry as this attempt left it. */
type Attempt =
  | { kind: 'outcome'; entry: LedgerEntry; status: RowOutcome['status'] }
  | { kind: 'error'; error: unknown; entry: LedgerEntry; ctx: RowContext }
  /** Another run settled the row meanwhile. */
  | { kind: 'taken' }
  /** The worker is closing: the row was not started. */
  | { kind: 'deferred' };

/** Thrown by markSent when another run settled the row meanwhile: this attempt stops before sending. */
class RowTakenError extends Error {}

/** What a batch job did with each of its rows. */
type BatchRowResult = 'settled' | 'handed' | 'skipped' | 'deferred';

/**
 * Runs the rows queue: batch jobs (the rows of an import as the producer
 * enqueued them, a block of consecutive rows each) and row jobs (a row that
 * needs retries or failed, or a retry from the dashboard), one processor per
 * job name (jobs/) around which this file keeps the ledger, the API figures,
 * the fleet-wide 429 handling and the settle-once rule.
 *
 * A batch runs its rows side by side and settles each that succeeds. A row
 * that fails is handed to a row job of its own: retries then happen in one
 * place, that job's attempts, with its backoff; a row that failed for good
 * keeps its job, failed, for the dashboard. A 429 costs no attempt: the row
 * waits out the fleet's budget and goes again.
 *
 * Ledger writes of rows that finish in the same turn of the event loop go to
 * Redis in one script call (src/workers/coalesce.ts), and whatever jobs are
 * active, at most `concurrency` rows of this process are out at the API.
 */
export function startRowWorker(options: RowWorkerOptions): Worker<RowQueueData, unknown, RowQueueJobName> {
  const { store, queues, api, budget, logger } = options;
  const slots = new Slots(options.concurrency);
  // Set when the worker starts closing: batches start no more rows, so a
  // SIGTERM waits for the requests out, not for every row the batches hold.
  let closing = false;
  // Import records do not change once enqueued (but for counts, kept elsewhere).
  const imports = new Map<string, Promise<KnownImport | undefined>>();
  const importOf = (importId: string): Promise<KnownImport | undefined> => {
    let known = imports.get(importId);
    if (!known) {
      known = store.getImport(importId).then((record) => (record ? { record, plan: planOf(record) } : undefined));
      imports.set(importId, known);
      void known.then((k) => k ?? imports.delete(importId));
    }
    return known;
  };

  const writeUnsettled = coalesce<{ row: number; entry: LedgerEntry }, boolean>((importId, rows) => store.updateUnsettledRows(importId, rows));
  const settleRow = coalesce<{ row: number; entry: LedgerEntry; figures: RunFigures; kind: ImportKind }, boolean>(async (importId, rows) => {
    const figures: RunFigures = { ...NO_FIGURES };
    for (const r of rows) addTo(figures, r.figures);
    const result = await store.settleRows(importId, rows, figures);
    rows.forEach((r, i) => {
      if (result.applied[i] && isSettled(r.entry.s)) observeRowSettled(r.kind, r.entry.s);
    });
    if (result.complete) await enqueueFinalize(queues, importId, result.round);
    return result.applied;
  });

  /**
   * A failed attempt that will be retried: with a failure log, one line per
   * class of failure and interval (a Redis outage fails every row the same
   * way), and a line per row, without its stack, at debug level only.
   */
  function reportAttempt(error: unknown, attempt: number, message: string, log: () => Logger): void {
    if (!options.failures) {
      log().info({ err: error, attempt }, message);
      return;
    }
    options.failures.report('row attempt', error);
    if (logger.isLevelEnabled('debug')) log().debug({ attempt, reason: describe(error) }, message);
  }

  /** One attempt at a row in one of this process's slots: the processor, with the ledger kept around it. */
  async function attemptRow(run: RowRun, figures: CallFigures): Promise<Attempt> {
    const { importId, row, stored, known } = run;
    let entry: LedgerEntry = { ...stored, a: stored.a + 1, t: Date.now() };
    let sentNow = false;
    const write = async (next: LedgerEntry): Promise<boolean> => {
      entry = next;
      return writeUnsettled(importId, { row, entry });
    };
    // A plain create marks itself `sent` while it is next but a few in line for a slot, so the
    // request leaves when the slot frees (markSent then waits for that write to be in Redis).
    let premarked: Promise<boolean> | undefined;
    const guard = known.record.options.allowDuplicates ? undefined : options.guard;
    // (Not while a guard runs first: a row it settles as `exists` must not have looked sent.)
    const premark =
      PREMARKED.has(run.name) && stored.s === 'pending' && guard === undefined
        ? () => {
            premarked = write({ ...entry, s: 'sent' });
            // A failed write is told by markSent, which awaits it; until then it is not unhandled.
            premarked.catch(() => undefined);
          }
        : undefined;
    const ctx: RowContext = {
      importId,
      row,
      plan: known.plan,
      cells: run.cells,
      options: { expiryFormat: known.record.options.expiryFormat, match: known.record.options.match },
      api: countedApi(api, figures),
      budget,
      previous: stored.s === 'sent' ? 'sent' : 'pending',
      preexisting: stored.pre,
      markSent: async () => {
        sentNow = true;
        if (!(await (premarked ?? write({ ...entry, s: 'sent' })))) throw new RowTakenError();
      },
      recordPreexisting: async (ids) => {
        await write({ ...entry, pre: [...ids] });
      },
      guard,
      finder: options.finder,
      names: options.names,
      get log() {
        return run.log();
      },
    };
    try {
      const outcome = await slots.run(async () => (closing && run.deferrable ? undefined : PROCESSORS[run.name](ctx)), premark);
      if (outcome === undefined) {
        // Marked early but never sent: back as it was, so its next run does not read back for nothing.
        if (premarked && (await premarked)) await write(stored);
        return { kind: 'deferred' };
      }
      return { kind: 'outcome', entry: outcomeEntry(entry, outcome), status: outcome.status };
    } catch (caught) {
      if (caught instanceof RowTakenError) return { kind: 'taken' };
      // The row's own card number, CVC and password leave no trace in what follows: the ledger's
      // reason, the job's failed reason and stack, the logs (src/secrets.ts).
      const error = withoutSecrets(caught, secretValues(known.plan, run.cells));
      // This attempt's request cannot have been applied: nothing to reconcile next time.
      if ((sentNow || premarked) && error instanceof ApiError && !error.maybeApplied) await write({ ...entry, s: 'pending' });
      return { kind: 'error', error, entry, ctx };
    }
  }

  /** The outcome of a row whose last attempt failed for good (its retries ran out, or the API refused it). */
  async function conclude(name: JobName, failure: Extract<Attempt, { kind: 'error' }>): Promise<LedgerEntry> {
    const { error, entry, ctx } = failure;
    const transient = error instanceof ApiError ? error.transient : true;
    const reason = describe(error);
    if (entry.s !== 'sent') return { ...entry, s: 'failed', e: transient ? `retries ran out: ${reason}` : reason };
    // The attempt's context: its calls count into the attempt's figures.
    return slots.run(() => lastReadBack(name, ctx, entry, error, reason));
  }

  /** A row job: a row's retries (it failed in its batch), a failed row kept for the dashboard, a dashboard retry. */
  async function processRow(job: Job<RowJobData, unknown, JobName>): Promise<string> {
    const data = RowJobDataSchema.parse(job.data);
    const { importId, row } = data;
    // A child logger costs a redaction setup: made only when a line is written.
    let rowLogger: Logger | undefined;
    const log = (): Logger => (rowLogger ??= logger.child({ importId, row, jobId: job.id }));
    const [known, stored] = await Promise.all([importOf(importId), store.getRow(importId, row)]);
    if (!known || !stored) throw new UnrecoverableError(`import ${importId} row ${row} has no record or ledger entry`);
    const { record, plan } = known;

    if (data.verdict) {
      // Its batch found the row failed for good: this job settles it and stays, failed, for the dashboard,
      // its CVC gone (before settling: the settle may complete the import, whose finaliser drops the rest).
      await job.updateData(keptData(data, plan, options.keyring));
      const settled: LedgerEntry = { ...stored, ...data.verdict };
      if (!isSettled(stored.s)) await settleRow(importId, { row, entry: settled, figures: NO_FIGURES, kind: record.kind });
      log().info({ status: settled.s }, 'row settled without success');
      throw new UnrecoverableError(data.verdict.e);
    }
    if (isSettled(stored.s)) return `already ${stored.s}`;

    const after = data.after ?? 0;
    const attempt = after + job.attemptsMade + 1;
    const maxAttempts = after + (job.opts.attempts ?? 1);
    if (attempt > 1) observeRetry(record.kind);
    const figures: CallFigures = noCalls();
    const runFigures = (): RunFigures => ({ ...figures, retries: attempt > 1 ? 1 : 0 });
    // Settling adds the figures in its own round trip; a run that does not settle adds them at the end.
    let figuresAdded = false;
    try {
      const result = await attemptRow({ name: job.name, importId, row, known, stored, cells: openCells(stored, data.secrets, options.keyring), log, deferrable: false }, figures);
      // (A row job's run is never deferred: only a batch's rows are.)
      if (result.kind === 'taken' || result.kind === 'deferred') throw new UnrecoverableError('row settled by another run meanwhile');
      if (result.kind === 'outcome') {
        await settleRow(importId, { row, entry: result.entry, figures: runFigures(), kind: record.kind });
        figuresAdded = true;
        if (logger.isLevelEnabled('debug')) log().debug({ status: result.status }, 'row settled');
        return result.status;
      }
      const { error } = result;
      if (error instanceof ApiRateLimitedError) {
        // The fleet's budget slows everyone down (and waits out the Retry-After
        // when it must); this row goes back to wait without spending an attempt,
        // and takes its turn from the budget like any other. Fetching stays on:
        // the budget, not the queue, holds requests back.
        await budget.block(error.retryAfterMs);
        throw Worker.RateLimitError();
      }
      const transient = error instanceof ApiError ? error.transient : true;
      if (transient && attempt < maxAttempts) {
        // The attempt counts in the ledger (results.csv's _attempts), whatever the next one does.
        await writeUnsettled(importId, { row, entry: result.entry });
        reportAttempt(error, attempt, 'row attempt failed; retrying', log);
        throw error;
      }
      const settled = await conclude(job.name, result);
      // The job stays (failed, for the dashboard): its CVC goes now that the row has an outcome.
      // Before settling: the settle may complete the import, whose finaliser drops the rest.
      await job.updateData(keptData(data, plan, options.keyring));
      await settleRow(importId, { row, entry: settled, figures: runFigures(), kind: record.kind });
      figuresAdded = true;
      log().info({ status: settled.s, reason: settled.e }, 'row settled without success');
      throw new UnrecoverableError(settled.e);
    } finally {
      if (!figuresAdded) await store.addFigures(importId, runFigures());
    }
  }

  /** A batch job: its rows side by side, each settled as it succeeds, or handed to a job of its own. */
  async function processBatch(job: Job<RowBatchData, unknown, typeof BATCH_JOB>): Promise<string> {
    const data = RowBatchDataSchema.parse(job.data);
    const { importId } = data;
    const [known, entries] = await Promise.all([importOf(importId), store.getRows(importId, data.rows)]);
    if (!known || entries.some((e) => e === undefined)) throw new UnrecoverableError(`import ${importId} batch ${job.id ?? '?'} has no record or ledger entries`);
    const held = data.secrets ? heldSecrets(job, data) : undefined;
    // Figures of attempts that settled nothing here (a 429, a row handed on); settled rows carry their own.
    const unsettled: RunFigures = { ...NO_FIGURES };
    // Every row ends before the batch does, even when one fails (a Redis error): the batch runs
    // again only once none of its rows is still running here.
    const ended = await Promise.allSettled(
      data.rows.map(async (row, i): Promise<BatchRowResult> => {
        const forget = async (): Promise<void> => held?.forget(row);
        return batchRow(job, known, row, entries[i] as LedgerEntry, data.secrets?.[String(row)], unsettled, forget);
      }),
    );
    await store.addFigures(importId, unsettled);
    const failure = ended.find((e) => e.status === 'rejected');
    if (failure) throw failure.reason;
    const results = ended.map((e) => (e.status === 'fulfilled' ? e.value : 'skipped'));
    const count = (r: BatchRowResult): number => results.filter((x) => x === r).length;
    // Closing: the batch goes back to wait, without spending an attempt, for the rows it did not start.
    if (count('deferred') > 0) throw Worker.RateLimitError();
    return `${count('settled')} settled, ${count('handed')} handed to row jobs, ${count('skipped')} already settled`;
  }

  /**
   * One row of a batch. `forget` drops the row's sealed card cells from the
   * batch's data: called once the row's outcome is known, and awaited before
   * it settles (so a settled import's batches hold no card data), or once
   * its own job holds them; a row not started keeps them for the batch's
   * next run.
   */
  async function batchRow(
    job: Job<RowBatchData, unknown, typeof BATCH_JOB>,
    known: KnownImport,
    row: number,
    stored: LedgerEntry,
    token: string | undefined,
    unsettled: RunFigures,
    forget: () => Promise<void>,
  ): Promise<BatchRowResult> {
    const { importId } = job.data;
    const { record } = known;
    const name = stored.j;
    if (isSettled(stored.s) || name === null) {
      await forget();
      return 'skipped';
    }
    let rowLogger: Logger | undefined;
    const log = (): Logger => (rowLogger ??= logger.child({ importId, row, jobId: job.id }));
    const attempts = record.options.attempts;
    const addRowJob = async (extra: Pick<RowJobData, 'after' | 'verdict'>, delay = 0): Promise<BatchRowResult> => {
      const data: RowJobData = { importId, row, ...extra, ...(token === undefined ? {} : { secrets: token }) };
      const ownAttempts = extra.verdict ? attempts : Math.max(1, attempts - (extra.after ?? 0));
      await queues.rows.add(name, data, { ...rowJobOptions(importId, row, ownAttempts), delay });
      await forget();
      return 'handed';
    };
    const handOff = async (entry: LedgerEntry, extra: Pick<RowJobData, 'after' | 'verdict'>, delay = 0): Promise<BatchRowResult> => {
      // Marked first: a batch run again leaves the row to its job, and re-adds the job (a no-op when it is there).
      if (!(await writeUnsettled(importId, { row, entry: { ...entry, h: 1 } }))) {
        await forget();
        return 'skipped';
      }
      return addRowJob(extra, delay);
    };
    // The row has a job of its own (handed on by an earlier run of this batch whose worker died, or
    // retried from the dashboard): that job owns it, and its entry. Adding the job again is a no-op
    // while it is there, and makes sure it is.
    if (stored.h === 1) return addRowJob({ after: 1 });

    const cells = openCells(stored, token, options.keyring);
    let current = stored;
    for (;;) {
      const figures: CallFigures = noCalls();
      const result = await attemptRow({ name, importId, row, known, stored: current, cells, log, deferrable: true }, figures);
      if (result.kind === 'deferred') {
        addTo(unsettled, figures);
        return 'deferred';
      }
      if (result.kind === 'taken') {
        addTo(unsettled, figures);
        await forget();
        return 'skipped';
      }
      if (result.kind === 'outcome') {
        await forget();
        await settleRow(importId, { row, entry: result.entry, figures: { ...figures, retries: 0 }, kind: record.kind });
        if (logger.isLevelEnabled('debug')) log().debug({ status: result.status }, 'row settled');
        return 'settled';
      }
      const { error } = result;
      if (error instanceof ApiRateLimitedError) {
        // As in a row job: the budget holds the fleet back, and the row goes again without spending an attempt.
        addTo(unsettled, figures);
        await budget.block(error.retryAfterMs);
        current = result.entry;
        continue;
      }
      const transient = error instanceof ApiError ? error.transient : true;
      if (transient && attempts > 1) {
        addTo(unsettled, figures);
        reportAttempt(error, 1, 'row attempt failed; retrying in a job of its own', log);
        return handOff(result.entry, { after: 1 }, fullJitterBackoff(1, error instanceof ApiError ? error.retryAfterMs : undefined, options.backoff));
      }
      const settled = await conclude(name, result);
      if (isSettled(settled.s) && SUCCESS_STATUSES.has(settled.s)) {
        await forget();
        await settleRow(importId, { row, entry: settled, figures: { ...figures, retries: 0 }, kind: record.kind });
        return 'settled';
      }
      addTo(unsettled, figures);
      return handOff(result.entry, { verdict: { s: settled.s === 'needs-review' ? 'needs-review' : 'failed', e: settled.e ?? describe(error), cand: settled.cand } });
    }
  }

  /**
   * A card batch's sealed cells, let go row by row: once a row has settled
   * or has a job of its own, its cells leave the batch's data (a CVC is
   * kept only until its row has an outcome).
   */
  function heldSecrets(job: Job<RowBatchData, unknown, typeof BATCH_JOB>, data: RowBatchData) {
    const remaining = { ...data.secrets };
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
      /**
       * Drops a row's cells and waits until the batch's data in Redis is
       * without them (rows that finish together share one write); a failed
       * write fails the row's batch, which runs again and forgets again.
       */
      async forget(row: number): Promise<void> {
        if (String(row) in remaining) {
          delete remaining[String(row)];
          dirty = true;
          writing ??= write();
        }
        await writing;
        if (failure) throw failure.error;
      },
    };
  }

  /**
   * A batch whose last attempt failed (or that failed unrecoverably) hands
   * its unsettled rows on to row jobs of their own, as a failing row always
   * is, instead of leaving them without a job. When even that fails (Redis
   * refusing writes), the batch fails and the sweep queues its rows later.
   */
  async function processBatchOrHandOn(job: Job<RowBatchData, unknown, typeof BATCH_JOB>): Promise<string> {
    try {
      return await processBatch(job);
    } catch (error) {
      const last = error instanceof UnrecoverableError || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      if (!last || !(error instanceof Error) || error.name === 'RateLimitError' || error.name === 'DelayedError') throw error;
      options.failures?.report('batch job', error);
      let handed: number;
      try {
        const data = RowBatchDataSchema.parse(job.data);
        const [known, entries] = await Promise.all([importOf(data.importId), store.getRows(data.importId, data.rows)]);
        if (!known) throw error;
        const stranded = data.rows.flatMap((row, i) => {
          const entry = entries[i];
          const secrets = data.secrets?.[String(row)];
          return entry && !isSettled(entry.s) ? [{ row, entry, ...(secrets === undefined ? {} : { secrets }) }] : [];
        });
        handed = (await requeueStranded(store, queues, known.record, stranded)).queued.length;
      } catch {
        // Left to the sweep, which finds the failed batch and queues its rows.
        throw error;
      }
      return `last attempt failed (${describe(error)}): ${handed} rows handed to row jobs`;
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
      return isRowJob(job) ? processRow(job) : processBatchOrHandOn(job as Job<RowBatchData, unknown, typeof BATCH_JOB>);
    },
    {
      // Stored on each job it runs (job.processedBy): which process on which machine ran a row; and
      // in its client name, which tells `import --wait` whether any worker of the fleet can open card data.
      name: `${hostname()}:${process.pid}${options.keyring ? '' : NO_CARD_KEY_SUFFIX}`,
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
        // A row job handed on by its batch counts the batch's attempt too, so its backoff keeps growing.
        backoffStrategy: (attemptsMade, _type, err, job) =>
          fullJitterBackoff(attemptsMade + afterOf(job?.data), err instanceof ApiError ? err.retryAfterMs : undefined, options.backoff),
      },
    },
  );
  worker.on('error', (error) => (options.failures ? options.failures.report('row worker', error) : logger.error({ err: error }, 'row worker error')));
  worker.on('closing', () => {
    closing = true;
  });
  return worker;
}

/**
 * Jobs whose processor marks a pending row `sent` first thing (customerCreate,
 * signup): marking it a little early, while it waits for a slot, changes
 * nothing they do.
 */
const PREMARKED: ReadonlySet<JobName> = new Set(['customer.create', 'signup']);

function addTo(total: RunFigures, figures: CallFigures & Partial<RunFigures>): void {
  total.apiCalls += figures.apiCalls;
  total.searches += figures.searches;
  total.reads += figures.reads;
  total.rateLimited += figures.rateLimited;
  total.retries += figures.retries ?? 0;
}

const afterOf = (data: unknown): number => {
  const parsed = RowJobDataSchema.safeParse(data);
  return parsed.success ? (parsed.data.after ?? 0) : 0;
};

/** The row's cells, its card cells restored from the sealed job data. */
function openCells(stored: LedgerEntry, token: string | undefined, keyring: CardKeyring | undefined): string[] {
  const cells = [...stored.c];
  if (token === undefined) return cells;
  if (!keyring) throw new UnrecoverableError('this row carries card data, and this worker has no SUBSYNC_CARD_KEY to open it');
  for (const [index, value] of Object.entries(openSecrets(keyring, token))) cells[Number(index)] = value;
  return cells;
}

/**
 * The data a failed row job keeps for the dashboard: its card cells without
 * the CVC (kept only until the row has a definite outcome;
 * the card number stays sealed until the import settles, for a retry), and
 * nothing of its batch, so a retry starts afresh.
 */
function keptData(data: RowJobData, plan: ColumnPlan, keyring: CardKeyring | undefined): RowJobData {
  const { secrets, after: _after, verdict: _verdict, ...rest } = data;
  if (secrets === undefined || !keyring) return rest;
  const kept = Object.fromEntries(Object.entries(openSecrets(keyring, secrets)).filter(([index]) => !/CVCode$/.test(plan.paths[Number(index)] ?? '')));
  return Object.keys(kept).length > 0 ? { ...rest, secrets: sealSecrets(keyring, kept) } : rest;
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

/** The reason stored for a row: the API's words when it gave some; never a request body, nor anything card-shaped. */
function describe(error: unknown): string {
  if (error instanceof ApiError) return scrubSecrets(error.apiMessage ? `${error.apiMessage} (${error.code}${error.status ? ` ${error.status}` : ''})` : error.message);
  return scrubSecrets(error instanceof Error ? error.message : String(error));
}
