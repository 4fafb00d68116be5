import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiClient } from '../../src/api/client.js';
import { runExport } from '../../src/export/job.js';
import { exportsDirOf } from '../../src/export/request.js';
import { createExportStore } from '../../src/export/state.js';
import { SEARCH_PAGE_SIZE } from '../../src/policy.js';
import { createBudget } from '../../src/redis/budget.js';
import { SandboxRefusal } from '../../src/sandbox/store.js';
import { createCustomers, expectedCsvRow, expectedJson, exportNow, logSearches, readCsvRows, readManifest } from '../support/exports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const sha256 = async (file: string): Promise<string> => createHash('sha256').update(await readFile(file)).digest('hex');

describe('export job', () => {
  it('exports 2,345 customers exactly: every field round-trips through CSV and JSONL; the manifest adds up', async () => {
    pipeline = await startPipeline();
    createCustomers(pipeline.sandbox.store, 2_345);
    const customers = pipeline.sandbox.store.customers();
    expect(customers).toHaveLength(2_350); // and the 5 seeded ones

    const csv = await exportNow(pipeline);
    const rows = await readCsvRows(csv.record.file ?? '');
    expect(rows).toHaveLength(customers.length + 1);
    expect(rows.slice(1)).toEqual(customers.map(expectedCsvRow));
    expect(path.dirname(csv.record.file ?? '')).toBe(exportsDirOf(pipeline.dataDir));
    expect(path.basename(csv.record.file ?? '')).toMatch(/^customers-\d{8}T\d{6}Z\.csv$/);
    expect(csv.manifest).toMatchObject({
      count: 2_350,
      totalItemCount: { atStart: 2_350, atEnd: 2_350 },
      complete: true,
      drift: null,
      duplicatesDropped: 0,
      mode: 'full',
      format: 'csv',
      gzip: false,
      // 24 pages, then the probe: the last page once more.
      pages: { read: 25, reread: 0, resumed: 0 },
      requests: 25,
      retries: 0,
      runs: 1,
      warnings: [],
    });
    expect(csv.manifest.sha256).toBe(await sha256(csv.record.file ?? ''));
    expect(csv.manifest.file).toBe(path.basename(csv.record.file ?? ''));
    expect(csv.manifest.durationMs).toBeGreaterThan(0);

    const jsonl = await exportNow(pipeline, { format: 'jsonl' });
    const lines = (await readFile(jsonl.record.file ?? '', 'utf8')).trimEnd().split('\n');
    expect(lines.map((line) => JSON.parse(line) as unknown)).toEqual(customers.map(expectedJson));
    expect(jsonl.manifest.sha256).toBe(await sha256(jsonl.record.file ?? ''));

    // Done: the working state is gone from Redis and disk; the record stays for the dashboard.
    const redis = pipeline.runtime.redis;
    expect(await redis.exists(`${pipeline.prefix}:export:${csv.record.id}:pages`)).toBe(0);
    expect(await redis.ttl(`${pipeline.prefix}:export:${csv.record.id}`)).toBeGreaterThan(0);
    expect(await readdir(path.join(exportsDirOf(pipeline.dataDir), '.spool'))).toEqual([]);
  });

  // Deterministically mid-run: when the given search request arrives, 150 customers appear first.
  // The 6th is among the concurrent pages of the first round; the 25th is its probe (1 + 23 pages + 1).
  it.each([6, 25])(
    'customers created at search request %i are caught: the drift is reported, the tail read again if needed, never a short or doubled file',
    async (at) => {
      pipeline = await startPipeline();
      createCustomers(pipeline.sandbox.store, 2_345);
      const before = pipeline.sandbox.store.customers().length;
      const store = pipeline.sandbox.store;
      const log = logSearches(pipeline.sandbox, (_seen, all) => {
        if (all.length === at) createCustomers(store, 150, 'Midrun');
      });

      const { record, manifest } = await exportNow(pipeline);
      const customers = store.customers();
      expect(customers).toHaveLength(before + 150);
      const rows = await readCsvRows(record.file ?? '');
      expect(rows.slice(1)).toEqual(customers.map(expectedCsvRow));
      expect(manifest).toMatchObject({ count: before + 150, totalItemCount: { atStart: before, atEnd: before + 150 }, complete: true, duplicatesDropped: 0 });
      expect(manifest.drift?.reasons.join(' ')).toContain(`grew from ${before} to ${before + 150}`);
      // All 150 were met and written: the drift counts them.
      expect(manifest.drift?.added).toBe(150);
      // Whatever was read after the first round is the affected range only: the old last page and the new ones.
      const firstRound = Math.ceil(before / SEARCH_PAGE_SIZE) + 1;
      const later = log.seen.slice(firstRound).map((s) => s.skip / SEARCH_PAGE_SIZE);
      expect(later.every((page) => page >= Math.floor(before / SEARCH_PAGE_SIZE))).toBe(true);
      if (at === 25) {
        expect(manifest.drift?.rounds).toBe(2);
        expect(manifest.drift?.reread).toBe('24');
        expect(later).toEqual([24, 24]);
      }
    },
  );

  it('rides out 429s and 503s: the fleet budget waits out Retry-After, transient failures are retried, the manifest counts both', async () => {
    pipeline = await startPipeline({ faults: { rateLimit: 4, errorRate: 0.2 } });
    createCustomers(pipeline.sandbox.store, 995);
    const { record, manifest } = await exportNow(pipeline);
    expect((await readCsvRows(record.file ?? '')).slice(1)).toEqual(pipeline.sandbox.store.customers().map(expectedCsvRow));
    const stats = pipeline.sandbox.stats();
    expect(stats.faults.rateLimited).toBeGreaterThan(0);
    expect(manifest).toMatchObject({ complete: true, count: 1_000, rateLimited: stats.faults.rateLimited, retries: stats.faults.error5xx });
    expect(manifest.requests).toBe(stats.byEndpoint.searchCustomers);
  });

  it('falls back to one search per character when the service refuses an empty contains, and says so', async () => {
    pipeline = await startPipeline({ seed: false });
    createCustomers(pipeline.sandbox.store, 300);
    pipeline.sandbox.store.createCustomer({ ...pipeline.sandbox.store.customers()[0]!, FirstName: '李', LastName: '王', Password: '' });
    logSearches(pipeline.sandbox, (seen) => {
      if (seen.contains === '') throw new SandboxRefusal(400, 'contains must not be empty');
    });

    const { record, manifest } = await exportNow(pipeline);
    const everyone = pipeline.sandbox.store.customers();
    const reachable = everyone.filter((c) => c.LastName !== '王');
    const rows = await readCsvRows(record.file ?? '');
    const ids = rows.slice(1).map((row) => row[0]);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(reachable.map((c) => c.CustomerID).sort());
    expect(manifest.mode).toBe('partitioned');
    expect(manifest.totalItemCount).toEqual({ atStart: null, atEnd: null });
    expect(manifest.partitions).toHaveLength(36);
    expect(manifest.duplicatesDropped).toBeGreaterThan(0);
    expect(manifest.warnings.join(' ')).toContain('refused an empty search (contains must not be empty)');
    expect(manifest.warnings.join(' ')).toContain('contain none of these characters is not in the file');
  });

  it('a run that failed part-way is resumed by the next run without reading its finished pages again', async () => {
    pipeline = await startPipeline({ workers: false });
    createCustomers(pipeline.sandbox.store, 2_345);
    const failing = 12 * SEARCH_PAGE_SIZE;
    let refusedOnce = false;
    const log = logSearches(pipeline.sandbox, (seen) => {
      if (seen.skip === failing && !refusedOnce) {
        refusedOnce = true;
        throw new SandboxRefusal(503, 'Service temporarily unavailable');
      }
    });
    const api = createApiClient({ baseUrl: pipeline.sandbox.url });
    const store = createExportStore(pipeline.runtime.redis, pipeline.prefix);
    const deps = { connection: pipeline.runtime.redis, prefix: pipeline.prefix, api, budget: createBudget(pipeline.runtime.redis, pipeline.runtime.store.keys, { rate: undefined }), dataDir: pipeline.dataDir, logger: pipeline.runtime.logger };
    const input = { exportId: 'resume-1', jobId: 'resume-1', request: { format: 'csv' as const, gzip: false }, store, deps, pager: { pageAttempts: 1, concurrency: 4 } };
    try {
      await expect(runExport(input)).rejects.toThrow(/temporarily unavailable/);
      const finished = Object.keys(await pipeline.runtime.redis.hgetall(store.keys.pages('resume-1'))).map((key) => Number(key.split(':')[1]));
      expect(finished.length).toBeGreaterThan(5);
      expect(finished).not.toContain(12);

      log.setPhase('second');
      const result = await runExport(input);
      const second = log.seen.filter((s) => s.phase === 'second').map((s) => s.skip / SEARCH_PAGE_SIZE);
      const lastPage = Math.ceil(pipeline.sandbox.store.customers().length / SEARCH_PAGE_SIZE) - 1;
      // Finished pages are not read again; only the probe reads the last page once more.
      expect(second.filter((page) => finished.includes(page) && page !== lastPage)).toEqual([]);
      expect(second).toContain(12);
      const rows = await readCsvRows(result.file);
      expect(rows.slice(1)).toEqual(pipeline.sandbox.store.customers().map(expectedCsvRow));
      const manifest = await readManifest(result.manifest);
      expect(manifest).toMatchObject({ complete: true, runs: 2, count: 2_350 });
      expect(manifest.pages.resumed).toBe(finished.length);
    } finally {
      await api.close();
    }
  });

  /** runExport on the pipeline's Redis and sandbox, without a BullMQ job (maxRounds 2 keeps a service that never holds still short). */
  async function exportDirect(p: Pipeline, exportId: string, api: ReturnType<typeof createApiClient>) {
    const exportStore = createExportStore(p.runtime.redis, p.prefix);
    const deps = { connection: p.runtime.redis, prefix: p.prefix, api, budget: createBudget(p.runtime.redis, p.runtime.store.keys, { rate: undefined }), dataDir: p.dataDir, logger: p.runtime.logger };
    const result = await runExport({ exportId, jobId: exportId, request: { format: 'jsonl', gzip: false }, store: exportStore, deps, pager: { maxRounds: 2 } });
    const ids = (await readFile(result.file, 'utf8')).trimEnd().split('\n').map((line) => String((JSON.parse(line) as { CustomerID: string }).CustomerID));
    return { result, ids, manifest: await readManifest(result.manifest) };
  }

  it('beside an import that never stops creating customers, the export is complete: every customer of the start once, the rest counted as drift', async () => {
    pipeline = await startPipeline({ workers: false });
    createCustomers(pipeline.sandbox.store, 450);
    const store = pipeline.sandbox.store;
    const before = store.customers().length;
    let n = 0;
    // Every search request adds a page of customers first: the count moves every time it is read, through every round.
    const log = logSearches(pipeline.sandbox, () => createCustomers(store, 100, `Busy${n++}`));
    const api = createApiClient({ baseUrl: pipeline.sandbox.url });
    try {
      const { result, ids, manifest } = await exportDirect(pipeline, 'busy', api);
      const atStart = manifest.totalItemCount.atStart ?? 0;
      // The first request created its 100 before it was answered.
      expect(atStart).toBe(before + 100);
      expect(manifest.totalItemCount.atEnd).toBeGreaterThan(atStart);
      expect(result.complete).toBe(true);
      expect(manifest.complete).toBe(true);
      expect(manifest.warnings.join(' ')).not.toContain('not proven complete');
      // Each customer once; every customer present at the start is there; the rest are customers the service has.
      expect(new Set(ids).size).toBe(ids.length);
      const present = store.customers().slice(0, atStart).map((c) => c.CustomerID);
      const written = new Set(ids);
      expect(present.filter((id) => !written.has(id))).toEqual([]);
      const known = new Set(store.customers().map((c) => c.CustomerID));
      expect(ids.every((id) => known.has(id))).toBe(true);
      // Customers created meanwhile were met (the pages read after the first) and are counted as drift, not as a failure.
      expect(manifest.count).toBe(ids.length);
      expect(ids.length).toBeGreaterThan(atStart);
      expect(manifest.drift).toMatchObject({ rounds: 2, added: ids.length - atStart });
      expect(manifest.drift?.reasons.join(' ')).toContain(`every customer present at the start (${atStart}) was read, once`);
      expect(log.seen.length).toBeGreaterThan(Math.ceil(atStart / SEARCH_PAGE_SIZE));
    } finally {
      await api.close();
    }
  });

  it('when customers present at the start are removed before the end while paging, the file has no duplicates and the manifest says it is not complete', async () => {
    pipeline = await startPipeline({ workers: false });
    createCustomers(pipeline.sandbox.store, 450);
    const store = pipeline.sandbox.store;
    // The sandbox has no removal: its search answers leave out the customers "removed" so far,
    // one more at every request, each in the first pages (before the end of the listing).
    const all = store.customers().map((c) => c.CustomerID);
    const removed = new Set<string>();
    const search = store.searchCustomers.bind(store);
    store.searchCustomers = ({ contains, skip, take }) => {
      const everyone = search({ contains, skip: 0, take: Number.MAX_SAFE_INTEGER }).Customers.filter((c) => !removed.has(c.CustomerID));
      return { Customers: everyone.slice(skip, skip + take), TotalItemCount: everyone.length };
    };
    logSearches(pipeline.sandbox, (_seen, seen) => {
      if (seen.length > 1) removed.add(all[10 + seen.length] ?? '');
    });
    const api = createApiClient({ baseUrl: pipeline.sandbox.url });
    try {
      const { result, ids, manifest } = await exportDirect(pipeline, 'shrinking', api);
      expect(removed.size).toBeGreaterThan(1);
      expect(result.complete).toBe(false);
      expect(manifest.complete).toBe(false);
      expect(manifest.warnings.join(' ')).toContain('not proven complete');
      expect(manifest.drift?.added).toBeNull();
      expect(manifest.drift?.reasons.join(' ')).toContain(`fell from ${all.length}`);
      expect(new Set(ids).size).toBe(ids.length);
      const known = new Set(all);
      expect(ids.every((id) => known.has(id))).toBe(true);
      expect(manifest.count).toBe(ids.length);
    } finally {
      await api.close();
    }
  });

  it('a failure that is not the API\'s (the budget\'s Redis blinking before a request) retries the page, as a row would, instead of failing the run', async () => {
    pipeline = await startPipeline({ workers: false });
    createCustomers(pipeline.sandbox.store, 250);
    let blinks = 1;
    const api = createApiClient({
      baseUrl: pipeline.sandbox.url,
      beforeRequest: async () => {
        if (blinks-- > 0) throw new Error('Connection is closed.');
      },
    });
    const store = createExportStore(pipeline.runtime.redis, pipeline.prefix);
    const deps = { connection: pipeline.runtime.redis, prefix: pipeline.prefix, api, budget: createBudget(pipeline.runtime.redis, pipeline.runtime.store.keys, { rate: undefined }), dataDir: pipeline.dataDir, logger: pipeline.runtime.logger };
    try {
      const result = await runExport({ exportId: 'blink', jobId: 'blink', request: { format: 'csv', gzip: false }, store, deps, pager: { backoff: { baseMs: 5, capMs: 20 } } });
      expect(await readManifest(result.manifest)).toMatchObject({ complete: true, runs: 1, count: 255 });
      expect((await readCsvRows(result.file)).slice(1)).toEqual(pipeline.sandbox.store.customers().map(expectedCsvRow));
      expect(await store.get('blink')).toMatchObject({ retries: 1 });
    } finally {
      await api.close();
    }
  });
});
