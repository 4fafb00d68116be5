/**
 * Files as spreadsheets and other tools write them, each fixture written as
 * bytes: read (openCsv), planned (planColumns) and validated (validateRow)
 * as the producer does, without Redis.
 */
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Customer } from '../../src/api/schemas/index.js';
import { CUSTOMER_FIELDS } from '../../src/api/schemas/index.js';
import { planColumns, type ColumnMap, type ColumnPlan } from '../../src/csv/columns.js';
import { CsvFormatError, FileRejectedError } from '../../src/csv/errors.js';
import { openCsv, type CsvRow, type ReadOptions } from '../../src/csv/reader.js';
import { buildCardUpdate, buildCustomerInput, buildSignupRequest, cellOf, validateRow, type RowError, type RowOptions } from '../../src/csv/rows.js';
import { scanCsvBytes, showsRounding } from '../../src/csv/scan.js';
import { writeExportFile } from '../../src/export/writer.js';
import { ROW_STATUSES, type ImportKind, type RowStatus } from '../../src/outcomes.js';
import { writeImportResults, type ImportSummary, type ResultRow } from '../../src/results/writeResults.js';
import { collect, tempFolder } from './files.js';

let temp: Awaited<ReturnType<typeof tempFolder>>;
beforeAll(async () => {
  temp = await tempFolder();
});
afterAll(async () => {
  await temp.remove();
});

const NOW = new Date('2026-11-22T00:00:00Z');
const OPTIONS: RowOptions = { expiryFormat: 'MMYY', now: NOW };
const KEY = '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01';
const VISA = '4012888888881881';
const AMEX = '378282246310005';

interface Read {
  file: string;
  headers: string[];
  plan: ColumnPlan;
  rows: CsvRow[];
  errors: RowError[];
}

/** Reads, plans and validates a file as the producer does. */
async function importRows(
  name: string,
  content: string | Buffer,
  kind: ImportKind,
  options: { read?: ReadOptions; map?: ColumnMap; row?: RowOptions } = {},
): Promise<Read> {
  const file = await temp.file(name, content);
  const csv = await openCsv(file, { ...options.read, map: options.map });
  const plan = planColumns({ file, kind, headers: csv.headers, map: options.map });
  const rows = await collect(csv.rows);
  const errors = rows.flatMap((row) => validateRow(plan, row, options.row ?? OPTIONS));
  return { file, headers: csv.headers, plan, rows, errors };
}

/** The error `promise` rejects with, checked to be of `type`. */
async function rejection<T>(promise: Promise<unknown>, type: new (...args: never[]) => T): Promise<T> {
  const err: unknown = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(type);
  if (err instanceof type) return err;
  throw new Error(`expected a ${type.name}`);
}

const readError = async (name: string, content: string | Buffer, read: ReadOptions = {}): Promise<CsvFormatError> =>
  rejection(temp.file(name, content).then(async (file) => collect((await openCsv(file, read)).rows)), CsvFormatError);

const latin1 = (text: string): Buffer => Buffer.from(text, 'latin1');
const utf16le = (text: string): Buffer => Buffer.from(text, 'utf16le');
/** Mac Roman bytes of the few letters the fixtures use. */
const MAC_ROMAN: Readonly<Record<string, number>> = { ë: 0x91, ü: 0x9f, é: 0x8e, ø: 0xbf, Ö: 0x85 };
const macRoman = (text: string): Buffer => Buffer.from([...text].map((char) => MAC_ROMAN[char] ?? char.charCodeAt(0)));

