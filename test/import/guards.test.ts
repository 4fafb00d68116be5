import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FileRejectedError } from '../../src/csv/errors.js';
import { importFile, type ImportRequest } from '../../src/import/producer.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { recentRollbacks } from '../../src/store/rollback.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';
import { pointInTime } from '../support/store.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const deps = (p: Pipeline) => ({ store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });

async function run(p: Pipeline, request: ImportRequest): Promise<ImportStatus> {
  const result = await importFile(request, deps(p));
  if (result.outcome !== 'enqueued') throw new Error(`not enqueued: ${result.outcome}`);
  return until(async () => {
    const status = await importStatus(p.runtime.store, result.importId);
    return status?.finished ? status : undefined;
  }, `import ${result.importId} to finish`);
}

async function results(status: ImportStatus): Promise<Array<Record<string, string>>> {
  const text = await readFile(path.join(status.resultsDir ?? '', 'results.csv'), 'utf8');
  return z.array(z.record(z.string(), z.string())).parse(parse(text, { columns: true, bom: true }));
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(FileRejectedError);
  return error instanceof Error ? error.message : '';
}

describe('an update file without a Password column', () => {
  it('is refused before anything is sent, dry run included, unless --send-empty-passwords says it is meant', async () => {
    pipeline = await startPipeline();
    const customer = pipeline.sandbox.store.customers()[0];
    const file = await pipeline.file('updates.csv', `CustomerID,City\n,Nowhere\n${customer?.CustomerID},Grenoble\n`);
    pipeline.sandbox.resetStats();

    expect(await refusal(run(pipeline, { file }))).toMatch(/row 2 updates customer \d+, and the file has no Password column: .*empty password; add a Password column .* or pass --send-empty-passwords/);
    expect(await refusal(importFile({ file, dryRun: true }, deps(pipeline)))).toMatch(/no Password column/);
    const upsert = await pipeline.file('upsert.csv', 'FirstName,LastName,EmailAddress\nUma,Upsert,uma@example.com\n');
    expect(await refusal(run(pipeline, { file: upsert, match: 'EmailAddress' }))).toMatch(/--match updates customers, and the file has no Password column/);
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
    expect(pipeline.sandbox.stats().requests).toBe(0);

    const status = await run(pipeline, { file, sendEmptyPasswords: true });
    // Row 1 has no CustomerID: a create without a name, invalid; row 2 updates.
    expect(status.counts).toMatchObject({ updated: 1, invalid: 1 });
  });

  it('is taken when it has a Password column, and a file of creates with an empty CustomerID column is taken as it is', async () => {
    pipeline = await startPipeline();
    const customer = pipeline.sandbox.store.customers()[1];
    const withPassword = await pipeline.file('with-password.csv', `CustomerID,City,Password\n${customer?.CustomerID},Cork,s3cret\n`);
    expect((await run(pipeline, { file: withPassword })).counts.updated).toBe(1);
    const creates = await pipeline.file('creates.csv', 'CustomerID,FirstName,LastName\n,Cara,Create\n');
    expect((await run(pipeline, { file: creates })).counts.created).toBe(1);
  });
});

