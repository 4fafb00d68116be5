import { createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CsvFormatError, FileRejectedError } from '../../src/csv/errors.js';
import { MAX_RECORD_CHARS, openCsv, readHeaders, type CsvRow } from '../../src/csv/reader.js';
import { collect, tempFolder } from './files.js';

let temp: Awaited<ReturnType<typeof tempFolder>>;
beforeAll(async () => {
  temp = await tempFolder();
});
afterAll(async () => {
  await temp.remove();
});

async function readAll(name: string, content: string | Buffer): Promise<{ headers: string[]; rows: CsvRow[] }> {
  const csv = await openCsv(await temp.file(name, content));
  return { headers: csv.headers, rows: await collect(csv.rows) };
}

/** Expects `promise` to reject with a CsvFormatError, and returns it. */
async function formatError(promise: Promise<unknown>): Promise<CsvFormatError> {
  const err: unknown = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CsvFormatError);
  if (err instanceof CsvFormatError) return err;
  throw new Error('expected a CsvFormatError');
}

describe('openCsv', () => {
  it('reads a UTF-8 file with a BOM and CRLF line endings', async () => {
    const { headers, rows } = await readAll('bom.csv', '\uFEFFFirstName,LastName\r\nZoë,O\'Connor\r\nJürgen,Müller\r\n');
    expect(headers).toEqual(['FirstName', 'LastName']);
    expect(rows).toEqual([
      { row: 1, line: 2, sheetRow: 2, cells: ['Zoë', "O'Connor"] },
      { row: 2, line: 3, sheetRow: 3, cells: ['Jürgen', 'Müller'] },
    ]);
  });

  it('reads a file without a BOM, LF line endings and no final line break', async () => {
    const { headers, rows } = await readAll('nobom.csv', 'FirstName,LastName\nJoão,São Bento');
    expect(headers).toEqual(['FirstName', 'LastName']);
    expect(rows).toEqual([{ row: 1, line: 2, sheetRow: 2, cells: ['João', 'São Bento'] }]);
  });

  it('keeps accents, apostrophes and other scripts exactly', async () => {
    const names = ['Zoë', "O'Connor", 'Müller', 'São Paulo', 'Ñandú', '渡辺', 'Łódź', 'Ærøskøbing', "D'Angelo-Ruíz"];
    const { rows } = await readAll('scripts.csv', `Name\n${names.join('\n')}\n`);
    expect(rows.map((r) => r.cells[0])).toEqual(names);
  });

  it('follows RFC 4180 quoting: commas, doubled quotes, line breaks inside quotes', async () => {
    const content = [
      'Name,Address,Note',
      '"Smith, Jane","1 High St, Flat 2","She said ""hi"""',
      '"Multi","line one\r\nline two","x"',
      'Plain,"lf\nonly",y',
      'After,quoted,z',
      '',
    ].join('\r\n');
    const { rows } = await readAll('quotes.csv', content);
    expect(rows).toEqual([
      { row: 1, line: 2, sheetRow: 2, cells: ['Smith, Jane', '1 High St, Flat 2', 'She said "hi"'] },
      { row: 2, line: 3, sheetRow: 3, cells: ['Multi', 'line one\r\nline two', 'x'] },
      // A spreadsheet shows a record with line breaks inside quotes on one row.
      { row: 3, line: 5, sheetRow: 4, cells: ['Plain', 'lf\nonly', 'y'] },
      { row: 4, line: 7, sheetRow: 5, cells: ['After', 'quoted', 'z'] },
    ]);
  });

  it('accepts CRLF, LF and CR line endings mixed in one file', async () => {
    const { rows } = await readAll('mixed.csv', 'A,B\r\n1,2\n3,4\r5,6\r\n');
    expect(rows.map((r) => [r.line, ...r.cells])).toEqual([
      [2, '1', '2'],
      [3, '3', '4'],
      [4, '5', '6'],
    ]);
  });

  it('skips empty lines and all-blank records, numbering rows without them but lines and spreadsheet rows with them', async () => {
    const { rows } = await readAll('blanks.csv', 'A,B\n1,2\n\n3,4\n,\n  , \n5,6\n\n\n,\n');
    expect(rows).toEqual([
      { row: 1, line: 2, sheetRow: 2, cells: ['1', '2'] },
      { row: 2, line: 4, sheetRow: 4, cells: ['3', '4'] },
      { row: 3, line: 7, sheetRow: 7, cells: ['5', '6'] },
    ]);
  });

  it('yields a record whose cell count differs from the header (validation reports it)', async () => {
    const { rows } = await readAll('count.csv', 'A,B,C\n1,2\n1,2,3,4\n1,2,3\n');
    expect(rows.map((r) => r.cells.length)).toEqual([2, 4, 3]);
  });

  it('reads a header-only file as no rows', async () => {
    const { headers, rows } = await readAll('header-only.csv', 'A,B\r\n');
    expect(headers).toEqual(['A', 'B']);
    expect(rows).toEqual([]);
  });

  it('rejects an empty file: there is no header', async () => {
    const file = await temp.file('empty.csv', '\uFEFF\r\n\r\n');
    const err: unknown = await openCsv(file).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FileRejectedError);
    expect(String(err)).toContain('no header row');
  });

  it('throws CsvFormatError at the line where a record with an unclosed quote starts', async () => {
    const file = await temp.file('unclosed.csv', 'A,B\r\n1,2\r\n"x\r\ny",3\r\n4,"unclosed\r\n5,6\r\n');
    const csv = await openCsv(file);
    const seen: number[] = [];
    const err = await formatError(
      (async () => {
        for await (const row of csv.rows) seen.push(row.row);
      })(),
    );
    expect(seen).toEqual([1, 2]);
    expect(err.code).toBe('CSV_FORMAT');
    expect(err.file).toBe(file);
    expect(err.line).toBe(5);
    expect(err.reason).toMatch(/quote/i);
    expect(err.message).toContain(`${file}:5`);
  });

  it('throws CsvFormatError on a stray quote inside an unquoted cell', async () => {
    const file = await temp.file('stray.csv', 'A,B\n1,2\n3,ab"c\n');
    // The parser reads ahead: in a small file the fault surfaces from openCsv already.
    const err = await formatError(openCsv(file).then(async (csv) => collect(csv.rows)));
    expect(err.line).toBe(3);
  });

  it('throws CsvFormatError naming the line of bytes that are not UTF-8', async () => {
    const latin1 = Buffer.concat([Buffer.from('Name\nPlain\n'), Buffer.from('Zo\xeb\n', 'latin1')]);
    const file = await temp.file('latin1.csv', latin1);
    const err = await formatError(openCsv(file).then(async (csv) => collect(csv.rows)));
    expect(err.line).toBe(3);
    expect(err.reason).toContain('UTF-8');
  });

  it('refuses text misread from Windows-1252 deep in a large file at its line, the rows before it read', async () => {
    const lines = ['FirstName,LastName', ...Array.from({ length: 50_000 }, (_, i) => `Ana${i},"Silva\n${i}"`)];
    lines[40_000] = 'JOS\u0252S,X';
    const file = await temp.file('misread-deep.csv', `${lines.join('\n')}\n`);
    const csv = await openCsv(file);
    let last = 0;
    const err = await formatError(
      (async () => {
        for await (const row of csv.rows) last = row.row;
      })(),
    );
    // Each row before it takes two lines (a line break inside its quotes).
    expect(err.line).toBe(1 + 2 * 39_999 + 1);
    expect(err.reason).toContain('U+0252');
    expect(last).toBeGreaterThan(30_000);
    expect(last).toBeLessThan(40_000);
  });

  it('gives the same rows in batches, and the same failure deep in a large file', async () => {
    const lines = ['FirstName,LastName', ...Array.from({ length: 30_000 }, (_, i) => (i % 7 === 0 ? ',' : `Ana${i},"Silva\r\n${i}"`))];
    const file = await temp.file('batches.csv', `${lines.join('\r\n')}\r\n`);
    const one = await collect((await openCsv(file)).rows);
    const batches = await collect((await openCsv(file)).batches);
    expect(batches.length).toBeGreaterThan(1);
    expect(batches.flat()).toEqual(one);
    lines[25_000] = 'Ana,Sil"va';
    const bad = await temp.file('batches-bad.csv', `${lines.join('\r\n')}\r\n`);
    const csv = await openCsv(bad);
    let last = 0;
    const err = await formatError(
      (async () => {
        for await (const batch of csv.batches) for (const row of batch) last = row.row;
      })(),
    );
    // The line the replaced record starts on in the good file.
    const replaced = one.find((row) => row.cells[0] === 'Ana24999');
    expect(err.line).toBe(replaced?.line);
    expect(last).toBeLessThan(replaced?.row ?? 0);
  });

  it('throws CsvFormatError from a malformed header', async () => {
    await formatError(openCsv(await temp.file('bad-header.csv', '"A,B\n1,2\n')));
  });

  it('stops an unclosed quote from swallowing the rest of a large file', async () => {
    const filler = 'x'.repeat(100);
    const lines = ['A,B', '1,"never closed', ...Array.from({ length: (MAX_RECORD_CHARS / 100) * 2 }, () => filler)];
    const file = await temp.file('runaway.csv', lines.join('\n'));
    const err = await formatError(openCsv(file).then(async (csv) => collect(csv.rows)));
    expect(err.line).toBe(2);
    expect(err.reason).toMatch(/max record size/i);
  });

  it('surfaces a missing file as the file system error', async () => {
    await expect(openCsv(temp.path('missing.csv'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('closes when the loop breaks early', async () => {
    const csv = await openCsv(await temp.file('early.csv', `A\n${'1\n'.repeat(1000)}`));
    for await (const row of csv.rows) {
      if (row.row === 3) break;
    }
    // Iterating again yields nothing: the generator finished and the file is closed.
    expect(await collect(csv.rows)).toEqual([]);
    csv.close();
  });

  it('streams: 200,000 rows, the first yielded long before the file is read, lines right across chunks', async () => {
    const file = temp.path('large.csv');
    const total = 200_000;
    const out = createWriteStream(file);
    out.write('\uFEFFFirstName,LastName,AddressLine1,Note\r\n');
    for (let i = 1; i <= total; i++) {
      // Every 1000th row spans two lines, so line numbers must be counted across read chunks.
      const note = i % 1000 === 0 ? '"two\r\nlines"' : 'one';
      const line = `Zoë${i},"O'Connor",\"${i} Rue de l'Église, Apt ${i % 50}\",${note}\r\n`;
      if (!out.write(line)) await once(out, 'drain');
    }
    out.end();
    await once(out, 'finish');
    const { size } = await stat(file);

    const csv = await openCsv(file);
    let count = 0;
    let bytesAtFirstRow = -1;
    let bytesAtMiddleRow = -1;
    let last: CsvRow | undefined;
    for await (const row of csv.rows) {
      count += 1;
      if (row.row === 1) bytesAtFirstRow = csv.bytesRead;
      if (row.row === total / 2) bytesAtMiddleRow = csv.bytesRead;
      last = row;
    }
    expect(count).toBe(total);
    // The reader held at most a few read chunks, not the file.
    expect(bytesAtFirstRow).toBeGreaterThan(0);
    expect(bytesAtFirstRow).toBeLessThan(size / 10);
    expect(bytesAtMiddleRow).toBeLessThan(size);
    expect(last?.cells).toEqual([`Zoë${total}`, "O'Connor", `${total} Rue de l'Église, Apt 0`, 'two\r\nlines']);
    // Header on line 1, one line per row, plus one more for each two-line row before the last.
    expect(last?.line).toBe(1 + total + (total / 1000 - 1));
  });
});

describe('readHeaders', () => {
  it('reads only the header record', async () => {
    const file = await temp.file('headers.csv', '\uFEFF" FirstName ","Last, Name"\r\n1,2\r\n"unclosed\r\n');
    expect(await readHeaders(file)).toEqual([' FirstName ', 'Last, Name']);
  });
});
