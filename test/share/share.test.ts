import { afterEach, describe, expect, it } from 'vitest';
import { enqueueExport } from '../../src/export/job.js';
import { createExportStore } from '../../src/export/state.js';
import { importFile } from '../../src/import/producer.js';
import { retryRows } from '../../src/import/retry.js';
import { importStatus } from '../../src/import/status.js';
import { budgetUse, exportShareBeside } from '../../src/redis/budget.js';
import { openRuntime, startWorkers, type Runtime } from '../../src/runtime.js';
import { SandboxRefusal } from '../../src/sandbox/store.js';
import { createLogger } from '../../src/log.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

// The service limited to LIMIT requests/s: every test also checks its limiter never answered 429. The workers
// and the sandbox share this process's event loop, where a stall of a few tens of ms (a GC, a busy machine)
// delays requests already due into the next second of the sandbox's sliding window: the fleet is told a rate 15%
// under the limit. (The pacing itself, never above the rate and the rate used, is test/share/lanes.test.ts.)
const LIMIT = 100;
const RATE = 85;

let pipeline: Pipeline | undefined;
const others: Runtime[] = [];
afterEach(async () => {
  for (const runtime of others.splice(0)) await runtime.close();
  await pipeline?.close();
  pipeline = undefined;
});

function customersCsv(n: number, tag: string): string {
  const lines = ['FirstName,LastName,EmailAddress'];
  for (let i = 1; i <= n; i++) lines.push(`Row${i},${tag},row${i}.${tag.toLowerCase()}@example.com`);
  return `${lines.join('\n')}\n`;
}

async function importCsv(p: Pipeline, name: string, content: string): Promise<string> {
  const { store, queues, keyring, logger, redis } = p.runtime;
  const result = await importFile({ file: await p.file(name, content) }, { store, queues, keyring, logger, redis });
  expect(result.outcome).toBe('enqueued');
  return result.importId;
}

/** More worker processes' worth of workers on the same Redis prefix (each its own runtime and connections). */
async function moreWorkers(p: Pipeline, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const runtime = await openRuntime(p.runtime.config, createLogger({ level: 'silent' }));
    others.push(runtime);
    startWorkers(runtime, { apiUrl: p.sandbox.url, concurrency: 8, backoff: { baseMs: 20, capMs: 200 } });
  }
}

const settledOf = async (p: Pipeline, id: string): Promise<number> => (await importStatus(p.runtime.store, id))?.settledRows ?? 0;

