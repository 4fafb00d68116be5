/**
 * The row protocol with its run gate (src/import/runGate.ts), driven without
 * a job runner of BullMQ's: paused rows do not start, and a cancel racing a
 * run is decided in Redis, whatever the run believed of the import's state.
 */
import { afterEach, describe, expect, it } from 'vitest';
import pino from 'pino';
import { createRunGate } from '../../src/import/runGate.js';
import { cancelRun, pauseRun, resumeRun } from '../../src/import/runState.js';
import { openQueues, type Queues } from '../../src/queue/queues.js';
import { createRowProtocol } from '../../src/rows/protocol.js';
import type { BatchPort, RowRunGate } from '../../src/rows/interfaces.js';
import { openRowsWorld, seedImport, type RowsWorld } from '../support/rows.js';

let world: RowsWorld | undefined;
let queues: Queues | undefined;
afterEach(async () => {
  await queues?.close();
  queues = undefined;
  await world?.close();
  world = undefined;
});

const port = (): BatchPort => ({ handOn: async () => undefined, sealSecrets: async () => undefined });

/** The protocol with the real gate; `stale`: the gate always says go, as a worker whose read predates the cancel would. */
async function protocolWithGate(w: RowsWorld, stale = false) {
  queues = openQueues(w.redis, w.prefix);
  const real = createRunGate({ redis: w.redis, store: w.store, queues, logger: pino({ level: 'silent' }) });
  const runGate: RowRunGate = stale ? { ...real, gate: async () => 'go' } : real;
  return createRowProtocol({ store: w.store, api: w.api, budget: w.budget, keyring: undefined, logger: w.logger, concurrency: 4, runGate, onComplete: async () => undefined });
}

const person = (n: number): string[] => [`Gate${n}`, 'Rowlife', `gate${n}@example.com`];

describe('the row protocol and its run gate', () => {
  it('starts no row of a paused import (held, nothing sent), and runs them once resumed', async () => {
    world = await openRowsWorld({ faults: {} });
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAddress'], rows: [person(1), person(2)], job: 'customer.create' });
    const protocol = await protocolWithGate(w);
    await pauseRun(w.redis, w.store.keys, importId);
    expect(await protocol.runBatch({ importId, rows: [1, 2] }, port())).toEqual({ settled: 0, handed: 0, skipped: 0, deferred: 0, held: 2 });
    expect(w.requests).toEqual([]);
    expect((await w.store.getRow(importId, 1))?.status).toBe('pending');
    await resumeRun(w.redis, w.store.keys, importId);
    // (The gate's read of the pause may be kept a moment, and may end between the batch's two rows: the batch goes
    // again until none is held, and a row settled by an earlier run is skipped by the later ones.)
    let result = await protocol.runBatch({ importId, rows: [1, 2] }, port());
    let settled = result.settled;
    while (result.held > 0) {
      result = await protocol.runBatch({ importId, rows: [1, 2] }, port());
      settled += result.settled;
    }
    expect(settled).toBe(2);
    expect(w.requests.filter((r) => r.endpoint === 'createCustomer')).toHaveLength(2);
    expect((await w.store.getRows(importId, [1, 2])).map((e) => e?.status)).toEqual(['created', 'created']);
  });

  it('a run that still believes the import runs cannot send a create once it is cancelling: the ledger refuses the mark, and the row is cancelled', async () => {
    world = await openRowsWorld({ faults: {} });
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAddress'], rows: [person(1)], job: 'customer.create', options: { allowDuplicates: true } });
    const protocol = await protocolWithGate(w, true);
    await cancelRun(w.redis, w.store.keys, importId);
    expect(await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 3 }, port())).toEqual({ kind: 'settled', status: 'cancelled' });
    expect(w.requests.filter((r) => r.endpoint === 'createCustomer')).toEqual([]);
    expect((await w.store.getRow(importId, 1))?.status).toBe('cancelled');
  });

  it('an update claimed before a cancel is left to its run, which sends it once and settles it updated', async () => {
    world = await openRowsWorld({ faults: {} });
    const w = world;
    const customer = w.sandbox.store.customers()[0];
    if (!customer) throw new Error('the sandbox holds no seeded customer');
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: ['CustomerID', 'City'], rows: [[customer.CustomerID, 'Claimedtown']], job: 'customer.update', options: { allowDuplicates: true } });
    const protocol = await protocolWithGate(w);
    // The cancel comes while the row's first request is about to leave: the row is claimed by then.
    let cancelled: number[] = [];
    w.beforeRequest(async () => {
      w.beforeRequest(undefined);
      await cancelRun(w.redis, w.store.keys, importId);
      cancelled = (await w.store.settleCancelled(importId, await w.store.unclaimedPendingRows(importId), 'unclaimed')).applied.flatMap((a, i) => (a ? [i] : []));
    });
    expect(await protocol.runRow({ name: 'customer.update', importId, row: 1, attemptsMade: 0, attempts: 3 }, port())).toEqual({ kind: 'settled', status: 'updated' });
    expect(cancelled).toEqual([]);
    expect(w.requests.filter((r) => r.endpoint === 'updateCustomer')).toHaveLength(1);
    expect(w.sandbox.store.customers().find((c) => c.CustomerID === customer.CustomerID)?.City).toBe('Claimedtown');
    expect((await w.store.getRow(importId, 1))?.status).toBe('updated');
  });
});
