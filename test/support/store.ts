import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach } from 'vitest';
import { createRedis, deleteKeysWithPrefix, type RedisClient } from '../../src/redis/redis.js';
import { createImportStore, type ImportStore } from '../../src/store/importStore.js';
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
