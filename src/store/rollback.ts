import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { z } from 'zod';
import { Cluster } from 'ioredis';
import type { RedisClient } from '../redis/redis.js';
import { luaScript } from '../redis/script.js';
import { writeFileAtomic } from '../files.js';
import { SubsyncError } from '../errors.js';
import { SERVER_RUN_LUA, type ImportStore, type SeqWatch } from './importStore.js';

/**
 * Detects a Redis that came back without some of its acknowledged writes (a
 * host crash with AOF `everysec`, an older RDB snapshot, a replica promoted
 * while behind), and makes the imports it touched safe again.
 *
 * Every mark and settle script bumps one counter (`<prefix>:seq`) and
 * returns it. While Redis keeps its writes the counter only grows, so every
 * value a process gets back is above every value it saw before it asked.
 * Each process remembers the highest value it saw, and writes it to a small
 * file in the data dir (every few seconds and at exit), so the memory
 * outlives the process. A value at or below the remembered one (on a call,
 * on reconnecting, at start) means Redis lost writes: marks of rows sent,
 * settles, job fetches. Then:
 *
 * 1. marks are refused fleet-wide (a hold key the mark script checks), so
 *    nothing is sent while this runs;
 * 2. every unfinished import goes into read-back mode: each row without an
 *    outcome, pending or sent, becomes `sent` (a request may have left), so
 *    whichever run takes it reads back before any create; and what else
 *    Redis may have lost writes of is distrusted (`distrust`: the customer
 *    index, which may lack customers created since it was last read to its
 *    end, their rows' claims gone with them);
 * 3. the counter is raised above the remembered value, the rollback is
 *    recorded in Redis (`status`, the start check and the dashboard show it),
 *    the hold is lifted, and one error line tells the operator.
 *
 * A Redis that restarted or failed over (its run id changed since a process
 * or its data dir last saw it) is handled the same way unless it fsyncs every
 * write: the witnesses of its last moments may have died with it, the data
 * dir's file being a few seconds behind, and a process started since would
 * see nothing wrong with the counter.
 *
 * Redis itself keeps the run id of the server the fleet last checked
 * (`<prefix>:checked-run`), persisted with everything else: a server that
 * restarted or took over holds its predecessor's, and the mark script
 * refuses every mark (nothing is sent) until a process has handled that and
 * written the new one. Without it, a process that had seen none of the lost
 * writes (its counter below what Redis came back with) could send a row
 * whose create and settle were lost, before any process noticed the restart.
 */

/**
 * Thrown before a create leaves when a connection to Redis was lost (or a rollback found) since its row
 * was marked `sent`: the server that took the mark may be gone, and the mark with it, while the request
 * waited for a slot or for the budget. Nothing is sent; the row is read again (in read-back mode, once
 * the rollback is handled), so a run that read it back meanwhile is not followed by a second create.
 */
export class MarkInDoubtError extends SubsyncError {
  readonly code = 'ROW_MARK_HELD';
  constructor() {
    super('a connection to Redis was lost since the row was marked sent: the mark may be gone with its server, so nothing is sent and the row is read again');
  }
}

/** A rollback as recorded in Redis and told to the operator. */
export const RollbackSchema = z.object({
  /** Epoch ms of the detection. */
  at: z.number(),
  /** The highest counter value seen before, and what Redis said then. */
  from: z.number(),
  to: z.number(),
  /** Redis's run id and replication id before and after, when known (a restart, a failover). */
  runIdBefore: z.string().optional(),
  runId: z.string().optional(),
  replIdBefore: z.string().optional(),
  replId: z.string().optional(),
  /** Where it was seen: `host:pid`, and how (a call, a reconnect, the start). */
  by: z.string(),
  how: z.string(),
  /** Unfinished imports put in read-back mode, and their rows that became `sent`. */
  imports: z.array(z.string()),
  rows: z.number(),
});
export type Rollback = z.infer<typeof RollbackSchema>;

/** What the rollback reads of a stored ledger entry (src/store/importStore.ts): every field kept, these read. */
const StoredStateSchema = z.looseObject({ s: z.string(), j: z.string().nullable(), k: z.string().optional(), l: z.string().optional() });
type StoredState = z.infer<typeof StoredStateSchema>;

