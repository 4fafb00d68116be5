import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { RedisClient } from '../redis/redis.js';
import { KNOWN_RATE_MARGIN, budgetUse, exportShareBeside, setExportShare, type BudgetUse } from '../redis/budget.js';
import { BATCH_JOB, ROWS_PER_BATCH, RowBatchDataSchema, batchJobOptions, batchRowsOf, type Queues, type RowBatchData, type RowQueueJobName } from './queues.js';
import { RETRY_DEFAULTS } from '../policy.js';
import type { ImportStore } from '../store/importStore.js';
import type { FailureLog } from '../failureLog.js';
import { luaScript } from '../redis/script.js';

/**
 * The feeder: how imports share the fleet's budget.
 *
 * Glossary:
 * - **backlog**: an import's batches not yet in the rows queue, in Redis (a
 *   sorted set of block numbers and a hash of their data, sealed card cells
 *   included, as they would be in the job). The producer writes them there.
 * - **release**: moving one batch from its backlog into the rows queue. A
 *   batch is first moved, in one script, to the `releasing` hash, then added
 *   to the queue under its deterministic job id, then dropped from
 *   `releasing`. A batch still there when a pass begins was left between the
 *   steps (a feeder that died, a pass whose add failed, or whose add a Redis
 *   that lost writes forgot): the pass adds it again (a no-op when it is
 *   there), so no batch waits there for ever.
 * - **in flight**: rows of jobs waiting in the queue or held by workers.
 * - **turn**: the round-robin of imports with a backlog, in the order they
 *   came, each releasing as many batches in its turn as its priority's weight
 *   ({@link PRIORITY_WEIGHTS}).
 *
 * One feeder runs in the fleet at a time (a lock in Redis with an expiry,
 * taken by whichever `subsync worker` finds it free); it keeps only about
 * {@link FEED_DEFAULTS}.aheadMs of the budget in flight, so a new import's
 * first batch waits behind that much work, never behind a whole file.
 */

/** `import --priority`: the weight of an import in the turn. */
export const IMPORT_PRIORITIES = ['high', 'normal', 'low'] as const;
export type ImportPriority = (typeof IMPORT_PRIORITIES)[number];
export const PRIORITY_WEIGHTS: Readonly<Record<ImportPriority, number>> = { high: 4, normal: 2, low: 1 };
export const ImportPrioritySchema = z.enum(IMPORT_PRIORITIES);

export const FEED_DEFAULTS = {
  /** Rows in flight: about what the budget sends in this long. */
  aheadMs: 2_000,
  /** How often the feeder looks for room. */
  tickMs: 100,
  /** The feeder lock's lifetime; renewed every tick, taken over by another worker when its holder dies. */
  lockMs: 3_000,
  /** How often each running import's rate is measured. */
  rateEveryMs: 1_000,
  /**
   * Without a rate to pace by, rows in flight per connected worker's slot. A
   * batch counts whole until its last row settles and is replaced only at the
   * next tick, so a slot needs several rows behind it: at 2, 32 slots kept
   * about 14 requests out (700 rows/s where the service allowed 1,500 at 20 ms);
   * at 8 they stay busy, and a new import still waits only a fraction of a
   * second behind what is in flight.
   */
  unpacedRowsPerSlot: 8,
  /**
   * With no rate to pace by, the rows in flight are also at least this long
   * of the rows/s the imports settle, as measured once a second (the floor
   * above holds until the first measure). Against a service answering in
   * 10 ms, 8 rows a slot alone kept a worker at 0.70–0.80 of a raw loop's
   * rows/s, and at 0 ms at about 2,500 rows/s with a core idle: the rows in
   * flight bounded it, not the service or the CPU. Each measure lets more
   * through until something else bounds the pace, and a new import waits
   * behind about this long of the pace, or the floor's rows where more.
   */
  unpacedAheadMs: 500,
} as const;

/** Rows the fleet should hold with no rate to pace by: see {@link FEED_DEFAULTS}. */
function unpacedRowsAhead(slots: number, settledPerSecond: number): number {
  return Math.max(slots * FEED_DEFAULTS.unpacedRowsPerSlot, Math.ceil((settledPerSecond * FEED_DEFAULTS.unpacedAheadMs) / 1000));
}

