import { UnrecoverableError, Worker } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { cardFieldsOf, editAndRetryRow, EditRefusedError } from '../../src/import/edit.js';
import { importFile } from '../../src/import/producer.js';
import { BATCH_JOB, ROWS_QUEUE, RowBatchDataSchema, rowJobId, rowJobOptions } from '../../src/queue/queues.js';
import { startWorkers } from '../../src/runtime.js';
import { importAndFinish, waitFinished } from '../support/imports.js';
import { redisText, releaseBacklog, startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const CUSTOMERS = ['FirstName,LastName,EmailAddress,City', 'Zoë,Dupont,zoe@example.fr,Lyon', 'Bad,Email,bad@,Leeds'].join('\n');

async function refusal(promise: Promise<unknown>): Promise<EditRefusedError> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(EditRefusedError);
  return error as EditRefusedError;
}

/** Imports without running any row, so tests can shape the ledger and jobs themselves. */
async function enqueueOnly(p: Pipeline, name: string, content: string): Promise<string> {
  const { store, queues, keyring, logger } = p.runtime;
  const result = await importFile({ file: await p.file(name, content) }, { store, queues, keyring, logger });
  expect(result.outcome).toBe('enqueued');
  // Its batches into the rows queue now (the workers' feeder would release them in turn).
  await releaseBacklog(p.runtime);
  return result.importId;
}