/** What a data dir remembers: the highest counter seen, of which Redis data set (its continuity marker, src/store/continuity.ts), and Redis's ids then. */
const InstanceSchema = z.object({ id: z.string() });

const MemorySchema = z.object({ high: z.number(), instance: z.string().optional(), runId: z.string().optional(), replId: z.string().optional(), at: z.number() });
type Memory = z.infer<typeof MemorySchema>;

/** How long the fleet holds its marks while a rollback is handled, at most (the handler lifts it when done). */
const HOLD_MS = 120_000;
/** How often a process writes what it saw to the data dir, and compares with Redis when idle. */
const REMEMBER_EVERY_MS = 2_000;
const CHECK_EVERY_MS = 1_000;
/** Rollbacks kept in Redis for `status`. */
const KEPT = 20;

// Raises the counter to at least ARGV[1]. KEYS: seq.
const RAISE_SCRIPT = `
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) return tonumber(ARGV[1]) end
return v
`;
// Replaces entries still as they were read. KEYS: ledger. ARGV: (row, old JSON, new JSON) per row.
// Returns, per row, 1 when replaced, 0 when the entry changed since it was read.
const SWAP_SCRIPT = `
local reply = {}
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
return reply
`;
// The run id the fleet last checked (or nil), and the server's own: read by the script, so on the very node that holds
// the key, as the mark script reads them. KEYS: checked run.
const RUNS_SCRIPT = `${SERVER_RUN_LUA}
return {redis.call('GET', KEYS[1]) or '', serverRun()}
`;
const raiseScript = luaScript(RAISE_SCRIPT);
const runsScript = luaScript(RUNS_SCRIPT);
const swapScript = luaScript(SWAP_SCRIPT);

export interface RollbackWatch extends SeqWatch {
  /** Compares Redis's counter with what this process saw (at start, after a reconnect, periodically). */
  check(how: string): Promise<Rollback | undefined>;
  /** Resolves once no rollback is being handled by this process. */
  settled(): Promise<void>;
  /** Called with each rollback this process handles (the worker sweeps the imports it put in read-back mode). */
  onRollback(listener: (rollback: Rollback) => void): void;
  /**
   * Grows each time one of this process's connections to Redis closes or a rollback is found: a create
   * whose row was marked under another value must not leave (MarkInDoubtError).
   */
  epoch(): number;
  /** One of this process's other connections to Redis closed (the store's own is watched here). */
  connectionLost(): void;
  /** Writes what this process saw to the data dir and stops its timers. */
  close(): Promise<void>;
}

export interface RollbackWatchOptions {
  redis: RedisClient;
  store: ImportStore;
  prefix: string;
  dataDir: string;
  logger: Logger;
  /** Periodic checks and remembering (default on; off for one-shot commands that only check at start). */
  timers?: boolean;
  /** What the data dir remembered (openRollbackWatch reads it). */
  remembered?: Memory;
  /** The id of the continuity marker of the Redis data set this watch is on, kept with what is remembered. */
  instance?: string;
  /**
   * Called while sending is held, after read-back mode: what else may lack
   * writes Redis lost is to be read again before it is relied on (the
   * customer index). Resolves once no process relies on it any more.
   */
  distrust?: () => Promise<void>;
}

/** The file of the data dir where a fleet's processes remember the highest counter they saw. */
export function memoryFile(dataDir: string, prefix: string): string {
  return path.join(dataDir, 'state', `redis-seq.${prefix.replace(/[^A-Za-z0-9_.-]/g, '_')}.json`);
}

