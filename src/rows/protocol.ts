import type { Logger } from 'pino';
import { ROW_JOBS, type RowContext } from '../../jobs/index.js';
import type { ApiClient } from '../api/client.js';
import { withoutSecrets } from '../api/errors.js';
import type { CardKeyring } from '../cards/crypto.js';
import type { ColumnPlan } from '../csv/columns.js';
import { secretColumnIndexes, secretValues } from '../csv/rows.js';
import type { CustomerFinder } from '../customers/finder.js';
import type { CustomerGuard, LearnedCreate } from '../customers/guard.js';
import type { NameSearch } from '../customers/nameSearch.js';
import type { FailureLog } from '../failureLog.js';
import { observeRetry, observeRowSettled } from '../metrics.js';
import { SUCCESS_STATUSES, type ImportKind, type JobName, type RowOutcome, type RowStatus } from '../outcomes.js';
import type { ApiBudget } from '../redis/budget.js';
import type { BackoffBounds } from '../backoff.js';
import { planOf } from '../store/plan.js';
import { NO_FIGURES, type ImportRecord, type ImportStore, type MarkResult, type RunClaim, type RunFigures } from '../store/importStore.js';
import type { MarkSync } from '../redis/durable.js';
import { entryWith, isSettled, outcomeOf, withOutcome, type LedgerEntry } from '../store/ledger.js';
import { coalesce, GATHER_MS, SETTLE_GATHER_MS, slottedApi, Slots } from './coalesce.js';
import { decide, mayHaveAppliedNote, notFoundNote, provenNotApplied, reasonOf, type Decision } from '../api/decision.js';
import { countedApi, noCalls, type CallFigures } from './figures.js';
import { RowUnrunnableError, type BatchInput, type BatchPort, type BatchResult, type RowJobInput, type RowJobPort, type RowJobResult, type RowRunGate } from './interfaces.js';
import { keptSecrets, openCells } from './sealed.js';
import { CARD_DATA_GONE } from '../queue/requeue.js';
import { MarkInDoubtError } from '../store/rollback.js';
import { SubsyncError } from '../errors.js';

export interface RowProtocolOptions {
  store: ImportStore;
  api: ApiClient;
  budget: Pick<ApiBudget, 'block'>;
  keyring: CardKeyring | undefined;
  logger: Logger;
  /** Rows of this process talking to the API at once, whatever the jobs. */
  concurrency: number;
  /** Retry backoff bounds; default DEFAULT_BACKOFF (src/policy.ts RETRY_DEFAULTS). */
  backoff?: BackoffBounds;
  /** The duplicate guard of creates (imports without `--allow-duplicates`). */
  guard?: CustomerGuard;
  /** How upserts find their customers. */
  finder?: CustomerFinder;
  /** Searches by name, shared per import (when there is no index to ask). */
  names?: NameSearch;
  /** Repeated failures (a Redis outage) logged once per class and interval, not once per row. */
  failures?: FailureLog;
  /**
   * Makes a flush's sent marks durable before their requests leave, where
   * Redis allows (WAITAOF, WAIT: src/redis/durable.ts); one wait per flush,
   * group-committed. Default: none.
   */
  markSync?: MarkSync;
  /** Resolves once no rollback is being handled by this process (src/store/rollback.ts): a held mark waits for it. */
  rollbackSettled?: () => Promise<void>;
  /** A card row's sealed cells read again from its unchanged file, when Redis lost them with its job (src/import/cardCells.ts). */
  reseal?: (record: ImportRecord, row: number) => Promise<string | undefined>;
  /**
   * The rollback watch's epoch (src/store/rollback.ts): a create whose row was marked sent under another
   * value (a connection to Redis lost since, which may have taken the mark with its server) does not leave.
   */
  markEpoch?: () => number;
  /** Told when a settle completed an import's round: its results are due. */
  onComplete(importId: string, round: number): Promise<void>;
  /** Paused, held (a canary) and cancelling imports; without it every import runs. */
  runGate?: RowRunGate;
}

/** Every import runs: the gate of a protocol given none. */
const ALWAYS_GO: RowRunGate = { gate: async () => 'go', cancelRow: async () => false, refused: async () => false, settled: async () => undefined };

export interface RowProtocol {
  /** One run of a row's own job. */
  runRow(input: RowJobInput, port: RowJobPort): Promise<RowJobResult>;
  /** One run of a batch: its rows side by side. */
  runBatch(input: BatchInput, port: BatchPort): Promise<BatchResult>;
  /** From now on, batches start no more rows (the process is closing): those go back with their batch. */
  stopStarting(): void;
}

