/**
 * Files as spreadsheets and other tools write them, imported end to end:
 * what the service stored, byte for byte, for each kind of file that is
 * read; the refusals have their tests in test/csv/spreadsheets.test.ts.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { importFile, type ImportRequest } from '../../src/import/producer.js';
import { waitFinished } from '../support/imports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

async function imported(p: Pipeline, name: string, bytes: Buffer, request: Partial<ImportRequest> = {}): Promise<void> {
  const file = path.join(p.dataDir, name);
  await writeFile(file, bytes);
  const result = await importFile({ file, kind: 'customers', ...request }, { store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });
  if (result.outcome !== 'enqueued') throw new Error(result.outcome);
  const status = await waitFinished(p, result.importId);
  expect(status.counts.created, name).toBe(1);
}

const stored = (p: Pipeline, lastName: string) => p.sandbox.store.customers().find((c) => c.LastName === lastName);

describe('files from spreadsheets and other tools, imported', () => {
  it('store exactly what the operator meant', async () => {
    pipeline = await startPipeline();
    // Excel in a German locale: semicolons, CRLF, UTF-8 with a BOM.
    await imported(pipeline, 'semicolons.csv', Buffer.from('\uFEFFFirstName;LastName;City;MobileNumber\r\nJürgen;Semikolon;München;+49 170 1234567\r\n', 'utf8'));
    expect(stored(pipeline, 'Semikolon')).toMatchObject({ FirstName: 'Jürgen', City: 'München', MobileNumber: '+49 170 1234567' });

    // Excel's "Unicode Text": UTF-16LE with a BOM, tab-separated.
    await imported(pipeline, 'unicode.txt', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('FirstName\tLastName\tCompany\r\nZoë\tTabulé\tCafé, Ltd\r\n', 'utf16le')]));
    expect(stored(pipeline, 'Tabulé')).toMatchObject({ FirstName: 'Zoë', Company: 'Café, Ltd' });

    // A sep= line, as Excel writes it to say the delimiter.
    await imported(pipeline, 'sep.csv', Buffer.from('sep=;\nFirstName;LastName;City\nAnne;Separée;Lille\n', 'utf8'));
    expect(stored(pipeline, 'Separée')).toMatchObject({ FirstName: 'Anne', City: 'Lille' });

    // Windows-1252, read on purpose.
    await imported(pipeline, 'ansi.csv', Buffer.from([...Buffer.from('FirstName,LastName,City\n'), ...Buffer.from('Andr'), 0xe9, ...Buffer.from(',Ansi,Orl'), 0xe9, ...Buffer.from('ans\n')]), { encoding: 'windows-1252' });
    expect(stored(pipeline, 'Ansi')).toMatchObject({ FirstName: 'André', City: 'Orléans' });

    // A zero-width space after an email and an NBSP in a country code: dropped; a name keeps its marks.
    await imported(pipeline, 'invisible.csv', Buffer.from('FirstName,LastName,EmailAddress,CountryCode\n\u200Fשרה,Invisible,sara@example.com\u200B,\u00A0ISR\n', 'utf8'));
    expect(stored(pipeline, 'Invisible')).toMatchObject({ FirstName: '\u200Fשרה', EmailAddress: 'sara@example.com', CountryCode: 'ISR' });

    // Excel's used range: empty unnamed columns at the end of every line.
    await imported(pipeline, 'range.csv', Buffer.from('FirstName,LastName,,\r\nRan,Ge,,\r\n', 'utf8'));
    expect(stored(pipeline, 'Ge')).toMatchObject({ FirstName: 'Ran' });
  });
});
