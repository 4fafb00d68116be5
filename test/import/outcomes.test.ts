/**
 * Every row reaches an outcome: a batch that fails for good hands its rows
 * on, a worker without the card key leaves card jobs to one that has it, the
 * sweep and `retry` queue rows whose jobs are gone, `import --wait` never
 * waits for ever, and a vanished import is one line. Real Redis, the sandbox
 * over HTTP.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import type { Job } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { ImportStalledError, EXIT_CODES, exitReportFor } from '../../src/cli/exitCodes.js';
import { waitForImport } from '../../src/cli/import.js';
import { FileRejectedError } from '../../src/csv/errors.js';
import { BLANK_CUSTOMER_INPUT } from '../../src/csv/rows.js';
import { createLogger } from '../../src/log.js';
import { importFile, scanFile } from '../../src/import/producer.js';
import { retryRows } from '../../src/import/retry.js';
import { ImportNotFoundError } from '../../src/import/status.js';
import { sweepImport } from '../../src/import/sweep.js';
import { batchJobId, getRowJob, ROWS_PER_BATCH, type RowBatchData } from '../../src/queue/queues.js';
import { openRuntime, startWorkers, type Runtime } from '../../src/runtime.js';
import { waitFinished } from '../support/imports.js';
import { startPipeline, until, type Pipeline, releaseBacklog } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
const others: Runtime[] = [];
afterEach(async () => {
  for (const runtime of others.splice(0)) await runtime.close();
  await pipeline?.close();
  pipeline = undefined;
});

async function enqueue(p: Pipeline, content: string, attempts?: number): Promise<string> {
  const { store, queues, keyring, logger } = p.runtime;
  const result = await importFile({ file: await p.file(`rows-${Math.random().toString(36).slice(2)}.csv`, content), attempts }, { store, queues, keyring, logger });
  expect(result.outcome).toBe('enqueued');
  // Its batches into the rows queue now (the workers' feeder would release them in turn).
  await releaseBacklog(p.runtime);
  return result.importId;
}

function customersCsv(n: number, last = 'Outcome'): string {
  const lines = ['FirstName,LastName,EmailAddress'];
  for (let i = 1; i <= n; i++) lines.push(`Row${i},${last},row${i}.${last.toLowerCase()}@example.com`);
  return `${lines.join('\n')}\n`;
}

const SIGNUPS = [
  'Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
  'Ana,Keyed,4111111111111111,321,1230,STREAM-PLUS',
  'Ben,Keyed,5555555555554444,654,1230,STREAM-PLUS',
].join('\n');

/** A second process of the fleet on the same Redis prefix and sandbox, without a card key; its log lines are kept. */
async function keylessRuntime(p: Pipeline): Promise<{ runtime: Runtime; logs: () => string }> {
  let text = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      text += chunk.toString('utf8');
      done();
    },
  });
  const runtime = await openRuntime({ ...p.runtime.config, cardKey: undefined }, createLogger({ level: 'info', destination: sink }));
  others.push(runtime);
  return { runtime, logs: () => text };
}

