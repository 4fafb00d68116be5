import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { importFile, type ImportRequest } from '../../src/import/producer.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { SandboxRefusal } from '../../src/sandbox/store.js';
import { customerInput } from '../support/bodies.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

async function run(p: Pipeline, request: ImportRequest): Promise<{ status: ImportStatus; rows: Array<Record<string, string>> }> {
  const result = await importFile(request, { store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });
  if (result.outcome !== 'enqueued') throw new Error(`not enqueued: ${result.outcome}`);
  const status = await until(async () => {
    const s = await importStatus(p.runtime.store, result.importId);
    return s?.finished ? s : undefined;
  }, `import ${result.importId} to finish`);
  const text = await readFile(path.join(status.resultsDir ?? '', 'results.csv'), 'utf8');
  return { status, rows: z.array(z.record(z.string(), z.string())).parse(parse(text, { columns: true, bom: true })) };
}

/** Fails every other search request of the sandbox with a 503, as a service under load would. */
function failEveryOtherSearch(p: Pipeline): () => number {
  let searches = 0;
  let failed = 0;
  p.sandbox.intercept((request) => {
    if (request.endpoint !== 'searchCustomers') return;
    searches++;
    if (searches % 2 === 0) {
      failed++;
      throw new SandboxRefusal(503, 'Service temporarily unavailable');
    }
  });
  return () => failed;
}

describe('reading back a create whose answer was lost', () => {
  it('finds it in the newest customers (the index), through failing pages, and counts every attempt', async () => {
    pipeline = await startPipeline({ faults: { errorAfterApplyRate: 1 } });
    for (let i = 0; i < 150; i++) pipeline.sandbox.store.createCustomer(customerInput({ FirstName: `Base${i}`, LastName: 'Smith', EmailAddress: `base${i}@example.com` }));
    const failed = failEveryOtherSearch(pipeline);
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 0; i < 20; i++) lines.push(`Lost${i},Smith,lost${i}@example.com`);
    const { status, rows } = await run(pipeline, { file: await pipeline.file('lost.csv', lines.join('\n')) });
    expect(status.counts).toMatchObject({ reconciled: 20, 'needs-review': 0, failed: 0 });
    expect(failed()).toBeGreaterThan(0);
    expect(pipeline.sandbox.store.customers().filter((c) => c.FirstName.startsWith('Lost'))).toHaveLength(20);
    // The create (answered 500 after it applied), then the read-back: two attempts each.
    expect(rows.map((r) => r._attempts)).toEqual(rows.map(() => '2'));
    expect(rows.every((r) => /^\d+$/.test(r._customerId ?? ''))).toBe(true);
  });

  it('without the guard (--allow-duplicates), a search of every page of a common name, each page retried on its own', async () => {
    pipeline = await startPipeline({ faults: { errorAfterApplyRate: 1 } });
    for (let i = 0; i < 250; i++) pipeline.sandbox.store.createCustomer(customerInput({ FirstName: `Base${i}`, LastName: 'Jones', EmailAddress: `jones${i}@example.com` }));
    failEveryOtherSearch(pipeline);
    const { status } = await run(pipeline, { file: await pipeline.file('jones.csv', 'FirstName,LastName,EmailAddress\nJo,Jones,jo@example.com\n'), allowDuplicates: true });
    expect(status.counts).toMatchObject({ reconciled: 1, 'needs-review': 0 });
    expect(pipeline.sandbox.store.customers().filter((c) => c.FirstName === 'Jo')).toHaveLength(1);
  });
});