/** An import as a run needs it: its record and column plan (both fixed once enqueued). */
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
  /** A batch's row: when the process is closing, it does not start, and goes back with its batch. */
  deferrable: boolean;
  /** The run's claim (its job's lock and token): marks and writes are fenced by it. */
  claim: RunClaim | undefined;
  /** Its card cells are gone: it may read back, never send (see RowJobInput). */
  readBackOnly?: boolean;
}

/** How one attempt ended. `entry` is the row's ledger entry as this attempt left it. */
type Attempt =
  /** `learned`: a create the guard learns with the row's settle. */
  | { kind: 'outcome'; entry: LedgerEntry; status: RowOutcome['status']; learned?: LearnedCreate }
  | { kind: 'error'; error: Error; entry: LedgerEntry; ctx: RowContext }
  /** Another run settled the row meanwhile. */
  | { kind: 'taken' }
  /** This run no longer holds its job (another run has it): it stops, and touches nothing of the job's. */
  | { kind: 'fenced' }
  /** The process is closing: the row was not started. */
  | { kind: 'deferred' }
  /**
   * Nothing was sent: the mark was held (a rollback is being handled) or
   * found the row `sent` by a run this one cannot take over from what it
   * read; the row is read again, and reads back.
   */
  | { kind: 'recheck'; held: boolean }
  /** The import is paused (or held by its canary): the row was not started. */
  | { kind: 'held' }
  /** The import is cancelling and the ledger refused to let this row be sent: it settled `cancelled`. */
  | { kind: 'cancelled' };

/** Thrown by markSent when another run settled the row meanwhile: this attempt stops before sending. */
class RowTakenError extends SubsyncError {
  readonly code = 'ROW_TAKEN';
}

/** Thrown by markSent when this run no longer holds its job's lock: this attempt stops before sending. */
class RowFencedError extends SubsyncError {
  readonly code = 'ROW_FENCED';
}

/** Thrown by markSent when the mark was held or claimed (see Attempt's `recheck`): this attempt stops before sending. */
class RowRecheckError extends SubsyncError {
  readonly code = 'ROW_MARK_HELD';
  constructor(readonly held: boolean) {
    super(held ? 'the sent mark was held while a rollback of Redis is handled' : 'the row was sent by another run meanwhile');
  }
}

/** Thrown by markSent in a read-back-only run: nothing was found, and the row's cells cannot be sent. */
class CardCellsGoneError extends SubsyncError {
  readonly code = 'ROW_CARD_CELLS_GONE';
}

/** Rechecks of one row in one run before it is handed to a job of its own (another live run holds it, or the hold lasts). */
const MAX_RECHECKS = 3;
/** A held mark waits this long before the row is read again (the hold lasts while a rollback is handled). */
const HOLD_RECHECK_MS = 250;

/** What a mark refused tells the attempt. */
function refusal(result: MarkResult): Error | undefined {
  switch (result) {
    case 'marked':
      return undefined;
    case 'settled':
      return new RowTakenError('another run settled the row meanwhile');
    case 'fenced':
      // This run lost its job (another run has it now): nothing is sent, and the job's data is the other run's.
      return new RowFencedError("this run no longer holds its job's lock");
    case 'claimed':
      return new RowRecheckError(false);
    case 'held':
      return new RowRecheckError(true);
  }
}

/** The items of one coalesced flush, grouped by the claim of the run that wrote them (the scripts take one claim per call). */
function byClaim<T extends { claim: RunClaim | undefined }>(items: readonly T[]): Array<{ claim: RunClaim | undefined; indexes: number[] }> {
  const groups = new Map<string, { claim: RunClaim | undefined; indexes: number[] }>();
  items.forEach((item, i) => {
    const key = item.claim ? `${item.claim.lockKey}\n${item.claim.token}` : '';
    let group = groups.get(key);
    if (!group) groups.set(key, (group = { claim: item.claim, indexes: [] }));
    group.indexes.push(i);
  });
  return [...groups.values()];
}

type BatchRowResult = 'settled' | 'handed' | 'skipped' | 'deferred' | 'held';