describe('rows about the same person or record twice in one file', () => {
  it('sends the first and settles the later ones as duplicate, naming the earlier row, however the text is written', async () => {
    pipeline = await startPipeline();
    const file = await pipeline.file(
      'twice.csv',
      [
        'FirstName,LastName,EmailAddress,City',
        'Dora,Double,dora@example.com,Paris',
        'Other,Person,other@example.com,Lyon',
        ' dora ,DOUBLE,Dora@Example.com\u200b,Nice',
        'Dora,Double,dora.two@example.com,Nice',
      ].join('\n'),
    );
    const status = await run(pipeline, { file });
    expect(status.counts).toMatchObject({ created: 3, duplicate: 1 });
    expect(status.allSucceeded).toBe(true);
    const rows = await results(status);
    expect(rows.map((r) => r._status)).toEqual(['created', 'created', 'duplicate', 'created']);
    expect(rows[2]?._error).toBe('the same person (first name, last name and email) as row 1 of this file: not sent (--allow-duplicates sends such rows)');
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Double')).toHaveLength(2);
    expect(pipeline.sandbox.stats().byEndpoint.createCustomer).toBe(3);
  });

  it('sends them all with --allow-duplicates', async () => {
    pipeline = await startPipeline();
    const file = await pipeline.file('twice.csv', 'FirstName,LastName,EmailAddress\nEve,Again,eve@example.com\nEve,Again,eve@example.com\n');
    const status = await run(pipeline, { file, allowDuplicates: true });
    expect(status.counts.created).toBe(2);
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Again')).toHaveLength(2);
  });

  it('applies to sign-ups (by person), updates (by CustomerID) and card updates (by key), and a dry run counts them', async () => {
    pipeline = await startPipeline();
    const [first, second] = pipeline.sandbox.store.customers();
    const updates = await pipeline.file(
      'updates.csv',
      `CustomerID,City,Password\n${first?.CustomerID},A,p\n${second?.CustomerID},B,p\n${first?.CustomerID},C,p\n`,
    );
    const dry = await importFile({ file: updates, dryRun: true }, deps(pipeline));
    expect(dry).toMatchObject({ outcome: 'dry-run', rows: 3, invalid: 0, duplicates: 1 });
    const status = await run(pipeline, { file: updates });
    expect(status.counts).toMatchObject({ updated: 2, duplicate: 1 });
    expect(pipeline.sandbox.store.customers().find((c) => c.CustomerID === first?.CustomerID)?.City).toBe('A');
    expect((await results(status))[2]?._error).toMatch(/^the same CustomerID as row 1 of this file/);

    const signups = await pipeline.file(
      'signups.csv',
      [
        'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
        'Sam,Signup,sam@example.com,4111111111111111,1230,STREAM-PLUS',
        'Sam,Signup,SAM@example.com,4111111111111111,1230,NEWS-ANNUAL',
      ].join('\n'),
    );
    const signed = await run(pipeline, { file: signups });
    expect(signed.counts).toMatchObject({ 'signed-up': 1, duplicate: 1 });
    expect(pipeline.sandbox.store.subscriptions()).toHaveLength(1);
  });
});

describe('an update whose record already holds the row', () => {
  it('settles unchanged without a PUT; a changed row is updated', async () => {
    pipeline = await startPipeline();
    const [first, second] = pipeline.sandbox.store.customers();
    const file = await pipeline.file(
      'same.csv',
      `CustomerID,City,EmailAddress\n${first?.CustomerID},${first?.City},${first?.EmailAddress}\n${second?.CustomerID},Galway,${second?.EmailAddress}\n`,
    );
    pipeline.sandbox.resetStats();
    const status = await run(pipeline, { file, sendEmptyPasswords: true });
    expect(status.counts).toMatchObject({ unchanged: 1, updated: 1 });
    expect(pipeline.sandbox.stats().byEndpoint).toEqual({ getCustomer: 2, updateCustomer: 1 });
    const rows = await results(status);
    expect(rows[0]).toMatchObject({ _status: 'unchanged', _customerId: first?.CustomerID });
  });
});