describe('1. round trips: subsync\'s own files import back to their values', () => {
  const customer = (overrides: Partial<Customer>): Customer => ({
    ...(Object.fromEntries(CUSTOMER_FIELDS.map((field) => [field, ''])) as Customer),
    CustomerID: '100001',
    FirstName: 'Zoë',
    LastName: '=Smith',
    MobileNumber: '+44 20 7946 0958',
    CollectionMethod: 'Invoice',
    ...overrides,
  });

  it('an export dropped back as a customers update file: the formula escape undone, CollectionMethod ignored without a map', async () => {
    const written = await writeExportFile({
      dir: temp.path('exports'),
      name: 'customers-x.csv',
      format: 'csv',
      gzip: false,
      records: (async function* () {
        yield customer({ Company: '-minus', AddressLine1: '@home', City: "'quoted" });
      })(),
    });
    const { plan, rows, errors } = await importRows('export.csv', await readFile(written.path), 'customers');
    expect(errors).toEqual([]);
    expect(plan.paths[plan.headers.indexOf('CollectionMethod')]).toBe('');
    const [row] = rows;
    if (!row) throw new Error('no row');
    expect(row.cells[plan.headers.indexOf('MobileNumber')]).toBe("'+44 20 7946 0958");
    const body = buildCustomerInput(plan, row.cells);
    expect(body).toMatchObject({
      FirstName: 'Zoë',
      LastName: '=Smith',
      MobileNumber: '+44 20 7946 0958',
      Company: '-minus',
      AddressLine1: '@home',
      // Only a `'` before a formula trigger is the escape; this one is the operator's.
      City: "'quoted",
    });
    expect(cellOf(plan, row.cells, 'CustomerID')).toBe('100001');
  });

  it('errors.csv and results.csv, formula-escaped on disk, import back to the operator\'s values', async () => {
    const headers = ['Customer.FirstName', 'Customer.LastName', 'Customer.MobileNumber', 'CreditCardInfo.AccountNumber', 'CreditCardInfo.ExpirationDate', 'Subscription.OfferCode'];
    const rows: ResultRow[] = [
      { row: 1, cells: ['=Ann', '-Lee', '+33 6 12 34 56 78', '************1111', '1230', 'GOLD'], status: 'failed', customerId: '', subscriptionId: '', paymentMethodKey: '', attempts: 8, error: '=refused' },
    ];
    const summary: ImportSummary = {
      importId: 'x', file: 'in.csv', kind: 'signups', rows: 1,
      counts: { ...(Object.fromEntries(ROW_STATUSES.map((s) => [s, 0])) as Record<RowStatus, number>), failed: 1 },
      startedAt: '', endedAt: '', durationMs: 0, rowsPerSecond: 0, apiCalls: 0, searches: 0, reads: 0, writes: 0, retries: 0, rateLimited: 0,
    };
    const files = await writeImportResults({
      dir: temp.path('results'), headers, secretColumns: { cardNumber: [3], cvc: [] },
      rows: (async function* () {
        yield* rows;
      })(),
      summary,
    });
    const onDisk = await readFile(files.errors, 'utf8');
    expect(onDisk).toContain("'=Ann,'-Lee,'+33 6 12 34 56 78,");
    for (const file of [files.errors, files.results]) {
      const read = await importRows('again.csv', await readFile(file), 'signups');
      const [row] = read.rows;
      if (!row) throw new Error('no row');
      const body = buildSignupRequest(read.plan, row.cells, OPTIONS);
      expect(body.Customer).toMatchObject({ FirstName: '=Ann', LastName: '-Lee', MobileNumber: '+33 6 12 34 56 78' });
      expect(body.Subscription.OfferCode).toBe('GOLD');
    }
  });
});

describe('2. text misdecoded by a spreadsheet is refused row by row', () => {
  it('names the cell, what happened and how to save correctly', async () => {
    const { errors } = await importRows('mojibake.csv', 'FirstName,LastName,Company\r\nZoÃ«,MÃ¼ller,Oâ€™Brien Ltd\r\nZoë,Müller,O’Brien Ltd\r\n', 'customers');
    expect(errors.map((e) => [e.row, e.column, e.rule])).toEqual([
      [1, 'FirstName', 'misdecoded-text'],
      [1, 'LastName', 'misdecoded-text'],
      [1, 'Company', 'misdecoded-text'],
    ]);
    expect(errors[0]?.message).toBe(
      'row 1 (spreadsheet row 2, line 2), column "FirstName": "ZoÃ«" looks like UTF-8 text read as Windows-1252 and saved again ("Ã«" was "ë"): ' +
        'open the original file as UTF-8 (Excel: Data > From Text/CSV, File Origin "65001: Unicode (UTF-8)") and save it as "CSV UTF-8" ' +
        '(if it is meant as written, import with --accept-misdecoded-text) (rule: misdecoded-text)',
    );
    expect(errors[2]?.message).toContain('("â€™" was "’")');
  });

  it('never quotes a password: a Password cell is not checked', async () => {
    const { errors } = await importRows('password.csv', 'FirstName,LastName,Password\nZoë,Müller,sÃ©cret\n', 'customers');
    expect(errors).toEqual([]);
  });

  it('takes it as written when the operator says it is meant', async () => {
    const { errors } = await importRows('meant.csv', 'FirstName,LastName\nZoÃ«,Müller\n', 'customers', { row: { ...OPTIONS, acceptMisdecodedText: true } });
    expect(errors).toEqual([]);
  });

  it('leaves accented names alone', async () => {
    const names = ['Zoë', 'Müller', 'São Paulo', 'Ærøskøbing', 'Ñandú', 'ÀÉÎÕÜ', 'Ãngela', 'Łódź', 'Ștefan', 'Ōtani', 'Đorđe', 'Þóra'];
    const { errors } = await importRows('names.csv', `FirstName,LastName\n${names.map((name) => `${name},X`).join('\n')}\n`, 'customers');
    expect(errors).toEqual([]);
  });
});

