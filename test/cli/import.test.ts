import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { envOf, startPipeline, until, type Pipeline, releaseBacklog } from '../support/pipeline.js';
import { killAll, subsync, waitForOutput } from '../support/cli.js';
import { batchJobId, batchOf, ROWS_PER_BATCH } from '../../src/queue/queues.js';
import { ENQUEUE_LEASE_MS, enqueueLeaseKey } from '../../src/import/producer.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

describe('subsync import', () => {
  it('--wait exits 3 when some rows did not succeed, 0 when all did; the same file again adds nothing and reports the same', async () => {
    pipeline = await startPipeline();
    const mixed = await pipeline.file('mixed.csv', 'FirstName,LastName,EmailAddress\nAda,Cliwait,ada@example.com\nBob,Cliwait,bob@\n');
    const first = subsync(['import', mixed, '--wait'], envOf(pipeline));
    expect((await first.exited).code).toBe(3);
    const lines = first.stdout().split('\n');
    expect(lines[0]).toMatch(/^import id: [0-9a-f]{24}$/);
    expect(first.stdout()).toMatch(/row 2 \(spreadsheet row 3, line 3\), column "EmailAddress"/);
    const resultsDir = /results: (.+)/.exec(first.stdout())?.[1];
    expect(resultsDir).toBeDefined();
    expect(await readFile(path.join(resultsDir ?? '', 'errors.csv'), 'utf8')).toContain('Bob,Cliwait,bob@');

    const again = subsync(['import', mixed, '--wait'], envOf(pipeline));
    expect((await again.exited).code).toBe(3);
    expect(again.stdout()).toContain('already imported');
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Cliwait')).toHaveLength(1);

    const good = await pipeline.file('good.csv', 'FirstName,LastName\nCarla,Cliwaitok\n');
    const ok = subsync(['import', good, '--wait', '--json'], envOf(pipeline));
    expect((await ok.exited).code).toBe(0);
    expect(JSON.parse(ok.stdout().split('\n')[0] ?? '{}')).toMatchObject({ importId: expect.stringMatching(/^[0-9a-f]{24}$/) });
  });

  it('rejects a file with header problems before enqueueing anything, exit 2, naming columns and the closest name', async () => {
    pipeline = await startPipeline({ workers: false });
    const bad = await pipeline.file('bad-headers.csv', 'FirstName,LastName,EmailAdress,Shoe Size\nAda,Lovelace,ada@example.com,38\n');
    const run = subsync(['import', bad], envOf(pipeline));
    expect((await run.exited).code).toBe(2);
    expect(run.stderr()).toContain('"EmailAdress"');
    expect(run.stderr()).toContain('EmailAddress');
    expect(run.stderr()).toContain('"Shoe Size"');
    expect(await pipeline.runtime.queues.rows.getJobCounts('waiting')).toEqual({ waiting: 0 });
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
  });

  it('a producer killed half-way and run again adds each row exactly once', async () => {
    pipeline = await startPipeline({ workers: false });
    const rows = 100_000;
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= rows; i++) lines.push(`Kill${i},Halfway,k${i}@example.com`);
    const file = await pipeline.file('big.csv', `${lines.join('\n')}\n`);
    const redis = pipeline.runtime.redis;

    const first = subsync(['import', file], envOf(pipeline));
    const importId = (await waitForOutput(first, /import id: (\S+)/))[1] ?? '';
    await until(async () => ((await redis.hlen(pipeline!.runtime.store.keys.ledger(importId))) >= 500 ? true : undefined), 'some rows to be enqueued', 30_000, 2);
    first.child.kill('SIGKILL');
    await first.exited;
    const half = await redis.hlen(pipeline.runtime.store.keys.ledger(importId));
    expect(half).toBeLessThan(rows);
    expect((await pipeline.runtime.store.getImport(importId))?.state).toBe('enqueuing');

    // The killed producer's enqueue lease outlives it, no longer than its lifetime: a rerun meanwhile does nothing and says why.
    const lease = enqueueLeaseKey(pipeline.runtime.store.keys, importId);
    const ttl = await redis.pttl(lease);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(ENQUEUE_LEASE_MS);
    const early = subsync(['import', file], envOf(pipeline));
    expect((await early.exited).code).toBe(0);
    expect(early.stdout()).toContain(`another command is importing this file (import id ${importId})`);
    expect(await redis.hlen(pipeline.runtime.store.keys.ledger(importId))).toBe(half);
    // Its expiry, brought forward: then a rerun resumes.
    await redis.pexpire(lease, 1);
    await until(async () => ((await redis.exists(lease)) === 0 ? true : undefined), 'the lease to expire');

    const second = subsync(['import', file], envOf(pipeline));
    expect((await second.exited).code).toBe(0);
    expect(second.stdout()).toContain('resumed');
    expect(await redis.hlen(pipeline.runtime.store.keys.ledger(importId))).toBe(rows);
    // One batch job per block of rows, the same ones whichever run of the producer added them.
    expect(await releaseBacklog(pipeline.runtime)).toBe(rows / ROWS_PER_BATCH);
    expect(await pipeline.runtime.queues.rows.getJobCounts('prioritized')).toEqual({ prioritized: rows / ROWS_PER_BATCH });
    expect(await pipeline.runtime.store.getImport(importId)).toMatchObject({ total: rows, batchRows: ROWS_PER_BATCH });
    const last = await pipeline.runtime.queues.rows.getJob(batchJobId(importId, batchOf(rows, ROWS_PER_BATCH)));
    expect(last?.data).toEqual({ importId, rows: Array.from({ length: ROWS_PER_BATCH }, (_, i) => rows - ROWS_PER_BATCH + 1 + i) });
  });

  it('two worker processes share SUBSYNC_RATE, and stop cleanly on SIGTERM', async () => {
    pipeline = await startPipeline({ workers: false });
    const rate = 25;
    const env = envOf(pipeline, { SUBSYNC_RATE: String(rate), SUBSYNC_LOG_LEVEL: 'debug' });
    const workers = [subsync(['worker', '--concurrency', '8'], env), subsync(['worker', '--concurrency', '8'], env)];
    await Promise.all(workers.map((w) => waitForOutput(w, /worker running/)));
    const lines = ['FirstName,LastName'];
    for (let i = 1; i <= 150; i++) lines.push(`Rate${i},Shared`);
    const file = await pipeline.file('rate.csv', `${lines.join('\n')}\n`);
    const run = subsync(['import', file, '--wait'], envOf(pipeline));
    expect((await run.exited).code).toBe(0);

    const stats = pipeline.sandbox.stats();
    const seconds = ((stats.lastRequestAt ?? 0) - (stats.firstRequestAt ?? 0)) / 1000;
    const achieved = (stats.requests - 1) / seconds;
    // One create per row; one page that builds the customer index the duplicate guard reads (five seeded customers),
    // and a read of the listing's end each time the index is over 30 s old (none, or one or two on a busy machine).
    expect(stats.byEndpoint.createCustomer).toBe(150);
    expect(stats.byEndpoint.searchCustomers).toBeGreaterThanOrEqual(1);
    expect(stats.byEndpoint.searchCustomers).toBeLessThanOrEqual(3);
    expect(achieved).toBeLessThanOrEqual(rate * 1.1);
    const settledBy = workers.map((w) => (w.stderr().match(/"row settled"/g) ?? []).length);
    expect(settledBy[0]! + settledBy[1]!).toBe(150);
    expect(Math.min(...settledBy)).toBeGreaterThan(0);

    for (const w of workers) w.child.kill('SIGTERM');
    const exits = await Promise.all(workers.map((w) => w.exited));
    expect(exits.map((e) => e.code)).toEqual([0, 0]);
  });
});
