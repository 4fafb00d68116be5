import { describe, expect, it } from 'vitest';
import { RedisCheckError, checkRedis } from '../../src/queue/redis.js';
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
  });

  it('says in one line how to start Redis when none answers', async () => {
    const error = await checkRedis(`redis://127.0.0.1:${await freePort()}`, 500).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'REDIS_UNREACHABLE' });
    expect(String(error)).toMatch(/not reachable.*start one with: redis-server/);
    expect(String(error)).not.toContain('\n');
  });
});