/** How long a released batch is remembered, so a resumed enqueue does not put it back in the backlog. */
const RELEASED_MEMORY_MS = 7 * 24 * 3600 * 1000;

export function feedKeys(prefix: string) {
  const base = `${prefix}:feed`;
  return {
    /** Imports with a backlog, by arrival (score: ms). */
    turn: `${base}:turn`,
    /** Priority by import. */
    priorities: `${base}:priority`,
    /** Rows in each import's backlog. */
    backlogRows: `${base}:backlog-rows`,
    /** Rows released, by import. */
    released: `${base}:released`,
    /** Batches between backlog and queue: field `<importId>:<block>`, value the batch's data. */
    releasing: `${base}:releasing`,
    /** The rate each running import gets (JSON {r, s, at}). */
    rates: `${base}:rates`,
    lock: `${base}:lock`,
    backlog: (importId: string) => `${base}:import:${importId}:backlog`,
    batches: (importId: string) => `${base}:import:${importId}:batches`,
    releasedBlocks: (importId: string) => `${base}:import:${importId}:released`,
  };
}
export type FeedKeys = ReturnType<typeof feedKeys>;

// KEYS: turn, backlog, batches, released blocks, priorities, backlog rows.
// ARGV: import id, arrival ms, priority, then (block, rows, data JSON) per batch.
// A block released before (a resumed enqueue) is not put back. Returns batches added.
const PUSH_SCRIPT = `
local added, rows = 0, 0
for i = 4, #ARGV, 3 do
  if redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 0 and redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 2]) == 1 then
    redis.call('ZADD', KEYS[2], tonumber(ARGV[i]), ARGV[i])
    added = added + 1
    rows = rows + tonumber(ARGV[i + 1])
  end
end
if rows > 0 then redis.call('HINCRBY', KEYS[6], ARGV[1], rows) end
if redis.call('ZCARD', KEYS[2]) > 0 then redis.call('ZADD', KEYS[1], 'NX', tonumber(ARGV[2]), ARGV[1]) end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[3])
return added
`;

// KEYS: turn, backlog, batches, released blocks, releasing, backlog rows, released.
// ARGV: import id, batches to take, memory ms. Moves the first batches of the backlog
// to releasing; returns (block, data) pairs.
const TAKE_SCRIPT = `
local popped = redis.call('ZPOPMIN', KEYS[2], tonumber(ARGV[2]))
local out = {}
local rows = 0
for i = 1, #popped, 2 do
  local block = popped[i]
  local data = redis.call('HGET', KEYS[3], block)
  redis.call('HDEL', KEYS[3], block)
  redis.call('SADD', KEYS[4], block)
  if data then
    redis.call('HSET', KEYS[5], ARGV[1] .. ':' .. block, data)
    rows = rows + #cjson.decode(data).rows
    out[#out + 1] = block
    out[#out + 1] = data
  end
end
redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[3]))
if rows > 0 then
  redis.call('HINCRBY', KEYS[7], ARGV[1], rows)
  if redis.call('HINCRBY', KEYS[6], ARGV[1], -rows) <= 0 then redis.call('HDEL', KEYS[6], ARGV[1]) end
end
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
end
return out
`;

// KEYS: lock, releasing. ARGV: token, ms. Takes or renews the feeder lock; returns {0: held by another,
// 1: renewed, 2: taken; batches in releasing}.
const LOCK_SCRIPT = `
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  local state = 2
  if holder then state = 1 end
  return {state, redis.call('HLEN', KEYS[2])}
end
return {0, 0}
`;
const RELEASE_LOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

const BATCH_NAME: RowQueueJobName = BATCH_JOB;
const pushScript = luaScript(PUSH_SCRIPT);
const takeScript = luaScript(TAKE_SCRIPT);
const lockScript = luaScript(LOCK_SCRIPT);
const releaseLockScript = luaScript(RELEASE_LOCK);

/** A batch as the producer hands it to the backlog. */
export interface BacklogBatch {
  block: number;
  data: RowBatchData;
}