describe('3. encodings are decided on the whole file', () => {
  it('refuses Windows-1252 naming it, the line, and the fix', async () => {
    const err = await readError('cp1252.csv', latin1('FirstName,LastName\r\nAda,Lovelace\r\nZoë,Müller\r\n'));
    expect(err.line).toBe(3);
    expect(err.reason).toBe(
      'the file is not UTF-8: it looks like Windows-1252 (bytes that are not UTF-8 text, e.g. accented letters saved by an older program); ' +
        'save it as UTF-8 (Excel: Save As > "CSV UTF-8 (Comma delimited)"; LibreOffice: Save As > Text CSV, Character set "Unicode (UTF-8)"; ' +
        'Numbers: Export To > CSV, Text Encoding "Unicode (UTF-8)") and drop it in again, or read it as it is with --encoding windows-1252',
    );
  });

  it('refuses Mac Roman naming it, and reads it with --encoding macintosh', async () => {
    const bytes = macRoman('FirstName,LastName\rZoë,Müller\rSøren,Öst\r');
    const err = await readError('macroman.csv', bytes);
    expect(err.line).toBe(2);
    expect(err.reason).toContain('it looks like Mac Roman');
    expect(err.reason).toContain('--encoding macintosh');
    const { rows, errors } = await importRows('macroman-ok.csv', bytes, 'customers', { read: { encoding: 'macintosh' } });
    expect(errors).toEqual([]);
    expect(rows.map((r) => r.cells)).toEqual([
      ['Zoë', 'Müller'],
      ['Søren', 'Öst'],
    ]);
  });

  it('reads Windows-1252 with --encoding windows-1252, a bad byte past the first read chunk refused at its line', async () => {
    const { rows } = await importRows('cp1252-ok.csv', latin1('FirstName,LastName\r\nZoë,Müller\r\n'), 'customers', { read: { encoding: 'windows-1252' } });
    expect(rows[0]?.cells).toEqual(['Zoë', 'Müller']);
    const filler = Array.from({ length: 5000 }, (_, i) => `Ada${i},Lovelace`).join('\r\n');
    const err = await readError('late.csv', Buffer.concat([Buffer.from(`FirstName,LastName\r\n${filler}\r\n`), latin1('Zoë,Müller\r\n')]));
    expect(err.line).toBe(5002);
    expect(err.reason).toContain('Windows-1252');
  });

  it('refuses UTF-16 without a BOM naming it; reads it with --encoding utf-16le, and UTF-16 with a BOM as it is', async () => {
    const text = 'FirstName,LastName\r\nZoë,渡辺\r\n';
    const err = await readError('utf16-nobom.csv', utf16le(text));
    expect(err.line).toBe(1);
    expect(err.reason).toContain('UTF-16 (little-endian) without a byte order mark');
    expect(err.reason).toContain('--encoding utf-16le');
    for (const [name, bytes, read] of [
      ['utf16-named.csv', utf16le(text), { encoding: 'utf-16le' }],
      ['utf16le-bom.csv', utf16le(`\uFEFF${text}`), {}],
      ['utf16be-bom.csv', utf16le(`\uFEFF${text}`).swap16(), {}],
    ] as const) {
      const { headers, rows } = await importRows(name, bytes, 'customers', { read });
      expect(headers).toEqual(['FirstName', 'LastName']);
      expect(rows[0]?.cells).toEqual(['Zoë', '渡辺']);
    }
  });

  it('refuses Windows-1252 whose bytes happen to be valid UTF-8 (capitals before a quote: É’ is C9 92, ɒ)', async () => {
    const bytes = latin1('FirstName,LastName\r\nJOSÉ\x92S,ANDRÉ\x92\r\n');
    const err = await readError('capitals.csv', bytes);
    expect(err.line).toBe(2);
    expect(err.reason).toContain('it looks like Windows-1252 whose bytes happen to be valid UTF-8 (it decodes to U+0252');
    const { rows } = await importRows('capitals-ok.csv', bytes, 'customers', { read: { encoding: 'windows-1252' } });
    expect(rows[0]?.cells).toEqual(['JOSÉ’S', 'ANDRÉ’']);
  });

  it('reads valid UTF-8 holding U+FFFD, and refuses the row saying what it is, never "not UTF-8"', async () => {
    const { rows, errors } = await importRows('fffd.csv', 'FirstName,LastName\nZo\uFFFD,Müller\n', 'customers');
    expect(rows[0]?.cells).toEqual(['Zo\uFFFD', 'Müller']);
    expect(errors.map((e) => e.rule)).toEqual(['misdecoded-text']);
    expect(errors[0]?.message).toContain('holds U+FFFD, the character a program writes where it could not read one');
    expect(errors[0]?.message).not.toContain('not UTF-8');
  });

  it('refuses an encoding TextDecoder does not know', async () => {
    const err = await readError('any.csv', 'FirstName,LastName\n', { encoding: 'klingon' });
    expect(err.reason).toContain('--encoding "klingon" is not an encoding');
  });
});

