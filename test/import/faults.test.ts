import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { importFile } from '../../src/import/producer.js';
import { importStatus } from '../../src/import/status.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const ROWS = 300;

function customersFile(tag: string): string {
  const lines = ['FirstName,LastName,EmailAddress'];
  for (let i = 1; i <= ROWS; i++) lines.push(`Row${i},${tag},row${i}@${tag.toLowerCase()}.example`);
  return `${lines.join('\n')}\n`;
}

describe('under faults, every row settles exactly once and nothing is created twice', () => {
  it.each([
    ['a 429 storm', { rateLimit: 60 }],
    ['5xx bursts before and after applying, and dropped answers', { errorRate: 0.15, errorAfterApplyRate: 0.05, dropAfterCommitRate: 0.05 }],
  ])('%s', async (_name, faults) => {
    pipeline = await startPipeline({ faults, concurrency: 16 });
    const tag = `Faulty${Math.random().toString(36).slice(2, 8)}`;
    const file = await pipeline.file('faulty.csv', customersFile(tag));
    const { importId } = await importFile({ file }, { store: pipeline.runtime.store, queues: pipeline.runtime.queues, keyring: undefined, logger: pipeline.runtime.logger });
    const status = await until(async () => {
      const s = await importStatus(pipeline!.runtime.store, importId);
      return s?.finished ? s : undefined;
    }, 'the import to settle', 120_000);

    const results = z.array(z.record(z.string(), z.string())).parse(parse(await readFile(path.join(status.resultsDir ?? '', 'results.csv'), 'utf8'), { columns: true, bom: true }));
    expect(results.map((r) => Number(r._row))).toEqual(Array.from({ length: ROWS }, (_, i) => i + 1));
    const inSandbox = pipeline.sandbox.store.customers().filter((c) => c.LastName === tag);
    const perName = new Map<string, number>();
    for (const c of inSandbox) perName.set(c.FirstName, (perName.get(c.FirstName) ?? 0) + 1);
    const duplicates = [...perName.values()].filter((n) => n > 1).length;
    expect(duplicates).toBe(0);
    for (const row of results) {
      const present = perName.get(row.FirstName ?? '') ?? 0;
      if (row._status === 'created' || row._status === 'reconciled') {
        expect(present, `row ${row._row} ${row._status}`).toBe(1);
        expect(inSandbox.find((c) => c.FirstName === row.FirstName)?.CustomerID).toBe(row._customerId);
      }
      if (row._status === 'failed') expect(present, `row ${row._row} failed`).toBe(0);
    }
    const stats = pipeline.sandbox.stats();
    expect(status.counts.created + status.counts.reconciled + status.counts.failed + status.counts['needs-review']).toBe(ROWS);
    if ('rateLimit' in faults) {
      expect(stats.faults.rateLimited).toBeGreaterThan(0);
      expect(status.rateLimited).toBeGreaterThan(0);
      // A 429 never spends an attempt: nothing ran out of retries.
      expect(status.counts.created + status.counts.reconciled).toBe(ROWS);
    } else {
      expect(stats.faults.error5xx + stats.faults.droppedAfterCommit + stats.faults.error5xxAfterApply).toBeGreaterThan(0);
      expect(status.retries).toBeGreaterThan(0);
    }
  });
});