describe('imports and the export share the one budget', () => {
  it('a small import queued behind a big one finishes first, and status shows the big one its place and share meanwhile', async () => {
    pipeline = await startPipeline({ faults: { rateLimit: LIMIT }, config: { rate: RATE }, seed: false });
    await moreWorkers(pipeline, 1);
    const big = await importCsv(pipeline, 'big.csv', customersCsv(800, 'Big'));
    await until(async () => ((await settledOf(pipeline as Pipeline, big)) > 0 ? true : undefined), 'the big import to start');
    const small = await importCsv(pipeline, 'small.csv', customersCsv(5, 'Small'));

    // While both have rows waiting for their turn, each has a place and a share of the turn.
    const sharing = await importStatus(pipeline.runtime.store, big, Date.now(), { redis: pipeline.runtime.redis, prefix: pipeline.prefix, rate: RATE });
    expect(sharing?.schedule).toMatchObject({ place: 1, priority: 'normal' });
    expect(sharing?.schedule?.backlogRows).toBeGreaterThan(0);

    await until(async () => ((await importStatus(pipeline!.runtime.store, small))?.finished ? true : undefined), 'the small import to finish', 60_000);
    const bigSettled = await settledOf(pipeline, big);
    // The big one was far from done when the small one had its results.
    expect(bigSettled).toBeLessThan(800 / 2);
    expect((await importStatus(pipeline.runtime.store, small))?.allSucceeded).toBe(true);
    await until(async () => ((await importStatus(pipeline!.runtime.store, big))?.finished ? true : undefined), 'the big import to finish', 60_000);
    expect((await importStatus(pipeline.runtime.store, big))?.succeeded).toBe(800);
    expect(pipeline.sandbox.stats().faults.rateLimited).toBe(0);
  });

  it('two big imports started apart share the rows settling while both run', async () => {
    pipeline = await startPipeline({ faults: { rateLimit: LIMIT }, config: { rate: RATE }, seed: false });
    await moreWorkers(pipeline, 1);
    const first = await importCsv(pipeline, 'first.csv', customersCsv(1_000, 'First'));
    await until(async () => ((await settledOf(pipeline as Pipeline, first)) >= 50 ? true : undefined), 'the first import to get going');
    const second = await importCsv(pipeline, 'second.csv', customersCsv(1_000, 'Second'));
    // Counted from when the second has settled its first rows, for 400 rows settled between them. The feeder
    // releases each import two batches of 25 rows a turn, so over 200 rows one turn more or less (50 rows)
    // moved the share by a quarter, and a loaded machine's late sampling more: CI measured 0.28.
    await until(async () => ((await settledOf(pipeline as Pipeline, second)) > 0 ? true : undefined), 'the second import to start');
    const [a0, b0] = [await settledOf(pipeline, first), await settledOf(pipeline, second)];
    await until(async () => ((await settledOf(pipeline as Pipeline, first)) - a0 + (await settledOf(pipeline as Pipeline, second)) - b0 >= 400 ? true : undefined), '400 rows to settle');
    const [a1, b1] = [await settledOf(pipeline, first), await settledOf(pipeline, second)];
    const secondShare = (b1 - b0) / (a1 - a0 + (b1 - b0));
    expect(secondShare).toBeGreaterThan(0.3);
    expect(secondShare).toBeLessThan(0.7);
    expect(pipeline.sandbox.stats().faults.rateLimited).toBe(0);
  });

  it('a retried row runs before the fresh rows of an import queued after it', async () => {
    pipeline = await startPipeline({ faults: { rateLimit: LIMIT }, config: { rate: RATE }, seed: false });
    // The service refuses the first create it sees, once: that row fails for good.
    let refused = false;
    pipeline.sandbox.intercept((request) => {
      if (request.endpoint === 'createCustomer' && !refused) {
        refused = true;
        throw new SandboxRefusal(400, 'The request is invalid.');
      }
    });
    const early = await importCsv(pipeline, 'early.csv', customersCsv(3, 'Early'));
    await until(async () => ((await importStatus(pipeline!.runtime.store, early))?.finished ? true : undefined), 'the early import to finish');
    expect((await importStatus(pipeline.runtime.store, early))?.counts.failed).toBe(1);

    const later = await importCsv(pipeline, 'later.csv', customersCsv(600, 'Later'));
    await until(async () => ((await settledOf(pipeline as Pipeline, later)) > 0 ? true : undefined), 'the later import to start');
    const retried = await retryRows(pipeline.runtime.store, pipeline.runtime.queues, early);
    expect(retried.retried).toHaveLength(1);
    await until(async () => ((await importStatus(pipeline!.runtime.store, early))?.allSucceeded ? true : undefined), 'the retried row to succeed', 60_000);
    // Most of the later import's fresh rows were still to come when the retry ran.
    expect(await settledOf(pipeline, later)).toBeLessThan(600 / 2);
    expect(pipeline.sandbox.stats().faults.rateLimited).toBe(0);
  });

  it('an export beside an import with many workers gets its share of the budget and ends complete while the customers grow', async () => {
    pipeline = await startPipeline({ faults: { rateLimit: LIMIT }, config: { rate: RATE, exportShare: 0.4 }, seed: false, seedCustomers: 12_000 });
    await moreWorkers(pipeline, 3);
    const id = await importCsv(pipeline, 'growing.csv', customersCsv(2_000, 'Growing'));
    await until(async () => ((await settledOf(pipeline as Pipeline, id)) >= 50 ? true : undefined), 'the import to get going');
    const exportId = await enqueueExport(pipeline.runtime.queues.control, { format: 'csv', gzip: false });
    const exports = createExportStore(pipeline.runtime.redis, pipeline.prefix);
    // The budget's use by class, sampled while the export runs: summed over the spans where the export draws.
    let previous = await budgetUse(pipeline.runtime.redis, pipeline.runtime.store.keys);
    let exported = 0;
    let imported = 0;
    const record = await until(async () => {
      const use = await budgetUse(pipeline!.runtime.redis, pipeline!.runtime.store.keys);
      if (use.exportActive && use.importActive && previous.exportActive) {
        exported += use.export - previous.export;
        imported += use.import - previous.import;
      }
      previous = use;
      const r = await exports.get(exportId);
      return r?.status === 'done' || r?.status === 'failed' ? r : undefined;
    }, 'the export to end', 120_000, 100);
    expect(record.status).toBe('done');
    expect(record.complete).toBe(true);
    // Every customer of the start, and some the import created meanwhile.
    expect(record.count).toBeGreaterThanOrEqual(12_000);
    // The import was still running when the export ended: the budget was shared, not handed over.
    expect((await importStatus(pipeline.runtime.store, id))?.settled).toBe(false);
    // While both drew: beside one import the export takes a turn like a second import, half the requests
    // (above its floor of 40%), give or take the sampling; the import is not starved either way.
    const share = exportShareBeside(0.4, 1);
    expect(exported + imported).toBeGreaterThan(100);
    expect(exported / (exported + imported)).toBeGreaterThan(share - 0.12);
    expect(exported / (exported + imported)).toBeLessThan(share + 0.12);
    expect(pipeline.sandbox.stats().faults.rateLimited).toBe(0);
  });
});
