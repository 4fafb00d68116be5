/**
 * An import's run state, kept in Redis beside its record
 * (`<prefix>:import:<id>:run`, a hash that expires with the import):
 *
 * - `running`: workers start its rows (the default: an import without the
 *   hash is running);
 * - `paused`: workers start none of its rows (requests already out finish);
 *   `resume` runs it on;
 * - `cancelling`: its rows that were never sent settle as `cancelled`; rows
 *   already sent finish as they would have;
 * - `cancelled`: every row has an outcome, and the results (with
 *   unprocessed.csv) are written.
 *
 * A canary (`import --canary N`) holds back rows after the first N
 * (`holdFrom`) until those N have settled; then the hold goes, and the import
 * pauses itself when more than `canaryMaxFailures` of them did not succeed.
 *
 * Reading is cheap: one HGETALL of a small hash, and workers keep what they
 * read for {@link RUN_STATE_CACHE_MS}. Whether a row is cancelled or sent is
 * not decided here but in the ledger's scripts (src/store/importStore.ts),
 * which read this hash in the same script call.
 */
import type { RedisClient } from '../redis/redis.js';
import type { StoreKeys } from '../redis/keys.js';

export const RUN_STATES = ['running', 'paused', 'cancelling', 'cancelled'] as const;
export type RunState = (typeof RUN_STATES)[number];

/** What a row's worker does with a row of an import in this state. */
export type RowGate = 'go' | 'hold' | 'cancel';

/** How long a worker trusts a run state it has read: a pause is seen within this, a cancel is atomic anyway. */
export const RUN_STATE_CACHE_MS = 300;
/** How long a held batch or row waits before it is looked at again (resume and a passed canary promote it at once). */
export const HELD_RETURN_MS = 5_000;

export interface RunStatus {
  state: RunState;
  /** Epoch ms of the last change. */
  at?: number;
  /** Why it is paused or cancelled, as the operator reads it. */
  reason?: string;
  /** `import --canary N`: the first N rows run first. */
  canaryRows?: number;
  /** More failures than this among the canary rows pause the import. */
  canaryMaxFailures?: number;
  /** Rows from this one on wait until the canary rows have settled. */
  holdFrom?: number;
}

const RUNNING: RunStatus = { state: 'running' };

const isRunState = (value: string | undefined): value is RunState => (RUN_STATES as readonly string[]).includes(value ?? '');
const numberOf = (value: string | undefined): number | undefined => (value === undefined || value === '' ? undefined : Number(value));

/** The run state from its hash's fields (none: running). */
export function runStatusOf(hash: Record<string, string>): RunStatus {
  return {
    state: isRunState(hash.state) ? hash.state : 'running',
    ...(hash.at ? { at: Number(hash.at) } : {}),
    ...(hash.reason ? { reason: hash.reason } : {}),
    ...(numberOf(hash.canaryRows) !== undefined ? { canaryRows: numberOf(hash.canaryRows), canaryMaxFailures: numberOf(hash.canaryMaxFailures) ?? 0 } : {}),
    ...(numberOf(hash.holdFrom) !== undefined ? { holdFrom: numberOf(hash.holdFrom) } : {}),
  };
}

/** Whether a worker may start a row of an import in this state. */
export function gateOf(status: RunStatus, row: number): RowGate {
  if (status.state === 'cancelling' || status.state === 'cancelled') return 'cancel';
  if (status.state === 'paused') return 'hold';
  if (status.holdFrom !== undefined && row >= status.holdFrom) return 'hold';
  return 'go';
}

/** The run state of one import, read now. */
export async function readRunState(redis: RedisClient, keys: StoreKeys, importId: string): Promise<RunStatus> {
  const hash = await redis.hgetall(keys.runState(importId));
  return hash.state ? runStatusOf(hash) : RUNNING;
}

/** Run states read at most once per `ttlMs` per import: what a worker asks before each row. */
export function runStateCache(redis: RedisClient, keys: StoreKeys, ttlMs = RUN_STATE_CACHE_MS) {
  const cache = new Map<string, { at: number; status: Promise<RunStatus> }>();
  return {
    get(importId: string, now = Date.now()): Promise<RunStatus> {
      const hit = cache.get(importId);
      if (hit && now - hit.at < ttlMs) return hit.status;
      const status = readRunState(redis, keys, importId);
      cache.set(importId, { at: now, status });
      // A failed read is not kept: the next asks again.
      status.catch(() => cache.delete(importId));
      if (cache.size > 1000) for (const [id, entry] of cache) if (now - entry.at >= ttlMs) cache.delete(id);
      return status;
    },
    /** Drops what is known of an import: the next read goes to Redis. */
    forget(importId: string): void {
      cache.delete(importId);
    },
  };
}
export type RunStateCache = ReturnType<typeof runStateCache>;

/** A change of run state: what it was before, and what it is now. */
export interface RunChange {
  before: RunState;
  after: RunState;
}

