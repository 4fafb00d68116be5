import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { StoreKeys } from '../store/keys.js';
import { luaScript } from '../store/script.js';

/**
 * The one API budget of the whole fleet (DESIGN section 1), kept in Redis so
 * every process on every machine draws from it: row jobs and export pages.
 *
 * It is a reservation clock (GCRA without burst): each request reserves the
 * next slot `1000 / rate` ms after the previous one, on Redis's own clock, and
 * sleeps until its slot. Requests therefore leave evenly spaced, summed over
 * all processes, never above `rate`. A 429 blocks the whole budget until its
 * Retry-After has passed.
 */
export interface ApiBudget {
  /** Waits for this process's turn to send one request. */
  acquire(): Promise<void>;
  /** Nobody sends before `ms` from now (a 429's Retry-After). */
  block(ms: number): Promise<void>;
}

// KEYS: tat, blocked-until. ARGV: interval ms (0 = no rate). Returns ms to wait.
const ACQUIRE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = now
local blocked = tonumber(redis.call('GET', KEYS[2]) or '0')
if blocked > start then start = blocked end
local interval = tonumber(ARGV[1])
if interval <= 0 then return start - now end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < start then tat = start end
redis.call('SET', KEYS[1], string.format('%.3f', tat + interval), 'PX', 60000)
return math.ceil(tat - now)
`;

// KEYS: blocked-until. ARGV: ms. Extends the block, never shortens it.
const BLOCK_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local untilMs = now + tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if untilMs > current then redis.call('SET', KEYS[1], tostring(untilMs), 'PX', tonumber(ARGV[1]) + 1000) end
return 0
`;

const acquireScript = luaScript(ACQUIRE_SCRIPT);
const blockScript = luaScript(BLOCK_SCRIPT);

export function createBudget(redis: Redis, keys: StoreKeys, options: { rate: number | undefined }): ApiBudget {
  const interval = options.rate === undefined ? 0 : 1000 / options.rate;
  return {
    async acquire() {
      const wait = Number(await acquireScript.run(redis, [keys.budgetTat, keys.budgetBlockedUntil], [String(interval)]));
      if (wait > 0) await sleep(wait);
    },
    async block(ms) {
      if (ms > 0) await blockScript.run(redis, [keys.budgetBlockedUntil], [String(Math.ceil(ms))]);
    },
  };
}