describe('4. invisible characters', () => {
  it('are dropped around headers, emails, IDs and codes; names keep theirs', async () => {
    const content = '\u200BCustomerID,FirstName\u00A0,EmailAddress,CountryCode\n\u200E100001,\u200Fדוד,zoe@example.com\u200B,\uFEFFGBR\u00A0\n';
    const { plan, rows, errors } = await importRows('invisible.csv', content, 'customers');
    expect(plan.paths).toEqual(['CustomerID', 'FirstName', 'EmailAddress', 'CountryCode']);
    expect(errors).toEqual([]);
    const cells = rows[0]?.cells ?? [];
    expect(cellOf(plan, cells, 'CustomerID')).toBe('100001');
    expect(buildCustomerInput(plan, cells)).toMatchObject({ FirstName: '\u200Fדוד', EmailAddress: 'zoe@example.com', CountryCode: 'GBR' });
  });

  it('inside an identifier are refused, named as U+XXXX, never raw', async () => {
    const { errors } = await importRows('inside.csv', `PaymentMethodKey,AccountNumber,ExpirationDate,CountryCode\n${KEY},${VISA},1230,G\u200BBR\n`, 'cards');
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ column: 'CountryCode', rule: 'invisible' });
    expect(errors[0]?.message).toBe(
      'row 1 (spreadsheet row 2, line 2), column "CountryCode": holds an invisible character inside it (U+200B), as copying from a web page or a document leaves: type the value again (rule: invisible)',
    );
  });

  it('in an unknown header are shown as U+XXXX', async () => {
    const file = await temp.file('unknown.csv', 'First\u200BName,LastName\nA,B\n');
    const csv = await openCsv(file);
    const err = await rejection(Promise.resolve().then(() => planColumns({ file, kind: 'customers', headers: csv.headers })), FileRejectedError);
    csv.close();
    expect(err.problems[0]).toBe('unknown column "First<U+200B>Name" (did you mean "FirstName"?)');
  });
});

describe('5. joined files', () => {
  it('refuses a row that repeats the header, with or without a second BOM, and sends the rows around it', async () => {
    const content = Buffer.concat([
      Buffer.from('\uFEFFFirstName,LastName\r\nAda,Lovelace\r\n'),
      Buffer.from('\uFEFFFirstName,LastName\r\nGrace,Hopper\r\n'),
      Buffer.from('FirstName,LastName\r\nAlan,Turing\r\n'),
    ]);
    const { rows, errors } = await importRows('joined.csv', content, 'customers');
    expect(rows).toHaveLength(5);
    expect(errors.map((e) => [e.row, e.rule])).toEqual([
      [2, 'repeated-header'],
      [4, 'repeated-header'],
    ]);
    expect(errors[0]?.message).toBe(
      'row 2 (spreadsheet row 3, line 3): repeats the header row: two files were joined into one (copy /b, cat); split them, or remove the second header and its byte order mark; the row is not sent (rule: repeated-header)',
    );
  });
});

