import { ApiError, ApiRateLimitedError, ApiTimeoutError } from './errors.js';
import { scrubSecrets } from '../secrets.js';
import { DEFAULT_BACKOFF, fullJitterBackoff, type BackoffBounds } from '../backoff.js';

/**
 * What to do after a failed attempt: one pure decision, shared by a batch's
 * rows and a row's own job (src/rows/) and the export's page reads. It sits
 * beside the errors it reads, below everything that calls the API.
 * docs/row-protocol.md has it as a table.
 *
 * The kinds of failure, from the error alone:
 * - rate-limited: a 429. Costs no attempt: the fleet's budget waits it out.
 * - permanent: the service refused (a 4xx that says nothing of trying
 *   again). Retrying sends the same refusal.
 * - timeout: no answer in time. A POST or PUT may still be under way at the
 *   service, so reading back cannot prove it was not applied.
 * - may-have-applied: a POST or PUT that got a 5xx, a cut connection or an
 *   answer not of the interface's shape: the service may have done it.
 * - transient: anything else worth trying again (a 5xx to a GET, a refused
 *   connection, a 408). An error that is not an API error (a Redis hiccup,
 *   another import's row creating the same person) is transient too: the one
 *   default, for rows and export pages alike, so a fault subsync does not
 *   recognise is retried within the attempts rather than failing at once.
 */
export type FailureKind = 'rate-limited' | 'permanent' | 'timeout' | 'may-have-applied' | 'transient';

export function failureKind(error: unknown): FailureKind {
  if (error instanceof ApiRateLimitedError) return 'rate-limited';
  if (!(error instanceof ApiError)) return 'transient';
  if (error instanceof ApiTimeoutError) return 'timeout';
  if (!error.transient) return 'permanent';
  return error.maybeApplied ? 'may-have-applied' : 'transient';
}

/** Whether a failed request proves it was not applied: a row marked `sent` for it goes back to `pending`. */
export const provenNotApplied = (error: unknown): boolean => error instanceof ApiError && !error.maybeApplied;

/** Whether the failure is worth another attempt (every kind but permanent; a 429 goes again without spending one). */
export const isRetryable = (kind: FailureKind): boolean => kind !== 'permanent';

export interface DecisionInput {
  /** The attempt that failed, the first being 1. */
  attempt: number;
  /** Attempts allowed in all, the first included. */
  maxAttempts: number;
  /**
   * The row is `sent` in the ledger after this attempt: a request of it may
   * have been applied (an export page: never).
   */
  mayHaveApplied?: boolean;
  /** How its create is read back, when its job has a way (an update needs none: it is idempotent). */
  canReadBack?: boolean;
  /** Backoff bounds; default DEFAULT_BACKOFF. */
  backoff?: BackoffBounds;
  /** The jitter's randomness, 0 to 1; default Math.random. */
  random?: () => number;
}

/**
 * What to do:
 * - wait-for-budget: block the fleet's budget for `retryAfterMs` and go
 *   again; the attempt is not spent.
 * - retry: the next attempt, after `delayMs`.
 * - settle: no attempt left (or none worth making): the row settles `failed`
 *   with `note`.
 * - read-back: no attempt left and the last may have been applied: read it
 *   back once more; found, the row is reconciled; not found, it failed
 *   (`note`); unreadable, it needs review.
 * - needs-review: no attempt left, the last may have been applied and
 *   nothing can prove either way (a timeout, or no way to read back).
 */
export type Decision =
  | { kind: 'wait-for-budget'; retryAfterMs: number | undefined }
  | { kind: 'retry'; delayMs: number }
  | { kind: 'settle'; status: 'failed'; note: string }
  | { kind: 'read-back'; reason: string }
  | { kind: 'needs-review'; note: string };

export function decide(error: unknown, input: DecisionInput): Decision {
  const kind = failureKind(error);
  const retryAfterMs = error instanceof ApiError ? error.retryAfterMs : undefined;
  if (kind === 'rate-limited') return { kind: 'wait-for-budget', retryAfterMs };
  if (isRetryable(kind) && input.attempt < input.maxAttempts) {
    return { kind: 'retry', delayMs: fullJitterBackoff(input.attempt, retryAfterMs, input.backoff ?? DEFAULT_BACKOFF, input.random) };
  }
  const reason = reasonOf(error);
  if (!input.mayHaveApplied) return { kind: 'settle', status: 'failed', note: kind === 'permanent' ? reason : `retries ran out: ${reason}` };
  if (kind === 'timeout' || !input.canReadBack) return { kind: 'needs-review', note: mayHaveAppliedNote(reason) };
  return { kind: 'read-back', reason };
}

/** The note of a row whose last attempt may have been applied and could not be proven either way. */
export const mayHaveAppliedNote = (reason: string): string => `retries ran out and the last attempt may have been applied: ${reason}`;

/** The note of a row whose last attempt may have been applied, read back and not found. */
export const notFoundNote = (reason: string): string => `retries ran out: ${reason}; reading back found nothing, so it was not applied`;

/** The reason stored for a row: the API's words when it gave some; never a request body, nor anything card-shaped. */
export function reasonOf(error: unknown): string {
  if (error instanceof ApiError) return scrubSecrets(error.reason);
  return scrubSecrets(error instanceof Error ? error.message : String(error));
}
