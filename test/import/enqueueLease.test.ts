import { afterEach, describe, expect, it } from 'vitest';
import { enqueueLeaseKey, importFile } from '../../src/import/producer.js';
import { ROWS_PER_BATCH } from '../../src/queue/queues.js';
import { killAll, subsync, waitForOutput } from '../support/cli.js';
import { envOf, startPipeline, until, type Pipeline, releaseBacklog } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

const deps = (p: Pipeline) => ({ store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, redis: p.runtime.redis, logger: p.runtime.logger });

/** Valid customer rows, enough for many flushes: an enqueue that lasts while a second command arrives. */
function customers(rows: number, tag = 'Lease'): string {
  const lines = ['FirstName,LastName,EmailAddress'];
  for (let i = 1; i <= rows; i++) lines.push(`Row${i},${tag}${i},r${i}@example.com`);
  return `${lines.join('\n')}\n`;
}

describe('the enqueue lease', () => {
  it('two producers of the same bytes at once: exactly one enqueues, the other says another command is importing it', async () => {
    pipeline = await startPipeline({ workers: false });
    const rows = 20_000;
    const file = await pipeline.file('twice.csv', customers(rows));
    const results = await Promise.all([importFile({ file }, deps(pipeline)), importFile({ file }, deps(pipeline))]);

    const outcomes = results.map((r) => r.outcome).sort();
    expect(outcomes).toEqual(['enqueued', 'in-progress']);
    const enqueued = results.find((r) => r.outcome === 'enqueued');
    expect(enqueued).toMatchObject({ rows, resumed: false });
    expect(new Set(results.map((r) => r.importId)).size).toBe(1);
    const importId = enqueued?.importId ?? '';
    // Each batch job once, and the lease released at the end.
    expect(await releaseBacklog(pipeline.runtime)).toBe(Math.ceil(rows / ROWS_PER_BATCH));
    expect(await pipeline.runtime.queues.rows.getJobCounts('prioritized')).toEqual({ prioritized: Math.ceil(rows / ROWS_PER_BATCH) });
    expect(await pipeline.runtime.redis.exists(enqueueLeaseKey(pipeline.runtime.store.keys, importId))).toBe(0);
    expect(await importFile({ file }, deps(pipeline))).toEqual({ outcome: 'already-imported', importId, kind: 'customers' });
  });

  it('a producer killed mid-enqueue leaves its lease to expire; until then a rerun says in-progress, after it the rerun resumes', async () => {
    pipeline = await startPipeline({ workers: false });
    const rows = 3_000;
    const file = await pipeline.file('killed.csv', customers(rows));
    const { queues, store, redis } = pipeline.runtime;

    // The first producer dies after its record and some rows are written: its second flush fails.
    const putPendingRows = store.putPendingRows.bind(store);
    let calls = 0;
    store.putPendingRows = async (...args) => {
      if (++calls > 1) throw new Error('killed mid-enqueue');
      return putPendingRows(...args);
    };
    await expect(importFile({ file }, deps(pipeline))).rejects.toThrow('killed mid-enqueue');
    store.putPendingRows = putPendingRows;
    const { importId } = await importFile({ file, dryRun: true }, deps(pipeline));
    expect(await store.getImport(importId)).toMatchObject({ state: 'enqueuing' });

    // A process killed outright releases nothing: its lease stays until it expires.
    const key = enqueueLeaseKey(store.keys, importId);
    await redis.set(key, 'killed-producer', 'PX', 1_500);
    expect(await importFile({ file }, deps(pipeline))).toEqual({ outcome: 'in-progress', importId, kind: 'customers' });
    expect(await store.getImport(importId)).toMatchObject({ state: 'enqueuing' });

    await until(async () => ((await redis.exists(key)) === 0 ? true : undefined), 'the stale lease to expire', 10_000);
    const rerun = await importFile({ file }, deps(pipeline));
    expect(rerun).toMatchObject({ outcome: 'enqueued', importId, rows, resumed: true });
    expect(await store.getImport(importId)).toMatchObject({ state: 'enqueued', total: rows });
    expect(await releaseBacklog(pipeline.runtime)).toBe(Math.ceil(rows / ROWS_PER_BATCH));
    expect(await queues.rows.getJobCounts('prioritized')).toEqual({ prioritized: Math.ceil(rows / ROWS_PER_BATCH) });
  });

  it('`subsync import --wait` while another command holds the lease says so, then follows that import to its end', async () => {
    pipeline = await startPipeline();
    const file = await pipeline.file('other.csv', customers(3, 'Leasecli'));
    const { store, redis } = pipeline.runtime;
    // The other command: it has written the import's record, queues no row yet, and holds the lease.
    const putPendingRows = store.putPendingRows.bind(store);
    store.putPendingRows = () => Promise.reject(new Error('not yet'));
    await expect(importFile({ file }, deps(pipeline))).rejects.toThrow('not yet');
    store.putPendingRows = putPendingRows;
    const scan = await importFile({ file, dryRun: true }, deps(pipeline));
    expect(await store.getImport(scan.importId)).toMatchObject({ state: 'enqueuing' });
    const key = enqueueLeaseKey(store.keys, scan.importId);
    await redis.set(key, 'other-command', 'PX', 60_000);

    const run = subsync(['import', file, '--wait'], envOf(pipeline));
    await waitForOutput(run, /another command is importing this file/);
    expect(run.stdout()).toContain(`another command is importing this file (import id ${scan.importId}); \`subsync status ${scan.importId}\` follows it`);
    expect(run.stdout()).not.toContain('resumed');

    // The other command finishes its enqueue now (its lease handed over), and the waiting command follows it to the end.
    await redis.del(key);
    expect(await importFile({ file }, deps(pipeline))).toMatchObject({ outcome: 'enqueued', resumed: true });
    expect((await run.exited).code).toBe(0);
    expect(run.stdout()).toContain('settled: created 3');
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName.startsWith('Leasecli'))).toHaveLength(3);
  });
});
