import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { parse } from 'csv-parse/sync';
import { stringify } from 'csv-stringify/sync';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CUSTOMER_FIELDS, CustomerSchema, type Customer } from '../../src/api/schemas/index.js';
import { chooseBase, formatPage, openExportFile, pruneExports, writeExportFile } from '../../src/export/writer.js';
import { escapeFormula } from '../../src/results/formula.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-export-writer-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function customer(id: number, fields: Partial<Customer> = {}): Customer {
  const blank = Object.fromEntries(CUSTOMER_FIELDS.map((f) => [f, ''])) as Record<string, string>;
  return CustomerSchema.parse({ ...blank, CustomerID: String(id), CollectionMethod: 'Invoice', FirstName: `First${id}`, LastName: `Last${id}`, MobileNumber: null, ...fields });
}

async function* each<T>(items: readonly T[]): AsyncGenerator<T> {
  yield* items;
}

const TRICKY: Customer[] = [
  customer(1, { FirstName: 'Zoë "Zed"', LastName: "O'Connor, Jr.", City: 'São Paulo', MobileNumber: '+33 6 12 34 56 78' }),
  customer(2, { AddressLine1: 'line one\nline two', AddressLine2: 'carriage\rreturn', Company: 'Crème, Brûlée & Co', WebPageURL: 'https://例え.jp/パス' }),
  customer(3, { FirstName: '=HYPERLINK("http://evil")', LastName: '@SUM(A1)', Title: '-2+3', Company: '\tTabbed', EmailAddress: 'ok@example.com', MobileNumber: '' }),
  customer(4, { FirstName: 'Łucja 🎉', LastName: '\u0000nul', Password: 'secret-never-exported', HomeNumber: '\n=1' }),
];

const CsvRowsSchema = z.array(z.array(z.string()));

