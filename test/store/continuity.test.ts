import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { importStatus } from '../../src/import/status.js';
import { openRuntime, startWorkers, type Runtime } from '../../src/runtime.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';
import { startOwnRedis, type OwnRedis } from '../support/redisServer.js';

let pipeline: Pipeline | undefined;
let redis: OwnRedis | undefined;
let second: Runtime | undefined;
afterEach(async () => {
  await second?.close();
  await pipeline?.close();
  await redis?.stop();
  pipeline = undefined;
  redis = undefined;
  second = undefined;
});

const ROWS = 40;

async function runImport(runtime: Runtime, file: string) {
  const result = await importFile({ file }, { store: runtime.store, queues: runtime.queues, keyring: runtime.keyring, logger: runtime.logger, journal: runtime.journal });
  expect(result.outcome).toBe('enqueued');
  return until(async () => {
    const status = await importStatus(runtime.store, result.importId);
    return status?.finished ? status : undefined;
  }, 'the import to finish');
}

describe('a Redis that restarted empty', () => {
  it('is detected and explained, and importing the same file again creates nothing twice', async () => {
    redis = await startOwnRedis();
    pipeline = await startPipeline({ config: { redisUrl: redis.url } });
    expect(pipeline.runtime.redisLoss).toBeUndefined();
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= ROWS; i++) lines.push(`Lost${i},Amnesia,lost${i}@example.com`);
    const file = await pipeline.file('lost.csv', `${lines.join('\n')}\n`);
    expect((await runImport(pipeline.runtime, file)).counts.created).toBe(ROWS);

    // Redis restarts with nothing on disk: every queue, ledger and import record is gone.
    await pipeline.runtime.close();
    await redis.restart();

    // The next process on the same data dir says so, and the same file reads every row back first.
    second = await openRuntime(pipeline.runtime.config, pipeline.runtime.logger);
    expect(second.redisLoss).toMatch(/Redis lost subsync's data.*import the same files again/);
    startWorkers(second, { apiUrl: pipeline.sandbox.url, concurrency: 8, backoff: { baseMs: 20, capMs: 200 } });
    const status = await runImport(second, file);
    expect(status.counts).toMatchObject({ reconciled: ROWS, created: 0 });
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Amnesia')).toHaveLength(ROWS);
  }, 90_000);
});

describe('a cut Redis connection', () => {
  it('is survived: workers reconnect and every row settles once', async () => {
    redis = await startOwnRedis();
    pipeline = await startPipeline({ config: { redisUrl: redis.url }, faults: { latencyMs: 5 } });
    const rows = 400;
    const lines = ['FirstName,LastName'];
    for (let i = 1; i <= rows; i++) lines.push(`Cut${i},Severed`);
    const file = await pipeline.file('cut.csv', `${lines.join('\n')}\n`);
    const result = await importFile({ file }, { store: pipeline.runtime.store, queues: pipeline.runtime.queues, keyring: undefined, logger: pipeline.runtime.logger });
    const { Redis } = await import('ioredis');
    const killer = new Redis(redis.url);
    let cuts = 0;
    try {
      // Cut every other client's connection a few times while rows are in flight.
      while (cuts < 5) {
        const settled = (await pipeline.runtime.store.counts(result.importId)).settled;
        if (settled >= rows) break;
        await killer.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
        cuts++;
        await new Promise((resolve) => setTimeout(resolve, 150));
      }
    } finally {
      killer.disconnect();
    }
    expect(cuts).toBeGreaterThan(0);
    const status = await until(async () => {
      const s = await importStatus(pipeline!.runtime.store, result.importId);
      return s?.finished ? s : undefined;
    }, 'the import to finish after the cuts', 90_000);
    expect(status.counts.created + status.counts.reconciled).toBe(rows);
    const names = pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Severed').map((c) => c.FirstName);
    expect(new Set(names).size).toBe(rows);
    expect(names).toHaveLength(rows);
  }, 120_000);
});
