import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeCustomersCsv } from '../../bench/make-customers.js';
import { detectKind, planColumns } from '../../src/csv/columns.js';
import { openCsv } from '../../src/csv/reader.js';
import { validateRow } from '../../src/csv/rows.js';
import { tempFolder } from '../csv/files.js';

let temp: Awaited<ReturnType<typeof tempFolder>>;
beforeAll(async () => {
  temp = await tempFolder();
});
afterAll(async () => {
  await temp.remove();
});

describe('bench/make-customers', () => {
  it('writes valid, quoted, accented customers, every LastName tagged', async () => {
    const file = temp.path('tagged.csv');
    await writeCustomersCsv(file, 500, { uniqueTag: 'run42' });
    const csv = await openCsv(file);
    const kind = detectKind({ file, headers: csv.headers });
    const plan = planColumns({ file, kind, headers: csv.headers });
    let rows = 0;
    let quotedAddresses = 0;
    for await (const row of csv.rows) {
      rows += 1;
      expect(validateRow(plan, row, { expiryFormat: 'MMYY' })).toEqual([]);
      expect(row.cells[1]).toMatch(/-run42$/);
      if (row.cells[3]?.includes(',')) quotedAddresses += 1;
    }
    expect(kind).toBe('customers');
    expect(rows).toBe(500);
    expect(quotedAddresses).toBe(500);
    const text = await readFile(file, 'utf8');
    expect(text).toMatch(/[À-ž]/);
    expect(text).toContain("'");
  });

  it('is deterministic given its arguments', async () => {
    await writeCustomersCsv(temp.path('a.csv'), 200);
    await writeCustomersCsv(temp.path('b.csv'), 200);
    await writeCustomersCsv(temp.path('c.csv'), 200, { uniqueTag: 'x1' });
    const [a, b, c] = await Promise.all(['a.csv', 'b.csv', 'c.csv'].map((name) => readFile(temp.path(name), 'utf8')));
    expect(a).toBe(b);
    expect(c).not.toBe(a);
  });
});
