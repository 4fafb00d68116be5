/**
 * The run history and the per-import series: states from records and counts,
 * the ETA from the series, buckets that widen with age, and a history read
 * page by page from the index of imports by time, against real Redis (and
 * the sandbox, for imports that run).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { etaOf, historyOf, importHistory, importSeries, stateOf } from '../../src/import/history.js';
import { ROW_STATUSES } from '../../src/outcomes.js';
import type { ImportCounts, LedgerEntry } from '../../src/store/importStore.js';
import { bucketWidth, seriesPoints } from '../../src/store/series.js';
import { importAndFinish } from '../support/imports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const counts = (over: Partial<Omit<ImportCounts, 'byStatus'>> & { byStatus?: Partial<ImportCounts['byStatus']> } = {}): ImportCounts => ({
  settled: 0,
  apiCalls: 0,
  retries: 0,
  rateLimited: 0,
  searches: 0,
  reads: 0,
  ...over,
  byStatus: { ...Object.fromEntries(ROW_STATUSES.map((s) => [s, 0])), ...over.byStatus } as ImportCounts['byStatus'],
});

describe('stateOf', () => {
  it('tells queued, running, finished and finished with failures from the record and counts', () => {
    expect(stateOf({ state: 'enqueued' }, counts())).toBe('queued');
    expect(stateOf({ state: 'enqueuing' }, counts({ apiCalls: 1 }))).toBe('running');
    expect(stateOf({ state: 'enqueued' }, counts({ settled: 3, byStatus: { created: 3 } }))).toBe('running');
    expect(stateOf({ state: 'enqueued', finishedAt: '1' }, counts({ settled: 3, byStatus: { created: 3 } }))).toBe('finished');
    expect(stateOf({ state: 'enqueued', finishedAt: '1' }, counts({ settled: 3, byStatus: { created: 2, failed: 1 } }))).toBe('finished with failures');
    expect(stateOf({ state: 'enqueued', finishedAt: '1' }, counts({ settled: 3, byStatus: { created: 2, invalid: 1 } }))).toBe('finished with failures');
  });

  it('reads paused and cancelled from the run state an operator left', () => {
    expect(stateOf({ state: 'enqueued', runState: 'paused' }, counts({ settled: 1 }))).toBe('paused');
    expect(stateOf({ state: 'enqueued', runState: 'running' }, counts({ settled: 1 }))).toBe('running');
    expect(stateOf({ state: 'enqueued', runState: 'cancelling' }, counts({ settled: 1 }))).toBe('cancelled');
    // A cancelled import whose results are written stays cancelled.
    expect(stateOf({ state: 'enqueued', runState: 'cancelled', finishedAt: '6' }, counts({ settled: 1 }))).toBe('cancelled');
  });
});

describe('the series', () => {
  it('buckets by 5 s in the first hour, 1 min in the first day, 1 h after', () => {
    expect([0, 5, 3_595, 3_600, 86_340, 86_400].map(bucketWidth)).toEqual([5, 5, 5, 60, 60, 3_600]);
    const points = seriesPoints({ '0': '10', '5': '4', '5:429': '2', '3600': '60', 'junk': 'x' });
    expect(points).toEqual([
      { at: 0, width: 5, rows: 10, rateLimited: 0 },
      { at: 5, width: 5, rows: 4, rateLimited: 2 },
      { at: 3_600, width: 60, rows: 60, rateLimited: 0 },
    ]);
  });

  it('is written by settling rows and adding figures, in the bucket of the time given, and expires with the import', async () => {
    pipeline = await startPipeline({ workers: false });
    const { store } = pipeline.runtime;
    const t0 = Date.UTC(2026, 0, 1);
    const id = 'series-1';
    await store.createImport({ id, file: 'f.csv', kind: 'customers', headers: ['FirstName'], paths: ['FirstName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: t0, state: 'enqueuing', round: 0 });
    const entry = (s: LedgerEntry['status']): LedgerEntry => ({ cells: ['Ann'], job: 'customer.create', status: s, attempts: 1 });
    await store.putPendingRows(id, [1, 2, 3, 4].map((row) => ({ row, entry: entry('pending') })));
    await store.markEnqueued(id, 4);
    await store.settleRows(id, [{ row: 1, entry: entry('created') }, { row: 2, entry: entry('created') }], { apiCalls: 3, retries: 1, rateLimited: 1, searches: 0, reads: 0 }, t0 + 7_000);
    // A row settled again changes nothing, but its figures still count (the calls were made).
    await store.settleRows(id, [{ row: 1, entry: entry('failed') }], { apiCalls: 1, retries: 0, rateLimited: 1, searches: 0, reads: 0 }, t0 + 8_000);
    await store.addFigures(id, { apiCalls: 2, rateLimited: 2 }, t0 + 9_000);
    await store.settleRows(id, [{ row: 3, entry: entry('created') }], undefined, t0 + 2 * 3_600_000 + 30_000);
    await store.settleRows(id, [{ row: 4, entry: entry('failed') }], undefined, t0 + 3 * 86_400_000 + 1_000);
    expect(await importSeries(store, id)).toEqual([
      { at: 5, width: 5, rows: 2, rateLimited: 4 },
      { at: 7_200, width: 60, rows: 1, rateLimited: 0 },
      { at: 259_200, width: 3_600, rows: 1, rateLimited: 0 },
    ]);
    expect((await store.counts(id)).rateLimited).toBe(4);

    await store.markFinished(id, 0, '/tmp/results', 3_600);
    const ttl = await pipeline.runtime.redis.ttl(store.keys.series(id));
    expect(ttl).toBeGreaterThan(3_500);
    expect(ttl).toBeLessThanOrEqual(3_600);
  });

  it('takes the import\'s expiry when first written after the import was set to expire', async () => {
    pipeline = await startPipeline({ workers: false });
    const { store, redis } = pipeline.runtime;
    const id = 'series-late';
    await store.createImport({ id, file: 'f.csv', kind: 'customers', headers: ['FirstName'], paths: ['FirstName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueued', round: 0 });
    await store.markFinished(id, 0, '/tmp/results', 600);
    await store.addFigures(id, { apiCalls: 1, rateLimited: 1 });
    expect(await redis.exists(store.keys.series(id))).toBe(1);
    expect(await redis.ttl(store.keys.series(id))).toBeGreaterThan(0);
  });
});

describe('etaOf', () => {
  const createdAt = new Date(0).toISOString();
  it('uses the pace of the last minute of the series', () => {
    // 600 s in: 300 rows over the last minute = 5 rows/s; 1,000 left = 200 s.
    const points = [{ at: 0, width: 5, rows: 10, rateLimited: 0 }, ...Array.from({ length: 12 }, (_, i) => ({ at: 540 + i * 5, width: 5, rows: 25, rateLimited: 0 }))];
    expect(etaOf({ total: 2_000, settled: 1_000, rowsPerSecond: 1.7, createdAt }, points, 600_000)).toBe(200);
  });
  it('falls back to the pace so far without recent rows, and is null when nothing is known', () => {
    expect(etaOf({ total: 100, settled: 50, rowsPerSecond: 2, createdAt }, [], 600_000)).toBe(25);
    expect(etaOf({ total: 100, settled: 0, rowsPerSecond: 0, createdAt }, [], 600_000)).toBeNull();
    expect(etaOf({ total: null, settled: 5, rowsPerSecond: 1, createdAt }, [], 600_000)).toBeNull();
  });
});

describe('importHistory', () => {
  it('lists every import newest first, a page at a time, and filters by state', async () => {
    pipeline = await startPipeline({ workers: false });
    const { store } = pipeline.runtime;
    const t0 = Date.now() - 100_000;
    for (let i = 1; i <= 7; i++) {
      const id = `h-${i}`;
      await store.createImport({ id, file: `f${i}.csv`, kind: 'customers', headers: ['FirstName'], paths: ['FirstName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: t0 + i * 1000, state: 'enqueued', round: 0 });
      await store.putPendingRows(id, [{ row: 1, entry: { cells: ['Ann'], job: 'customer.create', status: 'pending', attempts: 0 } }]);
      await store.markEnqueued(id, 1);
      // Odd imports settle their row, every third fails it; even ones stay queued.
      if (i % 2 === 1) {
        await store.settleRows(id, [{ row: 1, entry: { cells: ['Ann'], job: 'customer.create', status: i % 3 === 0 ? 'failed' : 'created', attempts: 1 } }]);
        await store.markFinished(id, 0, '/tmp/r', 600);
      }
    }
    // Paused by an operator (its run-state hash, as `subsync pause` writes it).
    await pipeline.runtime.redis.hset(store.keys.runState('h-2'), 'state', 'paused');
    // An import whose record expired while its id stayed in the index is passed over.
    await pipeline.runtime.redis.del(store.keys.importRecord('h-6'));

    const first = await importHistory(store, { limit: 3 });
    expect(first.imports.map((e) => e.importId)).toEqual(['h-7', 'h-5', 'h-4']);
    expect(first.indexed).toBe(7);
    expect(first.nextOffset).toBe(4);
    const second = await importHistory(store, { limit: 3, offset: first.nextOffset ?? 0 });
    expect(second.imports.map((e) => e.importId)).toEqual(['h-3', 'h-2', 'h-1']);
    expect(second.nextOffset).toBeNull();

    const states = Object.fromEntries((await importHistory(store)).imports.map((e) => [e.importId, e.state]));
    expect(states).toEqual({ 'h-7': 'finished', 'h-5': 'finished', 'h-4': 'queued', 'h-3': 'finished with failures', 'h-2': 'paused', 'h-1': 'finished' });

    const finished = await importHistory(store, { state: 'finished', limit: 1 });
    expect(finished.imports.map((e) => e.importId)).toEqual(['h-7']);
    expect(finished.nextOffset).toBe(1);
    expect((await importHistory(store, { state: 'finished', limit: 1, offset: 1 })).imports.map((e) => e.importId)).toEqual(['h-5']);
    expect((await importHistory(store, { state: 'paused' })).imports.map((e) => e.importId)).toEqual(['h-2']);
    expect((await importHistory(store, { state: 'finished with failures' })).imports.map((e) => [e.importId, e.problems, e.counts.failed])).toEqual([['h-3', 1, 1]]);
  });

  it('shows a real import finished with failures, its counts and its rows in the series', async () => {
    pipeline = await startPipeline();
    const file = await pipeline.file('people.csv', 'FirstName,LastName,EmailAddress\nAna,Silva,ana@example.com\nBo,Berg,bo@example.com\nCy,Cole,not-an-email\n');
    const status = await importAndFinish(pipeline, file);
    const entry = await historyOf(pipeline.runtime.store, status.importId);
    expect(entry).toMatchObject({ file: 'people.csv', kind: 'customers', state: 'finished with failures', total: 3, settled: 3, succeeded: 2, problems: 1, etaSeconds: null });
    expect(entry?.counts).toMatchObject({ created: 2, invalid: 1 });
    const points = await importSeries(pipeline.runtime.store, status.importId);
    expect(points.reduce((sum, p) => sum + p.rows, 0)).toBe(3);

  });
});
