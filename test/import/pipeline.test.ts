import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { importFile } from '../../src/import/producer.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { redisText, startPipeline, until, type Pipeline } from '../support/pipeline.js';
import { startWorkers } from '../../src/runtime.js';
import { rowJobId } from '../../src/queue/queues.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

async function runToEnd(p: Pipeline, file: string, extra: Parameters<typeof importFile>[0] extends infer R ? Partial<R> : never = {}): Promise<ImportStatus> {
  const result = await importFile({ file, ...extra }, { store: p.runtime.store, queues: p.runtime.queues, keyring: p.runtime.keyring, logger: p.runtime.logger });
  expect(result.outcome).toBe('enqueued');
  return until(async () => {
    const status = await importStatus(p.runtime.store, result.importId);
    return status?.finished ? status : undefined;
  }, `import ${result.importId} to finish`);
}

async function readCsv(file: string): Promise<Array<Record<string, string>>> {
  return z.array(z.record(z.string(), z.string())).parse(parse(await readFile(file, 'utf8'), { columns: true, bom: true }));
}

describe('import pipeline, end to end on real Redis and the sandbox', () => {
  it('imports a customers file: valid rows created, invalid rows reported, results written', async () => {
    pipeline = await startPipeline();
    const file = await pipeline.file(
      'customers.csv',
      [
        'FirstName,LastName,EmailAddress,CountryCode,AddressLine1,MobileNumber',
        'Zoë,"D\'Arcy",zoe@example.fr,FRA,"12, rue de la Paix",+33 6 12 34 56 78',
        'Seán,O\'Connor,sean@example.ie,IRL,"1 Main St, Apt ""B""",',
        'Bad,Email,not-an-email,GBR,,',
        'Jürgen,Müller,j@example.de,DE,,',
      ].join('\n'),
    );
    const status = await runToEnd(pipeline, file);
    expect(status.counts).toMatchObject({ created: 2, invalid: 2 });
    expect(status.total).toBe(4);

    const results = await readCsv(path.join(status.resultsDir ?? '', 'results.csv'));
    expect(results.map((r) => [r._row, r._status])).toEqual([['1', 'created'], ['2', 'created'], ['3', 'invalid'], ['4', 'invalid']]);
    expect(results[1]?.AddressLine1).toBe('1 Main St, Apt "B"');
    expect(results[2]?._error).toMatch(/row 3.*EmailAddress.*email/);
    expect(results[3]?._error).toMatch(/CountryCode/);
    const created = pipeline.sandbox.store.customers().find((c) => c.CustomerID === results[0]?._customerId);
    expect(created).toMatchObject({ FirstName: 'Zoë', LastName: "D'Arcy", AddressLine1: '12, rue de la Paix', MobileNumber: '+33 6 12 34 56 78' });
    const errors = await readCsv(path.join(status.resultsDir ?? '', 'errors.csv'));
    expect(errors.map((r) => r.FirstName)).toEqual(['Bad', 'Jürgen']);
    const summary = JSON.parse(await readFile(path.join(status.resultsDir ?? '', 'summary.json'), 'utf8')) as { counts: Record<string, number>; apiCalls: number; searches: number; writes: number };
    expect(summary.counts.created).toBe(2);
    // Two creates, and the one page that built the customer index the duplicate guard read.
    expect(summary).toMatchObject({ apiCalls: 3, searches: 1, writes: 2 });
  });

  it('an update file with only CustomerID and EmailAddress changes the email and keeps every other field', async () => {
    pipeline = await startPipeline();
    const before = pipeline.sandbox.store.customers()[1];
    expect(before).toBeDefined();
    const file = await pipeline.file('updates.csv', `CustomerID,EmailAddress\n${before?.CustomerID},new.address@example.com\n`);
    const status = await runToEnd(pipeline, file, { sendEmptyPasswords: true });
    expect(status.counts.updated).toBe(1);
    const after = pipeline.sandbox.store.customers().find((c) => c.CustomerID === before?.CustomerID);
    expect(after).toEqual({ ...before, EmailAddress: 'new.address@example.com' });
  });

  it('signs up customers with provisioning, and updates cards, never writing card data', async () => {
    pipeline = await startPipeline();
    const signups = await pipeline.file(
      'signups.csv',
      [
        'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode,Subscription.SubscriptionItems[0].ProductCode,Subscription.SubscriptionItems[0].Fields.SerialNumber,Subscription.SubscriptionItems[0].Fields.InstallAddress',
        'Ana,Souza,ana@example.br,5555555555554444,737,1230,FIBER-500,ROUTER,RT-1,"4 Rua A, São Paulo"',
        'Kenji,Tanaka,kenji@example.jp,4111111111111111,864,0631,STREAM-PLUS,,,',
        'Old,Offer,old@example.com,378282246310005,7373,1230,LEGACY-2019,,,',
      ].join('\n'),
    );
    const status = await runToEnd(pipeline, signups);
    expect(status.counts).toMatchObject({ 'signed-up': 2, failed: 1 });
    const results = await readCsv(path.join(status.resultsDir ?? '', 'results.csv'));
    expect(results[2]?._error).toMatch(/LEGACY-2019 is Retired/);
    expect(results[0]?._subscriptionId).not.toBe('');

    const key = SEED_PAYMENT_METHOD_KEYS[2];
    const cards = await pipeline.file('cards.csv', `PaymentMethodKey,AccountNumber,CVCode,ExpirationDate\n${key},4000056655665556,321,0930\n`);
    const cardStatus = await runToEnd(pipeline, cards);
    expect(cardStatus.counts.updated).toBe(1);
    expect(pipeline.sandbox.store.paymentMethod(key)?.card).toMatchObject({ AccountNumber: '4000056655665556', CVCode: '321' });

    const written = [
      ...(await Promise.all(['results.csv', 'errors.csv', 'summary.json'].map((f) => readFile(path.join(status.resultsDir ?? '', f), 'utf8')))),
      ...(await Promise.all(['results.csv', 'errors.csv', 'summary.json'].map((f) => readFile(path.join(cardStatus.resultsDir ?? '', f), 'utf8')))),
      pipeline.logs(),
    ].join('\n');
    for (const secret of ['5555555555554444', '4111111111111111', '378282246310005', '4000056655665556']) expect(written).not.toContain(secret);
    expect(results[0]?.['CreditCardInfo.AccountNumber']).toBe('************4444');
    expect(results.map((r) => r['CreditCardInfo.CVCode'])).toEqual(['', '', '']);
  });

  it('keeps card numbers and CVCs out of Redis: sealed in job data, masked in the ledger', async () => {
    pipeline = await startPipeline({ workers: false });
    const file = await pipeline.file(
      'sealed.csv',
      'Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode\nSal,Sealed,5555555555554444,864,1230,STREAM-PLUS\nOld,Sealed,378282246310005,9753,1230,LEGACY-2019\n',
    );
    const { importId } = await importFile({ file }, { store: pipeline.runtime.store, queues: pipeline.runtime.queues, keyring: pipeline.runtime.keyring, logger: pipeline.runtime.logger });
    const queued = await redisText(pipeline.runtime.redis, pipeline.prefix);
    expect(queued).toContain('************4444');
    expect(queued).toMatch(/v1\.k1\./);
    startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    await until(async () => ((await importStatus(pipeline!.runtime.store, importId))?.finished ? true : undefined), 'the import to finish');
    const settled = await redisText(pipeline.runtime.redis, pipeline.prefix);
    // The refused row's job is kept for the dashboard, without its card data now the import settled.
    const kept = await pipeline.runtime.queues.rows.getJob(rowJobId(importId, 2));
    expect(kept?.data).toEqual({ importId, row: 2 });
    expect(settled).not.toMatch(/v1\.k1\./);
    for (const text of [queued, settled, pipeline.logs()]) {
      for (const secret of ['5555555555554444', '378282246310005', '"864"', '"9753"', ',864,', ',9753']) expect(text).not.toContain(secret);
    }
  });
});
