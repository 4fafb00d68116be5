import { Redis } from 'ioredis';

/** Why subsync will not start against this Redis; the message is one line an operator can act on. */
export class RedisCheckError extends Error {
  constructor(
    readonly code: 'REDIS_UNREACHABLE' | 'REDIS_EVICTION',
    message: string,
  ) {
    super(message);
    this.name = 'RedisCheckError';
  }
}

/** How to start a Redis that suits subsync, for the unreachable message. */
export const START_REDIS_HINT =
  'start one with: redis-server --daemonize yes --port 6379 --maxmemory-policy noeviction --appendonly yes';

/**
 * A connection for subsync's own keys and for BullMQ. `autoPipelining` sends
 * the commands issued in one event-loop turn in one write (for subsync's own
 * keys only: BullMQ's connections keep it off, since users of Bull and
 * BullMQ have reported lost job data and lock errors with it).
 * `maxRetriesPerRequest:
 * null` is what BullMQ workers need: a command waits out a reconnect instead
 * of failing, so a cut Redis connection is survived.
 */
export function createRedis(url: string, options: { lazyConnect?: boolean; autoPipelining?: boolean } = {}): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: null,
    enableReadyCheck: true,
    lazyConnect: options.lazyConnect ?? false,
    enableAutoPipelining: options.autoPipelining ?? false,
  });
}

/**
 * Checks the Redis at start (DESIGN section 8): reachable, `maxmemory-policy
 * noeviction` (BullMQ loses jobs under eviction: refused), and persistence
 * (warned about when off: a restart then loses every queue and ledger).
 * Returns the warnings. A managed Redis that forbids CONFIG is let through
 * with a warning, since the policy cannot be read.
 */
export async function checkRedis(url: string, timeoutMs = 3000): Promise<string[]> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: timeoutMs, retryStrategy: () => null });
  redis.on('error', () => undefined);
  try {
    try {
      await redis.connect();
      await redis.ping();
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new RedisCheckError('REDIS_UNREACHABLE', `Redis is not reachable at ${redactUrl(url)} (${reason}); ${START_REDIS_HINT}`);
    }
    const warnings: string[] = [];
    let policy: string | undefined;
    let save = '';
    let appendonly = '';
    try {
      policy = configValue(await redis.config('GET', 'maxmemory-policy'));
      save = configValue(await redis.config('GET', 'save')) ?? '';
      appendonly = configValue(await redis.config('GET', 'appendonly')) ?? '';
    } catch {
      warnings.push('Redis refuses CONFIG GET, so its maxmemory-policy and persistence cannot be checked; they must be noeviction and on');
      return warnings;
    }
    if (policy !== undefined && policy !== 'noeviction') {
      throw new RedisCheckError(
        'REDIS_EVICTION',
        `Redis at ${redactUrl(url)} has maxmemory-policy ${policy}; subsync needs noeviction (BullMQ loses jobs when keys are evicted): CONFIG SET maxmemory-policy noeviction`,
      );
    }
    if (save.trim() === '' && appendonly !== 'yes') {
      warnings.push(
        'Redis persists nothing (no RDB snapshots, no AOF): a Redis restart loses every queued row and ledger; fine for tests, not for production (use --appendonly yes)',
      );
    }
    return warnings;
  } finally {
    redis.disconnect();
  }
}

function configValue(reply: unknown): string | undefined {
  return Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : undefined;
}

/** A Redis URL with its password hidden, for messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** Removes every key under `prefix:` (the demo's own keys, a test's). SCAN, never KEYS. */
export async function deleteKeysWithPrefix(redis: Redis, prefix: string): Promise<number> {
  let removed = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) removed += await redis.unlink(...keys);
  } while (cursor !== '0');
  return removed;
}