describe('a create whose person the service already holds', () => {
  const list = ['FirstName,LastName,EmailAddress,City', 'Lena,Listed,lena@example.com,Oslo', 'Mo,Listed,mo@example.com,Bergen', 'Nia,Listed,nia@example.com,Tromsø'];

  it('a list dropped twice, the second time with its columns in another order, creates nobody twice', async () => {
    pipeline = await startPipeline();
    const first = await run(pipeline, { file: await pipeline.file('list.csv', list.join('\n')) });
    expect(first.counts.created).toBe(3);
    pipeline.sandbox.resetStats();
    const reordered = ['City,EmailAddress,LastName,FirstName', ...list.slice(1).map((line) => line.split(',').reverse().join(','))];
    const second = await run(pipeline, { file: await pipeline.file('list-again.csv', reordered.join('\n')) });
    expect(second.counts).toMatchObject({ exists: 3, created: 0 });
    expect(second.allSucceeded).toBe(true);
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Listed')).toHaveLength(3);
    expect(pipeline.sandbox.stats().byEndpoint.createCustomer).toBeUndefined();
    const rows = await results(second);
    const lena = pipeline.sandbox.store.customers().find((c) => c.FirstName === 'Lena');
    expect(rows[0]).toMatchObject({ _status: 'exists', _customerId: lena?.CustomerID });
    expect(rows[0]?._error).toMatch(/already holds this person .* as customer \d+; not created again \(--allow-duplicates creates it\)/);
  });

  it('a stale index (customers created elsewhere since it was built) still creates nobody twice', async () => {
    pipeline = await startPipeline();
    // The index is built by a first import's guard; then the same people are created behind subsync's back.
    await run(pipeline, { file: await pipeline.file('other.csv', 'FirstName,LastName\nOla,Other\n') });
    expect(await pipeline.runtime.customers.meta()).toBeDefined();
    for (const line of list.slice(1, 3)) {
      const [FirstName = '', LastName = '', EmailAddress = '', City = ''] = line.split(',');
      pipeline.sandbox.store.createCustomer({ ...(pipeline.sandbox.store.customers()[0] ?? ({} as never)), FirstName, LastName, EmailAddress, City, Password: '' });
    }
    // Old enough that the guard reads the end of the listing again.
    await pipeline.runtime.redis.hset(`${pipeline.prefix}:cix`, 'refreshedAt', String(Date.now() - 60_000));
    // (The workers of this test share the runtime's index, which keeps its meta a moment: read it again now.)
    await pipeline.runtime.customers.meta({ fresh: true });
    const status = await run(pipeline, { file: await pipeline.file('list.csv', list.join('\n')) });
    expect(status.counts).toMatchObject({ exists: 2, created: 1 });
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Listed')).toHaveLength(3);
  });

  it('a list dropped again after Redis came back without the first import of it creates nobody twice', async () => {
    pipeline = await startPipeline();
    // The index is built by a first import's guard; Redis will come back as it was then.
    await run(pipeline, { file: await pipeline.file('other.csv', 'FirstName,LastName\nOla,Other\n') });
    const before = await pointInTime(pipeline.runtime.redis, pipeline.prefix);
    const first = await run(pipeline, { file: await pipeline.file('list.csv', list.join('\n')) });
    expect(first.counts.created).toBe(3);
    // The first import, its claims and its index writes are gone; the index's meta still says it was read
    // to its end a moment ago.
    await before.rollBack();
    await pipeline.runtime.rollbacks.check('reconnect');
    await pipeline.runtime.rollbacks.settled();
    expect(await recentRollbacks(pipeline.runtime.redis, pipeline.runtime.store)).toHaveLength(1);
    const reordered = ['City,EmailAddress,LastName,FirstName', ...list.slice(1).map((line) => line.split(',').reverse().join(','))];
    const second = await run(pipeline, { file: await pipeline.file('list-again.csv', reordered.join('\n')) });
    expect(second.counts).toMatchObject({ exists: 3, created: 0 });
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Listed')).toHaveLength(3);
  });

  it('two imports of the same people at the same time create each once', async () => {
    pipeline = await startPipeline();
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 0; i < 60; i++) lines.push(`Twin${i},Race,twin${i}@example.com`);
    const a = await pipeline.file('a.csv', lines.join('\n'));
    const b = await pipeline.file('b.csv', `${lines.join('\n')}\n`);
    const [first, second] = await Promise.all([run(pipeline, { file: a }), run(pipeline, { file: b })]);
    expect((first.counts.created ?? 0) + (second.counts.created ?? 0)).toBe(60);
    expect((first.counts.exists ?? 0) + (second.counts.exists ?? 0)).toBe(60);
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Race')).toHaveLength(60);
  });

  it('sign-ups are guarded the same way, and --allow-duplicates creates the person again', async () => {
    pipeline = await startPipeline();
    const seeded = pipeline.sandbox.store.customers()[0];
    const header = 'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,Subscription.OfferCode';
    const file = await pipeline.file('signup.csv', `${header}\n${seeded?.FirstName},${seeded?.LastName},${seeded?.EmailAddress},4111111111111111,1230,STREAM-PLUS\n`);
    const guarded = await run(pipeline, { file });
    expect(guarded.counts).toMatchObject({ exists: 1 });
    expect(pipeline.sandbox.store.subscriptions()).toHaveLength(0);
    const allowed = await run(pipeline, { file, force: true, allowDuplicates: true });
    expect(allowed.counts).toMatchObject({ 'signed-up': 1 });
  });
});
