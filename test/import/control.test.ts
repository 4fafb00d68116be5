import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { cancelImport, pauseImport, resumeImport, RunControlError } from '../../src/import/control.js';
import { importFile } from '../../src/import/producer.js';
import { RetryError, retryRows } from '../../src/import/retry.js';
import { RUN_STATE_CACHE_MS, readRunState } from '../../src/import/runState.js';
import { importStatus } from '../../src/import/status.js';
import { createLogger } from '../../src/log.js';
import { openRuntime, startWorkers, type Runtime } from '../../src/runtime.js';
import { redisText, startPipeline, until, type Pipeline } from '../support/pipeline.js';
import { SIGNUPS_CSV, waitFinished } from '../support/imports.js';
import { startReceiver } from '../notify/receiver.js';
import { importSchedule } from '../../src/queue/feeder.js';

let pipeline: Pipeline | undefined;
const extra: Runtime[] = [];
afterEach(async () => {
  for (const runtime of extra.splice(0)) await runtime.close();
  await pipeline?.close();
  pipeline = undefined;
});

const CsvSchema = z.array(z.record(z.string(), z.string()));
async function readCsv(file: string): Promise<Array<Record<string, string>>> {
  return CsvSchema.parse(parse(await readFile(file, 'utf8'), { columns: true, bom: true }));
}

/** More row workers on the same Redis prefix and sandbox, each a runtime of its own (as another process would be). */
async function moreWorkers(p: Pipeline, count: number, concurrency: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const runtime = await openRuntime(p.runtime.config, createLogger({ level: 'warn', destination: process.stderr }));
    startWorkers(runtime, { apiUrl: p.sandbox.url, concurrency, backoff: { baseMs: 20, capMs: 200 } });
    extra.push(runtime);
  }
}

function deps(p: Pipeline) {
  return { store: p.runtime.store, queues: p.runtime.queues, redis: p.runtime.redis, logger: p.runtime.logger };
}

async function enqueue(p: Pipeline, file: string, request: Partial<Parameters<typeof importFile>[0]> = {}): Promise<string> {
  const { store, queues, keyring, logger, redis, notifier } = p.runtime;
  const result = await importFile({ file, sendEmptyPasswords: true, ...request }, { store, queues, keyring, logger, redis, notifier });
  expect(result.outcome).toBe('enqueued');
  return result.importId;
}

/** The sandbox's identities held by more than one customer (GET /_sandbox/duplicates, over HTTP). */
async function duplicates(p: Pipeline): Promise<unknown[]> {
  const body = z.object({ count: z.number(), identities: z.array(z.unknown()) }).parse(await (await fetch(`${p.sandbox.url}/_sandbox/duplicates`)).json());
  return body.identities;
}

const person = (i: number): string => `Ana${i},Lindqvist${i},ana.${i}.cancel@example.se,SWE`;

