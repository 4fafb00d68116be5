/**
 * The rows queue's batch jobs (src/workers/rowWorker.ts): a batch runs its rows
 * once each, leaves a row with a job of its own to that job, reconciles a row
 * an earlier run may have sent, and hands a refused row to a row job that
 * keeps it failed for the dashboard without sending it again.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { BLANK_CUSTOMER_INPUT } from '../../src/csv/rows.js';
import { importFile } from '../../src/import/producer.js';
import { BATCH_JOB, batchJobId, getRowJob, rowJobOptions, ROWS_PER_BATCH } from '../../src/queue/queues.js';
import { startWorkers } from '../../src/runtime.js';
import type { SandboxRequest } from '../../src/sandbox/server.js';
import { waitFinished } from '../support/imports.js';
import { startPipeline, until, type Pipeline, releaseBacklog } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

async function enqueueOnly(p: Pipeline, content: string): Promise<string> {
  const { store, queues, keyring, logger } = p.runtime;
  const result = await importFile({ file: await p.file('rows.csv', content) }, { store, queues, keyring, logger });
  expect(result.outcome).toBe('enqueued');
  // Its batches into the rows queue now (the workers' feeder would release them in turn).
  await releaseBacklog(p.runtime);
  return result.importId;
}

/** Records the sandbox's requests by method and endpoint. */
function requestLog(p: Pipeline): SandboxRequest[] {
  const seen: SandboxRequest[] = [];
  p.sandbox.intercept((request) => seen.push(request));
  return seen;
}