describe('editAndRetryRow', () => {
  it('fixes an invalid row, queues it, and the import settles again with the row created', async () => {
    pipeline = await startPipeline();
    const { store, queues, keyring } = pipeline.runtime;
    const first = await importAndFinish(pipeline, await pipeline.file('customers.csv', CUSTOMERS));
    expect(first.counts).toMatchObject({ created: 1, invalid: 1 });

    const still = await refusal(editAndRetryRow(store, queues, keyring, first.importId, 2, { EmailAddress: 'bad@still' }));
    expect(still.reason).toBe('invalid');
    expect(still.rowErrors).toEqual([expect.objectContaining({ row: 2, column: 'EmailAddress', rule: 'email' })]);
    expect((await store.getRow(first.importId, 2))?.status).toBe('invalid');

    const result = await editAndRetryRow(store, queues, keyring, first.importId, 2, { EmailAddress: 'bad.email@example.co.uk' });
    expect(result).toMatchObject({ row: 2, jobName: 'customer.create', state: 'pending', round: 1 });
    const second = await waitFinished(pipeline, first.importId, (s) => s.counts.created === 2);
    expect(second.counts).toMatchObject({ created: 2, invalid: 0 });
    expect(await store.getRow(first.importId, 2)).toMatchObject({ status: 'created', cells: ['Bad', 'Email', 'bad.email@example.co.uk', 'Leeds'] });
    expect(pipeline.sandbox.store.customers().filter((c) => c.EmailAddress === 'bad.email@example.co.uk')).toHaveLength(1);
  });

  it('refuses what it cannot do: a row that succeeded, a path that is not a column, card data as a change, a missing card', async () => {
    pipeline = await startPipeline();
    const { store, queues, keyring } = pipeline.runtime;
    const customers = await importAndFinish(pipeline, await pipeline.file('customers.csv', CUSTOMERS));
    expect((await refusal(editAndRetryRow(store, queues, keyring, customers.importId, 1, {}))).reason).toBe('not-editable');
    expect((await refusal(editAndRetryRow(store, queues, keyring, customers.importId, 2, { EmailAdress: 'x@y.z' }))).reason).toBe('unknown-column');
    expect((await refusal(editAndRetryRow(store, queues, keyring, customers.importId, 9, {}))).reason).toBe('no-row');
    expect((await refusal(editAndRetryRow(store, queues, keyring, 'nope', 1, {}))).reason).toBe('no-import');

    const signups = await importAndFinish(pipeline, await pipeline.file('signups.csv', [
      'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,CreditCardInfo.CVCode,Subscription.OfferCode',
      'Ana,Lima,ana@,4111111111111111,1230,737,STREAM-PLUS',
    ].join('\n')));
    const id = signups.importId;
    expect((await refusal(editAndRetryRow(store, queues, keyring, id, 1, { 'CreditCardInfo.AccountNumber': '4111111111111111' }))).reason).toBe('card-column');
    // The row never ran: its card number was never sealed into a job, and the ledger holds it masked.
    expect(await cardFieldsOf(store, queues, keyring, id, 1)).toEqual({ accountNumber: true, accountNumberNeeded: true, cvCode: true, password: false, passwordNeeded: false, passwordHeld: false });
    expect((await refusal(editAndRetryRow(store, queues, keyring, id, 1, { 'Customer.EmailAddress': 'ana@example.br' }))).reason).toBe('card-needed');
    const badCard = await refusal(editAndRetryRow(store, queues, keyring, id, 1, { 'Customer.EmailAddress': 'ana@example.br' }, { AccountNumber: '4111111111111112', CVCode: '737' }));
    expect(badCard.rowErrors.map((e) => e.rule)).toEqual(['card-number']);
    expect(badCard.message).not.toContain('4111111111111112');
    expect((await refusal(editAndRetryRow(store, queues, undefined, id, 1, { 'Customer.EmailAddress': 'ana@example.br' }, { AccountNumber: '4111111111111111' }))).reason).toBe('no-card-key');

    await editAndRetryRow(store, queues, keyring, id, 1, { 'Customer.EmailAddress': 'ana@example.br' }, { AccountNumber: '4111111111111111', CVCode: '737' });
    const done = await waitFinished(pipeline, id, (s) => s.counts['signed-up'] === 1);
    expect(done.counts.invalid).toBe(0);
    const text = await redisText(pipeline.runtime.redis, pipeline.prefix);
    expect(text).not.toContain('4111111111111111');
    expect(text).not.toContain('"737"');
  });

  it('reuses the card number still sealed in a failed row\'s job, and asks only for the CVC', async () => {
    pipeline = await startPipeline({ workers: false });
    const { store, queues, keyring, redis } = pipeline.runtime;
    const id = await enqueueOnly(pipeline, 'signups.csv', [
      'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,CreditCardInfo.CVCode,Subscription.OfferCode',
      'Kenta,Yamamoto,kenta@example.jp,4000056655665556,1230,737,LEGACY-2019',
    ].join('\n'));
    // A stand-in worker fails the row the way a refusal does: its batch hands it to a job of its own,
    // which settles it failed and is kept (with the sealed card) as failed, and the import stays open.
    const refuser = new Worker(ROWS_QUEUE, async (job) => {
      if (job.name === BATCH_JOB) {
        const { secrets } = RowBatchDataSchema.parse(job.data);
        await queues.rows.add('signup', { importId: id, row: 1, secrets: secrets?.['1'] }, rowJobOptions(id, 1));
        return;
      }
      const entry = await store.getRow(id, 1);
      if (entry) await store.settle(id, 1, { ...entry, status: 'failed', attempts: 1, note: 'offer LEGACY-2019 is Retired, not Active', handed: true });
      throw new UnrecoverableError('refused');
    }, { connection: redis, prefix: pipeline.prefix });
    await until(async () => ((await queues.rows.getJob(rowJobId(id, 1)))?.failedReason ? true : undefined), 'the row to fail');
    await refuser.close();

    expect(await cardFieldsOf(store, queues, keyring, id, 1)).toMatchObject({ accountNumberNeeded: false });
    await editAndRetryRow(store, queues, keyring, id, 1, { 'Subscription.OfferCode': 'NEWS-ANNUAL' }, { CVCode: '737' });
    expect((await store.getRow(id, 1))?.cells).toContain('************5556');
    startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 1 });
    const done = await waitFinished(pipeline, id, (s) => s.counts['signed-up'] === 1);
    expect(done.counts.failed).toBe(0);
  });

  it('keeps a needs-review create safe: it reads back first, and its identifying fields cannot change', async () => {
    pipeline = await startPipeline({ workers: false });
    const { store, queues, keyring } = pipeline.runtime;
    const id = await enqueueOnly(pipeline, 'customers.csv', 'FirstName,LastName,EmailAddress,City\nZoë,Dupont,zoe@example.fr,Lyon\n');
    const pending = await store.getRow(id, 1);
    expect(pending).toBeDefined();
    await store.settle(id, 1, { ...pending!, status: 'needs-review', attempts: 3, note: 'may have been applied', candidates: ['100010', '100011'] });

    // Its own job is still waiting: not now.
    await queues.rows.add('customer.create', { importId: id, row: 1 }, rowJobOptions(id, 1));
    expect((await refusal(editAndRetryRow(store, queues, keyring, id, 1, { City: 'Paris' }))).reason).toBe('busy');
    await (await queues.rows.getJob(rowJobId(id, 1)))?.remove();

    const locked = await refusal(editAndRetryRow(store, queues, keyring, id, 1, { EmailAddress: 'zoe.dupont@example.fr' }));
    expect(locked.reason).toBe('identity-locked');
    expect(locked.message).toContain('EmailAddress');
    // An unchanged identifying field sent back with the form is no change.
    const result = await editAndRetryRow(store, queues, keyring, id, 1, { EmailAddress: 'zoe@example.fr', City: 'Paris' });
    expect(result).toMatchObject({ state: 'sent', jobName: 'customer.create' });
    expect(await store.getRow(id, 1)).toMatchObject({ status: 'sent', attempts: 3, cells: ['Zoë', 'Dupont', 'zoe@example.fr', 'Paris'], handed: true });
    expect((await store.counts(id)).byStatus['needs-review']).toBe(0);
    expect((await queues.rows.getJob(rowJobId(id, 1)))?.name).toBe('customer.create');
  });
});