describe('cancel: nothing sent twice, nothing lost', () => {
  it('a cancel racing three workers: every row one outcome, each create at most once, cancelled rows never sent and imported again from unprocessed.csv', async () => {
    pipeline = await startPipeline({ faults: { latencyMs: 15 }, concurrency: 4, seedCustomers: 100 });
    await moreWorkers(pipeline, 2, 4);
    const p = pipeline;
    // Creates and updates mixed, a third of them updates: a create is marked sent before it leaves, an update is claimed.
    const seeded = p.sandbox.store.customers().slice(0, 80);
    expect(seeded).toHaveLength(80);
    const cell = (value: string): string => (/[",\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value);
    const lines = ['FirstName,LastName,EmailAddress,CountryCode,CustomerID,City'];
    const updates = new Map<number, string>();
    for (let i = 1; i <= 240; i++) {
      const customer = i % 3 === 0 ? seeded[i / 3 - 1] : undefined;
      if (customer) {
        lines.push([customer.FirstName, customer.LastName, customer.EmailAddress, customer.CountryCode || 'SWE', customer.CustomerID, `Cancelstad ${i}`].map(cell).join(','));
        updates.set(i, customer.CustomerID);
      } else lines.push(`${person(i)},,`);
    }
    const file = await p.file('race.csv', `${lines.join('\n')}\n`);
    const before = p.sandbox.stats().byEndpoint;
    const importId = await enqueue(p, file);
    // Some rows settled, many still queued or under way: cancel now.
    await until(async () => ((await importStatus(p.runtime.store, importId))?.settledRows ?? 0) >= 30 || undefined, 'some rows to settle');
    const cancel = await cancelImport(deps(p), importId);
    expect(cancel.before).toBe('running');
    expect(cancel.cancelled).toBeGreaterThan(0);

    const status = await waitFinished(p, importId);
    expect(status.runState).toBe('cancelled');
    expect(status.settledRows).toBe(240);
    const counts = status.counts;
    expect(counts.cancelled).toBeGreaterThanOrEqual(cancel.cancelled);
    expect(counts.created + counts.updated).toBeGreaterThanOrEqual(30);
    expect(counts.created + counts.updated + counts.cancelled).toBe(240);

    // Every row exactly one outcome in results.csv.
    const results = await readCsv(path.join(status.resultsDir ?? '', 'results.csv'));
    expect(results.map((r) => Number(r._row))).toEqual(Array.from({ length: 240 }, (_, i) => i + 1));
    expect(new Set(results.map((r) => r._status))).toEqual(new Set(['created', 'updated', 'cancelled']));

    // Nothing sent twice: no identity held twice, creates and updates sent once per row that had them.
    expect(await duplicates(p)).toEqual([]);
    const after = p.sandbox.stats().byEndpoint;
    const sent = (endpoint: string): number => (after[endpoint] ?? 0) - (before[endpoint] ?? 0);
    expect(sent('createCustomer')).toBe(counts.created);
    expect(sent('updateCustomer')).toBe(counts.updated);
    const customers = p.sandbox.store.customers();
    for (const r of results) {
      const row = Number(r._row);
      const customerId = updates.get(row);
      if (customerId) {
        const city = customers.find((c) => c.CustomerID === customerId)?.City;
        // A cancelled update never reached the service; an updated one did.
        if (r._status === 'cancelled') expect(city).not.toBe(`Cancelstad ${row}`);
        else expect(city).toBe(`Cancelstad ${row}`);
      } else {
        const held = customers.filter((c) => c.EmailAddress === `ana.${row}.cancel@example.se`).length;
        expect(held).toBe(r._status === 'cancelled' ? 0 : 1);
      }
    }

    // unprocessed.csv: the input's header and the cancelled rows' cells, and nothing else.
    const unprocessedFile = path.join(status.resultsDir ?? '', 'unprocessed.csv');
    const text = await readFile(unprocessedFile, 'utf8');
    expect(text.replace(/^\uFEFF/, '').split('\n')[0]).toBe(lines[0]);
    const unprocessed = await readCsv(unprocessedFile);
    const cancelledRows = results.filter((r) => r._status === 'cancelled');
    expect(unprocessed.map((r) => r.EmailAddress)).toEqual(cancelledRows.map((r) => r.EmailAddress));
    expect(Object.keys(unprocessed[0] ?? {})).toEqual(lines[0]?.split(','));

    // Dropped again, it imports cleanly and sends exactly the rows the cancel left.
    const again = await enqueue(p, unprocessedFile);
    const second = await waitFinished(p, again);
    expect(second.total).toBe(cancelledRows.length);
    const cancelledUpdates = cancelledRows.filter((r) => updates.has(Number(r._row))).length;
    expect(second.counts).toMatchObject({ created: cancelledRows.length - cancelledUpdates, updated: cancelledUpdates, invalid: 0, failed: 0, cancelled: 0 });
    expect(await duplicates(p)).toEqual([]);
    const everyone = p.sandbox.store.customers();
    for (let i = 1; i <= 240; i++) if (!updates.has(i)) expect(everyone.filter((c) => c.EmailAddress === `ana.${i}.cancel@example.se`)).toHaveLength(1);
    for (const [row, customerId] of updates) expect(everyone.find((c) => c.CustomerID === customerId)?.City).toBe(`Cancelstad ${row}`);
  });

  it('a cancelled import is cancelled by the time it is finished: no status read sees it finished and still cancelling', async () => {
    pipeline = await startPipeline({ faults: { latencyMs: 15 }, concurrency: 2 });
    const p = pipeline;
    const { store, redis } = p.runtime;
    // The run state as each finalize marks the import finished.
    const states: string[] = [];
    const markFinished = store.markFinished.bind(store);
    store.markFinished = async (...args: Parameters<typeof store.markFinished>) => {
      states.push((await readRunState(redis, store.keys, args[0])).state);
      return markFinished(...args);
    };
    const rows = Array.from({ length: 40 }, (_, i) => person(500 + i)).join('\n');
    const importId = await enqueue(p, await p.file('quick.csv', `FirstName,LastName,EmailAddress,CountryCode\n${rows}\n`));
    await cancelImport(deps(p), importId);
    const status = await waitFinished(p, importId);
    expect(status.runState).toBe('cancelled');
    expect(states).toEqual(['cancelled']);
  });

  it('a cancelled import cannot be resumed or paused, and cancelling it again changes nothing', async () => {
    pipeline = await startPipeline({ workers: false });
    const p = pipeline;
    const file = await p.file('idle.csv', `FirstName,LastName,EmailAddress,CountryCode\n${person(1)}\n${person(2)}\n`);
    const importId = await enqueue(p, file);
    // No worker runs: every row is pending and unclaimed, so the cancel settles them all.
    const cancel = await cancelImport(deps(p), importId);
    expect(cancel).toMatchObject({ cancelled: 2, inFlight: 0 });
    expect((await p.runtime.store.counts(importId)).byStatus.cancelled).toBe(2);
    await expect(resumeImport(deps(p), importId)).rejects.toBeInstanceOf(RunControlError);
    await expect(pauseImport(deps(p), importId)).rejects.toBeInstanceOf(RunControlError);
    // Nothing of it is sent again by a retry either: its rows would only settle cancelled.
    await expect(retryRows(p.runtime.store, p.runtime.queues, importId)).rejects.toBeInstanceOf(RetryError);
    expect((await cancelImport(deps(p), importId)).cancelled).toBe(0);
    expect(p.sandbox.stats().requests).toBe(0);
  });
});

describe('cancel and card data', () => {
  it('a cancelled sign-ups import writes no card number or CVC to unprocessed.csv, and its queued batches holding sealed cards go', async () => {
    pipeline = await startPipeline({ workers: false });
    const p = pipeline;
    const file = await p.file('signups.csv', SIGNUPS_CSV);
    const importId = await enqueue(p, file);
    // Its batch (sealed cards in it) waits in the import's backlog for its turn (no worker runs the feeder here).
    expect(await importSchedule(p.runtime.redis, p.prefix, importId)).toMatchObject({ backlogRows: 3, place: 1 });
    const cancel = await cancelImport(deps(p), importId);
    // Row 2 is invalid (settled at once); the three others were never sent.
    expect(cancel).toMatchObject({ cancelled: 3, inFlight: 0, state: 'cancelled' });
    expect(await importSchedule(p.runtime.redis, p.prefix, importId)).toMatchObject({ backlogRows: 0, place: undefined });
    expect(await p.runtime.queues.rows.getJobCounts('waiting', 'delayed', 'prioritized')).toMatchObject({ waiting: 0, delayed: 0, prioritized: 0 });
    startWorkers(p.runtime, { apiUrl: p.sandbox.url, concurrency: 2 });
    const status = await waitFinished(p, importId);
    expect(status.counts).toMatchObject({ cancelled: 3, invalid: 1 });
    expect(p.sandbox.stats().requests).toBe(0);
    const text = await readFile(path.join(status.resultsDir ?? '', 'unprocessed.csv'), 'utf8');
    for (const secret of ['4111111111111111', '4000056655665556', '737']) expect(text).not.toContain(secret);
    const unprocessed = await readCsv(path.join(status.resultsDir ?? '', 'unprocessed.csv'));
    expect(unprocessed.map((r) => r['Customer.FirstName'])).toEqual(['Amélie', 'Conor', 'Kenta']);
    expect(unprocessed.every((r) => r['CreditCardInfo.AccountNumber'] === '' && r['CreditCardInfo.CVCode'] === '')).toBe(true);
    expect(await redisText(p.runtime.redis, p.prefix)).not.toMatch(/4111111111111111|4000056655665556/);
  });
});

describe('pause and resume', () => {
  it('a paused import sends nothing until resumed, then finishes', async () => {
    pipeline = await startPipeline({ faults: { latencyMs: 15 }, concurrency: 4 });
    await moreWorkers(pipeline, 1, 4);
    const p = pipeline;
    const rows = Array.from({ length: 200 }, (_, i) => person(i + 1));
    const file = await p.file('pause.csv', `FirstName,LastName,EmailAddress,CountryCode\n${rows.join('\n')}\n`);
    const importId = await enqueue(p, file);
    await until(async () => ((await importStatus(p.runtime.store, importId))?.settledRows ?? 0) >= 20 || undefined, 'some rows to settle');
    const pause = await pauseImport(deps(p), importId);
    expect(pause).toMatchObject({ before: 'running', state: 'paused', changed: true });

    // The rows under way end; then no job of the queue is active or ready, and the rest of the import waits:
    // batches a worker had taken are held, and the feeder releases nothing more of its backlog.
    // A worker may go on for one cache period on the state it read before the pause (and the feeder may
    // release one batch it decided on before it), so the look at what waits starts after that.
    await new Promise((resolve) => setTimeout(resolve, 2 * RUN_STATE_CACHE_MS));
    const waiting = await until(async () => {
      const jobs = await p.runtime.queues.rows.getJobCounts('active', 'waiting', 'prioritized');
      if ((jobs.active ?? 0) + (jobs.waiting ?? 0) + (jobs.prioritized ?? 0) !== 0) return undefined;
      const held = await p.runtime.redis.scard(p.runtime.store.keys.heldJobs(importId));
      const { backlogRows } = await importSchedule(p.runtime.redis, p.prefix, importId);
      return held > 0 || backlogRows > 0 ? { held, backlogRows } : undefined;
    }, 'the rows under way to end');
    const requests = p.sandbox.stats().requests;
    const settled = (await importStatus(p.runtime.store, importId))?.settledRows ?? 0;
    expect(settled).toBeLessThan(200);
    // A look at it while paused, long enough for workers to take its held batches again: nothing moves.
    const lookUntil = Date.now() + 1500;
    while (Date.now() < lookUntil) {
      expect(p.sandbox.stats().requests).toBe(requests);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const paused = await importStatus(p.runtime.store, importId);
    expect(paused).toMatchObject({ runState: 'paused', settledRows: settled });

    const resume = await resumeImport(deps(p), importId);
    expect(resume).toMatchObject({ before: 'paused', state: 'running', changed: true });
    // Held batches go back at once; the backlog is the feeder's to release again.
    expect(resume.promoted).toBe(waiting.held);
    const status = await waitFinished(p, importId);
    expect(status.counts.created).toBe(200);
    expect(status.runState).toBe('running');
    expect(p.sandbox.stats().requests).toBeGreaterThan(requests);
    expect(await duplicates(p)).toEqual([]);
  });
});

describe('canary', () => {
  it('pauses the import when more of its rows than allowed did not succeed, holds the rest back, and runs on when resumed', async () => {
    pipeline = await startPipeline({ concurrency: 4 });
    const p = pipeline;
    // Rows 2 and 4 of the canary's 5 are invalid (settled by the producer); 1, 3 and 5 are created by workers.
    const rows = Array.from({ length: 40 }, (_, i) => person(i + 1));
    rows[1] = 'Bad,Email,not-an-email,SWE';
    rows[3] = 'Also,Bad,nope@,SWE';
    const file = await p.file('canary.csv', `FirstName,LastName,EmailAddress,CountryCode\n${rows.join('\n')}\n`);
    const importId = await enqueue(p, file, { canary: { rows: 5, maxFailures: 1 } });
    const paused = await until(async () => {
      const status = await importStatus(p.runtime.store, importId);
      return status?.runState === 'paused' ? status : undefined;
    }, 'the canary to pause the import');
    expect(paused.runReason).toMatch(/canary: 2 of the first 5 rows did not succeed \(more than 1 allowed\)/);
    expect(paused.settledRows).toBe(5);
    expect(paused.counts).toMatchObject({ created: 3, invalid: 2 });
    // Nothing after the canary's rows was sent.
    const emails = new Set(p.sandbox.store.customers().map((c) => c.EmailAddress));
    for (let i = 6; i <= 40; i++) expect(emails.has(`ana.${i}.cancel@example.se`)).toBe(false);

    await resumeImport(deps(p), importId);
    const status = await waitFinished(p, importId);
    expect(status.counts).toMatchObject({ created: 38, invalid: 2 });
    expect((await readRunState(p.runtime.redis, p.runtime.store.keys, importId)).state).toBe('running');
  });

  it('a canary within its bound lets the rest run by itself', async () => {
    pipeline = await startPipeline({ concurrency: 4 });
    const p = pipeline;
    const rows = Array.from({ length: 60 }, (_, i) => person(i + 1));
    rows[2] = 'Bad,Email,not-an-email,SWE';
    const file = await p.file('canary-ok.csv', `FirstName,LastName,EmailAddress,CountryCode\n${rows.join('\n')}\n`);
    const importId = await enqueue(p, file, { canary: { rows: 10, maxFailures: 1 } });
    const status = await waitFinished(p, importId);
    expect(status.counts).toMatchObject({ created: 59, invalid: 1 });
    expect(status.runState).toBe('running');
    expect(status.canary).toEqual({ rows: 10, maxFailures: 1, holding: false });
  });
});

describe('notifications of a pause and a cancel', () => {
  it('a canary that pauses its import tells import.paused with why; a cancel tells import.cancelled with who', async () => {
    const receiver = await startReceiver();
    try {
      pipeline = await startPipeline({ concurrency: 2, config: { webhookUrl: receiver.url, webhookSecret: 'notify-secret' } });
      const p = pipeline;
      const rows = Array.from({ length: 30 }, (_, i) => person(i + 1));
      rows[1] = 'Bad,Email,not-an-email,SWE';
      const file = await p.file('notify.csv', `FirstName,LastName,EmailAddress,CountryCode\n${rows.join('\n')}\n`);
      const importId = await enqueue(p, file, { canary: { rows: 3, maxFailures: 0 } });
      const events = async (name: string) => receiver.received.map((r) => JSON.parse(r.body) as { event: string; importId: string; text?: string }).filter((e) => e.event === name && e.importId === importId);
      const paused = await until(async () => (await events('import.paused'))[0], 'import.paused to be delivered');
      expect(JSON.stringify(paused)).toContain('canary: 1 of the first 3 rows did not succeed');
      await cancelImport({ ...deps(p), notifier: p.runtime.notifier, actor: 'cli:tester' }, importId);
      const cancelled = await until(async () => (await events('import.cancelled'))[0], 'import.cancelled to be delivered');
      expect(JSON.stringify(cancelled)).toContain('cli:tester');
      expect(await waitFinished(p, importId)).toMatchObject({ runState: 'cancelled' });
    } finally {
      await receiver.close();
    }
  });
});
