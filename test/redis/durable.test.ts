/**
 * The wait that makes sent marks durable: none on a Redis without replicas
 * (and without WAITAOF), WAIT for every connected replica otherwise, and
 * group-committed: many batches marking at once share a few waits.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMarkSync } from '../../src/redis/durable.js';
import { hasWaitAof } from '../../src/redis/redis.js';
import { RedisNode } from '../../bench/lostWrites.js';

let dir: string;
let primary: RedisNode;
let replica: RedisNode;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-durable-'));
  primary = await RedisNode.start(path.join(dir, 'primary'), ['--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec']);
});
afterAll(async () => {
  await replica?.kill();
  await primary?.kill();
  await rm(dir, { recursive: true, force: true });
});

const waits = async (admin: Redis): Promise<number> => Number(/cmdstat_wait:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);

describe('durable marks', () => {
  it('knows which Redis versions have WAITAOF', () => {
    expect(hasWaitAof('7.0.15')).toBe(false);
    expect(hasWaitAof('7.2.0')).toBe(true);
    expect(hasWaitAof('8.0.1')).toBe(true);
    expect(hasWaitAof(undefined)).toBe(false);
  });

  it('waits for nothing without replicas (and without WAITAOF), and for every replica with them, group-committed', async () => {
    const marks = new Redis(primary.url);
    const admin = new Redis(primary.url);
    try {
      const version = /redis_version:([\d.]+)/.exec(await admin.info('server'))?.[1];
      const alone = await createMarkSync(marks, { refreshMs: 0 }).sync();
      expect(alone.replicas.asked).toBe(0);
      expect(alone.aof.asked).toBe(hasWaitAof(version));
      expect(alone.short).toBe(false);

      replica = await RedisNode.start(path.join(dir, 'replica'), ['--save', '', '--appendonly', 'no', '--replicaof', '127.0.0.1', String(primary.port)]);
      const replicaClient = new Redis(replica.url);
      for (let i = 0; !/master_link_status:up/.test(await replicaClient.info('replication')); i++) {
        if (i > 500) throw new Error('the replica did not sync');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const sync = createMarkSync(marks, { refreshMs: 0 });
      await marks.set('durable-test:mark', '1');
      const one = await sync.sync();
      expect(one.replicas).toEqual({ asked: 1, acknowledged: 1 });
      expect(one.short).toBe(false);
      // The replica holds the mark once the wait returns.
      expect(await replicaClient.get('durable-test:mark')).toBe('1');
      replicaClient.disconnect();

      // Forty batches marking at once: each is covered by a wait sent after its mark, and they share a few.
      const before = await waits(admin);
      const results = await Promise.all(
        Array.from({ length: 40 }, async (_, i) => {
          await marks.set(`durable-test:b${i}`, '1');
          return sync.sync();
        }),
      );
      for (const r of results) expect(r.replicas.acknowledged).toBe(1);
      expect((await waits(admin)) - before).toBeLessThanOrEqual(3);
    } finally {
      marks.disconnect();
      admin.disconnect();
    }
  });
});