describe('6. numbers a spreadsheet stored', () => {
  const header = 'PaymentMethodKey,AccountNumber,ExpirationDate,CVCode';
  const STORED = 'this column was stored as a number by a spreadsheet: format it as Text and export again';

  it('refuses card numbers in scientific notation or rounded past 15 digits, 3-digit expiries, short CVCs, never quoting card data', async () => {
    const content = [header, `${KEY},4.01289E+15,1230,737`, `${KEY},4012888888881880,1230,737`, `${KEY},${VISA},629,737`, `${KEY},${VISA},1230,73`, `${KEY},${AMEX},1230,737`, `${KEY},${AMEX},1230,7373`, ''].join('\r\n');
    const { errors } = await importRows('damaged.csv', content, 'cards');
    expect(errors.map((e) => [e.row, e.column, e.rule])).toEqual([
      [1, 'AccountNumber', 'spreadsheet-number'],
      [2, 'AccountNumber', 'spreadsheet-number'],
      [3, 'ExpirationDate', 'spreadsheet-number'],
      [4, 'CVCode', 'spreadsheet-number'],
      [5, 'CVCode', 'spreadsheet-number'],
    ]);
    expect(errors[0]?.message).toBe(`row 1 (spreadsheet row 2, line 2), column "AccountNumber": is in scientific notation (its last digits are lost): ${STORED} (rule: spreadsheet-number)`);
    expect(errors[1]?.message).toContain('ends in zeros past its 15th digit');
    expect(errors[2]?.message).toBe(`row 3 (spreadsheet row 4, line 4), column "ExpirationDate": "629" has three digits: the leading zero of the month was dropped: ${STORED} (rule: spreadsheet-number)`);
    expect(errors[4]?.message).toContain('has 3 digits, one short of the 4 of an American Express card');
    for (const error of errors) expect(error.message).not.toMatch(/4012|1881|1880|3782|0005|737|\b73\b/);
  });

  it('refuses, per file, rounded card numbers that pass the Luhn check by chance when the file\'s long numbers show the rounding', async () => {
    // 4111111111111020 passes the Luhn check: alone it cannot be told from a real card number.
    const content = [header, `${KEY},4111111111111020,1230,737`, `${KEY},4012888888881880,1230,737`, `${KEY},5555555555554000,1230,737`, ''].join('\n');
    const file = await temp.file('rounded.csv', content);
    const { longNumbers } = await scanCsvBytes(file);
    const alone = await importRows('rounded-alone.csv', content, 'cards');
    expect(alone.errors.map((e) => [e.row, e.rule])).toEqual([
      [2, 'spreadsheet-number'],
      [3, 'spreadsheet-number'],
    ]);
    const byFile = await importRows('rounded-file.csv', content, 'cards', { row: { ...OPTIONS, roundedCardNumbers: showsRounding(longNumbers) } });
    expect(byFile.errors.map((e) => [e.row, e.rule])).toEqual([
      [1, 'spreadsheet-number'],
      [2, 'spreadsheet-number'],
      [3, 'spreadsheet-number'],
    ]);
    expect(byFile.errors[0]?.message).toBe(
      `row 1 (spreadsheet row 2, line 2), column "AccountNumber": ends in zeros past its 15th digit, as most long numbers of this file do: a spreadsheet rounded them to 15 digits: ${STORED} (rule: spreadsheet-number)`,
    );
  });

  it('refuses IDs and codes written as floats', async () => {
    const customers = await importRows('float-ids.csv', 'CustomerID,LastName,PostalCode\n100001.0,Smith,2000.0\n', 'customers');
    expect(customers.errors.map((e) => [e.column, e.rule])).toEqual([
      ['CustomerID', 'spreadsheet-number'],
      ['PostalCode', 'spreadsheet-number'],
    ]);
    expect(customers.errors[0]?.message).toBe(`row 1 (spreadsheet row 2, line 2), column "CustomerID": "100001.0" is written as a number: ${STORED} (rule: spreadsheet-number)`);
    const signups = await importRows(
      'float-codes.csv',
      `Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,Subscription.OfferCode\nA,B,${VISA},1230,500.0\n`,
      'signups',
    );
    expect(signups.errors.map((e) => [e.column, e.rule])).toEqual([['Subscription.OfferCode', 'spreadsheet-number']]);
  });
});

