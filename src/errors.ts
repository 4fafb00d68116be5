/**
 * The root of subsync's own errors, and the one table of their codes.
 *
 * Every error class of subsync is a {@link SubsyncError} with a stable `code`
 * from {@link ERROR_CODES}. Code that handles an error branches on its code
 * (or its class), never on its message: messages are for people and change
 * with their wording. A plain `Error` is thrown only for a broken invariant
 * (a bug, or data in Redis that subsync did not write), which nothing
 * handles: the CLI shows it with its stack.
 *
 * The CLI maps codes to exit codes in one table (`EXIT_OF_CODE` in
 * src/cli/exitCodes.ts); logs carry the code (src/failureLog.ts); an API
 * error's code is also written beside the service's words in a failed row's
 * reason, e.g. `… (API_REFUSED 422)`, which `subsync errors` groups by.
 *
 * A code, once released, is never renamed or reused for another cause:
 * scripts, log queries, ledger reasons and the error groups built from them
 * rely on it.
 *
 * ## Adding an error
 *
 * 1. Add its code to {@link ERROR_CODES}, with one line saying when it is
 *    raised (UPPER_SNAKE, prefixed by its module when that helps: `EXPORT_…`).
 * 2. Declare the class next to the code that raises it, extending this root:
 *    `export class AuditGapError extends SubsyncError { readonly code = 'AUDIT_GAP'; }`
 *    A class whose instances differ in cause takes the code as a constructor
 *    argument typed with a union of its codes (see `CardKeyError`).
 * 3. `npm run typecheck` then fails until `EXIT_OF_CODE` in
 *    src/cli/exitCodes.ts says what a command that lets it out exits with
 *    (one of the documented exit codes, or `unexpected`: exit 1 with the
 *    stack, for an error no command should let out).
 * 4. test/errors.test.ts fails on any other `extends Error` in src/ or jobs/.
 *
 * Errors of libraries (BullMQ's RateLimitError and DelayedError, ioredis's
 * ReplyError, Node's system errors with their own `code`) are not wrapped:
 * they are recognised by class, or by the code the library gives.
 */

