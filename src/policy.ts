/**
 * Policy as data: every number and code list that decides how subsync treats
 * the service lives here, with its default and the reason for it. Lower layers
 * (src/api) read these values; nothing here imports anything.
 */

/** HTTP statuses that mean "try again later": request timeout, rate limit, every 5xx. */
export const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([408, 429]);
/** 5xx responses are transient too; tested as a range rather than listed. */
export const isServerErrorStatus = (status: number): boolean => status >= 500 && status <= 599;

/**
 * Statuses whose request never reached the business logic, so a create cannot
 * have been applied: 408 (the server gave up waiting for the request) and 429
 * (a rate limiter refuses before handling). Every other 5xx may have applied.
 */
export const NOT_APPLIED_STATUSES: ReadonlySet<number> = new Set([408, 429]);

/**
 * Network error codes raised before the request could leave this machine: the
 * request cannot have been applied. Any other network error after the
 * connection was open may have reached the server.
 */
export const CONNECT_PHASE_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** Network error codes treated as transient (all of them are: a network fault may clear). */
export const TRANSIENT_NETWORK_ERROR_CODES: ReadonlySet<string> = new Set([
  ...CONNECT_PHASE_ERROR_CODES,
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
]);

/**
 * A refusal whose Message says the fault is temporary is transient even with
 * a 4xx status. The service's failure messages are not
 * shown, so these are the usual phrasings; matched case-insensitively.
 */
export const TRANSIENT_MESSAGE_PATTERNS: readonly RegExp[] = [
  /temporar/i,
  /try again/i,
  /unavailable/i,
  /timed? ?out/i,
  /too many requests/i,
  /deadlock/i,
];

/** HTTP client defaults; all overridable by configuration. */
export const HTTP_DEFAULTS = {
  /** Time to open a TCP/TLS connection. */
  connectTimeoutMs: 5_000,
  /**
   * Time to the response headers, and between body chunks. Kept well under the
   * job lock duration (JOB_LOCK_MS) so a live job is never taken as stalled.
   */
  requestTimeoutMs: 15_000,
  /** Keep-alive sockets per base URL; enough for the highest worker concurrency. */
  connections: 128,
  /** Idle keep-alive sockets are closed after this, below the usual server-side 5 s. */
  keepAliveTimeoutMs: 4_000,
} as const;

/** The BullMQ job lock: four times the HTTP timeout, so only a dead worker loses a job. */
export const JOB_LOCK_MS = 60_000;

/**
 * Retry defaults for row jobs. The wait before attempt
 * n+1 is drawn from [floor · c, c) with c = min(cap, base · factor^(n-1)):
 * spread at random over the upper half of its ceiling, so a fleet's retries
 * still scatter, but never shorter than half of it. With these values the
 * seven waits before the eighth attempt add up to at least 14 minutes (at
 * most 28), so an outage of the service or of Redis shorter than that costs
 * no row its outcome; the first retry comes after 2-4 s. Plain full jitter
 * from 0 (1 s base, 60 s cap) could spend all eight attempts in 22 s.
 * {@link RETRY_MIN_SPAN_MS} is the floor the defaults are held to.
 */
export const RETRY_DEFAULTS = {
  /** Attempts per row, the first included (`--attempts`). */
  attempts: 8,
  backoffBaseMs: 4_000,
  /** Each ceiling is this many times the one before. */
  backoffFactor: 3,
  backoffCapMs: 600_000,
  /** The least share of its ceiling a wait is: 0.5 is "equal jitter". */
  backoffFloor: 0.5,
} as const;

/** The least time the default attempts of a row span, at the low end of the jitter: ten minutes. */
export const RETRY_MIN_SPAN_MS = 10 * 60_000;

/** Export pages and customer searches retry within one job run, with plain full jitter (1 s base, 60 s cap). */
export const PAGE_RETRY_BACKOFF = { baseMs: 1_000, capMs: 60_000 } as const;

/**
 * A worker without SUBSYNC_CARD_KEY puts a job holding card data back for
 * this long (no attempt spent), so a worker that has the key takes it.
 */
export const KEYLESS_RETURN_MS = 5_000;

/**
 * The sweep (src/import/sweep.ts): how often a worker looks for rows of
 * unfinished imports that no job will run, and how long an import must have
 * settled nothing before it is looked at (a busy import has live jobs).
 */
export const SWEEP_DEFAULTS = {
  intervalMs: 60_000,
  quietMs: 60_000,
  /** Unfinished imports looked at per sweep, newest first. */
  imports: 200,
} as const;

/**
 * `import --wait`: polls every `pollMs`; with no row settled for `quietMs` it
 * sweeps the import and looks for workers that can run it; when there have
 * been none for `giveUpMs`, it stops waiting and says what to start.
 */
export const WAIT_DEFAULTS = {
  pollMs: 500,
  quietMs: 10_000,
  giveUpMs: 30_000,
} as const;

/** Repeated failures of one class from one place are logged once per this interval, with a count. */
export const FAILURE_LOG_INTERVAL_MS = 10_000;

/** Worker concurrency per process when SUBSYNC_CONCURRENCY is unset. */
export const DEFAULT_CONCURRENCY = 16;

/** Search page size of the interface's maximum. */
export const SEARCH_PAGE_SIZE = 100;

/** Export defaults. */
export const EXPORT_DEFAULTS = {
  /** Search pages in flight at once per export; every one draws from the fleet-wide API budget. */
  concurrency: 8,
  /**
   * Read rounds per search listing: the first pass, then re-reads of the
   * affected range while TotalItemCount keeps moving. Past this the file is
   * written with what holds together and its manifest says it is not complete.
   */
  maxRounds: 5,
  /** Attempts per page for transient failures (network, timeout, 5xx) within one run of the job; 429s wait and do not count. */
  pageAttempts: 6,
  /** Runs of the export job (BullMQ attempts); each run resumes from the pages already finished. */
  jobAttempts: 3,
  /** Delay before the export job's second run; doubled for each run after. */
  jobBackoffMs: 5_000,
  /** How long an export's record (progress, outcome) stays in Redis for `status` and the dashboard. */
  recordTtlSeconds: 30 * 24 * 3600,
  /** Export records listed in `<prefix>:exports`; older entries are dropped from the list. */
  recordsListed: 200,
  /**
   * Searched one by one when the service refuses an empty `contains`: a
   * customer appears under every character of its names, and is kept once.
   */
  partitionAlphabet: 'abcdefghijklmnopqrstuvwxyz0123456789',
} as const;

/**
 * Delivery of a notification to SUBSYNC_WEBHOOK_URL (src/notify/): 12
 * attempts in all, the first retry 5 s later and each next one twice as
 * late (about 2.8 hours of waiting), 10 s for the receiver to answer.
 */
export const WEBHOOK_DELIVERY = {
  attempts: 12,
  backoffMs: 5_000,
  timeoutMs: 10_000,
  /** Besides every 5xx: answers that say "later" (timeout, too early, rate limit). */
  retryStatuses: [408, 425, 429] as readonly number[],
};

/** What a webhook's answer means for its delivery: done, worth another attempt, or refused for good (any other 4xx, a redirect). */
export function webhookAnswer(status: number, retryStatuses: readonly number[] = WEBHOOK_DELIVERY.retryStatuses): 'delivered' | 'retry' | 'refused' {
  if (status >= 200 && status <= 299) return 'delivered';
  return isServerErrorStatus(status) || retryStatuses.includes(status) ? 'retry' : 'refused';
}
