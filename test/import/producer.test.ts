import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { BATCH_JOB, batchJobId, ROWS_PER_BATCH, RowBatchDataSchema } from '../../src/queue/queues.js';
import { decodeEntry } from '../../src/store/ledger.js';
import { startPipeline, type Pipeline, releaseBacklog } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const deps = (p: Pipeline) => ({ store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });

/** Rows enough for several flushes in flight; every seventh has a bad email, every row quoted cells with commas, quotes and line breaks. */
function customers(rows: number): string {
  const lines = ['FirstName,LastName,EmailAddress,AddressLine1'];
  for (let i = 1; i <= rows; i++) lines.push(`Row${i},"O""Brien, ${i}",${i % 7 === 0 ? 'bad@' : `r${i}@example.com`},"${i} Main St\r\nFloor 2"`);
  return `${lines.join('\r\n')}\r\n`;
}

describe('the producer, in one parse of the file', () => {
  it('enqueues every valid row and settles every invalid one across many flushes, under the import id of its bytes', async () => {
    pipeline = await startPipeline({ workers: false });
    const rows = 2_346;
    const file = await pipeline.file('many.csv', customers(rows));
    const result = await importFile({ file }, deps(pipeline));
    const invalid = Math.floor(rows / 7);
    expect(result).toMatchObject({ outcome: 'enqueued', rows, invalid });
    expect(result.importId).toBe(createHash('sha256').update('customers\n').update(await readFile(file)).digest('hex').slice(0, 24));

    const { store, queues, redis } = pipeline.runtime;
    // One batch job per block of ROWS_PER_BATCH rows, holding that block's valid rows: each valid row in exactly one
    // (in the import's backlog until released).
    expect(await releaseBacklog(pipeline.runtime)).toBe(Math.ceil(rows / ROWS_PER_BATCH));
    expect(await queues.rows.getJobCounts('prioritized')).toEqual({ prioritized: Math.ceil(rows / ROWS_PER_BATCH) });
    const batches = await queues.rows.getPrioritized(0, -1);
    const batched = batches.flatMap((job) => RowBatchDataSchema.parse(job.data).rows).sort((a, b) => a - b);
    expect(batched).toEqual(Array.from({ length: rows }, (_, i) => i + 1).filter((row) => row % 7 !== 0));
    expect(new Set(batches.map((job) => job.name))).toEqual(new Set([BATCH_JOB]));
    // The second block: rows ROWS_PER_BATCH + 1 to 2 × ROWS_PER_BATCH, less the invalid ones.
    const second = Array.from({ length: ROWS_PER_BATCH }, (_, i) => ROWS_PER_BATCH + 1 + i).filter((row) => row % 7 !== 0);
    expect(batches.find((job) => job.id === batchJobId(result.importId, 1))?.data).toEqual({ importId: result.importId, rows: second });
    expect(await store.getImport(result.importId)).toMatchObject({ batchRows: ROWS_PER_BATCH });
    expect((await store.counts(result.importId)).byStatus.invalid).toBe(invalid);
    expect(await store.getImport(result.importId)).toMatchObject({ state: 'enqueued', total: rows });
    const ledger = await redis.hgetall(store.keys.ledger(result.importId));
    expect(Object.keys(ledger)).toHaveLength(rows);
    const entry = (row: number) => decodeEntry(ledger[String(row)] ?? 'null');
    expect(entry(rows)).toEqual({ cells: [`Row${rows}`, `O"Brien, ${rows}`, `r${rows}@example.com`, `${rows} Main St\r\nFloor 2`], job: 'customer.create', status: 'pending', attempts: 0 });
    expect(entry(7)).toMatchObject({ job: null, status: 'invalid', note: expect.stringMatching(/row 7 \(spreadsheet row \d+, line \d+\), column "EmailAddress"/) });

    const again = await importFile({ file }, deps(pipeline));
    expect(again).toEqual({ outcome: 'already-imported', importId: result.importId, kind: 'customers' });
  });

  it.each([
    ['a stray quote inside an unquoted cell', Buffer.from('Stray,Qu"ote,s@example.com,x')],
    ['bytes that are not UTF-8', Buffer.from([0x4e, 0x6f, 0xff, 0x2c, 0x55, 0x2c, 0x75, 0x40, 0x78, 0x2e, 0x79, 0x2c, 0x78])],
  ])('rejects a file with %s deep inside before anything is queued', async (_name, fault) => {
    pipeline = await startPipeline({ workers: false });
    const file = await pipeline.file('fault.csv', '');
    await writeFile(file, Buffer.concat([Buffer.from(customers(3_000)), fault, Buffer.from('\r\nLast,Row,l@example.com,x\r\n')]));
    await expect(importFile({ file }, deps(pipeline))).rejects.toMatchObject({ code: 'CSV_FORMAT' });
    expect(await pipeline.runtime.queues.rows.count()).toBe(0);
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
  });
});
