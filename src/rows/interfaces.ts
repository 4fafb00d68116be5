/**
 * The row protocol's terms, and what it needs from whatever runs its jobs.
 *
 * - row: one line of an import's file, with one entry in the import's
 *   ledger (src/store/ledger.ts): `pending`, `sent`, or settled with an
 *   outcome (src/outcomes.ts).
 * - attempt: one run of a row's processor (jobs/), in one of the process's
 *   slots, with the ledger kept around it.
 * - batch: a block of consecutive rows run side by side; a row that fails
 *   there is handed on to a job of its own.
 * - row job: a row's own job: its retries, a failure kept for the
 *   dashboard, or a retry asked for by an operator.
 * - taken: another run settled the row meanwhile, or holds its `sent`
 *   claim, or this run no longer holds its job (fenced); this one stops.
 * - claim: the run's identity (its job's lock key and the token it holds
 *   there): a `sent` mark is a claim of one run, refused to a run that lost
 *   its lock (src/store/importStore.ts).
 * - read-back mode: Redis lost acknowledged writes (src/store/rollback.ts);
 *   every row without an outcome is `sent`, and reads back before any create.
 * - sealed cells: a row's card cells (and password), encrypted, held only in
 *   its job's data until the row has an outcome (src/cards/crypto.ts).
 *
 * Nothing here knows BullMQ: src/workers/rowWorker.ts adapts its jobs to
 * these shapes, and tests drive the protocol with ports of their own.
 */
import type { ImportKind, JobName, RowOutcome, RowStatus } from '../outcomes.js';
import type { RowGate } from '../import/runState.js';
import type { RunClaim } from '../store/importStore.js';
import { SubsyncError } from '../errors.js';

/** The outcome of a row that failed for good in its batch: its own job settles it so, without a request. */
export type RowVerdict = Pick<RowOutcome, 'candidates'> & { status: 'failed' | 'needs-review'; note: string };

/** A row's own job, as one run of it sees it. */
export interface RowJobInput {
  name: JobName;
  importId: string;
  row: number;
  /** For log lines. */
  jobId?: string;
  /** The row's sealed card cells. */
  secrets?: string;
  /** Attempts the row made in its batch before this job took it over. */
  after?: number;
  verdict?: RowVerdict;
  /** Runs of this job that failed before this one. */
  attemptsMade: number;
  /** Runs this job is allowed, the first included. */
  attempts: number;
  /** This run's claim; without one (a test's own runner) marks are not fenced. */
  claim?: RunClaim;
  /** Its card cells were lost with its job: it reads back, and settles failed when nothing is found; it never sends. */
  readBackOnly?: boolean;
}

/** How a run of a row's own job ended. */
export type RowJobResult =
  /** The row settled with this status. */
  | { kind: 'settled'; status: RowStatus }
  /** The row had settled before this run: nothing was sent. */
  | { kind: 'already'; status: RowStatus }
  /** Another run settled the row while this one ran: it stopped before sending. */
  | { kind: 'taken' }
  /** A 429: the fleet's budget is blocked; the row goes again, without spending an attempt. */
  | { kind: 'rate-limited' }
  /** Its mark was held (a rollback being handled) or found the row sent meanwhile: it goes again, without spending an attempt, and reads back. */
  | { kind: 'again' }
  /** Its import is paused (or held by its canary): the row was not started, and goes back without spending an attempt. */
  | { kind: 'held' }
  /** The attempt failed and the row has attempts left: the next, after `delayMs`. `error` is scrubbed of the row's secrets. */
  | { kind: 'retry'; error: Error; delayMs: number }
  /** The row settled without success (refused, retries ran out, or needs review): its job stays, failed, for the dashboard. */
  | { kind: 'failed'; outcome: RowOutcome };

/** A batch of rows, as one run of it sees it. */
export interface BatchInput {
  importId: string;
  rows: readonly number[];
  /** For log lines. */
  jobId?: string;
  /** Sealed card cells by row. */
  secrets?: Readonly<Record<string, string>>;
  /** This run's claim; without one (a test's own runner) marks are not fenced. */
  claim?: RunClaim;
}

/** What each row of a batch came to: settled here, handed to a job of its own, skipped (settled or taken elsewhere), or not started (the process is closing). */
export interface BatchResult {
  settled: number;
  handed: number;
  skipped: number;
  deferred: number;
  /** Rows not started because the import is paused or held by its canary: the batch goes back without spending an attempt. */
  held: number;
}

/**
 * What the protocol asks of an import's run state (src/import/runGate.ts)
 * before it starts a row: go, hold (paused, or after its canary's rows) or
 * cancel (a pending row settles `cancelled`; a `sent` one finishes).
 */
export interface RowRunGate {
  gate(importId: string, row: number): Promise<RowGate>;
  /** Settles a pending row of a cancelling import as `cancelled`; true when this call did. */
  cancelRow(importId: string, row: number, kind?: ImportKind): Promise<boolean>;
  /** A mark the ledger refused: when a cancel refused it, the row is cancelled here (true). */
  refused(importId: string, row: number, kind?: ImportKind): Promise<boolean>;
  /** Rows settled: ends the import's canary once its rows have all settled. */
  settled(importId: string, rows: readonly number[]): Promise<void>;
}

/** A row handed from its batch to a job of its own. */
export interface HandOn {
  name: JobName;
  importId: string;
  row: number;
  secrets?: string;
  /** Attempts the row made in its batch (a retry's backoff keeps growing from there). */
  after?: number;
  verdict?: RowVerdict;
  /** Runs the row's job is allowed. */
  attempts: number;
  /** Wait before its first run. */
  delayMs: number;
}

/** What the protocol needs from the job that runs a row. */
export interface RowJobPort {
  /**
   * The job holds `token` as `row`'s sealed cells from now on (undefined:
   * none), resolved once that is stored: a row that has an outcome keeps no
   * CVC, and a batch's row whose outcome is known or that has a job of its
   * own is dropped from the batch's data.
   */
  sealSecrets(row: number, token: string | undefined): Promise<void>;
}

/** What the protocol needs from the job that runs a batch. */
export interface BatchPort extends RowJobPort {
  /** Gives a row a job of its own; adding it while it is there changes nothing. */
  handOn(handOn: HandOn): Promise<void>;
}

/**
 * A job the protocol cannot run: its import or ledger entry is gone, or it
 * carries card data this process has no key for. Running it again cannot help.
 */
export class RowUnrunnableError extends SubsyncError {
  readonly code = 'ROW_UNRUNNABLE';
}
