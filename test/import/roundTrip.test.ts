import { readFile, writeFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { customerInput } from '../support/bodies.js';
import { exportNow } from '../support/exports.js';
import { waitFinished } from '../support/imports.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

describe('an export, edited in a spreadsheet and dropped back', () => {
  it('changes exactly the edited cell: one PUT, every other stored value byte-equal', async () => {
    pipeline = await startPipeline();
    const { store } = pipeline.sandbox;
    // Values a spreadsheet would take for formulas, escaped by the export and unescaped on the way back in.
    store.createCustomer(customerInput({ FirstName: 'Olga', LastName: 'Escaped', MobileNumber: '+44 20 7946 0018', Company: '=Acme', AddressLine2: '-', Title: '@Home', Password: '' }));
    store.createCustomer(customerInput({ FirstName: 'Zoë', LastName: 'Lefèvre', City: 'Paris', Password: '' }));
    store.createCustomer(customerInput({ FirstName: 'Edit', LastName: 'Me', City: 'Quimper', Password: '' }));
    const before = store.customers();

    const { manifest } = await exportNow(pipeline);
    const exported = await readFile(`${pipeline.dataDir}/exports/${manifest.file}`, 'utf8');
    expect(exported.startsWith('\uFEFF')).toBe(true);
    expect(exported).toContain("\"'+44 20 7946 0018\"");
    const edited = exported.replace('"Quimper"', '"Grenoble"');
    expect(edited).not.toBe(exported);
    const file = `${pipeline.dataDir}/edited.csv`;
    await writeFile(file, edited);

    pipeline.sandbox.resetStats();
    const { store: ledger, queues, keyring, logger } = pipeline.runtime;
    // The export's Password column is empty (the service never returns one): present, so the file may update.
    const result = await importFile({ file }, { store: ledger, queues, keyring, logger });
    if (result.outcome !== 'enqueued') throw new Error(result.outcome);
    const status = await waitFinished(pipeline, result.importId);
    expect(status.counts).toMatchObject({ updated: 1, unchanged: before.length - 1 });
    expect(pipeline.sandbox.stats().byEndpoint.updateCustomer).toBe(1);
    const after = store.customers();
    expect(after).toEqual(before.map((c) => (c.LastName === 'Me' ? { ...c, City: 'Grenoble' } : c)));
  });
});

describe('SUBSYNC_CSV_BOM=false', () => {
  it('leaves the BOM out of results, errors and CSV exports, for machine consumers', async () => {
    pipeline = await startPipeline({ config: { csvBom: false } });
    const file = `${pipeline.dataDir}/plain.csv`;
    await writeFile(file, 'FirstName,LastName\nPlain,Text\n,Nameless\n');
    const { store, queues, keyring, logger } = pipeline.runtime;
    const result = await importFile({ file }, { store, queues, keyring, logger });
    if (result.outcome !== 'enqueued') throw new Error(result.outcome);
    const status = await waitFinished(pipeline, result.importId);
    for (const name of ['results.csv', 'errors.csv']) expect((await readFile(`${status.resultsDir ?? ''}/${name}`, 'utf8')).startsWith('FirstName,LastName,')).toBe(true);
    const { manifest } = await exportNow(pipeline);
    expect((await readFile(`${pipeline.dataDir}/exports/${manifest.file}`, 'utf8')).startsWith('"CustomerID",')).toBe(true);
  });
});