describe('writeExportFile', () => {
  it('writes CSV with every field, CustomerID first, every cell quoted and formula-escaped, Password empty', async () => {
    const written = await writeExportFile({ dir, name: 'customers-x.csv', format: 'csv', gzip: false, records: each(TRICKY) });
    expect(written.count).toBe(TRICKY.length);
    const withBom = await readFile(written.path, 'utf8');
    // A BOM first, so that a spreadsheet reads the file as UTF-8.
    expect(withBom.startsWith('\uFEFF"CustomerID",')).toBe(true);
    const text = withBom.slice(1);
    const rows = CsvRowsSchema.parse(parse(text, { relax_quotes: false }));
    expect(rows[0]).toEqual([...CUSTOMER_FIELDS]);
    expect(rows[0]?.[0]).toBe('CustomerID');
    TRICKY.forEach((c, i) => {
      const expected = CUSTOMER_FIELDS.map((f) => (f === 'Password' ? '' : escapeFormula(c[f] ?? '')));
      expect(rows[i + 1]).toEqual(expected);
    });
    // Every cell quoted, empty ones too: each record's cells are all "…".
    const records = z.array(z.object({ raw: z.string() })).parse(parse(text, { raw: true }));
    for (const { raw } of records) {
      const cells = CsvRowsSchema.parse(parse(raw))[0] ?? [];
      expect(raw.trimEnd().split('","').length).toBe(cells.length);
      expect(raw.startsWith('"')).toBe(true);
    }
    expect(text).not.toContain('secret-never-exported');
  });

  it.each([
    ['FirstName', '=1+1'],
    ['LastName', '+1'],
    ['Company', '-1'],
    ['EmailAddress', '@x'],
    ['City', '\tcity'],
    ['AddressLine1', '\rstreet'],
    ['AddressLine2', '\nstreet'],
    ['WebPageURL', '\0url'],
    ['MobileNumber', '+44 20 7946 0958'],
  ] as const)('escapes a %s that begins with a formula trigger (%j) in CSV, and keeps it as is in JSONL', async (field, value) => {
    const c = customer(7, { [field]: value });
    const csv = await writeExportFile({ dir, name: 'c.csv', format: 'csv', gzip: false, records: each([c]) });
    const rows = CsvRowsSchema.parse(parse(await readFile(csv.path, 'utf8'), { bom: true }));
    expect(rows[1]?.[CUSTOMER_FIELDS.indexOf(field)]).toBe(`'${value}`);
    const jsonl = await writeExportFile({ dir, name: 'c.jsonl', format: 'jsonl', gzip: false, records: each([c]) });
    expect(JSON.parse((await readFile(jsonl.path, 'utf8')).trim())[field]).toBe(value);
  });

  it('writes JSONL with the same fields in the same order, values as given (null kept), Password empty', async () => {
    const written = await writeExportFile({ dir, name: 'customers-x.jsonl', format: 'jsonl', gzip: false, records: each(TRICKY) });
    const lines = (await readFile(written.path, 'utf8')).split('\n');
    expect(lines.pop()).toBe('');
    const objects = lines.map((line) => z.record(z.string(), z.unknown()).parse(JSON.parse(line)));
    objects.forEach((o, i) => {
      expect(Object.keys(o)).toEqual([...CUSTOMER_FIELDS]);
      expect(o).toEqual({ ...TRICKY[i], Password: '' });
    });
    expect(objects[0]?.MobileNumber).toBe('+33 6 12 34 56 78');
    expect(objects[1]?.MobileNumber).toBeNull();
  });

  it('gzips, and the sha256 is of the bytes on disk', async () => {
    const plain = await writeExportFile({ dir, name: 'a.csv', format: 'csv', gzip: false, records: each(TRICKY) });
    const gz = await writeExportFile({ dir, name: 'a.csv.gz', format: 'csv', gzip: true, records: each(TRICKY) });
    const gzBytes = await readFile(gz.path);
    expect(gunzipSync(gzBytes).toString('utf8')).toBe(await readFile(plain.path, 'utf8'));
    expect(gz.sha256).toBe(createHash('sha256').update(gzBytes).digest('hex'));
    expect(gz.bytes).toBe(gzBytes.length);
    expect(plain.sha256).toBe(createHash('sha256').update(await readFile(plain.path)).digest('hex'));
  });

  it('writes the same bytes as csv-stringify with every cell quoted (the formatter is its own, for speed)', async () => {
    const written = await writeExportFile({ dir, name: 'same.csv', format: 'csv', gzip: false, records: each(TRICKY) });
    const cells = TRICKY.map((c) => CUSTOMER_FIELDS.map((f) => (f === 'Password' ? '' : escapeFormula(c[f] ?? ''))));
    const expected = stringify([[...CUSTOMER_FIELDS], ...cells], { bom: true, record_delimiter: 'unix', quoted: true, quoted_empty: true, escape_formulas: false, eof: true });
    expect(await readFile(written.path, 'utf8')).toBe(expected);
    const machine = await writeExportFile({ dir, name: 'machine.csv', format: 'csv', gzip: false, records: each(TRICKY), bom: false });
    expect(await readFile(machine.path, 'utf8')).toBe(expected.slice(1));
  });

  it('takes pages of formatted rows as they come: the file is the header and the pages in the order written', async () => {
    const sink = await openExportFile({ dir, name: 'pages.csv', format: 'csv', gzip: true });
    const first = formatPage('csv', TRICKY.slice(0, 3));
    const second = formatPage('csv', TRICKY.slice(3));
    expect(first.ids).toEqual(['1', '2', '3']);
    await sink.write(Buffer.from(first.rows.join('')), 3);
    await sink.write(second.rows.join(''), 1);
    const paged = await sink.finish();
    const whole = await writeExportFile({ dir, name: 'whole.csv', format: 'csv', gzip: false, records: each(TRICKY) });
    expect(paged.count).toBe(4);
    expect(gunzipSync(await readFile(paged.path)).toString('utf8')).toBe(await readFile(whole.path, 'utf8'));

    const dropped = await openExportFile({ dir, name: 'dropped.csv', format: 'csv', gzip: false });
    await dropped.write(first.rows.join(''), 3);
    await dropped.abort();
    await dropped.abort();
    expect((await readdir(dir)).sort()).toEqual(['pages.csv', 'whole.csv']);
  });

  it('leaves no temp file and no target when the records fail', async () => {
    async function* failing(): AsyncGenerator<Customer> {
      yield customer(1);
      throw new Error('spool unreadable');
    }
    await expect(writeExportFile({ dir, name: 'b.csv', format: 'csv', gzip: false, records: failing() })).rejects.toThrow('spool unreadable');
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('pruneExports and chooseBase', () => {
  it('keeps the newest N exports (the current one counted), data file and manifest together, and nothing else is touched', async () => {
    const names = [
      'customers-20250101T020000Z.csv',
      'customers-20250101T020000Z.manifest.json',
      'customers-20250102T020000Z.jsonl.gz',
      'customers-20250102T020000Z.manifest.json',
      'customers-20250103T020000Z.csv.gz',
      'customers-20250103T020000Z.manifest.json',
      'customers-20250104T020000Z.csv',
      'customers-20250104T020000Z.manifest.json',
      'notes.txt',
      'customers-old-backup.csv',
    ];
    for (const name of names) await writeFile(path.join(dir, name), 'x');
    const removed = await pruneExports(dir, 2, 'customers-20250104T020000Z');
    expect(removed).toEqual([
      'customers-20250101T020000Z.csv',
      'customers-20250101T020000Z.manifest.json',
      'customers-20250102T020000Z.jsonl.gz',
      'customers-20250102T020000Z.manifest.json',
    ]);
    expect((await readdir(dir)).sort()).toEqual(
      ['customers-20250103T020000Z.csv.gz', 'customers-20250103T020000Z.manifest.json', 'customers-20250104T020000Z.csv', 'customers-20250104T020000Z.manifest.json', 'notes.txt', 'customers-old-backup.csv'].sort(),
    );
  });

  it('names an export after its start, with its id when another took that second', async () => {
    expect(await chooseBase(dir, '20250101T020000Z', 'export-1')).toBe('customers-20250101T020000Z');
    await writeFile(path.join(dir, 'customers-20250101T020000Z.manifest.json'), '{}');
    expect(await chooseBase(dir, '20250101T020000Z', 'export-1')).toBe('customers-20250101T020000Z-export-1');
    expect(await chooseBase(dir, '20250101T030000Z', 'export-2', async () => false)).toBe('customers-20250101T030000Z-export-2');
  });
});