describe('7. delimiters and lines before the header', () => {
  it('reads semicolon- and tab-separated files whose header shows the delimiter beyond doubt', async () => {
    const semicolons = await importRows('semicolons.csv', '\uFEFFFirstName;LastName;AddressLine1\r\nZoë;Müller;"Rue 1; Apt 2"\r\n', 'customers');
    expect(semicolons.rows[0]?.cells).toEqual(['Zoë', 'Müller', 'Rue 1; Apt 2']);
    const tabs = await importRows('tabs.csv', 'FirstName\tLastName\nZoë\tMüller, Jr.\n', 'customers');
    expect(tabs.rows[0]?.cells).toEqual(['Zoë', 'Müller, Jr.']);
    const mapped = await importRows('mapped.csv', 'Vorname;Nachname\nZoë;Müller\n', 'customers', { map: { Vorname: 'FirstName', Nachname: 'LastName' } });
    expect(mapped.rows[0]?.cells).toEqual(['Zoë', 'Müller']);
  });

  it('refuses a semicolon header that is not beyond doubt, naming the delimiter', async () => {
    const file = await temp.file('doubt.csv', 'Vorname;Nachname;EmailAddress\nZoë;Müller;z@x.io\n');
    const err = await rejection(openCsv(file), FileRejectedError);
    expect(err.problems).toEqual([
      'the header on line 1 seems separated by semicolons (;), not commas, but 2 cells are not columns subsync knows ("Vorname", "Nachname"), so the delimiter is not certain: ' +
        'save the file as "CSV UTF-8 (Comma delimited)", name its columns (--map), or put "sep=;" on a first line of its own',
    ]);
  });

  it('honours a sep= first line; a spreadsheet hides it, so the header is still spreadsheet row 1', async () => {
    const { rows } = await importRows('sep.csv', 'sep=;\r\nFirstName;LastName\r\nZoë;Müller\r\n', 'customers');
    expect(rows).toEqual([{ row: 1, line: 3, sheetRow: 2, cells: ['Zoë', 'Müller'] }]);
  });

  it('skips one-cell lines above a header beyond doubt (PowerShell 5.1\'s #TYPE, a Numbers table name)', async () => {
    const powershell = await importRows('ps.csv', '#TYPE System.Management.Automation.PSCustomObject\r\n"FirstName","LastName"\r\n"Zoë","Müller"\r\n', 'customers');
    expect(powershell.rows).toEqual([{ row: 1, line: 3, sheetRow: 3, cells: ['Zoë', 'Müller'] }]);
    const numbers = await importRows('numbers.csv', 'Table 1\n\nFirstName,LastName\nZoë,Müller\n', 'customers');
    expect(numbers.rows).toEqual([{ row: 1, line: 4, sheetRow: 4, cells: ['Zoë', 'Müller'] }]);
  });

  it('refuses other lines above the header, saying on which line it is and what to remove', async () => {
    const file = await temp.file('report.csv', 'Customer report,2026-11-22\r\n#TYPE x\r\nFirstName,LastName\r\nZoë,Müller\r\n');
    const err = await rejection(openCsv(file), FileRejectedError);
    expect(err.problems).toEqual([
      'the header is on line 3, not on line 1: remove lines 1 to 2 above it (a "#TYPE" line is what Windows PowerShell 5.1\'s Export-Csv writes: add -NoTypeInformation), so that the header is the first line, and drop the file in again',
    ]);
  });

  it('ignores empty unnamed trailing columns (Excel\'s used range), but refuses a value under one', async () => {
    const { plan, rows, errors } = await importRows('range.csv', 'FirstName,LastName,,\r\nZoë,Müller,,\r\nAda,Lovelace\r\nAlan,Turing,,x\r\n', 'customers');
    expect(plan.paths).toEqual(['FirstName', 'LastName', '', '']);
    expect(rows).toHaveLength(3);
    expect(errors.map((e) => [e.row, e.rule])).toEqual([[3, 'unnamed-column']]);
    expect(errors[0]?.message).toBe('row 3 (spreadsheet row 4, line 4), column 4: has no header but holds a value: name the column, or clear its cells (rule: unnamed-column)');
  });

  it('reads Excel\'s "Unicode Text" (UTF-16LE with a BOM, tabs), and a title line above a Windows-1252 header read on purpose', async () => {
    const unicodeText = await importRows('unicode.txt', utf16le('\uFEFFFirstName\tLastName\r\nZoë\t渡辺, Jr.\r\n'), 'customers');
    expect(unicodeText.rows).toEqual([{ row: 1, line: 2, sheetRow: 2, cells: ['Zoë', '渡辺, Jr.'] }]);
    const titled = await importRows('titled.csv', latin1('Clients été\r\nFirstName;LastName\r\nZoë;Müller\r\n'), 'customers', { read: { encoding: 'windows-1252' } });
    expect(titled.rows).toEqual([{ row: 1, line: 3, sheetRow: 3, cells: ['Zoë', 'Müller'] }]);
  });

  it('reads CR-only line ends (old Mac), lines counted right', async () => {
    const { rows } = await importRows('cr.csv', 'FirstName,LastName\rZoë,"two\rlines"\rAda,Lovelace\r', 'customers');
    expect(rows.map((r) => [r.line, r.sheetRow])).toEqual([
      [2, 2],
      [4, 3],
    ]);
  });
});

