import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisClient } from './redis.js';
import type { ApiCall } from '../api/client.js';
import type { StoreKeys } from './keys.js';
import { luaScript } from './script.js';

/**
 * The one API budget of the whole fleet, kept in Redis so
 * every process on every machine draws from it: row jobs and export pages.
 *
 * It is a reservation clock (GCRA without burst): each request reserves the
 * next slot `1000 / pace` ms after the previous one, on Redis's own clock, and
 * sleeps until its slot. Requests therefore leave evenly spaced, summed over
 * all processes, never above the pace.
 *
 * The pace is the lower of two rates:
 * - the known rate (SUBSYNC_RATE) less {@link KNOWN_RATE_MARGIN}: requests
 *   spaced exactly at the limit reach the service with some jitter (event
 *   loops, GC, the network), and a sliding window then sees one too many;
 * - the learned rate, one for the fleet, beside the clock in Redis: none
 *   until the service first answers 429 (so a service that never does is
 *   never throttled), then additive increase, multiplicative decrease
 *   ({@link ADAPTIVE_RATE}). It is forgotten when no 429 came for
 *   `forgetMs`, so a lifted limit is found again.
 *
 * Each paced request costs one Redis round trip (the acquire script): the
 * learned rate grows there, and the answers this process saw since its last
 * request are reported there, batched. A 429 costs one more (the cut). While
 * the fleet is not paced at all (no SUBSYNC_RATE, nothing learned, no block),
 * an acquire that says so lets this process send for
 * {@link UNPACED_LEASE_MS} without asking again; what it sent meanwhile is
 * reported with its next acquire or its 429.
 */
export interface ApiBudget {
  /** Waits for this process's turn to send one request. */
  acquire(): Promise<void>;
  /** Reserves the next slot without waiting: the ms until it (0 = now) and when it is, on Redis's clock (this process's, under an unpaced lease). */
  reserve(): Promise<{ waitMs: number; at: number }>;
  /** Told of every finished call (the API client's `onCall`): answers other than a rate limit's are what the service admitted. */
  observe(call: Pick<ApiCall, 'status'> & Partial<Pick<ApiCall, 'error'>>): void;
  /**
   * The service answered 429, asking for `ms` (its Retry-After; without one,
   * {@link DEFAULT_RETRY_AFTER_MS}). The learned
   * rate is cut (once for a burst of 429s); the whole fleet waits out the
   * Retry-After when it was not paced (its burst may fill the service's
   * window) or when it is longer than a second (a quota, not a rate).
   */
  block(ms: number | undefined): Promise<void>;
  /** The fleet's learned rate now (requests/s), or undefined while none is learned. */
  learnedRate(): Promise<number | undefined>;
}

/**
 * How long an acquire that found the fleet unpaced lets this process send
 * without asking Redis again. Other processes' 429 reaches it this much late
 * at most; in exchange an unlimited service costs no budget round trip per
 * request.
 */
export const UNPACED_LEASE_MS = 100;

/** A 429 that gives no Retry-After is taken to ask for this long. */
export const DEFAULT_RETRY_AFTER_MS = 1_000;

/** SUBSYNC_RATE is paced this much under: the jitter a request meets on its way must not put one too many in the service's window. */
export const KNOWN_RATE_MARGIN = 0.025;

/** The adaptive rate's policy (AIMD), the same for every process. */
export interface AdaptiveRatePolicy {
  /**
   * On a 429 the rate becomes `decrease` × the rate the service admitted
   * over the last second (answers other than 429), capped by the pace then:
   * the admitted rate is the service's limit as seen from here, so this
   * lands just under it even when the fleet was sending far above.
   */
  decrease: number;
  /** Additive increase: requests/s gained per second, as a share of the rate at the last cut, while requests wait for the rate. */
  increase: number;
  /** The rate never goes below this (requests/s). */
  floor: number;
  /** 429s this long after a cut's reservations have gone out are taken for echoes of the same excess, and cut nothing more. */
  cutSpacingMs: number;
  /** The learned rate is forgotten (requests are unpaced again) after this long without a 429. */
  forgetMs: number;
}

export const ADAPTIVE_RATE: AdaptiveRatePolicy = {
  decrease: 0.9,
  increase: 0.04,
  floor: 1,
  cutSpacingMs: 1_000,
  forgetMs: 10 * 60_000,
};