describe('batch jobs', () => {
  it('run each row once, leave a row that has a job of its own to it, and reconcile a row that may have been sent', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues } = pipeline.runtime;
    // Three blocks of rows: two whole batches and ten rows.
    const rows = 2 * ROWS_PER_BATCH + 10;
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= rows; i++) lines.push(`Row${i},Batch,row${i}@example.com`);
    const id = await enqueueOnly(pipeline, `${lines.join('\n')}\n`);
    expect((await queues.rows.getPrioritized(0, -1)).map((job) => [job.name, job.id]).sort()).toEqual([
      [BATCH_JOB, batchJobId(id, 0)],
      [BATCH_JOB, batchJobId(id, 1)],
      [BATCH_JOB, batchJobId(id, 2)],
    ]);

    // Row 3 was sent by a run that died before its answer came: the customer exists.
    const sent = pipeline.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: 'Row3', LastName: 'Batch', EmailAddress: 'row3@example.com' });
    const row3 = await store.getRow(id, 3);
    await store.updateUnsettled(id, 3, { ...row3!, status: 'sent', attempts: 1 });
    // Row 30 has a job of its own (retried from the dashboard, say), delayed: its batch must not run it.
    const row30 = await store.getRow(id, 30);
    await store.updateUnsettled(id, 30, { ...row30!, handed: true });
    await queues.rows.add('customer.create', { importId: id, row: 30 }, { ...rowJobOptions(id, 30), delay: 1500 });

    const seen = requestLog(pipeline);
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 8 });
    await expect.poll(async () => (await getRowJob(queues, id, 30))?.getState(), { timeout: 10_000 }).toBe('delayed');
    const status = await waitFinished(pipeline, id);

    expect(status.counts).toMatchObject({ created: rows - 1, reconciled: 1 });
    const customers = pipeline.sandbox.store.customers();
    expect(customers).toHaveLength(rows);
    expect(new Set(customers.map((c) => c.FirstName)).size).toBe(rows);
    expect(await store.getRow(id, 3)).toMatchObject({ status: 'reconciled', customerId: sent.CustomerID });
    // One create per row but row 3, which read back instead; row 30 was created once, by its own job.
    const creates = seen.filter((r) => r.endpoint === 'createCustomer');
    expect(creates).toHaveLength(rows - 1);
    expect(seen.filter((r) => r.endpoint === 'searchCustomers').length).toBeGreaterThanOrEqual(1);
  });

  it('hand a refused row to a row job that settles it failed without sending it again, and stays failed for the dashboard', async () => {
    pipeline = await startPipeline({ workers: false });
    const { queues } = pipeline.runtime;
    const id = await enqueueOnly(
      pipeline,
      [
        'Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
        'Ana,Good,4111111111111111,321,1230,STREAM-PLUS',
        'Old,Refused,378282246310005,9753,1230,LEGACY-2019',
      ].join('\n'),
    );
    const seen = requestLog(pipeline);
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4 });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ 'signed-up': 1, failed: 1 });

    expect(seen.filter((r) => r.endpoint === 'signUp')).toHaveLength(2);
    const kept = await getRowJob(queues, id, 2);
    expect(await kept?.getState()).toBe('failed');
    expect(kept?.failedReason).toMatch(/LEGACY-2019|Retired|not active/i);
    // Settled: the card data is gone from it, and so is everything of its batch.
    expect(kept?.data).toEqual({ importId: id, row: 2 });
    expect(await queues.rows.getJob(batchJobId(id, 0))).toBeUndefined();
  });

  it('let go of a card row\'s sealed cells in the batch\'s data once the row has settled', async () => {
    // One request slot: the batch's rows go one after another, each 100 ms at the sandbox.
    pipeline = await startPipeline({ workers: false, faults: { latencyMs: 100 } });
    const { queues } = pipeline.runtime;
    const id = await enqueueOnly(
      pipeline,
      [
        'Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
        'Ana,First,4111111111111111,321,1230,STREAM-PLUS',
        'Ben,Second,5555555555554444,654,1230,STREAM-PLUS',
      ].join('\n'),
    );
    expect(Object.keys((await queues.rows.getJob(batchJobId(id, 0)))?.data.secrets ?? {})).toEqual(['1', '2']);
    // While row 2's sign-up is at the sandbox (row 1 has settled), what does the batch hold?
    let held: Promise<unknown> | undefined;
    let signUps = 0;
    pipeline.sandbox.intercept((request) => {
      if (request.endpoint === 'signUp' && ++signUps === 2) held = queues.rows.getJob(batchJobId(id, 0)).then((job) => job?.data);
    });
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 1 });
    await waitFinished(pipeline, id);
    expect(held).toBeDefined();
    expect(await held).toMatchObject({ importId: id, rows: [1, 2], secrets: { '2': expect.stringMatching(/^v1\./) } });
    expect(Object.keys(((await held) as { secrets: Record<string, string> }).secrets)).toEqual(['2']);
  });

  it('start no more rows once their worker is closing: the batch goes back to wait, and the next worker runs the rest once each', async () => {
    pipeline = await startPipeline({ workers: false, seed: false, faults: { latencyMs: 150 } });
    const { store, queues } = pipeline.runtime;
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= 25; i++) lines.push(`Row${i},Closing,row${i}@example.com`);
    const id = await enqueueOnly(pipeline, `${lines.join('\n')}\n`);

    const first = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    await until(async () => ((await store.counts(id)).settled >= 2 ? true : undefined), 'two rows to settle');
    await first.rows.close();
    await first.control?.close();
    // The rows out at the API finished; the rest were not started, and their batch waits for another worker.
    const settledByFirst = (await store.counts(id)).settled;
    expect(settledByFirst).toBeLessThan(25);
    expect(await (await queues.rows.getJob(batchJobId(id, 0)))?.getState()).toBe('prioritized');
    const ledger = await store.getRows(id, Array.from({ length: 25 }, (_, i) => i + 1));
    expect(ledger.filter((e) => e?.status === 'pending')).toHaveLength(25 - settledByFirst);
    expect(pipeline.sandbox.store.customers()).toHaveLength(settledByFirst);

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4 });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ created: 25 });
    expect(new Set(pipeline.sandbox.store.customers().map((c) => c.FirstName)).size).toBe(25);
    expect(pipeline.sandbox.store.customers()).toHaveLength(25);
  });

  it('keep the card cells of the rows a closing worker did not start, so the next worker signs them up', async () => {
    pipeline = await startPipeline({ workers: false, faults: { latencyMs: 150 } });
    const { store, queues } = pipeline.runtime;
    const lines = ['Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode'];
    for (let i = 1; i <= 6; i++) lines.push(`Row${i},Deferred,4111111111111111,321,1230,STREAM-PLUS`);
    const id = await enqueueOnly(pipeline, lines.join('\n'));

    const first = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 1 });
    await until(async () => ((await store.counts(id)).settled >= 1 ? true : undefined), 'a row to settle');
    await first.rows.close();
    await first.control?.close();
    const batch = await queues.rows.getJob(batchJobId(id, 0));
    expect(await batch?.getState()).toBe('prioritized');
    const settledByFirst = (await store.counts(id)).settled;
    expect(settledByFirst).toBeLessThan(6);
    // Settled rows' cells are gone from the batch; the others' are kept for its next run.
    expect(Object.keys(batch?.data.secrets ?? {})).toHaveLength(6 - settledByFirst);

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ 'signed-up': 6, failed: 0 });
  });
});