describe('every row reaches an outcome', () => {
  it('a card batch taken by a worker without the key goes back without spending an attempt, and a worker with the key runs it', async () => {
    pipeline = await startPipeline({ workers: false });
    const id = await enqueue(pipeline, SIGNUPS);
    const keyless = await keylessRuntime(pipeline);
    const handles = startWorkers(keyless.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    expect(keyless.logs()).toContain('this worker has no SUBSYNC_CARD_KEY: it will leave card and sign-up rows to workers that have the key');
    const batch = await until(async () => {
      const job = await pipeline?.runtime.queues.rows.getJob(batchJobId(id, 0));
      return job && (await job.getState()) === 'delayed' ? job : undefined;
    }, 'the keyless worker to put the batch back');
    expect(batch.attemptsMade).toBe(0);
    expect(Object.keys((batch.data as RowBatchData).secrets ?? {})).toEqual(['1', '2']);
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Keyed')).toHaveLength(0);
    await handles.rows.close();

    // `import --wait` with only keyless workers says so rather than waiting for ever.
    const stillKeyless = startWorkers(keyless.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2, control: false });
    await expect(waitForImport(pipeline.runtime, id, undefined, { pollMs: 50, quietMs: 100, giveUpMs: 300 })).rejects.toThrow(/lacks SUBSYNC_CARD_KEY/);
    await stillKeyless.rows.close();

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2, backoff: { baseMs: 20, capMs: 200 } });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ 'signed-up': 2, failed: 0 });
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Keyed')).toHaveLength(2);
  });

  it('a batch that fails unrecoverably hands its rows to row jobs, which run them once each', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { queues } = pipeline.runtime;
    const id = await enqueue(pipeline, customersCsv(5, 'Handed'));
    // A row the ledger does not know makes the batch unrecoverable.
    const batch = (await queues.rows.getJob(batchJobId(id, 0))) as Job<RowBatchData> | undefined;
    await batch?.updateData({ importId: id, rows: [1, 2, 3, 4, 5, 999] });
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4, backoff: { baseMs: 20, capMs: 200 } });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ created: 5 });
    expect(pipeline.sandbox.store.customers()).toHaveLength(5);
    expect(await queues.rows.getJob(batchJobId(id, 0))).toBeUndefined();
    expect(await pipeline.runtime.store.getRow(id, 3)).toMatchObject({ status: 'created', handed: true });
  });

  it('a batch whose attempts run out against a broken ledger leaves no row without an outcome: the sweep queues its rows with their card data', async () => {
    pipeline = await startPipeline({ workers: false });
    const { store, queues, redis } = pipeline.runtime;
    const id = await enqueue(pipeline, SIGNUPS, 2);
    // The ledger unreadable (a Redis fault every read hits): both attempts of the batch fail.
    const ledger = store.keys.ledger(id);
    await redis.rename(ledger, `${ledger}:aside`);
    await redis.set(ledger, 'not a hash');
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2, backoff: { baseMs: 20, capMs: 200 }, sweep: { intervalMs: 60_000 } });
    const failed = await until(async () => {
      const job = await queues.rows.getJob(batchJobId(id, 0));
      // Read again once failed: the job read before its state may predate its last attempt.
      return job && (await job.getState()) === 'failed' ? queues.rows.getJob(batchJobId(id, 0)) : undefined;
    }, 'the batch to fail for good');
    expect(failed.attemptsMade).toBe(2);
    expect((await store.counts(id)).settled).toBe(0);

    await redis.del(ledger);
    await redis.rename(`${ledger}:aside`, ledger);
    const reports = await pipeline.workers.sweeper.runOnce(Date.now() + 3_600_000);
    expect(reports.find((r) => r.importId === id)).toMatchObject({ unsettled: 2, live: 0, requeued: [1, 2], withoutCards: [] });
    // The dead batch, which held the card data, is gone: the row jobs hold it now.
    expect(await queues.rows.getJob(batchJobId(id, 0))).toBeUndefined();
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ 'signed-up': 2 });
  });

  it('the sweep queues again rows whose jobs were deleted, and a sent row reads back instead of creating twice', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues } = pipeline.runtime;
    // A whole batch, then five rows in a second one.
    const rows = ROWS_PER_BATCH + 5;
    const second = Array.from({ length: 5 }, (_, i) => ROWS_PER_BATCH + 1 + i);
    const lost = ROWS_PER_BATCH + 2;
    const id = await enqueue(pipeline, customersCsv(rows, 'Swept'));
    // One row of the second batch was sent by a worker that died before its answer: the customer exists.
    const sent = pipeline.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: `Row${lost}`, LastName: 'Swept', EmailAddress: `row${lost}.swept@example.com` });
    await store.updateUnsettled(id, lost, { ...(await store.getRow(id, lost))!, status: 'sent', attempts: 1 });
    // The second batch is deleted by hand.
    await (await queues.rows.getJob(batchJobId(id, 1)))?.remove();
    expect(await sweepImport(store, queues, id)).toMatchObject({ unsettled: rows, live: ROWS_PER_BATCH, requeued: second });
    // Swept again: every row has a live job now, nothing is added twice.
    expect(await sweepImport(store, queues, id)).toMatchObject({ unsettled: rows, live: rows, requeued: [] });
    expect(await (await getRowJob(queues, id, lost))?.getState()).toBe('waiting');

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4, backoff: { baseMs: 20, capMs: 200 } });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ created: rows - 1, reconciled: 1 });
    expect(await store.getRow(id, lost)).toMatchObject({ status: 'reconciled', customerId: sent.CustomerID });
    expect(pipeline.sandbox.store.customers()).toHaveLength(rows);
  });

  it("an import enqueued with 25-row batches (its record names no size, as an older producer left it) keeps them: resumed, swept and retried by its own blocks", async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues, keyring, logger } = pipeline.runtime;
    const file = await pipeline.file('legacy.csv', customersCsv(60, 'Legacy'));
    // The id the producer gives the file, so the record below is the one it finds.
    const { digest: id } = await scanFile(file, 'customers');
    // An older producer created the record and stopped before queuing anything.
    await store.createImport({ id, file: 'legacy.csv', kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAddress'], paths: ['FirstName', 'LastName', 'EmailAddress'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
    expect((await importFile({ file }, { store, queues, keyring, logger })).outcome).toBe('enqueued');
    expect((await store.getImport(id))?.batchRows).toBeUndefined();
    // Three batches of 25 rows, whatever size new imports get.
    expect(await releaseBacklog(pipeline.runtime)).toBe(3);
    const rows = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);
    expect((await queues.rows.getJob(batchJobId(id, 1)))?.data).toEqual({ importId: id, rows: rows(26, 50) });
    // The second batch is lost: the sweep finds its rows, and only those.
    await (await queues.rows.getJob(batchJobId(id, 1)))?.remove();
    expect(await sweepImport(store, queues, id)).toMatchObject({ unsettled: 60, live: 35, requeued: rows(26, 50) });
    // A row of the third batch is left to that batch's job.
    await expect(retryRows(store, queues, id, 55)).rejects.toThrow(/row 55 is pending and its job will run it/);

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4 });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ created: 60 });
    expect(pipeline.sandbox.store.customers()).toHaveLength(60);
  });

  it('the workers sweep by themselves', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { queues } = pipeline.runtime;
    const id = await enqueue(pipeline, customersCsv(3, 'Periodic'));
    await (await queues.rows.getJob(batchJobId(id, 0)))?.remove();
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2, sweep: { intervalMs: 100, quietMs: 0 } });
    const status = await waitFinished(pipeline, id);
    expect(status.counts).toMatchObject({ created: 3 });
    expect(pipeline.logs()).toContain('sweep: rows of this import had no job that would run them');
  });

  it('retry takes pending and sent rows that no job will run, and leaves those a job will run', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues } = pipeline.runtime;
    // A whole batch, and a second one whose job stays.
    const rows = ROWS_PER_BATCH + 5;
    const id = await enqueue(pipeline, customersCsv(rows, 'Retried'));
    await store.updateUnsettled(id, 2, { ...(await store.getRow(id, 2))!, status: 'sent', attempts: 1 });
    await expect(retryRows(store, queues, id, 2)).rejects.toThrow(/row 2 is sent and its job will run it/);
    await (await queues.rows.getJob(batchJobId(id, 0)))?.remove();
    expect(await retryRows(store, queues, id, 2)).toEqual({ retried: [2], skipped: [] });
    // The rest of the first batch's rows; the second's job still runs its own.
    const all = await retryRows(store, queues, id);
    expect(all.retried).toEqual(Array.from({ length: ROWS_PER_BATCH }, (_, i) => i + 1).filter((r) => r !== 2));

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4 });
    const status = await waitFinished(pipeline, id);
    // Row 2 was never really sent: it read back, found nothing, and was created.
    expect(status.counts).toMatchObject({ created: rows });
    expect(pipeline.sandbox.store.customers()).toHaveLength(rows);
  });

  it('import --wait stops, saying what to start, when no worker runs the rows; and a vanished import is one line', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const id = await enqueue(pipeline, customersCsv(2, 'Waiting'));
    const stalled = waitForImport(pipeline.runtime, id, undefined, { pollMs: 50, quietMs: 100, giveUpMs: 300 });
    await expect(stalled).rejects.toBeInstanceOf(ImportStalledError);
    await expect(stalled).rejects.toThrow(/2 rows of import .* have no outcome, and no subsync worker is running .* start one/);
    const report = exitReportFor(await stalled.catch((e: unknown) => e));
    expect(report.code).toBe(EXIT_CODES.stalled);
    expect(report.message?.split('\n')).toHaveLength(1);

    const { redis, store } = pipeline.runtime;
    await redis.del(store.keys.importRecord(id), store.keys.ledger(id), store.keys.counts(id));
    const vanished = await waitForImport(pipeline.runtime, id, undefined, { pollMs: 50 }).catch((e: unknown) => e);
    expect(vanished).toBeInstanceOf(ImportNotFoundError);
    const told = exitReportFor(vanished);
    expect(told.code).toBe(EXIT_CODES.notFound);
    expect(told.message).toMatch(/^subsync: import \w+ vanished from Redis/);
    expect(told.message).not.toContain('    at ');
    expect(told.message?.split('\n')).toHaveLength(1);
  });

  it('--force is refused while an earlier import of the same bytes has rows without an outcome', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues, keyring, logger } = pipeline.runtime;
    const file = await pipeline.file('forced.csv', customersCsv(3, 'Forced'));
    const first = await importFile({ file }, { store, queues, keyring, logger });
    expect(first.outcome).toBe('enqueued');
    const refused = importFile({ file, force: true }, { store, queues, keyring, logger });
    await expect(refused).rejects.toBeInstanceOf(FileRejectedError);
    await expect(refused).rejects.toThrow(new RegExp(`--force refused: import ${first.importId} of the same bytes still has 3 rows without an outcome`));
    expect(await store.listImportIds()).toEqual([first.importId]);

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    await waitFinished(pipeline, first.importId);
    await pipeline.workers.rows.close();
    await pipeline.workers.control?.close();
    const again = await importFile({ file, force: true, allowDuplicates: true }, { store, queues, keyring, logger });
    expect(again.outcome).toBe('enqueued');
    expect(again.importId).not.toBe(first.importId);
    // A second forced import while that one runs is refused too, naming it.
    await expect(importFile({ file, force: true }, { store, queues, keyring, logger })).rejects.toThrow(new RegExp(`import ${again.importId} of the same bytes`));
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    expect((await waitFinished(pipeline, again.importId)).counts).toMatchObject({ created: 3 });
  });

  it('import --wait stops when writing the results keeps failing, saying so', async () => {
    pipeline = await startPipeline({ seed: false });
    // A file where the results folder should be: every finalize fails.
    await writeFile(path.join(pipeline.dataDir, 'results'), 'not a folder');
    const id = await enqueue(pipeline, customersCsv(2, 'Unwritten'));
    const stalled = waitForImport(pipeline.runtime, id, undefined, { pollMs: 50, quietMs: 100, giveUpMs: 300 });
    await expect(stalled).rejects.toThrow(/every row of import \w+ has an outcome, but writing its results keeps failing/);
    expect((await pipeline.runtime.store.counts(id)).settled).toBe(2);
    // The worker's log says why.
    expect(pipeline.logs()).toMatch(/"place":"control job import.finalize","code":"(EEXIST|ENOTDIR)"/);
  });
});
