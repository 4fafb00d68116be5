import { randomBytes, randomUUID } from 'node:crypto';
import { afterEach, beforeEach } from 'vitest';
import { createRedis, deleteKeysWithPrefix, type RedisClient } from '../../src/redis/redis.js';
import { createImportStore, type ImportStore, type LedgerEntry } from '../../src/store/importStore.js';
import { REDIS_URL } from './pipeline.js';

/** A test's import store: on the real Redis, under a key prefix of the test's own. */
export interface StoreOnRedis {
  redis: RedisClient;
  prefix: string;
  store: ImportStore;
}

/**
 * Registers hooks that give each test of the file a fresh store on its own
 * prefix, and remove its keys after. Read the fields inside a test, not at
 * the top of the file: they change for every test.
 */
export function useStoreOnRedis(): StoreOnRedis {
  const world = {} as StoreOnRedis;
  beforeEach(() => {
    world.redis = createRedis(REDIS_URL);
    world.prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
    world.store = createImportStore(world.redis, world.prefix);
  });
  afterEach(async () => {
    await deleteKeysWithPrefix(world.redis, world.prefix);
    world.redis.disconnect();
  });
  return world;
}

/** A customers import of `rows` rows, each `entry`, enqueued: what the ledger scripts start from. */
export async function newPendingImport(store: ImportStore, rows: number, entry: LedgerEntry): Promise<string> {
  const id = randomBytes(6).toString('hex');
  await store.createImport({ id, file: 'f.csv', kind: 'customers', headers: ['FirstName', 'LastName'], paths: ['FirstName', 'LastName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
  await store.putPendingRows(id, Array.from({ length: rows }, (_, i) => ({ row: i + 1, entry })));
  await store.markEnqueued(id, rows);
  return id;
}

/**
 * What Redis holds under `prefix` now, to come back to: `rollBack()` makes
 * those keys exactly what they were (their values and expiries), as a Redis
 * that restarted from an AOF or snapshot cut at this moment would hold them.
 */
export async function pointInTime(redis: RedisClient, prefix: string): Promise<{ rollBack(): Promise<void> }> {
  const keysNow = async (): Promise<string[]> => {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
    return found;
  };
  const kept = await Promise.all(
    (await keysNow()).map(async (key) => {
      const [dump, ttl] = await Promise.all([redis.dumpBuffer(key), redis.pttl(key)]);
      return { key, dump, ttl };
    }),
  );
  return {
    async rollBack() {
      const now = await keysNow();
      if (now.length > 0) await redis.del(...now);
      for (const { key, dump, ttl } of kept) if (dump) await redis.restore(key, ttl > 0 ? ttl : 0, dump);
    },
  };
}
