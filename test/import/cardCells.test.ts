/**
 * A card row whose sealed cells Redis lost with its job reads them again from
 * its import's file, when that file is still at its path with the bytes
 * imported (src/import/cardCells.ts), and runs; a file gone or changed leaves
 * the row failed, saying the card data was lost. The card data is never
 * written in clear: not in the journal, Redis, the logs or the results.
 * Real Redis, the sandbox over HTTP.
 */
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Job } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { openSecrets } from '../../src/cards/crypto.js';
import { createCardCells } from '../../src/import/cardCells.js';
import { importFile } from '../../src/import/producer.js';
import { sweepImport } from '../../src/import/sweep.js';
import { batchJobId, type RowBatchData } from '../../src/queue/queues.js';
import { CARD_DATA_GONE } from '../../src/queue/requeue.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { startWorkers } from '../../src/runtime.js';
import { waitFinished } from '../support/imports.js';
import { redisText, releaseBacklog, startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

// American Express numbers: their 4-digit CVCs are told apart from anything else in what is scanned.
const CARDS = ['378282246310005', '371449635398431', '378734493671000'];
const CVCS = ['7391', '8264', '9157'];

const signups = (last: string): string =>
  [
    'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
    ...CARDS.map((card, i) => `Su${i + 1},${last},su${i + 1}.${last.toLowerCase()}@example.com,${card},${CVCS[i]},1230,STREAM-PLUS`),
  ].join('\n');

const cardUpdates = (): string =>
  ['PaymentMethodKey,AccountNumber,ExpirationDate,CVCode', ...CARDS.map((card, i) => `${SEED_PAYMENT_METHOD_KEYS[i]},${card},1231,${CVCS[i]}`)].join('\n');

/** Imports `content`, its journal kept in the data dir, its batches released to the rows queue. */
async function enqueue(p: Pipeline, name: string, content: string): Promise<{ id: string; file: string }> {
  const { store, queues, keyring, logger, journal } = p.runtime;
  const file = await p.file(name, `${content}\n`);
  const result = await importFile({ file }, { store, queues, keyring, logger, journal });
  expect(result.outcome).toBe('enqueued');
  await releaseBacklog(p.runtime);
  return { id: result.importId, file };
}

/** Every text written: the data dir's files (the journal, the results), Redis, the logs. */
async function everythingWritten(p: Pipeline, inputs: string[]): Promise<string> {
  const texts: string[] = [await redisText(p.runtime.redis, p.runtime.config.queuePrefix), p.logs()];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else if (!inputs.includes(full)) texts.push(await readFile(full, 'utf8'));
    }
  };
  await walk(p.runtime.config.dataDir);
  return texts.join('\n');
}

function expectNoCardData(text: string): void {
  for (const card of CARDS) expect(text).not.toContain(card);
  for (const cvc of CVCS) expect(text).not.toMatch(new RegExp(`(?<!\\d)${cvc}(?!\\d)`));
}

