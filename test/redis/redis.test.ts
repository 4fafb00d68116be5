import { describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { RedisCheckError, checkRedis, durabilityWarning } from '../../src/redis/redis.js';
import { freePort, startOwnRedis } from '../support/redisServer.js';

async function withRedis(args: string[], body: (url: string) => Promise<void>): Promise<void> {
  const redis = await startOwnRedis(['--save', '', ...args]);
  try {
    await body(redis.url);
  } finally {
    await redis.stop();
  }
}

describe('checkRedis', () => {
  it('refuses a Redis that evicts keys', async () => {
    await withRedis(['--maxmemory-policy', 'allkeys-lru', '--appendonly', 'yes', '--dir', '/tmp'], async (url) => {
      const error = await checkRedis(url).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RedisCheckError);
      expect(error).toMatchObject({ code: 'REDIS_EVICTION' });
      expect(String(error)).toMatch(/allkeys-lru.*noeviction/);
    });
  });

  it('warns when Redis persists nothing, and passes a suitable one', async () => {
    await withRedis(['--maxmemory-policy', 'noeviction', '--appendonly', 'no'], async (url) => {
      expect((await checkRedis(url)).join('\n')).toMatch(/persists nothing/);
    });
    const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-aof-'));
    try {
      await withRedis(['--maxmemory-policy', 'noeviction', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir], async (url) => {
        expect(await checkRedis(url)).toEqual([]);
      });
      await withRedis(['--maxmemory-policy', 'noeviction', '--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', dir], async (url) => {
        expect((await checkRedis(url)).join('\n')).toMatch(/appendfsync everysec: a host crash or power loss loses up to the last second of acknowledged writes.*--appendfsync always/);
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a Redis that persists nothing for the commands that send, naming the setting and the override', async () => {
    await withRedis(['--maxmemory-policy', 'noeviction', '--appendonly', 'no'], async (url) => {
      const error = await checkRedis(url, 3000, { refuseLoss: true }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RedisCheckError);
      expect(error).toMatchObject({ code: 'REDIS_PERSISTS_NOTHING' });
      expect(String(error)).toMatch(/persists nothing \(appendonly no, save ""\).*appendonly yes with appendfsync always.*SUBSYNC_REDIS_ACCEPT_LOSS=true/);
      expect(String(error)).not.toContain('\n');
    });
  });

  it('tells what each persistence keeps of an acknowledged write', () => {
    const base = { appendonly: true, appendfsync: 'always', save: '', replicas: 0, minReplicasToWrite: 0 };
    expect(durabilityWarning(base)).toBeUndefined();
    expect(durabilityWarning({ ...base, appendonly: false, save: '3600 1' })).toMatch(/RDB snapshots only \(save 3600 1\): a restart loses every write after the last snapshot/);
    expect(durabilityWarning({ ...base, appendfsync: 'no' })).toMatch(/loses what the OS had not yet written/);
    expect(durabilityWarning({ ...base, replicas: 2 })).toMatch(/2 replica\(s\) and min-replicas-to-write 0, a failover to a replica that lagged behind/);
    expect(durabilityWarning({ ...base, replicas: 2, minReplicasToWrite: 1 })).toBeUndefined();
    expect(durabilityWarning({ ...base, appendonly: false })).toMatch(/persists nothing/);
    // What subsync does with it: WAITAOF where Redis has it, rollback detection always.
    expect(durabilityWarning({ ...base, appendfsync: 'everysec', version: '7.0.15' })).toMatch(/Redis 7\.0\.15 has no WAITAOF.*detects such a rollback/);
    expect(durabilityWarning({ ...base, appendfsync: 'everysec', version: '7.2.4' })).toMatch(/fsyncs each batch's sent marks \(WAITAOF\) before its requests leave/);
    expect(durabilityWarning({ ...base, replicas: 1 })).toMatch(/waits for one replica to acknowledge each batch's sent marks, WAIT/);
  });

  it('says in one line how to start Redis when none answers', async () => {
    const error = await checkRedis(`redis://127.0.0.1:${await freePort()}`, 500).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'REDIS_UNREACHABLE' });
    expect(String(error)).toMatch(/not reachable.*start one with: redis-server/);
    expect(String(error)).not.toContain('\n');
  });
});