/**
 * Puts an import's batches in its backlog (idempotent: a batch already there
 * or already released is left as it is) and the import in the turn.
 */
export async function pushBacklog(redis: RedisClient, prefix: string, importId: string, batches: readonly BacklogBatch[], priority: ImportPriority = 'normal', now = Date.now()): Promise<number> {
  const keys = feedKeys(prefix);
  const args: string[] = [importId, String(now), priority];
  for (const { block, data } of batches) args.push(String(block), String(data.rows.length), JSON.stringify(data));
  const added = await pushScript.run(redis, [keys.turn, keys.backlog(importId), keys.batches(importId), keys.releasedBlocks(importId), keys.priorities, keys.backlogRows], args);
  return Number(added);
}

/** Of these blocks of an import, those still in its backlog or being released (a row of theirs is not stranded: the feeder will queue it). */
export async function blocksAwaitingRelease(redis: RedisClient, prefix: string, importId: string, blocks: readonly number[]): Promise<Set<number>> {
  if (blocks.length === 0) return new Set();
  const keys = feedKeys(prefix);
  const [inBacklog, releasing] = await Promise.all([
    redis.hmget(keys.batches(importId), ...blocks.map(String)),
    redis.hmget(keys.releasing, ...blocks.map((b) => `${importId}:${b}`)),
  ]);
  return new Set(blocks.filter((_, i) => inBacklog[i] !== null || releasing[i] !== null));
}

/** Where an import stands in the turn, for `status`, `import --wait` and the dashboard. */
export interface ImportSchedule {
  priority: ImportPriority;
  /** Rows not yet released to the queue. */
  backlogRows: number;
  /** Rows released to the queue so far. */
  releasedRows: number;
  /** 1-based place in the turn among imports with a backlog (by arrival); undefined when it has none. */
  place: number | undefined;
  /** Imports with a backlog. */
  sharing: number;
  /** Its weight over the weights of the imports with a backlog: the share of the imports' budget it is meant to get (1 when alone or not waiting). */
  weightShare: number;
  /** Of the rows the running imports settled lately, the share that were its own (undefined: not measured yet). */
  share: number | undefined;
  /** Rows/s it settled over the last few seconds, as the feeder measured (undefined: not measured yet). */
  rowsPerSecond: number | undefined;
}

const RateSchema = z.object({ r: z.number(), s: z.number(), at: z.number() });

export async function importSchedule(redis: RedisClient, prefix: string, importId: string): Promise<ImportSchedule> {
  const keys = feedKeys(prefix);
  const [turn, priority, backlogRows, released, rates] = await Promise.all([
    redis.zrange(keys.turn, 0, -1),
    redis.hget(keys.priorities, importId),
    redis.hget(keys.backlogRows, importId),
    redis.hget(keys.released, importId),
    redis.hgetall(keys.rates),
  ]);
  const own = ImportPrioritySchema.catch('normal').parse(priority ?? 'normal');
  const priorities = turn.length > 0 ? await redis.hmget(keys.priorities, ...turn) : [];
  const weights = priorities.map((p) => PRIORITY_WEIGHTS[ImportPrioritySchema.catch('normal').parse(p ?? 'normal')]);
  const index = turn.indexOf(importId);
  const total = weights.reduce((a, b) => a + b, 0);
  const measured = new Map<string, number>();
  for (const [id, json] of Object.entries(rates)) {
    const rate = RateSchema.safeParse(safeJson(json));
    if (rate.success) measured.set(id, rate.data.r);
  }
  const mine = measured.get(importId);
  const sum = [...measured.values()].reduce((a, b) => a + b, 0);
  return {
    priority: own,
    backlogRows: Math.max(0, Number(backlogRows ?? 0)),
    releasedRows: Number(released ?? 0),
    place: index >= 0 ? index + 1 : undefined,
    sharing: turn.length,
    weightShare: index >= 0 && total > 0 ? PRIORITY_WEIGHTS[own] / total : 1,
    share: mine === undefined ? undefined : sum > 0 ? mine / sum : 0,
    rowsPerSecond: mine,
  };
}

