import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { PASSWORD_MASK } from '../../src/secrets.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROW_STATUSES, type RowStatus } from '../../src/outcomes.js';
import { stringify } from 'csv-stringify/sync';
import {
  RESULT_COLUMNS,
  csvRecord,
  writeImportResults,
  type ImportSummary,
  type ResultRow,
  type SecretColumns,
} from '../../src/results/writeResults.js';

const HEADERS = ['Customer.FirstName', 'Customer.LastName', 'Customer.PhoneNumber', 'CreditCardInfo.AccountNumber', 'CreditCardInfo.CVCode', 'Note'];
const SECRETS: SecretColumns = { cardNumber: [3], cvc: [4] };
const NO_SECRETS: SecretColumns = { cardNumber: [], cvc: [] };

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'subsync-results-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function summaryOf(rows: readonly ResultRow[], overrides: Partial<ImportSummary> = {}): ImportSummary {
  const counts = Object.fromEntries(ROW_STATUSES.map((s) => [s, 0])) as Record<RowStatus, number>;
  for (const row of rows) counts[row.status] += 1;
  return {
    importId: 'imp-1',
    file: 'signups.csv',
    kind: 'signups',
    rows: rows.length,
    counts,
    startedAt: '2026-01-02T03:04:05.000Z',
    endedAt: '2026-01-02T03:04:07.000Z',
    durationMs: 2000,
    rowsPerSecond: rows.length / 2,
    apiCalls: 9,
    searches: 2,
    reads: 1,
    writes: 6,
    retries: 2,
    rateLimited: 1,
    ...overrides,
  };
}

function row(n: number, status: RowStatus, cells: string[], extra: Partial<ResultRow> = {}): ResultRow {
  return { row: n, cells, status, customerId: '', subscriptionId: '', paymentMethodKey: '', attempts: 1, error: '', ...extra };
}

async function* iterate<T>(items: readonly T[]): AsyncGenerator<T> {
  for (const item of items) yield item;
}

const readCsv = async (file: string): Promise<string[][]> => parse(await readFile(file, 'utf8'), { relax_column_count: false, bom: true });

const ROWS: ResultRow[] = [
  row(1, 'signed-up', ['Jean', 'Dupont, Jr.', '+33612345678', '************1111', '', 'said "hi"'], {
    customerId: '1001',
    subscriptionId: '2001',
    paymentMethodKey: '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01',
    attempts: 2,
  }),
  row(2, 'invalid', ['Zoë', 'Åström', '=1+1', '4111111111111111', '737', 'line one\nline two'], {
    attempts: 0,
    error: 'row 2, CreditCardInfo.ExpirationDate: in the past',
  }),
  row(3, 'reconciled', ['李', '小龙', '-5', '4111 1111 1111 1111', '123', 'cr\ronly'], { customerId: '1003', attempts: 3 }),
  row(4, 'failed', ['Ann', "O'Neil", '', '************4444', '', ''], { attempts: 8, error: 'API: Offer "GOLD" is not active, "sorry"' }),
  row(5, 'needs-review', ['Bob', 'Smith', '@home', '', '', ''], { attempts: 4, error: 'candidates: 1005, 1006' }),
  row(6, 'created', ['Al', 'Short'], { customerId: '1007' }),
];

