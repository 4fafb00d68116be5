import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiClient } from '../../src/api/client.js';
import { importFile, type ImportRequest } from '../../src/import/producer.js';
import { retryRows } from '../../src/import/retry.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const deps = (p: Pipeline) => ({ store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });

async function finished(p: Pipeline, importId: string, round?: number): Promise<ImportStatus> {
  return until(async () => {
    const status = await importStatus(p.runtime.store, importId);
    const record = await p.runtime.store.getImport(importId);
    return status?.finished && (round === undefined || record?.round === round) ? status : undefined;
  }, `import ${importId} to finish`);
}

async function run(p: Pipeline, request: ImportRequest): Promise<ImportStatus> {
  const result = await importFile(request, deps(p));
  if (result.outcome !== 'enqueued') throw new Error(`not enqueued: ${result.outcome}`);
  return finished(p, result.importId);
}

describe('import options', () => {
  it('--dry-run validates every row and each offer, and enqueues nothing', async () => {
    pipeline = await startPipeline({ workers: false });
    const file = await pipeline.file(
      'dry.csv',
      [
        'Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
        'Ana,Dry,4111111111111111,1230,STREAM-PLUS',
        'Bea,Dry,4111111111111112,1230,LEGACY-2019',
        'Cid,Dry,4111111111111111,1230,NO-SUCH',
      ].join('\n'),
    );
    const api = createApiClient({ baseUrl: pipeline.sandbox.url });
    try {
      const result = await importFile({ file, dryRun: true }, { ...deps(pipeline), api });
      expect(result.outcome).toBe('dry-run');
      if (result.outcome !== 'dry-run') return;
      expect(result).toMatchObject({ rows: 3, invalid: 1 });
      expect(result.errors[0]).toMatchObject({ row: 2, column: 'CreditCardInfo.AccountNumber', rule: 'card-number' });
      expect(result.offers).toEqual([
        { offerCode: 'STREAM-PLUS', problem: undefined },
        { offerCode: 'NO-SUCH', problem: 'offer NO-SUCH does not exist' },
      ]);
    } finally {
      await api.close();
    }
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
    expect(await pipeline.runtime.queues.rows.count()).toBe(0);
  });

  it('--all-or-nothing enqueues nothing when a row is invalid', async () => {
    pipeline = await startPipeline({ workers: false });
    const file = await pipeline.file('aon.csv', 'FirstName,LastName,CountryCode\nAda,Aon,GBR\nBob,Aon,GB\n');
    const result = await importFile({ file, allOrNothing: true }, deps(pipeline));
    expect(result).toMatchObject({ outcome: 'rejected', rows: 2, invalid: 1 });
    expect(await pipeline.runtime.queues.rows.count()).toBe(0);
  });

  it('a malformed record deep in the file rejects it before any row is queued', async () => {
    pipeline = await startPipeline({ workers: false });
    const lines = ['FirstName,LastName'];
    for (let i = 1; i <= 2_000; i++) lines.push(`Row${i},Malformed`);
    lines.push('"Unclosed,Quote');
    const file = await pipeline.file('malformed.csv', `${lines.join('\n')}\n`);
    await expect(importFile({ file }, deps(pipeline))).rejects.toMatchObject({ code: 'CSV_FORMAT' });
    expect(await pipeline.runtime.queues.rows.count()).toBe(0);
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
  });

  it('--map renames an operator\'s own columns', async () => {
    pipeline = await startPipeline();
    const map = path.join(pipeline.dataDir, 'map.json');
    await writeFile(map, JSON.stringify({ 'Given name': 'FirstName', Surname: 'LastName', 'E-mail': 'EmailAddress' }));
    const file = await pipeline.file('mapped.csv', 'Given name,Surname,E-mail\nÉlodie,Mappé,elodie@example.fr\n');
    const status = await run(pipeline, { file, mapFile: map, kind: 'customers' });
    expect(status.counts.created).toBe(1);
    expect(pipeline.sandbox.store.customers().find((c) => c.LastName === 'Mappé')).toMatchObject({ FirstName: 'Élodie', EmailAddress: 'elodie@example.fr' });
    const results = await readFile(path.join(status.resultsDir ?? '', 'results.csv'), 'utf8');
    // A BOM first, so that a spreadsheet reads it as UTF-8.
    expect(results.split('\n')[0]).toBe('\uFEFFGiven name,Surname,E-mail,_row,_status,_customerId,_subscriptionId,_paymentMethodKey,_attempts,_error');
  });

  it('--match upserts: updates the customer whose field matches, creates the others', async () => {
    pipeline = await startPipeline();
    const seeded = pipeline.sandbox.store.customers()[0];
    const file = await pipeline.file(
      'upsert.csv',
      `FirstName,LastName,EmailAddress,City\n${seeded?.FirstName},${seeded?.LastName},${seeded?.EmailAddress.toUpperCase()},Grenoble\nNew,Upserted,new@example.com,Nice\n`,
    );
    const status = await run(pipeline, { file, match: 'emailaddress', sendEmptyPasswords: true });
    expect(status.counts).toMatchObject({ updated: 1, created: 1 });
    expect(pipeline.sandbox.store.customers().find((c) => c.CustomerID === seeded?.CustomerID)?.City).toBe('Grenoble');
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === seeded?.LastName)).toHaveLength(1);
  });

  it('a row whose create may have applied ends needs-review; retry reads it back first, then sends it once', async () => {
    pipeline = await startPipeline({ faults: { errorRate: 1 } });
    const file = await pipeline.file('retry.csv', 'FirstName,LastName\nRita,Retried\n');
    // Without the duplicate guard, whose search would fail first and keep the create from ever leaving.
    const status = await run(pipeline, { file, attempts: 2, allowDuplicates: true });
    // Every request failed with a 503, the read-back too: nothing proves either way.
    expect(status.counts['needs-review']).toBe(1);
    expect(await readFile(path.join(status.resultsDir ?? '', 'results.csv'), 'utf8')).toMatch(/may have been applied: Service temporarily unavailable/);

    pipeline.sandbox.setFaults({ errorRate: 0 });
    pipeline.sandbox.resetStats();
    const retried = await retryRows(pipeline.runtime.store, pipeline.runtime.queues, status.importId);
    expect(retried.retried).toEqual([1]);
    const again = await finished(pipeline, status.importId, 1);
    expect(again.counts).toMatchObject({ created: 1, 'needs-review': 0 });
    // The read-back: the first page of each of the row's two names (the smaller holds every match), then the create.
    expect(pipeline.sandbox.stats().byEndpoint).toEqual({ searchCustomers: 2, createCustomer: 1 });
    expect(await readFile(path.join(again.resultsDir ?? '', 'results.csv'), 'utf8')).toMatch(/,created,\d+,/);
    await expect(retryRows(pipeline.runtime.store, pipeline.runtime.queues, status.importId, 1)).rejects.toThrow(/row 1 is created/);
  });

  it('when the retries run out after a 5xx, reading back decides: the applied create is reconciled', async () => {
    pipeline = await startPipeline({ faults: { errorAfterApplyRate: 1 } });
    const file = await pipeline.file('applied.csv', 'FirstName,LastName,EmailAddress\nAbe,Applied,abe@example.com\n');
    const status = await run(pipeline, { file, attempts: 1 });
    expect(status.counts.reconciled).toBe(1);
    const created = pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Applied');
    expect(created).toHaveLength(1);
    const results = await readFile(path.join(status.resultsDir ?? '', 'results.csv'), 'utf8');
    expect(results).toContain(`,reconciled,${created[0]?.CustomerID},`);
  });
});
