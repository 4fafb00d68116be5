import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { SubsyncError, type SubsyncErrorCode } from '../errors.js';

/** A connection to one Redis, or to a Redis Cluster (SUBSYNC_REDIS_CLUSTER). */
export type RedisClient = Redis | Cluster;

/** Why subsync will not start against this Redis; the message is one line an operator can act on. */
export class RedisCheckError extends SubsyncError {
  constructor(
    readonly code: 'REDIS_UNREACHABLE' | 'REDIS_EVICTION' | 'REDIS_PERSISTS_NOTHING',
    message: string,
  ) {
    super(message);
  }
}

/** How to start a Redis that suits subsync, for the unreachable message. */
export const START_REDIS_HINT =
  'start one with: redis-server --daemonize yes --port 6379 --maxmemory-policy noeviction --appendonly yes --appendfsync always';

/**
 * A connection for subsync's own keys and for BullMQ. `autoPipelining` sends
 * the commands issued in one event-loop turn in one write (for subsync's own
 * keys only: BullMQ's connections keep it off, since users of Bull and
 * BullMQ have reported lost job data and lock errors with it).
 * `maxRetriesPerRequest: null` is what BullMQ workers need: a command waits
 * out a reconnect instead of failing, so a cut Redis connection is survived.
 * With `cluster`, `url` names one node of a Redis Cluster, from which the
 * client learns the others and follows their redirections.
 */
export function createRedis(url: string, options: { lazyConnect?: boolean; autoPipelining?: boolean; cluster?: boolean } = {}): RedisClient {
  const lazyConnect = options.lazyConnect ?? false;
  const enableAutoPipelining = options.autoPipelining ?? false;
  if (!options.cluster) return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect, enableAutoPipelining });
  const { node, redisOptions } = clusterNode(url);
  return new Cluster([node], { redisOptions: { ...redisOptions, maxRetriesPerRequest: null }, enableReadyCheck: true, lazyConnect, enableAutoPipelining });
}

/** The seed node and the per-node options (credentials, TLS) of a Redis Cluster URL. */
function clusterNode(url: string): { node: { host: string; port: number }; redisOptions: RedisOptions } {
  const parsed = new URL(url);
  const decode = (text: string): string | undefined => (text === '' ? undefined : decodeURIComponent(text));
  return {
    node: { host: parsed.hostname.replace(/^\[|\]$/g, ''), port: Number(parsed.port || 6379) },
    redisOptions: { username: decode(parsed.username), password: decode(parsed.password), ...(parsed.protocol === 'rediss:' ? { tls: {} } : {}) },
  };
}

/**
 * Checks the Redis at start: reachable, `maxmemory-policy
 * noeviction` (BullMQ loses jobs under eviction: refused), and persistence
 * (what it keeps of an acknowledged write: see durabilityWarning).
 * Returns the warnings. A managed Redis that forbids CONFIG is let through
 * with a warning, since the policy cannot be read. With `refuseLoss` (the
 * commands that send rows), a Redis that persists nothing is refused
 * (REDIS_PERSISTS_NOTHING): nothing subsync does can keep an import through
 * its restart.
 */
export async function checkRedis(url: string, timeoutMs = 3000, options: { cluster?: boolean; refuseLoss?: boolean } = {}): Promise<string[]> {
  const refuseLoss = options.refuseLoss ?? false;
  if (!options.cluster) {
    const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: timeoutMs, retryStrategy: () => null });
    return checkNodes(url, redis, async () => [redis], refuseLoss);
  }
  // A cluster: every master is checked (each holds its own policy and persistence).
  const { node, redisOptions } = clusterNode(url);
  const cluster = new Cluster([node], {
    lazyConnect: true,
    clusterRetryStrategy: () => null,
    redisOptions: { ...redisOptions, maxRetriesPerRequest: 0, connectTimeout: timeoutMs },
  });
  return checkNodes(url, cluster, async () => cluster.nodes('master'), refuseLoss);
}

