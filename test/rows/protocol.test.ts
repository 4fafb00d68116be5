/**
 * The row protocol (src/rows/protocol.ts) driven without a queue: the test
 * is the job runner (its ports record what the protocol asks of a job), the
 * service is the sandbox over HTTP, the ledger is real Redis.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { openSecrets, sealSecrets, type CardKeyring } from '../../src/cards/crypto.js';
import { createRowProtocol, type RowProtocol } from '../../src/rows/protocol.js';
import type { BatchPort, HandOn } from '../../src/rows/interfaces.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { BLANK_CUSTOMER_INPUT } from '../../src/csv/rows.js';
import { identityOf, type CustomerGuard } from '../../src/customers/guard.js';
import { GATHER_MS } from '../../src/rows/coalesce.js';
import { openRowsWorld, seedImport, type RowsWorld } from '../support/rows.js';

let world: RowsWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

const CUSTOMER_HEADERS = ['FirstName', 'LastName', 'EmailAddress'];
const person = (n: number): string[] => [`Proto${n}`, 'Rowlife', `proto${n}@example.com`];

/** A job runner of the test's own: what the protocol handed on and sealed, row by row. */
function runner(): BatchPort & { handed: HandOn[]; sealed: Map<number, string | undefined> } {
  const handed: HandOn[] = [];
  const sealed = new Map<number, string | undefined>();
  return {
    handed,
    sealed,
    async handOn(handOn) {
      handed.push(handOn);
    },
    async sealSecrets(row, token) {
      sealed.set(row, token);
    },
  };
}

function protocolOn(w: RowsWorld, options: { keyring?: CardKeyring; concurrency?: number; guard?: CustomerGuard } = {}): { protocol: RowProtocol; completed: Array<{ importId: string; round: number }> } {
  const completed: Array<{ importId: string; round: number }> = [];
  const protocol = createRowProtocol({
    store: w.store,
    api: w.api,
    budget: w.budget,
    keyring: options.keyring,
    guard: options.guard,
    logger: w.logger,
    concurrency: options.concurrency ?? 4,
    backoff: { baseMs: 10, capMs: 50 },
    onComplete: async (importId, round) => {
      completed.push({ importId, round });
    },
  });
  return { protocol, completed };
}

const createsOf = (w: RowsWorld): number => w.requests.filter((r) => r.endpoint === 'createCustomer').length;
const withEmail = (w: RowsWorld, email: string) => w.sandbox.store.customers().filter((c) => c.EmailAddress === email);