describe('8. parse errors locate the fault and never quote the data', () => {
  it('a stray quote in a card cell: line, column, what and why, no digits', async () => {
    const err = await readError('card-quote.csv', `PaymentMethodKey,AccountNumber,ExpirationDate\r\n${KEY},4111"111111111111,1230\r\n`);
    expect(err.line).toBe(2);
    expect(err.reason).toBe(
      'in the record starting on line 2, column 2 ("AccountNumber"): a quote (") inside a cell that does not start with one; likely cause: a quote typed inside an unquoted cell (quote the whole cell and double the quote inside it, or remove it)',
    );
    expect(err.message).not.toMatch(/4111|1111/);
  });

  it('backslash escaping as MySQL INTO OUTFILE writes it', async () => {
    const err = await readError('mysql.csv', 'FirstName,LastName\n"Say \\"hi\\"",Smith\n');
    expect(err.reason).toContain('after a quote that closes a quoted cell comes a letter, where the delimiter or the end of the line must be');
    expect(err.reason).toContain("as MySQL's SELECT … INTO OUTFILE writes it");
    expect(err.reason).not.toContain('Say');
  });

  it('the wrong delimiter after a closing quote', async () => {
    const err = await readError('wrong.csv', 'FirstName,LastName\n"Zoë";"Müller"\n');
    expect(err.reason).toContain('comes a semicolon (;)');
    expect(err.reason).toContain('the file seems separated by semicolons');
    expect(err.reason).not.toContain('Zoë');
  });

  it('an unclosed quote', async () => {
    const err = await readError('unclosed.csv', 'FirstName,LastName\nA,B\nC,"never closed\n');
    expect(err.line).toBe(3);
    expect(err.reason).toContain('column 2 ("LastName"): a quoted cell is never closed');
    expect(err.reason).not.toContain('never closed\n');
  });
});

describe('what held keeps holding', () => {
  it('a UTF-8 card update with every column is sent as written', async () => {
    const { plan, rows, errors } = await importRows('cards.csv', `\uFEFF${'PaymentMethodKey,AccountNumber,ExpirationDate,CVCode,FirstName'}\r\n{${KEY}},${AMEX},1230,7373,Ærø\r\n`, 'cards');
    expect(errors).toEqual([]);
    const update = buildCardUpdate(plan, rows[0]?.cells ?? [], OPTIONS);
    expect(update.paymentMethodKey).toBe(KEY);
    expect(update.body.CreditCard).toMatchObject({ AccountNumber: AMEX, CVCode: '7373', FirstName: 'Ærø' });
  });

  it('Hebrew and Arabic names keep their directional marks, emoji and other scripts pass', async () => {
    const names = ['\u200Fדוד', 'محمد\u200F', '\u202Bשרה\u202C', 'Łucja 🎉', '渡辺', 'Ηλίας', 'Иван'];
    const { plan, rows, errors } = await importRows('scripts.csv', `FirstName,LastName\n${names.map((n) => `${n},X`).join('\n')}\n`, 'customers');
    expect(errors).toEqual([]);
    expect(rows.map((row) => buildCustomerInput(plan, row.cells).FirstName)).toEqual(names);
  });
});