/**
 * The life of a row, from `pending` to settled, whatever runs its jobs:
 *
 * - An attempt runs the row's processor (jobs/); each of its requests
 *   takes one of `concurrency` slots for as long as it is out, and only
 *   then: the Redis round trips around it (the guard's claim, the `sent`
 *   mark, the settle) are made outside, so a slot goes from one answer to
 *   the next request. At most ADMITTED_PER_SLOT × `concurrency` rows are
 *   running at once. A processor about to send a create marks the row
 *   `sent` first, so a crash after that reads back instead of creating
 *   again; a failure that proves the request was not applied puts it back
 *   to `pending`.
 * - Settling is once per row (a Lua script refuses a settled row): the
 *   first run to settle wins, and a run whose `sent` mark is refused stops
 *   before sending (taken).
 * - After a failed attempt, `decide` (src/api/decision.ts) says what
 *   next: wait for the budget without spending an attempt, retry with
 *   backoff, or settle (failed, read back, needs review).
 * - A batch runs its rows side by side and settles each that succeeds; a
 *   row that fails is handed to a job of its own, which owns the row's
 *   retries from then on (and a batch run again leaves it to that job).
 * - A `sent` mark is a claim of the run (its job's lock and token): refused
 *   when the run lost its job (fenced: it stops, and leaves the job's data
 *   alone), when another live run holds the row, or when the row became
 *   `sent` after this run read it (it reads the row again, and reads back);
 *   held while a rollback of Redis is handled (src/store/rollback.ts). The
 *   marks of a flush are made durable (WAITAOF, WAIT) before their requests
 *   leave. A card row without its sealed cells reads them again from its
 *   import's unchanged file (`reseal`); failing that, it never sends: it
 *   reads back.
 *
 * Ledger writes of rows that finish in the same turn of the event loop go
 * to Redis in one script call (coalesce.ts). docs/row-protocol.md tells
 * the states, who writes what, and the decision as a table.
 */
