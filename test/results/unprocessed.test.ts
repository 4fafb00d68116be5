import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROW_STATUSES, type RowStatus } from '../../src/outcomes.js';
import { writeImportResults, type ImportSummary, type ResultRow } from '../../src/results/writeResults.js';
import { PASSWORD_MASK } from '../../src/secrets.js';

const HEADERS = ['Customer.FirstName', 'Customer.LastName', 'CreditCardInfo.AccountNumber', 'CreditCardInfo.CVCode', 'Password', 'Note'];

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'subsync-unprocessed-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function summaryOf(rows: readonly ResultRow[]): ImportSummary {
  const counts = Object.fromEntries(ROW_STATUSES.map((s) => [s, 0])) as Record<RowStatus, number>;
  for (const r of rows) counts[r.status] += 1;
  return { importId: 'imp', file: 'f.csv', kind: 'signups', rows: rows.length, counts, startedAt: '', endedAt: '', durationMs: 1, rowsPerSecond: 1, apiCalls: 0, searches: 0, reads: 0, writes: 0, retries: 0, rateLimited: 0 };
}

const row = (n: number, status: RowStatus, cells: string[]): ResultRow => ({ row: n, cells, status, customerId: '', subscriptionId: '', paymentMethodKey: '', attempts: 0, error: '' });

async function* iterate<T>(items: readonly T[]): AsyncGenerator<T> {
  for (const item of items) yield item;
}

describe('unprocessed.csv', () => {
  it('holds the cancelled rows alone, in the input layout, with card numbers and CVCs empty and passwords withheld', async () => {
    const rows = [
      row(1, 'signed-up', ['Jean', 'Dupont', '************1111', '', '', 'first']),
      row(2, 'cancelled', ['Zoë', 'Åström', '4111111111111111', '737', 'hunter2', '=1+1']),
      row(3, 'failed', ['Ann', 'Neil', '************4444', '', '', '']),
      row(4, 'cancelled', ['Li', 'Wei', '************5556', '', '', 'a, "quoted" note']),
    ];
    const dir = path.join(root, 'r');
    const files = await writeImportResults({ dir, headers: HEADERS, secretColumns: { cardNumber: [2], cvc: [3], password: [4] }, rows: iterate(rows), summary: summaryOf(rows), unprocessed: true });
    expect(files.unprocessed).toBe(path.join(dir, 'unprocessed.csv'));
    const text = await readFile(files.unprocessed ?? '', 'utf8');
    expect(text).not.toMatch(/4111|1111|5556|737|hunter2/);
    const records = parse(text, { bom: true }) as string[][];
    expect(records).toEqual([HEADERS, ['Zoë', 'Åström', '', '', PASSWORD_MASK, "'=1+1"], ['Li', 'Wei', '', '', '', 'a, "quoted" note']]);
    // Not a failure: errors.csv has the failed row only.
    const errors = parse(await readFile(files.errors, 'utf8'), { bom: true }) as string[][];
    expect(errors.slice(1).map((r) => r[0])).toEqual(['Ann']);
  });

  it('is not written, and an earlier one is removed, when no row was cancelled', async () => {
    const dir = path.join(root, 'r');
    const cancelled = [row(1, 'cancelled', ['A', 'B', '', '', '', ''])];
    await writeImportResults({ dir, headers: HEADERS, secretColumns: { cardNumber: [2], cvc: [3] }, rows: iterate(cancelled), summary: summaryOf(cancelled), unprocessed: true });
    expect(await readdir(dir)).toContain('unprocessed.csv');
    const created = [row(1, 'created', ['A', 'B', '', '', '', ''])];
    const files = await writeImportResults({ dir, headers: HEADERS, secretColumns: { cardNumber: [2], cvc: [3] }, rows: iterate(created), summary: summaryOf(created) });
    expect(files.unprocessed).toBeUndefined();
    expect((await readdir(dir)).sort()).toEqual(['errors.csv', 'results.csv', 'summary.json']);
  });
});