describe('the row protocol, without a queue', () => {
  it('settles a create once: a second run of its job, or its batch, sends nothing', async () => {
    world = await openRowsWorld({ faults: {} });
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1), person(2), person(3)], job: 'customer.create' });
    const { protocol, completed } = protocolOn(w);
    const port = runner();

    const first = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 3 }, port);
    expect(first).toEqual({ kind: 'settled', status: 'created' });
    const [created] = withEmail(w, 'proto1@example.com');
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'created', customerId: created?.CustomerID, attempts: 1 });

    const again = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 3 }, port);
    expect(again).toEqual({ kind: 'already', status: 'created' });
    expect(createsOf(w)).toBe(1);

    // The batch of all three: row 1 is skipped, rows 2 and 3 created, and the import completes once.
    const batch = await protocol.runBatch({ importId, rows: [1, 2, 3] }, port);
    expect(batch).toEqual({ settled: 2, handed: 0, skipped: 1, deferred: 0, held: 0 });
    expect(createsOf(w)).toBe(3);
    for (const n of [1, 2, 3]) expect(withEmail(w, `proto${n}@example.com`)).toHaveLength(1);
    expect(completed).toEqual([{ importId, round: 0 }]);
    expect(await w.store.counts(importId)).toMatchObject({ settled: 3, byStatus: expect.objectContaining({ created: 3 }) });
    expect(port.handed).toEqual([]);
  });

  it('a 5xx after the create was applied: the row stays sent, and its next attempt reads back instead of creating again', async () => {
    world = await openRowsWorld({ faults: { errorAfterApplyRate: 1 } });
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1)], job: 'customer.create' });
    const { protocol } = protocolOn(w);
    const port = runner();

    const first = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 3 }, port);
    expect(first).toMatchObject({ kind: 'retry', error: expect.objectContaining({ code: 'API_SERVER_ERROR' }) });
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'sent', attempts: 1 });
    const [applied] = withEmail(w, 'proto1@example.com');
    expect(applied).toBeDefined();

    w.sandbox.setFaults({ errorAfterApplyRate: 0 });
    const before = w.requests.length;
    const second = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 1, attempts: 3 }, port);
    expect(second).toEqual({ kind: 'settled', status: 'reconciled' });
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'reconciled', customerId: applied?.CustomerID, attempts: 2 });
    expect(w.requests.slice(before).map((r) => r.endpoint)).not.toContain('createCustomer');
    expect(withEmail(w, 'proto1@example.com')).toHaveLength(1);
  });

  it('a 5xx after apply on the last attempt: read back in the same run, the row is reconciled and its job ends well', async () => {
    world = await openRowsWorld({ faults: { errorAfterApplyRate: 1 } });
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1)], job: 'customer.create', options: { attempts: 1 } });
    const { protocol } = protocolOn(w);
    const result = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 1 }, runner());
    expect(result).toEqual({ kind: 'settled', status: 'reconciled' });
    expect(withEmail(w, 'proto1@example.com')).toHaveLength(1);
    expect(createsOf(w)).toBe(1);
  });

  it('a 429 blocks the budget and costs no attempt: a row with one attempt goes again and is created', async () => {
    world = await openRowsWorld();
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1), person(2)], job: 'customer.create', options: { attempts: 1 } });
    const { protocol } = protocolOn(w);
    const port = runner();

    w.refuseNext('createCustomer', 429, 'Too many requests');
    const limited = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 1 }, port);
    expect(limited).toEqual({ kind: 'rate-limited' });
    // The fleet's budget is blocked; the row is not settled, and a 429 proves nothing was applied.
    expect(await w.redis.get(w.store.keys.budgetBlockedUntil)).not.toBeNull();
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'pending' });

    // The same job's attempt, not spent, runs it again.
    const again = await protocol.runRow({ name: 'customer.create', importId, row: 1, attemptsMade: 0, attempts: 1 }, port);
    expect(again).toEqual({ kind: 'settled', status: 'created' });

    // In a batch, the row waits for the budget and goes again in the same run.
    w.refuseNext('createCustomer', 429, 'Too many requests');
    expect(await protocol.runBatch({ importId, rows: [2] }, port)).toEqual({ settled: 1, handed: 0, skipped: 0, deferred: 0, held: 0 });
    expect(withEmail(w, 'proto1@example.com')).toHaveLength(1);
    expect(withEmail(w, 'proto2@example.com')).toHaveLength(1);
    expect((await w.store.counts(importId)).rateLimited).toBe(2);
    expect(port.handed).toEqual([]);
  });

  it('a row marked sent is read back before anything is sent again', async () => {
    world = await openRowsWorld();
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1), person(2)], job: 'customer.create' });
    // Row 1 was sent by a run that died before its answer: the customer exists. Row 2's never arrived.
    const existing = w.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: 'Proto1', LastName: 'Rowlife', EmailAddress: 'proto1@example.com' });
    for (const row of [1, 2]) await w.store.updateUnsettled(importId, row, { ...(await w.store.getRow(importId, row))!, status: 'sent', attempts: 1 });
    const { protocol } = protocolOn(w);

    expect(await protocol.runBatch({ importId, rows: [1, 2] }, runner())).toEqual({ settled: 2, handed: 0, skipped: 0, deferred: 0, held: 0 });
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'reconciled', customerId: existing.CustomerID, attempts: 2 });
    expect(await w.store.getRow(importId, 2)).toMatchObject({ status: 'created', attempts: 2 });
    // One create (row 2's), and only after a search had shown its customer was not there.
    expect(createsOf(w)).toBe(1);
    const firstCreate = w.requests.findIndex((r) => r.endpoint === 'createCustomer');
    expect(w.requests.slice(0, firstCreate).some((r) => r.endpoint === 'searchCustomers')).toBe(true);
    expect(withEmail(w, 'proto1@example.com')).toHaveLength(1);
    expect(withEmail(w, 'proto2@example.com')).toHaveLength(1);
  });

  it('a row another run settles meanwhile is taken: this run stops before sending', async () => {
    world = await openRowsWorld();
    const w = world;
    const { importId } = await seedImport(w.store, {
      kind: 'customers',
      headers: CUSTOMER_HEADERS,
      rows: [person(1), person(2)],
      job: 'customer.upsert',
      options: { match: 'EmailAddress', allowDuplicates: true },
    });
    const { protocol } = protocolOn(w);
    // While each upsert searches for its match, another run settles its row.
    let row = 1;
    w.beforeRequest(async (endpoint) => {
      if (endpoint !== 'searchCustomers') return;
      const entry = await w.store.getRow(importId, row);
      if (entry?.status === 'pending') await w.store.settle(importId, row, { ...entry, status: 'created', customerId: '999999' });
    });

    expect(await protocol.runRow({ name: 'customer.upsert', importId, row: 1, attemptsMade: 0, attempts: 3 }, runner())).toEqual({ kind: 'taken' });
    row = 2;
    expect(await protocol.runBatch({ importId, rows: [2] }, runner())).toEqual({ settled: 0, handed: 0, skipped: 1, deferred: 0, held: 0 });
    expect(createsOf(w)).toBe(0);
    for (const r of [1, 2]) expect(await w.store.getRow(importId, r)).toMatchObject({ status: 'created', customerId: '999999' });
  });

  it('once the process is closing, a batch starts no more rows: they stay as they were, their cells kept, for the batch\'s next run', async () => {
    world = await openRowsWorld();
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1), person(2)], job: 'customer.create' });
    const keyring: CardKeyring = { current: { id: 'k1', key: randomBytes(32) } };
    const { protocol } = protocolOn(w, { keyring });
    const port = runner();
    protocol.stopStarting();
    const secrets = { '1': sealSecrets(keyring, {}) };
    expect(await protocol.runBatch({ importId, rows: [1, 2], secrets }, port)).toEqual({ settled: 0, handed: 0, skipped: 0, deferred: 2, held: 0 });
    expect(w.requests).toEqual([]);
    expect(port.sealed.size).toBe(0);
    expect(await w.store.getRows(importId, [1, 2])).toEqual([
      { cells: person(1), job: 'customer.create', status: 'pending', attempts: 0 },
      { cells: person(2), job: 'customer.create', status: 'pending', attempts: 0 },
    ]);
  });

  it('a batch hands a transient failure to a job of its own, which retries it', async () => {
    world = await openRowsWorld();
    const w = world;
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows: [person(1)], job: 'customer.create' });
    const { protocol } = protocolOn(w);
    const port = runner();
    // A 408: transient, and the service says it did not handle the request.
    w.refuseNext('createCustomer', 408, 'Request timeout');
    expect(await protocol.runBatch({ importId, rows: [1] }, port)).toEqual({ settled: 0, handed: 1, skipped: 0, deferred: 0, held: 0 });
    expect(port.handed).toEqual([{ name: 'customer.create', importId, row: 1, after: 1, attempts: 2, delayMs: expect.any(Number) }]);
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'pending', handed: true, attempts: 1 });

    // A batch run again leaves the row to its job (and makes sure the job is there).
    expect(await protocol.runBatch({ importId, rows: [1] }, port)).toEqual({ settled: 0, handed: 1, skipped: 0, deferred: 0, held: 0 });
    expect(createsOf(w)).toBe(1);

    const own = await protocol.runRow({ name: 'customer.create', importId, row: 1, after: 1, attemptsMade: 0, attempts: 2 }, port);
    expect(own).toEqual({ kind: 'settled', status: 'created' });
    expect(await w.store.getRow(importId, 1)).toMatchObject({ status: 'created', attempts: 2 });
    expect(withEmail(w, 'proto1@example.com')).toHaveLength(1);
  });

  it('a card row refused for good: its batch hands it on with a verdict, and its job keeps the card number but not the CVC, nor the card in the note', async () => {
    const keyring: CardKeyring = { current: { id: 'k1', key: randomBytes(32) } };
    world = await openRowsWorld({ faults: { echoCardData: 1, echoCardDataStatus: 400 } });
    const w = world;
    const key = SEED_PAYMENT_METHOD_KEYS[0];
    const headers = ['PaymentMethodKey', 'AccountNumber', 'ExpirationDate', 'CVCode'];
    const { importId, plan } = await seedImport(w.store, { kind: 'cards', headers, rows: [[key, '5555555555554444', '1230', '737']], job: 'paymentMethod.update' });
    const column = (path: string): string => String(plan.index.get(path));
    const token = sealSecrets(keyring, { [column('AccountNumber')]: '5555555555554444', [column('CVCode')]: '737' });
    const { protocol } = protocolOn(w, { keyring });
    const port = runner();

    expect(await protocol.runBatch({ importId, rows: [1], secrets: { '1': token } }, port)).toEqual({ settled: 0, handed: 1, skipped: 0, deferred: 0, held: 0 });
    const [handOn] = port.handed;
    expect(handOn).toMatchObject({ name: 'paymentMethod.update', row: 1, secrets: token, attempts: 3, verdict: { status: 'failed' } });
    // The batch's data lets go of the row's cells once its own job holds them.
    expect(port.sealed.get(1)).toBeUndefined();
    expect(port.sealed.has(1)).toBe(true);

    const own = await protocol.runRow({ name: 'paymentMethod.update', importId, row: 1, secrets: handOn?.secrets, verdict: handOn?.verdict, attemptsMade: 0, attempts: 3 }, port);
    expect(own).toMatchObject({ kind: 'failed', outcome: { status: 'failed' } });
    const kept = port.sealed.get(1);
    expect(kept).toBeDefined();
    expect(openSecrets(keyring, kept ?? '')).toEqual({ [column('AccountNumber')]: '5555555555554444' });
    const entry = await w.store.getRow(importId, 1);
    expect(entry).toMatchObject({ status: 'failed' });
    expect(entry?.note).not.toMatch(/5555555555554444|5555\.5555|\b737\b/);
    expect(JSON.stringify(await w.redis.hgetall(w.store.keys.ledger(importId)))).not.toMatch(/5555555555554444|\b737\b/);
    expect(w.logs()).not.toMatch(/5555555555554444|5555\.5555/);
    // One request: the batch's; the job settled the verdict without sending.
    expect(w.sandbox.stats().byEndpoint.updatePaymentMethod).toBe(1);
    expect(w.sandbox.stats().faults.echoedCardData).toBe(1);
  });

  it("a create's guard claim waits to be gathered with other rows' only while rows wait for a request slot", async () => {
    world = await openRowsWorld({ faults: {} });
    const w = world;
    const rows = [1, 2, 3, 4, 5, 6, 7, 8].map(person);
    const { importId } = await seedImport(w.store, { kind: 'customers', headers: CUSTOMER_HEADERS, rows, job: 'customer.create' });
    // A guard that finds nobody, and records how long each check's claim might wait to be gathered.
    const asked: Array<number | undefined> = [];
    const guard: CustomerGuard = {
      async check(subject, _claimant, _api, _importId, gatherMs) {
        asked.push(gatherMs);
        return { claim: { kind: 'mine' }, holders: [], identity: identityOf(subject) };
      },
      readBack: async () => [],
      created: async () => undefined,
      createdAll: async () => undefined,
    };
    // One slot, and each request held 30 ms: the rows admitted after the first ones find others waiting for it.
    w.beforeRequest(() => new Promise((resolve) => setTimeout(resolve, 30)));
    const { protocol } = protocolOn(w, { concurrency: 1, guard });

    expect(await protocol.runBatch({ importId, rows: rows.map((_, i) => i + 1) }, runner())).toEqual({ settled: 8, handed: 0, skipped: 0, deferred: 0, held: 0 });
    expect(createsOf(w)).toBe(8);
    expect(asked).toHaveLength(8);
    // The first rows start with the slot free (their claims go in the turn's call); later ones while rows wait.
    expect(asked[0]).toBe(0);
    expect(asked.filter((ms) => ms === GATHER_MS).length).toBeGreaterThan(0);
    expect(asked.every((ms) => ms === 0 || ms === GATHER_MS)).toBe(true);
  });
});