export function createRowProtocol(options: RowProtocolOptions): RowProtocol {
  const { store, api, budget, logger } = options;
  // Requests out at once, and rows running at once (getting ready, waiting for a slot, settling).
  const slots = new Slots(options.concurrency);
  const admitted = new Slots(options.concurrency * ADMITTED_PER_SLOT);
  const slotted = slottedApi(api, slots, options.markEpoch);
  // Ledger writes, and the guard's claims before a create, are gathered for GATHER_MS only while rows
  // wait for a slot (their wait costs no request).
  const gather = (): number => (slots.waiting > 0 ? GATHER_MS : 0);
  // Settles are gathered longer: no request waits behind them, only their job's end, and at 20-50 ms of
  // service latency the answers come spread out, so a short window settled a few rows per script call.
  const gatherSettles = (): number => (slots.waiting > 0 ? SETTLE_GATHER_MS : 0);
  const gate = options.runGate ?? ALWAYS_GO;
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

  // Unsettled writes of one turn, one script call per run's claim: a run that lost its lock writes nothing.
  const writeUnsettledRows = coalesce<{ row: number; entry: LedgerEntry; claim: RunClaim | undefined }, boolean>(async (importId, rows) => {
    const written: boolean[] = new Array<boolean>(rows.length).fill(false);
    await Promise.all(
      byClaim(rows).map(async ({ claim, indexes }) => {
        const results = await store.updateUnsettledRows(importId, indexes.map((i) => rows[i] as (typeof rows)[number]), claim);
        indexes.forEach((i, j) => (written[i] = results[j] === true));
      }),
    );
    return written;
  }, gather);
  const writeUnsettled = (importId: string, item: { row: number; entry: LedgerEntry }, claim: RunClaim | undefined): Promise<boolean> => writeUnsettledRows(importId, { ...item, claim });
  // Sent marks of one turn: one script call per run's claim, then one wait that makes them all durable
  // (WAITAOF, WAIT) before any of their requests leaves.
  const markRows = coalesce<{ row: number; entry: LedgerEntry; expect: 'pending' | 'sent'; claim: RunClaim | undefined }, MarkResult>(async (importId, rows) => {
    const results: MarkResult[] = new Array<MarkResult>(rows.length).fill('settled');
    await Promise.all(
      byClaim(rows).map(async ({ claim, indexes }) => {
        const group = indexes.map((i) => rows[i] as (typeof rows)[number]);
        // Without a claim (a test's own runner), a plain write: no fence.
        const marked = claim
          ? await store.markSent(importId, group, claim)
          : (await store.updateUnsettledRows(importId, group.map((r) => ({ row: r.row, entry: entryWith(r.entry, { status: 'sent' }) })))).map((ok): MarkResult => (ok ? 'marked' : 'settled'));
        indexes.forEach((i, j) => (results[i] = marked[j] ?? 'settled'));
      }),
    );
    if (options.markSync && results.includes('marked')) {
      const synced = await options.markSync.sync();
      if (synced.short) {
        // The batch goes on: rollback detection stays behind it. Told once per interval.
        options.failures?.report('durable marks', new Error(`Redis did not confirm the sent marks in time (AOF fsynced: ${synced.aof.asked ? synced.aof.fsynced : 'not asked'}, replicas ${synced.replicas.acknowledged} of ${synced.replicas.asked})`));
      }
    }
    return results;
  }, gather);
  const settleRow = coalesce<{ row: number; entry: LedgerEntry; figures: RunFigures; kind: ImportKind; claim?: RunClaim; learned?: LearnedCreate }, boolean>(async (importId, rows) => {
    const figures: RunFigures = { ...NO_FIGURES };
    for (const r of rows) addTo(figures, r.figures);
    // The guard learns the flush's creates in the same turn as the settle, so both go in one write to Redis.
    const learning = learnCreates(rows);
    const result = await store.settleRows(importId, rows, figures);
    await learning;
    // Counted by kind and status, once per group of the call, not once per row.
    const tally = new Map<string, { kind: ImportKind; status: RowStatus; count: number }>();
    rows.forEach((r, i) => {
      if (result.claimed[i]) {
        // Another live run holds the row's sent claim: its outcome is the one kept. This run's may have created
        // something too (it marked the row before its lock was lost, and Redis then lost that mark): said for review.
        logger.warn(
          { importId, row: r.row, status: r.entry.status, customerId: r.entry.customerId },
          "row settled by a run that no longer held it while another run holds the row: the other run's outcome is kept; if both created, the customer here is a duplicate to review",
        );
      }
      if (!result.applied[i] || !isSettled(r.entry.status)) return;
      const key = `${r.kind} ${r.entry.status}`;
      const seen = tally.get(key);
      if (seen) seen.count++;
      else tally.set(key, { kind: r.kind, status: r.entry.status, count: 1 });
    });
    for (const { kind, status, count } of tally.values()) observeRowSettled(kind, status, count);
    if (result.complete) await options.onComplete(importId, result.round);
    await gate.settled(importId, rows.map((r) => r.row));
    return result.applied;
  }, gatherSettles);

  /**
   * The guard's index learns the customers these rows created, and their
   * claims go. A failure here fails no row: its create happened and its
   * settle says so; its claim, still held, points a later row of the same
   * person at this one's outcome, and the index's next delta read brings
   * the customer.
   */
  async function learnCreates(rows: ReadonlyArray<{ learned?: LearnedCreate }>): Promise<void> {
    const creates: LearnedCreate[] = [];
    for (const r of rows) if (r.learned) creates.push(r.learned);
    if (creates.length === 0 || !options.guard) return;
    try {
      await options.guard.createdAll(creates);
    } catch (error) {
      if (options.failures) options.failures.report('customer index write', error);
      else logger.warn({ err: error }, 'the customer index did not learn created customers; their claims stay until it does');
    }
  }

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
    if (logger.isLevelEnabled('debug')) log().debug({ attempt, reason: reasonOf(error) }, message);
  }

  /** A held mark: waits for this process's rollback handling, and a moment for another's. */
  async function holdOver(): Promise<void> {
    await options.rollbackSettled?.();
    await new Promise((resolve) => setTimeout(resolve, HOLD_RECHECK_MS));
  }

  /** One attempt at a row in one of this process's slots: the processor, with the ledger kept around it. */
  async function attemptRow(run: RowRun, figures: CallFigures): Promise<Attempt> {
    const { importId, row, stored, known } = run;
    let entry: LedgerEntry = entryWith(stored, { attempts: stored.attempts + 1, lastAttemptAt: Date.now() });
    let sentNow = false;
    let learned: LearnedCreate | undefined;
    const write = async (next: LedgerEntry): Promise<boolean> => {
      entry = next;
      return writeUnsettled(importId, { row, entry }, run.claim);
    };
    // The mark: a claim of this run, refused when it no longer holds its job, while a rollback is handled,
    // or when the row is sent by a run it cannot take over from what it read (src/store/importStore.ts).
    const expect = stored.status === 'sent' ? 'sent' : 'pending';
    const mark = (): Promise<MarkResult> => {
      entry = entryWith(entry, { status: 'sent' });
      return markRows(importId, { row, entry, expect, claim: run.claim });
    };
    const job = ROW_JOBS[run.name];
    // A row whose request is never marked sent (an update) is claimed instead, before it starts: a cancel
    // leaves a claimed row to its run, and the ledger refuses the claim once the import is cancelling.
    const claim = !job.marksSentFirst && stored.status === 'pending' && stored.claimed !== true;
    const guard = known.record.options.allowDuplicates ? undefined : options.guard;
    const ctx: RowContext = {
      importId,
      row,
      plan: known.plan,
      cells: run.cells,
      options: { expiryFormat: known.record.options.expiryFormat, match: known.record.options.match },
      api: countedApi(slotted, figures),
      budget,
      previous: stored.status === 'sent' ? 'sent' : 'pending',
      preexisting: stored.preexisting,
      markSent: async () => {
        if (run.readBackOnly) throw new CardCellsGoneError(CARD_DATA_GONE);
        sentNow = true;
        // The row is marked sent before the request leaves, so a crash after this line reconciles instead of re-creating.
        const epoch = options.markEpoch?.();
        const refused = refusal(await mark());
        if (refused) throw refused;
        // Redis lost while the mark was out (or made durable): the mark may be gone with its server.
        if (epoch !== options.markEpoch?.()) throw new MarkInDoubtError();
      },
      recordPreexisting: async (ids) => {
        await write(entryWith(entry, { preexisting: [...ids] }));
      },
      guard,
      ...(guard ? { learnCreated: (create: LearnedCreate) => void (learned = create), gatherMs: gather } : {}),
      finder: options.finder,
      names: options.names,
      get log() {
        return run.log();
      },
    };
    try {
      const outcome = await admitted.run(async () => {
        if (closing && run.deferrable) return undefined;
        // Asked as the row is let in, right before it starts: a pause stops the rows that waited.
        const verdict = await gate.gate(importId, row);
        if (verdict === 'hold') return 'held' as const;
        if (verdict === 'cancel' && stored.status === 'pending') throw new RowTakenError('the import is cancelling: this row is not sent');
        if (claim && !(await write(entryWith(entry, { claimed: true })))) throw new RowTakenError('the claim was refused: the row settled meanwhile, or the import is cancelling');
        return job.process(ctx);
      });
      if (outcome === undefined || outcome === 'held') {
        return { kind: outcome === 'held' ? 'held' : 'deferred' };
      }
      return { kind: 'outcome', entry: withOutcome(entry, outcome), status: outcome.status, learned };
    } catch (caught) {
      // Refused by a cancel (not by a settle elsewhere): the row is cancelled, never sent.
      if (caught instanceof RowTakenError) return (await gate.refused(importId, row, known.record.kind)) ? { kind: 'cancelled' } : { kind: 'taken' };
      if (caught instanceof RowFencedError) return { kind: 'fenced' };
      if (caught instanceof CardCellsGoneError) return { kind: 'outcome', entry: entryWith(entry, { status: 'failed', note: CARD_DATA_GONE }), status: 'failed' };
      if (caught instanceof RowRecheckError) return { kind: 'recheck', held: caught.held };
      // Nothing was sent: the row is read again once the rollback (if it was one) is handled.
      if (caught instanceof MarkInDoubtError) return { kind: 'recheck', held: true };
      // The row's own card number, CVC and password leave no trace in what follows: the ledger's
      // note, the job's failed reason and stack, the logs (src/secrets.ts).
      const error = withoutSecrets(caught, secretValues(known.plan, run.cells));
      // This attempt's request cannot have been applied: nothing to reconcile next time.
      if (sentNow && provenNotApplied(error)) await write(entryWith(entry, { status: 'pending' }));
      return { kind: 'error', error, entry, ctx };
    }
  }

  /**
   * The entry of a row whose last attempt failed and that has no attempt
   * left (or none worth making), as `decision` says. A read-back runs as
   * an admitted row, and its calls count into the attempt's figures.
   */
  async function conclude(name: JobName, failure: Extract<Attempt, { kind: 'error' }>, decision: Exclude<Decision, { kind: 'wait-for-budget' | 'retry' }>): Promise<LedgerEntry> {
    const { entry, ctx } = failure;
    if (decision.kind === 'settle') return entryWith(entry, { status: decision.status, note: decision.note });
    const review = entryWith(entry, { status: 'needs-review', note: decision.kind === 'needs-review' ? decision.note : mayHaveAppliedNote(decision.reason) });
    const readBack = ROW_JOBS[name].readBack;
    if (decision.kind === 'needs-review' || !readBack) return review;
    const { reason } = decision;
    return admitted.run(async () => {
      try {
        const verdict = await readBack({ ...ctx, previous: 'sent' });
        if (verdict) return withOutcome(entry, verdict);
        return entryWith(entry, { status: 'failed', note: notFoundNote(reason) });
      } catch {
        return review;
      }
    });
  }

  /** A row's decision after a failed attempt: whether its create can be read back is its job's. */
  const decideFor = (name: JobName, failure: Extract<Attempt, { kind: 'error' }>, attempt: number, maxAttempts: number): Decision =>
    decide(failure.error, { attempt, maxAttempts, mayHaveApplied: failure.entry.status === 'sent', canReadBack: ROW_JOBS[name].readBack !== undefined, backoff: options.backoff });

  async function runRow(input: RowJobInput, port: RowJobPort): Promise<RowJobResult> {
    const { importId, row } = input;
    // A child logger costs a redaction setup: made only when a line is written.
    let rowLogger: Logger | undefined;
    const log = (): Logger => (rowLogger ??= logger.child({ importId, row, jobId: input.jobId }));
    const [known, stored] = await Promise.all([importOf(importId), store.getRow(importId, row)]);
    if (!known || !stored) throw new RowUnrunnableError(`import ${importId} row ${row} has no record or ledger entry`);
    const { record, plan } = known;

    if (input.verdict) {
      // Its batch found the row failed for good: this job settles it and stays, failed, for the dashboard,
      // its CVC gone (before settling: the settle may complete the import, whose finaliser drops the rest).
      await port.sealSecrets(row, keptSecrets(input.secrets, plan, options.keyring));
      const outcome: RowOutcome = { status: input.verdict.status, note: input.verdict.note, candidates: input.verdict.candidates };
      const settled = withOutcome(stored, outcome);
      if (!isSettled(stored.status)) await settleRow(importId, { row, entry: settled, figures: NO_FIGURES, kind: record.kind });
      log().info({ status: outcome.status }, 'row settled without success');
      return { kind: 'failed', outcome };
    }
    if (isSettled(stored.status)) return { kind: 'already', status: stored.status };
    // A paused (or held) import's row goes back without spending an attempt; a cancelling one's unsent row is cancelled.
    const verdict = await gate.gate(importId, row);
    if (verdict === 'hold') return { kind: 'held' };
    if (verdict === 'cancel' && stored.status === 'pending') {
      return (await gate.cancelRow(importId, row, record.kind)) ? { kind: 'settled', status: 'cancelled' } : { kind: 'taken' };
    }

    const after = input.after ?? 0;
    const attempt = after + input.attemptsMade + 1;
    const maxAttempts = after + input.attempts;
    if (attempt > 1) observeRetry(record.kind);
    const figures: CallFigures = noCalls();
    const runFigures = (): RunFigures => ({ ...figures, retries: attempt > 1 ? 1 : 0 });
    let secrets = input.secrets;
    // Settling adds the figures in its own round trip; a run that does not settle adds them at the end.
    let figuresAdded = false;
    try {
      secrets ??= await resealed(known, row);
      const cells = openCells(stored.cells, secrets, options.keyring);
      // Without its card cells (gone from its job and its file), only a job that can read back runs; another settles failed, saying why.
      const readBackOnly = secrets === undefined && (input.readBackOnly === true || holdsCards(known));
      const result: Attempt =
        readBackOnly && !ROW_JOBS[input.name].readBack
          ? { kind: 'outcome', entry: entryWith(stored, { status: 'failed', note: CARD_DATA_GONE }), status: 'failed' }
          : await attemptRow({ name: input.name, importId, row, known, stored, cells, log, deferrable: false, claim: input.claim, readBackOnly }, figures);
      // (A row job's run is never deferred: only a batch's rows are.)
      if (result.kind === 'taken' || result.kind === 'deferred' || result.kind === 'fenced') return { kind: 'taken' };
      if (result.kind === 'recheck') {
        // Nothing was sent. The job goes again without spending an attempt; its next run reads the row afresh (sent: it reads back).
        if (result.held) await holdOver();
        return { kind: 'again' };
      }
      if (result.kind === 'held') return { kind: 'held' };
      if (result.kind === 'cancelled') return { kind: 'settled', status: 'cancelled' };
      if (result.kind === 'outcome') {
        await settleRow(importId, { row, entry: result.entry, figures: runFigures(), kind: record.kind, claim: input.claim, learned: result.learned });
        figuresAdded = true;
        if (logger.isLevelEnabled('debug')) log().debug({ status: result.status }, 'row settled');
        return { kind: 'settled', status: result.status };
      }
      const decision = decideFor(input.name, result, attempt, maxAttempts);
      if (decision.kind === 'wait-for-budget') {
        // The fleet's budget slows everyone down (and waits out the Retry-After when it must); this row
        // goes back to wait without spending an attempt, and takes its turn from the budget like any other.
        await budget.block(decision.retryAfterMs);
        return { kind: 'rate-limited' };
      }
      if (decision.kind === 'retry') {
        // The attempt counts in the ledger (results.csv's _attempts), whatever the next one does.
        await writeUnsettled(importId, { row, entry: result.entry }, input.claim);
        reportAttempt(result.error, attempt, 'row attempt failed; retrying', log);
        return { kind: 'retry', error: result.error, delayMs: decision.delayMs };
      }
      const settled = await conclude(input.name, result, decision);
      // The job stays (failed, for the dashboard): its CVC goes now that the row has an outcome.
      // Before settling: the settle may complete the import, whose finaliser drops the rest.
      await port.sealSecrets(row, keptSecrets(secrets, plan, options.keyring));
      await settleRow(importId, { row, entry: settled, figures: runFigures(), kind: record.kind, claim: input.claim });
      figuresAdded = true;
      const outcome = outcomeOf(settled);
      if (!outcome) throw new Error(`import ${importId} row ${row}: a concluded row is ${settled.status}`);
      // Read back and found: the row's job ends as any that settled well.
      if (SUCCESS_STATUSES.has(outcome.status)) return { kind: 'settled', status: outcome.status };
      log().info({ status: settled.status, reason: settled.note }, 'row settled without success');
      return { kind: 'failed', outcome };
    } finally {
      if (!figuresAdded) await store.addFigures(importId, runFigures());
    }
  }

  async function runBatch(input: BatchInput, port: BatchPort): Promise<BatchResult> {
    const { importId } = input;
    const [known, entries] = await Promise.all([importOf(importId), store.getRows(importId, input.rows)]);
    if (!known || entries.some((e) => e === undefined)) throw new RowUnrunnableError(`import ${importId} batch ${input.jobId ?? '?'} has no record or ledger entries`);
    // Figures of attempts that settled nothing here (a 429, a row handed on); settled rows carry their own.
    const unsettled: RunFigures = { ...NO_FIGURES };
    // Every row ends before the batch does, even when one fails (a Redis error): the batch runs
    // again only once none of its rows is still running here.
    const ended = await Promise.allSettled(input.rows.map(async (row, i) => batchRow(input, port, known, row, entries[i] as LedgerEntry, unsettled)));
    await store.addFigures(importId, unsettled);
    const failure = ended.find((e) => e.status === 'rejected');
    if (failure) throw failure.reason;
    const result: BatchResult = { settled: 0, handed: 0, skipped: 0, deferred: 0, held: 0 };
    for (const e of ended) if (e.status === 'fulfilled') result[e.value]++;
    return result;
  }

  /**
   * One row of a batch. Its sealed cells leave the batch's data once its
   * outcome is known (awaited before it settles, so a settled import's
   * batches hold no card data) or once its own job holds them; a row not
   * started keeps them for the batch's next run.
   */
  async function batchRow(input: BatchInput, port: BatchPort, known: KnownImport, row: number, stored: LedgerEntry, unsettled: RunFigures): Promise<BatchRowResult> {
    const { importId } = input;
    const { record } = known;
    let token = input.secrets?.[String(row)];
    const forget = async (): Promise<void> => (token === undefined ? undefined : port.sealSecrets(row, undefined));
    const name = stored.job;
    if (isSettled(stored.status) || name === null) {
      await forget();
      return 'skipped';
    }
    let rowLogger: Logger | undefined;
    const log = (): Logger => (rowLogger ??= logger.child({ importId, row, jobId: input.jobId }));
    const attempts = record.options.attempts;
    const addRowJob = async (extra: { after?: number; verdict?: RowJobInput['verdict'] }, delayMs = 0): Promise<BatchRowResult> => {
      const ownAttempts = extra.verdict ? attempts : Math.max(1, attempts - (extra.after ?? 0));
      await port.handOn({ name, importId, row, ...extra, ...(token === undefined ? {} : { secrets: token }), attempts: ownAttempts, delayMs });
      await forget();
      return 'handed';
    };
    const handOff = async (entry: LedgerEntry, extra: { after?: number; verdict?: RowJobInput['verdict'] }, delayMs = 0): Promise<BatchRowResult> => {
      // Marked first: a batch run again leaves the row to its job, and re-adds the job (a no-op when it is there).
      if (!(await writeUnsettled(importId, { row, entry: entryWith(entry, { handed: true }) }, input.claim))) {
        // Refused: settled (its cells may go), or this run lost its job or another run holds the row (they stay).
        const fresh = await store.getRow(importId, row);
        if (fresh && isSettled(fresh.status)) await forget();
        return 'skipped';
      }
      return addRowJob(extra, delayMs);
    };
    // The row has a job of its own (handed on by an earlier run of this batch whose worker died, or
    // retried from the dashboard): that job owns it, and its entry. Adding the job again is a no-op
    // while it is there, and makes sure it is.
    if (stored.handed) return addRowJob({ after: 1 });
    const verdict = await gate.gate(importId, row);
    if (verdict === 'hold') return 'held';
    if (verdict === 'cancel' && stored.status === 'pending') {
      await forget();
      await gate.cancelRow(importId, row, record.kind);
      return 'settled';
    }

    token ??= await resealed(known, row);
    const cells = openCells(stored.cells, token, options.keyring);
    // A card row whose sealed cells are gone from its batch (a Redis that lost writes brought the batch back
    // without them) and from its file is never sent with the masked cells: it reads back, and settles failed
    // when nothing is found.
    const readBackOnly = token === undefined && holdsCards(known);
    let current = stored;
    let rechecks = 0;
    for (;;) {
      const figures: CallFigures = noCalls();
      const result: Attempt =
        readBackOnly && !ROW_JOBS[name].readBack
          ? { kind: 'outcome', entry: entryWith(current, { status: 'failed', note: CARD_DATA_GONE }), status: 'failed' }
          : await attemptRow({ name, importId, row, known, stored: current, cells, log, deferrable: true, claim: input.claim, readBackOnly }, figures);
      if (result.kind === 'recheck') {
        // Nothing was sent: the row is read again (sent now, so the next attempt reads back first).
        addTo(unsettled, figures);
        if (result.held) await holdOver();
        const fresh = await store.getRow(importId, row);
        if (!fresh || isSettled(fresh.status)) {
          await forget();
          return 'skipped';
        }
        // Another live run keeps the row (or the hold lasts): its own job waits for its turn.
        if (++rechecks >= MAX_RECHECKS) return handOff(fresh, { after: 1 }, HOLD_RECHECK_MS * 4);
        current = fresh;
        continue;
      }
      if (result.kind === 'deferred' || result.kind === 'held') {
        addTo(unsettled, figures);
        return result.kind;
      }
      if (result.kind === 'taken' || result.kind === 'cancelled') {
        addTo(unsettled, figures);
        await forget();
        return result.kind === 'taken' ? 'skipped' : 'settled';
      }
      if (result.kind === 'fenced') {
        addTo(unsettled, figures);
        return 'skipped';
      }
      if (result.kind === 'outcome') {
        await forget();
        await settleRow(importId, { row, entry: result.entry, figures: { ...figures, retries: 0 }, kind: record.kind, claim: input.claim, learned: result.learned });
        if (logger.isLevelEnabled('debug')) log().debug({ status: result.status }, 'row settled');
        return 'settled';
      }
      // A batch's run of a row is its first attempt.
      const decision = decideFor(name, result, 1, attempts);
      if (decision.kind === 'wait-for-budget') {
        // As in a row job: the budget holds the fleet back, and the row goes again without spending an attempt.
        addTo(unsettled, figures);
        await budget.block(decision.retryAfterMs);
        current = result.entry;
        continue;
      }
      if (decision.kind === 'retry') {
        addTo(unsettled, figures);
        reportAttempt(result.error, 1, 'row attempt failed; retrying in a job of its own', log);
        return handOff(result.entry, { after: 1 }, decision.delayMs);
      }
      const settled = await conclude(name, result, decision);
      if (isSettled(settled.status) && SUCCESS_STATUSES.has(settled.status)) {
        await forget();
        await settleRow(importId, { row, entry: settled, figures: { ...figures, retries: 0 }, kind: record.kind, claim: input.claim });
        return 'settled';
      }
      addTo(unsettled, figures);
      return handOff(result.entry, {
        verdict: { status: settled.status === 'needs-review' ? 'needs-review' : 'failed', note: settled.note ?? reasonOf(result.error), candidates: settled.candidates },
      });
    }
  }

  /**
   * The sealed cells of a card row whose job has none (Redis lost them with it): read again from the
   * import's file while it is unchanged; undefined otherwise, and the row reads back or fails, saying why.
   */
  async function resealed(known: KnownImport, row: number): Promise<string | undefined> {
    return options.reseal && holdsCards(known) ? options.reseal(known.record, row) : undefined;
  }

  return {
    runRow,
    runBatch,
    stopStarting() {
      closing = true;
    },
  };
}

/** Whether an import's rows carry card cells, sealed in their jobs' data (a row without them cannot be sent). */
const holdsCards = (known: KnownImport): boolean => secretColumnIndexes(known.plan).length > 0;

function addTo(total: RunFigures, figures: CallFigures & Partial<RunFigures>): void {
  total.apiCalls += figures.apiCalls;
  total.searches += figures.searches;
  total.reads += figures.reads;
  total.rateLimited += figures.rateLimited;
  total.retries += figures.retries ?? 0;
}

/**
 * Rows running at once per request slot: while one row's request is out,
 * others get ready (their claim, index read and `sent` mark: three Redis
 * round trips, slow on a busy machine) or write what they created, so a
 * freed slot finds a row ready to send. A closing process finishes at most
 * these, and batches take the rows not started back.
 */
const ADMITTED_PER_SLOT = 4;
