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

/**
 * Lua: `hmgetMany(key, fields)` and `hsetMany(key, flat)` (field, value,
 * field, value, ...): a script's reads and writes of many fields of one hash
 * as one command per thousand fields, not one per field. Chunked, since
 * unpack takes a few thousand values at most.
 */
export const HASH_MANY_LUA = `
local function hmgetMany(key, fields)
  local out = {}
  for from = 1, #fields, 1000 do
    local got = redis.call('HMGET', key, unpack(fields, from, math.min(from + 999, #fields)))
    for j = 1, #got do out[#out + 1] = got[j] end
  end
  return out
end
local function hsetMany(key, flat)
  for from = 1, #flat, 1000 do redis.call('HSET', key, unpack(flat, from, math.min(from + 999, #flat))) end
end`;
