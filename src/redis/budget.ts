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
 *   until the service first answers 429, then additive increase,
 *   multiplicative decrease ({@link ADAPTIVE_RATE}). It is forgotten when no
 *   429 came for `forgetMs`, so a lifted limit is found again.
 *
 * With neither, a fleet that starts (or starts again after
 * {@link START_IDLE_MS} without a request, or after forgetting a learned
 * rate) is not let loose at once: its pace starts at `startRate` and doubles
 * every `startDoublingMs`, unpaced once past `startCeiling` (about 0.4 s by
 * default). A service that never answers 429 is slowed for that start only;
 * one with a limit meets it at about twice the limit, with a few requests
 * out, instead of with every worker's slots filled at once (each such
 * request a 429).
 *
 * Imports and the export share the one clock: imports reserving far ahead
 * skip some slots as holes, which the export takes (its share, see
 * {@link exportShareBeside}), or the imports themselves when near and left
 * free. A request that wakes more than {@link LATE_SLOT_MS} after its slot
 * takes a fresh one rather than go late.
 *
 * Each paced request costs one Redis round trip (the acquire script): the
 * learned rate grows there, and the answers this process saw since its last
 * request are reported there, batched. A 429 costs one more (the cut). While
 * the fleet is not paced at all (no SUBSYNC_RATE, nothing learned, no block),
 * an acquire that says so lets this process send for
 * {@link UNPACED_LEASE_MS} without asking again; what it sent meanwhile is
 * reported with its next acquire or its 429. So a cut made unpaced, or at the
 * start's pace, first counts only what was reported by then; until its block
 * ends, what the other processes report raises it.
 */