describe('writeImportResults', () => {
  it('writes results.csv, errors.csv and summary.json that parse back', async () => {
    const dir = path.join(root, 'results', 'imp-1');
    const summary = summaryOf(ROWS);
    const files = await writeImportResults({ dir, headers: HEADERS, secretColumns: SECRETS, rows: iterate(ROWS), summary });
    expect(files).toEqual({
      dir,
      results: path.join(dir, 'results.csv'),
      errors: path.join(dir, 'errors.csv'),
      summary: path.join(dir, 'summary.json'),
    });
    expect((await readdir(dir)).sort()).toEqual(['errors.csv', 'results.csv', 'summary.json']);

    const results = await readCsv(files.results);
    expect(results[0]).toEqual([...HEADERS, ...RESULT_COLUMNS]);
    expect(results.slice(1)).toEqual([
      ['Jean', 'Dupont, Jr.', "'+33612345678", '************1111', '', 'said "hi"', '1', 'signed-up', '1001', '2001', '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01', '2', ''],
      ['Zoë', 'Åström', "'=1+1", '************1111', '', 'line one\nline two', '2', 'invalid', '', '', '', '0', 'row 2, CreditCardInfo.ExpirationDate: in the past'],
      ['李', '小龙', "'-5", '************1111', '', 'cr\ronly', '3', 'reconciled', '1003', '', '', '3', ''],
      ['Ann', "O'Neil", '', '************4444', '', '', '4', 'failed', '', '', '', '8', 'API: Offer "GOLD" is not active, "sorry"'],
      ['Bob', 'Smith', "'@home", '', '', '', '5', 'needs-review', '', '', '', '4', 'candidates: 1005, 1006'],
      ['Al', 'Short', '', '', '', '', '6', 'created', '1007', '', '', '1', ''],
    ]);

    const errors = await readCsv(files.errors);
    expect(errors).toEqual([
      [...HEADERS, '_error'],
      ['Zoë', 'Åström', "'=1+1", '************1111', '', 'line one\nline two', 'row 2, CreditCardInfo.ExpirationDate: in the past'],
      ['Ann', "O'Neil", '', '************4444', '', '', 'API: Offer "GOLD" is not active, "sorry"'],
      ['Bob', 'Smith', "'@home", '', '', '', 'candidates: 1005, 1006'],
    ]);

    const summaryText = await readFile(files.summary, 'utf8');
    expect(JSON.parse(summaryText)).toEqual(summary);
    expect(summaryText).toContain('\n  "importId"');
  });

  it('formats a record with the same bytes as csv-stringify quoting only where needed (the formatter is its own, for speed)', () => {
    const records = [
      ['plain', '', 'a,b', 'say "hi"', 'line\nbreak', 'lone\rCR', 'crlf\r\n', ' spaced ', '=1+1', 'Zoë Åström', '"', ',', '""'],
      ['', '', ''],
      ['only'],
    ];
    // The options the result files were written with through csv-stringify (a lone CR quoted too).
    const expected = stringify(records, { bom: false, record_delimiter: 'unix', quote_record_delimiter: true, quoted: false, escape_formulas: false, eof: true });
    expect(records.map(csvRecord).join('')).toBe(expected);
  });

  it('writes UTF-8 with a BOM, LF line ends, quoting only where needed, every cell formula-escaped', async () => {
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: iterate(ROWS), summary: summaryOf(ROWS) });
    for (const file of [files.results, files.errors]) {
      expect((await readFile(file)).subarray(0, 3)).toEqual(Buffer.from([0xef, 0xbb, 0xbf]));
    }
    const text = (await readFile(files.errors)).toString('utf8');
    expect(text.startsWith('\uFEFFCustomer.FirstName,Customer.LastName,')).toBe(true);
    expect(text).not.toContain('\r\n');
    expect(text).toContain(`Zoë,Åström,'=1+1,************1111,,"line one\nline two",`);
    expect(text).toContain('"API: Offer ""GOLD"" is not active, ""sorry"""');
    expect(text).toContain("'@home");
    expect((await readFile(files.results, 'utf8')).split('\n')[1]).toBe(
      `Jean,"Dupont, Jr.",'+33612345678,************1111,,"said ""hi""",1,signed-up,1001,2001,6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01,2,`,
    );
  });

  it('writes no BOM when told not to (machine consumers)', async () => {
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: iterate(ROWS), summary: summaryOf(ROWS), bom: false });
    for (const file of [files.results, files.errors]) {
      expect((await readFile(file, 'utf8')).startsWith('Customer.FirstName,')).toBe(true);
    }
  });

  it('masks card numbers and empties CVCs even when the caller passed them in clear', async () => {
    const card = '5555555555554444';
    const rows = [
      row(1, 'failed', ['A', 'B', '', card, '1234', ''], { error: 'refused' }),
      row(2, 'created', ['C', 'D', '', ` ${card} `, '999', '']),
      row(3, 'invalid', ['E', 'F', '', '12345', '', ''], { error: 'too short' }),
    ];
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: iterate(rows), summary: summaryOf(rows) });
    for (const file of [files.results, files.errors]) {
      const text = await readFile(file, 'utf8');
      expect(text).not.toContain(card);
      expect(text).not.toContain('1234,');
      expect(text).not.toContain('999');
    }
    const results = await readCsv(files.results);
    expect(results.slice(1).map((cells) => [cells[3], cells[4]])).toEqual([
      ['************4444', ''],
      ['************4444', ''],
      ['*2345', ''],
    ]);
    const errors = await readCsv(files.errors);
    expect(errors.slice(1).map((cells) => [cells[3], cells[4]])).toEqual([
      ['************4444', ''],
      ['*2345', ''],
    ]);
  });

  it('writes a password as ******** (an empty one empty)', async () => {
    const rows = [
      row(1, 'failed', ['A', 'B', '', '', '', 'hunter2'], { error: 'refused' }),
      row(2, 'created', ['C', 'D', '', '', '', '']),
    ];
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: { ...NO_SECRETS, password: [5] }, rows: iterate(rows), summary: summaryOf(rows) });
    for (const file of [files.results, files.errors]) expect(await readFile(file, 'utf8')).not.toContain('hunter2');
    expect((await readCsv(files.results)).slice(1).map((cells) => cells[5])).toEqual([PASSWORD_MASK, '']);
  });

  it('refuses secret column indexes outside the headers before writing anything', async () => {
    const dir = path.join(root, 'never');
    await expect(
      writeImportResults({ dir, headers: HEADERS, secretColumns: { cardNumber: [6], cvc: [] }, rows: iterate(ROWS), summary: summaryOf(ROWS) }),
    ).rejects.toThrow(RangeError);
    await expect(readdir(dir)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('leaves no result files and no temp files when the rows fail midway', async () => {
    async function* failing(): AsyncGenerator<ResultRow> {
      for (let n = 1; n <= 5000; n++) {
        if (n === 4000) throw new Error('ledger read failed');
        yield row(n, n % 3 === 0 ? 'failed' : 'created', ['x'.repeat(50), String(n), '', '', '', ''], { error: n % 3 === 0 ? 'no' : '' });
      }
    }
    await expect(
      writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: failing(), summary: summaryOf([]) }),
    ).rejects.toThrow('ledger read failed');
    expect(await readdir(root)).toEqual([]);
  });

  it('keeps the previous complete set when a rewrite fails', async () => {
    const first = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: iterate(ROWS), summary: summaryOf(ROWS) });
    const before = await Promise.all([first.results, first.errors, first.summary].map((file) => readFile(file, 'utf8')));
    async function* failing(): AsyncGenerator<ResultRow> {
      yield row(1, 'created', ['a', 'b', '', '', '', '']);
      throw new Error('boom');
    }
    await expect(
      writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: failing(), summary: summaryOf([]) }),
    ).rejects.toThrow('boom');
    expect((await readdir(root)).sort()).toEqual(['errors.csv', 'results.csv', 'summary.json']);
    const after = await Promise.all([first.results, first.errors, first.summary].map((file) => readFile(file, 'utf8')));
    expect(after).toEqual(before);
  });

  it('removes its temp files when a rename fails', async () => {
    await mkdir(path.join(root, 'errors.csv', 'in-the-way'), { recursive: true });
    const rows = [row(1, 'failed', ['a', 'b', '', '', '', ''], { error: 'no' })];
    await expect(
      writeImportResults({ dir: root, headers: HEADERS, secretColumns: NO_SECRETS, rows: iterate(rows), summary: summaryOf(rows) }),
    ).rejects.toMatchObject({ syscall: 'rename' });
    const left = await readdir(root);
    expect(left.filter((name) => name.endsWith('.tmp'))).toEqual([]);
    // Without summary.json, nobody takes the partial set for a finished one.
    expect(left).not.toContain('summary.json');
  });

  it('replaces an earlier set and writes into an existing directory', async () => {
    await writeFile(path.join(root, 'results.csv'), 'stale\n');
    const rows = [row(1, 'created', ['a', 'b', '', '', '', ''])];
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: NO_SECRETS, rows: iterate(rows), summary: summaryOf(rows) });
    expect(await readCsv(files.results)).toHaveLength(2);
    expect(await readCsv(files.errors)).toEqual([[...HEADERS, '_error']]);
    expect((await readdir(root)).sort()).toEqual(['errors.csv', 'results.csv', 'summary.json']);
  });

  it('keeps every character of records that cross the write chunks, one longer than a chunk among them', async () => {
    // Three-byte and four-byte characters, so a record's bytes outnumber its characters, and a cell of
    // 100,000 characters (about 300 KB), bigger than any chunk the writer gathers before writing.
    const rows = Array.from({ length: 3_000 }, (_, i) =>
      row(i + 1, i % 7 === 0 ? 'failed' : 'created', [`Zoë ${i}`, `€${'ł'.repeat(i % 50)}😀`, '', '', '', i === 1_500 ? '€'.repeat(100_000) : `note ${i}`], {
        error: i % 7 === 0 ? `refused ${'ß'.repeat(i % 30)}` : '',
      }),
    );
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: NO_SECRETS, rows: iterate(rows), summary: summaryOf(rows) });
    const results = await readCsv(files.results);
    expect(results.slice(1).map((record) => record.slice(0, HEADERS.length))).toEqual(rows.map((r) => r.cells));
    expect(results[1_501]?.[5]).toHaveLength(100_000);
    const errors = await readCsv(files.errors);
    expect(errors.slice(1).map((record) => record.at(-1))).toEqual(rows.filter((r) => r.status === 'failed').map((r) => r.error));
  });

  it('streams 100,000 rows', async () => {
    const total = 100_000;
    async function* many(): AsyncGenerator<ResultRow> {
      for (let n = 1; n <= total; n++) {
        yield row(n, n % 10 === 0 ? 'failed' : 'created', [`First ${n}`, `Last, ${n}`, '+331234', '************1111', '', 'multi\nline'], {
          customerId: String(n),
          error: n % 10 === 0 ? 'API refused' : '',
        });
      }
    }
    const files = await writeImportResults({ dir: root, headers: HEADERS, secretColumns: SECRETS, rows: many(), summary: summaryOf([], { rows: total }) });
    // Each record holds one quoted newline: two physical lines per record.
    expect(await countLines(files.results)).toBe(1 + total * 2);
    expect(await countLines(files.errors)).toBe(1 + (total / 10) * 2);
    expect((await readdir(root)).sort()).toEqual(['errors.csv', 'results.csv', 'summary.json']);
  });
});

async function countLines(file: string): Promise<number> {
  let lines = 0;
  for await (const chunk of createReadStream(file)) {
    if (!Buffer.isBuffer(chunk)) throw new Error('expected bytes');
    for (const byte of chunk) if (byte === 0x0a) lines += 1;
  }
  return lines;
}
