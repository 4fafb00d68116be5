import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { spread, writePopulationFile } from '../../bench/populationFiles.js';
import { createApiClient } from '../../src/api/client.js';
import { refreshFull } from '../../src/customers/refresh.js';
import { importFile, type ImportRequest } from '../../src/import/producer.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const BASE = 2_000;

async function run(p: Pipeline, request: ImportRequest): Promise<ImportStatus> {
  const result = await importFile({ sendEmptyPasswords: true, ...request }, { store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });
  if (result.outcome !== 'enqueued') throw new Error(`not enqueued: ${result.outcome}`);
  return until(async () => {
    const status = await importStatus(p.runtime.store, result.importId);
    return status?.finished ? status : undefined;
  }, `import ${result.importId} to finish`);
}

async function buildIndex(p: Pipeline): Promise<void> {
  const api = createApiClient({ baseUrl: p.sandbox.url });
  try {
    await refreshFull({ api, budget: { block: async () => undefined }, index: p.runtime.customers, redis: p.runtime.redis, prefix: p.prefix });
  } finally {
    await api.close();
  }
}

const byEndpoint = (p: Pipeline): Record<string, number> => p.sandbox.stats().byEndpoint;

describe('an upsert finds its customers by the cheapest plan', () => {
  it('a scan of every customer, keeping the records of the file\'s customers, when that costs fewer requests than a GET each', async () => {
    pipeline = await startPipeline({ seedCustomers: BASE });
    await buildIndex(pipeline);
    // 60 existing customers (their City changed, 10 left as they are) and 40 new people.
    const existing = spread(0, BASE, 60);
    const file = await writePopulationFile(path.join(pipeline.dataDir, 'upsert.csv'), { people: [...existing, ...spread(BASE + 1000, BASE + 5000, 40)], changed: (i) => existing.indexOf(i) % 6 !== 0 });
    pipeline.sandbox.resetStats();
    const status = await run(pipeline, { file, match: 'EmailAddress' });
    expect(status.counts).toMatchObject({ updated: 50, unchanged: 10, created: 40 });
    const pages = Math.ceil((BASE + 5) / 100);
    // The scan (every page, and the end of the listing once more), then one write per changed row: no GET.
    expect(byEndpoint(pipeline)).toEqual({ searchCustomers: pages + 1, updateCustomer: 50, createCustomer: 40 });
    const base = pipeline.sandbox.store.customers().slice(0, BASE + 5);
    expect(base.filter((c) => c.City.endsWith('(moved)'))).toHaveLength(50);
    expect((await pipeline.sandbox.store.duplicateIdentities()).length).toBe(0);
    // The records kept for the rows are gone once the import has settled.
    expect(await pipeline.runtime.redis.exists(`${pipeline.prefix}:import:${status.importId}:records`)).toBe(0);
  });

  it('the index and a GET for each customer it names, when those are fewer than a scan', async () => {
    pipeline = await startPipeline({ seedCustomers: BASE });
    await buildIndex(pipeline);
    const existing = spread(0, BASE, 8);
    const file = await writePopulationFile(path.join(pipeline.dataDir, 'upsert.csv'), { people: [...existing, ...spread(BASE + 1000, BASE + 5000, 30)] });
    pipeline.sandbox.resetStats();
    const status = await run(pipeline, { file, match: 'EmailAddress' });
    expect(status.counts).toMatchObject({ updated: 8, created: 30 });
    expect(byEndpoint(pipeline)).toEqual({ getCustomer: 8, updateCustomer: 8, createCustomer: 30 });
  });

  it('a search by name per row when there is no index and the file is smaller than a scan', async () => {
    pipeline = await startPipeline({ seedCustomers: BASE });
    const file = await writePopulationFile(path.join(pipeline.dataDir, 'upsert.csv'), { people: [7, 1500, BASE + 10] });
    pipeline.sandbox.resetStats();
    const status = await run(pipeline, { file, match: 'EmailAddress' });
    expect(status.counts).toMatchObject({ updated: 2, created: 1 });
    expect(byEndpoint(pipeline).getCustomer).toBeUndefined();
    expect(byEndpoint(pipeline).searchCustomers).toBeLessThan(Math.ceil(BASE / 100));
    expect((await pipeline.sandbox.store.duplicateIdentities()).length).toBe(0);
  });
});

describe('the dry run of an upsert', () => {
  it('prints the plan the workers then follow, its cost within 10% of what is sent', async () => {
    pipeline = await startPipeline({ seedCustomers: BASE });
    await buildIndex(pipeline);
    const existing = spread(0, BASE, 60);
    const file = await writePopulationFile(path.join(pipeline.dataDir, 'upsert.csv'), { people: [...existing, ...spread(BASE + 1000, BASE + 5000, 60)] });
    const api = createApiClient({ baseUrl: pipeline.sandbox.url });
    const { store, queues, keyring, logger, customers, redis } = pipeline.runtime;
    const dry = await importFile(
      { file, match: 'EmailAddress', dryRun: true, sendEmptyPasswords: true },
      { store, queues, keyring, logger, api, customers, refresh: { budget: { block: async () => undefined }, redis, prefix: pipeline.prefix } },
    ).finally(() => api.close());
    if (dry.outcome !== 'dry-run') throw new Error(dry.outcome);
    expect(dry.estimate).toMatchObject({ strategy: 'scan', creates: 60, updates: 60, exist: 0, reads: 0 });
    pipeline.sandbox.resetStats();
    await run(pipeline, { file, match: 'EmailAddress' });
    const sent = pipeline.sandbox.stats().requests;
    expect(Math.abs(dry.estimate.total - sent) / sent).toBeLessThanOrEqual(0.1);
  });
});
