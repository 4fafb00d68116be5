/**
 * Redis out of memory, on a private redis-server whose maxmemory is made
 * tiny for a while: the workers' rows wait (one log line per interval, no
 * stack per row), the batches that were running use up their attempts, and
 * once Redis has room the sweep queues their rows: every row reaches an
 * outcome, each created once; the
 * `import` command says in one line what happened and what to do.
 */
import { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { importFile } from '../../src/import/producer.js';
import { batchJobId, ROWS_PER_BATCH } from '../../src/queue/queues.js';
import { startWorkers } from '../../src/runtime.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { waitFinished } from '../support/imports.js';
import { envOf, startPipeline, until, type Pipeline, releaseBacklog } from '../support/pipeline.js';
import { startOwnRedis, type OwnRedis } from '../support/redisServer.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
let own: OwnRedis | undefined;
let admin: Redis | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
  admin?.disconnect();
  admin = undefined;
  await own?.stop();
  own = undefined;
});

async function fill(redis: Redis): Promise<void> {
  // Just under what is used now: every write is refused.
  const used = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1] ?? '0');
  await redis.config('SET', 'maxmemory', String(Math.max(1024 * 1024, used - 1024)));
}

describe('Redis out of memory', () => {
  it('the rows wait while Redis refuses writes, and every one reaches an outcome once it has room', async () => {
    own = await startOwnRedis();
    admin = new Redis(own.url);
    pipeline = await startPipeline({ workers: false, seed: false, faults: { latencyMs: 300 }, config: { redisUrl: own.url, logLevel: 'info', jobLockMs: 4000, httpTimeoutMs: 1000 } });
    const { store, queues, keyring, logger } = pipeline.runtime;
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= 60; i++) lines.push(`Row${i},Oom,row${i}.oom@example.com`);
    // Two attempts: an outage easily uses them up.
    const result = await importFile({ file: await pipeline.file('oom.csv', `${lines.join('\n')}\n`), attempts: 2 }, { store, queues, keyring, logger });
    expect(result.outcome).toBe('enqueued');
    // All its batches into the rows queue at once (the feeder would release them as the budget frees).
    await releaseBacklog(pipeline.runtime);
    const blocks = Array.from({ length: Math.ceil(60 / ROWS_PER_BATCH) }, (_, b) => b);

    // Redis fills up as the first request reaches the sandbox: the batches are running, their rows at the API (300 ms).
    const p = pipeline;
    let filling: Promise<void> | undefined;
    const a = admin;
    p.sandbox.intercept(() => {
      filling ??= fill(a);
    });
    p.workers = startWorkers(p.runtime, { apiUrl: p.sandbox.url, concurrency: 8, backoff: { baseMs: 20, capMs: 100 }, sweep: { intervalMs: 200, quietMs: 0 } });
    await until(async () => (p.logs().includes('Redis is out of memory') ? true : undefined), 'the out-of-memory line');
    await filling;
    // Every batch used up its attempts while Redis refused writes (what a minute of OOM did to 24 batches in production).
    await until(async () => {
      const states = await Promise.all(blocks.map(async (b) => (await queues.rows.getJob(batchJobId(result.importId, b)))?.getState()));
      return states.every((state) => state === 'failed') ? true : undefined;
    }, 'every batch to fail for good');
    expect((await store.counts(result.importId)).settled).toBeLessThan(60);
    await admin.config('SET', 'maxmemory', '0');

    const status = await waitFinished(p, result.importId);
    expect(status.settledRows).toBe(60);
    expect(status.counts.created + status.counts.reconciled).toBe(60);
    expect(p.sandbox.store.customers()).toHaveLength(60);
    const oomLines = p.logs().split('\n').filter((l) => l.includes('Redis is out of memory'));
    expect(oomLines.length).toBeGreaterThanOrEqual(1);
    // One line per place and interval, never a stack.
    expect(oomLines.length).toBeLessThanOrEqual(12);
    expect(p.logs()).not.toContain('"stack"');
    expect(p.logs()).toContain('sweep: rows of this import had no job that would run them');
  });

  it('`subsync import` against a Redis out of memory exits 69 with one line saying what to do', async () => {
    own = await startOwnRedis();
    admin = new Redis(own.url);
    pipeline = await startPipeline({ workers: false, seed: false, config: { redisUrl: own.url } });
    await fill(admin);
    const file = await pipeline.file('refused.csv', 'FirstName,LastName\nAna,Refused\n');
    const run = subsync(['import', file], { ...envOf(pipeline), REDIS_URL: own.url });
    expect((await run.exited).code).toBe(EXIT_CODES.unavailable);
    const told = run.stderr().split('\n').filter((l) => l.startsWith('subsync:'));
    expect(told, run.stderr()).toHaveLength(1);
    expect(told[0]).toMatch(/^subsync: Redis is out of memory .* nothing is lost .* CONFIG SET maxmemory/);
    expect(run.stderr()).not.toContain('    at ');
  });
});