export function createRollbackWatch(options: RollbackWatchOptions): RollbackWatch {
  const { redis, store, logger } = options;
  const keys = store.keys;
  const file = memoryFile(options.dataDir, options.prefix);
  let high = options.remembered?.high ?? 0;
  let identity: { runId?: string; replId?: string } = { runId: options.remembered?.runId, replId: options.remembered?.replId };
  let handling: Promise<Rollback | undefined> | undefined;
  // The last rollback handled: a reply to a call issued before the counter was raised is not another one.
  let handledFrom = 0;
  let handledAt = 0;
  let dirty = false;
  let closed = false;
  let epoch = 0;

  const whoAmI = `${hostname()}:${process.pid}`;
  const listeners: Array<(rollback: Rollback) => void> = [];

  async function redisIdentity(): Promise<{ runId?: string; replId?: string }> {
    try {
      const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
      const node = nodes[0];
      if (!node) return {};
      const [server, replication] = await Promise.all([node.info('server'), node.info('replication')]);
      return { runId: /run_id:(\w+)/.exec(server)?.[1], replId: /master_replid:(\w+)/.exec(replication)?.[1] };
    } catch {
      return {};
    }
  }

  async function remember(): Promise<void> {
    if (!dirty) return;
    dirty = false;
    const earlier = await readMemory(file);
    // Several processes may share the data dir: the file keeps the highest any of them saw.
    if (earlier && earlier.high > high) return;
    await writeMemory(file, { high, ...(options.instance ? { instance: options.instance } : {}), ...identity, at: Date.now() });
  }

  /** Puts one import in read-back mode: every row without an outcome becomes `sent` without a claim. Returns how many rows changed. */
  async function readBackMode(importId: string, at: number): Promise<number> {
    const ledger = keys.ledger(importId);
    await redis.hset(keys.importRecord(importId), 'readBack', String(at));
    let changed = 0;
    let cursor = '0';
    do {
      const [next, items] = await redis.hscan(ledger, cursor, 'COUNT', 500);
      cursor = next;
      let read: Array<[row: string, text: string]> = [];
      for (let i = 0; i + 1 < items.length; i += 2) read.push([items[i] as string, items[i + 1] as string]);
      // A row written between its read and its swap (a run handing it on, counting an attempt, putting it back
      // to pending) is read again and swapped again: left as it was written, it could be sent without a read-back.
      while (read.length > 0) {
        const rows: string[] = [];
        const args: string[] = [];
        for (const [row, text] of read) {
          const entry = StoredStateSchema.parse(JSON.parse(text));
          const swapped = readBackEntry(entry);
          if (swapped === undefined || (await claimLives(entry))) continue;
          rows.push(row);
          args.push(row, text, swapped);
        }
        if (rows.length === 0) break;
        const replies = (await swapScript.run(redis, [ledger], args)) as number[];
        const missed = rows.filter((_, i) => replies[i] !== 1);
        changed += rows.length - missed.length;
        if (missed.length === 0) break;
        const texts = await redis.hmget(ledger, ...missed);
        read = missed.flatMap((row, i): Array<[string, string]> => {
          const text = texts[i];
          return text ? [[row, text]] : [];
        });
      }
    } while (cursor !== '0');
    return changed;
  }

  /** Whether a sent row's claim is a live run's: it stays (its run holds its lock, and reads nothing stale); a dead one's goes. */
  async function claimLives(entry: StoredState): Promise<boolean> {
    return entry.s === 'sent' && entry.k !== undefined && entry.l !== undefined && (await redis.get(entry.l)) === entry.k;
  }

  async function handle(from: number, to: number, how: string): Promise<Rollback | undefined> {
    const at = Date.now();
    const before = identity;
    const now = await redisIdentity();
    // The server this handling makes safe: read first, so one that restarted meanwhile is found unchecked again.
    const [, server] = await serverRuns();
    // Nothing may be sent anywhere in the fleet until the imports are in read-back mode.
    await redis.set(keys.rollbackHold, JSON.stringify({ at, by: whoAmI }), 'PX', HOLD_MS);
    try {
      const imports: string[] = [];
      let rows = 0;
      for (const id of await store.listImportIds(1000)) {
        const record = await store.getImport(id);
        if (!record || record.finishedAt !== undefined) continue;
        rows += await readBackMode(id, at);
        imports.push(id);
      }
      await options.distrust?.();
      const raised = Number(await raiseScript.run(redis, [keys.seq], [String(from + 1)]));
      high = Math.max(high, raised);
      // Marks go again, fleet-wide, once this server is the one checked.
      if (server) await redis.set(keys.checkedRun, server);
      identity = now;
      dirty = true;
      const rollback: Rollback = {
        at,
        from,
        to,
        ...(before.runId ? { runIdBefore: before.runId } : {}),
        ...(now.runId ? { runId: now.runId } : {}),
        ...(before.replId ? { replIdBefore: before.replId } : {}),
        ...(now.replId ? { replId: now.replId } : {}),
        by: whoAmI,
        how,
        imports,
        rows,
      };
      await redis.multi().lpush(keys.rollbacks, JSON.stringify(rollback)).ltrim(keys.rollbacks, 0, KEPT - 1).exec();
      logger.error({ rollback }, rollbackMessage(rollback));
      await remember();
      for (const listener of listeners) listener(rollback);
      return rollback;
    } finally {
      await redis.del(keys.rollbackHold).catch(() => undefined);
    }
  }

  /** The run id the fleet last checked ('' when none), and the server's. */
  async function serverRuns(): Promise<[checked: string, server: string]> {
    const [checked, server] = (await runsScript.run(redis, [keys.checkedRun], [])) as [string, string];
    return [checked, server];
  }

  /** `unchecked`: Redis says nobody handled its restart yet (no earlier handling can have covered it). */
  function detect(from: number, to: number, how: string, unchecked = false): Promise<Rollback | undefined> {
    if (!handling && !unchecked && from <= handledFrom && Date.now() - handledAt < HOLD_MS) return Promise.resolve(undefined);
    epoch++;
    handling ??= handle(from, to, how)
      .then((rollback) => {
        handledFrom = Math.max(handledFrom, from);
        handledAt = Date.now();
        return rollback;
      })
      .catch((error: unknown) => {
        logger.error({ err: error }, 'Redis lost acknowledged writes, and putting the unfinished imports in read-back mode failed; it is tried again at the next check');
        // Still lower than seen: the next call or check finds it again.
        return undefined;
      })
      .finally(() => {
        handling = undefined;
      });
    return handling;
  }

  async function check(how: string): Promise<Rollback | undefined> {
    if (handling) return handling;
    const before = high;
    const value = await redis.get(keys.seq);
    const seq = value === null ? 0 : Number(value);
    if (before > 0 && seq < before) return detect(before, seq, how);
    // A server other than the one the fleet last checked: a restart or failover nobody has handled (marks are
    // refused meanwhile). Handled as a rollback unless it fsyncs every write; the first check of all records it.
    const [checked, server] = await serverRuns();
    if (server && checked !== server) {
      if (checked !== '' && !(await fsyncsEveryWrite(redis))) return detect(Math.max(before, seq), seq, `${how}, Redis having restarted since the fleet last checked it`, true);
      await redis.set(keys.checkedRun, server);
    }
    if (how !== 'periodic check') {
      const now = await redisIdentity();
      // A Redis that restarted or failed over since this process (or its data dir) last saw it may lack
      // the writes of its last moments even when its counter is not below what was seen here: this
      // process's memory may be older than the lost window (a process started since, its data dir's file
      // being a few seconds behind), and nothing it remembers shows the loss. Unless that Redis fsyncs
      // every write before acknowledging it, the restart is handled as a rollback.
      if (before > 0 && identity.runId !== undefined && now.runId !== undefined && identity.runId !== now.runId && !(await fsyncsEveryWrite(redis))) {
        return detect(Math.max(before, seq), seq, `${how}, Redis having restarted`);
      }
      identity = now;
      dirty = true;
    }
    if (seq > high) {
      high = seq;
      dirty = true;
    }
    return undefined;
  }

  const timers: NodeJS.Timeout[] = [];
  if (options.timers !== false) {
    const every = (ms: number, run: () => Promise<unknown>): void => {
      let busy = false;
      const timer = setInterval(() => {
        if (busy || closed) return;
        busy = true;
        run()
          .catch(() => undefined)
          .finally(() => (busy = false));
      }, ms);
      timer.unref();
      timers.push(timer);
    };
    every(REMEMBER_EVERY_MS, remember);
    every(CHECK_EVERY_MS, () => check('periodic check'));
    // A reconnect is when a restarted or failed-over Redis shows itself: checked before anything else is relied on.
    redis.on('ready', () => void check('reconnect').catch(() => undefined));
    // A lost connection may be a server gone with what it acknowledged last: marks made before are in doubt.
    redis.on('close', () => epoch++);
  }

  return {
    high: () => high,
    saw(seq, highBefore) {
      if (seq <= highBefore && highBefore > 0) {
        void detect(highBefore, seq, 'a mark or settle');
        return true;
      }
      if (seq > high) {
        high = seq;
        dirty = true;
      }
      return handling !== undefined;
    },
    check,
    onRollback(listener) {
      listeners.push(listener);
    },
    epoch: () => epoch,
    connectionLost() {
      epoch++;
    },
    async settled() {
      while (handling) await handling;
    },
    async close() {
      closed = true;
      for (const timer of timers) clearInterval(timer);
      await handling;
      await remember().catch(() => undefined);
    },
  };
}

