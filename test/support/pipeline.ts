import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Cluster, Redis } from 'ioredis';
import { loadConfig, type Config } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { BackoffBounds } from '../../src/backoff.js';
import { deleteKeysWithPrefix, type RedisClient } from '../../src/redis/redis.js';
import { openRuntime, startWorkers, type Runtime, type WorkerHandles } from '../../src/runtime.js';
import { startSandbox, type Sandbox, type SandboxFaults } from '../../src/sandbox/server.js';
import { createFeeder } from '../../src/queue/feeder.js';

export const REDIS_URL = 'redis://127.0.0.1:6379';

/**
 * Releases every import's backlog to the rows queue at once, as the workers'
 * feeder would in turn (src/queue/feeder.ts): for tests that look at the
 * batch jobs of an import before any worker runs. Needs the feeder lock free
 * (no worker of this prefix running).
 */
export async function releaseBacklog(runtime: Runtime): Promise<number> {
  const feeder = createFeeder(
    { redis: runtime.redis, prefix: runtime.config.queuePrefix, queues: runtime.queues, store: runtime.store, logger: runtime.logger, rate: undefined, exportShare: 0.4, concurrency: 1 },
    { rowsAhead: Number.MAX_SAFE_INTEGER },
  );
  try {
    return await feeder.runOnce();
  } finally {
    await feeder.close();
  }
}

/** Everything a pipeline test needs: a sandbox on port 0, a runtime on its own key prefix, workers. */
export interface Pipeline {
  sandbox: Sandbox;
  runtime: Runtime;
  workers: WorkerHandles | undefined;
  dataDir: string;
  prefix: string;
  /** Every log line written so far (JSON lines). */
  logs(): string;
  /** Writes a CSV file into the test's data dir and returns its path. */
  file(name: string, content: string): Promise<string>;
  close(): Promise<void>;
}

export async function startPipeline(options: {
  faults?: Partial<SandboxFaults>;
  config?: Partial<Config>;
  concurrency?: number;
  workers?: boolean;
  seed?: boolean;
  /** Customers of the sandbox's realistic population to start with (src/sandbox/population.ts). */
  seedCustomers?: number;
  /** Retry backoff; tests default to short waits. */
  backoff?: BackoffBounds;
} = {}): Promise<Pipeline> {
  const sandbox = await startSandbox({ port: 0, faults: options.faults, seed: options.seed ?? true, seedCustomers: options.seedCustomers });
  const prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'subsync-test-'));
  let logText = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logText += chunk.toString('utf8');
      done();
    },
  });
  const config: Config = {
    ...loadConfig({}),
    queuePrefix: prefix,
    dataDir,
    apiUrl: sandbox.url,
    cardKey: randomBytes(32),
    logLevel: 'debug',
    ...options.config,
  };
  const runtime = await openRuntime(config, createLogger({ level: config.logLevel, destination: sink }));
  const workers = options.workers === false ? undefined : startWorkers(runtime, { apiUrl: sandbox.url, concurrency: options.concurrency ?? 8, backoff: options.backoff ?? { baseMs: 20, capMs: 200 } });
  return {
    sandbox,
    runtime,
    workers,
    dataDir,
    prefix,
    logs: () => logText,
    file: async (name, content) => {
      const file = path.join(dataDir, name);
      await writeFile(file, content);
      return file;
    },
    async close() {
      await runtime.close();
      await sandbox.close();
      await deleteKeys(prefix, config.redisUrl);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** Removes every Redis key under a test's prefix. */
export async function deleteKeys(prefix: string, url = REDIS_URL): Promise<void> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, retryStrategy: () => null });
  redis.on('error', () => undefined);
  try {
    await deleteKeysWithPrefix(redis, prefix);
  } catch {
    // A test's own Redis may be gone already.
  } finally {
    redis.disconnect();
  }
}

/** Waits until `check` returns a value (not undefined), polling; fails after `timeoutMs`. */
export async function until<T>(check: () => Promise<T | undefined>, what: string, timeoutMs = 60_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** The environment a spawned subsync needs to share the test's Redis prefix, sandbox and data dir (and a card key). */
export function envOf(p: Pipeline, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    REDIS_URL,
    // The tests' Redis persists nothing: `worker` and `start` refuse it unless told to accept that.
    SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
    SUBSYNC_QUEUE_PREFIX: p.prefix,
    SUBSYNC_API_URL: p.sandbox.url,
    SUBSYNC_DATA_DIR: p.dataDir,
    SUBSYNC_CARD_KEY: 'ab'.repeat(32),
    SUBSYNC_LOG_LEVEL: 'warn',
    ...extra,
  };
}

/** Every value stored under a prefix, as text: what a Redis dump would show of subsync's data. */
export async function redisText(client: RedisClient, prefix: string): Promise<string> {
  const parts: string[] = [];
  for (const redis of client instanceof Cluster ? client.nodes('master') : [client]) await nodeText(redis, prefix, parts);
  return parts.join('\n');
}

async function nodeText(redis: Redis, prefix: string, parts: string[]): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const type = await redis.type(key);
      if (type === 'string') parts.push((await redis.get(key)) ?? '');
      else if (type === 'hash') parts.push(JSON.stringify(await redis.hgetall(key)));
      else if (type === 'list') parts.push(JSON.stringify(await redis.lrange(key, 0, -1)));
      else if (type === 'set') parts.push(JSON.stringify(await redis.smembers(key)));
      else if (type === 'zset') parts.push(JSON.stringify(await redis.zrange(key, 0, -1)));
      else if (type === 'stream') parts.push(JSON.stringify(await redis.xrange(key, '-', '+')));
    }
  } while (cursor !== '0');
}