export interface ApiBudget {
  /** Waits for this process's turn to send one request. */
  acquire(): Promise<void>;
  /** Reserves the next slot without waiting: the ms until it (0 = now) and when it is, on Redis's clock (this process's, under an unpaced lease). */
  reserve(): Promise<Reservation>;
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
 * Who draws a request: `import` (rows, and what they read of the service's
 * customers), `export` (the export's pages), or `other` (a command's
 * own few requests), which takes the next slot after everything reserved.
 */
export type BudgetClass = 'import' | 'export' | 'other';

/** The export's least share of the pace while imports draw too (SUBSYNC_EXPORT_SHARE; see {@link exportShareBeside}). */
export const DEFAULT_EXPORT_SHARE = 0.4;

/**
 * A class that asked this recently (or holds a slot still ahead) draws: an
 * export that pauses between pages to write them keeps its holes near, and the
 * feeder keeps the imports' rows in flight at their part of the pace.
 */
export const CLASS_HOLD_MS = 500;

/** What the two classes drew from the budget: requests each sent since the budget was last idle for ten minutes, and whether each draws now. */
export interface BudgetUse {
  import: number;
  export: number;
  importActive: boolean;
  exportActive: boolean;
}

const LANE = { import: 'i', export: 'e', other: '' } as const;

/** Reads the classes' use of the budget (for /metrics, status and the feeder). */
export async function budgetUse(redis: RedisClient, keys: StoreKeys): Promise<BudgetUse> {
  const [reply, time] = await Promise.all([redis.hmget(budgetLanesKey(keys), 'ni', 'ne', 'ti', 'te', 'ai', 'ae'), redis.time()]);
  const now = Number(time[0]) * 1000 + Number(time[1]) / 1000;
  const num = (i: number): number => Number(reply[i] ?? 0) || 0;
  const active = (t: number, a: number): boolean => t > now || now - a < CLASS_HOLD_MS;
  return { import: num(0), export: num(1), importActive: active(num(2), num(4)), exportActive: active(num(3), num(5)) };
}

/** The lanes hash beside the clock: t<lane> past its last slot, a<lane> last asked, n<lane> requests drawn, s the export's share, hc the imports' credit of holes. */
export const budgetLanesKey = (keys: StoreKeys): string => `${keys.budgetTat}:lanes`;

/** Late requests the budget let go, by when they went (the last two seconds). */
export const budgetLateKey = (keys: StoreKeys): string => `${keys.budgetTat}:late`;

/** When the fleet's gentle start began (see {@link AdaptiveRatePolicy.startRate}); gone after {@link START_IDLE_MS} unpaced and idle. */
export const budgetStartKey = (keys: StoreKeys): string => `${keys.budgetTat}:start`;

/** The holes: slots of the clock the imports skipped, kept for the export (a sorted set by time). */
export const budgetHolesKey = (keys: StoreKeys): string => `${keys.budgetTat}:holes`;

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

/**
 * The export's share of the pace, reserved as holes in the imports' slots:
 * its floor (SUBSYNC_EXPORT_SHARE), or more while few imports run, the
 * export taking a turn like one more import: half beside one import, a third
 * beside two, the floor beside more. The feeder, which knows the imports
 * running, writes it beside the clock ({@link setExportShare}).
 */
export function exportShareBeside(floor: number, importsRunning: number): number {
  return Math.min(1, Math.max(0, floor, 1 / (Math.max(1, importsRunning) + 1)));
}

/** The feeder tells the budget the export's share now ({@link exportShareBeside}). */
export async function setExportShare(redis: RedisClient, keys: StoreKeys, share: number): Promise<void> {
  const key = budgetLanesKey(keys);
  // The acquire script keeps the hash while the budget is used; written before any acquire, it expires all the same.
  await redis.multi().hset(key, 's', share.toFixed(4)).pexpire(key, ADAPTIVE_RATE.forgetMs, 'NX').exec();
}

/**
 * While the export draws, the imports leave holes in the slots they reserve
 * only this many slots ahead of now or more; nearer, they take any hole left
 * free, so a hole the export does not use is not lost.
 */
export const HOLE_HORIZON_SLOTS = 4;

/**
 * While no export draws, holes are left only this far ahead or more (the
 * imports fill the nearer ones, a wider window that loses none): an export
 * that starts finds its first hole about this far ahead, not behind
 * everything the imports reserved.
 */
export const IDLE_HOLE_HORIZON_MS = 250;

/** Holes are never more than this share of the imports' slots (a share of 1 would leave them none). */
const MAX_HOLE_SHARE = 0.9;

/**
 * A request that wakes this long after its slot (a stalled event loop, GC, a
 * loaded machine) may not simply go: sent now, it leaves closer to the next
 * requests than the pace allows. The margin under SUBSYNC_RATE leaves room
 * for a few such requests at a time (five at 200/s), not for the burst a
 * stall releases. So it asks the budget first: it goes when it is
 * under {@link LATE_MAX_MS} late and fewer late requests of the fleet overlap
 * its lateness than the margin allows, keeping one for the service's own
 * jitter; else it takes a fresh slot (the late one stays unused). A leave
 * that reaches the process more than LATE_MAX_MS after its slot (it stalled
 * again while asking) is not used either: sent then, it leaves in one burst
 * with the others let go in the same stall (four requests within 2 ms were
 * seen, each of them 8 to 29 ms after its slot), more than the margin holds.
 */
export const LATE_SLOT_MS = 5;

/** Later than this, a request always takes a fresh slot: alone it would use most of the margin. */
export const LATE_MAX_MS = 15;

/**
 * How many late requests may overlap at a known rate: the margin's whole
 * requests less two, kept for the service's own jitter (at 200/s, less one
 * still met 429s): 3 at 200/s, none at 50/s (a margin of 1.25 requests). A
 * learned rate is already under the limit (0.9 of what was admitted): one.
 */
export function lateRoom(rate: number | undefined): number {
  return rate === undefined ? 1 : Math.max(0, Math.floor(rate * KNOWN_RATE_MARGIN) - 2);
}

/** Fresh slots a request takes, at most, after waking late; then it goes, late or not. */
export const LATE_RETRIES = 3;

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
  /** The first pace of a fleet with no rate known or learned (requests/s); 0: no gentle start, unpaced at once. */
  startRate: number;
  /** That pace doubles this often (ms). */
  startDoublingMs: number;
  /** Once the doubled pace passes this (requests/s), the fleet is unpaced. */
  startCeiling: number;
}