/**
 * At start: what the data dir remembers of the counter, compared with
 * Redis's. Returns the watch, primed with the remembered value, after
 * handling a rollback found that way. A Redis that lost everything (no
 * counter at all, told by the continuity check) is not a rollback here.
 */
export async function openRollbackWatch(options: RollbackWatchOptions & { redisLost?: boolean }): Promise<{ watch: RollbackWatch; found: Rollback | undefined }> {
  const memory = await readMemory(memoryFile(options.dataDir, options.prefix));
  // The data set Redis holds (its continuity marker): what the data dir remembers of another one (REDIS_URL pointed
  // elsewhere, or Redis wiped: told by the continuity check) says nothing of this one.
  const marker = await options.redis.get(`${options.prefix}:instance`);
  const instance = marker === null ? undefined : InstanceSchema.safeParse(JSON.parse(marker)).data?.id;
  const sameDataSet = memory !== undefined && !options.redisLost && (memory.instance === undefined || memory.instance === instance);
  const watch = createRollbackWatch({ ...options, ...(instance ? { instance } : {}), ...(sameDataSet ? { remembered: memory } : {}) });
  const found = await watch.check('start');
  return { watch, found };
}

/** The rollbacks recorded in Redis, newest first. */
export async function recentRollbacks(redis: RedisClient, store: ImportStore, limit = KEPT): Promise<Rollback[]> {
  const texts = await redis.lrange(store.keys.rollbacks, 0, limit - 1);
  return texts.flatMap((text) => {
    const parsed = RollbackSchema.safeParse(JSON.parse(text));
    return parsed.success ? [parsed.data] : [];
  });
}