// Redis's clock in ms, with microseconds.
const NOW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
`;

// The learned-rate hash: r rate, a its step (req/s per s), g when it last grew,
// c no cut before this; h when counting began, w start of the current
// one-second bucket, s and ok sent and admitted in it, sp and okp in the
// previous one. Rolls the buckets to now, and estimates sent and admitted per
// second over the last second (a sliding-window counter).
const BUCKETS = `
local function bucketsAt(st, now)
  local h, w = tonumber(st.h), tonumber(st.w)
  local s, ok, sp, okp = tonumber(st.s) or 0, tonumber(st.ok) or 0, tonumber(st.sp) or 0, tonumber(st.okp) or 0
  if not w or now - w >= 2000 then
    h, w, s, ok, sp, okp = now, now, 0, 0, 0, 0
  elseif now - w >= 1000 then
    w, sp, okp, s, ok = w + 1000, s, ok, 0, 0
  end
  local old = 1 - (now - w) / 1000
  return { h = h, w = w, s = s, ok = ok, sp = sp, okp = okp, sent = sp * old + s, admitted = okp * old + ok }
end
`;

// KEYS: tat, blocked-until, learned rate. ARGV: known pace (req/s, 0 = none),
// answers admitted since this process's last acquire, forget ms, requests sent
// under a lease since then. Returns {ms to wait, slot time, paced 1/0} as strings.
const ACQUIRE_SCRIPT = `${NOW}${BUCKETS}
local start = now
local blocked = tonumber(redis.call('GET', KEYS[2]) or '0')
if blocked > start then start = blocked end
local known = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[3], 'r', 'a', 'g', 'h', 'w', 's', 'ok', 'sp', 'okp')
local fresh = not f[5]
local b = bucketsAt({ h = f[4], w = f[5], s = f[6], ok = f[7], sp = f[8], okp = f[9] }, now)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local rate = tonumber(f[1])
local counts = { 'h', b.h, 'w', b.w, 's', b.s + 1 + tonumber(ARGV[4] or '0'), 'ok', b.ok + tonumber(ARGV[2]), 'sp', b.sp, 'okp', b.okp }
if rate then
  -- Additive increase, only while requests queue for the rate (it is what holds them back).
  local grown = tonumber(f[3]) or now
  if tat > now and now > grown then rate = rate + (tonumber(f[2]) or 1) * (now - grown) / 1000 end
  if known > 0 and rate > known then rate = known end
  redis.call('HSET', KEYS[3], 'r', rate, 'g', now, unpack(counts))
else
  redis.call('HSET', KEYS[3], unpack(counts))
  if fresh then redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[3])) end
end
local pace = rate
if known > 0 and (not pace or known < pace) then pace = known end
if not pace then return { tostring(start - now), tostring(start), '0' } end
if tat < start then tat = start end
-- Kept a minute past the last reservation (a slow rate may reserve far ahead).
redis.call('SET', KEYS[1], string.format('%.3f', tat + 1000 / pace), 'PX', math.ceil(tat - now) + 60000)
return { tostring(tat - now), string.format('%.3f', tat), '1' }
`;

// KEYS: tat, blocked-until, learned rate. ARGV: Retry-After ms, known pace
// (req/s, 0 = none), decrease, increase, floor, cut spacing ms, forget ms,
// requests sent under a lease and answers admitted, not reported yet.
// Extends the block, never shortens it. Returns the learned rate (a string).
const CUT_SCRIPT = `${NOW}${BUCKETS}
local retry = tonumber(ARGV[1])
local known = tonumber(ARGV[2])
local function blockFor(ms)
  local untilMs = now + ms
  local current = tonumber(redis.call('GET', KEYS[2]) or '0')
  if untilMs > current then redis.call('SET', KEYS[2], string.format('%.3f', untilMs), 'PX', math.ceil(ms) + 1000) end
