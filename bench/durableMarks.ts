/**
 * What keeping the promise through a Redis loss costs: one import through
 * one `subsync worker` process on a redis-server of its own, configured as
 * the README's table says, in rows/s, beside the same import on AOF with
 * `appendfsync everysec` (Redis's default, no wait) measured in the same run:
 *
 * - AOF `appendfsync always`: every write fsynced before Redis answers;
 * - the same with one replica: each flush of sent marks waits for the
 *   replica's acknowledgement (WAIT) before its requests leave.
 *
 * WAITAOF (Redis 7.2 and later) is used where the Redis has it; the note says
 * whether the measured one did.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { importFile } from '../src/import/producer.js';
import { hasWaitAof } from '../src/redis/redis.js';
import { RedisNode } from './lostWrites.js';
import { writeCustomersCsv } from './make-customers.js';
import { log, openBenchRuntime, spawnCli, spawnSandbox, waitFinished, waitForLine, type BenchRow } from './support.js';

interface Setting {
  name: string;
  start(dir: string): Promise<{ url: string; close(): Promise<void> }>;
}

const aof = (fsync: string): string[] => ['--save', '', '--appendonly', 'yes', '--appendfsync', fsync];

const SETTINGS: Setting[] = [
  {
    name: 'AOF appendfsync everysec',
    async start(dir) {
      const node = await RedisNode.start(dir, aof('everysec'));
      return { url: node.url, close: () => node.kill() };
    },
  },
  {
    name: 'AOF appendfsync always',
    async start(dir) {
      const node = await RedisNode.start(dir, aof('always'));
      return { url: node.url, close: () => node.kill() };
    },
  },
  {
    name: 'AOF appendfsync always + 1 replica (WAIT per flush of marks)',
    async start(dir) {
      const primary = await RedisNode.start(path.join(dir, 'primary'), aof('always'));
      const replica = await RedisNode.start(path.join(dir, 'replica'), [...aof('always'), '--replicaof', '127.0.0.1', String(primary.port)]);
      const admin = new Redis(replica.url);
      for (let i = 0; !/master_link_status:up/.test(await admin.info('replication')); i++) {
        if (i > 500) throw new Error('the replica did not sync');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      admin.disconnect();
      return {
        url: primary.url,
        async close() {
          await replica.kill();
          await primary.kill();
        },
      };
    },
  },
];

async function importOn(setting: Setting, file: string, rows: number, concurrency: number): Promise<number> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-durable-'));
  const redis = await setting.start(path.join(dir, 'redis'));
  const sandbox = await spawnSandbox();
  const bench = await openBenchRuntime({ apiUrl: sandbox.url, redisUrl: redis.url });
  const worker = spawnCli(['worker', '--concurrency', String(concurrency)], { ...bench.env, REDIS_URL: redis.url, SUBSYNC_API_URL: sandbox.url });
  try {
    await waitForLine(worker, /worker running/, 20_000);
    const started = performance.now();
    const result = await importFile({ file, kind: 'customers' }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger });
    if (result.outcome !== 'enqueued') throw new Error(`import not enqueued: ${result.outcome}`);
    const status = await waitFinished(bench.runtime, result.importId, 10 * 60_000);
    if (status.succeeded !== rows) log(`warning: ${status.succeeded} of ${rows} rows succeeded`);
    return rows / ((performance.now() - started) / 1000);
  } finally {
    worker.child.kill('SIGTERM');
    await worker.exited;
    await bench.close();
    await sandbox.close();
    await redis.close();
    await rm(dir, { recursive: true, force: true });
  }
}

export async function durableMarks(rows: number, concurrency: number): Promise<BenchRow[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-durable-file-'));
  try {
    const file = path.join(dir, 'customers.csv');
    await writeCustomersCsv(file, rows);
    const version = await (async () => {
      const probe = await RedisNode.start(path.join(dir, 'probe'), ['--save', '']);
      const client = new Redis(probe.url);
      const info = await client.info('server');
      client.disconnect();
      await probe.kill();
      return /redis_version:([\d.]+)/.exec(info)?.[1] ?? '?';
    })();
    const rates: number[] = [];
    for (const setting of SETTINGS) {
      const rate = await importOn(setting, file, rows, concurrency);
      log(`durable marks: ${setting.name}: ${rate.toFixed(0)} rows/s`);
      rates.push(rate);
    }
    const baseline = rates[0] ?? 0;
    return SETTINGS.slice(1).map((setting, i) => ({
      figure: `D. Import ${rows.toLocaleString('en')} rows, one worker, concurrency ${concurrency}, Redis ${setting.name} (rows/s)`,
      subsync: rates[i + 1] ?? 0,
      baseline,
      baselineLabel: 'AOF appendfsync everysec, same run (rows/s)',
      note: `redis-server ${version}${hasWaitAof(version) ? ', WAITAOF per flush' : ', no WAITAOF (7.2+)'}`,
    }));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