/** Every code a {@link SubsyncError} may carry, each with when it is raised. */
export const ERROR_CODES = {
  // The service's answers (src/api/errors.ts: classified once, from the status and the network error).
  API_REFUSED: 'the service refused the request (4xx other than those below): permanent unless its Message says to try again',
  API_NOT_FOUND: 'the service answered 404: the customer, offer or payment method does not exist',
  API_UNAUTHORIZED: 'the service answered 401 or 403: SUBSYNC_API_AUTH was not accepted',
  API_RATE_LIMITED: 'the service answered 429: slow down, for its Retry-After when it gave one',
  API_SERVER_ERROR: 'the service answered 5xx: transient; a POST or PUT may have been applied',
  API_TIMEOUT: 'no answer in time (connect, headers or body)',
  API_NETWORK: 'the connection failed or was cut',
  API_BAD_RESPONSE: 'a 2xx answer whose body is not what the interface shows',
  // Configuration and start.
  CONFIG_INVALID: 'one or more environment variables are invalid (src/config.ts lists them all at once)',
  DASHBOARD_NEEDS_TOKEN: 'the dashboard is to listen beyond loopback without SUBSYNC_DASHBOARD_TOKEN',
  REDIS_UNREACHABLE: 'Redis cannot be reached at REDIS_URL',
  REDIS_EVICTION: 'Redis may evict keys (maxmemory-policy is not noeviction): queued rows could vanish',
  REDIS_OOM: 'Redis refused a write for want of memory (an ioredis reply, recognised in src/redis/redis.ts)',
  REDIS_PERSISTS_NOTHING: '`worker` or `start` on a Redis without AOF or RDB snapshots (a restart loses every unfinished import), without SUBSYNC_REDIS_ACCEPT_LOSS',
  // Card data at rest (src/cards/crypto.ts).
  CARD_KEY_INVALID: 'a card key or key id is malformed',
  CARD_KEY_UNKNOWN: 'card data was sealed with a key id the keyring does not hold',
  CARD_DATA_TAMPERED: 'sealed card data is malformed or fails authentication',
  CARD_DATA_INVALID: 'card data to seal, or an authentic token, is not a record of strings',
  // Files and their import.
  FILE_REJECTED: 'the whole file breaks the contract (headers, kind, all-or-nothing): nothing of it is enqueued',
  CSV_FORMAT: 'the bytes are not CSV that can be read (a stray quote, bytes that are not UTF-8)',
  COLUMN_MAP: 'the --map FILE is unreadable or malformed',
  FILE_CHANGED: 'an inbox file changed while it was being taken',
  WATCHER_EXITED: "`start`: the inbox watcher's process exited while start ran (or before it watched): start stops too, and exits 1",
  IMPORT_NOT_FOUND: 'no import of that id in Redis (never created, or expired)',
  ROWS_DID_NOT_SUCCEED: '`import --wait`: the import settled and some rows did not succeed',
  IMPORT_STALLED: '`import --wait`: rows remain and no worker that can run them is running',
  RETRY_REFUSED: '`retry`: the rows or the group asked for cannot be retried',
  RUN_CONTROL_REFUSED: '`pause` or `resume` of an import that is cancelling or cancelled',
  IMPORT_PAUSED: '`import --wait`: the import paused (its canary found too many failures, or an operator paused it)',
  EDIT_REFUSED: 'an edit of a row was refused (its `reason` says why)',
  // Rows.
  SAME_PERSON_RUNNING: "another import's row is creating the same person: this row waits for its outcome",
  ROW_TAKEN: 'another run settled the row while this attempt was about to send it: this attempt stops',
  ROW_FENCED: "this run no longer holds its job's lock (another run has it): its mark is refused, it sends nothing and leaves the job's data alone",
  ROW_MARK_HELD: 'the sent mark was held (a rollback of Redis is being handled) or found the row sent by another run: nothing sent, the row is read again',
  ROW_CARD_CELLS_GONE: "a card row's sealed cells were lost with its job: it reads back, and is never sent with masked cells",
  ROW_UNRUNNABLE: "a row's job cannot be run: its import or ledger entry is gone, or it carries card data this worker has no key for",
  // The customer index (src/customers/customerIndex.ts).
  INDEX_WRITES_LOST: "Redis came back without some of a full build's writes of the customer index: the build is not switched in",
  // Export.
  EXPORT_FAILED: 'the export job failed for good',
  EXPORT_INCOMPLETE: 'the export file was written but is not proven complete',
  EXPORT_SPOOL_CORRUPT: "a spooled page of an export's listing is unreadable",
  EXPORT_EMPTY_SEARCH_REFUSED: 'the service refused a search for every customer; the listing falls back to partitions',
  SCHEDULE_INVALID: 'a bad cron pattern or time zone for the export schedule',
  // Notifications (src/notify/notifier.ts): a delivery job retries on these.
  WEBHOOK_UNANSWERED: 'the webhook (SUBSYNC_WEBHOOK_URL) did not answer in time, or the connection failed',
  WEBHOOK_REFUSED: 'the webhook answered with an error status (a 5xx, 408, 425 or 429 is retried; any other ends the delivery)',
} as const satisfies Record<string, string>;

/** One of the stable codes of {@link ERROR_CODES}. */
export type SubsyncErrorCode = keyof typeof ERROR_CODES;

/**
 * The root of every error subsync raises. Subclasses declare their `code`;
 * the name is the subclass's own.
 */
export abstract class SubsyncError extends Error {
  /** The stable code: what handlers, the CLI's exit codes and logs go by. */
  abstract readonly code: SubsyncErrorCode;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** `error` is a subsync error with one of `codes`. */
export function hasCode<C extends SubsyncErrorCode>(error: unknown, ...codes: C[]): error is SubsyncError & { readonly code: C } {
  return error instanceof SubsyncError && (codes as SubsyncErrorCode[]).includes(error.code);
}