async function checkNodes(url: string, client: RedisClient, nodesOf: () => Promise<Redis[]>, refuseLoss: boolean): Promise<string[]> {
  client.on('error', () => undefined);
  try {
    let nodes: Redis[];
    try {
      await client.connect();
      await client.ping();
      nodes = await nodesOf();
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new RedisCheckError('REDIS_UNREACHABLE', `Redis is not reachable at ${redactUrl(url)} (${reason}); ${START_REDIS_HINT}`);
    }
    const warnings = new Set<string>();
    for (const node of nodes) for (const warning of await checkNode(url, node, refuseLoss)) warnings.add(warning);
    return [...warnings];
  } finally {
    client.disconnect();
  }
}

/** What a Redis node keeps of an acknowledged write, as its settings say. */
export interface Durability {
  appendonly: boolean;
  /** `always`, `everysec` or `no` (only read when appendonly). */
  appendfsync: string;
  /** RDB `save` rules; '' for none. */
  save: string;
  /** Replicas connected to this master, and `min-replicas-to-write`. */
  replicas: number;
  minReplicasToWrite: number;
  /** `redis_version` (WAITAOF needs 7.2); undefined when unknown. */
  version?: string;
}

/** Whether a Redis version has WAITAOF (7.2 and later). */
export function hasWaitAof(version: string | undefined): boolean {
  const [major = 0, minor = 0] = (version ?? '').split('.').map(Number);
  return major > 7 || (major === 7 && minor >= 2);
}

/** Whether a Redis keeps nothing at all across a restart: no AOF, no RDB snapshots. */
export const persistsNothing = (d: Durability): boolean => !d.appendonly && d.save.trim() === '';

/** What subsync does when Redis may lose acknowledged writes: detect the rollback and read back. */
const DETECTS =
  'subsync detects such a rollback (a counter every mark and settle bumps, remembered by each process and in the data dir), holds sending, and reads back every unfinished row before any create, so nothing is created twice while a worker or the data dir outlives the loss';

/**
 * What the node's persistence means for subsync's promise ("nothing created
 * twice, every row one outcome"), as one line, or undefined when an
 * acknowledged write survives a host crash (AOF with `appendfsync always`,
 * and no replica a failover could promote while it lags behind).
 *
 * The promise rests on the ledger: a row is marked `sent` before its
 * request leaves. Redis that comes back without its last acknowledged
 * writes (the tail of an AOF not yet fsync'd, everything after the last RDB
 * snapshot, what a promoted replica had not received) can forget such a
 * mark. Each line says what this Redis loses, what subsync does about it
 * (WAITAOF and WAIT before a batch's requests leave, where Redis allows;
 * rollback detection always), and the fix.
 */
export function durabilityWarning(d: Durability): string | undefined {
  const waitAof = hasWaitAof(d.version);
  const failover =
    d.replicas > 0 && d.minReplicasToWrite === 0
      ? `; with ${d.replicas} replica(s) and min-replicas-to-write 0, a failover to a replica that lagged behind loses the writes it had not received (subsync waits for one replica to acknowledge each batch's sent marks, WAIT, before its requests leave)`
      : '';
  if (persistsNothing(d)) {
    return 'Redis persists nothing (no RDB snapshots, no AOF): a Redis restart loses every queued row and ledger, and no unfinished import can end; fine for tests, refused for `worker` and `start` unless SUBSYNC_REDIS_ACCEPT_LOSS=true (use --appendonly yes --appendfsync always)';
  }
  if (!d.appendonly) {
    return `Redis keeps RDB snapshots only (save ${d.save.trim()}): a restart loses every write after the last snapshot${failover}; ${DETECTS}; use --appendonly yes --appendfsync always`;
  }
  if (d.appendfsync !== 'always') {
    const lost = d.appendfsync === 'everysec' ? 'up to the last second' : 'what the OS had not yet written';
    const wait = waitAof
      ? "subsync fsyncs each batch's sent marks (WAITAOF) before its requests leave, and "
      : `Redis ${d.version ?? 'older than 7.2'} has no WAITAOF to fsync a batch's sent marks before its requests leave, so `;
    return `Redis appends to its AOF with appendfsync ${d.appendfsync}: a host crash or power loss loses ${lost} of acknowledged writes${failover}; ${wait}${DETECTS}; use --appendfsync always`;
  }
  return failover === '' ? undefined : `Redis fsyncs every write${failover}; ${DETECTS}; set min-replicas-to-write 1`;
}

