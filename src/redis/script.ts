import { createHash } from 'node:crypto';
import { redisErrorKind, type RedisClient } from './redis.js';

/**
 * A Lua script run by its SHA1 (EVALSHA), so the hot path sends a 40-byte
 * hash instead of the script text on every call; the text goes once, when a
 * Redis (new, restarted or flushed) answers NOSCRIPT.
 */
export interface LuaScript {
  run(redis: RedisClient, keys: readonly string[], args: ReadonlyArray<string | Buffer>): Promise<unknown>;
}

export function luaScript(lua: string): LuaScript {
  const sha = createHash('sha1').update(lua).digest('hex');
  return {
    async run(redis, keys, args) {
      try {
        // Arrays, not spread: ioredis flattens them, and a spread of tens of thousands of
        // arguments overflows the stack (thrown inside ioredis's auto-pipeline, it kills the process).
        return await redis.evalsha(sha, keys.length, [...keys, ...args]);
      } catch (error) {
        if (redisErrorKind(error) !== 'NOSCRIPT') throw error;
        return redis.eval(lua, keys.length, [...keys, ...args]);
      }
    },
  };
}