/** A fleet whose budget saw no request with nothing paced for this long starts gently again. */
export const START_IDLE_MS = 60_000;

export const ADAPTIVE_RATE: AdaptiveRatePolicy = {
  decrease: 0.9,
  increase: 0.04,
  floor: 1,
  cutSpacingMs: 1_000,
  forgetMs: 10 * 60_000,
  startRate: 50,
  startDoublingMs: 50,
  startCeiling: 10_000,
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

// A cut made while nothing paced the fleet counted only the answers reported
// by then; other processes report theirs with their next call, after it. Until
// the cut's block ends (no request goes meanwhile), answers admitted that are
// reported late add to its base (u: the block's end, ua: the base's admitted
// count), and the rate rises to decrease × that base. Returns the rate.
const REVISE = `
local function revised(key, rate, u, ua, ok, decrease, increase)
  if not rate or not u or ok <= 0 or now >= tonumber(u) then return rate end
  ua = (tonumber(ua) or 0) + ok
  redis.call('HSET', key, 'ua', ua)
  if decrease * ua > rate then
    rate = decrease * ua
    redis.call('HSET', key, 'r', rate, 'a', math.max(1, increase * rate))
  end
  return rate
end
`;

// KEYS: tat, blocked-until, learned rate, lanes, holes, start. ARGV: known pace
// (req/s, 0 = none), answers admitted since this process's last acquire, forget
// ms, requests sent under a lease since then, lane ('i' imports, 'e' export, ''
// other), the export's share floor (used until the feeder writes the share
// `s`), the start's rate (0 = none), doubling ms, ceiling and idle ms, the
// policy's decrease and increase. Returns
// {ms to wait, slot time, paced: 1, 0, or 2 on the start's pace} as strings.
const ACQUIRE_SCRIPT = `${NOW}${BUCKETS}${REVISE}
local lane = ARGV[5] or ''
if lane ~= '' then
  redis.call('HINCRBY', KEYS[4], 'n' .. lane, 1 + tonumber(ARGV[4] or '0'))
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[3]))
end
local start = now
local blocked = tonumber(redis.call('GET', KEYS[2]) or '0')
if blocked > start then start = blocked end
local known = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[3], 'r', 'a', 'g', 'h', 'w', 's', 'ok', 'sp', 'okp', 'u', 'ua')
local fresh = not f[5]
local b = bucketsAt({ h = f[4], w = f[5], s = f[6], ok = f[7], sp = f[8], okp = f[9] }, now)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local rate = revised(KEYS[3], tonumber(f[1]), f[10], f[11], tonumber(ARGV[2]), tonumber(ARGV[11]), tonumber(ARGV[12]))
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
local paced = '1'
local startRate = tonumber(ARGV[7] or '0')
if not pace and startRate > 0 then
  -- No rate known or learned: the pace starts at startRate and doubles, until unpaced past the ceiling.
  local began = tonumber(redis.call('GET', KEYS[6]) or '')
  if not began then
    began = now
    redis.call('SET', KEYS[6], string.format('%.3f', now), 'PX', tonumber(ARGV[10]))
  else
    redis.call('PEXPIRE', KEYS[6], tonumber(ARGV[10]))
  end
  local ramp = startRate * 2 ^ ((now - began) / tonumber(ARGV[8]))
  if ramp < tonumber(ARGV[9]) then pace, paced = ramp, '2' end
end
if not pace then return { tostring(start - now), tostring(start), '0' } end
local slot = math.max(tat, start)
local spacing = 1000 / pace
if lane ~= '' then
  local holes = KEYS[5]
  local l = redis.call('HMGET', KEYS[4], 's', 'hc', 't' .. lane, 'te', 'ae')
  local share = math.min(tonumber(l[1]) or tonumber(ARGV[6]), ${MAX_HOLE_SHARE})
  -- While the export draws, its holes start a few slots ahead; while it does not, further, and
  -- the imports fill the nearer ones: an export that starts has holes from there on.
  local exporting = (tonumber(l[4]) or 0) > now or now - (tonumber(l[5]) or 0) < ${CLASS_HOLD_MS}
  local horizon = ${HOLE_HORIZON_SLOTS} * spacing
  if not exporting then horizon = math.max(horizon, ${IDLE_HOLE_HORIZON_MS}) end
  -- Holes that have passed, or that a block covers, are gone.
  redis.call('ZREMRANGEBYSCORE', holes, '-inf', '(' .. string.format('%.3f', start))
  -- A hole is taken first: the export's anywhere ahead (they are its share), the imports' only when
  -- near (a hole the export left unused), so holes far ahead stay free for an export that starts.
  local upTo = (lane == 'e') and '+inf' or string.format('%.3f', start + horizon)
  local hole = redis.call('ZRANGEBYSCORE', holes, string.format('%.3f', start), upTo, 'LIMIT', 0, 1)[1]
  if hole then
    slot = tonumber(hole)
    redis.call('ZREM', holes, hole)
  elseif lane == 'i' and share > 0 and slot > start + horizon then
    -- The imports reserve far ahead: they skip slots as holes, share / (1 - share) of one per slot taken.
    local credit = (tonumber(l[2]) or 0) + share / (1 - share)
    while credit >= 1 do
      redis.call('ZADD', holes, string.format('%.3f', slot), string.format('%.3f', slot))
      slot = slot + spacing
      credit = credit - 1
    end
    redis.call('HSET', KEYS[4], 'hc', string.format('%.6f', credit))
  end
  local ttl = math.max(tonumber(ARGV[3]), math.ceil(slot - now) + 60000)
  redis.call('PEXPIRE', holes, ttl)
  local held = math.max(tonumber(l[3]) or 0, slot + spacing)
  redis.call('HSET', KEYS[4], 't' .. lane, string.format('%.3f', held), 'a' .. lane, string.format('%.3f', now))
  redis.call('PEXPIRE', KEYS[4], ttl)
end
local frontier = math.max(tat, slot + spacing)
-- Kept a minute past the last reservation (a slow rate may reserve far ahead).
redis.call('SET', KEYS[1], string.format('%.3f', frontier), 'PX', math.ceil(frontier - now) + 60000)
return { tostring(slot - now), string.format('%.3f', slot), paced }
`;

// KEYS: tat, blocked-until, learned rate. ARGV: Retry-After ms, known pace
// (req/s, 0 = none), decrease, increase, floor, cut spacing ms, forget ms,
// requests sent under a lease and answers admitted, not reported yet.
// Extends the block, never shortens it. Returns the learned rate (a string).
const CUT_SCRIPT = `${NOW}${BUCKETS}${REVISE}
local retry = tonumber(ARGV[1])
local known = tonumber(ARGV[2])
local function blockFor(ms)
  local untilMs = now + ms
  local current = tonumber(redis.call('GET', KEYS[2]) or '0')
  if untilMs > current then redis.call('SET', KEYS[2], string.format('%.3f', untilMs), 'PX', math.ceil(ms) + 1000) end
end
if retry > 1000 then blockFor(retry) end
local f = redis.call('HMGET', KEYS[3], 'r', 'c', 'h', 'w', 's', 'ok', 'sp', 'okp', 'u', 'ua')
local rate = tonumber(f[1])
local b = bucketsAt({ h = f[3], w = f[4], s = f[5], ok = f[6], sp = f[7], okp = f[8] }, now)
local lateSent, lateOk = tonumber(ARGV[8] or '0'), tonumber(ARGV[9] or '0')
if lateSent + lateOk > 0 then
  b.s, b.ok, b.sent, b.admitted = b.s + lateSent, b.ok + lateOk, b.sent + lateSent, b.admitted + lateOk
  redis.call('HSET', KEYS[3], 'h', b.h, 'w', b.w, 's', b.s, 'ok', b.ok, 'sp', b.sp, 'okp', b.okp)
end
-- An echo of the last cut cuts nothing more; what it reports may still raise that cut's base.
if tonumber(f[2]) and now < tonumber(f[2]) then
  return tostring(revised(KEYS[3], rate, f[9], f[10], lateOk, tonumber(ARGV[3]), tonumber(ARGV[4])) or 0)
end
local pace = rate
if known > 0 and (not pace or known < pace) then pace = known end
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
-- Unpaced, the answers other processes have not reported yet raise the base until the block ends.
if not pace and blocked > now then
  redis.call('HSET', KEYS[3], 'u', string.format('%.3f', blocked), 'ua', b.admitted)
else
  redis.call('HDEL', KEYS[3], 'u', 'ua')
end
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[7]))
return tostring(rate)
`;

// KEYS: late requests sent (a sorted set: score when sent, member slot-sent). ARGV:
// the late request's slot, how many may overlap, most ms late. Returns 1 when it
// may go (counted), 0 when it takes a fresh slot. Two late requests overlap when
// one was sent after the other's slot: a second starting between holds both.
const LATE_SCRIPT = `${NOW}
local slot = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.3f', now - 2000))
if now - slot > tonumber(ARGV[3]) then return 0 end
if redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf') >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], string.format('%.3f', now), ARGV[1] .. '>' .. string.format('%.3f', now))
redis.call('PEXPIRE', KEYS[1], 2000)
return 1
`;

const acquireScript = luaScript(ACQUIRE_SCRIPT);
const lateScript = luaScript(LATE_SCRIPT);
const cutScript = luaScript(CUT_SCRIPT);

export interface BudgetOptions {
  /** SUBSYNC_RATE: the service's known limit for the whole fleet (paced {@link KNOWN_RATE_MARGIN} under); undefined = only the learned rate. */
  rate: number | undefined;
  /** The adaptive rate's policy; default {@link ADAPTIVE_RATE}. Every process of a fleet must use the same. */
  adaptive?: AdaptiveRatePolicy;
  /** Who draws through this budget; default `other`. */
  class?: BudgetClass;
  /** SUBSYNC_EXPORT_SHARE: the export's least share of the pace while imports draw too (0 to 1), until the feeder tells the budget the share now; default {@link DEFAULT_EXPORT_SHARE}. Every process of a fleet must use the same. */
  exportShare?: number;
}

/** A reserved slot: the ms until it, when it is, and whether it is paced at the fleet's start. */
export interface Reservation {
  waitMs: number;
  at: number;
  starting?: boolean;
}

export function createBudget(redis: RedisClient, keys: StoreKeys, options: BudgetOptions): ApiBudget {
  const known = String(options.rate === undefined ? 0 : options.rate * (1 - KNOWN_RATE_MARGIN));
  const policy = options.adaptive ?? ADAPTIVE_RATE;
  const budgetKeys = [keys.budgetTat, keys.budgetBlockedUntil, keys.budgetRate, budgetLanesKey(keys), budgetHolesKey(keys), budgetStartKey(keys)];
  const policyArgs = [policy.startRate, policy.startDoublingMs, policy.startCeiling, START_IDLE_MS, policy.decrease, policy.increase].map(String);
  const lane = LANE[options.class ?? 'other'];
  const exportShare = String(Math.min(1, Math.max(0, options.exportShare ?? DEFAULT_EXPORT_SHARE)));
  // Answers admitted, and requests sent under a lease, since this process last reported: sent with its next acquire.
  let admitted = 0;
  let leasedSent = 0;
  // Until when (this process's clock) the fleet was last seen unpaced: requests go without asking.
  let leaseUntil = 0;

  // The one acquire under way that may renew the lease: requests meanwhile wait for it, not each for its own.
  let renewing: Promise<Reservation> | undefined;
  // What the last acquire found: paced, every request reserves its own slot.
  let unpaced = false;
  // When this process last met a 429 (its clock): slots reserved at the start's pace before it are not used.
  let rateLimitedAt = 0;
  const lateKeys = [budgetLateKey(keys)];
  const lateArgs = [String(lateRoom(options.rate)), String(LATE_MAX_MS)];

  /** Whether a request woken late for the slot `at` (Redis's clock) may go now (it is then counted). */
  async function lateMayGo(at: number): Promise<boolean> {
    return Number(await lateScript.run(redis, lateKeys, [at.toFixed(3), ...lateArgs])) === 1;
  }

  /** One acquire script call, counting this request; an unpaced answer renews the lease. */
  async function acquireOnce(): Promise<Reservation> {
    const report = [String(admitted), String(leasedSent)] as const;
    admitted = 0;
    leasedSent = 0;
    const reply = await acquireScript.run(redis, budgetKeys, [known, report[0], String(policy.forgetMs), report[1], lane, exportShare, ...policyArgs]);
    const [wait, at, paced] = Array.isArray(reply) ? reply.map(Number) : [];
    const waitMs = Math.max(0, Math.ceil(wait ?? 0));
    unpaced = paced === 0 && waitMs === 0;
    if (unpaced) leaseUntil = Date.now() + UNPACED_LEASE_MS;
    return { waitMs, at: at ?? 0, starting: paced === 2 };
  }

  function renew(): Promise<Reservation> {
    renewing ??= acquireOnce().finally(() => {
      renewing = undefined;
    });
    return renewing;
  }

  async function reserve(): Promise<Reservation> {
    const now = Date.now();
    if (now < leaseUntil) {
      // Near its end, the lease is renewed while this request goes: the acquire counts it, and no
      // request waits a round trip for the budget while the fleet stays unpaced.
      if (leaseUntil - now < UNPACED_LEASE_MS / 2 && !renewing) {
        renew().catch(() => undefined);
        return { waitMs: 0, at: now };
      }
      leasedSent++;
      return { waitMs: 0, at: now };
    }
    if (renewing && unpaced) {
      // Another request is asking already: its answer tells whether the fleet is still unpaced.
      await renewing.catch(() => undefined);
      if (Date.now() < leaseUntil) {
        leasedSent++;
        return { waitMs: 0, at: Date.now() };
      }
      return acquireOnce();
    }
    return unpaced || !renewing ? renew() : acquireOnce();
  }

  return {
    reserve,
    async acquire() {
      for (let retry = 0; ; retry++) {
        // Measured from before the ask: a reply that comes back late counts as lateness too.
        const asked = Date.now();
        const { waitMs, at, starting } = await reserve();
        if (waitMs > 0) await sleep(waitMs);
        // A 429 met while the fleet was starting: the service's window is full, and this slot was reserved
        // before the cut and the block; it asks again, and goes after them.
        if (starting === true && rateLimitedAt >= asked) continue;
        const due = asked + waitMs;
        if (unpaced || retry >= LATE_RETRIES || Date.now() - due <= LATE_SLOT_MS) return;
        // The leave to go counts only if it comes back in time: a process that stalled again while asking
        // would send later than it was let, beside the requests of the slots after it.
        if ((await lateMayGo(at)) && Date.now() - due <= LATE_MAX_MS) return;
      }
    },
    observe(call) {
      if (call.status !== undefined && call.error?.code !== 'API_RATE_LIMITED') admitted++;
    },
    async block(retryAfterMs) {
      // This process stops going unasked, and its unreported figures count in the cut.
      rateLimitedAt = Date.now();
      leaseUntil = 0;
      unpaced = false;
      const args = [retryAfterMs ?? DEFAULT_RETRY_AFTER_MS, known, policy.decrease, policy.increase, policy.floor, policy.cutSpacingMs, policy.forgetMs, leasedSent, admitted];
      leasedSent = 0;
      admitted = 0;
      await cutScript.run(redis, budgetKeys.slice(0, 3), args.map(String));
    },
    async learnedRate() {
      const rate = await redis.hget(keys.budgetRate, 'r');
      return rate === null ? undefined : Number(rate);
    },
  };
}