/** One line for the operator. */
export function rollbackMessage(r: Rollback): string {
  const cause =
    r.runIdBefore && r.runId && r.runIdBefore !== r.runId
      ? 'Redis restarted from persistence that lacked them'
      : r.replIdBefore && r.replId && r.replIdBefore !== r.replId
        ? 'Redis failed over to a replica that lacked them'
        : 'Redis came back without them';
  const imports = r.imports.length === 0 ? 'no import was unfinished' : `${r.imports.length} unfinished import(s) put in read-back mode (${r.imports.join(', ')}): their ${r.rows} row(s) without an outcome read back before any create, so nothing is created twice`;
  return (
    `Redis lost acknowledged writes (${cause}; its write counter went back from ${r.from} to ${r.to}, seen by ${r.by} at ${r.how}, ${new Date(r.at).toISOString()}): ` +
    `sending was held, ${imports}. Make Redis keep what it acknowledges: appendonly yes with appendfsync always (README, "What Redis must keep")`
  );
}

async function readMemory(file: string): Promise<Memory | undefined> {
  try {
    return MemorySchema.parse(JSON.parse(await readFile(file, 'utf8')));
  } catch {
    return undefined;
  }
}

async function writeMemory(file: string, memory: Memory): Promise<void> {
  await writeFileAtomic(file, JSON.stringify(memory));
}

/**
 * A stored ledger entry in read-back mode: `sent` without a claim, the rest
 * kept as it is; undefined for a row with an outcome (or no job), which
 * stays as it is. The entry as the scripts read it: its state, job and claim.
 */
function readBackEntry(entry: StoredState): string | undefined {
  if (entry.j === null || (entry.s !== 'pending' && entry.s !== 'sent')) return undefined;
  const { k: _k, l: _l, ...rest } = entry;
  return JSON.stringify({ ...rest, s: 'sent' });
}

/** Whether Redis acknowledges a write only once it is on disk (AOF with `appendfsync always`); unknown (CONFIG refused) is no. */
async function fsyncsEveryWrite(redis: RedisClient): Promise<boolean> {
  try {
    const node = redis instanceof Cluster ? redis.nodes('master')[0] : redis;
    if (!node) return false;
    const [appendonly, appendfsync] = await Promise.all([node.config('GET', 'appendonly'), node.config('GET', 'appendfsync')]);
    return (appendonly as string[])[1] === 'yes' && (appendfsync as string[])[1] === 'always';
  } catch {
    return false;
  }
}