// KEYS: run. ARGV: to, now, reason, from states (comma-separated).
// Moves to `to` when the current state (running when unset) is one of `from`; returns the state before.
// Leaving for running or cancelling also lets go of a canary's hold.
const CHANGE_SCRIPT = `
local current = redis.call('HGET', KEYS[1], 'state') or 'running'
local allowed = false
for from in string.gmatch(ARGV[4], '[^,]+') do if from == current then allowed = true end end
if not allowed then return current end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'at', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'reason', ARGV[3]) else redis.call('HDEL', KEYS[1], 'reason') end
if ARGV[1] == 'running' or ARGV[1] == 'cancelling' then redis.call('HDEL', KEYS[1], 'holdFrom') end
return current
`;

async function change(redis: RedisClient, keys: StoreKeys, importId: string, to: RunState, from: readonly RunState[], reason = '', now = Date.now()): Promise<RunChange & { changed: boolean }> {
  const before = String(await redis.eval(CHANGE_SCRIPT, 1, keys.runState(importId), to, String(now), reason, from.join(',')));
  const was = isRunState(before) ? before : 'running';
  const changed = from.includes(was);
  return { before: was, after: changed ? to : was, changed };
}

/** Pauses a running import; says what it was (a cancelled import stays cancelled). */
export const pauseRun = (redis: RedisClient, keys: StoreKeys, importId: string, reason = 'paused by the operator', now = Date.now()) =>
  change(redis, keys, importId, 'paused', ['running'], reason, now);

/** Runs a paused import on, and lets go of a canary's hold. */
export const resumeRun = (redis: RedisClient, keys: StoreKeys, importId: string, now = Date.now()) => change(redis, keys, importId, 'running', ['running', 'paused'], '', now);

/** Starts cancelling an import (running or paused). */
export const cancelRun = (redis: RedisClient, keys: StoreKeys, importId: string, reason = 'cancelled by the operator', now = Date.now()) =>
  change(redis, keys, importId, 'cancelling', ['running', 'paused', 'cancelling'], reason, now);

/** A cancelling import whose rows have all settled is cancelled. */
export const markRunCancelled = (redis: RedisClient, keys: StoreKeys, importId: string, now = Date.now()) =>
  change(redis, keys, importId, 'cancelled', ['cancelling'], 'cancelled by the operator', now);

/** Records a canary when the import is created: rows after the first `rows` wait until those have settled. */
export async function startCanary(redis: RedisClient, keys: StoreKeys, importId: string, rows: number, maxFailures: number, now = Date.now()): Promise<void> {
  await redis.hset(keys.runState(importId), { state: 'running', at: String(now), canaryRows: String(rows), canaryMaxFailures: String(maxFailures), holdFrom: String(rows + 1) });
}

// KEYS: run. ARGV: failures, now, reason. Ends the canary's hold once (0 when there was none);
// pauses a running import when failures exceed the canary's bound (2), else leaves it running (1).
const CONCLUDE_CANARY_SCRIPT = `
if not redis.call('HGET', KEYS[1], 'holdFrom') then return 0 end
redis.call('HDEL', KEYS[1], 'holdFrom')
local bound = tonumber(redis.call('HGET', KEYS[1], 'canaryMaxFailures') or '0')
if tonumber(ARGV[1]) > bound and (redis.call('HGET', KEYS[1], 'state') or 'running') == 'running' then
  redis.call('HSET', KEYS[1], 'state', 'paused', 'at', ARGV[2], 'reason', ARGV[3])
  return 2
end
return 1
`;

/** What concluding a canary did: nothing (no hold, or already concluded), let the rest run, or paused the import. */
export type CanaryVerdict = 'none' | 'passed' | 'paused';

/** Ends a canary's hold, given how many of its rows did not succeed; exactly one caller gets a verdict other than `none`. */
export async function concludeCanaryRun(redis: RedisClient, keys: StoreKeys, importId: string, failures: number, reason: string, now = Date.now()): Promise<CanaryVerdict> {
  const reply = await redis.eval(CONCLUDE_CANARY_SCRIPT, 1, keys.runState(importId), String(failures), String(now), reason);
  return reply === 2 ? 'paused' : reply === 1 ? 'passed' : 'none';
}

/** Pauses the inbox: the watcher leaves new files where they are until it is resumed. */
export async function pauseInbox(redis: RedisClient, keys: StoreKeys, now = Date.now()): Promise<boolean> {
  return (await redis.set(keys.inboxPaused, String(now), 'NX')) === 'OK';
}

/** Resumes the inbox; false when it was not paused. */
export async function resumeInbox(redis: RedisClient, keys: StoreKeys): Promise<boolean> {
  return (await redis.del(keys.inboxPaused)) === 1;
}

/** Since when the inbox is paused (epoch ms), or undefined when it is not. */
export async function inboxPausedSince(redis: RedisClient, keys: StoreKeys): Promise<number | undefined> {
  const value = await redis.get(keys.inboxPaused);
  return value === null ? undefined : Number(value);
}