/** One node's policy (noeviction, else refused) and persistence (told as a warning; refused when it keeps nothing and `refuseLoss`). */
async function checkNode(url: string, redis: Redis, refuseLoss: boolean): Promise<string[]> {
  const warnings: string[] = [];
  let policy: string | undefined;
  let durability: Durability;
  try {
    const value = async (name: string): Promise<string> => configValue(await redis.config('GET', name)) ?? '';
    policy = configValue(await redis.config('GET', 'maxmemory-policy'));
    durability = {
      appendonly: (await value('appendonly')) === 'yes',
      appendfsync: await value('appendfsync'),
      save: await value('save'),
      replicas: Number(/connected_slaves:(\d+)/.exec(await redis.info('replication'))?.[1] ?? 0),
      minReplicasToWrite: Number((await value('min-replicas-to-write')) || 0),
      version: /redis_version:([\d.]+)/.exec(await redis.info('server'))?.[1],
    };
  } catch {
    warnings.push(
      'Redis refuses CONFIG GET, so its maxmemory-policy and persistence cannot be checked; they must be noeviction and AOF with appendfsync always (subsync still waits for WAITAOF and WAIT where they answer, and detects a rollback)',
    );
    return warnings;
  }
  if (policy !== undefined && policy !== 'noeviction') {
    throw new RedisCheckError(
      'REDIS_EVICTION',
      `Redis at ${redactUrl(url)} has maxmemory-policy ${policy}; subsync needs noeviction (BullMQ loses jobs when keys are evicted): CONFIG SET maxmemory-policy noeviction`,
    );
  }
  if (refuseLoss && persistsNothing(durability)) {
    throw new RedisCheckError(
      'REDIS_PERSISTS_NOTHING',
      `Redis at ${redactUrl(url)} persists nothing (appendonly no, save ""): a restart would lose every unfinished import; set appendonly yes with appendfsync always (CONFIG SET appendonly yes), or SUBSYNC_REDIS_ACCEPT_LOSS=true to run on it anyway`,
    );
  }
  const warning = durabilityWarning(durability);
  if (warning) warnings.push(warning);
  return warnings;
}

function configValue(reply: unknown): string | undefined {
  return Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : undefined;
}

/** A Redis URL with its password hidden, for messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** Removes every key under `prefix:` (the demo's own keys, a test's). SCAN, never KEYS; on a cluster, SCAN of each master. */
export async function deleteKeysWithPrefix(redis: RedisClient, prefix: string): Promise<number> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  let removed = 0;
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      // One UNLINK per key on a cluster: keys of different slots cannot share a command.
      if (keys.length > 0) removed += redis instanceof Cluster ? (await Promise.all(keys.map((key) => node.unlink(key)))).reduce((a, b) => a + b, 0) : await node.unlink(...keys);
    } while (cursor !== '0');
  }
  return removed;
}

/** The stable code of Redis refusing a write for want of memory. */
export const REDIS_OOM_CODE = 'REDIS_OOM' satisfies SubsyncErrorCode;

/**
 * The kind of a Redis error reply: its first word, `OOM` in `OOM command not
 * allowed when used memory > 'maxmemory'`, `NOSCRIPT`, `BUSY`, `READONLY`.
 * Redis names an error's kind there and nowhere else (an error reply is one
 * line of text), and ioredis's ReplyError carries nothing more, so this is
 * the one place that reads a reply's words; undefined for anything that is
 * not such a reply.
 */
export function redisErrorKind(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  return /^([A-Z][A-Z_]*)(?: |$)/.exec(error.message)?.[1];
}

/** Redis refused a command because its memory is full. */
export function isRedisOutOfMemory(error: unknown): boolean {
  return redisErrorKind(error) === 'OOM';
}

/**
 * One line for Redis out of memory: what it is, what subsync did, what to do.
 * `worker`: rows wait and run once Redis has room; `command`: the command
 * stopped, and running it again resumes.
 */
export function redisOutOfMemoryMessage(who: 'worker' | 'command'): string {
  const did =
    who === 'worker'
      ? 'rows wait in their queue and ledger, nothing is lost, and they run once Redis has room'
      : 'this command stopped; what it had queued waits in Redis and nothing is lost (run it again: an interrupted import resumes)';
  return `Redis is out of memory (used memory reached maxmemory, so it refuses writes): ${did}; free memory or raise it (redis-cli CONFIG SET maxmemory <bytes>, or a larger maxmemory in redis.conf)`;
}