/** Whether an import in this run state (`<prefix>:import:<id>:run`, field `state`) may have its batches released. */
export const runStateAllows = (state: string | null | undefined): boolean => state !== 'paused' && state !== 'cancelling' && state !== 'cancelled';

/** Takes an import out of the turn and drops its backlog (a cancelled import's). */
export async function dropBacklog(redis: RedisClient, prefix: string, importId: string): Promise<void> {
  const keys = feedKeys(prefix);
  await redis.multi().zrem(keys.turn, importId).del(keys.backlog(importId), keys.batches(importId)).hdel(keys.backlogRows, importId).exec();
}

/** Imports the feeder follows now: those with a backlog, and those whose released rows it measures (until they finish). */
export async function runningImports(redis: RedisClient, prefix: string): Promise<string[]> {
  const keys = feedKeys(prefix);
  const [turn, measured] = await Promise.all([redis.zrange(keys.turn, 0, -1), redis.hkeys(keys.rates)]);
  return [...new Set([...turn, ...measured])];
}

/** Rows a job of the rows queue carries: a batch its rows, a row job one. */
const rowsOfJob = (name: string, data: unknown): number => {
  const batch = name === BATCH_JOB ? RowBatchDataSchema.safeParse(data) : undefined;
  return batch?.success ? batch.data.rows.length : 1;
};

const safeJson = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
};

export interface FeederDeps {
  redis: RedisClient;
  prefix: string;
  queues: Queues;
  store: ImportStore;
  logger: Logger;
  failures?: FailureLog;
  /** SUBSYNC_RATE (undefined: the learned rate, or none). */
  rate: number | undefined;
  /** SUBSYNC_EXPORT_SHARE. */
  exportShare: number;
  /** This process's worker concurrency (for the unpaced bound). */
  concurrency: number;
  /** Tells whether an import's rows may be released now. Default: by its run state ({@link runStateAllows}). */
  mayRelease?: (importId: string) => Promise<boolean>;
}

export interface Feeder {
  /** One pass: takes or renews the lock and releases what there is room for. Returns the batches released. */
  runOnce(): Promise<number>;
  /** Whether this process holds the feeder lock. */
  holdsLock(): boolean;
  /** Stops the loop and gives up the lock. */
  close(): Promise<void>;
}

/** Starts the feeder loop of one worker process (it acts only while it holds the fleet's feeder lock). */
export function startFeeder(deps: FeederDeps, options: FeederOptions & { tickMs?: number } = {}): Feeder {
  const feeder = createFeeder(deps, options);
  const tickMs = options.tickMs ?? FEED_DEFAULTS.tickMs;
  let running: Promise<unknown> | undefined;
  let stopped = false;
  const timer = setInterval(() => {
    if (running || stopped) return;
    running = feeder
      .runOnce()
      .catch((error: unknown) => (deps.failures ? deps.failures.report('feeder', error) : deps.logger.warn({ err: error }, 'feeder pass failed')))
      .finally(() => {
        running = undefined;
      });
  }, tickMs);
  timer.unref();
  return {
    runOnce: () => feeder.runOnce(),
    holdsLock: () => feeder.holdsLock(),
    async close() {
      stopped = true;
      clearInterval(timer);
      await running;
      await feeder.close();
    },
  };
}

export interface FeederOptions {
  /** Default {@link FEED_DEFAULTS}.aheadMs. */
  aheadMs?: number;
  /** Default {@link FEED_DEFAULTS}.lockMs. */
  lockMs?: number;
  /** A fixed bound of rows in flight instead of the one from the pace (a test releasing a whole backlog at once). */
  rowsAhead?: number;
}

