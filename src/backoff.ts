import { RETRY_DEFAULTS } from './policy.js';

/**
 * Full-jitter exponential backoff: the waits between a row's attempts, a
 * listing page's retries and a search's, all from one place.
 */

/** Bounds of the retry backoff; defaults in src/policy.ts. */
export interface BackoffBounds {
  baseMs: number;
  capMs: number;
  /** Growth of the ceiling per attempt; default 2. */
  factor?: number;
  /** The least share of its ceiling a wait is (0 to 1); default 0, plain full jitter. */
  floor?: number;
}
/** The row jobs' retry schedule (src/policy.ts RETRY_DEFAULTS). */
export const DEFAULT_BACKOFF: BackoffBounds = {
  baseMs: RETRY_DEFAULTS.backoffBaseMs,
  capMs: RETRY_DEFAULTS.backoffCapMs,
  factor: RETRY_DEFAULTS.backoffFactor,
  floor: RETRY_DEFAULTS.backoffFloor,
};

/** The ceiling of the wait after `attemptsMade` attempts: min(cap, base · factor^(n-1)). */
export function backoffCeiling(attemptsMade: number, bounds: BackoffBounds = DEFAULT_BACKOFF): number {
  return Math.min(bounds.capMs, bounds.baseMs * (bounds.factor ?? 2) ** Math.max(0, attemptsMade - 1));
}

/**
 * Exponential backoff with jitter: a random delay in [floor · c, c) for the
 * ceiling c of {@link backoffCeiling}, so retrying workers spread out (a
 * floor of 0 is full jitter); never sooner than a Retry-After.
 */
export function fullJitterBackoff(attemptsMade: number, retryAfterMs: number | undefined, bounds: BackoffBounds = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  const ceiling = backoffCeiling(attemptsMade, bounds);
  const floor = Math.min(1, Math.max(0, bounds.floor ?? 0));
  return Math.max(retryAfterMs ?? 0, Math.floor(ceiling * (floor + random() * (1 - floor))));
}

/**
 * The span of a row's attempts: the sum of the waits before its last one,
 * at the low end of the jitter (`random` always 0) or the high end (1).
 */
export function retrySpanMs(attempts: number, bounds: BackoffBounds = DEFAULT_BACKOFF, end: 'low' | 'high' = 'low'): number {
  let total = 0;
  for (let made = 1; made < attempts; made++) total += fullJitterBackoff(made, undefined, bounds, () => (end === 'low' ? 0 : 1));
  return total;
}
