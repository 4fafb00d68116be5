import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { luaScript } from '../../src/redis/script.js';
import { startOwnRedis, type OwnRedis } from '../support/redisServer.js';

let own: OwnRedis | undefined;
afterEach(async () => {
  await own?.stop();
  own = undefined;
});

describe('luaScript', () => {
  it('sends the script text once, then only its hash, and again after Redis forgot it', async () => {
    own = await startOwnRedis();
    const redis = new Redis(own.url);
    try {
      const incr = luaScript("return redis.call('INCRBY', KEYS[1], ARGV[1])");
      expect(await incr.run(redis, ['n'], ['2'])).toBe(2);
      expect(await incr.run(redis, ['n'], ['3'])).toBe(5);
      await redis.script('FLUSH');
      expect(await incr.run(redis, ['n'], ['1'])).toBe(6);
      const stats = String(await redis.info('commandstats'));
      expect(Number(/cmdstat_eval:calls=(\d+)/.exec(stats)?.[1])).toBe(2);
      expect(Number(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1])).toBe(3);
    } finally {
      redis.disconnect();
    }
  });

  it('takes arguments by the hundred thousand, on an auto-pipelined connection too, without overflowing the stack', async () => {
    own = await startOwnRedis();
    const redis = new Redis(own.url, { enableAutoPipelining: true });
    try {
      const count = luaScript('return #ARGV');
      const args = Array.from({ length: 200_000 }, (_, i) => String(i));
      // Side by side, as rows of a worker run them: both go in one auto-pipeline.
      const [many, one] = await Promise.all([count.run(redis, ['k'], args), count.run(redis, ['k'], ['x'])]);
      expect(many).toBe(200_000);
      expect(one).toBe(1);
    } finally {
      redis.disconnect();
    }
  });
});