describe('card cells read again from the import file', () => {
  it('seals a row\'s card cells from the unchanged file, and gives nothing once the file changed or is gone', async () => {
    pipeline = await startPipeline({ workers: false });
    const { runtime } = pipeline;
    const { id, file } = await enqueue(pipeline, 'reread-signups.csv', signups('Reread'));
    const record = (await runtime.store.getImport(id))!;
    const cards = createCardCells({ journal: runtime.journal, keyring: runtime.keyring, logger: runtime.logger });
    const plan = record.paths;
    const [one, three] = await Promise.all([cards.reseal(record, 1), cards.reseal(record, 3)]);
    for (const [token, i] of [[one, 0], [three, 2]] as const) {
      expect(token).toBeDefined();
      const opened = Object.entries(openSecrets(runtime.keyring!, token!)).map(([index, value]) => [plan[Number(index)], value]);
      expect(Object.fromEntries(opened)).toEqual({ 'CreditCardInfo.AccountNumber': CARDS[i], 'CreditCardInfo.CVCode': CVCS[i] });
    }
    // The journal says where the file is and its digest, never what it holds.
    expectNoCardData(await readFile(path.join(runtime.config.dataDir, 'journal', `${id}.json`), 'utf8'));

    // Changed at its path (one card number edited): nothing is read from it.
    await writeFile(file, `${signups('Reread').replace(CARDS[1]!, '340000000000009')}\n`);
    expect(await cards.reseal(record, 1)).toBeUndefined();
    await rm(file);
    expect(await cards.reseal(record, 1)).toBeUndefined();
    expect(pipeline.logs()).toMatch(/no longer at its path/);
    expectNoCardData(await everythingWritten(pipeline, [file]));
  });

  it('a sign-up and a card update whose jobs Redis lost run with their card data read again, and no card data is written anywhere', async () => {
    pipeline = await startPipeline({ workers: false });
    const { runtime } = pipeline;
    const { store, queues } = runtime;
    const up = await enqueue(pipeline, 'lost-signups.csv', signups('Relost'));
    const cardsImport = await enqueue(pipeline, 'lost-cards.csv', cardUpdates());
    // Redis lost the batches (and with them the only sealed copy of the card data).
    for (const id of [up.id, cardsImport.id]) await (await queues.rows.getJob(batchJobId(id, 0)))?.remove();
    pipeline.workers = startWorkers(runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4, backoff: { baseMs: 20, capMs: 200 }, sweep: { intervalMs: 60_000 } });
    // The sweep (a worker's, which reads the files again) queues the rows with their cells.
    for (const id of [up.id, cardsImport.id]) {
      expect(await sweepImport(store, queues, id, createCardCellsOf(pipeline))).toMatchObject({ requeued: [1, 2, 3], withoutCards: [] });
    }
    expect((await waitFinished(pipeline, up.id)).counts).toMatchObject({ 'signed-up': 3 });
    expect((await waitFinished(pipeline, cardsImport.id)).counts).toMatchObject({ updated: 3 });
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Relost')).toHaveLength(3);
    SEED_PAYMENT_METHOD_KEYS.slice(0, 3).forEach((key, i) => expect(pipeline!.sandbox.store.paymentMethod(key)?.card.AccountNumber).toBe(CARDS[i]));
    expectNoCardData(await everythingWritten(pipeline, [up.file, cardsImport.file]));
  });

  it('a sign-up whose batch came back without its card data runs with it read again from the file', async () => {
    pipeline = await startPipeline({ workers: false });
    const { runtime } = pipeline;
    const up = await enqueue(pipeline, 'bare-signups.csv', signups('Bare'));
    // The batch is there, but without its sealed cells (a rollback brought it back from before they were written).
    const batch = (await runtime.queues.rows.getJob(batchJobId(up.id, 0))) as Job<RowBatchData> | undefined;
    const { secrets: _gone, ...bare } = batch!.data;
    await batch!.updateData(bare);
    pipeline.workers = startWorkers(runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4, backoff: { baseMs: 20, capMs: 200 } });
    expect((await waitFinished(pipeline, up.id)).counts).toMatchObject({ 'signed-up': 3 });
    expectNoCardData(await everythingWritten(pipeline, [up.file]));
  });

  it('with the file gone, a sign-up whose job Redis lost reads back, and fails saying its card data was lost', async () => {
    pipeline = await startPipeline({ workers: false });
    const { runtime } = pipeline;
    const up = await enqueue(pipeline, 'gone-signups.csv', signups('Gone'));
    await (await runtime.queues.rows.getJob(batchJobId(up.id, 0)))?.remove();
    await rm(up.file);
    pipeline.workers = startWorkers(runtime, { apiUrl: pipeline.sandbox.url, concurrency: 4, backoff: { baseMs: 20, capMs: 200 }, sweep: { intervalMs: 60_000 } });
    await sweepImport(runtime.store, runtime.queues, up.id, createCardCellsOf(pipeline));
    const status = await waitFinished(pipeline, up.id);
    expect(status.counts).toMatchObject({ failed: 3 });
    expect((await runtime.store.getRow(up.id, 2))?.note).toBe(CARD_DATA_GONE);
    expect(pipeline.sandbox.store.customers().filter((c) => c.LastName === 'Gone')).toHaveLength(0);
  });
});

function createCardCellsOf(p: Pipeline) {
  return createCardCells({ journal: p.runtime.journal, keyring: p.runtime.keyring, logger: p.runtime.logger });
}