/** The feeder without its timer (tests drive it pass by pass). */
export function createFeeder(deps: FeederDeps, options: FeederOptions = {}): Feeder {
  const { redis, prefix, queues, store } = deps;
  const keys = feedKeys(prefix);
  const storeKeys = store.keys;
  const aheadMs = options.aheadMs ?? FEED_DEFAULTS.aheadMs;
  const lockMs = options.lockMs ?? FEED_DEFAULTS.lockMs;
  const token = `${process.pid}:${randomBytes(6).toString('hex')}`;
  let locked = false;
  // The turn: the import whose turn it is, and how many batches it may still release in it.
  let current: string | undefined;
  let credit = 0;
  // What the feeder needs of each import's record (fixed once it is enqueued).
  const facts = new Map<string, { attempts: number; batchRows: number }>();
  // Settled rows and when, per import measured: the rates.
  const seen = new Map<string, { settled: number; at: number; rate: number | undefined }>();
  let lastRates = 0;
  let workers = { count: 1, at: 0 };
  // The export's share this feeder last told the budget.
  let toldShare = { share: NaN, at: 0 };

  async function factsOf(importId: string): Promise<{ attempts: number; batchRows: number }> {
    let known = facts.get(importId);
    if (known === undefined) {
      const record = await store.getImport(importId);
      known = { attempts: record?.options.attempts ?? RETRY_DEFAULTS.attempts, batchRows: record ? batchRowsOf(record) : ROWS_PER_BATCH };
      facts.set(importId, known);
    }
    return known;
  }

  /** Adds batches to the rows queue (idempotent by job id), then forgets them from `releasing`. */
  async function queueBatches(batches: Array<{ importId: string; block: number; data: RowBatchData }>): Promise<void> {
    if (batches.length === 0) return;
    const jobs = await Promise.all(batches.map(async (b) => ({ name: BATCH_NAME, data: b.data, opts: batchJobOptions(b.importId, b.block, (await factsOf(b.importId)).attempts) })));
    await queues.rows.addBulk(jobs);
    await redis.hdel(keys.releasing, ...batches.map((b) => `${b.importId}:${b.block}`));
  }

  /** Batches a feeder took from a backlog and did not see into the queue (it died, or its add failed or was lost): into the queue now. */
  async function recover(): Promise<number> {
    const releasing = await redis.hgetall(keys.releasing);
    const batches: Array<{ importId: string; block: number; data: RowBatchData }> = [];
    for (const [field, json] of Object.entries(releasing)) {
      const at = field.lastIndexOf(':');
      const parsed = RowBatchDataSchema.safeParse(safeJson(json));
      if (at <= 0 || !parsed.success) {
        await redis.hdel(keys.releasing, field);
        continue;
      }
      batches.push({ importId: field.slice(0, at), block: Number(field.slice(at + 1)), data: parsed.data });
    }
    await queueBatches(batches);
    if (batches.length > 0) deps.logger.info({ batches: batches.length }, 'feeder: batches left between the backlog and the queue are queued');
    return batches.length;
  }

  /**
   * Rows waiting in the queue or held by workers. Counted from the job counts
   * (a batch as a whole block of ROWS_PER_BATCH, the most it holds) while that
   * leaves room under `ahead`; near it, the active jobs are read, a row job
   * counting one row.
   */
  async function rowsInFlight(ahead: number): Promise<number> {
    const counts = await queues.rows.getJobCounts('waiting', 'prioritized', 'active');
    const queued = (counts.waiting ?? 0) + (counts.prioritized ?? 0) * ROWS_PER_BATCH;
    const upper = queued + (counts.active ?? 0) * ROWS_PER_BATCH;
    if (upper < ahead) return upper;
    let rows = queued;
    for (const n of await activeRows()) rows += n;
    return rows;
  }

  // Rows of each active job by id: a job's rows never change once queued, so
  // each is read once when it turns active, not every tick while it runs.
  let activeRowsById = new Map<string, number>();

  /** The rows of each job held by workers (a row job one, a batch its rows). */
  async function activeRows(): Promise<number[]> {
    // Every active id: getRanges answers only the first two unless given the whole range.
    const ids = await queues.rows.getRanges(['active'], 0, -1);
    const unknown = ids.filter((id) => !activeRowsById.has(id));
    const jobs = await Promise.all(unknown.map((id) => queues.rows.getJob(id)));
    const known = new Map<string, number>();
    for (const job of jobs) if (job?.id !== undefined) activeRowsById.set(job.id, rowsOfJob(job.name, job.data));
    // A job gone before it was read (it settled meanwhile) counts nothing, as it did when read whole.
    const rows: number[] = [];
    for (const id of ids) {
      const n = activeRowsById.get(id);
      if (n === undefined) continue;
      known.set(id, n);
      rows.push(n);
    }
    activeRowsById = known;
    return rows;
  }

  /** Rows the fleet should hold: about `aheadMs` of the imports' pace (less the export's share while it runs). */
  async function rowsAhead(use: BudgetUse, exportShare: number): Promise<number> {
    if (options.rowsAhead !== undefined) return options.rowsAhead;
    const learned = Number((await redis.hget(storeKeys.budgetRate, 'r')) ?? NaN);
    const known = deps.rate === undefined ? NaN : deps.rate * (1 - KNOWN_RATE_MARGIN);
    const paces = [learned, known].filter((n) => Number.isFinite(n) && n > 0);
    if (paces.length === 0) {
      if (Date.now() - workers.at > 5_000) workers = { count: Math.max(1, (await queues.rows.getWorkers()).length), at: Date.now() };
      let settledPerSecond = 0;
      for (const { rate } of seen.values()) settledPerSecond += rate ?? 0;
      return unpacedRowsAhead(deps.concurrency * workers.count, settledPerSecond);
    }
    const pace = Math.min(...paces) * (use.exportActive ? 1 - exportShare : 1);
    return Math.max(ROWS_PER_BATCH, Math.ceil((pace * aheadMs) / 1000));
  }

  /**
   * By the import's run state (`<prefix>:import:<id>:run`): one an operator
   * paused, or is cancelling, keeps its backlog and its place and releases
   * nothing; a cancelled one leaves the turn, its backlog dropped (its unsent
   * rows settled cancelled); a canary's (`holdFrom`) releases no batch past
   * its first rows until the hold goes.
   */
  async function mayRelease(importId: string): Promise<boolean> {
    const [state, holdFrom] = await redis.hmget(storeKeys.runState(importId), 'state', 'holdFrom');
    if (state === 'cancelled') {
      await dropBacklog(redis, prefix, importId);
      return false;
    }
    if (!runStateAllows(state)) return false;
    if (holdFrom === null || holdFrom === '') return true;
    const [next] = await redis.zrange(keys.backlog(importId), 0, 0);
    return next === undefined || Number(next) * (await factsOf(importId)).batchRows + 1 < Number(holdFrom);
  }

  /** The next import in the turn with room in its share, or undefined when none has a backlog. */
  async function nextInTurn(turn: string[], priorities: Map<string, ImportPriority>): Promise<string | undefined> {
    if (turn.length === 0) return undefined;
    if (current !== undefined && credit > 0 && turn.includes(current)) return current;
    const from = current === undefined ? -1 : turn.indexOf(current);
    // The next after the current one in arrival order (or the first, when the current one left the turn).
    const ordered = from >= 0 ? [...turn.slice(from + 1), ...turn.slice(0, from + 1)] : turn;
    for (const id of ordered) {
      if (!(await (deps.mayRelease ?? mayRelease)(id))) continue;
      current = id;
      credit = PRIORITY_WEIGHTS[priorities.get(id) ?? 'normal'];
      return id;
    }
    return undefined;
  }

  /**
   * The export's share of the budget now: it takes a turn like one more import
   * (imports with a backlog, or whose released rows still run), never under
   * SUBSYNC_EXPORT_SHARE. Told to the budget, which keeps it as holes in the imports' slots.
   */
  async function shareExport(turn: readonly string[]): Promise<number> {
    const running = new Set([...turn, ...seen.keys()]).size;
    const share = exportShareBeside(deps.exportShare, running);
    // Told again now and then: the hash beside the clock expires when the budget is idle.
    if (share !== toldShare.share || Date.now() - toldShare.at > 5_000) {
      await setExportShare(redis, storeKeys, share);
      toldShare = { share, at: Date.now() };
    }
    return share;
  }

  async function release(): Promise<number> {
    const turn = await redis.zrange(keys.turn, 0, -1);
    const exportShare = await shareExport(turn);
    // No backlog: nothing to release, so neither the budget nor the queue is read.
    if (turn.length === 0) return 0;
    const ahead = await rowsAhead(await budgetUse(redis, storeKeys), exportShare);
    let room = ahead - (await rowsInFlight(ahead));
    if (room <= 0) return 0;
    const found = await redis.hmget(keys.priorities, ...turn);
    const priorities = new Map(turn.map((id, i) => [id, ImportPrioritySchema.catch('normal').parse(found[i] ?? 'normal')]));
    const taken: Array<{ importId: string; block: number; data: RowBatchData }> = [];
    const empty = new Set<string>();
    while (room > 0) {
      const live = turn.filter((id) => !empty.has(id));
      const id = await nextInTurn(live, priorities);
      if (id === undefined) break;
      const reply = await takeScript.run(
        redis,
        [keys.turn, keys.backlog(id), keys.batches(id), keys.releasedBlocks(id), keys.releasing, keys.backlogRows, keys.released],
        [id, '1', String(RELEASED_MEMORY_MS)],
      );
      const pairs = Array.isArray(reply) ? (reply as string[]) : [];
      if (pairs.length === 0) {
        empty.add(id);
        credit = 0;
        continue;
      }
      for (let i = 0; i + 1 < pairs.length; i += 2) {
        const parsed = RowBatchDataSchema.safeParse(safeJson(pairs[i + 1] ?? ''));
        if (!parsed.success) continue;
        taken.push({ importId: id, block: Number(pairs[i]), data: parsed.data });
        room -= parsed.data.rows.length;
      }
      credit--;
      if (!seen.has(id)) seen.set(id, { settled: -1, at: 0, rate: undefined });
    }
    await queueBatches(taken);
    if (taken.length > 0 && deps.logger.isLevelEnabled('debug')) deps.logger.debug({ batches: taken.length, rows: taken.reduce((n, b) => n + b.data.rows.length, 0) }, 'feeder released batches');
    return taken.length;
  }

  /** Measures the rows/s each import of the turn, or recently released, settles. */
  async function measureRates(): Promise<void> {
    const now = Date.now();
    if (now - lastRates < FEED_DEFAULTS.rateEveryMs) return;
    lastRates = now;
    for (const id of await redis.zrange(keys.turn, 0, -1)) if (!seen.has(id)) seen.set(id, { settled: -1, at: 0, rate: undefined });
    const writes: string[] = [];
    for (const [id, last] of seen) {
      const record = await store.getImport(id);
      const settled = record ? (await store.counts(id)).settled : undefined;
      if (!record || settled === undefined || record.finishedAt !== undefined) {
        // Finished (or gone): nothing of it stays in the feeder's hashes but its released blocks (which expire).
        seen.delete(id);
        facts.delete(id);
        if (!(await redis.zscore(keys.turn, id))) await Promise.all([keys.rates, keys.priorities, keys.released].map((key) => redis.hdel(key, id)));
        continue;
      }
      if (last.settled >= 0) {
        const instant = ((settled - last.settled) * 1000) / Math.max(1, now - last.at);
        // A moving average over about five seconds.
        const rate = last.rate === undefined ? instant : last.rate + (instant - last.rate) * 0.3;
        last.rate = rate;
        writes.push(id, JSON.stringify({ r: Math.round(rate * 10) / 10, s: settled, at: now }));
      }
      last.settled = settled;
      last.at = now;
    }
    if (writes.length > 0) {
      await redis.hset(keys.rates, ...writes);
      await redis.pexpire(keys.rates, 60_000);
    }
  }

  return {
    async runOnce() {
      const reply = await lockScript.run(redis, [keys.lock, keys.releasing], [token, String(lockMs)]);
      const [lock, releasing] = Array.isArray(reply) ? reply.map(Number) : [0, 0];
      if (lock === 0) {
        locked = false;
        return 0;
      }
      if (lock === 2 || !locked) {
        locked = true;
        current = undefined;
      }
      // Passes of one feeder never overlap, so a batch in `releasing` now was left there: by a feeder
      // that died, or by a pass of this one whose add failed or was lost with Redis's last writes.
      if ((releasing ?? 0) > 0) await recover();
      const released = await release();
      await measureRates();
      return released;
    },
    holdsLock: () => locked,
    async close() {
      if (locked) await releaseLockScript.run(redis, [keys.lock], [token]).catch(() => undefined);
      locked = false;
    },
  };
}