end
if retry > 1000 then blockFor(retry) end
local f = redis.call('HMGET', KEYS[3], 'r', 'c', 'h', 'w', 's', 'ok', 'sp', 'okp')
local rate = tonumber(f[1])
if tonumber(f[2]) and now < tonumber(f[2]) then return tostring(rate or 0) end
local pace = rate
if known > 0 and (not pace or known < pace) then pace = known end
local b = bucketsAt({ h = f[3], w = f[4], s = f[5], ok = f[6], sp = f[7], okp = f[8] }, now)
local lateSent, lateOk = tonumber(ARGV[8] or '0'), tonumber(ARGV[9] or '0')
if lateSent + lateOk > 0 then
  b.s, b.ok, b.sent, b.admitted = b.s + lateSent, b.ok + lateOk, b.sent + lateSent, b.admitted + lateOk
  redis.call('HSET', KEYS[3], 'h', b.h, 'w', b.w, 's', b.s, 'ok', b.ok, 'sp', b.sp, 'okp', b.okp)
end
-- The base is what the service admitted over the last second (its limit as
-- seen from here), or, with none admitted, what was sent. Paced, it is at most
-- the pace, and the pace itself while under a second has been counted.
local base = b.admitted
if base <= 0 then base = b.sent end
if pace and (base > pace or now - b.h < 1000) then base = pace end
rate = math.max(tonumber(ARGV[5]), tonumber(ARGV[3]) * base)
-- Unpaced, the fleet may have filled the service's window in a burst: everyone waits out the Retry-After.
if not pace then blockFor(retry) end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local blocked = tonumber(redis.call('GET', KEYS[2]) or '0')
local settled = math.max(now, tat, blocked)
redis.call('HSET', KEYS[3], 'r', rate, 'a', math.max(1, tonumber(ARGV[4]) * rate), 'g', now, 'c', settled + tonumber(ARGV[6]))
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[7]))
return tostring(rate)
`;

const acquireScript = luaScript(ACQUIRE_SCRIPT);
const cutScript = luaScript(CUT_SCRIPT);

export interface BudgetOptions {
  /** SUBSYNC_RATE: the service's known limit for the whole fleet (paced {@link KNOWN_RATE_MARGIN} under); undefined = only the learned rate. */
  rate: number | undefined;
  /** The adaptive rate's policy; default {@link ADAPTIVE_RATE}. Every process of a fleet must use the same. */
  adaptive?: AdaptiveRatePolicy;
}

export function createBudget(redis: RedisClient, keys: StoreKeys, options: BudgetOptions): ApiBudget {
  const known = String(options.rate === undefined ? 0 : options.rate * (1 - KNOWN_RATE_MARGIN));
  const policy = options.adaptive ?? ADAPTIVE_RATE;
  const budgetKeys = [keys.budgetTat, keys.budgetBlockedUntil, keys.budgetRate];
  // Answers admitted, and requests sent under a lease, since this process last reported: sent with its next acquire.
  let admitted = 0;
  let leasedSent = 0;
  // Until when (this process's clock) the fleet was last seen unpaced: requests go without asking.
  let leaseUntil = 0;

  async function reserve(): Promise<{ waitMs: number; at: number }> {
    if (Date.now() < leaseUntil) {
      leasedSent++;
      return { waitMs: 0, at: Date.now() };
    }
    const report = [String(admitted), String(leasedSent)] as const;
    admitted = 0;
    leasedSent = 0;
    const reply = await acquireScript.run(redis, budgetKeys, [known, report[0], String(policy.forgetMs), report[1]]);
    const [wait, at, paced] = Array.isArray(reply) ? reply.map(Number) : [];
    const waitMs = Math.max(0, Math.ceil(wait ?? 0));
    if (paced === 0 && waitMs === 0) leaseUntil = Date.now() + UNPACED_LEASE_MS;
    return { waitMs, at: at ?? 0 };
  }

  return {
    reserve,
    async acquire() {
      const { waitMs } = await reserve();
      if (waitMs > 0) await sleep(waitMs);
    },
    observe(call) {
      if (call.status !== undefined && call.error?.code !== 'API_RATE_LIMITED') admitted++;
    },
    async block(retryAfterMs) {
      // This process stops going unasked, and its unreported figures count in the cut.
      leaseUntil = 0;
      const args = [retryAfterMs ?? DEFAULT_RETRY_AFTER_MS, known, policy.decrease, policy.increase, policy.floor, policy.cutSpacingMs, policy.forgetMs, leasedSent, admitted];
      leasedSent = 0;
      admitted = 0;
      await cutScript.run(redis, budgetKeys, args.map(String));
    },
    async learnedRate() {
      const rate = await redis.hget(keys.budgetRate, 'r');
      return rate === null ? undefined : Number(rate);
    },
  };
}
