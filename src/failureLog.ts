/**
 * Repeated failures logged once per class and interval, not once per row. A
 * Redis outage fails every row, every batch and every reconnect the same way;
 * a stack per row made a flood of hundreds of megabytes a minute. Here the
 * first failure of a class (its code, from one place) is one line without a
 * stack, its stack goes to debug, and while it repeats one line per interval
 * gives the count.
 */
import type { Logger } from 'pino';
import { ApiError } from './api/errors.js';
import { scrubCardNumbers } from './api/rules.js';
import { FAILURE_LOG_INTERVAL_MS } from './policy.js';
import { REDIS_OOM_CODE, isRedisOutOfMemory, redisOutOfMemoryMessage } from './redis/redis.js';

export interface FailureLog {
  /** Counts a failure at `place` (e.g. `row attempt`, `redis connection`): logged now if it is new, else in the next interval's line. */
  report(place: string, error: unknown): void;
  /** Writes the counts of the interval that ends now (the timer calls it; tests may). */
  flush(): void;
  /** Flushes and stops the timer. */
  close(): void;
}

/** The class of a failure: a stable code, and one line saying what it is. */
export function failureClass(error: unknown): { code: string; message: string } {
  if (isRedisOutOfMemory(error)) return { code: REDIS_OOM_CODE, message: redisOutOfMemoryMessage('worker') };
  if (error instanceof ApiError) return { code: error.codeAndStatus, message: scrubCardNumbers(error.message) };
  if (error instanceof Error) {
    const code = 'code' in error && (typeof error.code === 'string' || typeof error.code === 'number') ? String(error.code) : error.name;
    return { code, message: scrubCardNumbers(error.message) };
  }
  return { code: 'unknown', message: scrubCardNumbers(String(error)) };
}

export function createFailureLog(logger: Logger, options: { intervalMs?: number; timer?: boolean } = {}): FailureLog {
  const intervalMs = options.intervalMs ?? FAILURE_LOG_INTERVAL_MS;
  const seen = new Map<string, { place: string; code: string; message: string; repeats: number }>();
  const flush = (): void => {
    for (const [key, entry] of seen) {
      // Quiet for a whole interval: forgotten, so its next occurrence is told afresh.
      if (entry.repeats === 0) {
        seen.delete(key);
        continue;
      }
      logger.warn({ place: entry.place, code: entry.code, repeats: entry.repeats, seconds: intervalMs / 1000 }, `${entry.place}: ${entry.message} (${entry.repeats} more in the last ${intervalMs / 1000} s)`);
      entry.repeats = 0;
    }
  };
  const timer = options.timer === false ? undefined : setInterval(flush, intervalMs);
  timer?.unref();
  return {
    report(place, error) {
      const { code, message } = failureClass(error);
      const key = `${place}\u0000${code}`;
      const entry = seen.get(key);
      if (entry) {
        entry.repeats++;
        return;
      }
      seen.set(key, { place, code, message, repeats: 0 });
      logger.warn({ place, code }, `${place}: ${message}`);
      if (logger.isLevelEnabled('debug')) logger.debug({ place, code, err: error }, `${place}: first of its kind, with its stack`);
    },
    flush,
    close() {
      if (timer) clearInterval(timer);
      flush();
    },
  };
}
